//! Every CLI test runs two ways (issue 15: the CLI under `STOCKADE_HOST` behaves as
//! it does in-process): in-process, and through a `stockade serve` the test starts,
//! with a token (so the daemon treats the CLI as a remote tenant) and the test's temp
//! directory as the one directory tenants may mount.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::{state_dir, stockade};

/// The token the test daemons accept (a token is at least 16 characters).
const TOKEN: &str = "stockade-cli-test-token";

/// Where a test daemon keeps images, runtimes and sessions (`STOCKADE_HOME`).
pub enum Home<'a> {
    /// A directory of its own.
    Own,
    /// The test's home (its image store and config file).
    At(&'a Path),
    /// The environment's, as the CLI in-process uses.
    Inherit,
}

/// `stockade serve` on a socket of its own; killed (and its sandboxes reaped) on drop.
pub struct Serve {
    child: Child,
    dir: tempfile::TempDir,
    token: bool,
    root: PathBuf,
}

impl Serve {
    /// A daemon without tokens (the local tenant), its image store in its own home.
    pub fn start() -> Serve {
        Serve::start_with(false, Home::Own)
    }

    /// A daemon; with `token`, callers need [`TOKEN`] and may mount only below the
    /// system temp directory.
    pub fn start_with(token: bool, home: Home<'_>) -> Serve {
        Serve::start_full(token, home, &[])
    }

