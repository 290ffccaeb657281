//! The microVM launcher's optional verbs: pause and resume (the VM's state written to
//! disk), fork and named snapshots (copies started from that state), and a live
//! egress policy.

use super::*;

#[async_trait]
impl stockade_core::Pausing for MicrovmLauncher {
    async fn pause(&self, id: &str) -> Result<()> {
        self.pause_vm(id).await
    }

    async fn resume(&self, id: &str) -> Result<()> {
        self.resume_vm(id).await
    }
}

#[async_trait]
impl stockade_core::Forking for MicrovmLauncher {
    async fn fork(&self, id: &str, count: u32, opts: CreateOptions) -> Result<Vec<SandboxInfo>> {
        self.fork_vm(id, count, &opts).await
    }
}

#[async_trait]
impl stockade_core::Snapshotting for MicrovmLauncher {
    async fn snapshot(&self, id: &str, name: &str) -> Result<SnapshotInfo> {
        self.snapshot_vm(id, name).await
    }

    async fn snapshots(&self) -> Result<Vec<SnapshotInfo>> {
        self.list_snapshots()
    }

    async fn remove_snapshot(&self, name: &str) -> Result<()> {
        self.remove_snapshot_dir(name)
    }

    async fn create_from_snapshot(&self, name: &str, opts: CreateOptions) -> Result<SandboxInfo> {
        self.start_from_snapshot(name, &opts).await
    }
}

#[async_trait]
impl stockade_core::EgressControl for MicrovmLauncher {
    async fn egress_denied(
        &self,
        id: &str,
        since_ms: u64,
    ) -> Result<Vec<stockade_agent_proto::EgressDenial>> {
        check_sandbox_id(id)?;
        self.read_record(id)?;
        stockade_linux::egress_denied_via(&self.dir(id).join(NET_DIR).join("net.sock"), since_ms)
            .await
    }

    async fn set_network(&self, id: &str, network: &stockade_spec::Network) -> Result<()> {
        check_sandbox_id(id)?;
        let record = self.read_record(id)?;
        if self.is_paused(id) {
            return Err(stockade_core::paused_error(id));
        }
        stockade_linux::set_network_via(
            &self.dir(id).join(NET_DIR).join("net.sock"),
            id,
            network,
            self.live_network(id, &record.info.spec),
            &[],
        )
        .await
    }
}
