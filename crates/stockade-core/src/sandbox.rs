//! [`Sandbox`]: the handle callers hold, over any [`Provider`], with the approval
//! policy applied to each call.

use super::*;

/// A live sandbox. Call [`Sandbox::destroy`] when done; a sandbox created with an
/// owner also dies with its owner process.
#[derive(Clone)]
pub struct Sandbox {
    provider: Arc<dyn Provider>,
    info: SandboxInfo,
    policy: Option<Arc<Policy>>,
}

impl std::fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sandbox")
            .field("id", &self.info.id)
            .field("provider", &self.info.provider)
            .finish()
    }
}

impl Sandbox {
    /// Creates a sandbox on `provider`.
    pub async fn create(
        provider: Arc<dyn Provider>,
        spec: SandboxSpec,
        opts: CreateOptions,
    ) -> Result<Sandbox> {
        let spec = CheckedSpec::new(spec.validate()?, provider.as_ref())?;
        let info = provider.create(spec, opts).await?;
        Ok(Sandbox {
            provider,
            info,
            policy: None,
        })
    }

    /// A handle to an existing sandbox.
    pub async fn attach(provider: Arc<dyn Provider>, id: &str) -> Result<Sandbox> {
        let info = provider.inspect(id).await?;
        Ok(Sandbox {
            provider,
            info,
            policy: None,
        })
    }

    /// The sandbox id.
    pub fn id(&self) -> &str {
        &self.info.id
    }

    /// What is known about the sandbox.
    pub fn info(&self) -> &SandboxInfo {
        &self.info
    }

    /// Puts an approval policy in front of every exec and file write of this handle.
    pub fn with_policy(mut self, policy: Arc<Policy>) -> Sandbox {
        self.policy = Some(policy);
        self
    }

    fn approve(&self, action: Action<'_>) -> Result<()> {
        match &self.policy {
            Some(p) => p.check(&self.info.id, &action),
            None => Ok(()),
        }
    }

    /// Runs a command and waits for it.
    pub async fn exec(&self, req: ExecRequest) -> Result<ExecOutcome> {
        self.exec_with(req, ExecIo::none()).await
    }

    /// Runs a command, sending live output to `output`.
    pub async fn exec_streaming(
        &self,
        req: ExecRequest,
        output: OutputSender,
    ) -> Result<ExecOutcome> {
        self.exec_with(req, ExecIo::output(output)).await
    }

    /// Runs a command with the given I/O (live output, stdin and kill requests).
    pub async fn exec_with(&self, req: ExecRequest, io: ExecIo) -> Result<ExecOutcome> {
        let req = CheckedRequest::new(req)?;
        self.approve(Action::Exec(&req))?;
        self.provider.exec(&self.info.id, req, io).await
    }

    /// Replaces the sandbox's egress policy (only a sandbox created with one has a
    /// policy to replace); every problem of the new policy is listed at once.
    pub async fn set_network(&self, network: &spec::Network) -> Result<()> {
        let problems = match network {
            spec::Network::Policy(p) => p.problems(),
            _ => Vec::new(),
        };
        if !problems.is_empty() {
            return Err(Error::InvalidSpec(spec::SpecErrors(
                problems
                    .into_iter()
                    .map(|(field, message)| spec::SpecError { field, message })
                    .collect(),
            )));
        }
        self.provider.set_network(&self.info.id, network).await
    }

    /// What the sandbox's egress policy refused at or after `since_ms` (0: all that
    /// is still recorded), oldest first.
    pub async fn egress_denied(&self, since_ms: u64) -> Result<Vec<EgressDenial>> {
        self.provider.egress_denied(&self.info.id, since_ms).await
    }

    /// Runs a file operation (writes are checked by the approval policy first).
    pub async fn file(&self, op: FileOp) -> Result<FileResult> {
        if op.writes() {
            self.approve(Action::FileWrite(&op))?;
        }
        self.provider.file(&self.info.id, op).await
    }

    /// [`Sandbox::file`] as `uid` of the sandbox (see [`Provider::file_as`]).
    pub async fn file_as(&self, uid: u32, op: FileOp) -> Result<FileResult> {
        if op.writes() {
            self.approve(Action::FileWrite(&op))?;
        }
        self.provider.file_as(&self.info.id, uid, op).await
    }

    /// Writes a file (parents created).
    pub async fn write(&self, path: &str, data: impl Into<Vec<u8>>) -> Result<()> {
        self.file(FileOp::Write {
            path: path.into(),
            data: data.into(),
            mode: None,
        })
        .await
        .map(drop)
    }

