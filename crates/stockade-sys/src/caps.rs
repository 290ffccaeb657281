//! Dropping capabilities.

use caps::CapSet;

use crate::{Result, SysError};

/// Drops every capability from the bounding set (needs CAP_SETPCAP, so call it before
/// changing uid).
pub fn drop_bounding() -> Result<()> {
    // Only what is still there (one read of /proc instead of a PR_CAPBSET_READ per
    // capability: an exec's shim may have dropped most of them already).
    if let Some(bounding) = bounding_now() {
        for cap in caps::all() {
            if bounding & (1u64 << cap.index()) != 0 {
                caps::drop(None, CapSet::Bounding, cap)
                    .map_err(|e| SysError::other("prctl", format!("PR_CAPBSET_DROP {cap}"), e))?;
            }
        }
        return Ok(());
    }
    caps::clear(None, CapSet::Bounding)
        .map_err(|e| SysError::other("prctl", "PR_CAPBSET_DROP all", e))
}

/// The bounding set as the kernel reports it (`CapBnd` of `/proc/self/status`).
fn bounding_now() -> Option<u64> {
    crate::process::own_status_hex(b"CapBnd:")
}

/// Clears the ambient, inheritable, effective and permitted sets.
///
/// A kernel without ambient capabilities (gVisor answers `PR_CAP_AMBIENT` with
/// `EINVAL`) has no ambient set to clear: ambient is by definition a subset of
/// permitted and inheritable, so once both are empty (checked) there is none.
pub fn clear_all() -> Result<()> {
    let ambient = caps::clear(None, CapSet::Ambient);
    clear_three()
        .map_err(|e| SysError::other("capset", "clear Inheritable, Effective and Permitted", e))?;
    if let Err(e) = ambient {
        let empty = |set| caps::read(None, set).is_ok_and(|c| c.is_empty());
        if !(empty(CapSet::Permitted) && empty(CapSet::Inheritable)) {
            return Err(SysError::other("capset", "clear Ambient", e));
        }
    }
    Ok(())
}

/// Clears the inheritable, effective and permitted sets with one `capset` (the
/// `caps` crate reads and writes each set on its own: six system calls per exec).
fn clear_three() -> std::io::Result<()> {
    use crate::process::{CAP_V3, CapData, CapHeader};
    let mut header = CapHeader {
        version: CAP_V3,
        pid: 0,
    };
    let data = [CapData::default(); 2];
    // SAFETY: capset reads a version-3 header and two data structs, both valid for
    // the call (the kernel may write the header's version back, hence `&raw mut`);
    // pid 0 is the calling thread. Nothing else is touched.
    let r = unsafe { libc::syscall(libc::SYS_capset, &raw mut header, data.as_ptr()) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Whether the current process holds any capability in its effective or bounding set.
pub fn has_any() -> bool {
    [
        CapSet::Effective,
        CapSet::Permitted,
        CapSet::Bounding,
        CapSet::Ambient,
    ]
    .iter()
    .any(|s| caps::read(None, *s).map(|c| !c.is_empty()).unwrap_or(true))
}

/// Keeps only `names` in the bounding set (nothing else changes: the permitted and
/// effective sets stay, so the caller keeps its powers; only what a later `execve`
/// can gain is limited). The exec zygote does this once for all its children.
pub fn limit_bounding(names: &[&str]) -> Result<()> {
    let keep = parse_names(names)?;
    let bounding = bounding_now().unwrap_or(u64::MAX);
    for cap in caps::all() {
        if !keep.contains(&cap) && bounding & (1u64 << cap.index()) != 0 {
            caps::drop(None, CapSet::Bounding, cap)
                .map_err(|e| SysError::other("prctl", format!("PR_CAPBSET_DROP {cap}"), e))?;
        }
    }
    Ok(())
}

/// Drops `name` (e.g. `chown`) from the effective, permitted, inheritable and bounding
/// sets, for good. Needs CAP_SETPCAP for the bounding set.
pub fn drop_one(name: &str) -> Result<()> {
    for cap in parse_names(&[name])? {
        for set in [
            CapSet::Bounding,
            CapSet::Inheritable,
            CapSet::Effective,
            CapSet::Permitted,
        ] {
            caps::drop(None, set, cap)
                .map_err(|e| SysError::other("capset", format!("drop {cap} from {set:?}"), e))?;
        }
    }
    Ok(())
}

fn parse_names(names: &[&str]) -> Result<caps::CapsHashSet> {
    let mut keep = caps::CapsHashSet::new();
    for n in names {
        let cap: caps::Capability = format!("CAP_{}", n.to_ascii_uppercase())
            .parse()
            .map_err(|e| SysError::other("capset", format!("unknown capability {n}"), e))?;
        keep.insert(cap);
    }
    Ok(keep)
}

/// Keeps only `names` (e.g. `chown`, `dac_override`) in the bounding, permitted and
/// effective sets and clears the inheritable and ambient ones. Needs CAP_SETPCAP in the
/// bounding step, so call it as root before anything else drops it.
pub fn keep_only(names: &[&str]) -> Result<()> {
    let keep = parse_names(names)?;
    let bounding = bounding_now().unwrap_or(u64::MAX);
    for cap in caps::all() {
        if !keep.contains(&cap) && bounding & (1u64 << cap.index()) != 0 {
            caps::drop(None, CapSet::Bounding, cap)
                .map_err(|e| SysError::other("prctl", format!("PR_CAPBSET_DROP {cap}"), e))?;
        }
    }
    for set in [CapSet::Ambient, CapSet::Inheritable] {
        caps::clear(None, set)
            .map_err(|e| SysError::other("capset", format!("clear {set:?}"), e))?;
    }
    for set in [CapSet::Effective, CapSet::Permitted] {
        caps::set(None, set, &keep)
            .map_err(|e| SysError::other("capset", format!("set {set:?}"), e))?;
    }
    Ok(())
}

/// Makes every permitted capability inheritable and ambient, so that they survive
/// exec for a process that is not root (in its user namespace).
pub fn all_ambient() -> Result<()> {
    let permitted = caps::read(None, CapSet::Permitted)
        .map_err(|e| SysError::other("capget", "permitted", e))?;
    caps::set(None, CapSet::Inheritable, &permitted)
        .map_err(|e| SysError::other("capset", "inheritable", e))?;
    for cap in permitted {
        caps::raise(None, CapSet::Ambient, cap)
            .map_err(|e| SysError::other("prctl", format!("PR_CAP_AMBIENT_RAISE {cap}"), e))?;
    }
    Ok(())
}
