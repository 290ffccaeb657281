//! Rootless native sandboxes: the caller's own uid (and its subordinate ids, through
//! `newuidmap`) as the sandbox's ids, and limits through a cgroup subtree delegated
//! to the caller once by root (`stockade setup rootless --user NAME`).

use std::path::{Path, PathBuf};

use stockade_agent_proto::launch::{ID_RANGE_SIZE, MapLine, RootlessMaps};
use stockade_core::Error;

use stockade_cgroup::Layout;

/// What a rootless sandbox's ids come from: the caller's and its subordinate ranges.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RootlessHost {
    pub uid: u32,
    pub gid: u32,
    /// `/etc/subuid` and `/etc/subgid` ranges of the caller: (first, count).
    pub subuid: Option<(u32, u32)>,
    pub subgid: Option<(u32, u32)>,
    /// `newuidmap` and `newgidmap`, when installed.
    pub helpers: Option<(PathBuf, PathBuf)>,
}

/// Map lines for inside id `inside` = the caller's `own`, the rest of 0..65535 from
/// the subordinate range `sub` (as far as it goes).
fn lines(inside: u32, own: u32, sub: Option<(u32, u32)>) -> Vec<MapLine> {
    let mut v = vec![MapLine {
        inside,
        host: own,
        count: 1,
    }];
    if let Some((start, count)) = sub {
        let below = inside.min(count);
        if below > 0 {
            v.push(MapLine {
                inside: 0,
                host: start,
                count: below,
            });
        }
        let above = (count - below).min(ID_RANGE_SIZE.saturating_sub(inside + 1));
        if above > 0 {
            v.push(MapLine {
                inside: inside + 1,
                host: start + below,
                count: above,
            });
        }
    }
    v
}

impl RootlessHost {
    /// This process's.
    pub fn detect() -> RootlessHost {
        let uid = nix::unistd::getuid().as_raw();
        let gid = nix::unistd::getgid().as_raw();
        let name = users_name(uid);
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let helpers = match (which("newuidmap"), which("newgidmap")) {
            (Some(u), Some(g)) => Some((u, g)),
            _ => None,
        };
        RootlessHost {
            uid,
            gid,
            subuid: subordinate(&read("/etc/subuid"), uid, name.as_deref()),
            subgid: subordinate(&read("/etc/subgid"), uid, name.as_deref()),
            helpers,
        }
    }

    /// The maps for a sandbox whose exec user is `uid`:`gid` inside: that user is the
    /// caller; with subordinate ids (and the helpers) the other ids too, else none.
    pub fn maps(&self, uid: u32, gid: u32) -> RootlessMaps {
        match (&self.helpers, self.subuid, self.subgid) {
            (Some(h), Some(su), Some(sg)) => RootlessMaps {
                uid_map: lines(uid, self.uid, Some(su)),
                gid_map: lines(gid, self.gid, Some(sg)),
                helpers: Some(h.clone()),
            },
            _ => RootlessMaps {
                uid_map: lines(uid, self.uid, None),
                gid_map: lines(gid, self.gid, None),
                helpers: None,
            },
        }
    }

    /// The user-namespace wall, for `inspect`.
    pub fn describe(&self, uid: u32) -> stockade_core::Wall {
        let detail = match (&self.helpers, self.subuid) {
            (Some(_), Some((s, n))) => format!(
                "rootless; uid {uid} inside is your uid {}, the other ids inside are your subordinate ids {s}-{}",
                self.uid,
                u64::from(s) + u64::from(n) - 1
            ),
            _ => format!(
                "rootless; uid {uid} inside is your uid {} and no other id is mapped (no /etc/subuid range, or no newuidmap); your supplementary groups stay",
                self.uid
            ),
        };
        stockade_core::Wall::on(stockade_core::WallKind::UserNamespace, detail)
    }
}

fn which(name: &str) -> Option<PathBuf> {
    ["/usr/bin", "/bin", "/usr/sbin", "/sbin", "/usr/local/bin"]
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
}

fn users_name(uid: u32) -> Option<String> {
    std::fs::read_to_string("/etc/passwd")
        .ok()?
        .lines()
        .find(|l| l.split(':').nth(2) == Some(&uid.to_string()))
        .map(|l| l.split(':').next().unwrap_or("").to_string())
}

/// The first range of `uid` (by number or name) in a subuid/subgid file.
pub fn subordinate(text: &str, uid: u32, name: Option<&str>) -> Option<(u32, u32)> {
    text.lines().find_map(|l| {
        let f: Vec<&str> = l.trim().split(':').collect();
        let who = *f.first()?;
        if who != uid.to_string() && Some(who) != name {
            return None;
        }
        let (s, n) = (f.get(1)?.parse().ok()?, f.get(2)?.parse().ok()?);
        (n > 0).then_some((s, n))
    })
}

/// Name of the cgroup directory delegated to `uid`, in each hierarchy.
pub fn delegated_name(uid: u32) -> String {
    format!("stockade-user-{uid}")
}

/// The controllers whose hierarchies rootless limits need, with the limit each holds.
const CONTROLLERS: &[(&str, &str)] = &[("memory", "memory"), ("pids", "pids"), ("cpu", "cpus")];

