//! Benchmark of the wasm provider; prints a markdown table.
//!
//! `cargo run --release -p stockade-bench --bin wasm`
//!
//! Needs the wasm32-wasip1 target (for the hello-world guest) and, for the Python
//! rows, the python-wasm runtime (`cargo run -p stockade-wasm --example install-runtime`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use stockade_core::{CreateOptions, ExecRequest, Provider, SandboxSpec};
use stockade_wasm::{LoadPath, WasmConfig, WasmProvider};

struct Row {
    what: String,
    n: usize,
    mean_ms: f64,
    p50_ms: f64,
    p99_ms: f64,
    goal: String,
}

fn row(what: &str, mut samples: Vec<Duration>, goal: &str) -> Row {
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let n = samples.len();
    Row {
        what: what.into(),
        n,
        mean_ms: samples.iter().map(|d| ms(*d)).sum::<f64>() / n as f64,
        p50_ms: ms(samples[n / 2]),
        p99_ms: ms(samples[(n * 99 / 100).min(n - 1)]),
        goal: goal.into(),
    }
}

fn build_hello() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../crates/stockade-wasm/tests/guest/Cargo.toml");
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"))
        .join("wasm-guest");
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args(["build", "--quiet", "--release", "--target", "wasm32-wasip1"])
        .arg("--manifest-path")
        .arg(&manifest)
        .arg("--target-dir")
        .arg(&target)
        .status()
        .expect("cargo runs");
    assert!(
        status.success(),
        "building the guest failed (rustup target add wasm32-wasip1)"
    );
    target.join("wasm32-wasip1/release/hello.wasm")
}

fn spec(image: &str) -> SandboxSpec {
    SandboxSpec {
        image: Some(image.into()),
        ..SandboxSpec::default()
    }
}

async fn create(p: &dyn Provider, image: &str) -> String {
    p.create(
        stockade_core::CheckedSpec::new(spec(image).validate().unwrap(), p).unwrap(),
        CreateOptions::default(),
    )
    .await
    .expect("create")
    .id
}

