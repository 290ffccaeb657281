//! The gRPC API of `stockaded` (`proto/stockade.proto`) and [`RemoteProvider`], a
//! client of the daemon that implements [`Provider`], so the CLI and the SDKs use a
//! daemon just by choosing this provider.
//!
//! Where the daemon is: `STOCKADE_HOST` (an [`Address`]: `unix:///path`,
//! `tcp://host:port`, `https://host:port`...), else the default socket
//! ([`default_socket`]). `STOCKADE_TOKEN` is sent as a bearer token; `STOCKADE_TLS_CA`
//! names the CA file a TLS daemon's certificate must chain to.

mod address;
mod connect;
pub mod convert;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use stockade_core::{
    Capabilities, Check, CheckedRequest, CheckedSpec, CreateOptions, Error, ErrorCode, ExecInput,
    ExecIo, ExecOutcome, ExecRequest, FileOp, FileResult, GcReport, InputReceiver, OutputChunk,
    OutputSender, Provider, Result, SandboxInfo, SandboxSpec, SessionInfo, SnapshotInfo, Stream,
    TtySize,
};
use tonic::transport::Channel;

pub use address::{Address, Security};
pub use connect::ConnectOptions;
use connect::channel;
use convert::from_status;

/// Generated messages, client and server of `stockade.v1`.
#[allow(clippy::all, missing_docs)]
pub mod pb {
    tonic::include_proto!("stockade.v1");
}

pub use pb::stockade_client::StockadeClient;
pub use pb::stockade_server::{Stockade, StockadeServer};

/// Largest message either side accepts (files move up to 32 MiB in one call). The
/// daemon holds requests to tighter limits: [`MAX_FILE_MESSAGE_BYTES`] for `File`,
/// [`MAX_REQUEST_BYTES`] for every other RPC.
pub const MAX_MESSAGE_BYTES: usize = 64 << 20;

/// Largest `File` request the daemon reads: a file's contents or an upload archive
/// (the 32 MiB transfer limit; uploads are one unary message, not a stream) plus
/// room for the message around them.
pub const MAX_FILE_MESSAGE_BYTES: usize = (32 << 20) + (1 << 20);

/// Largest request of every other RPC the daemon reads (a spec, an argv, env,
/// some stdin).
pub const MAX_REQUEST_BYTES: usize = 4 << 20;

/// The former name of [`Address`].
pub type Host = Address;

/// The daemon's default socket: `/run/stockaded.sock` for root, else
/// `$XDG_RUNTIME_DIR/stockaded.sock`, else `/tmp/stockaded-UID.sock`.
pub fn default_socket() -> PathBuf {
    use std::os::unix::fs::MetadataExt;
    let uid = std::fs::metadata("/proc/self")
        .map(|m| m.uid())
        .unwrap_or(0);
    if uid == 0 {
        return PathBuf::from("/run/stockaded.sock");
    }
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(d) => PathBuf::from(d).join("stockaded.sock"),
        None => PathBuf::from(format!("/tmp/stockaded-{uid}.sock")),
    }
}

/// A [`Provider`] that runs everything through a `stockaded` daemon.
#[derive(Clone)]
pub struct RemoteProvider {
    client: StockadeClient<Channel>,
    auth: Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>>,
    backend: Option<String>,
    host: Arc<Address>,
}

impl std::fmt::Debug for RemoteProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteProvider")
            .field("host", &self.host.to_string())
            .field("backend", &self.backend)
            .finish()
    }
}

impl RemoteProvider {
    /// Connects to the daemon at `host`, sending `token` (if any) on every call; a
    /// TLS daemon's certificate is checked against `STOCKADE_TLS_CA` if set.
    pub async fn connect(host: &Address, token: Option<&str>) -> Result<RemoteProvider> {
        let opts = ConnectOptions {
            token: token.map(str::to_string),
            ..ConnectOptions::from_env()
        };
        RemoteProvider::connect_with(host, &opts).await
    }

