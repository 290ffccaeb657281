//! The pool of host ids native sandboxes' user namespaces come from: a pool that holds
//! ids the host uses is refused when the daemon starts and when the CLI creates, with
//! every clash named.

use std::process::Command;

use stockade_testkit::require_root;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A subordinate range of this host's `/etc/subuid` (test.sh's `stockade-rl` has one).
fn a_subordinate_range() -> Option<(u64, u64)> {
    std::fs::read_to_string("/etc/subuid")
        .ok()?
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            Some((f.get(1)?.parse().ok()?, f.get(2)?.parse().ok()?))
        })
}

#[test]
fn the_daemon_refuses_at_start_an_id_range_holding_host_ids() {
    if !require_root("the_daemon_refuses_at_start_an_id_range_holding_host_ids") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("d.sock");
    let serve = |range: &str| {
        Command::new(env!("CARGO_BIN_EXE_stockade"))
            .args(["serve", "--listen"])
            .arg(&sock)
            .arg("--state-dir")
            .arg(dir.path().join("state"))
            .args(["--id-range", range])
            .output()
            .unwrap()
    };
    // Host accounts live below 65536 (root, nobody=65534): not a multiple-of-65536 start
    // and a pool over them are both refused.
    let out = serve("0-65535");
    assert_ne!(out.status.code(), Some(0));
    let err = text(&out.stderr);
    assert!(err.contains("START 0 would map host root"), "{err}");
    let out = serve("1000-70000");
    let err = text(&out.stderr);
    assert!(
        err.contains("not a multiple of 65536") && err.contains("END 70000"),
        "{err}"
    );
    // A pool over a subordinate id range (what newuidmap hands a user) is refused,
    // naming it; the daemon never listens.
    let Some((start, count)) = stockade_testkit::require(
        "a /etc/subuid range",
        a_subordinate_range().ok_or_else(|| "no /etc/subuid range".to_string()),
        "useradd -m stockade-rl (test.sh does)",
    ) else {
        return;
    };
    let first = start / 65_536 * 65_536;
    let last = (start + count).div_ceil(65_536) * 65_536 - 1;
    let out = serve(&format!("{first}-{last}"));
    assert_ne!(out.status.code(), Some(0), "{}", text(&out.stdout));
    let err = text(&out.stderr);
    assert!(
        err.contains("/etc/subuid") && err.contains("holds ids the host already uses"),
        "{err}"
    );
    assert!(!sock.exists(), "the daemon listened with a bad id range");
}

#[test]
fn a_bad_id_range_in_the_environment_is_named() {
    if !require_root("a_bad_id_range_in_the_environment_is_named") {
        return;
    }
    let out = Command::new(env!("CARGO_BIN_EXE_stockade"))
        .args(["--direct", "run", "--", "true"])
        .env("STOCKADE_ID_RANGE", "65536-65000")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains("$STOCKADE_ID_RANGE") && err.contains("END 65000"),
        "{err}"
    );
}
