//! The provider boundary: the [`Provider`] trait every isolation backend implements,
//! and the names and errors of its optional verbs.

use super::*;

/// An isolation backend.
#[async_trait]
pub trait Provider: Send + Sync + 'static {
    /// Short name (`native`, `docker`, `wasm`, `microvm`).
    fn name(&self) -> &'static str;

    /// What this provider can enforce.
    fn capabilities(&self) -> Capabilities;

    /// Checks the host; `Err(Unavailable)` says what is missing and how to fix it.
    async fn probe(&self) -> Result<Vec<Check>>;

    /// Starts a sandbox from a spec already checked against [`Self::capabilities`].
    async fn create(&self, spec: CheckedSpec, opts: CreateOptions) -> Result<SandboxInfo>;

    /// Runs one command and waits for it. Live output goes to `io.output` when given;
    /// stdin and a kill request come from `io.input` when given (a provider without
    /// interactive stdin runs the exec through [`exec_with_kill`]). A non-zero exit is
    /// an outcome, not an error.
    async fn exec(&self, id: &str, req: CheckedRequest, io: ExecIo) -> Result<ExecOutcome>;

    /// Makes sure the image `reference` is ready to run, reporting each step (a pull, a
    /// load) to `progress` as a line, so a caller can show a long fetch instead of a
    /// silent `create`. The default does nothing: the provider fetches at create, or
    /// its images come from this host's store, which callers fill themselves (see
    /// [`Capabilities::local_images`]).
    async fn prepare_image(
        &self,
        reference: &str,
        progress: &mut (dyn for<'a> FnMut(&'a str) + Send),
    ) -> Result<()> {
        let _ = (reference, progress);
        Ok(())
    }

    /// Checks that the sandbox is alive and answers (the default: it is listed).
    async fn health(&self, id: &str) -> Result<()> {
        self.inspect(id).await.map(drop)
    }

    /// Kills everything in the sandbox and removes all its state. Idempotent.
    async fn destroy(&self, id: &str) -> Result<()>;

    /// The live sandboxes of this provider.
    async fn list(&self) -> Result<Vec<SandboxInfo>>;

    /// The ids of the sandboxes [`Provider::list`] names, without describing each: the
    /// daemon's look for vanished sandboxes asks every few seconds, with thousands
    /// live. The default lists them.
    async fn live_ids(&self) -> Result<Vec<String>> {
        Ok(self.list().await?.into_iter().map(|i| i.id).collect())
    }

    /// One sandbox.
    async fn inspect(&self, id: &str) -> Result<SandboxInfo>;

    /// Reaps what expired, lost its owner, or was left half-made by a crash.
    async fn gc(&self) -> Result<GcReport>;

    /// Replaces the egress policy of a running sandbox that has one, effective for new
    /// connections and lookups at once. The default: not supported.
    async fn set_network(&self, id: &str, network: &spec::Network) -> Result<()> {
        let _ = (id, network);
        Err(Error::Unavailable {
            what: format!(
                "changing the network policy live on the {} provider",
                self.name()
            ),
            reason: "this provider does not implement it".into(),
            fix: "use the native provider, or create a new sandbox with the policy".into(),
        })
    }

    /// What the egress policy of sandbox `id` refused at or after `since_ms` (unix
    /// ms), oldest first. The default: nothing (no policy to refuse anything).
    async fn egress_denied(&self, id: &str, since_ms: u64) -> Result<Vec<EgressDenial>> {
        let _ = (id, since_ms);
        Ok(Vec::new())
    }

    /// Runs one file operation inside the sandbox as the sandbox user, so it can touch
    /// only what the code itself could. Providers without file operations say so.
    async fn file(&self, id: &str, op: FileOp) -> Result<FileResult> {
        let _ = (id, op);
        Err(Error::Unavailable {
            what: format!("file operations on the {} provider", self.name()),
            reason: "this provider does not implement them".into(),
            fix: "use the native provider".into(),
        })
    }

    /// Prepares sandbox `id` to serve its first exec as fast as its later ones (the
    /// agent starts its exec zygote now, not at the second exec), and returns once it
    /// has. For sandboxes made ahead of use (pools): it spends a process per sandbox
    /// on that. The default does nothing.
    async fn warm(&self, id: &str) -> Result<()> {
        let _ = id;
        Ok(())
    }

    /// A byte stream to TCP `port` on sandbox `id`'s own loopback, as a client inside
    /// would connect (a server the code started, for a preview or a tool). Nothing
    /// listening there is `Unavailable`. The default refuses.
    async fn connect_port(&self, id: &str, port: u16) -> Result<PortStream> {
        let _ = (id, port);
        Err(Error::Unavailable {
            what: format!(
                "connections to a sandbox's ports on the {} provider",
                self.name()
            ),
            reason: "this provider has no agent inside its sandboxes to connect through".into(),
            fix: "use the native, docker, gvisor or microvm provider".into(),
        })
    }

    /// A file operation as `uid` of the sandbox (uid 0: root of its own user
    /// namespace, as an exec with [`ExecRequest::uid`]); the agent refuses a uid the
    /// sandbox cannot have. The default refuses.
    async fn file_as(&self, id: &str, uid: u32, op: FileOp) -> Result<FileResult> {
        let _ = (id, op);
        Err(Error::Unavailable {
            what: format!(
                "file operations as uid {uid} on the {} provider",
                self.name()
            ),
            reason: "this provider runs file operations as the sandbox user only".into(),
            fix: "run them as the sandbox user, or use a command as that uid".into(),
        })
    }

    /// The host ids that files made by the sandbox user `uid`:`gid` get on a writable
    /// mount (what a host directory shared with it, such as a session's workspace,
    /// must be owned by for it to write there). The default: the same ids, as on
    /// providers whose mounts show their host owner as the sandbox user.
    async fn host_ids(&self, uid: u32, gid: u32) -> Result<(u32, u32)> {
        Ok((uid, gid))
    }

    /// CPU time and memory use of sandbox `id`, from its cgroups. The default
    /// refuses.
    async fn usage(&self, id: &str) -> Result<Usage> {
        let _ = id;
        Err(Error::Unavailable {
            what: format!("resource usage on the {} provider", self.name()),
            reason: "this provider does not read its sandboxes' counters".into(),
            fix: "use the native provider".into(),
        })
    }

    /// Stops the sandbox where it is, keeping its state (processes, memory, open
    /// files) for [`Provider::resume`]: the microVM writes its memory and device
    /// state to disk; the native provider freezes its cgroup. The default refuses.
    async fn pause(&self, id: &str) -> Result<()> {
        let _ = id;
        Err(unsupported(
            self.name(),
            "pause",
            "this provider cannot keep a stopped sandbox's state",
        ))
    }

    /// Starts a paused sandbox again where it stopped. The default refuses.
    async fn resume(&self, id: &str) -> Result<()> {
        let _ = id;
        Err(unsupported(
            self.name(),
            "resume",
            "this provider cannot keep a stopped sandbox's state",
        ))
    }

    /// Starts `count` independent copies of the paused sandbox `id` (its processes,
    /// memory and files as they were), each with its own id and identity. The
    /// default refuses.
    async fn fork(&self, id: &str, count: u32, opts: CreateOptions) -> Result<Vec<SandboxInfo>> {
        let _ = (id, count, opts);
        Err(unsupported(
            self.name(),
            "fork",
            "this provider cannot copy a running sandbox's state",
        ))
    }

    /// Keeps the state of sandbox `id` (its processes, memory and files as they are)
    /// as the named snapshot `name` ([`check_snapshot_name`]) to start new sandboxes
    /// from; the sandbox itself stays as it was (running or paused). A name taken is
    /// refused. The default refuses.
    async fn snapshot(&self, id: &str, name: &str) -> Result<SnapshotInfo> {
        let _ = (id, name);
        Err(unsupported(self.name(), "snapshot", SNAPSHOT_REASON))
    }

    /// The named snapshots this provider keeps. The default refuses.
    async fn snapshots(&self) -> Result<Vec<SnapshotInfo>> {
        Err(unsupported(
            self.name(),
            "listing snapshots",
            SNAPSHOT_REASON,
        ))
    }

    /// Removes the named snapshot `name` (sandboxes started from it live on). The
    /// default refuses.
    async fn remove_snapshot(&self, name: &str) -> Result<()> {
        let _ = name;
        Err(unsupported(
            self.name(),
            "removing a snapshot",
            SNAPSHOT_REASON,
        ))
    }

    /// Starts a new sandbox from the named snapshot `name`, after checking its digest
    /// (a changed file is refused, nothing is started). The default refuses.
    async fn create_from_snapshot(&self, name: &str, opts: CreateOptions) -> Result<SandboxInfo> {
        let _ = (name, opts);
        Err(unsupported(
            self.name(),
            "starting from a snapshot",
            SNAPSHOT_REASON,
        ))
    }
}