    /// Connects to the daemon at `host` with `opts`.
    pub async fn connect_with(host: &Address, opts: &ConnectOptions) -> Result<RemoteProvider> {
        let auth = match &opts.token {
            Some(t) => Some(format!("Bearer {}", t.trim()).parse().map_err(|_| {
                Error::InvalidRequest(
                    "the token has characters that cannot be sent in a header".into(),
                )
            })?),
            None => None,
        };
        let client = StockadeClient::new(channel(host, opts).await?)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        Ok(RemoteProvider {
            client,
            auth,
            backend: None,
            host: Arc::new(host.clone()),
        })
    }

    /// The daemon the environment names: `STOCKADE_HOST` (an error when it does not
    /// answer), else the default socket when it answers, else `None`.
    pub async fn from_env() -> Result<Option<RemoteProvider>> {
        RemoteProvider::discover(&ConnectOptions::from_env()).await
    }

    /// Like [`RemoteProvider::from_env`], with `opts` instead of the environment's
    /// token and CA file.
    pub async fn discover(opts: &ConnectOptions) -> Result<Option<RemoteProvider>> {
        if let Some(h) = std::env::var("STOCKADE_HOST")
            .ok()
            .filter(|h| !h.is_empty())
        {
            let host = Address::parse(&h)?;
            return RemoteProvider::connect_with(&host, opts).await.map(Some);
        }
        let sock = default_socket();
        if !Path::new(&sock).exists() {
            return Ok(None);
        }
        match RemoteProvider::connect_with(&Address::Unix(sock), opts).await {
            Ok(p) => Ok(Some(p)),
            // A stale socket of a daemon that is gone: run in-process.
            Err(_) => Ok(None),
        }
    }

    /// An error of a call: the daemon's own (code and message unchanged), or, when the
    /// connection broke during the call (the daemon died or restarted), unavailable.
    fn fail(&self, s: tonic::Status) -> Error {
        if convert::is_transport_failure(&s) {
            return self.cut_off(s.message());
        }
        from_status(s)
    }

    fn cut_off(&self, why: &str) -> Error {
        Error::Unavailable {
            what: format!("stockaded at {}", self.host),
            reason: format!("the connection broke during the call ({why})"),
            fix: "the daemon stopped or restarted; retry when it is back".into(),
        }
    }

    /// Creates sandboxes on the daemon's provider `name` (default: the daemon's).
    pub fn with_backend(mut self, name: Option<String>) -> RemoteProvider {
        self.backend = name;
        self
    }

    /// Where the daemon is.
    pub fn host(&self) -> &Address {
        &self.host
    }

    fn req<T>(&self, msg: T) -> tonic::Request<T> {
        let mut r = tonic::Request::new(msg);
        if let Some(a) = &self.auth {
            r.metadata_mut().insert("authorization", a.clone());
        }
        r
    }

    fn client(&self) -> StockadeClient<Channel> {
        self.client.clone()
    }

    /// The daemon's version and the caller's tenant.
    pub async fn health(&self) -> Result<pb::HealthReply> {
        self.client()
            .health(self.req(pb::HealthRequest {}))
            .await
            .map(tonic::Response::into_inner)
            .map_err(|s| self.fail(s))
    }

    /// Creates a sandbox from `spec` (a warm one when a pool of its template exists
    /// and `no_pool` is false). Returns the info and whether it came from a pool.
    pub async fn create_spec(
        &self,
        spec: &SandboxSpec,
        owner_pid: Option<u32>,
        no_pool: bool,
    ) -> Result<(SandboxInfo, bool)> {
        let spec_json = serde_json::to_string(spec)
            .map_err(|e| Error::Internal(format!("cannot encode the spec: {e}")))?;
        let r = self
            .client()
            .create(self.req(pb::CreateRequest {
                provider: self.backend.clone().unwrap_or_default(),
                spec_json,
                owner_pid: owner_pid.unwrap_or(0),
                no_pool,
            }))
            .await
            .map_err(|s| self.fail(s))?
            .into_inner();
        let pooled = r.pooled;
        Ok((convert::from_sandbox_info(r)?, pooled))
    }