    /// Reads a whole file (up to the file limit).
    pub async fn read(&self, path: &str) -> Result<Vec<u8>> {
        match self
            .file(FileOp::Read {
                path: path.into(),
                offset: 0,
                limit: files::MAX_FILE_BYTES,
            })
            .await?
        {
            FileResult::Data { data, .. } => Ok(data),
            other => Err(unexpected(other)),
        }
    }

    /// Replaces `old` by `new` in a file; returns the number of replacements.
    pub async fn edit(&self, path: &str, old: &str, new: &str, replace_all: bool) -> Result<u64> {
        match self
            .file(FileOp::Edit {
                path: path.into(),
                old: old.into(),
                new: new.into(),
                replace_all,
            })
            .await?
        {
            FileResult::Edited { replacements } => Ok(replacements),
            other => Err(unexpected(other)),
        }
    }

    /// Lists a directory.
    pub async fn ls(&self, path: &str) -> Result<Vec<FileEntry>> {
        match self.file(FileOp::Ls { path: path.into() }).await? {
            FileResult::Entries(e) => Ok(e),
            other => Err(unexpected(other)),
        }
    }

    /// Describes one path (following symlinks inside the sandbox).
    pub async fn stat(&self, path: &str) -> Result<FileEntry> {
        match self.file(FileOp::Stat { path: path.into() }).await? {
            FileResult::Entries(mut e) if e.len() == 1 => Ok(e.remove(0)),
            other => Err(unexpected(other)),
        }
    }

    /// Paths below `root` matching a glob, relative to `root`, sorted.
    pub async fn glob(&self, pattern: &str, root: &str) -> Result<Vec<String>> {
        match self
            .file(FileOp::Glob {
                pattern: pattern.into(),
                root: root.into(),
            })
            .await?
        {
            FileResult::Paths { paths, .. } => Ok(paths),
            other => Err(unexpected(other)),
        }
    }

    /// Lines matching `regex` in files below `root` (only files matching `include`
    /// when given), at most `max_matches` (0: the default of 1000).
    pub async fn grep(
        &self,
        regex: &str,
        root: &str,
        include: Option<&str>,
        max_matches: u32,
    ) -> Result<Vec<GrepMatch>> {
        let op = FileOp::Grep {
            regex: regex.into(),
            root: root.into(),
            include: include.map(str::to_string),
            max_matches,
        };
        match self.file(op).await? {
            FileResult::Matches { matches, .. } => Ok(matches),
            other => Err(unexpected(other)),
        }
    }

    /// Creates a directory and its parents.
    pub async fn mkdir(&self, path: &str) -> Result<()> {
        self.file(FileOp::Mkdir {
            path: path.into(),
            parents: true,
        })
        .await
        .map(drop)
    }

    /// Sets extended attributes of `path` (names in the `user.` namespace, in full:
    /// `user.owner`); the others it has are kept. [`FileEntry::xattrs`] returns them.
    pub async fn set_xattrs(
        &self,
        path: &str,
        xattrs: std::collections::BTreeMap<String, String>,
    ) -> Result<()> {
        self.file(FileOp::SetXattrs {
            path: path.into(),
            xattrs,
        })
        .await
        .map(drop)
    }

    /// Removes a file or a directory tree.
    pub async fn rm(&self, path: &str) -> Result<()> {
        self.file(FileOp::Rm {
            path: path.into(),
            recursive: true,
        })
        .await
        .map(drop)
    }

    /// Unpacks a tar (or tar.gz) archive into the directory `dest`.
    pub async fn upload(&self, dest: &str, archive: Vec<u8>) -> Result<()> {
        self.file(FileOp::Upload {
            dest: dest.into(),
            archive,
        })
        .await
        .map(drop)
    }

    /// Packs a file or directory into a tar archive.
    pub async fn download(&self, path: &str) -> Result<Vec<u8>> {
        match self.file(FileOp::Download { path: path.into() }).await? {
            FileResult::Archive(a) => Ok(a),
            other => Err(unexpected(other)),
        }
    }

    /// Destroys the sandbox (idempotent).
    pub async fn destroy(&self) -> Result<()> {
        self.provider.destroy(&self.info.id).await
    }

    /// What the provider says of the sandbox now (its state, its expiry moved by
    /// pauses); [`Sandbox::info`] is what it said at creation.
    pub async fn inspect(&self) -> Result<SandboxInfo> {
        self.provider.inspect(&self.info.id).await
    }

    /// Prepares the sandbox to serve its first exec as fast as its later ones (see
    /// [`Provider::warm`]).
    pub async fn warm(&self) -> Result<()> {
        self.provider.warm(&self.info.id).await
    }

    /// A connection to port `port` on the sandbox's own loopback (a server its code
    /// started; see [`Provider::connect_port`]).
    pub async fn connect_port(&self, port: u16) -> Result<PortStream> {
        self.provider.connect_port(&self.info.id, port).await
    }

