//! Benchmark: prints a markdown table of latencies.
//!
//! `cargo run --release -p stockade --example bench [-- ITERATIONS]` as root, with the
//! release `stockade` binary built (`cargo build --release --bins`).
//!
//! Rows: bare `/usr/bin/python3 -c pass`; the same under `bwrap` with equivalent
//! isolation (all namespaces, read-only /usr, fresh /proc, /dev and /tmp, all
//! capabilities dropped); `stockade run` of it (create + exec + destroy); and, in an
//! existing sandbox, the exec round trip of `true` and of python.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use stockade::{CreateOptions, ExecRequest, NativeProvider, Sandbox, SandboxSpec};

fn stats(mut v: Vec<Duration>) -> (f64, f64, f64) {
    v.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let p = |q: f64| ms(v[((v.len() as f64 - 1.0) * q).round() as usize]);
    (
        p(0.5),
        p(0.9),
        ms(v.iter().sum::<Duration>()) / v.len() as f64,
    )
}

fn time_cmd(n: usize, argv: &[&str]) -> Vec<Duration> {
    // One warm-up run, not counted.
    let mut out = Vec::with_capacity(n);
    for i in 0..=n {
        let t = Instant::now();
        let st = Command::new(argv[0])
            .args(&argv[1..])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect(argv[0]);
        assert!(st.success(), "{argv:?} failed: {st}");
        if i > 0 {
            out.push(t.elapsed());
        }
    }
    out
}

fn stockade_bin() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap();
    let p = dir.join("stockade");
    assert!(
        p.is_file(),
        "build the CLI first: cargo build --release --bins ({} missing)",
        p.display()
    );
    p
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(50);
    let py = ["/usr/bin/python3", "-c", "pass"];
    let mut rows: Vec<(String, Vec<Duration>)> = Vec::new();
    rows.push(("bare `python3 -c pass`".into(), time_cmd(n, &py)));
    if which("bwrap") {
        let mut argv = vec![
            "bwrap",
            "--unshare-all",
            "--die-with-parent",
            "--new-session",
            "--cap-drop",
            "ALL",
            "--ro-bind",
            "/usr",
            "/usr",
            "--symlink",
            "usr/bin",
            "/bin",
            "--symlink",
            "usr/lib",
            "/lib",
            "--symlink",
            "usr/lib64",
            "/lib64",
            "--symlink",
            "usr/sbin",
            "/sbin",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--tmpfs",
            "/tmp",
            "--hostname",
            "sandbox",
            "--uid",
            "1000",
            "--gid",
            "1000",
            "--",
        ];
        argv.extend(py);
        rows.push((
            "`bwrap` (all namespaces, ro /usr, caps dropped)".into(),
            time_cmd(n, &argv),
        ));
    } else {
        eprintln!("bwrap not installed (apt-get install bubblewrap): row skipped");
    }
    let bin = stockade_bin();
    let bin = bin.to_str().unwrap();
    let mut argv = vec![bin, "run", "--"];
    argv.extend(py);
    rows.push((
        "`stockade run -- python3 -c pass` (create+exec+destroy)".into(),
        time_cmd(n, &argv),
    ));
    rows.push((
        "`stockade run -- true` (create+exec+destroy)".into(),
        time_cmd(n, &[bin, "run", "--", "/bin/true"]),
    ));

    let provider = std::sync::Arc::new(NativeProvider::new());
    let sb = Sandbox::create(
        provider.clone(),
        SandboxSpec::default(),
        CreateOptions::default(),
    )
    .await
    .expect("create");
    let mut exec_true = Vec::new();
    let mut exec_py = Vec::new();
    for i in 0..=(n * 4) {
        let t = Instant::now();
        let o = sb.exec(ExecRequest::new(["/bin/true"])).await.unwrap();
        assert_eq!(o.exit_code, 0);
        if i > 0 {
            exec_true.push(t.elapsed());
        }
    }
    for i in 0..=n {
        let t = Instant::now();
        let o = sb.exec(ExecRequest::new(py)).await.unwrap();
        assert_eq!(o.exit_code, 0);
        if i > 0 {
            exec_py.push(t.elapsed());
        }
    }
    sb.destroy().await.unwrap();
    rows.push((
        "exec round trip of `true` in a live sandbox".into(),
        exec_true,
    ));
    rows.push((
        "exec round trip of `python3 -c pass` in a live sandbox".into(),
        exec_py,
    ));
    // A sandbox's whole life in the library, without and with one exec.
    for (name, exec) in [
        ("create + destroy (library, no exec)", false),
        ("create + exec `python3 -c pass` + destroy (library)", true),
    ] {
        let mut times = Vec::new();
        for i in 0..=n {
            let t = Instant::now();
            let sb = Sandbox::create(
                provider.clone(),
                SandboxSpec::default(),
                CreateOptions::default(),
            )
            .await
            .unwrap();
            if exec {
                let o = sb.exec(ExecRequest::new(py)).await.unwrap();
                assert_eq!(o.exit_code, 0);
            }
            sb.destroy().await.unwrap();
            if i > 0 {
                times.push(t.elapsed());
            }
        }
        rows.push((name.into(), times));
    }

    let bare = stats(rows[0].1.clone()).0;
    println!("| what | p50 ms | p90 ms | mean ms | p50 vs bare python |");
    println!("|---|---:|---:|---:|---:|");
    for (name, v) in rows {
        let (p50, p90, mean) = stats(v);
        println!(
            "| {name} | {p50:.2} | {p90:.2} | {mean:.2} | {:.2}x |",
            p50 / bare
        );
    }
    println!(
        "\n{n} iterations each ({}x for `true`), after one warm-up run.",
        4
    );
}

fn which(name: &str) -> bool {
    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .any(|d| d.join(name).is_file())
}
