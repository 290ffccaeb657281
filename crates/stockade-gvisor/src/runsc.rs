//! The `runsc` binary: where it is, what it is (version, build date, platforms), and
//! which platform to run on.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use stockade_core::{Error, Result};

/// How to get runsc.
pub const INSTALL_FIX: &str = "install gVisor's runsc (Debian: apt-get install runsc), or point \
     STOCKADE_RUNSC (or `runsc` in the [gvisor] table of the config file) at a working runsc";

/// How long a platform probe (`runsc do /bin/true`) may take before the platform is
/// judged unusable: on hosts whose `/dev/kvm` opens but does not run guests, the kvm
/// platform hangs instead of failing.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// A build older than this many days gets a warning in `doctor`.
pub const STALE_AFTER_DAYS: i64 = 365;

/// The gVisor platform: how the sentry intercepts the code's system calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Platform {
    /// Hardware virtualization (needs a working `/dev/kvm`).
    Kvm,
    /// seccomp traps in stub processes (newer runsc builds).
    Systrap,
    /// `PTRACE_SYSEMU` on stub processes: runs anywhere, slowest.
    Ptrace,
}

impl Platform {
    /// The name runsc takes in `--platform`.
    pub fn as_str(self) -> &'static str {
        match self {
            Platform::Kvm => "kvm",
            Platform::Systrap => "systrap",
            Platform::Ptrace => "ptrace",
        }
    }
}

/// A runsc binary that answered `--version`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Runsc {
    /// The binary.
    pub path: PathBuf,
    /// Its first `--version` line (`runsc version 0.0~20221219.0`).
    pub version: String,
    /// The build date from the version (`20221219`), when it has one.
    pub date: Option<(i32, u32, u32)>,
    /// Whether its `--platform` flag names systrap.
    pub has_systrap: bool,
}

/// The config file, for its `[gvisor]` table; an unreadable one makes the provider
/// unavailable, naming why.
fn config() -> Result<stockade_image::Config> {
    stockade_image::Config::load().map_err(|e| Error::Unavailable {
        what: "the gvisor provider".into(),
        reason: format!("the config file cannot be read: {e}"),
        fix: "fix the config file (see `stockade doctor`)".into(),
    })
}

/// Where runsc comes from: `$STOCKADE_RUNSC`, else the config file's `[gvisor]
/// runsc`, else `runsc` in `PATH` (and `/usr/sbin`, `/usr/bin`, where Debian puts it).
pub fn locate() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("STOCKADE_RUNSC").filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    let config = config()?;
    if let Some(p) = config.gvisor.runsc {
        return Ok(p);
    }
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    dirs.extend(["/usr/sbin".into(), "/usr/bin".into()]);
    dirs.into_iter()
        .map(|d| d.join("runsc"))
        .find(|p| p.is_file())
        .ok_or_else(|| Error::Unavailable {
            what: "the gvisor provider".into(),
            reason: "runsc was not found in PATH".into(),
            fix: INSTALL_FIX.into(),
        })
}

/// What identifies one build of the file at `path` without running it: the resolved
/// path, device, inode, size and modification time (an upgrade or a replaced file
/// changes one of them).
pub fn identity(path: &Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let real = std::fs::canonicalize(path).ok()?;
    let m = std::fs::metadata(&real).ok()?;
    Some(format!(
        "{} {}:{} {} {}.{}",
        real.display(),
        m.dev(),
        m.ino(),
        m.size(),
        m.mtime(),
        m.mtime_nsec()
    ))
}

/// Runs `cmd` with a deadline; a process still running at it is killed (with its
/// process group) and reported.
async fn output_within(
    mut cmd: tokio::process::Command,
    what: &str,
    limit: Duration,
) -> Result<std::process::Output> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let child = cmd
        .spawn()
        .map_err(|e| Error::io(format!("cannot start {what}"), e))?;
    let pid = child.id();
    match tokio::time::timeout(limit, child.wait_with_output()).await {
        Ok(r) => r.map_err(|e| Error::io(format!("cannot run {what}"), e)),
        Err(_) => {
            if let Some(pid) = pid {
                // The group: runsc's sandbox and gofer children too.
                kill_group(pid);
            }
            Err(Error::Timeout {
                operation: what.to_string(),
                after_ms: limit.as_millis() as u64,
            })
        }
    }
}

/// SIGKILLs the process group led by `pid`.
pub fn kill_group(pid: u32) {
    if let Some(p) = rustix::process::Pid::from_raw(pid as i32) {
        let _ = rustix::process::kill_process_group(p, rustix::process::Signal::KILL);
    }
}

