//! Validation: every problem with a spec, listed at once.

use std::fmt;
use std::path::{Component, Path};

use serde::{Deserialize, Serialize};

use crate::{SandboxSpec, format_size};

/// Smallest memory cap accepted: below this no interpreter starts.
pub const MIN_MEMORY_BYTES: u64 = 8 << 20;
/// Largest CPU quota accepted.
pub const MAX_CPUS: f64 = 1024.0;
/// Largest pids cap accepted.
pub const MAX_PIDS: u32 = 1 << 22;
/// Longest lifetime accepted: one week.
pub const MAX_TIMEOUT_SECS: u64 = 7 * 24 * 3600;
/// Smallest `/tmp` accepted.
pub const MIN_TMP_BYTES: u64 = 1 << 20;

/// Sandbox paths a mount may not cover: the sandbox's own plumbing.
const RESERVED_TARGETS: &[&str] = &["/", "/proc", "/dev", "/sys", "/etc", "/usr", "/.stockade"];

/// One problem with a spec.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpecError {
    /// The field at fault, e.g. `limits.memory_bytes` or `mounts[1].target`.
    pub field: String,
    /// What is wrong, lowercase, naming the value.
    pub message: String,
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// Every problem found in a spec.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub struct SpecErrors(pub Vec<SpecError>);

impl fmt::Display for SpecErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid sandbox spec: ")?;
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                write!(f, "; ")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl SpecErrors {
    /// A single error, for callers (providers) that add their own refusals.
    pub fn one(field: impl Into<String>, message: impl Into<String>) -> SpecErrors {
        SpecErrors(vec![SpecError {
            field: field.into(),
            message: message.into(),
        }])
    }
}

/// A spec that passed [`SandboxSpec::validate`]. Providers accept only this.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ValidatedSpec(SandboxSpec);

impl ValidatedSpec {
    /// The validated spec.
    pub fn spec(&self) -> &SandboxSpec {
        &self.0
    }

    /// Gives the spec back, e.g. to change and validate again.
    pub fn into_inner(self) -> SandboxSpec {
        self.0
    }
}

impl std::ops::Deref for ValidatedSpec {
    type Target = SandboxSpec;
    fn deref(&self) -> &SandboxSpec {
        &self.0
    }
}

/// True when `p` is absolute and has no `.`/`..` components.
pub fn is_clean_absolute(p: &Path) -> bool {
    p.is_absolute()
        && p.components()
            .all(|c| matches!(c, Component::RootDir | Component::Normal(_)))
}

fn check_env_name(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("environment variable name is empty".into());
    }
    if name.contains('=') || name.contains('\0') {
        return Some(format!(
            "environment variable name {name:?} contains '=' or NUL"
        ));
    }
    None
}