/// As root: delegates a cgroup subtree to `uid`:`gid` in each hierarchy the limits
/// need (made once; idempotent). Returns what it did, one line each.
pub fn setup(layout: &Layout, uid: u32, gid: u32) -> Result<Vec<String>, Error> {
    let name = delegated_name(uid);
    let io = |what: String| move |e: std::io::Error| Error::io(what, e);
    let give = |p: &Path| {
        std::os::unix::fs::chown(p, Some(uid), Some(gid))
            .map_err(io(format!("cannot give {} to uid {uid}", p.display())))
    };
    let mut done = Vec::new();
    match layout {
        Layout::Hybrid { v1, .. } => {
            for (c, _) in CONTROLLERS {
                let base = v1.get(*c).ok_or_else(|| Error::Unavailable {
                    what: format!("the {c} cgroup controller"),
                    reason: "it is not mounted".into(),
                    fix: format!("mount it: mount -t cgroup -o {c} cgroup /sys/fs/cgroup/{c}"),
                })?;
                let dir = base.join(&name);
                std::fs::create_dir_all(&dir)
                    .map_err(io(format!("cannot create {}", dir.display())))?;
                for p in [dir.clone(), dir.join("cgroup.procs"), dir.join("tasks")] {
                    give(&p)?;
                }
                done.push(format!("delegated {} to uid {uid}", dir.display()));
            }
        }
        Layout::V2 { root } => {
            let enable = "+cpu +memory +pids";
            let dir = root.join(&name);
            std::fs::write(root.join("cgroup.subtree_control"), enable).map_err(io(format!(
                "cannot enable controllers in {}",
                root.display()
            )))?;
            std::fs::create_dir_all(&dir)
                .map_err(io(format!("cannot create {}", dir.display())))?;
            std::fs::write(dir.join("cgroup.subtree_control"), enable).map_err(io(format!(
                "cannot enable controllers in {}",
                dir.display()
            )))?;
            for f in [
                "",
                "cgroup.procs",
                "cgroup.subtree_control",
                "cgroup.threads",
            ] {
                give(&dir.join(f))?;
            }
            done.push(format!("delegated {} to uid {uid}", dir.display()));
        }
        Layout::None => {
            return Err(Error::Unavailable {
                what: "rootless limits".into(),
                reason: "no cgroup filesystem is mounted".into(),
                fix: "mount cgroup2 at /sys/fs/cgroup".into(),
            });
        }
    }
    // slirp4netns (egress without root) opens /dev/net/tun in the sandbox's network
    // namespace: most distributions leave it 0666; some containers make it root-only.
    let tun = Path::new("/dev/net/tun");
    if let Ok(md) = std::fs::metadata(tun) {
        use std::os::unix::fs::PermissionsExt;
        if md.permissions().mode() & 0o006 != 0o006 {
            std::fs::set_permissions(tun, std::fs::Permissions::from_mode(0o666))
                .map_err(io(format!("cannot open up {}", tun.display())))?;
            done.push(format!(
                "made {} 0666 (the usual default) so --network works without root",
                tun.display()
            ));
        }
    }
    Ok(done)
}

/// Refuses a rootless sandbox whose limits have no delegated cgroup to live in,
/// naming each limit and the fix. `parents` are the plan's cgroup parents.
pub fn check_delegated(parents: &[PathBuf], limits: &[String], uid: u32) -> Result<(), Error> {
    let missing: Vec<String> = parents
        .iter()
        .filter(|p| nix::unistd::access(p.as_path(), nix::unistd::AccessFlags::W_OK).is_err())
        .map(|p| p.display().to_string())
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let name = users_name(uid).unwrap_or_else(|| uid.to_string());
    Err(Error::Unavailable {
        what: format!("enforcing limits ({}) without root", limits.join(", ")),
        reason: format!(
            "that needs a cgroup delegated to you, and {} {} missing or not yours",
            missing.join(", "),
            if missing.len() == 1 { "is" } else { "are" }
        ),
        fix: format!("as root, once: stockade setup rootless --user {name}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_put_the_exec_user_on_the_caller_and_the_rest_on_subordinate_ids() {
        let h = RootlessHost {
            uid: 1001,
            gid: 1001,
            subuid: Some((100_000, 65_536)),
            subgid: Some((100_000, 65_536)),
            helpers: Some(("/usr/bin/newuidmap".into(), "/usr/bin/newgidmap".into())),
        };
        let m = h.maps(1000, 1000);
        let l = |inside, host, count| MapLine {
            inside,
            host,
            count,
        };
        assert_eq!(
            m.uid_map,
            vec![
                l(1000, 1001, 1),
                l(0, 100_000, 1000),
                l(1001, 101_000, 64_535)
            ]
        );
        let m = h.maps(0, 0);
        assert_eq!(m.uid_map, vec![l(0, 1001, 1), l(1, 100_000, 65_535)]);
        let bare = RootlessHost { helpers: None, ..h };
        let m = bare.maps(1000, 1000);
        assert_eq!(m.uid_map, vec![l(1000, 1001, 1)]);
        assert!(m.helpers.is_none());
    }

    #[test]
    fn finds_subordinate_ranges_by_name_or_number() {
        let t = "alice:100000:65536\n1002:200000:65536\n";
        assert_eq!(subordinate(t, 1001, Some("alice")), Some((100_000, 65_536)));
        assert_eq!(subordinate(t, 1002, Some("bob")), Some((200_000, 65_536)));
        assert_eq!(subordinate(t, 1003, Some("carol")), None);
    }
}
