//! The hardening report: each wall a provider built around a sandbox, as a typed
//! [`Wall`] (`inspect --json`, `SandboxInfo::applied`), shown one line each
//! (`kind: detail`) by `inspect`.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Which wall a [`Wall`] is. A sandbox has each kind at most a few times (a limit per
/// resource, a mount per directory).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WallKind {
    /// What holds the code apart from the host: namespaces, a container, gVisor's
    /// kernel, a virtual machine, a WASI instance.
    Isolation,
    /// The root filesystem.
    Root,
    /// The sandbox's `/tmp`.
    Tmp,
    /// Network reach.
    Network,
    /// Memory, CPU and process limits (cgroups, a guest's RAM, fuel).
    Limits,
    /// The user the code runs as.
    User,
    /// How the sandbox's ids map to the host's.
    UserNamespace,
    /// The sandbox's lifetime.
    Lifetime,
    /// Capabilities.
    Capabilities,
    /// `no_new_privs`.
    NoNewPrivs,
    /// The system call filter.
    Seccomp,
    /// The Landlock filesystem rules.
    Landlock,
    /// How the host reaches the agent inside.
    AgentChannel,
    /// gVisor's platform.
    Platform,
    /// A host directory shared into the sandbox.
    Mount,
    /// Where the sandbox's state stands (a microVM paused to disk, a restored copy).
    State,
}

impl WallKind {
    /// Every kind, in report order.
    pub const ALL: [WallKind; 16] = [
        WallKind::Isolation,
        WallKind::Root,
        WallKind::Tmp,
        WallKind::Network,
        WallKind::Limits,
        WallKind::User,
        WallKind::UserNamespace,
        WallKind::Lifetime,
        WallKind::Capabilities,
        WallKind::NoNewPrivs,
        WallKind::Seccomp,
        WallKind::Landlock,
        WallKind::AgentChannel,
        WallKind::Platform,
        WallKind::Mount,
        WallKind::State,
    ];

    /// The name a line starts with (also the JSON name).
    pub fn name(self) -> &'static str {
        match self {
            WallKind::Isolation => "isolation",
            WallKind::Root => "root",
            WallKind::Tmp => "tmp",
            WallKind::Network => "network",
            WallKind::Limits => "limits",
            WallKind::User => "user",
            WallKind::UserNamespace => "user_namespace",
            WallKind::Lifetime => "lifetime",
            WallKind::Capabilities => "capabilities",
            WallKind::NoNewPrivs => "no_new_privs",
            WallKind::Seccomp => "seccomp",
            WallKind::Landlock => "landlock",
            WallKind::AgentChannel => "agent_channel",
            WallKind::Platform => "platform",
            WallKind::Mount => "mount",
            WallKind::State => "state",
        }
    }

    /// The kind named `name` ([`WallKind::name`]).
    pub fn from_name(name: &str) -> Option<WallKind> {
        WallKind::ALL.into_iter().find(|k| k.name() == name)
    }
}

impl fmt::Display for WallKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One wall of a sandbox, as its provider built it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "WallRepr")]
pub struct Wall {
    /// Which wall.
    pub kind: WallKind,
    /// Whether it stands: false where the spec opted out of it, or where this provider
    /// or host has none (the detail says which).
    pub enforced: bool,
    /// What it is, in words: sizes, paths, ids, rules.
    pub detail: String,
}

impl Wall {
    /// A wall that stands.
    pub fn on(kind: WallKind, detail: impl Into<String>) -> Wall {
        Wall {
            kind,
            enforced: true,
            detail: detail.into(),
        }
    }

    /// A wall that does not stand (opted out, or not had here); `detail` says why.
    pub fn off(kind: WallKind, detail: impl Into<String>) -> Wall {
        Wall {
            kind,
            enforced: false,
            detail: detail.into(),
        }
    }

    /// [`Wall::on`] or [`Wall::off`] as `enforced` says.
    pub fn new(kind: WallKind, enforced: bool, detail: impl Into<String>) -> Wall {
        Wall {
            kind,
            enforced,
            detail: detail.into(),
        }
    }
}

/// `kind: detail`, with `(not enforced)` after a wall that does not stand.
impl fmt::Display for Wall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind, self.detail)?;
        if !self.enforced {
            f.write_str(" (not enforced)")?;
        }
        Ok(())
    }
}

/// A wall as stored: typed, or a line `name: detail` as state written before the report
/// was typed holds it (a sandbox living across an upgrade keeps its report).
#[derive(Deserialize)]
#[serde(untagged)]
enum WallRepr {
    Typed {
        kind: WallKind,
        enforced: bool,
        detail: String,
    },
    Line(String),
}

impl From<WallRepr> for Wall {
    fn from(r: WallRepr) -> Wall {
        match r {
            WallRepr::Typed {
                kind,
                enforced,
                detail,
            } => Wall {
                kind,
                enforced,
                detail,
            },
            WallRepr::Line(line) => {
                let (name, detail) = line.split_once(": ").unwrap_or(("", line.as_str()));
                let kind = legacy_kind(name);
                // Such lines said a missing wall in capitals.
                let enforced = !["OFF", "NOT ", "NONE"].iter().any(|w| detail.contains(w));
                let detail = if kind == WallKind::Isolation && !name.is_empty() {
                    format!("{name}: {detail}")
                } else {
                    detail.to_string()
                };
                Wall {
                    kind,
                    enforced,
                    detail,
                }
            }
        }
    }
}

/// The kind of an untyped line by the name it starts with.
fn legacy_kind(name: &str) -> WallKind {
    match name {
        "/tmp" => WallKind::Tmp,
        "cgroups" | "guest cgroup" | "memory" | "cpu" | "pids" | "fuel" => WallKind::Limits,
        "user namespace" => WallKind::UserNamespace,
        "agent socket" | "agent channel" => WallKind::AgentChannel,
        "workspace" => WallKind::Mount,
        n => WallKind::from_name(n).unwrap_or(WallKind::Isolation),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walls_are_typed_on_the_wire_and_lines_in_words() {
        let w = Wall::off(WallKind::Seccomp, "off (opt-out)");
        let json = serde_json::to_value(&w).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"kind": "seccomp", "enforced": false, "detail": "off (opt-out)"})
        );
        assert_eq!(serde_json::from_value::<Wall>(json).unwrap(), w);
        assert_eq!(w.to_string(), "seccomp: off (opt-out) (not enforced)");
        assert_eq!(
            Wall::on(WallKind::UserNamespace, "rootless").to_string(),
            "user_namespace: rootless"
        );
        for k in WallKind::ALL {
            assert_eq!(WallKind::from_name(k.name()), Some(k));
            assert_eq!(serde_json::to_value(k).unwrap(), k.name());
        }
    }

    #[test]
    fn lines_of_older_state_read_as_walls() {
        let read = |line: &str| serde_json::from_value::<Wall>(serde_json::json!(line)).unwrap();
        assert_eq!(
            read("seccomp: OFF (opt-out)"),
            Wall::off(WallKind::Seccomp, "OFF (opt-out)")
        );
        assert_eq!(
            read("cgroups: memory 512MiB (no swap)"),
            Wall::on(WallKind::Limits, "memory 512MiB (no swap)")
        );
        assert_eq!(
            read("namespaces: user, mount"),
            Wall::on(WallKind::Isolation, "namespaces: user, mount")
        );
        assert_eq!(read("no colon").kind, WallKind::Isolation);
    }
}
