//! A provider's optional verbs as facets: one trait per verb group, which a provider
//! implements or not and hands out through its accessor on [`Provider`] (`None`: it
//! does not serve them). [`Provider::verbs`] is derived from the accessors, and
//! `impl dyn Provider` gives callers each verb, refused with the provider's reason
//! ([`Provider::why_not`]) where the facet is missing.

use super::*;

/// Pause and resume ([`Verb::Pause`]).
#[async_trait]
pub trait Pausing: Send + Sync {
    /// Stops the sandbox where it is, keeping its state (processes, memory, open
    /// files) for [`Pausing::resume`]: the microVM writes its memory and device state
    /// to disk; the native provider freezes its cgroup.
    async fn pause(&self, id: &str) -> Result<()>;

    /// Starts a paused sandbox again where it stopped.
    async fn resume(&self, id: &str) -> Result<()>;
}

/// Copies of a paused sandbox ([`Verb::Fork`]).
#[async_trait]
pub trait Forking: Send + Sync {
    /// Starts `count` independent copies of the paused sandbox `id` (its processes,
    /// memory and files as they were), each with its own id and identity.
    async fn fork(&self, id: &str, count: u32, opts: CreateOptions) -> Result<Vec<SandboxInfo>>;
}

/// Named snapshots ([`Verb::Snapshots`]).
#[async_trait]
pub trait Snapshotting: Send + Sync {
    /// Keeps the state of sandbox `id` (its processes, memory and files as they are)
    /// as the named snapshot `name` ([`check_snapshot_name`]) to start new sandboxes
    /// from; the sandbox itself stays as it was (running or paused). A name taken is
    /// refused.
    async fn snapshot(&self, id: &str, name: &str) -> Result<SnapshotInfo>;

    /// The named snapshots this provider keeps.
    async fn snapshots(&self) -> Result<Vec<SnapshotInfo>>;

    /// Removes the named snapshot `name` (sandboxes started from it live on).
    async fn remove_snapshot(&self, name: &str) -> Result<()>;

    /// Starts a new sandbox from the named snapshot `name`, after checking its digest
    /// (a changed file is refused, nothing is started).
    async fn create_from_snapshot(&self, name: &str, opts: CreateOptions) -> Result<SandboxInfo>;
}

/// A live egress policy ([`Verb::EgressControl`]).
#[async_trait]
pub trait EgressControl: Send + Sync {
    /// Replaces the egress policy of a running sandbox that has one, effective for new
    /// connections and lookups at once.
    async fn set_network(&self, id: &str, network: &spec::Network) -> Result<()>;

    /// What the egress policy of sandbox `id` refused at or after `since_ms` (unix
    /// ms), oldest first.
    async fn egress_denied(&self, id: &str, since_ms: u64) -> Result<Vec<EgressDenial>>;
}

/// Resource counters ([`Verb::Usage`]).
#[async_trait]
pub trait UsageCounters: Send + Sync {
    /// CPU time and memory use of sandbox `id`.
    async fn usage(&self, id: &str) -> Result<Usage>;
}

/// File operations as another uid of the sandbox ([`Verb::FilesAsUser`]).
#[async_trait]
pub trait FilesAsUser: Send + Sync {
    /// A file operation as `uid` of the sandbox (uid 0: root of its own user
    /// namespace, as an exec with [`ExecRequest::uid`]); the agent refuses a uid the
    /// sandbox cannot have.
    async fn file_as(&self, id: &str, uid: u32, op: FileOp) -> Result<FileResult>;
}

/// Why a provider lacks `verb`, when it says nothing of its own.
pub fn default_reason(verb: Verb) -> &'static str {
    match verb {
        Verb::Pause => "this provider cannot keep a stopped sandbox's state",
        Verb::Fork => "this provider cannot copy a running sandbox's state",
        Verb::Snapshots => SNAPSHOT_REASON,
        Verb::EgressControl => "this provider does not implement it",
        Verb::Usage => "this provider does not read its sandboxes' counters",
        Verb::FilesAsUser => "this provider runs file operations as the sandbox user only",
        Verb::Terminals => "this provider's execs have no terminal",
    }
}

