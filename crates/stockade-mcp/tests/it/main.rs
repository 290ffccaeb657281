//! `stockade-mcp` driven by the official MCP clients, pinned by `ci-setup.sh`: the
//! Python `mcp` package and the TypeScript `@modelcontextprotocol/sdk`, over stdio and
//! streamable HTTP. The client scripts (`tests/clients/`) assert everything they
//! check; these tests start them, start the server where needed, and check what only
//! the host can see (sandboxes gone after a disconnect or a SIGKILL).
//!
//! The tests run one at a time (a lock): the machine is small and each starts
//! sandboxes.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use stockade_testkit::require;

static SERIAL: Mutex<()> = Mutex::new(());

const TOKEN_A: &str = "tenant-a-token-0123456789";
const TOKEN_B: &str = "tenant-b-token-0123456789";
const FIX: &str = "run crates/stockade-mcp/ci-setup.sh (installs the pinned Python `mcp` into \
                   /var/cache/stockade/mcp-venv and @modelcontextprotocol/sdk into \
                   /var/cache/stockade/mcp-npm)";

fn server_bin() -> &'static str {
    env!("CARGO_BIN_EXE_stockade-mcp")
}

fn clients_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients")
}

fn venv_python() -> Result<PathBuf, String> {
    let venv = std::env::var_os("STOCKADE_MCP_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| "/var/cache/stockade/mcp-venv".into());
    let py = venv.join("bin/python");
    let ok = Command::new(&py)
        .args(["-c", "import mcp, httpx2"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if ok {
        Ok(py)
    } else {
        Err(format!("{} cannot import mcp", py.display()))
    }
}

fn npm_dir() -> Result<PathBuf, String> {
    let dir = std::env::var_os("STOCKADE_MCP_NPM")
        .map(PathBuf::from)
        .unwrap_or_else(|| "/var/cache/stockade/mcp-npm".into());
    if dir
        .join("node_modules/@modelcontextprotocol/sdk/package.json")
        .is_file()
    {
        Ok(dir)
    } else {
        Err(format!(
            "{} has no @modelcontextprotocol/sdk",
            dir.display()
        ))
    }
}

/// The agent the native provider starts, beside the server binary.
fn agent() -> Result<(), String> {
    let p = Path::new(server_bin()).with_file_name("stockade-agent");
    if p.is_file() {
        Ok(())
    } else {
        Err(format!("{} is not built", p.display()))
    }
}

/// What every test needs; `None` (skipped loudly) only outside CI.
struct Env {
    python: PathBuf,
    npm: PathBuf,
    home: tempfile::TempDir,
    policy: PathBuf,
    tokens: PathBuf,
}

fn env() -> Option<Env> {
    require("root", stockade_testkit::root(), "run the tests as root")?;
    require(
        "stockade-agent",
        agent(),
        "cargo build -p stockade-agent (the native provider starts it)",
    )?;
    let python = require("the Python MCP client", venv_python(), FIX)?;
    let npm = require("the TypeScript MCP SDK", npm_dir(), FIX)?;
    let home = tempfile::Builder::new()
        .prefix("stockade-mcp-it-")
        .tempdir()
        .unwrap();
    let policy = home.path().join("policy.toml");
    std::fs::write(
        &policy,
        r#"
# The approval rules the clients check; everything else is the strict default.
[approval]
default = "allow"
[[approval.rules]]
name = "no-curl"
target = "exec"
pattern = "\\bcurl\\b"
verdict = "deny"
[[approval.rules]]
name = "no-secrets"
target = "file_write"
pattern = "^/tmp/secrets/"
verdict = "deny"
"#,
    )
    .unwrap();
    let tokens = home.path().join("tokens");
    std::fs::write(&tokens, format!("{TOKEN_A}\n{TOKEN_B}\n")).unwrap();
    Some(Env {
        python,
        npm,
        home,
        policy,
        tokens,
    })
}

impl Env {
    fn server_args(&self) -> Vec<String> {
        vec![
            "--direct".into(),
            "--policy".into(),
            self.policy.display().to_string(),
        ]
    }

    fn envs(&self, c: &mut Command) {
        c.env("STOCKADE_HOME", self.home.path())
            .env("STOCKADE_PROVIDER", "native")
            .env("MCP_NPM", &self.npm)
            .env_remove("STOCKADE_HOST");
    }

    /// Starts the server on HTTP (port picked by the kernel); returns it and its URL.
    fn http_server(&self, tokens: bool) -> (Server, String) {
        let mut c = Command::new(server_bin());
        c.args(self.server_args())
            .args(["--http", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if tokens {
            c.arg("--token-file").arg(&self.tokens);
        }
        self.envs(&mut c);
        let mut child = c.spawn().unwrap();
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        err.read_line(&mut line).unwrap();
        let url = line
            .trim()
            .strip_prefix("stockade mcp: listening on ")
            .unwrap_or_else(|| panic!("server did not start: {line}"))
            .to_string();
        // Keep draining stderr so the server never blocks on it.
        std::thread::spawn(move || {
            let mut rest = String::new();
            let _ = err.read_to_string(&mut rest);
            eprint!("{rest}");
        });
        (Server(child), url)
    }

    /// Runs the Python client; returns its `RESULT` lines. Fails the test when the
    /// client fails.
    fn py(&self, scenario: &str, transport: &[String]) -> Vec<serde_json::Value> {
        let mut c = Command::new(&self.python);
        c.arg(clients_dir().join("py_client.py"))
            .arg(scenario)
            .args(transport);
        self.envs(&mut c);
        run_client(c, scenario)
    }

    fn ts(&self, scenario: &str, transport: &[String]) -> Vec<serde_json::Value> {
        let mut c = Command::new("node");
        c.arg(clients_dir().join("ts_client.mjs"))
            .arg(scenario)
            .args(transport);
        self.envs(&mut c);
        run_client(c, scenario)
    }

    fn stdio(&self) -> Vec<String> {
        let mut v = vec!["--stdio".to_string(), server_bin().to_string()];
        v.extend(self.server_args());
        v
    }

    /// Deletes the sessions named `name` the clients made, of every tenant of the
    /// server's daemon (`HOME/tenants/TENANT/sessions/NAME`; their sandboxes are not
    /// the server's to end); returns how many there were.
    fn delete_session(&self, name: &str) -> usize {
        let tenants = self.home.path().join("tenants");
        let homes: Vec<std::path::PathBuf> = std::fs::read_dir(&tenants)
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        let mut n = 0;
        for home in homes {
            if home.join("sessions").join(name).is_dir() {
                self.delete_one_session(&home, name);
                n += 1;
            }
        }
        n
    }

    fn delete_one_session(&self, home: &Path, name: &str) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let p = stockade::provider(Some("native")).unwrap();
            let m = stockade::SessionConfig::new(home);
            stockade::SessionManager::new(p, m)
                .delete(name)
                .await
                .unwrap();
        });
    }
}

fn run_client(mut c: Command, scenario: &str) -> Vec<serde_json::Value> {
    let out = c.stderr(Stdio::inherit()).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    print!("{stdout}");
    assert!(
        out.status.success(),
        "client scenario {scenario} failed ({}); its output is above",
        out.status
    );
    assert!(stdout.contains(&format!("{scenario} ok")), "{stdout}");
    results(&stdout)
}

fn results(stdout: &str) -> Vec<serde_json::Value> {
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix("RESULT "))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn result<'a>(rs: &'a [serde_json::Value], kind: &str) -> &'a serde_json::Value {
    &rs.iter()
        .find(|r| r["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} result in {rs:?}"))["value"]
}

