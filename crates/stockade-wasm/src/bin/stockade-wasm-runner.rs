//! `stockade-wasm-runner`: the wasm engine's process. The wasm provider starts one per
//! sandbox (`serve`); see `stockade_wasm_host::runner`.

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let code = match args.first().map(String::as_str) {
        Some("serve") if args.len() == 1 => stockade_wasm::serve::main(),
        Some(cmd @ ("precompile" | "engine-key")) => {
            match stockade_wasm::serve::tool(cmd, &args[1..]) {
                Ok(out) => {
                    println!("{out}");
                    0
                }
                Err(e) => {
                    eprintln!("stockade-wasm-runner {cmd}: {e}");
                    e.exit_code()
                }
            }
        }
        Some("--version") => {
            println!("stockade-wasm-runner {}", env!("CARGO_PKG_VERSION"));
            0
        }
        _ => {
            eprintln!(
                "usage: stockade-wasm-runner serve | precompile --home DIR MODULE | engine-key \
                 --home DIR\n\nThe wasm provider starts this program, one per sandbox; it is \
                 not meant to be run by hand."
            );
            64
        }
    };
    std::process::exit(code);
}
