//! A real `stockaded` process per test, with its own socket, state and native state
//! root; it dies with the test process (`setpriv --pdeathsig KILL`), and on drop it is
//! stopped and every sandbox left in its state root is destroyed.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use stockade::Provider;
use stockade_client::{Address, RemoteProvider};

static N: AtomicUsize = AtomicUsize::new(0);

pub use stockade_testkit::require_root;

/// A free TCP port on loopback.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub struct TestDaemon {
    child: Option<Child>,
    /// Everything of this daemon lives below.
    pub dir: PathBuf,
    pub args: Vec<String>,
    /// Where clients connect (the first listener).
    pub host: Address,
    /// Every listener (waited for at start).
    pub listeners: Vec<Address>,
    /// Environment variables the daemon gets besides the harness's own.
    pub env: Vec<(String, String)>,
}

impl TestDaemon {
    /// The unix socket path of a daemon started with `start`.
    pub fn socket(dir: &Path) -> PathBuf {
        dir.join("d.sock")
    }

    /// Starts a daemon with `extra` flags, on a unix socket of its own unless they
    /// name listeners (`--listen=ADDR`).
    pub fn start(extra: &[&str]) -> TestDaemon {
        Self::start_with_env(extra, &[])
    }

    /// [`TestDaemon::start`], the daemon with `env` in its environment too.
    pub fn start_with_env(extra: &[&str], env: &[(&str, &str)]) -> TestDaemon {
        let n = N.fetch_add(1, Ordering::SeqCst);
        // Under /tmp/stockade-it-*: scripts/leak-check.sh looks there for leftovers.
        let dir = PathBuf::from(format!(
            "/tmp/stockade-it-daemon-{}-{n}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mut args = vec![
            format!("--state-dir={}", dir.join("daemon").display()),
            "--pool-idle-ttl-secs=120".to_string(),
        ];
        let mut listeners: Vec<Address> = extra
            .iter()
            .filter_map(|a| a.strip_prefix("--listen="))
            .map(|a| Address::parse(a).unwrap())
            .collect();
        if listeners.is_empty() {
            args.push(format!("--listen=unix:{}", Self::socket(&dir).display()));
            listeners.push(Address::Unix(Self::socket(&dir)));
        }
        args.extend(extra.iter().map(std::string::ToString::to_string));
        let mut d = TestDaemon {
            child: None,
            dir,
            args,
            host: listeners[0].clone(),
            listeners,
            env: env
                .iter()
                .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
                .collect(),
        };
        d.spawn();
        d
    }

    /// The native state root of this daemon's sandboxes.
    pub fn state_root(&self) -> PathBuf {
        self.dir.join("state")
    }

    fn command(&self) -> Command {
        let mut c = Command::new("setpriv");
        c.args(["--pdeathsig", "KILL", env!("CARGO_BIN_EXE_stockaded")])
            .args(&self.args)
            .env("STOCKADE_STATE_DIR", self.state_root())
            .env("STOCKADE_HOME", self.dir.join("home"))
            .env("STOCKADE_LOG", "info")
            .env_remove("STOCKADE_PROVIDER")
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        c
    }

    /// The daemon's pid (not setpriv's: it execs the daemon).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("the daemon runs").id()
    }

