//! The sandbox tools: `run_code` (a one-shot sandbox), `sandbox_create`,
//! `sandbox_exec`, `sandbox_destroy` and `sandbox_list`, all over the sandboxes this
//! connection owns.

use std::path::PathBuf;
use std::sync::Arc;

use rmcp::RoleServer;
use rmcp::model::CallToolResult;
use rmcp::service::RequestContext;
use serde_json::{Value, json};
use stockade::code::{ImageFetcher, Source};
use stockade::spec::{Mount, Network};
use stockade::{CreateOptions, Provider, Sandbox, SandboxInfo, SandboxSpec};

use super::error::{ToolError, ToolResult, ok};
use super::exec::{NotifyingFetcher, exec_result, shell};
use super::{Handler, Owned, destroy_all};
use crate::tools;

/// Grace between an exec's deadline and the end of a one-shot sandbox's lifetime.
const LIFETIME_GRACE_SECS: u64 = 5;

/// Seconds until the sandbox's lifetime ends.
fn expires_in_secs(info: &SandboxInfo) -> u64 {
    info.expires_at_ms.saturating_sub(stockade::now_ms()) / 1000
}

impl Handler {
    /// `run_code`: the snippet in a fresh sandbox, destroyed afterwards.
    pub(super) async fn run_code(
        &self,
        a: tools::RunCode,
        ctx: &RequestContext<RoleServer>,
    ) -> ToolResult {
        let shared = self.shared();
        let preset = shared.policy.language(&a.language)?;
        let backend = shared.policy.provider(None)?;
        let provider = shared.provider(&self.bound_tenant(), &backend)?;
        let mut req = self.request(Vec::new(), a.timeout, a.stdin)?;
        let mut spec = shared.policy.default_spec();
        spec.timeout_secs = (req.timeout_ms.unwrap_or(0).div_ceil(1000) + LIFETIME_GRACE_SECS)
            .min(shared.policy.max_lifetime_secs);
        let store = shared.image_store()?;
        req.argv = stockade::code::prepare(
            shared.plan_name(&backend),
            preset,
            Source::Code(&a.code),
            &mut spec,
            &store,
            &NotifyingFetcher::new(ctx),
        )
        .await?;
        let sb = self.create_owned(provider.clone(), spec).await?;
        let out = self.exec(&provider, sb.id(), req, ctx).await;
        let list = shared.take(|o| o.info.id == sb.id());
        destroy_all(list).await;
        Ok(exec_result(&out?, None))
    }

    /// Creates a sandbox owned by this connection (and by this process's pid).
    async fn create_owned(
        &self,
        provider: Arc<dyn Provider>,
        spec: SandboxSpec,
    ) -> Result<Sandbox, ToolError> {
        let sb = Sandbox::create(
            provider.clone(),
            spec,
            CreateOptions {
                // If this server dies, even by SIGKILL, its sandboxes die with it.
                owner_pid: Some(std::process::id()),
            },
        )
        .await?;
        let owned = Owned {
            conn: self.conn.id,
            tenant: self.bound_tenant(),
            provider,
            info: sb.info().clone(),
        };
        self.shared().owned().insert(sb.id().to_string(), owned);
        Ok(sb)
    }