    /// Sends stdin (and optionally its end) to a running streamed exec.
    pub async fn exec_input(&self, exec_id: &str, data: Vec<u8>, close: bool) -> Result<()> {
        self.client()
            .exec_input(self.req(pb::ExecInputRequest {
                exec_id: exec_id.to_string(),
                data,
                close,
                resize: None,
            }))
            .await
            .map(drop)
            .map_err(|s| self.fail(s))
    }

    /// Resizes the terminal of a running streamed exec.
    pub async fn resize_exec(&self, exec_id: &str, size: TtySize) -> Result<()> {
        self.client()
            .exec_input(self.req(pb::ExecInputRequest {
                exec_id: exec_id.to_string(),
                data: Vec::new(),
                close: false,
                resize: Some(convert::tty_size(size)),
            }))
            .await
            .map(drop)
            .map_err(|s| self.fail(s))
    }

    /// Kills a running streamed exec.
    pub async fn cancel_exec(&self, exec_id: &str) -> Result<()> {
        self.client()
            .cancel_exec(self.req(pb::CancelExecRequest {
                exec_id: exec_id.to_string(),
            }))
            .await
            .map(drop)
            .map_err(|s| self.fail(s))
    }

    /// Keeps `size` idle sandboxes of the template `spec` (env and workdir are bound
    /// at acquisition), at most `max` at once (0: twice `size`).
    pub async fn pool_warm(&self, spec: &SandboxSpec, size: u32, max: u32) -> Result<pb::PoolInfo> {
        let spec_json = serde_json::to_string(spec)
            .map_err(|e| Error::Internal(format!("cannot encode the spec: {e}")))?;
        self.client()
            .pool_warm(self.req(pb::PoolWarmRequest {
                provider: self.backend.clone().unwrap_or_default(),
                spec_json,
                size,
                max,
            }))
            .await
            .map(tonic::Response::into_inner)
            .map_err(|s| self.fail(s))
    }

    /// The caller's pools.
    pub async fn pool_list(&self) -> Result<Vec<pb::PoolInfo>> {
        self.client()
            .pool_list(self.req(pb::PoolListRequest {}))
            .await
            .map(|r| r.into_inner().pools)
            .map_err(|s| self.fail(s))
    }

    /// Drains one pool (or all the caller's, `None`); returns the destroyed ids.
    pub async fn pool_drain(&self, template_id: Option<&str>) -> Result<Vec<String>> {
        self.client()
            .pool_drain(self.req(pb::PoolDrainRequest {
                template_id: template_id.unwrap_or_default().to_string(),
            }))
            .await
            .map(|r| r.into_inner().destroyed)
            .map_err(|s| self.fail(s))
    }

    /// The session's live sandbox, or a new one on its workspace.
    pub async fn session_get(&self, name: &str) -> Result<SandboxInfo> {
        let r = self
            .client()
            .session_get(self.req(pb::SessionRef { name: name.into() }))
            .await
            .map_err(|s| self.fail(s))?;
        convert::from_sandbox_info(r.into_inner())
    }

    /// Destroys the session's sandbox, keeps its workspace.
    pub async fn session_release(&self, name: &str) -> Result<()> {
        self.client()
            .session_release(self.req(pb::SessionRef { name: name.into() }))
            .await
            .map(drop)
            .map_err(|s| self.fail(s))
    }

    /// Destroys the session's sandbox and workspace.
    pub async fn session_delete(&self, name: &str) -> Result<()> {
        self.client()
            .session_delete(self.req(pb::SessionRef { name: name.into() }))
            .await
            .map(drop)
            .map_err(|s| self.fail(s))
    }

    /// The caller's sessions.
    pub async fn session_list(&self) -> Result<Vec<SessionInfo>> {
        self.client()
            .session_list(self.req(pb::SessionListRequest {}))
            .await
            .map(|r| {
                r.into_inner()
                    .sessions
                    .into_iter()
                    .map(convert::from_session_info)
                    .collect()
            })
            .map_err(|s| self.fail(s))
    }

