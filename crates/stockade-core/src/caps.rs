//! What a provider can enforce, and the check that refuses specs it cannot honour.

use serde::{Deserialize, Serialize};
use stockade_spec::{Network, SpecError, SpecErrors, ValidatedSpec};

/// Features a provider supports. A spec asking for one that is missing is refused
/// with every reason listed, never silently weakened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capabilities {
    /// Runs on read-only views of the host's `/usr` (no image).
    pub host_rootfs: bool,
    /// Runs OCI images.
    pub images: bool,
    /// Gives egress when `network` is on.
    pub network_egress: bool,
    /// Enforces an egress policy (`network` as an allowlist): its own resolver,
    /// firewall sets, and recorded denials.
    #[serde(default)]
    pub network_policy: bool,
    /// Writable root overlay.
    pub writable_root: bool,
    /// Host path mounts.
    pub mounts: bool,
    /// Enforces a memory cap.
    pub memory_limit: bool,
    /// Enforces a CPU quota.
    pub cpu_limit: bool,
    /// Enforces a pids cap.
    pub pids_limit: bool,
    /// Runs code as a chosen uid/gid.
    pub users: bool,
    /// Applies seccomp (when false, `hardening.seccomp` must be turned off explicitly).
    pub seccomp: bool,
    /// Applies landlock.
    pub landlock: bool,
    /// Runs OCI images from this host's Stockade image store (`$STOCKADE_HOME/images`),
    /// pulling a missing one into it. A caller on this host may then pull an image
    /// there first (to show progress) and read its config (its command, its
    /// interpreters) from the store. False when images live elsewhere (dockerd, a
    /// daemon's host, WASI runtimes): the provider fetches them itself at create.
    pub local_images: bool,
    /// The optional verbs it serves.
    #[serde(default)]
    pub verbs: Verbs,
}

/// The verbs a provider may serve besides create, exec, files, destroy, list, inspect
/// and gc. Each provider declares its own; the facade's table of them is the one
/// source of the CLI's help texts, `doctor` and the documents' provider table, and
/// the conformance suite checks every declaration against what the provider does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verbs {
    /// `pause` and `resume`, keeping processes and memory.
    pub pause: bool,
    /// `fork`: copies of a running sandbox, each with its own id.
    pub fork: bool,
    /// Named snapshots: `snapshot`, `snapshots`, `remove_snapshot` and starting from one.
    pub snapshots: bool,
    /// A live sandbox's egress policy replaced (`set_network`), and its refusals read
    /// (`egress_denied`).
    pub egress_control: bool,
    /// Resource usage of a live sandbox (`usage`).
    pub usage: bool,
    /// File operations as a chosen uid (`file_as`; the sandbox user is always served).
    pub files_as_user: bool,
    /// Execs on a terminal ([`ExecRequest::tty`](crate::ExecRequest::tty), `exec -t`):
    /// keys typed, the size changed, the command its session's leader.
    pub terminals: bool,
}

/// One optional verb, for tables and checks over [`Verbs`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verb {
    Pause,
    Fork,
    Snapshots,
    EgressControl,
    Usage,
    FilesAsUser,
    Terminals,
}

impl Verb {
    /// Every verb, in the order tables show them.
    pub const ALL: [Verb; 7] = [
        Verb::Pause,
        Verb::Fork,
        Verb::Snapshots,
        Verb::EgressControl,
        Verb::Usage,
        Verb::FilesAsUser,
        Verb::Terminals,
    ];

    /// What a table's column says.
    pub fn title(self) -> &'static str {
        match self {
            Verb::Pause => "pause / resume",
            Verb::Fork => "fork",
            Verb::Snapshots => "named snapshots",
            Verb::EgressControl => "live egress policy (`net`, `events`)",
            Verb::Usage => "usage",
            Verb::FilesAsUser => "files as another user",
            Verb::Terminals => "terminals (`exec -t`)",
        }
    }
}

impl Verbs {
    /// Whether `verb` is served.
    pub fn has(&self, verb: Verb) -> bool {
        match verb {
            Verb::Pause => self.pause,
            Verb::Fork => self.fork,
            Verb::Snapshots => self.snapshots,
            Verb::EgressControl => self.egress_control,
            Verb::Usage => self.usage,
            Verb::FilesAsUser => self.files_as_user,
            Verb::Terminals => self.terminals,
        }
    }
}

