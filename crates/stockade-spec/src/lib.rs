//! The sandbox spec: what a caller asks for, with secure defaults.
//!
//! `SandboxSpec::default()` is the secure spec: no network, read-only root, a 64 MiB
//! writable `/tmp`, 64 pids, 512 MiB of memory without swap, one CPU, a 300 s lifetime,
//! no new privileges, no capabilities, a seccomp allowlist, landlock, and uid/gid 1000.
//! Every field is an explicit opt-out. [`SandboxSpec::validate`] checks a spec and lists
//! every problem at once; providers accept only a [`ValidatedSpec`].
//!
//! This crate does no I/O.

mod language;
mod network;
mod size;
mod validate;

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use language::{Language, LanguagePreset, PRESETS};
pub use network::{
    Credential, DEFAULT_ALLOW_PORTS, EgressPolicy, MAX_CREDENTIALS, MAX_ENTRY_PORTS,
    MAX_POLICY_ENTRIES, NetRule, NetTarget, Network, Ports, Protocol, REDACTED,
};
pub use size::{format_size, parse_size};
pub use validate::{SpecError, SpecErrors, ValidatedSpec};

/// Default sandbox lifetime: 300 s.
pub const DEFAULT_TIMEOUT_SECS: u64 = 300;
/// Default memory cap: 512 MiB, no swap.
pub const DEFAULT_MEMORY_BYTES: u64 = 512 << 20;
/// Default CPU quota: one CPU.
pub const DEFAULT_CPUS: f64 = 1.0;
/// Default process/thread cap.
pub const DEFAULT_PIDS: u32 = 64;
/// Default size of the writable `/tmp` tmpfs: 64 MiB.
pub const DEFAULT_TMP_BYTES: u64 = 64 << 20;
/// Default uid and gid of the code inside the sandbox.
pub const DEFAULT_UID: u32 = 1000;
/// Default hostname inside the sandbox.
pub const DEFAULT_HOSTNAME: &str = "sandbox";
/// Default working directory inside the sandbox (writable).
pub const DEFAULT_WORKDIR: &str = "/tmp";
/// Default PATH inside the sandbox.
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// Default cap on each captured output stream of an exec: 1 MiB.
pub const DEFAULT_OUTPUT_LIMIT_BYTES: u64 = 1 << 20;

/// Resource limits. Defaults are the secure defaults.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Memory cap in bytes (default 512 MiB); swap is not allowed. Accepts "1g" in serde.
    #[serde(with = "size::bytes_or_string")]
    pub memory_bytes: u64,
    /// CPU quota in CPUs (default 1.0).
    pub cpus: f64,
    /// Maximum number of processes and threads (default 64).
    pub pids: u32,
    /// Size of the writable `/tmp` tmpfs in bytes (default 64 MiB).
    #[serde(with = "size::bytes_or_string")]
    pub tmp_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            memory_bytes: DEFAULT_MEMORY_BYTES,
            cpus: DEFAULT_CPUS,
            pids: DEFAULT_PIDS,
            tmp_bytes: DEFAULT_TMP_BYTES,
        }
    }
}

/// A host path made visible inside the sandbox.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mount {
    /// Absolute path on the host.
    pub host: PathBuf,
    /// Absolute path inside the sandbox.
    pub target: PathBuf,
    /// Writable from inside (default false: read-only).
    #[serde(default)]
    pub writable: bool,
}

impl Mount {
    /// Parses `HOST:TARGET[:rw|:ro]`, the CLI form.
    pub fn parse(text: &str) -> Result<Mount, String> {
        let parts: Vec<&str> = text.split(':').collect();
        let (host, target, mode) = match parts.as_slice() {
            [h, t] => (*h, *t, "ro"),
            [h, t, m] => (*h, *t, *m),
            _ => return Err(format!("mount {text:?} is not HOST:PATH[:rw]")),
        };
        let writable = match mode {
            "rw" => true,
            "ro" => false,
            other => return Err(format!("mount {text:?} has mode {other:?}; use rw or ro")),
        };
        Ok(Mount {
            host: host.into(),
            target: target.into(),
            writable,
        })
    }
}

/// The identity the sandboxed code runs as.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct User {
    /// uid inside the sandbox (default 1000).
    pub uid: u32,
    /// gid inside the sandbox (default 1000).
    pub gid: u32,
}

impl Default for User {
    fn default() -> Self {
        User {
            uid: DEFAULT_UID,
            gid: DEFAULT_UID,
        }
    }
}

impl User {
    /// Parses `UID[:GID]` (gid defaults to the uid).
    pub fn parse(text: &str) -> Result<User, String> {
        let (u, g) = match text.split_once(':') {
            Some((u, g)) => (u, Some(g)),
            None => (text, None),
        };
        let uid: u32 = u
            .parse()
            .map_err(|_| format!("user {text:?} is not UID[:GID]"))?;
        let gid: u32 = match g {
            Some(g) => g
                .parse()
                .map_err(|_| format!("user {text:?} is not UID[:GID]"))?,
            None => uid,
        };
        Ok(User { uid, gid })
    }
}

/// Kernel hardening applied to every exec. Each is on by default; turning one off is
/// an explicit, reported opt-out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Hardening {
    /// Syscall allowlist (default on).
    pub seccomp: bool,
    /// Landlock filesystem rules: read-only everywhere but `/tmp` and writable mounts
    /// (default on).
    pub landlock: bool,
    /// `PR_SET_NO_NEW_PRIVS` (default on).
    pub no_new_privileges: bool,
    /// Drop every capability from every set (default on).
    pub drop_capabilities: bool,
}

