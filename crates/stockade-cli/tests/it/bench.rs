//! `stockade bench burst` counts real work: what it reports completed is what the
//! daemon ran, and a daemon killed mid-run shows up as errors, not as fast operations.

use std::io::{Read, Write};
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;

use super::via::{Home, Serve};
use super::{json, require_root, stockade};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The value of the metric line `name` (exact, labels included) at `/metrics`.
fn metric(port: u16, name: &str) -> u64 {
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut body = String::new();
    c.read_to_string(&mut body).unwrap();
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no metric {name} in:\n{body}"))
}

/// Waits (up to 15 s) until the daemon holds no handed-out sandbox: a destroy is
/// answered before its teardown ends, and the gauge counts it until then.
fn none_live(port: u16) {
    let until = std::time::Instant::now() + Duration::from_secs(15);
    while metric(port, "stockade_sandboxes_live") != 0 {
        assert!(std::time::Instant::now() < until, "sandboxes still live");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn burst(d: &Serve, args: &[&str]) -> (Option<i32>, Value) {
    let host = d.host();
    let mut all = vec!["bench", "burst", "--json", "--host", &host];
    all.extend_from_slice(args);
    let out = stockade(&all).output().unwrap();
    let v = json(&out);
    assert!(
        v.get("completed").is_some(),
        "no report: {v} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), v)
}

#[test]
fn burst_reports_what_the_daemon_did_in_both_modes() {
    if !require_root("bench_burst") {
        return;
    }
    let port = free_port();
    let d = Serve::start_full(
        false,
        Home::Own,
        &[format!("--metrics-listen=127.0.0.1:{port}")],
    );

    // One-shot from a warm pool of 2, three clients.
    let (code, v) = burst(&d, &["--clients", "3", "--secs", "1.5", "--warm", "2"]);
    assert_eq!(code, Some(0), "{v}");
    let done = v["completed"].as_u64().unwrap();
    assert!(done >= 3, "{v}");
    assert_eq!(v["errors"], 0, "{v}");
    assert_eq!(v["mode"], "one-shot");
    for step in ["operation", "create", "exec", "destroy"] {
        assert_eq!(v["latency"][step]["n"].as_u64(), Some(done), "{step}: {v}");
    }
    assert_eq!(metric(port, "stockade_execs_total"), done, "{v}");
    let hits = metric(port, "stockade_pool_hits_total");
    assert_eq!(v["pooled"].as_u64(), Some(hits), "{v}");
    assert!(hits >= 1, "the warm pool was used: {v}");
    // Every one-shot sandbox is gone; only the warm pool is left.
    none_live(port);
    let ls = json(&d.cli(&["ls", "--json"]));
    assert_eq!(ls, serde_json::json!([]), "nothing is left handed out");

    // Held: two sandboxes, execs in them; the daemon saw exactly as many.
    let before = metric(port, "stockade_execs_total");
    let (code, v) = burst(
        &d,
        &[
            "--clients",
            "2",
            "--secs",
            "1",
            "--mode",
            "held",
            "--",
            "/bin/echo",
            "hi",
        ],
    );
    assert_eq!(code, Some(0), "{v}");
    let done = v["completed"].as_u64().unwrap();
    assert!(done >= 2, "{v}");
    assert_eq!(v["latency"]["operation"]["n"].as_u64(), Some(done));
    assert!(v["latency"].get("create").is_none(), "{v}");
    assert_eq!(metric(port, "stockade_execs_total") - before, done, "{v}");
    none_live(port);
}

#[test]
fn burst_counts_errors_when_the_daemon_dies_mid_run() {
    if !require_root("bench_burst_kill") {
        return;
    }
    let mut d = Serve::start();
    let host = d.host();
    let child = stockade(&[
        "bench",
        "burst",
        "--json",
        "--host",
        &host,
        "--clients",
        "2",
        "--secs",
        "3",
    ])
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    d.kill9();
    let out = child.wait_with_output().unwrap();
    let v = json(&out);
    assert_eq!(
        out.status.code(),
        Some(1),
        "errors make the exit code 1: {v}"
    );
    assert!(
        v["completed"].as_u64().unwrap() >= 1,
        "work before the kill: {v}"
    );
    let errors = v["errors"].as_u64().unwrap();
    assert!(errors >= 2, "every client saw the daemon go: {v}");
    assert!(
        v["error_examples"][0]
            .as_str()
            .is_some_and(|e| e.contains("stockaded") || e.contains("connect")),
        "{v}"
    );
}
