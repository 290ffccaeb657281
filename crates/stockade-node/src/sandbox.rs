//! A live sandbox: its id and info, exec, file operations and destroy.

use napi::Result;
use napi::bindgen_prelude::Buffer;
use napi_derive::napi;
use stockade::Sandbox;

use crate::errors::{json, to_js};
use crate::exec::{ExecHandle, ExecOptions};

/// A port of a sandbox on this host's loopback (`SandboxHandle::forward`).
#[napi]
pub struct ForwardHandle {
    fwd: stockade::Forward,
}

#[napi]
impl ForwardHandle {
    /// The address it listens on (127.0.0.1).
    #[napi(getter)]
    pub fn host(&self) -> String {
        self.fwd.local_addr().ip().to_string()
    }

    /// The port it listens on.
    #[napi(getter)]
    pub fn port(&self) -> u32 {
        u32::from(self.fwd.local_addr().port())
    }

    /// Stops listening and ends the connections it carries.
    #[napi]
    pub fn close(&self) {
        self.fwd.close();
    }
}

/// A live sandbox.
#[napi]
pub struct SandboxHandle {
    sb: Sandbox,
}

impl SandboxHandle {
    pub fn new(sb: Sandbox) -> SandboxHandle {
        SandboxHandle { sb }
    }
}

#[napi]
impl SandboxHandle {
    #[napi(getter)]
    pub fn id(&self) -> String {
        self.sb.id().to_string()
    }

    /// What is known about the sandbox (spec, applied hardening, expiry) as JSON.
    #[napi]
    pub fn info_json(&self) -> Result<String> {
        json(self.sb.info())
    }

    /// Starts a command; with `stream`, its output is read live from the handle.
    #[napi]
    pub fn start(&self, argv: Vec<String>, opts: ExecOptions, stream: bool) -> Result<ExecHandle> {
        let req = opts.request(argv)?;
        Ok(ExecHandle::start(self.sb.clone(), req, stream))
    }

    /// Starts a command on a terminal of `rows` x `cols`.
    #[napi]
    pub fn terminal(
        &self,
        argv: Vec<String>,
        opts: ExecOptions,
        rows: u32,
        cols: u32,
    ) -> Result<ExecHandle> {
        let size = crate::exec::tty_size(rows, cols)?;
        let req = opts.request(argv)?;
        Ok(ExecHandle::terminal(self.sb.clone(), req, size))
    }

    /// Makes port `port` of the sandbox reachable on this host's loopback at
    /// `local_port` (0: a free one), each connection carried by Stockade.
    #[napi]
    pub async fn forward(&self, port: u32, local_port: u32) -> Result<ForwardHandle> {
        let bad = |what: &str, n: u32| {
            to_js(stockade::Error::InvalidRequest(format!(
                "{what} {n} is not a TCP port (1 to 65535; 0 for a free local one)"
            )))
        };
        let port = u16::try_from(port).map_err(|_| bad("port", port))?;
        let local = u16::try_from(local_port).map_err(|_| bad("local port", local_port))?;
        let fwd = self.sb.forward(port, local).await.map_err(to_js)?;
        Ok(ForwardHandle { fwd })
    }

    /// What the provider says of the sandbox now (state, expiry), as JSON.
    #[napi]
    pub async fn inspect_json(&self) -> Result<String> {
        json(&self.sb.inspect().await.map_err(to_js)?)
    }

    /// What the egress policy refused at or after `since_ms` (unix ms), as JSON.
    #[napi]
    pub async fn egress_denied_json(&self, since_ms: i64) -> Result<String> {
        let since = u64::try_from(since_ms).unwrap_or(0);
        let d = self.sb.egress_denied(since).await.map_err(to_js)?;
        serde_json::to_string(&d).map_err(|e| to_js(stockade::Error::Internal(e.to_string())))
    }

    /// Replaces the egress policy of a sandbox created with one (`network_json`: the
    /// spec's `network` value).
    #[napi]
    pub async fn set_network(&self, network_json: String) -> Result<()> {
        let network: stockade::spec::Network = serde_json::from_str(&network_json)
            .map_err(|e| to_js(stockade::Error::InvalidRequest(format!("network: {e}"))))?;
        self.sb.set_network(&network).await.map_err(to_js)
    }

