//! Benchmark of the egress policy: prints markdown tables.
//!
//! `cargo run -p stockade-bench --bin egress [-- ITERATIONS]` as root, after
//! `scripts/build-agent.sh` (same profile). Rows, all in one run:
//!
//! - connection setup to pypi.org:443 from Python (`socket.create_connection`, name
//!   lookup included; and a `HEAD` over HTTPS on a new connection (connect, TLS
//!   handshake with SNI `pypi.org`, request, response to its end) to the address
//!   looked up once, which under the allowlist crosses the monitor's SNI check and
//!   its upstream connection): on the bare
//!   host, in a sandbox with `network: egress` (all), and in one with the allowlist
//!   `["pypi.org:443"]` (every lookup through the monitor's resolver, which opens the
//!   answer in nftables before passing it on); median and p90 of ITERATIONS each;
//!   A fourth row adds a credential for pypi.org: the monitor's proxy then ends the
//!   code's TLS session with a certificate of the sandbox's own authority and makes
//!   its own to the server;
//! - `run` (create + exec `true` + destroy) with no network, all, and the allowlist.

use std::process::Command;
use std::time::Instant;

use stockade::spec::Network;
use stockade::{CreateOptions, ExecRequest, NativeProvider, Sandbox, SandboxSpec};

fn pct(mut v: Vec<f64>, q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 - 1.0) * q).round() as usize]
}

/// Python that times `n` connections, with and without the lookup, printing ms.
fn probe(n: usize) -> String {
    format!(
        "import socket, time\n\
import ssl\n\
         ip = socket.getaddrinfo('pypi.org', 443, socket.AF_INET)[0][4][0]\n\
         ctx = ssl.create_default_context()\n\
         for kind in ('lookup+connect', 'tls'):\n\
         \x20   for _ in range({n}):\n\
         \x20       t = time.perf_counter()\n\
         \x20       s = socket.create_connection(('pypi.org' if kind == 'lookup+connect' else ip, 443), timeout=10)\n\
         \x20       if kind == 'tls':\n\
         \x20           s = ctx.wrap_socket(s, server_hostname='pypi.org')\n\
         \x20           s.sendall(b'HEAD /simple/six/ HTTP/1.1\\r\\nHost: pypi.org\\r\\nConnection: close\\r\\n\\r\\n')\n\
         \x20           while s.recv(65536): pass\n\
         \x20       print(kind, (time.perf_counter() - t) * 1000)\n\
         \x20       s.close()\n"
    )
}

fn parse(out: &str) -> (Vec<f64>, Vec<f64>) {
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for l in out.lines() {
        if let Some(v) = l.strip_prefix("lookup+connect ") {
            a.push(v.parse().unwrap());
        } else if let Some(v) = l.strip_prefix("tls ") {
            b.push(v.parse().unwrap());
        }
    }
    (a, b)
}

async fn sandbox(network: Network) -> Sandbox {
    let spec = SandboxSpec {
        network,
        ..Default::default()
    };
    Sandbox::create(
        std::sync::Arc::new(NativeProvider::new()),
        spec,
        CreateOptions {
            owner_pid: Some(std::process::id()),
        },
    )
    .await
    .expect("create")
}

#[tokio::main]
async fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("ITERATIONS"))
        .unwrap_or(50);
    let policy = || Network::allow(["pypi.org:443"]);
    println!("connection setup to pypi.org:443, {n} each, ms\n");
    println!("| where | lookup+connect p50 | p90 | HTTPS HEAD, new connection p50 | p90 |");
    println!("|---|---:|---:|---:|---:|");
    let host = Command::new("python3")
        .arg("-c")
        .arg(probe(n))
        .output()
        .unwrap();
    let mut rows = vec![("bare host", parse(&String::from_utf8_lossy(&host.stdout)))];
    let with_credential = Network::Policy(stockade::spec::EgressPolicy {
        allow: vec!["pypi.org:443".into()],
        deny: Vec::new(),
        credentials: vec![stockade::spec::Credential {
            host: "pypi.org".into(),
            header: "X-Bench".into(),
            value: "not-a-secret".into(),
            env: None,
        }],
    });
    for (name, net) in [
        ("sandbox, network all", Network::Egress),
        ("sandbox, allowlist [pypi.org:443]", policy()),
        (
            "sandbox, same + a credential for pypi.org (TLS intercepted)",
            with_credential,
        ),
    ] {
        let sb = sandbox(net).await;
        let mut req = ExecRequest::new(["python3", "-c", &probe(n)]);
        req.timeout_ms = Some(120_000);
        let out = sb.exec(req).await.unwrap();
        assert_eq!(
            out.exit_code,
            0,
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        rows.push((name, parse(&String::from_utf8_lossy(&out.stdout))));
        sb.destroy().await.unwrap();
    }
    for (name, (a, b)) in rows {
        println!(
            "| {name} | {:.2} | {:.2} | {:.2} | {:.2} |",
            pct(a.clone(), 0.5),
            pct(a, 0.9),
            pct(b.clone(), 0.5),
            pct(b, 0.9)
        );
    }
    let runs = (n / 2).max(5);
    println!("\n`run` (create + exec `true` + destroy), {runs} each, ms\n");
    println!("| network | p50 | p90 |");
    println!("|---|---:|---:|");
    for (name, net) in [
        ("none", Network::None),
        ("all", Network::Egress),
        ("allowlist [pypi.org:443]", policy()),
    ] {
        let mut v = Vec::new();
        for i in 0..=runs {
            let t = Instant::now();
            let sb = sandbox(net.clone()).await;
            let out = sb.exec(ExecRequest::new(["true"])).await.unwrap();
            assert_eq!(out.exit_code, 0);
            sb.destroy().await.unwrap();
            if i > 0 {
                v.push(t.elapsed().as_secs_f64() * 1000.0);
            }
        }
        println!(
            "| {name} | {:.2} | {:.2} |",
            pct(v.clone(), 0.5),
            pct(v, 0.9)
        );
    }
}
