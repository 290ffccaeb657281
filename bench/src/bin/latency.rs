//! Benchmark: prints a markdown table of latencies.
//!
//! `cargo run --release -p stockade-bench --bin latency [-- ITERATIONS]` as root, with the
//! release `stockade` binary built (`cargo build --release --bins`).
//!
//! `... --bin latency -- ITERATIONS gvisor`: the gvisor provider instead (see
//! [`gvisor`]): bare python, `runsc do` itself, `stockade run` on native and on
//! gvisor, the exec round trip, create + destroy, idle memory per sandbox.
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
    let p = exe.parent().unwrap().join("stockade");
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
    if std::env::args().nth(2).as_deref() == Some("gvisor") {
        return gvisor(n).await;
    }
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

fn print_rows(rows: Vec<(String, Vec<Duration>)>, anchor: usize, anchor_name: &str) {
    let base = stats(rows[anchor].1.clone()).0;
    println!("| what | p50 ms | p90 ms | mean ms | p50 vs {anchor_name} |");
    println!("|---|---:|---:|---:|---:|");
    for (name, v) in rows {
        let (p50, p90, mean) = stats(v);
        println!(
            "| {name} | {p50:.2} | {p90:.2} | {mean:.2} | {:.2}x |",
            p50 / base
        );
    }
}

