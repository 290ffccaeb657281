//! Installs a wasm runtime (default `python-wasm`) under `$STOCKADE_HOME` and
//! precompiles it: what `stockade runtime install` does, for CI without the CLI.
//!
//! `cargo run -p stockade-wasm --example install-runtime [NAME]`

use std::io::Write;

fn main() {
    let name = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "python-wasm".into());
    let last = std::cell::Cell::new(0u64);
    let progress = |done: u64, total: u64| {
        // One line per 10%, not one per chunk.
        let step = (total / 10).max(1 << 20);
        if done == total || done >= last.get() + step {
            last.set(done);
            eprint!("\rdownloading: {} / {} KiB", done >> 10, total >> 10);
            let _ = std::io::stderr().flush();
        }
    };
    let started = std::time::Instant::now();
    // Compiled here, by this build's engine (the install compiles it with a runner
    // only when one is built).
    let installed = stockade_wasm::install_runtime(&name, &progress).and_then(|rt| {
        stockade_wasm::WasmProvider::new()?.precompile(&rt.module)?;
        Ok(rt)
    });
    match installed {
        Ok(rt) => {
            eprintln!();
            println!(
                "{} {} installed at {} (sha256 {}), compiled in the cache; {:.1} s",
                rt.name,
                rt.version,
                rt.module.display(),
                rt.sha256,
                started.elapsed().as_secs_f64()
            );
        }
        Err(e) => {
            eprintln!();
            eprintln!("error: {e}");
            std::process::exit(e.exit_code());
        }
    }
    match stockade_wasm::list_runtimes() {
        Ok(list) => {
            for a in list.artifacts {
                println!(
                    "artifact {} ({} MiB){}{}",
                    a.path.display(),
                    a.size >> 20,
                    a.runtime.map(|r| format!(", {r}")).unwrap_or_default(),
                    if a.current { "" } else { ", other engine" }
                );
            }
        }
        Err(e) => eprintln!("error: cannot list runtimes: {e}"),
    }
}