/// Why a provider without named snapshots refuses them.
pub const SNAPSHOT_REASON: &str =
    "this provider cannot save a sandbox's memory and processes to start new ones from";

/// A named snapshot a provider keeps to start new sandboxes from (see
/// [`Provider::snapshot`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotInfo {
    /// Its name ([`check_snapshot_name`]).
    pub name: String,
    /// The provider that keeps it.
    pub provider: String,
    /// The sandbox it was taken of.
    pub source: String,
    /// When it was taken (unix ms).
    pub created_at_ms: u64,
    /// Size of its saved memory and device state, bytes.
    pub bytes: u64,
    /// SHA-256 of that state, hex: checked before every start from it.
    pub sha256: String,
    /// The spec of the sandbox it was taken of, which sandboxes started from it keep.
    #[serde(default)]
    pub spec: serde_json::Value,
}

/// The longest snapshot name.
pub const SNAPSHOT_NAME_MAX: usize = 64;

/// Checks a snapshot name: 1 to [`SNAPSHOT_NAME_MAX`] characters of ASCII letters,
/// digits, `.`, `_` and `-`, starting with a letter or digit (so never a path, `.`
/// or `..`).
pub fn check_snapshot_name(name: &str) -> Result<()> {
    check_name_upto(name, SNAPSHOT_NAME_MAX)
}

