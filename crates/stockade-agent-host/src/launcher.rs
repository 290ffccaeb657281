//! What a Linux provider does differently from another: how a sandbox whose PID 1 is
//! the Stockade agent is launched, found, listed and torn down. Everything said to the
//! agent once it runs (exec, health, files) is [`AgentProvider`](crate::AgentProvider)'s.

use async_trait::async_trait;
use stockade_core::{
    Capabilities, Check, CheckedSpec, CreateOptions, EgressControl, Error, Forking, GcReport,
    Pausing, Result, SandboxInfo, Snapshotting, UsageCounters, Verb,
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

    /// See `Provider::pausing`; the default: none.
    fn pausing(&self) -> Option<&dyn Pausing> {
        None
    }

    /// See `Provider::forking`; the default: none.
    fn forking(&self) -> Option<&dyn Forking> {
        None
    }

    /// See `Provider::snapshotting`; the default: none.
    fn snapshotting(&self) -> Option<&dyn Snapshotting> {
        None
    }

    /// See `Provider::egress_control`; the default: none.
    fn egress_control(&self) -> Option<&dyn EgressControl> {
        None
    }

    /// See `Provider::usage_counters`; the default: none.
    fn usage_counters(&self) -> Option<&dyn UsageCounters> {
        None
    }

    /// Whether the agent of this launcher's sandboxes runs file operations as another
    /// uid of the sandbox (`Provider::files_as_user`, which the agent serves); the
    /// default: no.
    fn files_as_user(&self) -> bool {
        false
    }

    /// Whether its execs may have terminals (`Provider::terminals`); the default: no.
    fn terminals(&self) -> bool {
        false
    }

    /// See `Provider::why_not`.
    fn why_not(&self, verb: Verb) -> &'static str {
        stockade_core::default_reason(verb)
    }

    /// Explains a failure to talk to the agent of `id` (its connection was lost, it did
    /// not answer): e.g. the sandbox died under us, and why. The default keeps `error`.
    async fn explain(&self, id: &str, error: Error) -> Error {
        let _ = id;
        error
    }
}
