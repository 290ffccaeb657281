//! A sandbox's network monitor outside the native monitor: what `monitor` does for
//! its sandbox's network (the nftables firewall, an egress policy's resolver and
//! proxy, slirp4netns), for the network namespace of another process. Served by
//! `docker-watch` for a container's namespace and by `vm-host` for the namespace its
//! VMM runs in.

use std::path::{Path, PathBuf};

use stockade_agent_proto::launch::{EgressPlan, NetworkPlan};

/// What the provider sends on stdin: a network plan with network (`UserModeNat`),
/// and an egress policy's credentials when it has some.
pub(crate) struct NetInput {
    argv: Vec<String>,
    nft: String,
    firewall: String,
    policy: Option<EgressPlan>,
    /// What `/etc/resolv.conf` says in the sandbox's network namespace.
    pub(crate) resolv_conf: String,
}

impl NetInput {
    /// Reads `LENGTH\n`, the plan, then the credentials (the rest of stdin).
    pub(crate) fn read() -> Result<NetInput, String> {
        let bytes = crate::monitor::read_plan_bytes()
            .map_err(|e| format!("cannot read the network plan: {e}"))?;
        let plan: NetworkPlan =
            serde_json::from_slice(&bytes).map_err(|e| format!("invalid network plan: {e}"))?;
        let NetworkPlan::UserModeNat {
            argv,
            nft,
            firewall,
            mut policy,
            resolv_conf,
        } = plan
        else {
            return Err("the network plan has no network to serve".into());
        };
        if argv.is_empty() {
            return Err("the network plan has an empty NAT helper command line".into());
        }
        if let Some(p) = &mut policy {
            p.tls = crate::monitor::read_secrets()?.map(Box::new);
        }
        Ok(NetInput {
            argv,
            nft,
            firewall,
            policy,
            resolv_conf,
        })
    }
}

/// The network monitor of one sandbox, set up and not yet serving.
pub(crate) struct NetMonitor {
    dir: PathBuf,
    nft: String,
    policy: Option<EgressPlan>,
    sockets: Option<crate::egress::Sockets>,
    helper: crate::monitor::Helper,
}

impl NetMonitor {
    /// Loads the firewall, binds the policy's listeners and starts slirp4netns, in
    /// the network namespace of process `pid`; its files go into `dir`. The caller
    /// must be single-threaded (entering the namespace is per thread, and nothing
    /// else may run in it meanwhile).
    pub(crate) fn prepare(dir: &Path, pid: i32, input: NetInput) -> Result<NetMonitor, String> {
        let child = nix::unistd::Pid::from_raw(pid);
        crate::monitor::apply_firewall(dir, &input.nft, &input.firewall, child, false)?;
        let sockets = match input.policy {
            Some(_) => Some(crate::egress::prepare(dir, child, false)?),
            None => None,
        };
        let helper = crate::monitor::start_helper(dir, &input.argv, child, false)?;
        Ok(NetMonitor {
            dir: dir.to_path_buf(),
            nft: input.nft,
            policy: input.policy,
            sockets,
            helper,
        })
    }

    /// Starts the resolver's, proxy's and control threads (a policy only). The
    /// helper it returns stops slirp4netns ([`crate::monitor::stop_helper`]); it also
    /// exits by itself when this process does.
    pub(crate) fn serve(self) -> Result<crate::monitor::Helper, String> {
        if let (Some(s), Some(p)) = (self.sockets, self.policy) {
            crate::egress::start(s, p, self.nft, self.dir)?;
        }
        Ok(self.helper)
    }
}
