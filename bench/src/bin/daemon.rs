//! Benchmark of `stockaded` with native sandboxes; prints a table (numbers in
//! BENCHMARKS.md). Starts the `stockaded` binary built beside this binary (or
//! `$STOCKADED`) as its own process on a unix socket of its own and talks to it over
//! gRPC like any client. Needs root.
//!
//!   cargo build --release --workspace --bins
//!   sudo target/release/daemon [--rounds 5]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use stockade::{ExecRequest, NativeLauncher, NativeProvider, Provider, SandboxSpec};
use stockade_client::{Host, RemoteProvider};

#[derive(Parser)]
struct Args {
    /// Rounds of pool acquisitions (each takes the whole warm pool).
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Size of the warm pool.
    #[arg(long, default_value_t = 10)]
    pool: u32,
    /// Execs per exec measurement.
    #[arg(long, default_value_t = 200)]
    execs: usize,
}

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i]
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1000.0)
}

async fn idle(c: &RemoteProvider) -> u32 {
    c.pool_list().await.unwrap().iter().map(|p| p.idle).sum()
}

async fn wait_idle(c: &RemoteProvider, n: u32) {
    let until = Instant::now() + Duration::from_secs(120);
    while idle(c).await < n {
        assert!(Instant::now() < until, "the pool did not fill");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Proportional set size of a process, bytes.
fn pss(pid: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Pss:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .unwrap_or(0)
        * 1024
}

fn procs_below(dir: &Path, out: &mut Vec<String>) {
    if let Ok(s) = std::fs::read_to_string(dir.join("cgroup.procs")) {
        out.extend(s.lines().map(str::to_string));
    }
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.path().is_dir() {
            procs_below(&e.path(), out);
        }
    }
}

/// Memory of one sandbox: PSS of its monitor and of every process in its cgroup.
fn sandbox_memory(state_root: &Path, id: &str) -> u64 {
    let st: serde_json::Value = serde_json::from_slice(
        &std::fs::read(state_root.join(id).join("state.json")).unwrap_or_default(),
    )
    .unwrap_or_default();
    let mut pids = vec![st["monitor_pid"].to_string()];
    for ctl in ["pids", "memory", "unified", ""] {
        let d = PathBuf::from("/sys/fs/cgroup")
            .join(ctl)
            .join("stockade")
            .join(id);
        if d.exists() {
            procs_below(&d, &mut pids);
            break;
        }
    }
    pids.sort();
    pids.dedup();
    pids.iter().map(|p| pss(p)).sum()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = Args::parse();
    let dir = tempfile::Builder::new()
        .prefix("stockade-it-bench-")
        .tempdir_in("/tmp")
        .unwrap();
    let state_root = dir.path().join("state");
    // The daemon's state on tmpfs, where it belongs (see `--state-dir`).
    let shm = tempfile::Builder::new()
        .prefix("stockade-bench-")
        .tempdir_in("/dev/shm")
        .unwrap();
    let sock = dir.path().join("d.sock");
    let daemon_bin = std::env::var_os("STOCKADED")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let exe = std::env::current_exe().unwrap();
            exe.parent().unwrap().join("stockaded")
        });
    let mut daemon = std::process::Command::new(&daemon_bin)
        .arg(format!("--listen=unix:{}", sock.display()))
        .arg(format!(
            "--state-dir={}",
            shm.path().join("daemon").display()
        ))
        .arg(format!("--native-state-dir={}", state_root.display()))
        .args([
            "--default-provider=native",
            "--max-sandboxes-per-tenant=256",
            "--max-pool-per-tenant=256",
            "--max-sandboxes=512",
            "--pool-idle-ttl-secs=600",
        ])
        .env("STOCKADE_LOG", "warn")
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", daemon_bin.display()));
    let until = Instant::now() + Duration::from_secs(30);
    while std::os::unix::net::UnixStream::connect(&sock).is_err() {
        assert!(Instant::now() < until, "the daemon did not start");
        assert!(daemon.try_wait().unwrap().is_none(), "the daemon exited");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let c = RemoteProvider::connect(&Host::Unix(sock.clone()), None)
        .await
        .unwrap();
    let template = SandboxSpec {
        timeout_secs: 600,
        ..SandboxSpec::default()
    };
    let mut rows: Vec<(String, String)> = Vec::new();

    // 1. Pool acquisition.
    c.pool_warm(&template, args.pool, args.pool * 2)
        .await
        .unwrap();
    let mut acq = Vec::new();
    for _ in 0..args.rounds {
        wait_idle(&c, args.pool).await;
        let mut got = Vec::new();
        for _ in 0..args.pool {
            let t0 = Instant::now();
            let (info, pooled) = c.create_spec(&template, None, false).await.unwrap();
            acq.push(t0.elapsed());
            assert!(pooled, "the pool ran dry");
            got.push(info.id);
        }
        for id in got {
            c.destroy(&id).await.unwrap();
        }
    }
    rows.push((
        format!("pool acquisition p50 ({} takes)", acq.len()),
        ms(pct(&mut acq, 0.5)),
    ));
    rows.push(("pool acquisition p99".into(), ms(pct(&mut acq, 0.99))));

    // 1b. One acquisition at a time, each from a full pool with no refill running:
    // what an agent that takes a sandbox now and then sees.
    let mut one = Vec::new();
    for _ in 0..args.rounds * args.pool as usize {
        wait_idle(&c, args.pool).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        let t0 = Instant::now();
        let (info, pooled) = c.create_spec(&template, None, false).await.unwrap();
        one.push(t0.elapsed());
        assert!(pooled, "the pool ran dry");
        c.destroy(&info.id).await.unwrap();
    }
    rows.push((
        format!("pool acquisition one at a time p50 ({} takes)", one.len()),
        ms(pct(&mut one, 0.5)),
    ));
    rows.push((
        "pool acquisition one at a time p99".into(),
        ms(pct(&mut one, 0.99)),
    ));

    // 2. Memory per idle sandbox (the pool is full again).
    wait_idle(&c, args.pool).await;
    let ids: Vec<String> = NativeProvider::from(NativeLauncher::with_state_root(&state_root))
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|i| i.id)
        .collect();
    let total: u64 = ids.iter().map(|id| sandbox_memory(&state_root, id)).sum();
    rows.push((
        format!("memory per idle sandbox (PSS, mean of {})", ids.len()),
        format!(
            "{:.2} MiB",
            total as f64 / ids.len().max(1) as f64 / 1048576.0
        ),
    ));
    c.pool_drain(None).await.unwrap();

    // 3. Creates per second (cold, through the daemon).
    for conc in [1usize, 10, 50] {
        let total = (conc * 2).max(20);
        let t0 = Instant::now();
        let mut tasks = Vec::new();
        for w in 0..conc {
            let c = c.clone();
            let template = template.clone();
            let n = total / conc + usize::from(w < total % conc);
            tasks.push(tokio::spawn(async move {
                let mut ids = Vec::new();
                for _ in 0..n {
                    ids.push(c.create_spec(&template, None, true).await.unwrap().0.id);
                }
                ids
            }));
        }
        let mut ids = Vec::new();
        for t in tasks {
            ids.extend(t.await.unwrap());
        }
        let el = t0.elapsed();
        rows.push((
            format!("creates/s at concurrency {conc} ({total} creates)"),
            format!("{:.1}/s", total as f64 / el.as_secs_f64()),
        ));
        for id in ids {
            c.destroy(&id).await.unwrap();
        }
    }

    // 4. Exec round trip: through the daemon vs in-process on the same sandbox.
    let (info, _) = c.create_spec(&template, None, true).await.unwrap();
    let native: Arc<dyn Provider> = Arc::new(NativeProvider::from(
        NativeLauncher::with_state_root(&state_root),
    ));
    let req = ExecRequest::new(["/bin/true"]);
    for (name, p) in [
        (
            "exec /bin/true through the daemon",
            Arc::new(c.clone()) as Arc<dyn Provider>,
        ),
        ("exec /bin/true in-process", native),
    ] {
        let mut v = Vec::new();
        for _ in 0..args.execs {
            let t0 = Instant::now();
            let o = p
                .exec(
                    &info.id,
                    stockade::CheckedRequest::new(req.clone()).unwrap(),
                    stockade::ExecIo::none(),
                )
                .await
                .unwrap();
            v.push(t0.elapsed());
            assert_eq!(o.exit_code, 0);
        }
        rows.push((format!("{name} p50"), ms(pct(&mut v, 0.5))));
        rows.push((format!("{name} p99"), ms(pct(&mut v, 0.99))));
    }
    c.destroy(&info.id).await.unwrap();

    // SIGTERM: the daemon drains its pools and destroys what it owns.
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &daemon.id().to_string()])
        .status();
    let _ = daemon.wait();
    let w = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(10);
    println!("| {:<w$} | {:>12} |", "measure", "result");
    println!("|{}|{}|", "-".repeat(w + 2), "-".repeat(14));
    for (k, v) in rows {
        println!("| {k:<w$} | {v:>12} |");
    }
}
