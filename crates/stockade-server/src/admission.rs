//! Admission: the one policy every front door of the daemon applies before it
//! creates a sandbox or changes one (gRPC tenants, socket-group users, the E2B API,
//! `set_network`). A tenant is admitted by its *profile*: the hardening opt-outs it
//! may ask for (none by default), per-sandbox maxima and per-tenant totals of
//! memory, CPUs, pids, `/tmp` and lifetime, the providers and images it may use,
//! and the network modes it may ask for. The operator writes profiles in a TOML file
//! (`--profiles FILE`); without one, every tenant gets the built-in profile, sized to
//! the host:
//!
//! ```toml
//! [profile.tenant]            # token tenants (E2B keys included) unless [tenants] says
//! max_memory = "4g"           # per sandbox (default: the host's memory, at most 8 GiB)
//! max_cpus = 2                # per sandbox (default: the host's CPUs)
//! max_pids = 1024             # per sandbox (default 4096)
//! max_tmp = "2g"              # per sandbox (default: as max_memory)
//! max_lifetime_secs = 3600    # per sandbox (default 86400)
//! total_memory = "16g"        # the tenant's live sandboxes together (default: the host's memory)
//! total_cpus = 8              # the same for CPUs (default: 4 x the host's CPUs)
//! providers = ["native", "gvisor"]  # default: every provider but wasm
//! images = ["python:*", "ghcr.io/acme/*"]  # exact, or a prefix ending in `*` (default: any)
//! registries = ["ghcr.io", "reg.lan:5000"]  # what tenants may pull from (default: none)
//! shared_images = ["python:3.12", "acme/*"]  # on the host, run by every tenant (default: none)
//! hardening_opt_outs = []     # of seccomp, landlock, no_new_privileges, drop_capabilities
//! network = ["none", "policy"]  # of none, egress, policy (default: all three)
//!
//! [profile.socket-user]       # --socket-group users (tenants uid:N) unless [tenants] says
//!
//! [tenants]
//! "t-0a1b2c3d4e5f" = "trusted"  # a token's tenant, as the daemon logs them at start
//! ```
//!
//! A profile's missing keys take the built-in values. The daemon's single local caller
//! (no tokens, no socket group) is not a tenant and is not admitted by a profile: it
//! has the host's freedom, as the CLI as root has. The wasm provider is off for
//! tenants by default: each sandbox is a runner process of its own (no capabilities,
//! seccomp, landlock for writes), but it runs as the daemon's user and may read what
//! that user can, so wasmtime's checks are the only wall between a module and the
//! daemon's files; a profile may list it.
//!
//! A tenant sees the images the operator shares with its profile (`shared_images`)
//! or names in a template of the configuration file, and those it pulled itself; any other image, even one already on the host (another
//! tenant's, the operator's), is pulled again for it (anonymously: what it may fetch
//! itself), and it runs what that pull resolved.
//!
//! A tenant's image that the host does not have is pulled for it only from a registry
//! its profile lists, anonymously, and every connection of that pull (the registry,
//! its token realm, a redirect's blob store) goes through an address guard
//! (`stockade_image::guard`): loopback, link-local and the daemon host's own
//! addresses are refused whoever names them, so a listed name cannot lead a pull
//! into the host.
//!
//! The checks of names (mount roots, image references, the daemon host's own
//! addresses) stay where they are (`daemon/paths.rs`, `daemon/create.rs`); this
//! module decides what a tenant may ask for, as a pure function of the profile, the
//! spec and the tenant's current usage.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde::Deserialize;
use stockade::spec::{Network, format_size, parse_size};
use stockade::{Error, Result, SandboxSpec};

/// The label that names the profile a sandbox was admitted by (`inspect` shows it).
pub const PROFILE_LABEL: &str = "stockade.profile";
/// The built-in profile of token tenants.
pub const TENANT_PROFILE: &str = "tenant";
/// The built-in profile of `--socket-group` users.
pub const SOCKET_USER_PROFILE: &str = "socket-user";

const HARDENING: [&str; 4] = [
    "seccomp",
    "landlock",
    "no_new_privileges",
    "drop_capabilities",
];
const NETWORKS: [&str; 3] = ["none", "egress", "policy"];
const GIB: u64 = 1 << 30;

