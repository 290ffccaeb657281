//! The operator's policy: what the model may ask for. Read from a TOML file
//! (`--policy FILE`), then overridden by flags. Every check is a pure function of the
//! policy and the request; a refusal names the rule, what was asked and what to do.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use stockade::spec::{LanguagePreset, PRESETS, format_size, parse_size};
use stockade::{Policy, Rule, RuleTarget, SandboxSpec, Verdict};
use stockade_server::admission::{Host, Profile};

/// Largest memory the model may ask for unless the operator says otherwise: 1 GiB.
pub const DEFAULT_MAX_MEMORY_BYTES: u64 = 1 << 30;
/// Most CPUs the model may ask for by default.
pub const DEFAULT_MAX_CPUS: f64 = 1.0;
/// Longest sandbox lifetime by default: one hour.
pub const DEFAULT_MAX_LIFETIME_SECS: u64 = 3600;
/// Longest single exec by default: ten minutes.
pub const DEFAULT_MAX_EXEC_TIMEOUT_SECS: u64 = 600;
/// Exec deadline when the model gives none.
pub const DEFAULT_EXEC_TIMEOUT_SECS: u64 = 60;
/// Most live sandboxes one client may hold.
pub const DEFAULT_MAX_SANDBOXES: usize = 8;
/// Cap on each captured stream returned to the model (head and tail kept): 256 KiB.
pub const DEFAULT_OUTPUT_LIMIT_BYTES: u64 = 256 << 10;

/// A host directory the model may mount into its sandboxes.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Workspace {
    /// Absolute host path; the model may mount it or anything below it.
    pub host: PathBuf,
    /// Whether it may be mounted writable (default false: read-only only).
    #[serde(default)]
    pub writable: bool,
}

impl Workspace {
    /// Parses the flag form `HOST[:rw|:ro]`.
    pub fn parse(text: &str) -> Result<Workspace, String> {
        let (host, writable) = match text.rsplit_once(':') {
            Some((h, "rw")) => (h, true),
            Some((h, "ro")) => (h, false),
            _ => (text, false),
        };
        if !host.starts_with('/') {
            return Err(format!(
                "workspace {text:?} must be an absolute host path, HOST[:rw|:ro]"
            ));
        }
        Ok(Workspace {
            host: host.into(),
            writable,
        })
    }
}

/// One approval rule of the policy file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleConfig {
    pub name: String,
    /// `exec`, `file_write` or `any`.
    pub target: String,
    /// Regex on the argv joined by spaces (exec) or the path (file writes).
    pub pattern: String,
    /// `allow` or `deny` (`ask` is refused: an MCP server has nobody to ask).
    pub verdict: String,
}

/// The approval section of the policy file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalConfig {
    /// Verdict when no rule matches (default `allow`).
    #[serde(default = "allow")]
    pub default: String,
    #[serde(default)]
    pub rules: Vec<RuleConfig>,
}

fn allow() -> String {
    "allow".into()
}

/// The policy file as written.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyFile {
    pub providers: Option<Vec<String>>,
    pub languages: Option<Vec<String>>,
    pub images: Option<Vec<String>>,
    pub allow_network: Option<bool>,
    pub max_memory: Option<String>,
    pub max_cpus: Option<f64>,
    pub max_lifetime_secs: Option<u64>,
    pub max_exec_timeout_secs: Option<u64>,
    pub max_sandboxes: Option<usize>,
    pub output_limit: Option<String>,
    #[serde(default)]
    pub workspaces: Vec<Workspace>,
    pub approval: Option<ApprovalConfig>,
}

/// What the model may ask for. `Default` is the strict policy: the default provider,
/// every language of the table, no images beyond the languages' own, no network,
/// 1 GiB, one CPU, one hour, no host directories, every exec and write approved.
#[derive(Clone, Debug)]
pub struct OperatorPolicy {
    /// Providers the model may choose; the first is the default.
    pub providers: Vec<String>,
    /// Languages `run_code` accepts (first names of the language table).
    pub languages: Vec<String>,
    /// Images `sandbox_create` accepts: exact references, or prefixes ending in `*`.
    pub images: Vec<String>,
    pub allow_network: bool,
    pub max_memory_bytes: u64,
    pub max_cpus: f64,
    pub max_lifetime_secs: u64,
    pub max_exec_timeout_secs: u64,
    pub max_sandboxes: usize,
    pub output_limit_bytes: u64,
    pub workspaces: Vec<Workspace>,
    /// Approval rules applied to every exec and file write.
    pub approval: Policy,
}

