//! Landlock: read and execute everywhere, write only below chosen paths.

use landlock::{
    ABI, Access, AccessFs, CompatLevel, Compatible, Ruleset, RulesetAttr, RulesetCreatedAttr,
    RulesetStatus, Scope, path_beneath_rules,
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
    restrict_min(writable, None)
}

/// Like [`restrict`], accepting a kernel whose landlock ABI is `min_abi` (1 to 3)
/// or newer instead of [`REQUIRED_ABI`] (`None`).
pub fn restrict_min(writable: &[String], min_abi: Option<u8>) -> Result<String> {
    let required = match min_abi {
        Some(1) => ABI::V1,
        Some(2) => ABI::V2,
        _ => REQUIRED_ABI,
    };
    let err = |e: &dyn std::fmt::Display| SysError::other("landlock", writable.join(","), e);
    let ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(required))
        .map_err(|e| err(&e))?
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(BEST_ABI))
        .map_err(|e| err(&e))?
        .scope(Scope::from_all(BEST_ABI))
        .map_err(|e| err(&e))?
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
        .map_err(|e| err(&e))?;
    let status = ruleset.restrict_self().map_err(|e| err(&e))?;
    match status.ruleset {
        RulesetStatus::FullyEnforced => Ok("landlock: fully enforced".to_string()),
        RulesetStatus::PartiallyEnforced => {
            Ok("landlock: enforced (kernel lacks some newer rights)".to_string())
        }
        RulesetStatus::NotEnforced => Err(err(&"kernel did not enforce the ruleset")),
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