/// The gvisor provider against its anchors, in one run: bare python, `runsc do` of the
/// same command (gVisor alone, no Stockade), `stockade run` on native and on gvisor;
/// then, in the library, the exec round trip of `true`, create + destroy, and the
/// host memory an idle sandbox holds (its cgroup's usage).
async fn gvisor(n: usize) {
    use stockade::{GvisorLauncher, GvisorProvider};
    let provider = std::sync::Arc::new(GvisorProvider::from(GvisorLauncher::new()));
    let setup = provider.launcher().setup().await.expect("runsc").clone();
    let platform = format!("--platform={}", setup.platform.as_str());
    let runsc = setup.runsc.path.to_str().unwrap().to_string();
    let scratch = std::env::temp_dir().join("stockade-bench-runsc");
    std::fs::create_dir_all(&scratch).unwrap();
    let root = format!("--root={}", scratch.display());
    let py = ["/usr/bin/python3", "-c", "pass"];
    let bin = stockade_bin();
    let bin = bin.to_str().unwrap();
    let mut rows: Vec<(String, Vec<Duration>)> = Vec::new();
    rows.push(("bare `python3 -c pass`".into(), time_cmd(n, &py)));
    let mut argv = vec![
        runsc.as_str(),
        root.as_str(),
        platform.as_str(),
        "--network=none",
        "do",
    ];
    argv.extend(py);
    rows.push((
        format!("`runsc do` (gVisor alone, {})", setup.platform.as_str()),
        time_cmd(n, &argv),
    ));
    let mut argv = vec![bin, "run", "--provider", "native", "--"];
    argv.extend(py);
    rows.push((
        "`stockade run --provider native -- python3 -c pass`".into(),
        time_cmd(n, &argv),
    ));
    let mut argv = vec![bin, "run", "--provider", "gvisor", "--"];
    argv.extend(py);
    rows.push((
        "`stockade run --provider gvisor -- python3 -c pass`".into(),
        time_cmd(n, &argv),
    ));

    let sb = Sandbox::create(
        provider.clone(),
        SandboxSpec::default(),
        CreateOptions::default(),
    )
    .await
    .expect("create");
    let mut exec_true = Vec::new();
    for i in 0..=(n * 4) {
        let t = Instant::now();
        let o = sb.exec(ExecRequest::new(["/bin/true"])).await.unwrap();
        assert_eq!(o.exit_code, 0);
        if i > 0 {
            exec_true.push(t.elapsed());
        }
    }
    rows.push((
        "gvisor: exec round trip of `true` in a live sandbox".into(),
        exec_true,
    ));
    // The floor inside gVisor: what a process already in the sandbox pays for one
    // `posix_spawn` + wait of /bin/true, and for 1,000 `getppid` calls (each system
    // call a trip to the sentry), timed by Python in the sandbox.
    let floor = sb
        .exec(ExecRequest::new([
            "/usr/bin/python3",
            "-c",
            "import os, time\n\
             for _ in range(41):\n\
             \x20   t = time.perf_counter(); os.waitpid(os.posix_spawn('/bin/true', ['true'], {}), 0)\n\
             \x20   print('spawn', time.perf_counter() - t)\n\
             for _ in range(11):\n\
             \x20   t = time.perf_counter()\n\
             \x20   for _ in range(1000): os.getppid()\n\
             \x20   print('getppid', time.perf_counter() - t)",
        ]))
        .await
        .unwrap();
    let floor_rows = |what: &str| -> Vec<Duration> {
        String::from_utf8_lossy(&floor.stdout)
            .lines()
            .filter_map(|l| l.strip_prefix(what)?.trim().parse::<f64>().ok())
            .skip(1) // warm-up
            .map(Duration::from_secs_f64)
            .collect()
    };
    rows.push((
        "floor: `posix_spawn` + wait of /bin/true from inside the sandbox".into(),
        floor_rows("spawn"),
    ));
    rows.push((
        "floor: 1,000 `getppid` calls from inside the sandbox".into(),
        floor_rows("getppid"),
    ));
    // gVisor's own exec in the same sandbox (a runsc process started per exec).
    let sroot = format!("--root={}/runsc", stockade::gvisor::DEFAULT_STATE_ROOT);
    let argv = [runsc.as_str(), sroot.as_str(), "exec", sb.id(), "/bin/true"];
    rows.push((
        "`runsc exec ID /bin/true` in the same sandbox".into(),
        time_cmd(n * 4, &argv),
    ));
    // Idle memory: the sandbox's host cgroup (sentry, gofer, agent) after a second idle.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let usage = std::fs::read_to_string(format!(
        "/sys/fs/cgroup/memory/stockade/{}/memory.usage_in_bytes",
        sb.id()
    ))
    .or_else(|_| {
        std::fs::read_to_string(format!(
            "/sys/fs/cgroup/stockade/{}/memory.current",
            sb.id()
        ))
    })
    .ok()
    .and_then(|s| s.trim().parse::<u64>().ok());
    sb.destroy().await.unwrap();
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
        sb.destroy().await.unwrap();
        if i > 0 {
            times.push(t.elapsed());
        }
    }
    rows.push(("gvisor: create + destroy (library, no exec)".into(), times));
    // Destroy alone, and pause / resume (runsc pause / resume) of a live sandbox.
    let (mut destroys, mut pauses, mut resumes) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..=n {
        let sb = Sandbox::create(
            provider.clone(),
            SandboxSpec::default(),
            CreateOptions::default(),
        )
        .await
        .unwrap();
        let t = Instant::now();
        sb.pause().await.unwrap();
        let paused = t.elapsed();
        let t = Instant::now();
        sb.resume().await.unwrap();
        let resumed = t.elapsed();
        let t = Instant::now();
        sb.destroy().await.unwrap();
        if i > 0 {
            destroys.push(t.elapsed());
            pauses.push(paused);
            resumes.push(resumed);
        }
    }
    rows.push(("gvisor: destroy alone".into(), destroys));
    rows.push(("gvisor: pause (runsc pause)".into(), pauses));
    rows.push(("gvisor: resume (runsc resume)".into(), resumes));
    print_rows(rows, 1, "runsc do");
    println!(
        "\n{n} iterations each ({}x for `true`), after one warm-up run; runsc: {}, platform {}.",
        4,
        setup.runsc.version,
        setup.platform.as_str()
    );
    match usage {
        Some(b) => println!(
            "Idle gvisor sandbox: {:.1} MiB of host memory (its cgroup's usage: sentry, gofer, agent, page cache).",
            b as f64 / 1048576.0
        ),
        None => println!("Idle gvisor sandbox: its cgroup's memory usage could not be read."),
    }
    let _ = std::fs::remove_dir_all(&scratch);
}