/// The longest name a provider stores a snapshot under: a name, or a daemon's
/// tenant-scoped form of it (a tag of the tenant before it).
pub const SNAPSHOT_KEY_MAX: usize = 128;

/// Checks a name a provider stores a snapshot under: as [`check_snapshot_name`], up
/// to [`SNAPSHOT_KEY_MAX`] characters. Never a path, `.` or `..`.
pub fn check_snapshot_key(name: &str) -> Result<()> {
    check_name_upto(name, SNAPSHOT_KEY_MAX)
}

fn check_name_upto(name: &str, max: usize) -> Result<()> {
    let bad = |why: &str| {
        Err(Error::InvalidRequest(format!(
            "snapshot name {name:?} is not valid: {why}; use 1 to {SNAPSHOT_NAME_MAX} letters, \
             digits, '.', '_' or '-', starting with a letter or digit"
        )))
    };
    if name.is_empty() {
        return bad("it is empty");
    }
    if name.len() > max {
        return bad(&format!("it is {} characters long", name.len()));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return bad(&format!("it contains {c:?}"));
    }
    if !name.as_bytes()[0].is_ascii_alphanumeric() {
        return bad("it does not start with a letter or digit");
    }
    Ok(())
}

/// The error of a verb a provider does not have: names the provider, the verb and why.
pub fn unsupported(provider: &str, verb: &str, reason: &str) -> Error {
    Error::Unavailable {
        what: format!("{verb} on the {provider} provider"),
        reason: reason.to_string(),
        fix: "use the microvm provider".to_string(),
    }
}

/// Whether `e` is [`unsupported`]'s error: the provider does not have the verb at
/// all (not one it has but cannot serve on this host now).
pub fn is_unsupported(e: &Error) -> bool {
    matches!(e, Error::Unavailable { what, .. }
        if what.contains(" on the ") && what.ends_with(" provider"))
}