impl OperatorPolicy {
    /// The strict default with `provider` as the only provider.
    pub fn strict(provider: &str) -> OperatorPolicy {
        OperatorPolicy {
            providers: vec![provider.to_string()],
            languages: PRESETS.iter().map(|p| p.names[0].to_string()).collect(),
            images: Vec::new(),
            allow_network: false,
            max_memory_bytes: DEFAULT_MAX_MEMORY_BYTES,
            max_cpus: DEFAULT_MAX_CPUS,
            max_lifetime_secs: DEFAULT_MAX_LIFETIME_SECS,
            max_exec_timeout_secs: DEFAULT_MAX_EXEC_TIMEOUT_SECS,
            max_sandboxes: DEFAULT_MAX_SANDBOXES,
            output_limit_bytes: DEFAULT_OUTPUT_LIMIT_BYTES,
            workspaces: Vec::new(),
            approval: Policy::new(Verdict::Allow),
        }
    }

    /// Applies a policy file over the strict default; every problem is listed.
    pub fn apply_file(mut self, f: PolicyFile) -> Result<OperatorPolicy, Vec<String>> {
        let mut errs = Vec::new();
        if let Some(p) = f.providers {
            for name in &p {
                if !stockade::PROVIDERS.contains(&name.as_str()) {
                    errs.push(format!(
                        "providers: unknown provider {name:?}; known: {}",
                        stockade::PROVIDERS.join(", ")
                    ));
                }
            }
            if p.is_empty() {
                errs.push("providers: give at least one provider".into());
            }
            self.providers = p;
        }
        if let Some(l) = f.languages {
            let mut out = Vec::new();
            for name in &l {
                match LanguagePreset::find(name) {
                    Ok(p) => out.push(p.names[0].to_string()),
                    Err(e) => errs.push(format!("languages: {e}")),
                }
            }
            self.languages = out;
        }
        if let Some(i) = f.images {
            self.images = i;
        }
        if let Some(n) = f.allow_network {
            self.allow_network = n;
        }
        if let Some(m) = f.max_memory {
            match parse_size(&m) {
                Ok(b) => self.max_memory_bytes = b,
                Err(e) => errs.push(format!("max_memory: {e}")),
            }
        }
        if let Some(c) = f.max_cpus {
            self.max_cpus = c;
        }
        if let Some(s) = f.max_lifetime_secs {
            self.max_lifetime_secs = s;
        }
        if let Some(s) = f.max_exec_timeout_secs {
            self.max_exec_timeout_secs = s;
        }
        if let Some(n) = f.max_sandboxes {
            self.max_sandboxes = n;
        }
        if let Some(o) = f.output_limit {
            match parse_size(&o) {
                Ok(b) => self.output_limit_bytes = b,
                Err(e) => errs.push(format!("output_limit: {e}")),
            }
        }
        for w in &f.workspaces {
            if !w.host.is_absolute() {
                errs.push(format!(
                    "workspaces: {} is not an absolute path",
                    w.host.display()
                ));
            }
        }
        self.workspaces.extend(f.workspaces);
        if let Some(a) = f.approval {
            match approval(&a) {
                Ok(p) => self.approval = p,
                Err(mut e) => errs.append(&mut e),
            }
        }
        if errs.is_empty() { Ok(self) } else { Err(errs) }
    }

    /// A spec of the defaults cut to the maxima (a policy may allow less than the
    /// defaults of memory, CPUs or lifetime).
    pub fn default_spec(&self) -> SandboxSpec {
        let mut spec = SandboxSpec::default();
        spec.limits.memory_bytes = spec.limits.memory_bytes.min(self.max_memory_bytes);
        spec.limits.cpus = spec.limits.cpus.min(self.max_cpus);
        spec.limits.tmp_bytes = spec.limits.tmp_bytes.min(self.max_memory_bytes);
        spec.timeout_secs = spec.timeout_secs.min(self.max_lifetime_secs);
        spec
    }