    /// `sandbox_create`: every option checked against the operator policy first.
    pub(super) async fn create(
        &self,
        a: tools::SandboxCreate,
        ctx: &RequestContext<RoleServer>,
    ) -> ToolResult {
        let shared = self.shared();
        let p = &shared.policy;
        let live = shared.live_of(&self.bound_tenant()).await?;
        if live >= p.max_sandboxes {
            let mut e = ToolError::new(
                "limit_exceeded",
                format!(
                    "refused by policy rule max_sandboxes: this client's token already has {live} live \
                     sandboxes"
                ),
                "sandbox_destroy one you no longer need, then try again",
            );
            e.rule = Some("max_sandboxes".into());
            return Err(e);
        }
        let backend = p.provider(a.provider.as_deref())?;
        let memory = a
            .memory
            .as_deref()
            .map(stockade::spec::parse_size)
            .transpose()
            .map_err(|e| {
                ToolError::invalid(format!("memory: {e}"), "give a size such as 256m or 1g")
            })?;
        let network = match a.network.as_deref() {
            None | Some("none") => Network::None,
            Some("egress") => Network::Egress,
            Some(other) => {
                return Err(ToolError::invalid(
                    format!("network {other:?} is neither none nor egress"),
                    "use none (the default) or egress",
                ));
            }
        };
        if let Some(img) = &a.image {
            p.image(img)?;
        }
        p.resources(memory, a.cpus, a.lifetime, network == Network::Egress)?;
        let mut spec = SandboxSpec {
            image: a.image.clone(),
            network,
            writable: a.writable_root,
            env: a.env,
            workdir: a.workdir.map(PathBuf::from),
            ..p.default_spec()
        };
        if let Some(m) = memory {
            spec.limits.memory_bytes = m;
        }
        if let Some(c) = a.cpus {
            spec.limits.cpus = c;
        }
        if let Some(l) = a.lifetime {
            spec.timeout_secs = l;
        }
        for m in a.mounts {
            let host = p.mount(&m.host, m.writable)?;
            spec.mounts.push(Mount {
                host,
                target: m.target.into(),
                writable: m.writable,
            });
        }
        let provider = shared.provider(&self.bound_tenant(), &backend)?;
        if let Some(reference) = &a.image
            && backend == "native"
            && shared.remote.is_none()
        {
            // Pull (with progress) before create rather than silently inside it.
            let store = shared.image_store()?;
            NotifyingFetcher::new(ctx).fetch(&store, reference).await?;
        }
        let sb = self.create_owned(provider, spec).await?;
        let info = sb.info();
        Ok(ok(
            json!({
                "sandbox_id": info.id,
                "provider": info.provider,
                "expires_at_ms": info.expires_at_ms,
                "applied": info.applied,
            }),
            format!(
                "sandbox {} created ({}); it expires in {} s. Use sandbox_exec and the file \
                 tools with this sandbox_id.",
                info.id,
                info.provider,
                expires_in_secs(info)
            ),
        ))
    }

    /// `sandbox_exec`: a shell command in one of this connection's sandboxes.
    pub(super) async fn sandbox_exec(
        &self,
        a: tools::SandboxExec,
        ctx: &RequestContext<RoleServer>,
    ) -> ToolResult {
        let (provider, info) = self.shared().lookup(self.conn.id, &a.sandbox_id)?;
        let mut req = self.request(shell(&a.command), a.timeout, a.stdin)?;
        req.cwd = a.cwd;
        req.env = a.env;
        let out = self.exec(&provider, &info.id, req, ctx).await?;
        Ok(exec_result(&out, Some(&info.id)))
    }

    /// `sandbox_destroy`: ends one of this connection's sandboxes.
    pub(super) async fn destroy(&self, a: tools::SandboxRef) -> ToolResult {
        self.shared().lookup(self.conn.id, &a.sandbox_id)?;
        let list = self
            .shared()
            .take(|o| o.conn == self.conn.id && o.info.id == a.sandbox_id);
        for o in list {
            o.provider.destroy(&o.info.id).await?;
        }
        Ok(ok(
            json!({"sandbox_id": a.sandbox_id, "destroyed": true}),
            format!("sandbox {} destroyed", a.sandbox_id),
        ))
    }

    /// `sandbox_list`: this connection's sandboxes, oldest first.
    pub(super) fn list(&self) -> CallToolResult {
        let mut list = self.owned_infos();
        list.sort_by_key(|i| i.created_at_ms);
        let items: Vec<Value> = list
            .iter()
            .map(|i| {
                json!({
                    "sandbox_id": i.id,
                    "provider": i.provider,
                    "image": i.spec.get("image").cloned().unwrap_or(Value::Null),
                    "created_at_ms": i.created_at_ms,
                    "expires_at_ms": i.expires_at_ms,
                })
            })
            .collect();
        let text = if items.is_empty() {
            "no sandboxes; create one with sandbox_create".to_string()
        } else {
            list.iter()
                .map(|i| {
                    format!(
                        "{} ({}), expires in {} s",
                        i.id,
                        i.provider,
                        expires_in_secs(i)
                    )
                })
                .collect::<Vec<_>>()
                .join("\n")
        };
        ok(json!({ "sandboxes": items }), text)
    }
}
