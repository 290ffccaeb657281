//! The CLI with a daemon: `stockade serve`, commands through STOCKADE_HOST, pools,
//! and `--direct`.

use std::time::{Duration, Instant};

use super::via::{Home, Serve};
use super::{json, require_root, stockade};

#[test]
fn the_cli_runs_through_the_daemon_and_manages_pools() {
    if !require_root("cli_daemon") {
        return;
    }
    let d = Serve::start();
    let out = d.cli(&["run", "--json", "--", "/bin/echo", "via daemon"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(json(&out)["stdout"], "via daemon\n");

    // `pool warm` returns once the pool is warm (with progress on stderr).
    let out = d.cli(&["pool", "warm", "--size", "1", "--timeout", "60"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("is warm: 1 idle"), "{stderr}");
    let v = json(&d.cli(&["pool", "ls", "--json"]));
    assert_eq!(
        (v[0]["idle"].as_u64(), v[0]["min_idle"].as_u64()),
        (Some(1), Some(1)),
        "{v}"
    );
    assert_eq!(v[0]["failures"], 0, "{v}");
    let out = d.cli(&["create", "--json", "--timeout", "60"]);
    let id = json(&out)["id"].as_str().unwrap().to_string();
    let v = json(&d.cli(&["pool", "ls", "--json"]));
    assert_eq!(
        (v[0]["hits"].as_u64(), v[0]["in_use"].as_u64()),
        (Some(1), Some(1)),
        "{v}"
    );
    // `run` binds its own lifetime at acquisition: it takes from the same pool.
    let until = Instant::now() + Duration::from_secs(30);
    while json(&d.cli(&["pool", "ls", "--json"]))[0]["idle"] != 1 {
        assert!(Instant::now() < until, "the pool did not refill");
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = d.cli(&[
        "run",
        "--json",
        "--timeout",
        "30",
        "--",
        "/bin/echo",
        "warm",
    ]);
    assert_eq!(json(&out)["stdout"], "warm\n");
    let v = json(&d.cli(&["pool", "ls", "--json"]));
    assert_eq!(
        v[0]["hits"].as_u64(),
        Some(2),
        "run took a warm sandbox: {v}"
    );
    let ls = json(&d.cli(&["ls", "--json"]));
    assert_eq!(ls[0]["id"], id.as_str());
    let out = d.cli(&["exec", &id, "--", "/bin/echo", "ok"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ok\n");
    assert_eq!(d.cli(&["rm", &id]).status.code(), Some(0));
    let v = json(&d.cli(&["pool", "drain", "--json"]));
    assert_eq!(v["destroyed"].as_array().unwrap().len(), 1, "{v}");

    // An unknown id through the daemon keeps its code (exit 65) and message.
    let out = d.cli(&["inspect", "sb-000000000000", "--json"]);
    assert_eq!(out.status.code(), Some(65));
    assert_eq!(json(&out)["error"]["code"], "not_found");
}

#[test]
fn direct_runs_in_process_and_an_unreachable_host_is_an_error() {
    if !require_root("cli_direct") {
        return;
    }
    let gone = "unix:///nonexistent/stockaded.sock";
    let out = stockade(&["run", "--json", "--", "/bin/true"])
        .env("STOCKADE_HOST", gone)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(69), "unavailable");
    let msg = json(&out)["error"]["message"].as_str().unwrap().to_string();
    assert!(
        msg.contains("stockaded at unix:///nonexistent/stockaded.sock"),
        "{msg}"
    );
    let out = stockade(&["--direct", "run", "--json", "--", "/bin/echo", "here"])
        .env("STOCKADE_HOST", gone)
        .output()
        .unwrap();
    assert_eq!(json(&out)["stdout"], "here\n");
    let out = stockade(&["pool", "ls", "--direct"]).output().unwrap();
    assert_eq!(out.status.code(), Some(69), "pools need a daemon");
}

// Issue 14, finding 3: every tenant's code would inherit what the daemon holds open;
// the daemon here starts with descriptors planted by its caller.
#[test]
fn descriptors_of_the_daemon_do_not_reach_the_code() {
    if !require_root("descriptors_of_the_daemon") {
        return;
    }
    let planted = stockade_testkit::fds::planted();
    let d = Serve::start();
    let out = d.cli(&["run", "--", "/bin/sh", "-c", &planted.probe()]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    planted.assert_none_leaked(&String::from_utf8_lossy(&out.stdout));
}

/// The `--json` error message of a command that must end with `code`.
fn error_message(out: &std::process::Output, code: i32) -> String {
    assert_eq!(
        out.status.code(),
        Some(code),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    json(out)["error"]["message"].as_str().unwrap().to_string()
}

/// A pool whose sandboxes cannot be made: `pool warm` stops waiting after a few failed
/// creations and says why (the pool's own error, kept in `pool ls`), instead of
/// hanging or answering "ok" for a pool that will never be warm.
#[test]
fn a_pool_that_cannot_warm_says_why() {
    if !require_root("a_pool_that_cannot_warm") {
        return;
    }
    let d = Serve::start();
    // Nothing listens on port 1: every pull of the image fails at once.
    let image = "127.0.0.1:1/nothing:latest";
    let msg = error_message(
        &d.cli(&["pool", "warm", "--json", "--size", "2", "--image", image]),
        69,
    );
    assert!(
        msg.contains("could not be made") && msg.contains(image),
        "{msg}"
    );
    assert!(msg.contains("stockade pool drain"), "{msg}");
    let v = json(&d.cli(&["pool", "ls", "--json"]));
    assert!(v[0]["failures"].as_u64().unwrap() >= 3, "{v}");
    assert!(v[0]["last_error"].as_str().unwrap().contains(image), "{v}");
    assert_eq!(v[0]["idle"], 0, "{v}");
    // --no-wait answers at once, as before.
    let out = d.cli(&[
        "pool",
        "warm",
        "--json",
        "--no-wait",
        "--size",
        "2",
        "--image",
        image,
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(d.cli(&["pool", "drain"]).status.success());
}

/// A pool the daemon's global cap holds back: one larger than the cap is refused at
/// once, and `pool warm` stops waiting when the cap is reached (and says so) instead
/// of waiting out its timeout; with room made, the same warm fills the pool.
#[test]
fn a_pool_held_back_by_the_global_cap_says_so() {
    if !require_root("a_pool_held_back_by_the_cap") {
        return;
    }
    let d = Serve::start_full(false, Home::Own, &["--max-sandboxes=2".into()]);
    let msg = error_message(&d.cli(&["pool", "warm", "--json", "--size", "3"]), 67);
    assert!(msg.contains("--max-sandboxes"), "{msg}");
    let ids: Vec<String> = (0..2)
        .map(|_| {
            json(&d.cli(&["create", "--json"]))["id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    let started = Instant::now();
    let msg = error_message(&d.cli(&["pool", "warm", "--json", "--size", "1"]), 69);
    assert!(msg.contains("holds its most sandboxes (2 in all"), "{msg}");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "it waited {:?}",
        started.elapsed()
    );
    for id in &ids {
        assert!(d.cli(&["rm", id]).status.success());
    }
    let out = d.cli(&["pool", "warm", "--size", "1"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = json(&d.cli(&["pool", "ls", "--json"]));
    assert_eq!(v[0]["idle"], 1, "{v}");
    assert!(
        v[0]["last_error"].is_null(),
        "cleared once one was made: {v}"
    );
    assert!(d.cli(&["pool", "drain"]).status.success());
}