    async fn stream_exec(
        &self,
        id: &str,
        req: ExecRequest,
        output: Option<OutputSender>,
        mut input: Option<InputReceiver>,
    ) -> Result<ExecOutcome> {
        if let Some(uid) = req.uid {
            return Err(Error::Unavailable {
                what: format!("running an exec as uid {uid} through the daemon API"),
                reason: "the daemon's exec request carries no uid".into(),
                fix: "leave the exec's uid unset, or run it in the daemon's process (the E2B API does)".into(),
            });
        }
        let mut stream = self
            .client()
            .exec_stream(self.req(convert::exec_request(id, &req)))
            .await
            .map_err(|s| self.fail(s))?
            .into_inner();
        let mut forward = None;
        let result = loop {
            let event = match stream.message().await {
                Ok(Some(e)) => e,
                Ok(None) => {
                    break Err(self.cut_off(&format!(
                        "the exec in sandbox {id} ended without an outcome"
                    )));
                }
                Err(s) => break Err(self.fail(s)),
            };
            match event.event {
                Some(pb::exec_event::Event::Started(exec_id)) => {
                    if let Some(mut input) = input.take() {
                        let me = self.clone();
                        forward = Some(tokio::spawn(async move {
                            while let Some(m) = input.recv().await {
                                let sent = match m {
                                    ExecInput::Stdin(d) => me.exec_input(&exec_id, d, false).await,
                                    ExecInput::CloseStdin => {
                                        me.exec_input(&exec_id, Vec::new(), true).await
                                    }
                                    // The daemon API ends an exec; it sends no other signal.
                                    ExecInput::Kill | ExecInput::Signal(_) => {
                                        me.cancel_exec(&exec_id).await
                                    }
                                    ExecInput::Resize(size) => me.resize_exec(&exec_id, size).await,
                                };
                                if sent.is_err() {
                                    break;
                                }
                            }
                        }));
                    }
                }
                Some(pb::exec_event::Event::Output(c)) => {
                    if let Some(tx) = &output {
                        let stream = match c.stream() {
                            pb::StreamKind::Stdout => Stream::Stdout,
                            pb::StreamKind::Stderr => Stream::Stderr,
                        };
                        let _ = tx
                            .send(OutputChunk {
                                stream,
                                data: c.data,
                            })
                            .await;
                    }
                }
                Some(pb::exec_event::Event::Outcome(o)) => break Ok(convert::from_outcome(o)),
                None => {}
            }
        };
        if let Some(f) = forward {
            f.abort();
        }
        result
    }
}

