//! A native sandbox's host ids: a range leased from the pool for the sandbox's life,
//! its user namespace, and the mappings of its idmapped mounts. Made by the monitor
//! (host root) before it forks PID 1, which inherits all of it.

use std::fs;
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::MetadataExt;

use nix::fcntl::{Flock, FlockArg};
use stockade_agent_proto::launch::{
    HostIds, ID_RANGE_SIZE, IdMap, IdPoolPlan, LaunchPlan, MapLine, MountOp, RootlessMaps,
};

/// What PID 1 needs to map ids: the sandbox's range, its user namespace, and one
/// mapping namespace per mount shown owned by the exec user.
pub struct Ids {
    pub range: HostIds,
    /// The lease's lock, held (shared with PID 1 across the fork) until both end.
    _lease: Flock<fs::File>,
    /// The sandbox's user namespace: ids 0..65535 inside are `range`.
    pub userns: OwnedFd,
    /// (index of the mount op in the plan, mapping namespace) for [`IdMap::Owner`].
    owners: Vec<(usize, OwnedFd)>,
    /// The children that made the namespaces, reaped off the critical path.
    makers: Vec<nix::unistd::Pid>,
}

impl Ids {
    /// The mapping namespace of mount op `index`.
    pub fn mapping(&self, index: usize, idmap: IdMap) -> Option<BorrowedFd<'_>> {
        match idmap {
            IdMap::Host => None,
            IdMap::Sandbox => Some(self.userns.as_fd()),
            IdMap::Owner => self
                .owners
                .iter()
                .find(|(i, _)| *i == index)
                .map(|(_, fd)| fd.as_fd()),
        }
    }

    /// Reaps the children that made the namespaces (they exited at once).
    pub fn reap_makers(&mut self) {
        for pid in self.makers.drain(..) {
            stockade_sys::idmap::reap(pid);
        }
    }

    /// The user-namespace wall, for `inspect`.
    pub fn describe(&self, uid: u32, gid: u32) -> stockade_agent_proto::Wall {
        let HostIds { first, count } = self.range;
        let detail = format!(
            "ids 0-{} inside are host ids {first}-{} (uid {uid} is host uid {}, gid {gid} host gid {}); mounts idmapped",
            count - 1,
            u64::from(first) + u64::from(count) - 1,
            u64::from(first) + u64::from(uid),
            u64::from(first) + u64::from(gid),
        );
        stockade_agent_proto::Wall::on(stockade_agent_proto::WallKind::UserNamespace, detail)
    }
}

impl Drop for Ids {
    /// However the launch ends, the children that made the namespaces are reaped.
    fn drop(&mut self) {
        self.reap_makers();
    }
}

/// Leases a range and makes the namespaces. The caller must be single-threaded.
pub fn prepare(plan: &LaunchPlan, u: &IdPoolPlan) -> Result<Ids, String> {
    let (range, lease) = lease(u, &plan.id)?;
    let mut makers = Vec::new();
    let made = make_all(plan, range, &mut makers);
    match made {
        Ok((userns, owners)) => Ok(Ids {
            range,
            _lease: lease,
            userns,
            owners,
            makers,
        }),
        Err(e) => {
            for pid in makers {
                stockade_sys::idmap::reap(pid);
            }
            Err(e)
        }
    }
}

type Made = (OwnedFd, Vec<(usize, OwnedFd)>);

