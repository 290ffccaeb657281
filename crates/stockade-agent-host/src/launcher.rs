//! What a Linux provider does differently from another: how a sandbox whose PID 1 is
//! the Stockade agent is launched, found, listed and torn down. Everything said to the
//! agent once it runs (exec, health, files) is [`AgentProvider`](crate::AgentProvider)'s.

use async_trait::async_trait;
use stockade_core::{
    Capabilities, Check, CheckedSpec, CreateOptions, EgressDenial, Error, GcReport, Result,
    SNAPSHOT_REASON, SandboxInfo, SnapshotInfo, Usage,
};

use crate::transport::Transport;

/// Launches and tears down sandboxes that run the agent as PID 1 (the native
/// monitor, a docker container; a microVM next).
#[async_trait]
pub trait Launcher: Send + Sync + 'static {
    /// How the host reaches the agent of one sandbox.
    type Transport: Transport;

    /// Provider name (`native`, `docker`).
    fn name(&self) -> &'static str;

    /// What sandboxes of this launcher can enforce.
    fn capabilities(&self) -> Capabilities;

    /// Checks the host.
    async fn probe(&self) -> Result<Vec<Check>>;

    /// Starts a sandbox from a spec already checked against [`Self::capabilities`]
    /// (by the caller of `Provider::create`); returns once its agent answers.
    async fn launch(&self, spec: CheckedSpec, opts: &CreateOptions) -> Result<SandboxInfo>;

    /// The transport to the agent of sandbox `id`; `NotFound` when there is none.
    async fn transport(&self, id: &str) -> Result<Self::Transport>;

    /// Kills everything in the sandbox and removes all its state. Idempotent.
    async fn destroy(&self, id: &str) -> Result<()>;

    /// The live sandboxes.
    async fn list(&self) -> Result<Vec<SandboxInfo>>;

    /// See `Provider::live_ids`; the default lists them.
    async fn live_ids(&self) -> Result<Vec<String>> {
        Ok(self.list().await?.into_iter().map(|i| i.id).collect())
    }

    /// One sandbox.
    async fn inspect(&self, id: &str) -> Result<SandboxInfo>;

    /// Reaps what expired, lost its owner, or was left half-made by a crash.
    async fn gc(&self) -> Result<GcReport>;

    /// See `Provider::prepare_image`; the default does nothing.
    async fn prepare_image(
        &self,
        reference: &str,
        progress: &mut (dyn for<'a> FnMut(&'a str) + Send),
    ) -> Result<()> {
        let _ = (reference, progress);
        Ok(())
    }

    /// See `Provider::host_ids`; the default: the same ids.
    async fn host_ids(&self, uid: u32, gid: u32) -> Result<(u32, u32)> {
        Ok((uid, gid))
    }

    /// See `Provider::usage`; the default refuses, naming the provider.
    async fn usage(&self, id: &str) -> Result<Usage> {
        let _ = id;
        Err(Error::Unavailable {
            what: format!("resource usage on the {} provider", self.name()),
            reason: "this provider does not read its sandboxes' counters".into(),
            fix: "use the native provider".into(),
        })
    }

    /// See `Provider::pause`; the default refuses, naming the provider.
    async fn pause(&self, id: &str) -> Result<()> {
        let _ = id;
        Err(stockade_core::unsupported(
            self.name(),
            "pause",
            "this provider cannot keep a stopped sandbox's state",
        ))
    }

    /// See `Provider::resume`; the default refuses, naming the provider.
    async fn resume(&self, id: &str) -> Result<()> {
        let _ = id;
        Err(stockade_core::unsupported(
            self.name(),
            "resume",
            "this provider cannot keep a stopped sandbox's state",
        ))
    }

    /// See `Provider::fork`; the default refuses, naming the provider.
    async fn fork(&self, id: &str, count: u32, opts: &CreateOptions) -> Result<Vec<SandboxInfo>> {
        let _ = (id, count, opts);
        Err(stockade_core::unsupported(
            self.name(),
            "fork",
            "this provider cannot copy a running sandbox's state",
        ))
    }

    /// See `Provider::snapshot`; the default refuses, naming the provider.
    async fn snapshot(&self, id: &str, name: &str) -> Result<SnapshotInfo> {
        let _ = (id, name);
        Err(stockade_core::unsupported(
            self.name(),
            "snapshot",
            SNAPSHOT_REASON,
        ))
    }

    /// See `Provider::snapshots`; the default refuses, naming the provider.
    async fn snapshots(&self) -> Result<Vec<SnapshotInfo>> {
        Err(stockade_core::unsupported(
            self.name(),
            "listing snapshots",
            SNAPSHOT_REASON,
        ))
    }

    /// See `Provider::remove_snapshot`; the default refuses, naming the provider.
    async fn remove_snapshot(&self, name: &str) -> Result<()> {
        let _ = name;
        Err(stockade_core::unsupported(
            self.name(),
            "removing a snapshot",
            SNAPSHOT_REASON,
        ))
    }

    /// See `Provider::create_from_snapshot`; the default refuses, naming the provider.
    async fn create_from_snapshot(&self, name: &str, opts: &CreateOptions) -> Result<SandboxInfo> {
        let _ = (name, opts);
        Err(stockade_core::unsupported(
            self.name(),
            "starting from a snapshot",
            SNAPSHOT_REASON,
        ))
    }

    /// What the egress policy of `id` refused at or after `since_ms`; the default:
    /// nothing.
    async fn egress_denied(&self, id: &str, since_ms: u64) -> Result<Vec<EgressDenial>> {
        let _ = (id, since_ms);
        Ok(Vec::new())
    }

    /// Replaces the egress policy of `id`; the default: not supported.
    async fn set_network(&self, id: &str, network: &stockade_core::spec::Network) -> Result<()> {
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

    /// Explains a failure to talk to the agent of `id` (its connection was lost, it did
    /// not answer): e.g. the sandbox died under us, and why. The default keeps `error`.
    async fn explain(&self, id: &str, error: Error) -> Error {
        let _ = id;
        error
    }
}