/// One profile as written in the file.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileFile {
    pub max_memory: Option<String>,
    pub max_cpus: Option<f64>,
    pub max_pids: Option<u32>,
    pub max_tmp: Option<String>,
    pub max_lifetime_secs: Option<u64>,
    pub total_memory: Option<String>,
    pub total_cpus: Option<f64>,
    pub providers: Option<Vec<String>>,
    pub images: Option<Vec<String>>,
    pub registries: Option<Vec<String>>,
    pub shared_images: Option<Vec<String>>,
    pub hardening_opt_outs: Option<Vec<String>>,
    pub network: Option<Vec<String>>,
}

/// The profiles file as written.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfilesFile {
    #[serde(default)]
    pub profile: BTreeMap<String, ProfileFile>,
    #[serde(default)]
    pub tenants: BTreeMap<String, String>,
}

/// What a tenant admitted by this profile may ask for.
#[derive(Clone, Debug, PartialEq)]
pub struct Profile {
    pub name: String,
    pub max_memory_bytes: u64,
    pub max_cpus: f64,
    pub max_pids: u32,
    pub max_tmp_bytes: u64,
    pub max_lifetime_secs: u64,
    pub total_memory_bytes: u64,
    pub total_cpus: f64,
    /// `None`: every provider but wasm.
    pub providers: Option<Vec<String>>,
    /// `None`: any image (names only, checked elsewhere).
    pub images: Option<Vec<String>>,
    /// Registries (`host[:port]`, lowercase) a tenant's images may be pulled from.
    pub registries: Vec<String>,
    /// Images on the host (the store's, dockerd's) every tenant of the profile may
    /// run without pulling them itself: exact, or a prefix ending in `*`.
    pub shared_images: Vec<String>,
    pub hardening_opt_outs: BTreeSet<String>,
    pub network: BTreeSet<String>,
}

/// The host's size, which the built-in profile is cut to.
#[derive(Clone, Copy, Debug)]
pub struct Host {
    pub memory_bytes: u64,
    pub cpus: f64,
}

