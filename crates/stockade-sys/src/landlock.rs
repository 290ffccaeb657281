//! Landlock: read and execute everywhere, write only below chosen paths.

use landlock::{
    ABI, Access, AccessFs, CompatLevel, Compatible, Ruleset, RulesetAttr, RulesetCreated,
    RulesetCreatedAttr, RulesetStatus, Scope, path_beneath_rules,
};

use crate::{Result, SysError};

/// Oldest ABI we require: V3 adds truncate control, which a read-only policy needs.
pub const REQUIRED_ABI: ABI = ABI::V3;
/// Newest ABI whose rights we use when the kernel has them.
pub const BEST_ABI: ABI = ABI::V6;

/// Device files that must stay writable (writing to /dev/null is not an escape).
const WRITABLE_DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/tty",
    "/dev/ptmx",
];

/// Restricts the calling thread and its future children: every path readable and
/// executable, writes only below `writable` (plus the harmless device files).
/// Fails when the kernel lacks Landlock ABI v3. Returns a line saying what applied.
pub fn restrict(writable: &[String]) -> Result<String> {
    restrict_min(writable, None, true)
}

/// Like [`restrict`], accepting a kernel whose landlock ABI is `min_abi` (1 to 3)
/// or newer instead of [`REQUIRED_ABI`] (`None`). `own_scope`: signals and abstract
/// unix sockets reach only what this process and its children start (landlock's
/// scopes); without it they reach every process of the sandbox that the kernel's
/// uid checks let them (an exec signals what an earlier one started).
pub fn restrict_min(writable: &[String], min_abi: Option<u8>, own_scope: bool) -> Result<String> {
    enforce(build(writable, min_abi, own_scope)?, writable)
}

/// The ruleset of [`restrict_min`], created but not entered.
fn build(writable: &[String], min_abi: Option<u8>, own_scope: bool) -> Result<RulesetCreated> {
    let required = match min_abi {
        Some(1) => ABI::V1,
        Some(2) => ABI::V2,
        _ => REQUIRED_ABI,
    };
    let err = |e: &dyn std::fmt::Display| SysError::other("landlock", writable.join(","), e);
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(required))
        .map_err(|e| err(&e))?
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(BEST_ABI))
        .map_err(|e| err(&e))?;
    if own_scope {
        ruleset = ruleset
            .scope(Scope::from_all(BEST_ABI))
            .map_err(|e| err(&e))?;
    }
    ruleset
        .create()
        .map_err(|e| err(&e))?
        .add_rules(path_beneath_rules(["/"], AccessFs::from_read(BEST_ABI)))
        .map_err(|e| err(&e))?
        .add_rules(path_beneath_rules(writable, AccessFs::from_all(BEST_ABI)))
        .map_err(|e| err(&e))?
        .add_rules(path_beneath_rules(
            WRITABLE_DEVICES
                .iter()
                .filter(|p| std::path::Path::new(p).exists()),
            AccessFs::from_file(BEST_ABI),
        ))
        .map_err(|e| err(&e))
}

/// Enters `ruleset` (and sets no_new_privs).
fn enforce(ruleset: RulesetCreated, writable: &[String]) -> Result<String> {
    let err = |e: &dyn std::fmt::Display| SysError::other("landlock", writable.join(","), e);
    let status = ruleset.restrict_self().map_err(|e| err(&e))?;
    match status.ruleset {
        RulesetStatus::FullyEnforced => Ok("landlock: fully enforced".to_string()),
        RulesetStatus::PartiallyEnforced => {
            Ok("landlock: enforced (kernel lacks some newer rights)".to_string())
        }
        RulesetStatus::NotEnforced => Err(err(&"kernel did not enforce the ruleset")),
    }
}

/// The ruleset of [`restrict_min`] built once, for processes forked later to enter
/// (the exec zygote's children): entering it is a `dup` and `landlock_restrict_self`
/// instead of about 45 system calls (the ruleset, then for each path an open, two
/// stats, the rule and a close). The rules name the directories the paths resolved
/// to when it was built; a caller keeps it only for paths that cannot be replaced
/// while it lives (mount points in a read-only root).
#[derive(Debug)]
pub struct Prepared {
    writable: Vec<String>,
    min_abi: Option<u8>,
    own_scope: bool,
    ruleset: RulesetCreated,
    fd: u32,
}