impl SandboxSpec {
    /// Checks the spec and lists every problem at once.
    pub fn validate(self) -> Result<ValidatedSpec, SpecErrors> {
        let mut errs = Vec::new();
        let mut bad = |field: String, message: String| errs.push(SpecError { field, message });
        let l = &self.limits;
        if l.memory_bytes < MIN_MEMORY_BYTES {
            bad(
                "limits.memory_bytes".into(),
                format!(
                    "memory {} is below the minimum of {}",
                    format_size(l.memory_bytes),
                    format_size(MIN_MEMORY_BYTES)
                ),
            );
        }
        if !(l.cpus.is_finite() && l.cpus >= 0.01 && l.cpus <= MAX_CPUS) {
            bad(
                "limits.cpus".into(),
                format!("cpus {} must be between 0.01 and {MAX_CPUS}", l.cpus),
            );
        }
        if l.pids == 0 || l.pids > MAX_PIDS {
            bad(
                "limits.pids".into(),
                format!("pids {} must be between 1 and {MAX_PIDS}", l.pids),
            );
        }
        if l.tmp_bytes < MIN_TMP_BYTES {
            bad(
                "limits.tmp_bytes".into(),
                format!(
                    "/tmp size {} is below the minimum of 1MiB",
                    format_size(l.tmp_bytes)
                ),
            );
        }
        if self.timeout_secs == 0 || self.timeout_secs > MAX_TIMEOUT_SECS {
            bad(
                "timeout_secs".into(),
                format!(
                    "timeout {}s must be between 1 and {MAX_TIMEOUT_SECS}",
                    self.timeout_secs
                ),
            );
        }
        if self.idle_timeout_secs == Some(0) {
            bad(
                "idle_timeout_secs".into(),
                "idle timeout must be positive".into(),
            );
        }
        for (k, v) in &self.env {
            if let Some(m) = check_env_name(k) {
                bad(format!("env.{k}"), m);
            }
            if v.contains('\0') {
                bad(format!("env.{k}"), "value contains NUL".into());
            }
        }
        let mut targets = Vec::new();
        for (i, m) in self.mounts.iter().enumerate() {
            if !m.host.is_absolute() {
                bad(
                    format!("mounts[{i}].host"),
                    format!("host path {} is not absolute", m.host.display()),
                );
            }
            if !is_clean_absolute(&m.target) {
                bad(
                    format!("mounts[{i}].target"),
                    format!(
                        "target {} must be absolute without . or ..",
                        m.target.display()
                    ),
                );
            } else if RESERVED_TARGETS.iter().any(|r| {
                let r = Path::new(r);
                m.target == r || (r != Path::new("/") && m.target.starts_with(r))
            }) {
                bad(
                    format!("mounts[{i}].target"),
                    format!(
                        "target {} is reserved for the sandbox itself",
                        m.target.display()
                    ),
                );
            } else if targets.contains(&&m.target) {
                bad(
                    format!("mounts[{i}].target"),
                    format!("target {} is mounted twice", m.target.display()),
                );
            }
            targets.push(&m.target);
        }
        if let Some(w) = &self.workdir {
            if !is_clean_absolute(w) {
                bad(
                    "workdir".into(),
                    format!("workdir {} must be absolute without . or ..", w.display()),
                );
            } else if ["/proc", "/sys", "/dev"].iter().any(|k| w.starts_with(k))
                && !w.starts_with("/dev/shm")
            {
                bad(
                    "workdir".into(),
                    format!(
                        "workdir {} is inside a kernel file system (/proc, /sys, /dev): \
                         choose a directory such as /tmp or a mount's target",
                        w.display()
                    ),
                );
            }
        }
        let h = &self.hostname;
        if h.is_empty()
            || h.len() > 63
            || !h.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            || h.starts_with('-')
        {
            bad(
                "hostname".into(),
                format!("hostname {h:?} is not a valid host name"),
            );
        }
        if let Some(img) = &self.image
            && (img.trim().is_empty() || img.contains(char::is_whitespace))
        {
            bad(
                "image".into(),
                format!("image reference {img:?} is empty or has whitespace"),
            );
        }
        if let Some(p) = self.network.policy() {
            for (field, message) in p.problems() {
                bad(field, message);
            }
        }
        if errs.is_empty() {
            Ok(ValidatedSpec(self))
        } else {
            Err(SpecErrors(errs))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Mount;

    #[test]
    fn default_validates() {
        SandboxSpec::default().validate().unwrap();
    }

    #[test]
    fn lists_every_problem() {
        let mut s = SandboxSpec::default();
        s.limits.memory_bytes = 1024;
        s.limits.cpus = 0.0;
        s.limits.pids = 0;
        s.timeout_secs = 0;
        s.env.insert("A=B".into(), "x".into());
        s.mounts.push(Mount {
            host: "rel".into(),
            target: "/work/../etc".into(),
            writable: false,
        });
        s.mounts.push(Mount {
            host: "/x".into(),
            target: "/proc/sys".into(),
            writable: true,
        });
        s.workdir = Some("tmp".into());
        s.hostname = "bad host".into();
        s.network = crate::Network::Policy(crate::EgressPolicy {
            allow: vec!["pypi.org".into(), "10.1.2.3/24:0".into(), "*.".into()],
            deny: vec!["nope/ftp".into()],
            credentials: Vec::new(),
        });
        let errs = s.validate().unwrap_err();
        let fields: Vec<_> = errs.0.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "limits.memory_bytes",
                "limits.cpus",
                "limits.pids",
                "timeout_secs",
                "env.A=B",
                "mounts[0].host",
                "mounts[0].target",
                "mounts[1].target",
                "workdir",
                "hostname",
                "network.allow[1]",
                "network.allow[1]",
                "network.allow[2]",
                "network.deny[0]"
            ]
        );
        insta::assert_snapshot!(errs.to_string());
    }

    #[test]
    fn duplicate_mount_targets_are_refused() {
        let mut s = SandboxSpec::default();
        for _ in 0..2 {
            s.mounts.push(Mount {
                host: "/srv".into(),
                target: "/work".into(),
                writable: false,
            });
        }
        let errs = s.validate().unwrap_err();
        assert!(errs.to_string().contains("mounted twice"), "{errs}");
    }
}
