//! The gRPC service: authenticates each call to a tenant, translates messages, and
//! hands the work to [`Daemon`].

use std::pin::Pin;
use std::sync::Arc;

use stockade::{Error, ExecInput, SandboxSpec, Stream};
use stockade_client::convert::{self, to_status};
use stockade_client::pb;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::daemon::{Daemon, ExecEvent, PoolView};
use crate::gate::{Tenant, Via};

/// The service over one daemon; callers are authenticated before it (`gate.rs`).
pub struct Service {
    pub daemon: Arc<Daemon>,
}

type Reply<T> = Result<Response<T>, Status>;

fn spec_from(json: &str) -> Result<SandboxSpec, Status> {
    if json.trim().is_empty() {
        return Ok(SandboxSpec::default());
    }
    serde_json::from_str(json)
        .map_err(|e| Status::invalid_argument(format!("invalid request: spec_json: {e}")))
}

fn pool_info(v: PoolView) -> pb::PoolInfo {
    pb::PoolInfo {
        template_id: v.record.template_id,
        provider: v.record.provider,
        spec_json: v.record.spec.to_string(),
        min_idle: v.record.min_idle,
        max: v.record.max,
        idle: v.stats.idle as u32,
        creating: v.stats.creating as u32,
        in_use: v.stats.in_use as u32,
        hits: v.stats.hits,
        misses: v.stats.misses,
        failures: v.stats.failures,
        last_error: v.last_error.unwrap_or_default(),
    }
}

fn st(e: Error) -> Status {
    to_status(&e)
}

impl Service {
    /// The tenant the gate authenticated (a request that did not pass it has none).
    fn tenant<T>(&self, r: &Request<T>) -> Result<String, Status> {
        r.extensions()
            .get::<Tenant>()
            .map(|t| t.0.clone())
            .ok_or_else(|| Status::unauthenticated("the request was not authenticated"))
    }
}

#[tonic::async_trait]
impl pb::stockade_server::Stockade for Service {
    async fn health(&self, r: Request<pb::HealthRequest>) -> Reply<pb::HealthReply> {
        let tenant = self.tenant(&r)?;
        Ok(Response::new(pb::HealthReply {
            version: env!("CARGO_PKG_VERSION").into(),
            tenant,
            uptime_ms: self.daemon.uptime_ms(),
            providers: stockade::PROVIDERS
                .iter()
                .map(std::string::ToString::to_string)
                .collect(),
        }))
    }

    async fn create(&self, r: Request<pb::CreateRequest>) -> Reply<pb::SandboxInfo> {
        let tenant = self.tenant(&r)?;
        // A pid names a process on the daemon's host: only a local caller can mean one.
        let local = r.extensions().get::<Via>() == Some(&Via::Unix);
        let r = r.into_inner();
        let spec = spec_from(&r.spec_json)?;
        let owner = (r.owner_pid != 0 && local).then_some(r.owner_pid);
        let (info, pooled) = self
            .daemon
            .create(&tenant, &r.provider, spec, owner, r.no_pool)
            .await
            .map_err(st)?;
        Ok(Response::new(convert::sandbox_info(&info, pooled)))
    }

    async fn exec(&self, r: Request<pb::ExecRequest>) -> Reply<pb::ExecOutcome> {
        let tenant = self.tenant(&r)?;
        let (id, req) = convert::from_exec_request(r.into_inner());
        let o = self.daemon.exec(&tenant, &id, req).await.map_err(st)?;
        Ok(Response::new(convert::outcome(o)))
    }

    type ExecStreamStream =
        Pin<Box<dyn tokio_stream::Stream<Item = Result<pb::ExecEvent, Status>> + Send>>;