impl Prepared {
    /// Builds the ruleset for `writable` and `min_abi`. The caller must be
    /// single-threaded (the ruleset's descriptor is found as the lowest free one).
    pub fn new(writable: &[String], min_abi: Option<u8>, own_scope: bool) -> Result<Prepared> {
        let err = |e: &dyn std::fmt::Display| SysError::other("landlock", writable.join(","), e);
        // A path that is missing now gets no rule (`path_beneath_rules` skips it): one
        // made later would, in a ruleset built then. So none may be missing.
        if let Some(w) = writable.iter().find(|w| !std::path::Path::new(w).exists()) {
            return Err(err(&format!("{w} does not exist")));
        }
        // The kernel gives a new descriptor the lowest free number: the ruleset's
        // (created before the rules open their paths) is the one this probe had.
        let probe = std::fs::File::open("/").map_err(|e| err(&e))?;
        let fd = std::os::fd::AsRawFd::as_raw_fd(&probe) as u32;
        drop(probe);
        let ruleset = build(writable, min_abi, own_scope)?;
        // (Another thread may have taken the number, and closed it again: then it is
        // no descriptor at all.)
        let link = std::fs::read_link(format!("/proc/self/fd/{fd}"))
            .map_err(|e| err(&format!("descriptor {fd} is not the ruleset ({e})")))?;
        if link.as_os_str() != "anon_inode:[landlock-ruleset]" {
            return Err(err(&format!(
                "descriptor {fd} is {}, not the ruleset",
                link.display()
            )));
        }
        Ok(Prepared {
            writable: writable.to_vec(),
            min_abi,
            own_scope,
            ruleset,
            fd,
        })
    }

    /// Whether it is the ruleset [`restrict_min`] would build for these arguments.
    pub fn is_for(&self, writable: &[String], min_abi: Option<u8>, own_scope: bool) -> bool {
        self.writable == writable && self.min_abi == min_abi && self.own_scope == own_scope
    }

    /// Its descriptor (close-on-exec), for a caller that closes the others.
    pub fn fd(&self) -> u32 {
        self.fd
    }

    /// Enters it, as [`restrict_min`] does.
    pub fn restrict_self(&self) -> Result<String> {
        let copy = self
            .ruleset
            .try_clone()
            .map_err(|e| SysError::other("landlock", self.writable.join(","), e))?;
        enforce(copy, &self.writable)
    }
}

/// The Landlock ABI of the running kernel (0 when unsupported).
pub fn kernel_abi() -> i32 {
    // landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION) returns the ABI.
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with a null attr pointer, size 0 and the VERSION flag the call reads no
    // memory and only returns the ABI number (or -1 with errno).
    let r = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if r < 0 { 0 } else { r as i32 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prepared_ruleset_finds_its_descriptor() {
        let writable = ["/tmp".to_string()];
        // Other tests' threads may take a descriptor between the probe and the
        // ruleset (the caller must be single-threaded): then it says so.
        let p = (0..20)
            .find_map(|_| match Prepared::new(&writable, None, false) {
                Ok(p) => Some(p),
                Err(e) => {
                    assert!(e.to_string().contains("not the ruleset"), "{e}");
                    None
                }
            })
            .expect("the ruleset's descriptor in 20 tries");
        assert!(p.is_for(&writable, None, false));
        assert!(!p.is_for(&writable, None, true));
        assert!(!p.is_for(&writable, Some(1), false));
        assert!(!p.is_for(&["/".to_string()], None, false));
        let link = std::fs::read_link(format!("/proc/self/fd/{}", p.fd())).unwrap();
        assert_eq!(link.to_str(), Some("anon_inode:[landlock-ruleset]"));
        // A missing writable path is refused (a ruleset built later would have it).
        assert!(Prepared::new(&["/no/such/dir".to_string()], None, false).is_err());
    }
}