async fn time_exec(p: &dyn Provider, id: &str, argv: &[&str], want: &[u8]) -> Duration {
    let started = Instant::now();
    let out = p
        .exec(
            id,
            stockade_core::CheckedRequest::new(ExecRequest::new(argv.iter().copied())).unwrap(),
            stockade_core::ExecIo::none(),
        )
        .await
        .expect("exec");
    let took = started.elapsed();
    assert_eq!(
        out.stdout,
        want,
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    took
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let scratch = tempfile::tempdir().unwrap();
    let config = WasmConfig {
        scratch_dir: scratch.path().to_path_buf(),
        ..WasmConfig::default()
    };
    let mut rows = Vec::new();
    let mut notes = Vec::new();

    // Rust hello world: exec in a live sandbox.
    let hello = build_hello();
    let hello = hello.to_string_lossy().into_owned();
    let p = WasmProvider::with_config(config.clone()).unwrap();
    let id = create(&p, &hello).await;
    for _ in 0..200 {
        time_exec(&p, &id, &["hello"], b"hello from wasm\n").await;
    }
    let mut s = Vec::new();
    for _ in 0..5000 {
        s.push(time_exec(&p, &id, &["hello"], b"hello from wasm\n").await);
    }
    rows.push(row(
        "exec of a Rust hello world in a live sandbox",
        s,
        "< 0.5 ms",
    ));

    // Creates per second (module already loaded), and create + exec + destroy.
    let mut s = Vec::new();
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(2) {
        let t = Instant::now();
        let id = create(&p, &hello).await;
        s.push(t.elapsed());
        p.destroy(&id).await.unwrap();
    }
    let creates = row("create of a sandbox (module loaded)", s, "");
    let mut s = Vec::new();
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(2) {
        let t = Instant::now();
        let id = create(&p, &hello).await;
        time_exec(&p, &id, &["hello"], b"hello from wasm\n").await;
        p.destroy(&id).await.unwrap();
        s.push(t.elapsed());
    }
    let cycle = row("create + exec + destroy (hello)", s, "");
    notes.push(format!(
        "creates per second, one task: {:.0}; create + exec + destroy per second: {:.0}",
        1e3 / creates.mean_ms,
        1e3 / cycle.mean_ms
    ));
    rows.push(creates);
    rows.push(cycle);
    p.destroy(&id).await.unwrap();

    // Python.
    let py_ok = stockade_wasm::list_runtimes()
        .map(|l| {
            l.runtimes
                .iter()
                .any(|r| r.name == "python-wasm" && r.installed)
        })
        .unwrap_or(false);
    if py_ok {
        // From the cached artifact, as a fresh process would: new provider, the module
        // mapped from the cache, a sandbox, one exec.
        let mut cold = Vec::new();
        let mut loads = Vec::new();
        for i in 0..21 {
            let t = Instant::now();
            let p = WasmProvider::with_config(config.clone()).unwrap();
            let id = create(&p, "python").await;
            let (how, load_ms) = p.module_load(&id).unwrap();
            time_exec(&p, &id, &["python3", "-c", "print(1+1)"], b"2\n").await;
            let took = t.elapsed();
            p.destroy(&id).await.unwrap();
            if i == 0 {
                if how != LoadPath::Cached {
                    notes.push(format!(
                        "python.wasm was {how:?} on the first run (not yet cached)"
                    ));
                }
                continue;
            }
            assert_eq!(how, LoadPath::Cached);
            cold.push(took);
            loads.push(Duration::from_secs_f64(load_ms / 1e3));
        }
        rows.push(row(
            "python.wasm print(1+1): new provider, cached artifact, create, exec",
            cold,
            "< 40 ms",
        ));
        rows.push(row(
            "  of which: loading the cached artifact",
            loads,
            "~1 ms",
        ));

        let p = WasmProvider::with_config(config.clone()).unwrap();
        let id = create(&p, "python").await;
        let mut warm = Vec::new();
        for _ in 0..3 {
            time_exec(&p, &id, &["python3", "-c", "print(1+1)"], b"2\n").await;
        }
        for _ in 0..30 {
            warm.push(time_exec(&p, &id, &["python3", "-c", "print(1+1)"], b"2\n").await);
        }
        rows.push(row(
            "python.wasm print(1+1): exec in a live sandbox",
            warm,
            "",
        ));
        p.destroy(&id).await.unwrap();

        // Cold compile, for scale (own cache directory, so nothing is reused).
        let cache = tempfile::tempdir().unwrap();
        let fresh = WasmProvider::with_config(WasmConfig {
            cache_dir: cache.path().to_path_buf(),
            ..config.clone()
        })
        .unwrap();
        let module = stockade_wasm::runtime::PYTHON_WASM.module_in(&config.home);
        let t = Instant::now();
        assert_eq!(fresh.precompile(&module).unwrap(), LoadPath::Compiled);
        rows.push(row(
            "python.wasm compile (cold, no cache)",
            vec![t.elapsed()],
            "",
        ));
    } else {
        notes.push("python rows skipped: python-wasm is not installed".into());
    }

    // Through the runner: what `stockade` uses (a runner process per sandbox, the
    // agent protocol over its socket). Needs target/release/stockade-wasm-runner.
    match stockade_wasm_host::runner::find_runner() {
        Ok(_) => {
            let p = stockade_wasm_host::provider(config.clone());
            let id = create(&p, &hello).await;
            for _ in 0..50 {
                time_exec(&p, &id, &["hello"], b"hello from wasm\n").await;
            }
            let mut s = Vec::new();
            for _ in 0..1000 {
                s.push(time_exec(&p, &id, &["hello"], b"hello from wasm\n").await);
            }
            rows.push(row(
                "runner: exec of a Rust hello world in a live sandbox",
                s,
                "< 0.5 ms",
            ));
            p.destroy(&id).await.unwrap();
            let mut s = Vec::new();
            for _ in 0..50 {
                let t = Instant::now();
                let id = create(&p, &hello).await;
                time_exec(&p, &id, &["hello"], b"hello from wasm\n").await;
                p.destroy(&id).await.unwrap();
                s.push(t.elapsed());
            }
            rows.push(row("runner: create + exec + destroy (hello)", s, ""));
            if py_ok {
                let mut s = Vec::new();
                for _ in 0..20 {
                    let t = Instant::now();
                    let id = create(&p, "python").await;
                    time_exec(&p, &id, &["python3", "-c", "print(1+1)"], b"2\n").await;
                    p.destroy(&id).await.unwrap();
                    s.push(t.elapsed());
                }
                rows.push(row(
                    "runner: python.wasm print(1+1): create, exec, destroy",
                    s,
                    "< 40 ms",
                ));
                let id = create(&p, "python").await;
                let mut s = Vec::new();
                for _ in 0..30 {
                    s.push(time_exec(&p, &id, &["python3", "-c", "print(1+1)"], b"2\n").await);
                }
                rows.push(row(
                    "runner: python.wasm print(1+1): exec in a live sandbox",
                    s,
                    "",
                ));
                p.destroy(&id).await.unwrap();
            }
        }
        Err(e) => notes.push(format!("runner rows skipped: {e}")),
    }

    // Native python, for comparison.
    if Path::new("/usr/bin/python3").exists() {
        let mut s = Vec::new();
        for i in 0..21 {
            let t = Instant::now();
            let out = Command::new("/usr/bin/python3")
                .args(["-c", "print(1+1)"])
                .output()
                .unwrap();
            assert_eq!(out.stdout, b"2\n");
            if i > 0 {
                s.push(t.elapsed());
            }
        }
        rows.push(row(
            "native /usr/bin/python3 -c 'print(1+1)' (no sandbox)",
            s,
            "",
        ));
    }

    println!("| what | n | mean ms | p50 ms | p99 ms | goal |");
    println!("|---|---:|---:|---:|---:|---|");
    for r in &rows {
        println!(
            "| {} | {} | {:.3} | {:.3} | {:.3} | {} |",
            r.what, r.n, r.mean_ms, r.p50_ms, r.p99_ms, r.goal
        );
    }
    println!();
    for n in notes {
        println!("- {n}");
    }
}