    /// Like [`Serve::start_with`], with `extra` flags for `stockade serve`.
    pub fn start_full(token: bool, home: Home<'_>, extra: &[String]) -> Serve {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("d.sock");
        let mut cmd = Command::new("setpriv");
        cmd.args([
            "--pdeathsig",
            "KILL",
            env!("CARGO_BIN_EXE_stockade"),
            "serve",
        ])
        .arg(format!("--listen=unix:{}", sock.display()))
        .arg(format!(
            "--state-dir={}",
            dir.path().join("daemon").display()
        ))
        .args(extra);
        if token {
            let file = dir.path().join("tokens");
            std::fs::write(&file, format!("{TOKEN}\n")).unwrap();
            // These tests run the CLI's commands through a daemon, every provider
            // included (the built-in profile, which keeps wasm from tenants, has
            // tests of its own), and the images the test's own commands bring into
            // the host are the operator's, shared with the tenant.
            let profiles = dir.path().join("profiles.toml");
            std::fs::write(
                &profiles,
                "[profile.tenant]\nproviders = [\"native\", \"docker\", \"gvisor\", \"microvm\", \"wasm\"]\n\
                 shared_images = [\"*\"]\n",
            )
            .unwrap();
            cmd.arg(format!("--token-file={}", file.display()))
                .arg(format!("--allow-mount={}", std::env::temp_dir().display()))
                .arg(format!("--profiles={}", profiles.display()));
        }
        match home {
            Home::Own => {
                cmd.env("STOCKADE_HOME", dir.path().join("home"));
            }
            Home::At(h) => {
                cmd.env("STOCKADE_HOME", h)
                    .env("STOCKADE_CONFIG", h.join("config.toml"));
            }
            Home::Inherit => {}
        }
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let root = PathBuf::from(format!(
            "{}-daemon-{}",
            state_dir().display(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let child = cmd
            .env("STOCKADE_STATE_DIR", &root)
            .env_remove("STOCKADE_PROVIDER")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let until = Instant::now() + Duration::from_secs(30);
        while std::os::unix::net::UnixStream::connect(&sock).is_err() {
            assert!(Instant::now() < until, "stockade serve did not listen");
            std::thread::sleep(Duration::from_millis(20));
        }
        Serve {
            child,
            dir,
            token,
            root,
        }
    }

    /// Where this daemon's native sandboxes live (`STOCKADE_STATE_DIR`): a CLI run
    /// in-process with it sees the daemon's sandboxes beside its own.
    pub fn state_root(&self) -> &Path {
        &self.root
    }

    pub fn host(&self) -> String {
        format!("unix://{}", self.dir.path().join("d.sock").display())
    }

    /// `cmd` sent through this daemon.
    pub fn through(&self, mut cmd: Command) -> Command {
        cmd.env("STOCKADE_HOST", self.host());
        if self.token {
            cmd.env("STOCKADE_TOKEN", TOKEN);
        }
        cmd
    }

    /// `kill -9` of the daemon: no draining, its sandboxes stay (drop destroys them).
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn cli(&self, args: &[&str]) -> Output {
        self.through(stockade(args)).output().unwrap()
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
        // What a failed test left (only this daemon's sandboxes live under its state
        // root): destroyed in-process, native alone (the other providers' sandboxes
        // belong to other tests).
        let direct = |args: &[&str]| {
            stockade(args)
                .args(["--direct", "--provider", "native"])
                .env("STOCKADE_STATE_DIR", &self.root)
                .output()
                .unwrap()
        };
        if let Ok(serde_json::Value::Array(left)) =
            serde_json::from_slice(&direct(&["ls", "--json"]).stdout)
        {
            for s in left {
                if let Some(id) = s["id"].as_str() {
                    direct(&["rm", id]);
                }
            }
        }
        // A daemon killed with `kill -9` during a create (`kill9`) leaves that
        // sandbox's directory without a state (only its empty `root/`, or that and
        // its plan): its monitor never ran, so nothing lives and no cgroup exists
        // (the leak check looks for those); gc would take the directory only after
        // its 30 s grace, so it goes here.
        if let Ok(dirs) = std::fs::read_dir(&self.root) {
            for d in dirs.flatten() {
                let p = d.path();
                if !p.join("state.json").exists() {
                    let _ = std::fs::remove_dir_all(&p);
                }
            }
        }
        let _ = std::fs::remove_dir(&self.root);
        // The staged mounts of the sandboxes removed above (their daemon was gone).
        stockade_testkit::detach_mounts_under(self.dir.path());
    }
}

/// How a test's `stockade` commands reach sandboxes.
pub enum Via {
    /// In-process (`--direct` semantics: no daemon named).
    InProcess,
    /// Through a daemon this test started, as a tenant with a token.
    Daemon(Serve),
}

impl Via {
    pub fn in_process() -> Via {
        Via::InProcess
    }

    /// A daemon with a token, on the same `STOCKADE_HOME` as the CLI in-process (the
    /// environment's: runtimes, images), as a daemon on the same host would be.
    pub fn daemon() -> Via {
        Via::Daemon(Serve::start_with(true, Home::Inherit))
    }

    /// A daemon with a token whose image store is `home`'s (the one the test's
    /// `stockade image` commands fill).
    pub fn daemon_with_home(home: &Path) -> Via {
        Via::Daemon(Serve::start_with(true, Home::At(home)))
    }

    pub fn is_daemon(&self) -> bool {
        matches!(self, Via::Daemon(_))
    }

    /// `stockade ARGS`, through the daemon when there is one.
    pub fn cmd(&self, args: &[&str]) -> Command {
        self.wrap(stockade(args))
    }

    /// `cmd` sent through the daemon when there is one.
    pub fn wrap(&self, cmd: Command) -> Command {
        match self {
            Via::InProcess => cmd,
            Via::Daemon(d) => d.through(cmd),
        }
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().expect("run stockade")
    }
}

/// Declares a test that runs twice: `NAME::in_process` and `NAME::through_daemon`.
/// The body gets `via: &Via`; `home` (optional) makes the daemon use that image store.
#[macro_export]
macro_rules! both_ways {
    ($(#[$attr:meta])* fn $name:ident($via:ident) $body:block) => {
        $(#[$attr])*
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            #[allow(unused_imports)]
            use $crate::via::Via;

            fn body($via: &Via) $body

            #[test]
            fn in_process() {
                body(&Via::in_process())
            }

            #[test]
            fn through_daemon() {
                if !$crate::require_root(concat!(stringify!($name), " through a daemon")) {
                    return;
                }
                body(&Via::daemon())
            }
        }
    };
    // With a home (image store, config file) shared by the test's commands and its
    // daemon.
    ($(#[$attr:meta])* fn $name:ident($via:ident, $home:ident) $body:block) => {
        $(#[$attr])*
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            #[allow(unused_imports)]
            use $crate::via::Via;

            fn body($via: &Via, $home: &std::path::Path) $body

            #[test]
            fn in_process() {
                let home = tempfile::tempdir().unwrap();
                body(&Via::in_process(), home.path())
            }

            #[test]
            fn through_daemon() {
                if !$crate::require_root(concat!(stringify!($name), " through a daemon")) {
                    return;
                }
                let home = tempfile::tempdir().unwrap();
                body(&Via::daemon_with_home(home.path()), home.path())
            }
        }
    };
}
