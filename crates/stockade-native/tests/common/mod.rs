//! What the native provider's test binaries share (each uses part of it).
#![allow(dead_code)]

use stockade_testkit::require;

/// Root and the agent, which every native sandbox needs: `None` (after saying what is
/// missing and how to fix it; a failure in CI) when either is not there.
pub fn root_and_agent() -> Option<()> {
    require("root", stockade_testkit::root(), "run the tests as root")?;
    require(
        "the stockade agent",
        stockade_native::find_agent().map_err(|e| e.to_string()),
        "cargo build -p stockade-agent (cargo test --workspace builds it)",
    )?;
    Some(())
}

/// The children of `parent` that are zombies: pid and command name.
pub fn zombie_children_of(parent: u32) -> Vec<(u32, String)> {
    let parent = parent.to_string();
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let mut rest = stat[close + 2..].split(' ');
        let (state, ppid) = (rest.next(), rest.next());
        if state == Some("Z") && ppid == Some(parent.as_str()) {
            found.push((pid, stat[open + 1..close].to_string()));
        }
    }
    found
}
