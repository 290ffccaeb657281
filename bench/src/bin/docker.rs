//! Docker provider benchmark: prints a table, asserts nothing.
//!
//!   cargo run --release -p stockade-bench --bin docker [-- ITERATIONS [IMAGE]]
//!
//! Compares, on the same image with the same hardening flags:
//! - stockade create + first exec (`/bin/true`) + destroy, against
//!   `docker run --rm ... IMAGE /bin/true` (the docker CLI);
//! - the exec round trip through the agent, against `docker exec CONTAINER /bin/true`.
//!
//! Needs root, dockerd and an image with /bin/true (default: the test image of
//! crates/stockade-docker/ci-setup.sh) and the static agent.

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use stockade_core::{CreateOptions, ExecRequest, Provider, Sandbox, SandboxSpec};
use stockade_docker::{AGENT_CAPS, DockerProvider};

fn stats(mut v: Vec<Duration>) -> (f64, f64, f64) {
    v.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let p = |q: f64| ms(v[((v.len() - 1) as f64 * q).round() as usize]);
    (p(0.5), p(0.9), ms(v[0]))
}

fn docker(args: &[&str]) -> String {
    let out = Command::new("/usr/bin/docker")
        .args(args)
        .output()
        .expect("run docker");
    assert!(
        out.status.success(),
        "docker {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The same flags the provider gives a default-spec container.
fn hardening_flags() -> Vec<String> {
    let mut v: Vec<String> = [
        "--network=none",
        "--read-only",
        "--tmpfs=/tmp:rw,nosuid,nodev,size=67108864,mode=1777",
        "--pids-limit=64",
        "--memory=512m",
        "--memory-swap=512m",
        "--cpus=1",
        "--security-opt=no-new-privileges",
        "--cap-drop=ALL",
        "--ipc=private",
        "--user=1000:1000",
    ]
    .iter()
    .map(std::string::ToString::to_string)
    .collect();
    v.extend(AGENT_CAPS.iter().map(|c| format!("--cap-add={c}")));
    v
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(20);
    let image = args
        .next()
        .unwrap_or_else(|| stockade_testkit::docker_test_image().expect("test image"));
    let provider: Arc<dyn Provider> = Arc::new(DockerProvider::new());
    let spec = SandboxSpec {
        image: Some(image.clone()),
        ..Default::default()
    };
    let flags = hardening_flags();
    let true_req = || {
        let mut r = ExecRequest::new(["/bin/true"]);
        r.timeout_ms = Some(30_000);
        r
    };

    // Warm both paths once (image layers, page cache).
    let sb = Sandbox::create(provider.clone(), spec.clone(), CreateOptions::default())
        .await
        .unwrap();
    sb.exec(true_req()).await.unwrap();
    sb.destroy().await.unwrap();
    let mut run_args: Vec<&str> = vec!["run", "--rm"];
    run_args.extend(flags.iter().map(String::as_str));
    run_args.extend([image.as_str(), "/bin/true"]);
    docker(&run_args);

    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for _ in 0..n {
        let t = Instant::now();
        let sb = Sandbox::create(provider.clone(), spec.clone(), CreateOptions::default())
            .await
            .unwrap();
        let out = sb.exec(true_req()).await.unwrap();
        assert_eq!(out.exit_code, 0);
        sb.destroy().await.unwrap();
        ours.push(t.elapsed());
        let t = Instant::now();
        docker(&run_args);
        theirs.push(t.elapsed());
    }

    let sb = Sandbox::create(provider.clone(), spec.clone(), CreateOptions::default())
        .await
        .unwrap();
    let mut d_args: Vec<&str> = vec!["run", "-d", "--rm"];
    d_args.extend(flags.iter().map(String::as_str));
    d_args.extend([image.as_str(), "/bin/sh", "-c", "sleep 600"]);
    let raw = docker(&d_args);
    let (mut exec_ours, mut exec_theirs) = (Vec::new(), Vec::new());
    for _ in 0..n * 3 {
        let t = Instant::now();
        sb.exec(true_req()).await.unwrap();
        exec_ours.push(t.elapsed());
        let t = Instant::now();
        docker(&["exec", &raw, "/bin/true"]);
        exec_theirs.push(t.elapsed());
    }
    sb.destroy().await.unwrap();
    docker(&["rm", "-f", &raw]);

    println!(
        "docker provider benchmark: {n} iterations ({} for execs), image {image}",
        n * 3
    );
    println!("{:<52} {:>9} {:>9} {:>9}", "", "p50 ms", "p90 ms", "min ms");
    for (name, v) in [
        ("stockade create + first exec + destroy", ours),
        ("docker run --rm (same image and flags)", theirs),
        ("stockade exec round trip (/bin/true)", exec_ours),
        ("docker exec round trip (/bin/true)", exec_theirs),
    ] {
        let (p50, p90, min) = stats(v);
        println!("{name:<52} {p50:>9.1} {p90:>9.1} {min:>9.1}");
    }
}
