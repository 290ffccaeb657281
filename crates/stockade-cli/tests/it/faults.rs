//! Faults as a script sees them: a full `STOCKADE_HOME` under `session exec` (a small
//! tmpfs, filled). The user is told what is full with the exit code of an unavailable
//! host (69, not 70 for a bug), and no sandbox outlives the failed command.

use crate::{require_root, state_dir, stockade};

#[test]
fn a_full_home_fails_session_exec_with_69_and_leaves_no_sandbox() {
    if !require_root("a_full_home_fails_session_exec") {
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let fs = stockade_testkit::Tmpfs::mount(home.path(), "1m");
    fs.fill("filler");
    // Other tests of this binary make sandboxes in the same state directory at the
    // same time: only the session's own (by its label) count.
    let name = format!("full-{}", std::process::id());
    let h = home.path().to_str().unwrap();
    let out = stockade(&[
        "session",
        "--home",
        h,
        "exec",
        &name,
        "--",
        "/bin/echo",
        "hi",
    ])
    .output()
    .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(69), "{err}");
    assert!(
        err.contains("No space left") && err.contains(h),
        "names what is full: {err}"
    );
    assert_eq!(
        of_session(&name),
        Vec::<String>::new(),
        "a sandbox outlived the failed session exec"
    );
}

/// Sandboxes of this test binary's state directory made for session `name`.
fn of_session(name: &str) -> Vec<String> {
    let _ = state_dir();
    let out = stockade(&["ls", "--json"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    let mut ids: Vec<String> = v
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|s| s["spec"]["labels"]["stockade.session"] == name)
                .filter_map(|s| s["id"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    ids.sort();
    ids
}
