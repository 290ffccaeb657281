//! The spec flags shared by `run` and `create`.

use std::path::PathBuf;

use clap::Args;
use stockade::spec::{Mount, Network, SandboxSpec, SpecError, SpecErrors, User, parse_size};

/// Sandbox spec flags. Unset flags keep the secure defaults.
#[derive(Args, Debug, Clone, Default)]
pub struct SpecArgs {
    /// Give the sandbox all of the public internet (default: none, loopback only);
    /// the host's own addresses, its LAN and cloud metadata stay unreachable.
    #[arg(long)]
    pub network: bool,
    /// Allow only this egress (repeatable): NAME, *.SUFFIX, IP or CIDR, with optional
    /// :PORTS (443, 80,443, *) and /tcp, /udp or /any (default tcp 80,443), e.g.
    /// pypi.org, 10.1.2.0/24:5432. Names resolve only through Stockade's resolver.
    #[arg(long = "allow-net", value_name = "ENTRY")]
    pub allow_net: Vec<String>,
    /// Never allow this egress, even when --allow-net does (repeatable; same form,
    /// default every port and protocol).
    #[arg(long = "deny-net", value_name = "ENTRY")]
    pub deny_net: Vec<String>,
    /// Bind a secret to a host (repeatable): HOST=VAR[:HEADER]. The secret is the
    /// value of VAR in this command's environment (never on the command line); the
    /// sandbox's VAR holds a placeholder, and the egress proxy sets
    /// `Authorization: Bearer <secret>` (or `HEADER: <secret>`) on HTTPS requests to
    /// HOST, which is allowed on 443. E.g. api.openai.com=OPENAI_API_KEY,
    /// api.anthropic.com=ANTHROPIC_API_KEY:x-api-key.
    #[arg(long = "credential", value_name = "HOST=VAR[:HEADER]")]
    pub credential: Vec<String>,
    /// Make the root writable (a tmpfs overlay, discarded at destroy).
    #[arg(long)]
    pub writable: bool,
    /// Sandbox lifetime in seconds (default 300); for `run` also the exec deadline.
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<u64>,
    /// Memory cap, e.g. 512m, 1g (default 512m, no swap).
    #[arg(long, value_name = "SIZE")]
    pub memory: Option<String>,
    /// CPU quota in CPUs, e.g. 0.5 (default 1).
    #[arg(long, value_name = "N")]
    pub cpus: Option<f64>,
    /// Maximum processes and threads (default 64).
    #[arg(long, value_name = "N")]
    pub pids: Option<u32>,
    /// Size of the writable /tmp (default 64m).
    #[arg(long, value_name = "SIZE")]
    pub tmp_size: Option<String>,
    /// Environment variable for the code (repeatable).
    #[arg(long = "env", short = 'e', value_name = "K=V")]
    pub env: Vec<String>,
    /// Host path to mount inside, read-only unless :rw (repeatable).
    #[arg(long = "mount", value_name = "HOST:PATH[:rw]")]
    pub mounts: Vec<String>,
    /// Host directory mounted at /work (read-only; DIR:rw for writes) and made the
    /// working directory.
    #[arg(long, value_name = "DIR[:rw]")]
    pub workspace: Option<String>,
    /// Run on this OCI image's root instead of the host's /usr: a name (pulled on
    /// first use), or the digest (`sha256:...`) or a unique digest prefix of an image
    /// in the store; its Env and WorkingDir apply unless flags override.
    #[arg(long, value_name = "REF")]
    pub image: Option<String>,
    /// Working directory inside (default /tmp, or /work with --workspace).
    #[arg(long, short = 'w', value_name = "PATH")]
    pub workdir: Option<PathBuf>,
    /// The uid (and gid, as UID:GID) the code runs as inside (default 1000:1000).
    #[arg(long, value_name = "UID[:GID]")]
    pub user: Option<String>,
    /// Hostname inside (default sandbox).
    #[arg(long)]
    pub hostname: Option<String>,
    /// Turn the seccomp allowlist off (opt-out, reported by inspect).
    #[arg(long)]
    pub no_seccomp: bool,
    /// Turn landlock off (opt-out, reported by inspect).
    #[arg(long)]
    pub no_landlock: bool,
}

/// The policy of `--allow-net`/`--deny-net` flags, when any is given.
pub fn policy_of(allow: &[String], deny: &[String]) -> Option<Network> {
    (!allow.is_empty() || !deny.is_empty()).then(|| {
        Network::Policy(stockade::spec::EgressPolicy {
            allow: allow.to_vec(),
            deny: deny.to_vec(),
            credentials: Vec::new(),
        })
    })
}