impl Runsc {
    /// Checks that `path` is a runsc that answers `--version` (a missing file, a
    /// program that fails or prints something else is `Unavailable` with the fix).
    pub async fn open(path: &Path) -> Result<Runsc> {
        let unavailable = |reason: String| Error::Unavailable {
            what: "the gvisor provider".into(),
            reason,
            fix: INSTALL_FIX.into(),
        };
        if !path.is_file() {
            return Err(unavailable(format!(
                "runsc {} does not exist",
                path.display()
            )));
        }
        let mut cmd = tokio::process::Command::new(path);
        cmd.arg("--version");
        let out = output_within(cmd, &format!("{} --version", path.display()), PROBE_TIMEOUT)
            .await
            .map_err(|e| unavailable(e.to_string()))?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let version = text.lines().next().unwrap_or("").trim().to_string();
        if !out.status.success() || !version.starts_with("runsc version") {
            return Err(unavailable(format!(
                "{} --version did not answer as runsc does ({}; said {:?})",
                path.display(),
                out.status,
                if version.is_empty() {
                    String::from_utf8_lossy(&out.stderr).trim().to_string()
                } else {
                    version
                }
            )));
        }
        let mut cmd = tokio::process::Command::new(path);
        cmd.arg("flags");
        let flags = output_within(cmd, &format!("{} flags", path.display()), PROBE_TIMEOUT)
            .await
            .map(|o| {
                String::from_utf8_lossy(&o.stdout).into_owned()
                    + &String::from_utf8_lossy(&o.stderr)
            })
            .unwrap_or_default();
        Ok(Runsc {
            path: path.to_path_buf(),
            date: build_date(&version),
            version,
            has_systrap: names_systrap(&flags),
        })
    }

    /// Age of the build in days on `today` (unix days), when its version carries a
    /// date.
    pub fn age_days(&self, today_unix_days: i64) -> Option<i64> {
        self.date
            .map(|(y, m, d)| today_unix_days - days_from_civil(y, m, d))
    }

    /// Whether `platform` really runs a sandbox here: `runsc do /bin/true` on it
    /// within [`PROBE_TIMEOUT`] (a hang, as kvm does on hosts whose `/dev/kvm` cannot
    /// run guests, counts as no).
    pub async fn platform_works(&self, platform: Platform) -> Result<()> {
        let scratch = tempdir_for_probe()?;
        let mut cmd = tokio::process::Command::new(&self.path);
        cmd.arg(format!("--root={}", scratch.display()))
            .arg(format!("--platform={}", platform.as_str()))
            .args(["--network=none", "do", "/bin/true"]);
        let r = output_within(
            cmd,
            &format!("runsc do on the {} platform", platform.as_str()),
            PROBE_TIMEOUT,
        )
        .await;
        let _ = std::fs::remove_dir_all(&scratch);
        let out = r?;
        if out.status.success() {
            Ok(())
        } else {
            Err(Error::Unavailable {
                what: format!("the {} platform", platform.as_str()),
                reason: format!(
                    "runsc do /bin/true failed ({}): {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                ),
                fix: INSTALL_FIX.into(),
            })
        }
    }
}

fn tempdir_for_probe() -> Result<PathBuf> {
    let p = std::env::temp_dir().join(format!(
        "stockade-runsc-probe-{}",
        stockade_core::host::new_sandbox_id()
    ));
    std::fs::create_dir_all(&p)
        .map_err(|e| Error::io(format!("cannot create {}", p.display()), e))?;
    Ok(p)
}

/// The environment variable that names the platform, over the config file's
/// `[gvisor] platform`.
pub const PLATFORM_ENV: &str = "STOCKADE_GVISOR_PLATFORM";

impl Platform {
    /// The platform runsc calls `name`.
    pub fn parse(name: &str) -> Option<Platform> {
        match name {
            "kvm" => Some(Platform::Kvm),
            "systrap" => Some(Platform::Systrap),
            "ptrace" => Some(Platform::Ptrace),
            _ => None,
        }
    }
}

/// The platform the operator asked for, and where (`$STOCKADE_GVISOR_PLATFORM`, else
/// the config file's `[gvisor] platform`); `None` lets [`choose`] pick.
pub fn requested_platform() -> Result<Option<(Platform, &'static str)>> {
    if let Some(v) = std::env::var_os(PLATFORM_ENV).filter(|v| !v.is_empty()) {
        let name = v.to_string_lossy();
        return Platform::parse(&name)
            .map(|p| Some((p, "STOCKADE_GVISOR_PLATFORM")))
            .ok_or_else(|| Error::Unavailable {
                what: "the gvisor provider".into(),
                reason: format!("{PLATFORM_ENV}={name:?} is not a gVisor platform"),
                fix: format!(
                    "set {PLATFORM_ENV} to systrap, ptrace or kvm, or unset it to let Stockade choose"
                ),
            });
    }
    let config = config()?;
    Ok(config.gvisor.platform.map(|p| {
        let p = match p {
            stockade_image::GvisorPlatform::Kvm => Platform::Kvm,
            stockade_image::GvisorPlatform::Systrap => Platform::Systrap,
            stockade_image::GvisorPlatform::Ptrace => Platform::Ptrace,
        };
        (p, "the config file's [gvisor] platform")
    }))
}

/// The platform asked for by `from`, if this runsc and host can run it: systrap needs
/// a build that has it, kvm a `/dev/kvm` that really runs a sandbox (`kvm`).
pub fn check_requested(
    platform: Platform,
    from: &str,
    runsc: &Runsc,
    kvm: &std::result::Result<(), String>,
) -> Result<Platform> {
    let unavailable = |reason: String, fix: &str| Error::Unavailable {
        what: "the gvisor provider".into(),
        reason,
        fix: fix.into(),
    };
    match platform {
        Platform::Systrap if !runsc.has_systrap => Err(unavailable(
            format!(
                "{from} asks for the systrap platform, which {} ({}) does not have",
                runsc.path.display(),
                runsc.version
            ),
            "install a runsc built in mid-2023 or later (Debian 12: apt-get install -t \
             bookworm-backports runsc), or ask for ptrace",
        )),
        Platform::Kvm => match kvm {
            Ok(()) => Ok(Platform::Kvm),
            Err(why) => Err(unavailable(
                format!("{from} asks for the kvm platform, which cannot run here: {why}"),
                "ask for systrap or ptrace, or run on a host whose /dev/kvm runs guests",
            )),
        },
        p => Ok(p),
    }
}

/// The platform to use: kvm when it really runs (its probe is the caller's, since it
/// costs up to [`PROBE_TIMEOUT`]), else systrap when the build has it, else ptrace.
pub fn choose(kvm_works: bool, has_systrap: bool) -> Platform {
    if kvm_works {
        Platform::Kvm
    } else if has_systrap {
        Platform::Systrap
    } else {
        Platform::Ptrace
    }
}

/// Whether `runsc flags` output lists systrap as a platform.
pub fn names_systrap(flags: &str) -> bool {
    flags
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("-platform "))
        .take(3)
        .any(|l| l.contains("systrap"))
}