#[async_trait]
impl Provider for RemoteProvider {
    fn name(&self) -> &'static str {
        "remote"
    }

    /// The daemon checks the spec against its provider; nothing is refused here.
    fn capabilities(&self) -> Capabilities {
        Capabilities::FULL_LINUX
    }

    async fn probe(&self) -> Result<Vec<Check>> {
        let h = self.health().await?;
        Ok(vec![Check {
            name: "stockaded".into(),
            ok: true,
            detail: format!(
                "version {} at {}, tenant {}, providers {}",
                h.version,
                self.host,
                h.tenant,
                h.providers.join(", ")
            ),
            fix: None,
        }])
    }

    async fn connect_port(&self, id: &str, port: u16) -> Result<stockade_core::PortStream> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (out_tx, out_rx) = tokio::sync::mpsc::channel::<pb::PortData>(16);
        let first = pb::PortData {
            sandbox_id: id.to_string(),
            port: port.into(),
            data: Vec::new(),
        };
        let _ = out_tx.send(first).await;
        let mut incoming = self
            .client()
            .connect_port(self.req(tokio_stream::wrappers::ReceiverStream::new(out_rx)))
            .await
            .map_err(|s| self.fail(s))?
            .into_inner();
        // The caller's end, and ours, whose bytes go to the daemon and back.
        let (caller, ours) = tokio::io::duplex(64 << 10);
        let (mut from_caller, mut to_caller) = tokio::io::split(ours);
        tokio::spawn(async move {
            let mut buf = vec![0u8; 64 << 10];
            loop {
                match from_caller.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        let m = pb::PortData {
                            data: buf[..n].to_vec(),
                            ..Default::default()
                        };
                        if out_tx.send(m).await.is_err() {
                            break;
                        }
                    }
                }
            }
            // Dropping the sender ends the request stream: the daemon closes the
            // connection's sending side.
        });
        tokio::spawn(async move {
            while let Ok(Some(m)) = incoming.message().await {
                if to_caller.write_all(&m.data).await.is_err() {
                    break;
                }
            }
            let _ = to_caller.shutdown().await;
        });
        Ok(Box::new(caller))
    }

    async fn create(&self, spec: CheckedSpec, opts: CreateOptions) -> Result<SandboxInfo> {
        let owner = match *self.host {
            // A pid means something only on the daemon's host.
            Address::Unix(_) => opts.owner_pid,
            Address::Tcp { .. } => None,
        };
        self.create_spec(&spec, owner, false).await.map(|(i, _)| i)
    }

    async fn exec(&self, id: &str, req: CheckedRequest, io: ExecIo) -> Result<ExecOutcome> {
        let req = req.into_inner();
        if io.output.is_some() || io.input.is_some() {
            return self.stream_exec(id, req, io.output, io.input).await;
        }
        self.client()
            .exec(self.req(convert::exec_request(id, &req)))
            .await
            .map(|r| convert::from_outcome(r.into_inner()))
            .map_err(|s| self.fail(s))
    }

    async fn health(&self, id: &str) -> Result<()> {
        self.inspect(id).await.map(drop)
    }

    /// Idempotent, as the trait promises: a sandbox the daemon no longer knows (already
    /// destroyed, or never this tenant's) is gone, as in-process.
    async fn destroy(&self, id: &str) -> Result<()> {
        match self
            .client()
            .destroy(self.req(pb::SandboxRef { id: id.into() }))
            .await
            .map_err(|s| self.fail(s))
        {
            Err(e) if e.code() != ErrorCode::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    async fn list(&self) -> Result<Vec<SandboxInfo>> {
        let r = self
            .client()
            .list(self.req(pb::ListRequest {}))
            .await
            .map_err(|s| self.fail(s))?;
        r.into_inner()
            .sandboxes
            .into_iter()
            .map(convert::from_sandbox_info)
            .collect()
    }

    async fn inspect(&self, id: &str) -> Result<SandboxInfo> {
        let r = self
            .client()
            .inspect(self.req(pb::SandboxRef { id: id.into() }))
            .await
            .map_err(|s| self.fail(s))?;
        convert::from_sandbox_info(r.into_inner())
    }

    async fn gc(&self) -> Result<GcReport> {
        let r = self
            .client()
            .gc(self.req(pb::GcRequest {}))
            .await
            .map_err(|s| self.fail(s))?
            .into_inner();
        Ok(GcReport {
            reaped: r.reaped,
            errors: r.errors,
        })
    }

    async fn file(&self, id: &str, op: FileOp) -> Result<FileResult> {
        let r = self
            .client()
            .file(self.req(pb::FileRequest {
                sandbox_id: id.into(),
                op: Some(convert::file_op(op)),
            }))
            .await
            .map_err(|s| self.fail(s))?;
        convert::from_file_result(r.into_inner())
    }

    // The daemon's provider decides what it serves: every facet the API carries goes
    // to it, and its refusals come back as they are.
    fn pausing(&self) -> Option<&dyn stockade_core::Pausing> {
        Some(self)
    }

    fn forking(&self) -> Option<&dyn stockade_core::Forking> {
        Some(self)
    }

    fn snapshotting(&self) -> Option<&dyn stockade_core::Snapshotting> {
        Some(self)
    }

    fn egress_control(&self) -> Option<&dyn stockade_core::EgressControl> {
        Some(self)
    }

    fn terminals(&self) -> bool {
        true
    }
}

#[async_trait]
impl stockade_core::Pausing for RemoteProvider {
    async fn pause(&self, id: &str) -> Result<()> {
        self.client()
            .pause(self.req(pb::SandboxRef { id: id.into() }))
            .await
            .map_err(|s| self.fail(s))?;
        Ok(())
    }

    async fn resume(&self, id: &str) -> Result<()> {
        self.client()
            .resume(self.req(pb::SandboxRef { id: id.into() }))
            .await
            .map_err(|s| self.fail(s))?;
        Ok(())
    }
}

#[async_trait]
impl stockade_core::Forking for RemoteProvider {
    /// The copies belong to the daemon's tenant (the daemon owns them; `opts` has
    /// no owner pid to give across hosts).
    async fn fork(&self, id: &str, count: u32, opts: CreateOptions) -> Result<Vec<SandboxInfo>> {
        let _ = opts;
        let r = self
            .client()
            .fork(self.req(pb::ForkRequest {
                id: id.into(),
                count,
            }))
            .await
            .map_err(|s| self.fail(s))?;
        r.into_inner()
            .sandboxes
            .into_iter()
            .map(convert::from_sandbox_info)
            .collect()
    }
}

#[async_trait]
impl stockade_core::Snapshotting for RemoteProvider {
    async fn snapshot(&self, id: &str, name: &str) -> Result<SnapshotInfo> {
        let r = self
            .client()
            .snapshot(self.req(pb::SnapshotRequest {
                id: id.into(),
                name: name.into(),
            }))
            .await
            .map_err(|s| self.fail(s))?;
        convert::from_snapshot_info(r.into_inner())
    }

    async fn snapshots(&self) -> Result<Vec<SnapshotInfo>> {
        let r = self
            .client()
            .snapshot_list(self.req(pb::SnapshotListRequest {}))
            .await
            .map_err(|s| self.fail(s))?;
        r.into_inner()
            .snapshots
            .into_iter()
            .map(convert::from_snapshot_info)
            .collect()
    }

    async fn remove_snapshot(&self, name: &str) -> Result<()> {
        self.client()
            .snapshot_remove(self.req(pb::SnapshotRef { name: name.into() }))
            .await
            .map_err(|s| self.fail(s))?;
        Ok(())
    }

    async fn create_from_snapshot(&self, name: &str, opts: CreateOptions) -> Result<SandboxInfo> {
        let owner = match *self.host {
            Address::Unix(_) => opts.owner_pid,
            Address::Tcp { .. } => None,
        };
        let r = self
            .client()
            .create_from_snapshot(self.req(pb::CreateFromSnapshotRequest {
                provider: self.backend.clone().unwrap_or_default(),
                name: name.into(),
                owner_pid: owner.unwrap_or(0),
            }))
            .await
            .map_err(|s| self.fail(s))?;
        convert::from_sandbox_info(r.into_inner())
    }
}

#[async_trait]
impl stockade_core::EgressControl for RemoteProvider {
    async fn set_network(&self, id: &str, network: &stockade_core::spec::Network) -> Result<()> {
        self.client()
            .set_network(self.req(pb::SetNetworkRequest {
                sandbox_id: id.into(),
                network_json: serde_json::to_string(network).unwrap_or_default(),
            }))
            .await
            .map_err(|s| self.fail(s))?;
        Ok(())
    }

    async fn egress_denied(
        &self,
        id: &str,
        since_ms: u64,
    ) -> Result<Vec<stockade_core::EgressDenial>> {
        let r = self
            .client()
            .egress_denied(self.req(pb::EgressDeniedRequest {
                sandbox_id: id.into(),
                since_ms,
            }))
            .await
            .map_err(|s| self.fail(s))?;
        Ok(r.into_inner()
            .denied
            .into_iter()
            .map(convert::from_denial)
            .collect())
    }
}