impl Host {
    /// This machine: `MemTotal` of /proc/meminfo and the CPUs this process may use.
    pub fn this() -> Host {
        let memory_bytes = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| {
                m.lines()
                    .find_map(|l| l.strip_prefix("MemTotal:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            })
            .map_or(8 * GIB, |kib| kib * 1024);
        let cpus = std::thread::available_parallelism().map_or(1, usize::from) as f64;
        Host { memory_bytes, cpus }
    }
}

/// What a tenant holds now: its live sandboxes and those being made.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Usage {
    pub memory_bytes: u64,
    pub cpus: f64,
}

impl Usage {
    /// What a sandbox of `spec` takes.
    pub fn of(spec: &SandboxSpec) -> Usage {
        Usage {
            memory_bytes: spec.limits.memory_bytes,
            cpus: spec.limits.cpus,
        }
    }

    /// What a stored spec takes (nothing when it does not parse: then it was never
    /// admitted as one).
    pub fn of_json(spec: &serde_json::Value) -> Usage {
        serde_json::from_value::<SandboxSpec>(spec.clone())
            .map_or_else(|_| Usage::default(), |s| Usage::of(&s))
    }

    pub fn plus(self, o: Usage) -> Usage {
        Usage {
            memory_bytes: self.memory_bytes.saturating_add(o.memory_bytes),
            cpus: self.cpus + o.cpus,
        }
    }
}

impl Profile {
    /// The built-in profile named `name`, cut to `host`.
    pub fn builtin(name: &str, host: Host) -> Profile {
        let max_memory = host.memory_bytes.min(8 * GIB);
        Profile {
            name: name.to_string(),
            max_memory_bytes: max_memory,
            max_cpus: host.cpus,
            max_pids: 4096,
            max_tmp_bytes: max_memory,
            max_lifetime_secs: 86_400,
            total_memory_bytes: host.memory_bytes,
            total_cpus: host.cpus * 4.0,
            providers: None,
            images: None,
            registries: Vec::new(),
            shared_images: Vec::new(),
            hardening_opt_outs: BTreeSet::new(),
            network: NETWORKS.iter().map(|s| (*s).to_string()).collect(),
        }
    }

    fn from_file(name: &str, f: &ProfileFile, host: Host) -> std::result::Result<Profile, String> {
        let mut p = Profile::builtin(name, host);
        let size =
            |key: &str, v: &Option<String>, into: &mut u64| -> std::result::Result<(), String> {
                if let Some(v) = v {
                    *into = parse_size(v).map_err(|e| format!("{key}: {e}"))?;
                }
                Ok(())
            };
        size("max_memory", &f.max_memory, &mut p.max_memory_bytes)?;
        size("max_tmp", &f.max_tmp, &mut p.max_tmp_bytes)?;
        size("total_memory", &f.total_memory, &mut p.total_memory_bytes)?;
        for (key, v, into) in [
            ("max_cpus", f.max_cpus, &mut p.max_cpus),
            ("total_cpus", f.total_cpus, &mut p.total_cpus),
        ] {
            if let Some(v) = v {
                if !(v.is_finite() && v > 0.0) {
                    return Err(format!("{key} = {v}: give a number of CPUs above 0"));
                }
                *into = v;
            }
        }
        if let Some(v) = f.max_pids {
            p.max_pids = v;
        }
        if let Some(v) = f.max_lifetime_secs {
            p.max_lifetime_secs = v;
        }
        if f.providers.is_some() {
            p.providers.clone_from(&f.providers);
        }
        if f.images.is_some() {
            p.images.clone_from(&f.images);
        }
        if let Some(list) = &f.shared_images {
            p.shared_images.clone_from(list);
        }
        if let Some(list) = &f.registries {
            p.registries = list
                .iter()
                .map(|r| check_registry(r))
                .collect::<std::result::Result<_, _>>()?;
        }
        if let Some(list) = &f.hardening_opt_outs {
            for h in list {
                if !HARDENING.contains(&h.as_str()) {
                    return Err(format!(
                        "hardening_opt_outs: {h:?} is not one of {}",
                        HARDENING.join(", ")
                    ));
                }
            }
            p.hardening_opt_outs = list.iter().cloned().collect();
        }
        if let Some(list) = &f.network {
            for n in list {
                if !NETWORKS.contains(&n.as_str()) {
                    return Err(format!(
                        "network: {n:?} is not one of {}",
                        NETWORKS.join(", ")
                    ));
                }
            }
            p.network = list.iter().cloned().collect();
        }
        Ok(p)
    }

    /// Whether the profile lets a tenant use `provider`.
    fn allows_provider(&self, provider: &str) -> bool {
        match &self.providers {
            Some(list) => list.iter().any(|p| p == provider),
            None => provider != "wasm",
        }
    }

    /// Checks `spec` on `provider` against the profile (all but the per-tenant
    /// totals: [`Profile::admit_totals`]). Every refusal names the profile's rule,
    /// what was asked and what to do.
    pub fn admit(&self, provider: &str, spec: &SandboxSpec) -> Result<()> {
        let deny = |rule: &str, what: String, fix: &str| {
            Err(Error::PolicyDenied(format!(
                "refused by profile {:?} ({rule}): {what}; {fix}",
                self.name
            )))
        };
        if !self.allows_provider(provider) {
            let why = if provider == "wasm" && self.providers.is_none() {
                " (a wasm runner runs as the daemon's user and may read what that user \
                 can: wasmtime's checks are the only wall between the code and those files, \
                 so tenants get it only where the operator's profile lists it)"
            } else {
                ""
            };
            return deny(
                "providers",
                format!("provider {provider:?} is not allowed{why}"),
                &format!("use one of: {}", self.provider_list()),
            );
        }
        if let (Some(list), Some(image)) = (&self.images, &spec.image)
            && !list.iter().any(|p| image_matches(p, image))
        {
            return deny(
                "images",
                format!("image {image:?} is not allowed"),
                &format!("use an image matching one of: {}", list.join(", ")),
            );
        }
        let l = &spec.limits;
        if l.memory_bytes > self.max_memory_bytes {
            return deny(
                "max_memory",
                format!(
                    "memory {} is over {}",
                    format_size(l.memory_bytes),
                    format_size(self.max_memory_bytes)
                ),
                "ask for less memory",
            );
        }
        if l.cpus > self.max_cpus {
            return deny(
                "max_cpus",
                format!("cpus {} is over {}", l.cpus, self.max_cpus),
                "ask for fewer CPUs",
            );
        }
        if l.pids > self.max_pids {
            return deny(
                "max_pids",
                format!("pids {} is over {}", l.pids, self.max_pids),
                "ask for fewer processes",
            );
        }
        if l.tmp_bytes > self.max_tmp_bytes {
            return deny(
                "max_tmp",
                format!(
                    "/tmp of {} is over {}",
                    format_size(l.tmp_bytes),
                    format_size(self.max_tmp_bytes)
                ),
                "ask for a smaller /tmp",
            );
        }
        if spec.timeout_secs > self.max_lifetime_secs {
            return deny(
                "max_lifetime_secs",
                format!(
                    "a lifetime of {} s is over {} s",
                    spec.timeout_secs, self.max_lifetime_secs
                ),
                "ask for a shorter lifetime",
            );
        }
        self.admit_network(&spec.network)?;
        let h = &spec.hardening;
        for (on, name) in [
            (h.seccomp, "seccomp"),
            (h.landlock, "landlock"),
            (h.no_new_privileges, "no_new_privileges"),
            (h.drop_capabilities, "drop_capabilities"),
        ] {
            if !on && !self.hardening_opt_outs.contains(name) {
                return deny(
                    "hardening_opt_outs",
                    format!(
                        "tenants of this daemon may not turn hardening off (hardening.{name} = false)"
                    ),
                    "remove the opt-out, or run the sandbox with the local CLI as root",
                );
            }
        }
        Ok(())
    }

    /// Whether the tenant, holding `usage` now, may take `asked` more: the
    /// profile's per-tenant totals (checked when a creation takes its slot, under the
    /// daemon's lock, so concurrent creations cannot pass it together).
    pub fn admit_totals(&self, asked: Usage, usage: Usage) -> Result<()> {
        let after = usage.plus(asked);
        if after.memory_bytes > self.total_memory_bytes {
            return Err(Error::LimitExceeded {
                what: format!(
                    "memory of the tenant's sandboxes ({} held now, {} asked)",
                    format_size(usage.memory_bytes),
                    format_size(asked.memory_bytes)
                ),
                limit: format!(
                    "{} in all (profile {:?}, total_memory): destroy a sandbox you no longer \
                     need, or ask for less memory",
                    format_size(self.total_memory_bytes),
                    self.name
                ),
            });
        }
        if after.cpus > self.total_cpus + 1e-9 {
            return Err(Error::LimitExceeded {
                what: format!(
                    "CPUs of the tenant's sandboxes ({} held now, {} asked)",
                    usage.cpus, asked.cpus
                ),
                limit: format!(
                    "{} in all (profile {:?}, total_cpus): destroy a sandbox you no longer \
                     need, or ask for fewer CPUs",
                    self.total_cpus, self.name
                ),
            });
        }
        Ok(())
    }

    /// The network part of [`Profile::admit`], also for a change of a live
    /// sandbox's network.
    pub fn admit_network(&self, network: &Network) -> Result<()> {
        let mode = match network {
            Network::None => "none",
            Network::Egress => "egress",
            Network::Policy(_) => "policy",
        };
        if self.network.contains(mode) {
            return Ok(());
        }
        Err(Error::PolicyDenied(format!(
            "refused by profile {:?} (network): network {mode:?} is not allowed; ask for one of: {}",
            self.name,
            self.network.iter().cloned().collect::<Vec<_>>().join(", ")
        )))
    }

    /// Whether the operator shares `image` (on the host already) with the profile.
    pub fn shares(&self, image: &str) -> bool {
        self.shared_images.iter().any(|p| image_matches(p, image))
    }

    /// Whether a tenant's image may be pulled from `registry` (`host[:port]`).
    pub fn admit_registry(&self, image: &str, registry: &str) -> Result<()> {
        let registry = registry.to_ascii_lowercase();
        if self.registries.contains(&registry) {
            return Ok(());
        }
        let listed = if self.registries.is_empty() {
            "it lists none".to_string()
        } else {
            format!("it lists {}", self.registries.join(", "))
        };
        Err(Error::PolicyDenied(format!(
            "refused by profile {:?} (registries): image {image:?} is not on this host, and \
             tenants pull only from the registries their profile lists ({listed}); ask the \
             operator to add {registry:?} to `registries`, or to bring the image in",
            self.name
        )))
    }

    fn provider_list(&self) -> String {
        match &self.providers {
            Some(l) => l.join(", "),
            None => "any provider but wasm".into(),
        }
    }
}

/// A `registries` entry: `host[:port]`, no scheme, path or userinfo, and never a
/// loopback, link-local or unspecified address or `localhost` (the pull guard refuses
/// those whatever the list says; refusing them here tells the operator at start).
fn check_registry(r: &str) -> std::result::Result<String, String> {
    let r = r.trim().to_ascii_lowercase();
    let bad = |why: &str| Err(format!("registries: {r:?} {why}"));
    if r.is_empty() || r.contains("://") || r.contains(['/', '@', ' ']) {
        return bad("is not HOST[:PORT] (no scheme, path or user)");
    }
    let host = match r.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or(""),
        None => r.rsplit_once(':').map_or(r.as_str(), |(h, _)| h),
    };
    if host == "localhost" || host.ends_with(".localhost") {
        return bad("is this host's loopback: tenants' pulls never reach it");
    }
    if let Ok(ip) = host.parse::<std::net::IpAddr>()
        && let Some(why) = stockade_image::guard::refuse_local(Vec::new())(ip)
    {
        return bad(&format!("is refused for tenants' pulls: {why}"));
    }
    Ok(r)
}

/// `pattern` (exact, or a prefix ending in `*`) against an image reference.
fn image_matches(pattern: &str, image: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => image.starts_with(prefix),
        None => pattern == image,
    }
}