/// A server process, killed when dropped.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Whether anything of native sandbox `id` is left: its state dir or its cgroups.
fn traces(id: &str) -> Vec<String> {
    let mut left = Vec::new();
    let root = std::env::var_os("STOCKADE_STATE_DIR").unwrap_or_else(|| "/run/stockade".into());
    let state = Path::new(&root).join(id);
    if state.exists() {
        left.push(state.display().to_string());
    }
    if let Ok(out) = Command::new("find")
        .args(["/sys/fs/cgroup", "-maxdepth", "3", "-name", id])
        .output()
    {
        left.extend(
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(str::to_string),
        );
    }
    left
}

/// Waits until nothing of `id` is left; fails naming what stayed. The monitor tears
/// down when its owner dies; the wait only bounds a hang, it measures nothing.
fn assert_gone(id: &str) {
    let end = Instant::now() + Duration::from_secs(60);
    loop {
        let left = traces(id);
        if left.is_empty() {
            return;
        }
        assert!(Instant::now() < end, "sandbox {id} leaked: {left:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn lock() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[test]
fn python_client_over_stdio_calls_every_tool() {
    let _l = lock();
    let Some(e) = env() else { return };
    // `auto`: the SDK's default, which probes server/discover and falls back to
    // initialize (the server speaks the revisions with sessions).
    let mut transport = vec!["--mode".to_string(), "auto".to_string()];
    transport.extend(e.stdio());
    let rs = e.py("all", &transport);
    // The client disconnected: the sandbox it left alive was destroyed.
    assert_gone(result(&rs, "left").as_str().unwrap());
    assert_eq!(
        e.delete_session(result(&rs, "session").as_str().unwrap()),
        1
    );
}

#[test]
fn python_client_over_http_calls_every_tool() {
    let _l = lock();
    let Some(e) = env() else { return };
    let (_server, url) = e.http_server(true);
    let rs = e.py(
        "all",
        &["--http".into(), url, "--token".into(), TOKEN_A.into()],
    );
    // The client ended its MCP session (DELETE): its sandbox went with it.
    assert_gone(result(&rs, "left").as_str().unwrap());
    assert_eq!(
        e.delete_session(result(&rs, "session").as_str().unwrap()),
        1
    );
}

#[test]
fn typescript_client_over_stdio_calls_every_tool() {
    let _l = lock();
    let Some(e) = env() else { return };
    let rs = e.ts("all", &e.stdio());
    assert_eq!(
        e.delete_session(result(&rs, "session").as_str().unwrap()),
        1
    );
}

#[test]
fn typescript_client_over_http_calls_every_tool() {
    let _l = lock();
    let Some(e) = env() else { return };
    let (_server, url) = e.http_server(true);
    let rs = e.ts(
        "all",
        &["--http".into(), url, "--token".into(), TOKEN_B.into()],
    );
    assert_eq!(
        e.delete_session(result(&rs, "session").as_str().unwrap()),
        1
    );
}

#[test]
fn long_exec_reports_progress_and_cancel_kills_it_python_stdio() {
    let _l = lock();
    let Some(e) = env() else { return };
    let rs = e.py("progress-cancel", &e.stdio());
    assert!(result(&rs, "progress_messages").as_u64().unwrap() >= 1);
}

#[test]
fn long_exec_reports_progress_and_cancel_kills_it_python_http() {
    let _l = lock();
    let Some(e) = env() else { return };
    let (_server, url) = e.http_server(false);
    e.py("progress-cancel", &["--http".into(), url]);
}

#[test]
fn long_exec_reports_progress_and_cancel_kills_it_typescript() {
    let _l = lock();
    let Some(e) = env() else { return };
    e.ts("progress-cancel", &e.stdio());
    let (_server, url) = e.http_server(false);
    e.ts("progress-cancel", &["--http".into(), url]);
}

#[test]
fn clients_with_different_tokens_do_not_see_each_others_sandboxes() {
    let _l = lock();
    let Some(e) = env() else { return };
    let (_server, url) = e.http_server(true);
    let rs = e.py(
        "tenants",
        &[
            "--http".into(),
            url,
            "--token".into(),
            format!("{TOKEN_A},{TOKEN_B}"),
        ],
    );
    // Each tenant got its own workspace of that name.
    let name = result(&rs, "sessions")[0].as_str().unwrap();
    assert_eq!(e.delete_session(name), 2);
}

#[test]
fn one_tokens_sessions_share_its_sandbox_quota() {
    let _l = lock();
    let Some(e) = env() else { return };
    let (_server, url) = e.http_server(true);
    let rs = e.py(
        "quota",
        &["--http".into(), url, "--token".into(), TOKEN_A.to_string()],
    );
    assert_eq!(result(&rs, "quota")[0], 8);
}

// Issue 36: the MCP door's quota is the daemon's. A burst of one token's creates
// once all passed the server's own count, taken before any of them ended.
#[test]
fn a_burst_of_creates_gets_the_tokens_quota_and_no_more() {
    let _l = lock();
    let Some(e) = env() else { return };
    let (_server, url) = e.http_server(true);
    let rs = e.py(
        "race",
        &["--http".into(), url, "--token".into(), TOKEN_A.to_string()],
    );
    assert_eq!(result(&rs, "race"), &serde_json::json!([8, 8]));
}

#[test]
fn http_answers_bad_json_and_session_ends_as_the_spec_says() {
    let _l = lock();
    let Some(e) = env() else { return };
    let (_server, url) = e.http_server(false);
    let rs = e.py("transport", &["--http".into(), url]);
    assert_eq!(result(&rs, "transport")[0], "ok");
}

#[test]
fn http_refuses_missing_and_wrong_tokens_and_open_addresses_without_tokens() {
    let _l = lock();
    let Some(e) = env() else { return };
    let (_server, url) = e.http_server(true);
    let addr = url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_string();
    for auth in ["", "Authorization: Bearer not-a-token-0123456789\r\n"] {
        let mut s = std::net::TcpStream::connect(&addr).unwrap();
        let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
        write!(
            s,
            "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\n{auth}Content-Length: {}\r\n\
             Connection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut reply = String::new();
        s.read_to_string(&mut reply).unwrap();
        assert!(reply.starts_with("HTTP/1.1 401"), "{auth:?}: {reply}");
        assert!(!reply.contains("tools"), "{reply}");
    }
    // Off loopback, a token file is required.
    let mut c = Command::new(server_bin());
    c.args(e.server_args()).args(["--http", "0.0.0.0:0"]);
    e.envs(&mut c);
    let out = c.output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("not a loopback address") && err.contains("--token-file"),
        "{err}"
    );
}

#[test]
fn sigkill_of_the_server_leaves_no_sandbox_behind() {
    let _l = lock();
    let Some(e) = env() else { return };
    let (mut server, url) = e.http_server(false);
    let mut c = Command::new(&e.python);
    c.arg(clients_dir().join("py_client.py"))
        .args(["left", "--http", &url])
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    e.envs(&mut c);
    let mut client = c.spawn().unwrap();
    let mut out = BufReader::new(client.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let rs = results(&line);
    let ids: Vec<String> = result(&rs, "ids")
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids.len(), 2);
    for id in &ids {
        assert!(!traces(id).is_empty(), "sandbox {id} should be live");
    }
    // SIGKILL: no cleanup code of the server runs; the owner-death machinery must.
    server.0.kill().unwrap();
    server.0.wait().unwrap();
    let _ = client.kill();
    let _ = client.wait();
    for id in &ids {
        assert_gone(id);
    }
}

#[test]
fn the_attack_suite_fails_through_run_code() {
    let _l = lock();
    let Some(e) = env() else { return };
    let rs = e.py("attacks", &e.stdio());
    let names: Vec<&str> = rs
        .iter()
        .filter(|r| r["kind"] == "attack")
        .map(|r| r["value"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "network",
            "write-outside",
            "host-secrets",
            "fork-bomb",
            "memory",
            "timeout",
            "output-flood"
        ]
    );
}

/// A daemon of this test's own (unix socket and state in the test's home), run on a
/// thread; stopped and emptied when dropped.
struct Daemon {
    socket: PathBuf,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Daemon {
    fn start(home: &Path) -> Daemon {
        let socket = home.join("stockaded.sock");
        let args = stockade_server::ServeArgs {
            listen: vec![stockade_client::Address::Unix(socket.clone())],
            socket_group: None,
            token_file: None,
            tls_cert: None,
            tls_key: None,
            insecure_plaintext: false,
            metrics_listen: None,
            state_dir: Some(home.join("daemon-state")),
            id_range: None,
            default_provider: Some("native".into()),
            max_sandboxes_per_tenant: 64,
            max_pool_per_tenant: 64,
            max_sandboxes: 512,
            pool_idle_ttl_secs: 600,
            native_state_dir: None,
            allow_mounts: Vec::new(),
            profiles: None,
            max_connections: 256,
            max_streams_per_connection: 64,
            e2b_listen: None,
            e2b_domain: None,
            e2b_tls_cert: None,
            e2b_tls_key: None,
            tenant_image_bytes: 8 << 30,
        };
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Runtime::new().unwrap();
            rt.block_on(stockade_server::serve(args, async move {
                let _ = rx.await;
            }))
            .unwrap();
        });
        let end = Instant::now() + Duration::from_secs(60);
        while !socket.exists() {
            assert!(Instant::now() < end, "the daemon did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        Daemon {
            socket,
            stop: Some(tx),
            thread: Some(thread),
        }
    }

    fn host(&self) -> String {
        format!("unix://{}", self.socket.display())
    }

    /// Deletes the daemon's sessions and returns the ids of sandboxes it still holds.
    fn cleanup(&self) -> Vec<String> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let r = stockade_client::RemoteProvider::connect(
                &stockade_client::Host::Unix(self.socket.clone()),
                None,
            )
            .await
            .unwrap();
            for s in r.session_list().await.unwrap() {
                r.session_delete(&s.name).await.unwrap();
            }
            let left: Vec<String> = stockade::Provider::list(&r)
                .await
                .unwrap()
                .into_iter()
                .map(|i| i.id)
                .collect();
            for id in &left {
                let _ = stockade::Provider::destroy(&r, id).await;
            }
            left
        })
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[test]
fn works_through_a_daemon_named_by_stockade_host() {
    let _l = lock();
    let Some(e) = env() else { return };
    let daemon = Daemon::start(e.home.path());
    // Not --direct: STOCKADE_HOST names the daemon.
    let transport = vec![
        "--stdio".to_string(),
        server_bin().to_string(),
        "--policy".into(),
        e.policy.display().to_string(),
    ];
    let mut c = Command::new(&e.python);
    c.arg(clients_dir().join("py_client.py"))
        .arg("all")
        .args(&transport);
    e.envs(&mut c);
    c.env("STOCKADE_HOST", daemon.host());
    let rs = run_client(c, "all");
    let left = result(&rs, "left").as_str().unwrap().to_string();
    // The sandboxes were the daemon's: the MCP server's exit destroyed its own.
    let held = daemon.cleanup();
    assert!(
        !held.contains(&left),
        "{left} outlived its client: {held:?}"
    );
    assert_gone(&left);
}