    /// The images a sandbox of this policy may run: those the operator lists, and
    /// the language images `run_code` picks (the configuration's, else the table's),
    /// and, when wasm is allowed, its runtimes.
    pub fn admitted_images(&self) -> Vec<String> {
        let mut images = self.images.clone();
        let config = stockade_image::Config::load().unwrap_or_default();
        for name in &self.languages {
            if let Ok(preset) = LanguagePreset::find(name) {
                images.push(stockade::languages::language_image(preset, &config));
            }
        }
        if self.providers.iter().any(|p| p == "wasm") {
            for r in stockade::wasm::runtime::RUNTIMES {
                images.push(r.name.to_string());
                images.extend(r.aliases.iter().map(|a| (*a).to_string()));
            }
        }
        images.sort();
        images.dedup();
        images
    }

    /// The policy as the admission profile of the daemon the server embeds: the
    /// same maxima per sandbox, the tenant's totals as `max_sandboxes` of them, the
    /// providers, the images ([`OperatorPolicy::admitted_images`], which every tenant
    /// runs from the host's store), the network modes the tools offer, and no
    /// hardening opt-outs.
    pub fn profile(&self, host: Host) -> Profile {
        let mut p = Profile::builtin("mcp", host);
        let n = self.max_sandboxes.max(1);
        p.max_memory_bytes = self.max_memory_bytes;
        p.max_tmp_bytes = self.max_memory_bytes;
        p.max_cpus = self.max_cpus;
        p.max_lifetime_secs = self.max_lifetime_secs;
        p.total_memory_bytes = self.max_memory_bytes.saturating_mul(n as u64);
        p.total_cpus = self.max_cpus * n as f64;
        p.providers = Some(self.providers.clone());
        let images = self.admitted_images();
        p.images = Some(images.clone());
        p.registries = images
            .iter()
            .filter_map(|i| {
                let stem = i.trim_end_matches('*').trim_end_matches(['/', ':', '@']);
                stockade_image::Reference::parse(stem)
                    .ok()
                    .map(|r| r.registry.to_ascii_lowercase())
            })
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        p.shared_images = images;
        p.hardening_opt_outs.clear();
        p.network = if self.allow_network {
            ["none", "egress"].map(String::from).into()
        } else {
            ["none".to_string()].into()
        };
        p
    }