    /// Pauses the sandbox where it is (native: the cgroup freezer; microvm: to disk).
    #[napi]
    pub async fn pause(&self) -> Result<()> {
        self.sb.pause().await.map_err(to_js)
    }

    /// Resumes a paused sandbox where it stopped.
    #[napi]
    pub async fn resume(&self) -> Result<()> {
        self.sb.resume().await.map_err(to_js)
    }

    /// Starts `count` copies of this paused sandbox, owned by this process.
    #[napi]
    pub async fn fork(&self, count: u32) -> Result<Vec<SandboxHandle>> {
        let opts = stockade::CreateOptions {
            owner_pid: Some(std::process::id()),
        };
        let v = self.sb.fork(count, opts).await.map_err(to_js)?;
        Ok(v.into_iter().map(SandboxHandle::new).collect())
    }

    /// Keeps this sandbox's state as the named snapshot `name`; its info as JSON.
    #[napi]
    pub async fn snapshot(&self, name: String) -> Result<String> {
        let info = self.sb.snapshot(&name).await.map_err(to_js)?;
        serde_json::to_string(&info).map_err(|e| napi::Error::from_reason(e.to_string()))
    }

    /// Destroys the sandbox (idempotent).
    #[napi]
    pub async fn destroy(&self) -> Result<()> {
        self.sb.destroy().await.map_err(to_js)
    }

    /// Writes a file (parents created), as the sandbox user.
    #[napi]
    pub async fn write(&self, path: String, data: Buffer) -> Result<()> {
        self.sb.write(&path, data.to_vec()).await.map_err(to_js)
    }

    /// Reads a whole file.
    #[napi]
    pub async fn read(&self, path: String) -> Result<Buffer> {
        Ok(self.sb.read(&path).await.map_err(to_js)?.into())
    }

    /// Replaces `old` by `new`; the number of replacements.
    #[napi]
    pub async fn edit(
        &self,
        path: String,
        old: String,
        new: String,
        replace_all: bool,
    ) -> Result<u32> {
        let n = self
            .sb
            .edit(&path, &old, &new, replace_all)
            .await
            .map_err(to_js)?;
        Ok(u32::try_from(n).unwrap_or(u32::MAX))
    }

    /// A directory's entries as JSON.
    #[napi]
    pub async fn ls(&self, path: String) -> Result<String> {
        json(&self.sb.ls(&path).await.map_err(to_js)?)
    }

    /// One path's entry as JSON.
    #[napi]
    pub async fn stat(&self, path: String) -> Result<String> {
        json(&self.sb.stat(&path).await.map_err(to_js)?)
    }

    /// Paths below `root` matching `pattern`.
    #[napi]
    pub async fn glob(&self, pattern: String, root: String) -> Result<Vec<String>> {
        self.sb.glob(&pattern, &root).await.map_err(to_js)
    }

    /// Matching lines below `root` as JSON.
    #[napi]
    pub async fn grep(
        &self,
        regex: String,
        root: String,
        include: Option<String>,
        max_matches: u32,
    ) -> Result<String> {
        let m = self
            .sb
            .grep(&regex, &root, include.as_deref(), max_matches)
            .await
            .map_err(to_js)?;
        json(&m)
    }

    /// Creates a directory and its parents.
    #[napi]
    pub async fn mkdir(&self, path: String) -> Result<()> {
        self.sb.mkdir(&path).await.map_err(to_js)
    }

    /// Sets `user.` extended attributes of a path (names in full: `user.owner`).
    #[napi]
    pub async fn set_xattrs(
        &self,
        path: String,
        xattrs: std::collections::HashMap<String, String>,
    ) -> Result<()> {
        self.sb
            .set_xattrs(&path, xattrs.into_iter().collect())
            .await
            .map_err(to_js)
    }

    /// Removes a file or directory tree.
    #[napi]
    pub async fn rm(&self, path: String) -> Result<()> {
        self.sb.rm(&path).await.map_err(to_js)
    }

    /// Unpacks a tar (or tar.gz) archive into `dest` in the sandbox.
    #[napi]
    pub async fn upload(&self, dest: String, archive: Buffer) -> Result<()> {
        self.sb.upload(&dest, archive.to_vec()).await.map_err(to_js)
    }

    /// Packs a file or directory of the sandbox into a tar archive.
    #[napi]
    pub async fn download(&self, path: String) -> Result<Buffer> {
        Ok(self.sb.download(&path).await.map_err(to_js)?.into())
    }
}
