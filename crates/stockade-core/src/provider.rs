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

    /// The host ids that files made by the sandbox user `uid`:`gid` get on a writable
    /// mount (what a host directory shared with it, such as a session's workspace,
    /// must be owned by for it to write there). The default: the same ids, as on
    /// providers whose mounts show their host owner as the sandbox user.
    async fn host_ids(&self, uid: u32, gid: u32) -> Result<(u32, u32)> {
        Ok((uid, gid))
    }

    /// Pause and resume, where this provider has them.
    fn pausing(&self) -> Option<&dyn Pausing> {
        None
    }

    /// Copies of a paused sandbox, where this provider makes them.
    fn forking(&self) -> Option<&dyn Forking> {
        None
    }

    /// Named snapshots, where this provider keeps them.
    fn snapshotting(&self) -> Option<&dyn Snapshotting> {
        None
    }

    /// A live egress policy, where this provider has one.
    fn egress_control(&self) -> Option<&dyn EgressControl> {
        None
    }

    /// Resource counters, where this provider reads them.
    fn usage_counters(&self) -> Option<&dyn UsageCounters> {
        None
    }

    /// File operations as another uid of the sandbox, where this provider has them.
    fn files_as_user(&self) -> Option<&dyn FilesAsUser> {
        None
    }

    /// Whether an exec may ask for a terminal ([`ExecRequest::tty`]).
    fn terminals(&self) -> bool {
        false
    }

    /// Why this provider lacks `verb` (said in its refusal).
    fn why_not(&self, verb: Verb) -> &'static str {
        default_reason(verb)
    }

    /// The optional verbs this provider serves, from its facets.
    fn verbs(&self) -> Verbs {
        Verbs {
            pause: self.pausing().is_some(),
            fork: self.forking().is_some(),
            snapshots: self.snapshotting().is_some(),
            egress_control: self.egress_control().is_some(),
            usage: self.usage_counters().is_some(),
            files_as_user: self.files_as_user().is_some(),
            terminals: self.terminals(),
        }
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