    /// Reads and applies a policy file.
    pub fn load(self, path: &Path) -> Result<OperatorPolicy, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read policy file {}: {e}", path.display()))?;
        let f: PolicyFile =
            toml::from_str(&text).map_err(|e| format!("policy file {}: {e}", path.display()))?;
        self.apply_file(f)
            .map_err(|e| format!("policy file {}: {}", path.display(), e.join("; ")))
    }

    /// The provider to use for a request naming `asked` (or the default).
    pub fn provider(&self, asked: Option<&str>) -> Result<String, Denied> {
        match asked {
            None => Ok(self.providers[0].clone()),
            Some(p) if self.providers.iter().any(|a| a == p) => Ok(p.to_string()),
            Some(p) => Err(Denied::new(
                "providers",
                format!("provider {p:?} is not allowed"),
                format!(
                    "use one of: {} (or omit provider)",
                    self.providers.join(", ")
                ),
            )),
        }
    }

    /// The language preset for `asked`, when allowed.
    pub fn language(&self, asked: &str) -> Result<&'static LanguagePreset, Denied> {
        let preset = LanguagePreset::find(asked).map_err(|e| {
            Denied::new(
                "languages",
                e,
                format!("use one of: {}", self.languages.join(", ")),
            )
        })?;
        if self.languages.iter().any(|l| l == preset.names[0]) {
            Ok(preset)
        } else {
            Err(Denied::new(
                "languages",
                format!("language {asked:?} is not allowed"),
                format!("use one of: {}", self.languages.join(", ")),
            ))
        }
    }

    /// Checks an image reference the model asked for.
    pub fn image(&self, asked: &str) -> Result<(), Denied> {
        let ok = self.images.iter().any(|pat| match pat.strip_suffix('*') {
            Some(prefix) => asked.starts_with(prefix),
            None => pat == asked,
        });
        if ok {
            return Ok(());
        }
        let fix = if self.images.is_empty() {
            "omit image: the host's tools (or run_code's language images) are used; the \
             operator allows no other images"
                .to_string()
        } else {
            format!("use one of: {}", self.images.join(", "))
        };
        Err(Denied::new(
            "images",
            format!("image {asked:?} is not allowed"),
            fix,
        ))
    }

    /// Checks resource asks against the maxima.
    pub fn resources(
        &self,
        memory: Option<u64>,
        cpus: Option<f64>,
        lifetime_secs: Option<u64>,
        network: bool,
    ) -> Result<(), Denied> {
        if let Some(m) = memory
            && m > self.max_memory_bytes
        {
            return Err(Denied::new(
                "max_memory",
                format!("{} of memory was asked for", format_size(m)),
                format!("ask for at most {}", format_size(self.max_memory_bytes)),
            ));
        }
        if let Some(c) = cpus
            && c > self.max_cpus
        {
            return Err(Denied::new(
                "max_cpus",
                format!("{c} CPUs were asked for"),
                format!("ask for at most {}", self.max_cpus),
            ));
        }
        if let Some(l) = lifetime_secs
            && l > self.max_lifetime_secs
        {
            return Err(Denied::new(
                "max_lifetime_secs",
                format!("a lifetime of {l} s was asked for"),
                format!("ask for at most {} s", self.max_lifetime_secs),
            ));
        }
        if network && !self.allow_network {
            return Err(Denied::new(
                "allow_network",
                "network access was asked for".into(),
                "work without network (network \"none\"); the operator allows none".into(),
            ));
        }
        Ok(())
    }

    /// An exec deadline in seconds: the asked one (default 60 s) within the maximum.
    pub fn exec_timeout(&self, asked: Option<f64>) -> Result<f64, Denied> {
        let t = asked.unwrap_or(DEFAULT_EXEC_TIMEOUT_SECS as f64);
        if !t.is_finite() || t <= 0.0 {
            return Err(Denied::new(
                "timeout",
                format!("timeout {t} is not a positive number of seconds"),
                "pass a positive number of seconds".into(),
            ));
        }
        if t > self.max_exec_timeout_secs as f64 {
            return Err(Denied::new(
                "max_exec_timeout_secs",
                format!("a timeout of {t} s was asked for"),
                format!("ask for at most {} s", self.max_exec_timeout_secs),
            ));
        }
        Ok(t)
    }

    /// Checks a host directory the model wants mounted; returns the canonical path.
    pub fn mount(&self, host: &str, writable: bool) -> Result<PathBuf, Denied> {
        let fix = || {
            if self.workspaces.is_empty() {
                "do without host directories; the operator allows none".to_string()
            } else {
                let list: Vec<String> = self
                    .workspaces
                    .iter()
                    .map(|w| {
                        format!(
                            "{} ({})",
                            w.host.display(),
                            if w.writable { "rw" } else { "ro" }
                        )
                    })
                    .collect();
                format!("mount one of (or below): {}", list.join(", "))
            }
        };
        // Canonical, so `..` and symlinks cannot leave an allowed directory.
        let real = std::fs::canonicalize(host).map_err(|e| {
            Denied::new(
                "workspaces",
                format!("host directory {host:?} cannot be resolved: {e}"),
                fix(),
            )
        })?;
        let Some(w) = self.workspaces.iter().find(|w| {
            std::fs::canonicalize(&w.host)
                .map(|base| real.starts_with(base))
                .unwrap_or(false)
        }) else {
            return Err(Denied::new(
                "workspaces",
                format!("host directory {host:?} is not an allowed workspace"),
                fix(),
            ));
        };
        if writable && !w.writable {
            return Err(Denied::new(
                "workspaces",
                format!(
                    "host directory {host:?} may be mounted read-only only (workspace {})",
                    w.host.display()
                ),
                "mount it with writable false".into(),
            ));
        }
        Ok(real)
    }
}

fn approval(a: &ApprovalConfig) -> Result<Policy, Vec<String>> {
    let mut errs = Vec::new();
    let verdict = |v: &str, errs: &mut Vec<String>, what: &str| match v {
        "allow" => Verdict::Allow,
        "deny" => Verdict::Deny,
        other => {
            errs.push(format!(
                "{what}: verdict {other:?} must be allow or deny (an MCP server has nobody to ask)"
            ));
            Verdict::Deny
        }
    };
    let mut p = Policy::new(verdict(&a.default, &mut errs, "approval.default"));
    let mut names = BTreeSet::new();
    for r in &a.rules {
        let what = format!("approval rule {}", r.name);
        if !names.insert(r.name.clone()) {
            errs.push(format!("{what}: the name is used twice"));
        }
        let target = match r.target.as_str() {
            "exec" => RuleTarget::Exec,
            "file_write" => RuleTarget::FileWrite,
            "any" => RuleTarget::Any,
            other => {
                errs.push(format!(
                    "{what}: target {other:?} must be exec, file_write or any"
                ));
                continue;
            }
        };
        let v = verdict(&r.verdict, &mut errs, &what);
        match Rule::new(&r.name, target, &r.pattern, v) {
            Ok(rule) => p = p.rule(rule),
            Err(e) => errs.push(e.to_string()),
        }
    }
    if errs.is_empty() { Ok(p) } else { Err(errs) }
}