/// One `--credential HOST=VAR[:HEADER]`, its secret read with `env`.
pub fn credential_of(
    arg: &str,
    env: impl Fn(&str) -> Option<String>,
) -> Result<stockade::spec::Credential, String> {
    let Some((host, rest)) = arg.split_once('=') else {
        return Err(format!(
            "{arg:?} is not HOST=VAR[:HEADER] (e.g. api.openai.com=OPENAI_API_KEY)"
        ));
    };
    let (var, header) = match rest.split_once(':') {
        Some((v, h)) => (v, Some(h)),
        None => (rest, None),
    };
    let secret = env(var).filter(|v| !v.is_empty()).ok_or_else(|| {
        format!("{arg:?}: the variable {var} is not set (or empty) in this environment; export the secret in {var} first")
    })?;
    Ok(stockade::spec::Credential {
        host: host.to_string(),
        header: header.unwrap_or("Authorization").to_string(),
        value: match header {
            Some(_) => secret,
            None => format!("Bearer {secret}"),
        },
        env: Some(var.to_string()),
    })
}

impl SpecArgs {
    /// Builds the spec, listing every problem with the flags at once.
    pub fn to_spec(&self) -> Result<SandboxSpec, SpecErrors> {
        let mut errs = Vec::new();
        let mut bad = |field: &str, message: String| {
            errs.push(SpecError {
                field: field.into(),
                message,
            });
        };
        let mut s = SandboxSpec::default();
        let mut allow = self.allow_net.clone();
        let mut credentials = Vec::new();
        for c in &self.credential {
            match credential_of(c, |v| std::env::var(v).ok()) {
                Ok(cred) => {
                    allow.push(format!("{}:443", cred.host));
                    credentials.push(cred);
                }
                Err(e) => bad("--credential", e),
            }
        }
        if let Some(mut policy) = policy_of(&allow, &self.deny_net) {
            if let Network::Policy(p) = &mut policy {
                p.credentials = credentials;
            }
            if self.network {
                bad(
                    "--network",
                    "--network opens all of the public internet; give it or --allow-net, not both"
                        .into(),
                );
            }
            s.network = policy;
        } else if self.network {
            s.network = Network::Egress;
        }
        s.writable = self.writable;
        if let Some(t) = self.timeout {
            s.timeout_secs = t;
        }
        if let Some(m) = &self.memory {
            match parse_size(m) {
                Ok(b) => s.limits.memory_bytes = b,
                Err(e) => bad("--memory", e),
            }
        }
        if let Some(m) = &self.tmp_size {
            match parse_size(m) {
                Ok(b) => s.limits.tmp_bytes = b,
                Err(e) => bad("--tmp-size", e),
            }
        }
        if let Some(c) = self.cpus {
            s.limits.cpus = c;
        }
        if let Some(p) = self.pids {
            s.limits.pids = p;
        }
        for kv in &self.env {
            match kv.split_once('=') {
                Some((k, v)) => {
                    s.env.insert(k.to_string(), v.to_string());
                }
                None => bad("--env", format!("{kv:?} is not K=V")),
            }
        }
        for m in &self.mounts {
            match Mount::parse(m) {
                Ok(m) => s.mounts.push(m),
                Err(e) => bad("--mount", e),
            }
        }
        s.workdir = self.workdir.clone();
        s.image = self.image.clone();
        if let Some(w) = &self.workspace {
            let (dir, writable) = match w.strip_suffix(":rw") {
                Some(d) => (d, true),
                None => (w.strip_suffix(":ro").unwrap_or(w), false),
            };
            match std::fs::canonicalize(dir) {
                Ok(host) => {
                    s.mounts.push(Mount {
                        host,
                        target: "/work".into(),
                        writable,
                    });
                    s.workdir.get_or_insert_with(|| "/work".into());
                }
                Err(e) => bad("--workspace", format!("workspace {dir}: {e}")),
            }
        }
        if let Some(u) = &self.user {
            match User::parse(u) {
                Ok(u) => s.user = u,
                Err(e) => bad("--user", e),
            }
        }
        if let Some(h) = &self.hostname {
            s.hostname = h.clone();
        }
        s.hardening.seccomp = !self.no_seccomp;
        s.hardening.landlock = !self.no_landlock;
        // Report flag problems together with the spec's own.
        match s.clone().validate() {
            Ok(_) if errs.is_empty() => Ok(s),
            Ok(_) => Err(SpecErrors(errs)),
            Err(SpecErrors(more)) => {
                errs.extend(more);
                Err(SpecErrors(errs))
            }
        }
    }
}
