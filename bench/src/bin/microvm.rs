//! Prints a table of the microVM provider's times (medians): boot to first exec,
//! exec round trip, pause, resume, snapshot size, fork of 3. Needs root and what
//! `crates/stockade-microvm/ci-setup.sh` installs.
//!
//! cargo run --release -p stockade-bench --bin microvm

use std::sync::Arc;
use std::time::{Duration, Instant};

use stockade_core::{CreateOptions, ExecRequest, Provider, Sandbox, SandboxSpec};
use stockade_microvm::MicrovmProvider;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

#[tokio::main]
async fn main() {
    let p: Arc<dyn Provider> = Arc::new(MicrovmProvider::new());
    let mut spec = SandboxSpec::default();
    spec.limits.memory_bytes = 256 << 20;
    let opts = || CreateOptions {
        owner_pid: Some(std::process::id()),
    };
    let (mut boot, mut rtt, mut pause, mut resume, mut fork3, mut size) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    for _ in 0..3 {
        let t = Instant::now();
        let sb = Sandbox::create(p.clone(), spec.clone(), opts())
            .await
            .unwrap();
        sb.exec(ExecRequest::new(["true"])).await.unwrap();
        boot.push(t.elapsed());
        for _ in 0..10 {
            let t = Instant::now();
            sb.exec(ExecRequest::new(["true"])).await.unwrap();
            rtt.push(t.elapsed());
        }
        // A Python sandbox: an interpreter holding 20 MB alive in the background.
        let mut r = ExecRequest::new([
            "/bin/sh",
            "-c",
            "python3 -c 'import time; b = bytearray(20 << 20); time.sleep(3600)' >/dev/null 2>&1 &",
        ]);
        r.background = true;
        sb.exec(r).await.unwrap();
        let t = Instant::now();
        sb.pause().await.unwrap();
        pause.push(t.elapsed());
        let state = format!("/run/stockade-microvm/{}/snapshot/vm.state", sb.id());
        size.push(std::fs::metadata(&state).map(|m| m.len()).unwrap_or(0));
        let t = Instant::now();
        sb.resume().await.unwrap();
        sb.exec(ExecRequest::new(["true"])).await.unwrap();
        resume.push(t.elapsed());
        sb.pause().await.unwrap();
        let t = Instant::now();
        let forks = sb.fork(3, opts()).await.unwrap();
        for f in &forks {
            f.exec(ExecRequest::new(["true"])).await.unwrap();
        }
        fork3.push(t.elapsed());
        for f in forks {
            f.destroy().await.unwrap();
        }
        sb.destroy().await.unwrap();
    }
    size.sort();
    println!("| measure (microvm, TCG, 256 MiB + 192 MiB guest) | median |");
    println!("|---|---|");
    println!(
        "| boot to first exec | {:.2} s |",
        median(boot).as_secs_f64()
    );
    println!(
        "| exec round trip (`true`) | {:.1} ms |",
        median(rtt).as_secs_f64() * 1e3
    );
    println!(
        "| pause (save to disk + digest) | {:.2} s |",
        median(pause).as_secs_f64()
    );
    println!(
        "| resume (verify + restore + first exec) | {:.2} s |",
        median(resume).as_secs_f64()
    );
    println!(
        "| snapshot size (Python holding 20 MB) | {:.0} MiB |",
        size[size.len() / 2] as f64 / (1 << 20) as f64
    );
    println!(
        "| fork of 3 (verify + restore 3 + an exec in each) | {:.2} s |",
        median(fork3).as_secs_f64()
    );
}