    async fn exec_stream(&self, r: Request<pb::ExecRequest>) -> Reply<Self::ExecStreamStream> {
        let tenant = self.tenant(&r)?;
        let (id, req) = convert::from_exec_request(r.into_inner());
        let events = self.daemon.exec_stream(&tenant, &id, req).map_err(st)?;
        let ev = |e| pb::ExecEvent { event: Some(e) };
        let stream = ReceiverStream::new(events).map(move |e| match e {
            ExecEvent::Started(exec_id) => Ok(ev(pb::exec_event::Event::Started(exec_id))),
            ExecEvent::Output(c) => {
                let stream = match c.stream {
                    Stream::Stdout => pb::StreamKind::Stdout,
                    Stream::Stderr => pb::StreamKind::Stderr,
                };
                Ok(ev(pb::exec_event::Event::Output(pb::OutputChunk {
                    stream: stream as i32,
                    data: c.data,
                })))
            }
            ExecEvent::Outcome(Ok(o)) => {
                Ok(ev(pb::exec_event::Event::Outcome(convert::outcome(o))))
            }
            ExecEvent::Outcome(Err(e)) => Err(st(e)),
        });
        Ok(Response::new(Box::pin(stream)))
    }

    type ConnectPortStream =
        Pin<Box<dyn tokio_stream::Stream<Item = Result<pb::PortData, Status>> + Send>>;

