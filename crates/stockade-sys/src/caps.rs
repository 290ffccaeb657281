//! Dropping capabilities.

use caps::CapSet;

use crate::{Result, SysError};

/// Drops every capability from the bounding set (needs CAP_SETPCAP, so call it before
/// changing uid).
pub fn drop_bounding() -> Result<()> {
    caps::clear(None, CapSet::Bounding)
        .map_err(|e| SysError::other("prctl", "PR_CAPBSET_DROP all", e))
}

/// Clears the ambient, inheritable, effective and permitted sets.
pub fn clear_all() -> Result<()> {
    for set in [
        CapSet::Ambient,
        CapSet::Inheritable,
        CapSet::Effective,
        CapSet::Permitted,
    ] {
        caps::clear(None, set)
            .map_err(|e| SysError::other("capset", format!("clear {set:?}"), e))?;
    }
    Ok(())
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