/// The build date in a runsc version (`runsc version 0.0~20221219.0`,
/// `runsc version release-20240513.0`).
pub fn build_date(version: &str) -> Option<(i32, u32, u32)> {
    let digits: Vec<&str> = version
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| s.len() == 8)
        .collect();
    let s = digits.first()?;
    let y: i32 = s[..4].parse().ok()?;
    let m: u32 = s[4..6].parse().ok()?;
    let d: u32 = s[6..].parse().ok()?;
    ((2015..=2100).contains(&y) && (1..=12).contains(&m) && (1..=31).contains(&d))
        .then_some((y, m, d))
}

/// Days since 1970-01-01 of a civil date (Howard Hinnant's algorithm).
pub fn days_from_civil(y: i32, m: u32, d: u32) -> i64 {
    let y = i64::from(if m <= 2 { y - 1 } else { y });
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_build_dates() {
        assert_eq!(
            build_date("runsc version 0.0~20221219.0"),
            Some((2022, 12, 19))
        );
        assert_eq!(
            build_date("runsc version release-20240513.0"),
            Some((2024, 5, 13))
        );
        assert_eq!(build_date("runsc version 1.2.3"), None);
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2022, 12, 19), 19_345);
    }

    #[test]
    fn chooses_kvm_only_when_it_runs() {
        assert_eq!(choose(true, true), Platform::Kvm);
        assert_eq!(choose(false, true), Platform::Systrap);
        assert_eq!(choose(false, false), Platform::Ptrace);
    }

    #[test]
    fn a_requested_platform_is_refused_where_it_cannot_run() {
        let old = Runsc {
            path: "/usr/bin/runsc".into(),
            version: "runsc version 0.0~20221219.0".into(),
            date: Some((2022, 12, 19)),
            has_systrap: false,
        };
        let new = Runsc {
            has_systrap: true,
            ..old.clone()
        };
        let no_kvm = Err("/dev/kvm cannot be opened".to_string());
        let e = check_requested(Platform::Systrap, "X", &old, &no_kvm).unwrap_err();
        assert!(e.to_string().contains("does not have"), "{e}");
        assert!(e.to_string().contains("bookworm-backports"), "{e}");
        assert_eq!(
            check_requested(Platform::Systrap, "X", &new, &no_kvm).unwrap(),
            Platform::Systrap
        );
        assert_eq!(
            check_requested(Platform::Ptrace, "X", &new, &no_kvm).unwrap(),
            Platform::Ptrace
        );
        let e = check_requested(Platform::Kvm, "X", &new, &no_kvm).unwrap_err();
        assert!(e.to_string().contains("cannot be opened"), "{e}");
        assert_eq!(
            check_requested(Platform::Kvm, "X", &new, &Ok(())).unwrap(),
            Platform::Kvm
        );
        assert_eq!(Platform::parse("systrap"), Some(Platform::Systrap));
        assert_eq!(Platform::parse("Systrap"), None);
    }

    #[test]
    fn finds_systrap_in_flags() {
        let old = "  -platform string\n    \tspecifies which platform to use: ptrace (default), kvm. (default \"ptrace\")\n  -profile\n";
        let new = "  -platform string\n    \tspecifies which platform to use: systrap (default), ptrace, kvm.\n";
        assert!(!names_systrap(old));
        assert!(names_systrap(new));
    }
}