/// Every profile, and which tenant has which.
#[derive(Clone, Debug)]
pub struct Admission {
    profiles: BTreeMap<String, Profile>,
    tenants: BTreeMap<String, String>,
}

impl Admission {
    /// The built-in profiles only.
    pub fn builtin(host: Host) -> Admission {
        let profiles = [TENANT_PROFILE, SOCKET_USER_PROFILE]
            .into_iter()
            .map(|n| (n.to_string(), Profile::builtin(n, host)))
            .collect();
        Admission {
            profiles,
            tenants: BTreeMap::new(),
        }
    }

    /// One profile for every tenant (an embedding front end's operator policy).
    pub fn only(profile: Profile) -> Admission {
        let profiles = [TENANT_PROFILE, SOCKET_USER_PROFILE]
            .into_iter()
            .map(|n| (n.to_string(), profile.clone()))
            .collect();
        Admission {
            profiles,
            tenants: BTreeMap::new(),
        }
    }

    /// The profiles of `path` over the built-in ones.
    pub fn from_file(path: &Path, host: Host) -> anyhow::Result<Admission> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| anyhow::anyhow!("--profiles {}: {e}", path.display()))?;
        Admission::parse(&text, host)
            .map_err(|e| anyhow::anyhow!("--profiles {}: {e}", path.display()))
    }

    /// The profiles of a file's text over the built-in ones.
    pub fn parse(text: &str, host: Host) -> std::result::Result<Admission, String> {
        let f: ProfilesFile = toml::from_str(text).map_err(|e| e.to_string())?;
        let mut a = Admission::builtin(host);
        for (name, pf) in &f.profile {
            let p =
                Profile::from_file(name, pf, host).map_err(|e| format!("[profile.{name}] {e}"))?;
            a.profiles.insert(name.to_string(), p);
        }
        for (tenant, profile) in &f.tenants {
            if !a.profiles.contains_key(profile) {
                return Err(format!(
                    "[tenants] {tenant:?} = {profile:?}: there is no [profile.{profile}]"
                ));
            }
        }
        a.tenants = f.tenants;
        Ok(a)
    }

    /// The profile that admits `tenant`.
    pub fn profile_of(&self, tenant: &str) -> &Profile {
        let name = match self.tenants.get(tenant) {
            Some(n) => n.as_str(),
            None if tenant.starts_with("uid:") => SOCKET_USER_PROFILE,
            None => TENANT_PROFILE,
        };
        &self.profiles[name]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOST: Host = Host {
        memory_bytes: 24 * GIB,
        cpus: 2.0,
    };

    fn spec(memory: u64, cpus: f64) -> SandboxSpec {
        let mut s = SandboxSpec::default();
        s.limits.memory_bytes = memory;
        s.limits.cpus = cpus;
        s
    }

    #[test]
    fn tenants_pull_only_from_listed_registries_never_local_ones() {
        let a = Admission::builtin(HOST);
        let e = a
            .profile_of("t-00")
            .admit_registry("ghcr.io/x:1", "ghcr.io")
            .unwrap_err()
            .to_string();
        assert!(e.contains("registries") && e.contains("lists none"), "{e}");
        let a = Admission::parse(
            "[profile.tenant]\nregistries = [\"GHCR.io\", \"reg.lan:5000\"]\n",
            HOST,
        )
        .unwrap();
        let p = a.profile_of("t-00");
        p.admit_registry("ghcr.io/x:1", "ghcr.io").unwrap();
        p.admit_registry("reg.lan:5000/x:1", "reg.lan:5000")
            .unwrap();
        assert!(p.admit_registry("reg.lan/x:1", "reg.lan").is_err());
        for bad in [
            "localhost:5000",
            "127.0.0.1:5000",
            "[::1]:5000",
            "169.254.169.254",
            "0.0.0.0:80",
            "http://reg.lan",
            "reg.lan/path",
            "user@reg.lan",
        ] {
            let e = Admission::parse(&format!("[profile.tenant]\nregistries = [{bad:?}]\n"), HOST)
                .unwrap_err();
            assert!(e.contains("registries"), "{bad}: {e}");
        }
    }

    #[test]
    fn the_builtin_profile_is_cut_to_the_host() {
        let a = Admission::builtin(HOST);
        let p = a.profile_of("t-00");
        assert_eq!(p.name, TENANT_PROFILE);
        assert_eq!(a.profile_of("uid:1000").name, SOCKET_USER_PROFILE);
        p.admit("native", &SandboxSpec::default()).unwrap();
        for (what, s) in [
            ("max_memory", spec(100 * GIB, 1.0)),
            ("max_cpus", spec(GIB, 64.0)),
        ] {
            let e = p.admit("native", &s).unwrap_err().to_string();
            assert!(e.contains(what), "{e}");
        }
        let mut tmp = SandboxSpec::default();
        tmp.limits.tmp_bytes = 50 * GIB;
        assert!(
            p.admit("native", &tmp)
                .unwrap_err()
                .to_string()
                .contains("max_tmp")
        );
        let e = p
            .admit("wasm", &SandboxSpec::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("runs as the daemon's user"), "{e}");
        let held = Usage {
            memory_bytes: 20 * GIB,
            cpus: 1.0,
        };
        let e = p
            .admit_totals(Usage::of(&spec(8 * GIB, 1.0)), held)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("total_memory") && e.contains("20GiB held now"),
            "{e}"
        );
    }

    #[test]
    fn a_file_names_profiles_and_tenants() {
        let a = Admission::parse(
            r#"
[profile.tenant]
max_memory = "1g"
providers = ["native"]
images = ["python:*"]
network = ["none"]

[profile.trusted]
hardening_opt_outs = ["seccomp"]
providers = ["native", "wasm"]

[tenants]
"t-aa" = "trusted"
"#,
            HOST,
        )
        .unwrap();
        let p = a.profile_of("t-bb");
        assert!(p.admit("native", &spec(2 * GIB, 1.0)).is_err());
        assert!(p.admit("docker", &SandboxSpec::default()).is_err());
        let mut img = SandboxSpec {
            image: Some("python:3.12".into()),
            ..SandboxSpec::default()
        };
        p.admit("native", &img).unwrap();
        img.image = Some("node:22".into());
        assert!(
            p.admit("native", &img)
                .unwrap_err()
                .to_string()
                .contains("images")
        );
        assert!(p.admit_network(&Network::Egress).is_err());
        p.admit_network(&Network::None).unwrap();
        let t = a.profile_of("t-aa");
        let mut off = SandboxSpec::default();
        off.hardening.seccomp = false;
        t.admit("wasm", &off).unwrap();
        off.hardening.landlock = false;
        assert!(t.admit("native", &off).is_err());
    }

    #[test]
    fn a_bad_file_says_what_is_wrong() {
        for (text, says) in [
            ("[profile.x]\nmax_memory = \"lots\"", "max_memory"),
            (
                "[profile.x]\nhardening_opt_outs = [\"everything\"]",
                "hardening_opt_outs",
            ),
            ("[profile.x]\nnetwork = [\"lan\"]", "network"),
            ("[profile.x]\nmax_cpus = 0", "max_cpus"),
            ("[tenants]\n\"t-1\" = \"nope\"", "no [profile.nope]"),
            ("[profile.x]\nmemory = \"1g\"", "unknown field"),
        ] {
            let e = Admission::parse(text, HOST).unwrap_err();
            assert!(e.contains(says), "{text}: {e}");
        }
    }
}