impl Default for Hardening {
    fn default() -> Self {
        Hardening {
            seccomp: true,
            landlock: true,
            no_new_privileges: true,
            drop_capabilities: true,
        }
    }
}

/// What a caller asks for. `Default` is the secure default; change a field to opt out.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SandboxSpec {
    /// Image reference; `None` runs on read-only views of the host's `/usr` (host rootfs).
    pub image: Option<String>,
    /// Network access (default none: loopback only); see [`Network`].
    pub network: Network,
    /// Writable root: a tmpfs overlay over the root, discarded at destroy (default false).
    pub writable: bool,
    /// Sandbox lifetime in seconds (default 300); at its end everything is killed.
    pub timeout_secs: u64,
    /// Destroy the sandbox after this long without execs or file operations
    /// (default: none; the lifetime still applies).
    pub idle_timeout_secs: Option<u64>,
    /// Resource limits.
    pub limits: Limits,
    /// Extra environment variables (the environment is otherwise only PATH, HOME, LANG).
    pub env: BTreeMap<String, String>,
    /// Host paths mounted inside (read-only unless `writable`).
    pub mounts: Vec<Mount>,
    /// Working directory of execs (default `/tmp`).
    pub workdir: Option<PathBuf>,
    /// Identity of the code inside (default 1000:1000).
    pub user: User,
    /// Hostname inside (default `sandbox`).
    pub hostname: String,
    /// Kernel hardening opt-outs.
    pub hardening: Hardening,
    /// Free-form labels for the caller's bookkeeping.
    pub labels: BTreeMap<String, String>,
}

impl Default for SandboxSpec {
    fn default() -> Self {
        SandboxSpec {
            image: None,
            network: Network::None,
            writable: false,
            timeout_secs: DEFAULT_TIMEOUT_SECS,
            idle_timeout_secs: None,
            limits: Limits::default(),
            env: BTreeMap::new(),
            mounts: Vec::new(),
            workdir: None,
            user: User::default(),
            hostname: DEFAULT_HOSTNAME.to_string(),
            hardening: Hardening::default(),
            labels: BTreeMap::new(),
        }
    }
}

impl SandboxSpec {
    /// The working directory execs start in.
    pub fn effective_workdir(&self) -> PathBuf {
        self.workdir
            .clone()
            .unwrap_or_else(|| PathBuf::from(DEFAULT_WORKDIR))
    }

    /// The base environment of every exec: PATH, HOME, LANG, then the caller's `env`.
    pub fn base_env(&self) -> BTreeMap<String, String> {
        let mut env = BTreeMap::new();
        env.insert("PATH".to_string(), DEFAULT_PATH.to_string());
        env.insert("HOME".to_string(), "/tmp".to_string());
        env.insert("LANG".to_string(), "C.UTF-8".to_string());
        for (k, v) in &self.env {
            env.insert(k.clone(), v.clone());
        }
        env
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_the_secure_spec() {
        let s = SandboxSpec::default();
        assert_eq!(s.network, Network::None);
        assert!(!s.writable);
        assert_eq!(s.timeout_secs, 300);
        assert_eq!(s.limits.memory_bytes, 512 << 20);
        assert_eq!(s.limits.pids, 64);
        assert_eq!(s.limits.tmp_bytes, 64 << 20);
        assert_eq!(s.limits.cpus, 1.0);
        assert_eq!(
            s.user,
            User {
                uid: 1000,
                gid: 1000
            }
        );
        assert_eq!(s.hostname, "sandbox");
        assert!(s.hardening.seccomp && s.hardening.landlock);
        assert!(s.hardening.no_new_privileges && s.hardening.drop_capabilities);
        insta::assert_json_snapshot!(s);
    }

    #[test]
    fn serde_accepts_sizes_and_refuses_unknown_fields() {
        let s: SandboxSpec =
            serde_json::from_str(r#"{"limits":{"memory_bytes":"1g"},"network":"egress"}"#).unwrap();
        assert_eq!(s.limits.memory_bytes, 1 << 30);
        assert_eq!(s.limits.pids, 64, "unset fields keep their secure default");
        assert_eq!(s.network, Network::Egress);
        let err = serde_json::from_str::<SandboxSpec>(r#"{"netwrok":"egress"}"#).unwrap_err();
        assert!(err.to_string().contains("netwrok"), "{err}");
    }

    #[test]
    fn base_env_is_minimal_plus_caller() {
        let mut s = SandboxSpec::default();
        s.env.insert("FOO".into(), "bar".into());
        let env = s.base_env();
        assert_eq!(
            env.keys().collect::<Vec<_>>(),
            ["FOO", "HOME", "LANG", "PATH"]
        );
    }

    #[test]
    fn parses_mounts_and_users() {
        assert_eq!(
            Mount::parse("/data:/work:rw").unwrap(),
            Mount {
                host: "/data".into(),
                target: "/work".into(),
                writable: true
            }
        );
        assert!(!Mount::parse("/data:/work").unwrap().writable);
        assert!(Mount::parse("/data").is_err());
        assert!(Mount::parse("/a:/b:rx").is_err());
        assert_eq!(User::parse("0").unwrap(), User { uid: 0, gid: 0 });
        assert_eq!(
            User::parse("1001:100").unwrap(),
            User {
                uid: 1001,
                gid: 100
            }
        );
        assert!(User::parse("bob").is_err());
    }
}