    /// The daemon's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("daemon.log")).unwrap_or_default()
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("daemon.log"))
            .unwrap();
        let mut c = self.command();
        c.stderr(log);
        self.child = Some(c.spawn().expect("start stockaded"));
        let until = Instant::now() + Duration::from_secs(30);
        loop {
            let up = self.listeners.iter().all(|a| match a {
                Address::Unix(p) => std::os::unix::net::UnixStream::connect(p).is_ok(),
                Address::Tcp { .. } => std::net::TcpStream::connect(a.authority().unwrap()).is_ok(),
            });
            if up {
                return;
            }
            if let Some(Ok(Some(st))) = self.child.as_mut().map(std::process::Child::try_wait) {
                panic!("stockaded exited with {st}:\n{}", self.log());
            }
            assert!(
                Instant::now() < until,
                "stockaded did not listen within 30 s:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Runs the daemon binary with `args` to completion (for startup errors).
    pub fn run_to_exit(args: &[&str]) -> std::process::Output {
        let dir = tempfile::tempdir().unwrap();
        Command::new(env!("CARGO_BIN_EXE_stockaded"))
            .args(args)
            .arg(format!("--state-dir={}", dir.path().join("d").display()))
            .env("STOCKADE_STATE_DIR", dir.path().join("s"))
            .env("STOCKADE_HOME", dir.path().join("h"))
            .output()
            .unwrap()
    }

    /// Runs this daemon's binary with its flags and state to completion (a start that
    /// must fail), killed after `limit` if it keeps running; its output.
    pub fn run_with_state(&self, limit: Duration) -> std::process::Output {
        let mut c = self.command();
        let child = c
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start stockaded");
        let pid = child.id();
        let watchdog = std::thread::spawn(move || {
            std::thread::sleep(limit);
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        });
        let out = child.wait_with_output().unwrap();
        drop(watchdog);
        out
    }

    /// `kill -9`: no shutdown, no draining.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts the daemon again with the same flags and state.
    pub fn restart(&mut self) {
        self.kill9();
        self.spawn();
    }

    /// Stops the daemon with SIGTERM and waits for it; returns whether it exited 0.
    pub fn stop(&mut self) -> bool {
        let Some(mut c) = self.child.take() else {
            return true;
        };
        let _ = Command::new("kill")
            .args(["-TERM", &c.id().to_string()])
            .status();
        let until = Instant::now() + Duration::from_secs(40);
        loop {
            if let Ok(Some(st)) = c.try_wait() {
                return st.success();
            }
            if Instant::now() > until {
                let _ = c.kill();
                let _ = c.wait();
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A client with `token`.
    pub async fn client(&self, token: Option<&str>) -> RemoteProvider {
        RemoteProvider::connect(&self.host, token).await.unwrap()
    }

    /// Waits (up to 15 s) until no native sandbox is left in this daemon's state root,
    /// and fails with the ones left. A destroy is answered before its teardown ends,
    /// which the provider's own listing (not the daemon's) may still show briefly.
    pub async fn assert_none_left(&self) {
        let until = Instant::now() + Duration::from_secs(15);
        loop {
            let left = self.live_ids();
            if left.is_empty() {
                return;
            }
            assert!(Instant::now() < until, "sandboxes left: {left:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Ids of live native sandboxes in this daemon's state root.
    pub fn live_ids(&self) -> Vec<String> {
        let root = self.state_root();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                stockade::NativeProvider::from(stockade::NativeLauncher::with_state_root(root))
                    .list()
                    .await
                    .unwrap()
                    .into_iter()
                    .map(|i| i.id)
                    .collect()
            })
        })
        .join()
        .unwrap()
    }
}

impl Drop for TestDaemon {
    fn drop(&mut self) {
        self.stop();
        let root = self.state_root();
        // Outside any runtime of the test: a thread of its own.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let p = stockade::NativeProvider::from(stockade::NativeLauncher::with_state_root(
                    &root,
                ));
                for s in p.list().await.unwrap_or_default() {
                    let _ = p.destroy(&s.id).await;
                }
                let _ = p.gc().await;
            });
            let _ = std::fs::remove_dir_all(&root);
        })
        .join();
        // The staged mounts of the sandboxes destroyed above (their daemon was gone).
        stockade_testkit::detach_mounts_under(&self.dir);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Waits until `f` holds (up to `secs`), polling.
pub async fn eventually<F, Fut>(secs: u64, what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let until = Instant::now() + Duration::from_secs(secs);
    while !f().await {
        assert!(Instant::now() < until, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
