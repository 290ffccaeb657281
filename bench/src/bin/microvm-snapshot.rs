//! Start from a named snapshot against a cold boot (medians of 5, alternated so both
//! see the same load): a VM with a Python interpreter holding 20 MB is kept as a
//! named snapshot (in a temporary home), then each round boots one VM cold and starts
//! one from the snapshot, each timed to its first exec. Needs root and what
//! `crates/stockade-microvm/ci-setup.sh` installs.
//!
//! cargo run -p stockade-bench --bin microvm-snapshot

use std::sync::Arc;
use std::time::{Duration, Instant};

use stockade_core::{CreateOptions, ExecRequest, Provider, Sandbox, SandboxSpec};
use stockade_microvm::{MicrovmLauncher, MicrovmProvider};

fn median(mut v: Vec<Duration>) -> f64 {
    v.sort();
    v[v.len() / 2].as_secs_f64()
}

#[tokio::main]
async fn main() {
    let home = std::env::temp_dir().join(format!("stockade-bench-snap-{}", std::process::id()));
    let p: Arc<dyn Provider> = Arc::new(MicrovmProvider::from(
        MicrovmLauncher::new().with_home(&home),
    ));
    let mut spec = SandboxSpec::default();
    spec.limits.memory_bytes = 256 << 20;
    let opts = || CreateOptions {
        owner_pid: Some(std::process::id()),
    };
    let sb = Sandbox::create(p.clone(), spec.clone(), opts())
        .await
        .unwrap();
    let mut r = ExecRequest::new([
        "/bin/sh",
        "-c",
        "python3 -c 'import time; b = bytearray(20 << 20); time.sleep(3600)' >/dev/null 2>&1 &",
    ]);
    r.background = true;
    sb.exec(r).await.unwrap();
    let t = Instant::now();
    let snap = sb.snapshot("bench").await.unwrap();
    let take = t.elapsed();
    sb.destroy().await.unwrap();
    let (mut cold, mut warm) = (vec![], vec![]);
    for _ in 0..5 {
        let t = Instant::now();
        let c = Sandbox::create(p.clone(), spec.clone(), opts())
            .await
            .unwrap();
        c.exec(ExecRequest::new(["true"])).await.unwrap();
        cold.push(t.elapsed());
        c.destroy().await.unwrap();
        let t = Instant::now();
        let w = Sandbox::from_snapshot(p.clone(), "bench", opts())
            .await
            .unwrap();
        w.exec(ExecRequest::new(["true"])).await.unwrap();
        warm.push(t.elapsed());
        w.destroy().await.unwrap();
    }
    p.remove_snapshot("bench").await.unwrap();
    let _ = std::fs::remove_dir_all(&home);
    println!("| measure (microvm, 256 MiB + 192 MiB guest, median of 5) | time |");
    println!("|---|---|");
    println!("| cold boot to first exec | {:.2} s |", median(cold));
    println!(
        "| start from named snapshot to first exec (digest + restore) | {:.2} s |",
        median(warm)
    );
    println!(
        "| taking the snapshot of a running VM (pause, copy + digest {:.0} MiB, resume) | {:.2} s |",
        snap.bytes as f64 / (1u64 << 20) as f64,
        take.as_secs_f64()
    );
}