    async fn connect_port(
        &self,
        r: Request<tonic::Streaming<pb::PortData>>,
    ) -> Reply<Self::ConnectPortStream> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let tenant = self.tenant(&r)?;
        let mut incoming = r.into_inner();
        let first = incoming.message().await?.ok_or_else(|| {
            Status::invalid_argument(
                "ConnectPort: the request stream ended before its first message, which names \
                 the sandbox and the port",
            )
        })?;
        let port = u16::try_from(first.port)
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| {
                Status::invalid_argument(format!(
                    "port {} is not a TCP port: give 1 to 65535",
                    first.port
                ))
            })?;
        let conn = self
            .daemon
            .connect_port(&tenant, &first.sandbox_id, port)
            .await
            .map_err(st)?;
        let (mut from_port, mut to_port) = tokio::io::split(conn);
        // The caller's bytes to the port; the end of its stream closes the sending side.
        tokio::spawn(async move {
            if to_port.write_all(&first.data).await.is_err() {
                return;
            }
            while let Ok(Some(m)) = incoming.message().await {
                if to_port.write_all(&m.data).await.is_err() {
                    return;
                }
            }
            let _ = to_port.shutdown().await;
        });
        // The port's bytes back, until it closes or the caller goes.
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        tokio::spawn(async move {
            let mut buf = vec![0u8; 64 << 10];
            loop {
                let n = tokio::select! {
                    r = from_port.read(&mut buf) => match r {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    },
                    () = tx.closed() => break,
                };
                let m = pb::PortData {
                    data: buf[..n].to_vec(),
                    ..Default::default()
                };
                if tx.send(Ok(m)).await.is_err() {
                    break;
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn exec_input(&self, r: Request<pb::ExecInputRequest>) -> Reply<pb::Empty> {
        let tenant = self.tenant(&r)?;
        let r = r.into_inner();
        let mut msgs = Vec::new();
        if !r.data.is_empty() {
            msgs.push(ExecInput::Stdin(r.data));
        }
        if r.close {
            msgs.push(ExecInput::CloseStdin);
        }
        if let Some(size) = r.resize {
            msgs.push(ExecInput::Resize(convert::from_tty_size(size)));
        }
        self.daemon
            .exec_input(&tenant, &r.exec_id, msgs)
            .await
            .map_err(st)?;
        Ok(Response::new(pb::Empty {}))
    }

    async fn cancel_exec(&self, r: Request<pb::CancelExecRequest>) -> Reply<pb::Empty> {
        let tenant = self.tenant(&r)?;
        let r = r.into_inner();
        self.daemon
            .exec_input(&tenant, &r.exec_id, vec![ExecInput::Kill])
            .await
            .map_err(st)?;
        Ok(Response::new(pb::Empty {}))
    }

    async fn file(&self, r: Request<pb::FileRequest>) -> Reply<pb::FileReply> {
        let tenant = self.tenant(&r)?;
        let r = r.into_inner();
        let op = convert::from_file_op(r.op).map_err(st)?;
        let res = self
            .daemon
            .file(&tenant, &r.sandbox_id, op)
            .await
            .map_err(st)?;
        Ok(Response::new(convert::file_result(res)))
    }

    async fn destroy(&self, r: Request<pb::SandboxRef>) -> Reply<pb::Empty> {
        let tenant = self.tenant(&r)?;
        self.daemon
            .destroy(&tenant, &r.into_inner().id)
            .await
            .map_err(st)?;
        Ok(Response::new(pb::Empty {}))
    }

    async fn list(&self, r: Request<pb::ListRequest>) -> Reply<pb::ListReply> {
        let tenant = self.tenant(&r)?;
        let v = self.daemon.list(&tenant).await.map_err(st)?;
        Ok(Response::new(pb::ListReply {
            sandboxes: v
                .iter()
                .map(|(i, pooled)| convert::sandbox_info(i, *pooled))
                .collect(),
        }))
    }

    async fn inspect(&self, r: Request<pb::SandboxRef>) -> Reply<pb::SandboxInfo> {
        let tenant = self.tenant(&r)?;
        let (i, pooled) = self
            .daemon
            .inspect(&tenant, &r.into_inner().id)
            .await
            .map_err(st)?;
        Ok(Response::new(convert::sandbox_info(&i, pooled)))
    }

    async fn pause(&self, r: Request<pb::SandboxRef>) -> Reply<pb::Empty> {
        let tenant = self.tenant(&r)?;
        self.daemon
            .pause(&tenant, &r.into_inner().id)
            .await
            .map_err(st)?;
        Ok(Response::new(pb::Empty {}))
    }

    async fn resume(&self, r: Request<pb::SandboxRef>) -> Reply<pb::Empty> {
        let tenant = self.tenant(&r)?;
        self.daemon
            .resume(&tenant, &r.into_inner().id)
            .await
            .map_err(st)?;
        Ok(Response::new(pb::Empty {}))
    }

    async fn fork(&self, r: Request<pb::ForkRequest>) -> Reply<pb::ForkReply> {
        let tenant = self.tenant(&r)?;
        let r = r.into_inner();
        let v = self
            .daemon
            .fork(&tenant, &r.id, r.count)
            .await
            .map_err(st)?;
        Ok(Response::new(pb::ForkReply {
            sandboxes: v.iter().map(|i| convert::sandbox_info(i, false)).collect(),
        }))
    }

    async fn snapshot(&self, r: Request<pb::SnapshotRequest>) -> Reply<pb::SnapshotInfo> {
        let tenant = self.tenant(&r)?;
        let r = r.into_inner();
        let s = self
            .daemon
            .snapshot(&tenant, &r.id, &r.name)
            .await
            .map_err(st)?;
        Ok(Response::new(convert::snapshot_info(&s)))
    }

    async fn snapshot_list(
        &self,
        r: Request<pb::SnapshotListRequest>,
    ) -> Reply<pb::SnapshotListReply> {
        let tenant = self.tenant(&r)?;
        let v = self.daemon.snapshots(&tenant).await.map_err(st)?;
        Ok(Response::new(pb::SnapshotListReply {
            snapshots: v.iter().map(convert::snapshot_info).collect(),
        }))
    }

    async fn snapshot_remove(&self, r: Request<pb::SnapshotRef>) -> Reply<pb::Empty> {
        let tenant = self.tenant(&r)?;
        self.daemon
            .remove_snapshot(&tenant, &r.into_inner().name)
            .await
            .map_err(st)?;
        Ok(Response::new(pb::Empty {}))
    }

    async fn create_from_snapshot(
        &self,
        r: Request<pb::CreateFromSnapshotRequest>,
    ) -> Reply<pb::SandboxInfo> {
        let tenant = self.tenant(&r)?;
        let local = r.extensions().get::<Via>() == Some(&Via::Unix);
        let r = r.into_inner();
        let owner = (r.owner_pid != 0 && local).then_some(r.owner_pid);
        let info = self
            .daemon
            .create_from_snapshot(&tenant, &r.provider, &r.name, owner)
            .await
            .map_err(st)?;
        Ok(Response::new(convert::sandbox_info(&info, false)))
    }

    async fn set_network(&self, r: Request<pb::SetNetworkRequest>) -> Reply<pb::Empty> {
        let tenant = self.tenant(&r)?;
        let r = r.into_inner();
        let network: stockade::spec::Network =
            serde_json::from_str(&r.network_json).map_err(|e| {
                st(Error::InvalidRequest(format!(
                    "network_json is not a network policy: {e}"
                )))
            })?;
        self.daemon
            .set_network(&tenant, &r.sandbox_id, &network)
            .await
            .map_err(st)?;
        Ok(Response::new(pb::Empty {}))
    }

    async fn egress_denied(
        &self,
        r: Request<pb::EgressDeniedRequest>,
    ) -> Reply<pb::EgressDeniedReply> {
        let tenant = self.tenant(&r)?;
        let r = r.into_inner();
        let d = self
            .daemon
            .egress_denied(&tenant, &r.sandbox_id, r.since_ms)
            .await
            .map_err(st)?;
        Ok(Response::new(pb::EgressDeniedReply {
            denied: d.into_iter().map(convert::denial).collect(),
        }))
    }

    async fn gc(&self, r: Request<pb::GcRequest>) -> Reply<pb::GcReply> {
        self.tenant(&r)?;
        let rep = self.daemon.gc().await.map_err(st)?;
        Ok(Response::new(convert::gc_report(rep)))
    }

    async fn session_get(&self, r: Request<pb::SessionRef>) -> Reply<pb::SandboxInfo> {
        let tenant = self.tenant(&r)?;
        let i = self
            .daemon
            .session_get(&tenant, &r.into_inner().name)
            .await
            .map_err(st)?;
        Ok(Response::new(convert::sandbox_info(&i, false)))
    }

    async fn session_release(&self, r: Request<pb::SessionRef>) -> Reply<pb::Empty> {
        let tenant = self.tenant(&r)?;
        self.daemon
            .session_release(&tenant, &r.into_inner().name)
            .await
            .map_err(st)?;
        Ok(Response::new(pb::Empty {}))
    }

    async fn session_delete(&self, r: Request<pb::SessionRef>) -> Reply<pb::Empty> {
        let tenant = self.tenant(&r)?;
        self.daemon
            .session_delete(&tenant, &r.into_inner().name)
            .await
            .map_err(st)?;
        Ok(Response::new(pb::Empty {}))
    }

    async fn session_list(
        &self,
        r: Request<pb::SessionListRequest>,
    ) -> Reply<pb::SessionListReply> {
        let tenant = self.tenant(&r)?;
        let v = self.daemon.session_list(&tenant).await.map_err(st)?;
        Ok(Response::new(pb::SessionListReply {
            sessions: v.into_iter().map(convert::session_info).collect(),
        }))
    }

    async fn pool_warm(&self, r: Request<pb::PoolWarmRequest>) -> Reply<pb::PoolInfo> {
        let tenant = self.tenant(&r)?;
        let r = r.into_inner();
        let spec = spec_from(&r.spec_json)?;
        let v = self
            .daemon
            .pool_warm(&tenant, &r.provider, spec, r.size, r.max)
            .map_err(st)?;
        Ok(Response::new(pool_info(v)))
    }

    async fn pool_list(&self, r: Request<pb::PoolListRequest>) -> Reply<pb::PoolListReply> {
        let tenant = self.tenant(&r)?;
        Ok(Response::new(pb::PoolListReply {
            pools: self
                .daemon
                .pool_list(&tenant)
                .into_iter()
                .map(pool_info)
                .collect(),
        }))
    }

    async fn pool_drain(&self, r: Request<pb::PoolDrainRequest>) -> Reply<pb::PoolDrainReply> {
        let tenant = self.tenant(&r)?;
        let t = r.into_inner().template_id;
        let destroyed = self
            .daemon
            .pool_drain(&tenant, (!t.is_empty()).then_some(t.as_str()))
            .await
            .map_err(st)?;
        Ok(Response::new(pb::PoolDrainReply { destroyed }))
    }
}
