//! `stockade rm ID... | --all [--everyone]`

use std::os::unix::fs::MetadataExt;
use std::sync::Arc;

use clap::Args;
use stockade::host::OWNER_UID_LABEL;
use stockade::{Error, Provider, Result, SandboxInfo};
use stockade_server::daemon::DAEMON_LABEL;

use super::Ctx;

#[derive(Args, Debug)]
pub struct RmArgs {
    /// Sandbox ids; an id that names no live sandbox is an error (exit 65) and nothing
    /// is removed.
    #[arg(required_unless_present = "all")]
    pub ids: Vec<String>,
    /// Destroy every live sandbox this user made (through a daemon: this tenant's).
    #[arg(long, conflicts_with = "ids")]
    pub all: bool,
    /// With --all, also other users' sandboxes and those a daemon made for its tenants.
    #[arg(long, requires = "all")]
    pub everyone: bool,
}

/// Whether the user `uid` owns `s`, in-process: a daemon's sandbox is the daemon's
/// (its tenants'); otherwise the uid recorded at creation, else the uid of its live
/// owner process (`proc_uid`), says whose it is. A sandbox that says neither is no
/// one's in particular, so only `--everyone` removes it.
fn owned_by(s: &SandboxInfo, uid: u32, proc_uid: impl Fn(u32) -> Option<u32>) -> bool {
    let label = |k: &str| s.spec.get("labels").and_then(|l| l.get(k));
    if label(DAEMON_LABEL).is_some() {
        return false;
    }
    match label(OWNER_UID_LABEL).and_then(|v| v.as_str()) {
        Some(v) => v.parse::<u32>().ok() == Some(uid),
        None => s.owner_pid.and_then(proc_uid) == Some(uid),
    }
}

/// The effective uid of a live process (who owns its /proc directory).
fn process_uid(pid: u32) -> Option<u32> {
    std::fs::metadata(format!("/proc/{pid}"))
        .ok()
        .map(|m| m.uid())
}

pub async fn run(ctx: &Ctx, a: RmArgs) -> Result<i32> {
    // Each sandbox with the provider that holds it (in-process, with no provider
    // named, any of this build's).
    let mut targets: Vec<(String, Arc<dyn Provider>)> = Vec::new();
    if a.all {
        let uid = stockade::host::euid();
        for s in ctx.list().await? {
            // A daemon lists only the caller's (its tenant's) sandboxes.
            if !(a.everyone || ctx.remote.is_some() || owned_by(&s, uid, process_uid)) {
                continue;
            }
            let provider = if ctx.remote.is_some() || ctx.provider.is_some() {
                ctx.provider()?
            } else {
                ctx.local_provider(&s.provider)?
            };
            targets.push((s.id, provider));
        }
    } else {
        // Every id is checked before anything is removed, so a typo removes nothing.
        let mut unknown = Vec::new();
        for id in &a.ids {
            let found = match ctx.provider_for(id).await {
                // A daemon or a named provider answers without asking: ask it.
                Ok(p) => p.inspect(id).await.map(|_| p),
                Err(e) => Err(e),
            };
            match found {
                Ok(p) => targets.push((id.clone(), p)),
                Err(e) if e.code() == stockade::ErrorCode::NotFound => unknown.push(id.as_str()),
                // There, even if it died (its container exited when dockerd restarted,
                // say) or cannot be asked now: the destroy below cleans it up, or says
                // what stops it.
                Err(_) => targets.push((id.clone(), ctx.provider()?)),
            }
        }
        if !unknown.is_empty() {
            // `sandbox ID not found`; `stockade ls` lists the live ones.
            return Err(Error::NotFound {
                kind: "sandbox",
                id: unknown.join(", "),
            });
        }
    }
    let mut removed = Vec::new();
    for (id, provider) in &targets {
        provider.destroy(id).await?;
        removed.push(id.clone());
        if !ctx.json {
            println!("{id}");
        }
    }
    if ctx.json {
        println!("{}", serde_json::json!({"removed": removed}));
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(labels: serde_json::Value, owner_pid: Option<u32>) -> SandboxInfo {
        SandboxInfo {
            id: "sb-1".into(),
            provider: "native".into(),
            created_at_ms: 0,
            expires_at_ms: 0,
            owner_pid,
            spec: serde_json::json!({ "labels": labels }),
            applied: Vec::new(),
            state: Default::default(),
            steps: Vec::new(),
        }
    }

    #[test]
    fn only_the_callers_own_sandboxes_are_its_own() {
        let uid_of = |pid: u32| match pid {
            10 => Some(0),
            11 => Some(1000),
            _ => None,
        };
        let none = serde_json::json!({});
        // Made by root's CLI or session, or owned by a root process: root's.
        assert!(owned_by(
            &info(serde_json::json!({"stockade.uid": "0"}), None),
            0,
            uid_of
        ));
        assert!(owned_by(&info(none.clone(), Some(10)), 0, uid_of));
        // Another user's, by label or by owner process.
        assert!(!owned_by(
            &info(serde_json::json!({"stockade.uid": "1000"}), None),
            0,
            uid_of
        ));
        assert!(!owned_by(&info(none.clone(), Some(11)), 0, uid_of));
        assert!(owned_by(&info(none.clone(), Some(11)), 1000, uid_of));
        // A daemon's, even when the daemon runs as the caller.
        let daemon = serde_json::json!({"stockade.daemon": "d1", "stockade.uid": "0"});
        assert!(!owned_by(&info(daemon, Some(10)), 0, uid_of));
        // No label and no live owner: no one's in particular.
        assert!(!owned_by(&info(none.clone(), None), 0, uid_of));
        assert!(!owned_by(&info(none, Some(12)), 0, uid_of));
    }
}