/// The verbs of a provider's facets, as callers use them: each refused, naming the
/// provider and its reason, where the facet is missing.
impl<'a> dyn Provider + 'a {
    fn refuse(&self, verb: Verb, what: &str) -> Error {
        unsupported(self.name(), what, self.why_not(verb))
    }

    /// See [`Pausing::pause`].
    pub async fn pause(&self, id: &str) -> Result<()> {
        match self.pausing() {
            Some(f) => f.pause(id).await,
            None => Err(self.refuse(Verb::Pause, "pause")),
        }
    }

    /// See [`Pausing::resume`].
    pub async fn resume(&self, id: &str) -> Result<()> {
        match self.pausing() {
            Some(f) => f.resume(id).await,
            None => Err(self.refuse(Verb::Pause, "resume")),
        }
    }

    /// See [`Forking::fork`].
    pub async fn fork(
        &self,
        id: &str,
        count: u32,
        opts: CreateOptions,
    ) -> Result<Vec<SandboxInfo>> {
        match self.forking() {
            Some(f) => f.fork(id, count, opts).await,
            None => Err(self.refuse(Verb::Fork, "fork")),
        }
    }

    /// See [`Snapshotting::snapshot`].
    pub async fn snapshot(&self, id: &str, name: &str) -> Result<SnapshotInfo> {
        match self.snapshotting() {
            Some(f) => f.snapshot(id, name).await,
            None => Err(self.refuse(Verb::Snapshots, "snapshot")),
        }
    }

    /// See [`Snapshotting::snapshots`].
    pub async fn snapshots(&self) -> Result<Vec<SnapshotInfo>> {
        match self.snapshotting() {
            Some(f) => f.snapshots().await,
            None => Err(self.refuse(Verb::Snapshots, "listing snapshots")),
        }
    }

    /// See [`Snapshotting::remove_snapshot`].
    pub async fn remove_snapshot(&self, name: &str) -> Result<()> {
        match self.snapshotting() {
            Some(f) => f.remove_snapshot(name).await,
            None => Err(self.refuse(Verb::Snapshots, "removing a snapshot")),
        }
    }

    /// See [`Snapshotting::create_from_snapshot`].
    pub async fn create_from_snapshot(
        &self,
        name: &str,
        opts: CreateOptions,
    ) -> Result<SandboxInfo> {
        match self.snapshotting() {
            Some(f) => f.create_from_snapshot(name, opts).await,
            None => Err(self.refuse(Verb::Snapshots, "starting from a snapshot")),
        }
    }

    /// See [`EgressControl::set_network`].
    pub async fn set_network(&self, id: &str, network: &spec::Network) -> Result<()> {
        match self.egress_control() {
            Some(f) => f.set_network(id, network).await,
            None => Err(Error::Unavailable {
                what: format!(
                    "changing the network policy live on the {} provider",
                    self.name()
                ),
                reason: self.why_not(Verb::EgressControl).into(),
                fix: "use the native provider, or create a new sandbox with the policy".into(),
            }),
        }
    }

    /// See [`EgressControl::egress_denied`]; nothing where there is no policy to
    /// refuse anything.
    pub async fn egress_denied(&self, id: &str, since_ms: u64) -> Result<Vec<EgressDenial>> {
        match self.egress_control() {
            Some(f) => f.egress_denied(id, since_ms).await,
            None => Ok(Vec::new()),
        }
    }

    /// See [`UsageCounters::usage`].
    pub async fn usage(&self, id: &str) -> Result<Usage> {
        match self.usage_counters() {
            Some(f) => f.usage(id).await,
            None => Err(Error::Unavailable {
                what: format!("resource usage on the {} provider", self.name()),
                reason: self.why_not(Verb::Usage).into(),
                fix: "use the native provider".into(),
            }),
        }
    }

    /// See [`FilesAsUser::file_as`].
    pub async fn file_as(&self, id: &str, uid: u32, op: FileOp) -> Result<FileResult> {
        match self.files_as_user() {
            Some(f) => f.file_as(id, uid, op).await,
            None => Err(Error::Unavailable {
                what: format!(
                    "file operations as uid {uid} on the {} provider",
                    self.name()
                ),
                reason: self.why_not(Verb::FilesAsUser).into(),
                fix: "run them as the sandbox user, or use a command as that uid".into(),
            }),
        }
    }
}