impl Capabilities {
    /// Everything a Linux provider with full isolation supports (where its images
    /// come from is not isolation: `local_images` is false here).
    pub const FULL_LINUX: Capabilities = Capabilities {
        host_rootfs: true,
        images: true,
        network_egress: true,
        network_policy: true,
        writable_root: true,
        mounts: true,
        memory_limit: true,
        cpu_limit: true,
        pids_limit: true,
        users: true,
        seccomp: true,
        landlock: true,
        local_images: false,
        verbs: Verbs {
            pause: true,
            fork: false,
            snapshots: false,
            egress_control: true,
            usage: false,
            files_as_user: true,
            terminals: true,
        },
    };

    /// Refuses a spec that needs something this provider lacks, naming each gap.
    pub fn check(&self, provider: &str, spec: &ValidatedSpec) -> Result<(), SpecErrors> {
        let mut errs = Vec::new();
        let mut need = |ok: bool, field: &str, what: &str| {
            if !ok {
                errs.push(SpecError {
                    field: field.into(),
                    message: format!("the {provider} provider cannot {what}"),
                });
            }
        };
        need(
            spec.image.is_some() || self.host_rootfs,
            "image",
            "run without an image; name one",
        );
        need(
            spec.image.is_none() || self.images,
            "image",
            "run OCI images",
        );
        match &spec.network {
            Network::None => {}
            Network::Egress => need(
                self.network_egress,
                "network",
                "give network egress (the native, docker and microvm providers do; or keep \
                 the default, no network)",
            ),
            // A provider that gives no egress at all enforces no allowlist either,
            // whatever its `network_policy` says.
            Network::Policy(_) => need(
                self.network_egress && self.network_policy,
                "network",
                "enforce an egress allowlist (it needs Stockade's own resolver and firewall \
                 in the sandbox's network namespace: use the native, docker or microvm \
                 provider)",
            ),
        }
        need(
            !spec.writable || self.writable_root,
            "writable",
            "make the root writable",
        );
        need(
            spec.mounts.is_empty() || self.mounts,
            "mounts",
            "mount host paths",
        );
        need(
            !spec.hardening.seccomp || self.seccomp,
            "hardening.seccomp",
            "apply seccomp; turn it off explicitly to accept that",
        );
        need(
            !spec.hardening.landlock || self.landlock,
            "hardening.landlock",
            "apply landlock; turn it off explicitly to accept that",
        );
        if errs.is_empty() {
            Ok(())
        } else {
            Err(SpecErrors(errs))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stockade_spec::SandboxSpec;

    #[test]
    fn lists_each_gap() {
        let caps = Capabilities {
            network_egress: false,
            seccomp: false,
            ..Capabilities::FULL_LINUX
        };
        let spec = SandboxSpec {
            network: Network::Egress,
            ..Default::default()
        }
        .validate()
        .unwrap();
        let errs = caps.check("toy", &spec).unwrap_err();
        assert_eq!(errs.0.len(), 2, "{errs}");
        assert!(
            errs.to_string()
                .contains("the toy provider cannot give network egress"),
            "{errs}"
        );
        Capabilities::FULL_LINUX.check("full", &spec).unwrap();
        let spec = SandboxSpec {
            network: Network::allow(["pypi.org"]),
            ..Default::default()
        }
        .validate()
        .unwrap();
        let docker = Capabilities {
            network_egress: false,
            network_policy: false,
            ..Capabilities::FULL_LINUX
        };
        let errs = docker.check("docker", &spec).unwrap_err();
        assert!(
            errs.to_string()
                .contains("cannot enforce an egress allowlist"),
            "{errs}"
        );
        // A provider that forgot to say it cannot enforce a policy (no egress at all)
        // still refuses one.
        let no_egress = Capabilities {
            network_egress: false,
            ..Capabilities::FULL_LINUX
        };
        let errs = no_egress.check("gvisor", &spec).unwrap_err();
        assert!(
            errs.to_string()
                .contains("the gvisor provider cannot enforce an egress allowlist"),
            "{errs}"
        );
    }
}