    /// Port `port` of the sandbox on this host's 127.0.0.1:`local` (0: a free port),
    /// until the [`Forward`] is dropped or closed.
    pub async fn forward(&self, port: u16, local: u16) -> Result<Forward> {
        Forward::start(self.provider.clone(), &self.info.id, port, local, None).await
    }

    /// Pauses the sandbox, keeping its state (see [`Provider::pause`]).
    pub async fn pause(&self) -> Result<()> {
        self.provider.pause(&self.info.id).await
    }

    /// Resumes a paused sandbox where it stopped.
    pub async fn resume(&self) -> Result<()> {
        self.provider.resume(&self.info.id).await
    }

    /// Keeps this sandbox's state as the named snapshot `name` (see
    /// [`Provider::snapshot`]); the sandbox stays as it was.
    pub async fn snapshot(&self, name: &str) -> Result<SnapshotInfo> {
        check_snapshot_name(name)?;
        self.provider.snapshot(&self.info.id, name).await
    }

    /// Starts a new sandbox on `provider` from its named snapshot `name` (checked
    /// against its digest first); it dies with `opts.owner_pid` when given.
    pub async fn from_snapshot(
        provider: Arc<dyn Provider>,
        name: &str,
        opts: CreateOptions,
    ) -> Result<Sandbox> {
        check_snapshot_name(name)?;
        let info = provider.create_from_snapshot(name, opts).await?;
        Ok(Sandbox {
            provider,
            info,
            policy: None,
        })
    }

    /// Starts `count` copies of this paused sandbox, each its own sandbox (with the
    /// policy of this one); they die with `opts.owner_pid` when given.
    pub async fn fork(&self, count: u32, opts: CreateOptions) -> Result<Vec<Sandbox>> {
        let infos = self.provider.fork(&self.info.id, count, opts).await?;
        Ok(infos
            .into_iter()
            .map(|info| Sandbox {
                provider: self.provider.clone(),
                info,
                policy: self.policy.clone(),
            })
            .collect())
    }
}

fn unexpected(r: FileResult) -> Error {
    Error::Internal(format!("unexpected file operation result {r:?}"))
}

/// Checks an exec request before it reaches a provider.
pub fn check_request(req: &ExecRequest) -> Result<()> {
    if req.argv.is_empty() {
        return Err(Error::InvalidRequest(
            "argv is empty; give a command to run".into(),
        ));
    }
    if req.argv[0].is_empty() {
        return Err(Error::InvalidRequest("argv[0] is empty".into()));
    }
    if let Some(bad) = req.argv.iter().find(|a| a.contains('\0')) {
        return Err(Error::InvalidRequest(format!(
            "argument {bad:?} contains NUL"
        )));
    }
    for (k, v) in &req.env {
        if k.is_empty() || k.contains('=') || k.contains('\0') || v.contains('\0') {
            return Err(Error::InvalidRequest(format!(
                "environment variable {k:?} has an invalid name or value"
            )));
        }
    }
    if let Some(cwd) = &req.cwd
        && !cwd.starts_with('/')
    {
        return Err(Error::InvalidRequest(format!(
            "cwd {cwd:?} is not absolute"
        )));
    }
    if req.timeout_ms == Some(0) {
        return Err(Error::InvalidRequest(
            "exec timeout must be positive".into(),
        ));
    }
    if req.detach && (req.keep_stdin_open || !req.stdin.is_empty()) {
        return Err(Error::InvalidRequest(
            "a detached exec reads no stdin (it returns before the command reads); \
             write the input to a file and redirect it, or run the exec without detach"
                .into(),
        ));
    }
    if let Some(size) = req.tty {
        if req.detach {
            return Err(Error::InvalidRequest(
                "a detached exec has no terminal (it returns before anyone could type on \
                 it); run it without tty, or without detach"
                    .into(),
            ));
        }
        size.check().map_err(Error::InvalidRequest)?;
    }
    if let Some(w) = &req.watch {
        if req.tty.is_some() || req.detach {
            return Err(Error::InvalidRequest(
                "a directory watch streams its events to the caller: run it without a \
                 terminal and without detach"
                    .into(),
            ));
        }
        if !w.path.starts_with('/') || w.path.contains('\0') {
            return Err(Error::InvalidRequest(format!(
                "the watched directory {:?} is not an absolute path: name it from /",
                w.path
            )));
        }
    }
    if req.discard_output && !req.detach {
        return Err(Error::InvalidRequest(
            "discard_output is for detached execs; an exec that waits returns its output".into(),
        ));
    }
    Ok(())
}
