//! [`AgentProvider`]: a [`Provider`] made of a [`Launcher`] and the agent host.

use async_trait::async_trait;
use stockade_core::{
    Capabilities, Check, CheckedRequest, CheckedSpec, CreateOptions, EgressControl, Error, ExecIo,
    ExecOutcome, FileOp, FileResult, FilesAsUser, Forking, GcReport, Pausing, Provider, Result,
    SandboxInfo, Snapshotting, UsageCounters, Verb,
};

use crate::client;
use crate::launcher::Launcher;

/// The provider of every launcher whose sandboxes run the Stockade agent as PID 1:
/// the launcher starts, lists and ends sandboxes; execs, health checks and file
/// operations go to the agent over the launcher's transport, the same way for all.
/// The launcher's own methods (state root, image store) are at [`Self::launcher`].
#[derive(Clone, Debug, Default)]
pub struct AgentProvider<L> {
    launcher: L,
}

impl<L: Launcher + Default> AgentProvider<L> {
    /// The provider on the launcher's default configuration.
    pub fn new() -> Self {
        Self::default()
    }
}

impl<L: Launcher> AgentProvider<L> {
    /// The launcher.
    pub fn launcher(&self) -> &L {
        &self.launcher
    }
}

impl<L: Launcher> AgentProvider<L> {
    /// A file operation as the sandbox user (`uid` None) or as `uid` of the sandbox.
    async fn file_by(&self, id: &str, uid: Option<u32>, op: FileOp) -> Result<FileResult> {
        let transport = self.launcher.transport(id).await?;
        match client::file(id, &transport, uid, op).await {
            Ok(r) => Ok(r),
            // The agent's own answers (no such path, a limit) are the caller's; a lost
            // connection may mean the sandbox died.
            Err(e @ Error::Internal(_)) => Err(self.launcher.explain(id, e).await),
            Err(e) => Err(e),
        }
    }
}

impl<L: Launcher> From<L> for AgentProvider<L> {
    fn from(launcher: L) -> Self {
        AgentProvider { launcher }
    }
}

#[async_trait]
impl<L: Launcher> Provider for AgentProvider<L> {
    fn name(&self) -> &'static str {
        self.launcher.name()
    }

    fn capabilities(&self) -> Capabilities {
        self.launcher.capabilities()
    }

    async fn probe(&self) -> Result<Vec<Check>> {
        self.launcher.probe().await
    }

    async fn prepare_image(
        &self,
        reference: &str,
        progress: &mut (dyn for<'a> FnMut(&'a str) + Send),
    ) -> Result<()> {
        self.launcher.prepare_image(reference, progress).await
    }

    async fn create(&self, spec: CheckedSpec, opts: CreateOptions) -> Result<SandboxInfo> {
        self.launcher.launch(spec, &opts).await
    }

    async fn exec(&self, id: &str, req: CheckedRequest, io: ExecIo) -> Result<ExecOutcome> {
        let transport = self.launcher.transport(id).await?;
        let started_ms = stockade_core::now_ms();
        match client::exec(id, &transport, req.into_inner(), io).await {
            Ok(mut o) => {
                // A denial is recorded by the time the code sees its refusal; one
                // that ended the exec is therefore already here.
                if let Some(e) = self.launcher.egress_control() {
                    o.egress_denied = e.egress_denied(id, started_ms).await?;
                }
                Ok(o)
            }
            Err(e) => Err(self.launcher.explain(id, e).await),
        }
    }

    async fn health(&self, id: &str) -> Result<()> {
        let transport = self.launcher.transport(id).await?;
        match client::ping(id, &transport).await {
            Ok(()) => Ok(()),
            Err(e) => Err(self.launcher.explain(id, e).await),
        }
    }

    async fn connect_port(&self, id: &str, port: u16) -> Result<stockade_core::PortStream> {
        let transport = self.launcher.transport(id).await?;
        match client::connect_port(id, &transport, port).await {
            Ok(s) => Ok(Box::new(s)),
            // Nothing listening is the caller's to hear as said; a broken connection
            // may mean the sandbox died.
            Err(e @ (Error::Internal(_) | Error::Gone { .. })) => {
                Err(self.launcher.explain(id, e).await)
            }
            Err(e) => Err(e),
        }
    }

    async fn warm(&self, id: &str) -> Result<()> {
        let transport = self.launcher.transport(id).await?;
        match client::warm(id, &transport).await {
            Ok(()) => Ok(()),
            Err(e) => Err(self.launcher.explain(id, e).await),
        }
    }

    async fn destroy(&self, id: &str) -> Result<()> {
        self.launcher.destroy(id).await
    }

    async fn list(&self) -> Result<Vec<SandboxInfo>> {
        self.launcher.list().await
    }

    async fn live_ids(&self) -> Result<Vec<String>> {
        self.launcher.live_ids().await
    }

    async fn inspect(&self, id: &str) -> Result<SandboxInfo> {
        self.launcher.inspect(id).await
    }

    async fn gc(&self) -> Result<GcReport> {
        self.launcher.gc().await
    }

    async fn host_ids(&self, uid: u32, gid: u32) -> Result<(u32, u32)> {
        self.launcher.host_ids(uid, gid).await
    }

    async fn file(&self, id: &str, op: FileOp) -> Result<FileResult> {
        self.file_by(id, None, op).await
    }

    fn pausing(&self) -> Option<&dyn Pausing> {
        self.launcher.pausing()
    }

    fn forking(&self) -> Option<&dyn Forking> {
        self.launcher.forking()
    }

    fn snapshotting(&self) -> Option<&dyn Snapshotting> {
        self.launcher.snapshotting()
    }

    fn egress_control(&self) -> Option<&dyn EgressControl> {
        self.launcher.egress_control()
    }

    fn usage_counters(&self) -> Option<&dyn UsageCounters> {
        self.launcher.usage_counters()
    }

    fn files_as_user(&self) -> Option<&dyn FilesAsUser> {
        self.launcher
            .files_as_user()
            .then_some(self as &dyn FilesAsUser)
    }

    fn terminals(&self) -> bool {
        self.launcher.terminals()
    }

    fn why_not(&self, verb: Verb) -> &'static str {
        self.launcher.why_not(verb)
    }
}

#[async_trait]
impl<L: Launcher> FilesAsUser for AgentProvider<L> {
    async fn file_as(&self, id: &str, uid: u32, op: FileOp) -> Result<FileResult> {
        self.file_by(id, Some(uid), op).await
    }
}