/// A request outside the policy: which rule, what was asked, what to do instead.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("refused by policy rule {rule}: {what}; {fix}")]
pub struct Denied {
    pub rule: &'static str,
    pub what: String,
    pub fix: String,
}

impl Denied {
    fn new(rule: &'static str, what: String, fix: String) -> Denied {
        Denied { rule, what, fix }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_strict_default_refuses_every_opt_out_naming_the_rule() {
        let p = OperatorPolicy::strict("native");
        assert_eq!(p.provider(None).unwrap(), "native");
        assert_eq!(p.provider(Some("docker")).unwrap_err().rule, "providers");
        assert_eq!(p.image("alpine:3").unwrap_err().rule, "images");
        assert_eq!(
            p.resources(Some(2 << 30), None, None, false)
                .unwrap_err()
                .rule,
            "max_memory"
        );
        assert_eq!(
            p.resources(None, Some(4.0), None, false).unwrap_err().rule,
            "max_cpus"
        );
        assert_eq!(
            p.resources(None, None, Some(86_400), false)
                .unwrap_err()
                .rule,
            "max_lifetime_secs"
        );
        let e = p.resources(None, None, None, true).unwrap_err();
        assert_eq!(e.rule, "allow_network");
        assert!(
            e.to_string()
                .contains("refused by policy rule allow_network")
        );
        assert!(
            p.resources(Some(256 << 20), Some(1.0), Some(60), false)
                .is_ok()
        );
        assert_eq!(p.mount("/etc", false).unwrap_err().rule, "workspaces");
        assert_eq!(p.exec_timeout(None).unwrap(), 60.0);
        assert_eq!(
            p.exec_timeout(Some(3600.0)).unwrap_err().rule,
            "max_exec_timeout_secs"
        );
        assert_eq!(p.exec_timeout(Some(-1.0)).unwrap_err().rule, "timeout");
        assert_eq!(p.language("py").unwrap().names[0], "python");
    }

    #[test]
    fn a_policy_file_sets_every_field_and_lists_every_problem() {
        let dir = tempfile::tempdir().unwrap();
        let ro = dir.path().join("ro");
        let rw = dir.path().join("rw");
        std::fs::create_dir_all(ro.join("sub")).unwrap();
        std::fs::create_dir_all(&rw).unwrap();
        std::os::unix::fs::symlink("/etc", ro.join("escape")).unwrap();
        let text = format!(
            r#"
providers = ["native", "wasm"]
languages = ["python", "sh"]
images = ["python:3.12-slim", "docker.io/library/*"]
allow_network = true
max_memory = "2g"
max_cpus = 2.0
max_lifetime_secs = 600
max_sandboxes = 2
output_limit = "64k"
[[workspaces]]
host = "{}"
[[workspaces]]
host = "{}"
writable = true
[approval]
default = "allow"
[[approval.rules]]
name = "no-curl"
target = "exec"
pattern = "\\bcurl\\b"
verdict = "deny"
"#,
            ro.display(),
            rw.display()
        );
        let f: PolicyFile = toml::from_str(&text).unwrap();
        let p = OperatorPolicy::strict("native").apply_file(f).unwrap();
        assert_eq!(p.provider(Some("wasm")).unwrap(), "wasm");
        assert_eq!(p.language("ruby").unwrap_err().rule, "languages");
        p.image("docker.io/library/alpine:3").unwrap();
        p.image("python:3.12-slim").unwrap();
        assert!(p.image("python:3.13").is_err());
        p.resources(Some(2 << 30), Some(2.0), Some(600), true)
            .unwrap();
        assert_eq!(p.output_limit_bytes, 64 << 10);
        p.mount(ro.join("sub").to_str().unwrap(), false).unwrap();
        assert!(
            p.mount(ro.to_str().unwrap(), true)
                .unwrap_err()
                .to_string()
                .contains("read-only only")
        );
        p.mount(rw.to_str().unwrap(), true).unwrap();
        // A symlink inside an allowed directory does not lead out of it.
        assert_eq!(
            p.mount(ro.join("escape").to_str().unwrap(), false)
                .unwrap_err()
                .rule,
            "workspaces"
        );
        let req = stockade::ExecRequest::new(["sh", "-c", "curl x"]);
        let e = p
            .approval
            .check("sb", &stockade::Action::Exec(&req))
            .unwrap_err();
        assert!(e.to_string().contains("rule no-curl"), "{e}");

        let bad: PolicyFile = toml::from_str(
            r#"
providers = ["vm"]
languages = ["cobol"]
max_memory = "lots"
[approval]
default = "ask"
[[approval.rules]]
name = "x"
target = "net"
pattern = "("
verdict = "deny"
"#,
        )
        .unwrap();
        let errs = OperatorPolicy::strict("native")
            .apply_file(bad)
            .unwrap_err();
        let all = errs.join("\n");
        for needle in [
            "unknown provider \"vm\"",
            "cobol",
            "max_memory",
            "nobody to ask",
            "target \"net\"",
        ] {
            assert!(all.contains(needle), "{needle} missing from {all}");
        }
        assert!(
            toml::from_str::<PolicyFile>("allow_netwrk = true").is_err(),
            "unknown keys are refused"
        );
    }

    #[test]
    fn the_policy_is_the_embedded_daemons_profile() {
        let host = Host {
            memory_bytes: 24 << 30,
            cpus: 2.0,
        };
        let mut p = OperatorPolicy::strict("native");
        p.images = vec!["ghcr.io/acme/*".into()];
        let prof = p.profile(host);
        assert_eq!(prof.max_memory_bytes, DEFAULT_MAX_MEMORY_BYTES);
        assert_eq!(prof.max_cpus, DEFAULT_MAX_CPUS);
        assert_eq!(prof.max_lifetime_secs, DEFAULT_MAX_LIFETIME_SECS);
        assert_eq!(
            prof.total_memory_bytes,
            DEFAULT_MAX_MEMORY_BYTES * DEFAULT_MAX_SANDBOXES as u64
        );
        assert_eq!(prof.providers.as_deref(), Some(&["native".to_string()][..]));
        assert!(prof.hardening_opt_outs.is_empty());
        assert_eq!(prof.network, ["none".to_string()].into());
        let images = prof.images.clone().unwrap();
        assert!(images.contains(&"ghcr.io/acme/*".to_string()), "{images:?}");
        assert!(
            images.iter().any(|i| i.starts_with("python:")),
            "{images:?}"
        );
        assert_eq!(prof.shared_images, images);
        assert!(
            prof.registries.contains(&"ghcr.io".to_string())
                && prof.registries.contains(&"docker.io".to_string()),
            "{:?}",
            prof.registries
        );
        // What the profile refuses, the daemon refuses, whoever forgot to check first.
        let mut spec = p.default_spec();
        prof.admit("native", &spec).unwrap();
        spec.limits.memory_bytes = 2 << 30;
        assert!(prof.admit("native", &spec).is_err());
        let mut spec = p.default_spec();
        spec.image = Some("alpine:3".into());
        assert!(prof.admit("native", &spec).is_err());
        assert!(prof.admit("docker", &p.default_spec()).is_err());
        let mut spec = p.default_spec();
        spec.network = stockade::spec::Network::Egress;
        assert!(prof.admit("native", &spec).is_err());
        // Defaults above a policy's maxima are cut to them.
        p.max_memory_bytes = 128 << 20;
        p.max_lifetime_secs = 30;
        let spec = p.default_spec();
        assert_eq!(spec.limits.memory_bytes, 128 << 20);
        assert_eq!(spec.timeout_secs, 30);
        p.profile(host).admit("native", &spec).unwrap();
    }

    #[test]
    fn workspace_flags_parse() {
        assert_eq!(
            Workspace::parse("/srv/a:rw").unwrap(),
            Workspace {
                host: "/srv/a".into(),
                writable: true
            }
        );
        assert!(!Workspace::parse("/srv/a").unwrap().writable);
        assert!(Workspace::parse("rel:rw").is_err());
    }
}