/// The sandbox's user namespace and one mapping namespace per owner-mapped mount;
/// the pids of the children that made them go to `makers`.
fn make_all(
    plan: &LaunchPlan,
    range: HostIds,
    makers: &mut Vec<nix::unistd::Pid>,
) -> Result<Made, String> {
    let map = format!("0 {} {}\n", range.first, range.count);
    // Owned by the lease's first id (the sandbox's root), not by the monitor's root:
    // what the sandbox spends of the per-user counts (inotify, keys, namespaces) is
    // then its own, and it cannot starve host root or another sandbox.
    let owner = Some((range.first, range.first));
    let (userns, pid) = stockade_sys::idmap::make_userns_owned_by(owner, |pid| {
        stockade_sys::idmap::write_maps(pid, &map, &map)
    })?;
    makers.push(pid);
    let (uid, gid) = (plan.exec.uid, plan.exec.gid);
    let mut owners = Vec::new();
    for (i, op) in plan.mounts.iter().enumerate() {
        let MountOp::Bind {
            source,
            idmap: IdMap::Owner,
            ..
        } = op
        else {
            continue;
        };
        let md = fs::metadata(source)
            .map_err(|e| format!("cannot use mount source {}: {e}", source.display()))?;
        let at = |id: u32| u64::from(range.first) + u64::from(id);
        // The owner is the exec user; root inside (`--user 0`, E2B's `user="root"`)
        // creates files there too, owned on the host by the sandbox's own root, the
        // range's first id (never host root, never a host account). Without a line
        // of its own, root inside could not create anything there (EOVERFLOW).
        let root_line = |owner: u32, exec: u32| {
            if exec != 0 && owner != range.first {
                format!("{} {} 1\n", range.first, range.first)
            } else {
                String::new()
            }
        };
        let uid_map = format!("{} {} 1\n{}", md.uid(), at(uid), root_line(md.uid(), uid));
        let gid_map = format!("{} {} 1\n{}", md.gid(), at(gid), root_line(md.gid(), gid));
        let (ns, pid) = stockade_sys::idmap::make_userns(|pid| {
            stockade_sys::idmap::write_maps(pid, &uid_map, &gid_map)
        })?;
        makers.push(pid);
        owners.push((i, ns));
    }
    Ok((userns, owners))
}

/// Takes the first free range, starting at a random one (so that a range just freed
/// is not handed out again at once). A range is free when its lock file is unlocked.
pub(crate) fn lease(u: &IdPoolPlan, id: &str) -> Result<(HostIds, Flock<fs::File>), String> {
    if u.pool_ranges == 0 {
        return Err("the id pool is empty".into());
    }
    fs::create_dir_all(&u.lease_dir)
        .map_err(|e| format!("cannot create {}: {e}", u.lease_dir.display()))?;
    let mut seed = [0u8; 4];
    let _ = fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut seed));
    let start = u32::from_le_bytes(seed) % u.pool_ranges;
    for k in 0..u.pool_ranges {
        let slot = (start + k) % u.pool_ranges;
        let first = u64::from(u.pool_start) + u64::from(slot) * u64::from(ID_RANGE_SIZE);
        let Ok(first) = u32::try_from(first) else {
            continue;
        };
        let path = u.lease_dir.join(first.to_string());
        let f = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        let Ok(mut locked) = Flock::lock(f, FlockArg::LockExclusiveNonblock) else {
            continue;
        };
        let _ = locked.set_len(0);
        let _ = locked.write_all(id.as_bytes());
        return Ok((
            HostIds {
                first,
                count: ID_RANGE_SIZE,
            },
            locked,
        ));
    }
    Err(format!(
        "every one of the {} id ranges of the pool is in use by a live sandbox (set a larger pool with --id-range)",
        u.pool_ranges
    ))
}

fn map_text(lines: &[MapLine]) -> String {
    lines
        .iter()
        .map(|l| format!("{} {} {}\n", l.inside, l.host, l.count))
        .collect()
}

/// Writes the maps of a rootless sandbox's user namespace (PID 1's, `pid`): through
/// `newuidmap`/`newgidmap`, or directly for the caller's own ids (after denying
/// `setgroups`, as the kernel requires of an unprivileged writer).
pub fn write_rootless_maps(pid: nix::unistd::Pid, m: &RootlessMaps) -> Result<(), String> {
    let Some((newuidmap, newgidmap)) = &m.helpers else {
        let path = format!("/proc/{}/setgroups", pid.as_raw());
        fs::write(&path, "deny").map_err(|e| format!("cannot write {path}: {e}"))?;
        return stockade_sys::idmap::write_maps(pid, &map_text(&m.uid_map), &map_text(&m.gid_map));
    };
    for (tool, lines) in [(newuidmap, &m.uid_map), (newgidmap, &m.gid_map)] {
        let mut cmd = std::process::Command::new(tool);
        cmd.arg(pid.as_raw().to_string());
        for l in lines {
            cmd.args([l.inside, l.host, l.count].map(|n| n.to_string()));
        }
        let out = cmd
            .stdin(std::process::Stdio::null())
            .output()
            .map_err(|e| {
                format!(
                    "cannot run {}: {e} (install it: apt-get install uidmap)",
                    tool.display()
                )
            })?;
        if !out.status.success() {
            return Err(format!(
                "{} refused the sandbox's id map ({}): {}",
                tool.display(),
                map_text(lines).trim().replace('\n', ", "),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
    }
    Ok(())
}
