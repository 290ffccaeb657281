//! The runner's work: one sandbox of the engine, served over the agent protocol on a
//! unix socket in the sandbox's private directory (see `stockade_wasm_host::runner`
//! for how a host starts a runner and what it sends).

use std::io::{BufRead, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use stockade_agent_proto::codec::asynch::{read_msg, write_msg};
use stockade_agent_proto::{AgentMsg, ClientMsg, ErrorCode, PROTOCOL_VERSION};
use stockade_core::{
    CheckedRequest, CheckedSpec, CreateOptions, Error, ExecInput, ExecIo, Provider, Result,
};
use stockade_wasm_host::runner::{Launch, Ready};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;

use crate::WasmProvider;

/// Reads the launch from stdin, makes the sandbox, answers on stdout and serves it
/// until it ends or stdin closes. Returns the process's exit code.
pub fn main() -> i32 {
    let mut line = String::new();
    let stdin = std::io::stdin();
    let mut lock = stdin.lock();
    if let Err(e) = lock.read_line(&mut line) {
        eprintln!("stockade-wasm-runner: cannot read the launch on stdin: {e}");
        return 70;
    }
    drop(lock);
    let launch: Launch = match serde_json::from_str(&line) {
        Ok(l) => l,
        Err(e) => {
            eprintln!(
                "stockade-wasm-runner: stdin did not start with a launch ({e}); this program is \
                 started by the wasm provider, not by hand"
            );
            return 64;
        }
    };
    // Before any thread starts, so that every later one inherits it.
    let confined = match confine(&launch) {
        Ok(c) => c,
        Err(e) => {
            answer(&Ready::Err {
                code: ErrorCode::Unavailable,
                message: format!(
                    "the wasm runner cannot confine itself: {e}; it needs landlock (kernel 5.13 \
                     or later, enabled in the lsm= boot parameter) and seccomp"
                ),
            });
            return 0;
        }
    };
    // One worker thread per CPU the sandbox may use: each exec runs on one thread at
    // a time, so this is what `limits.cpus` buys.
    let host = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let workers = (launch.spec.limits.cpus.ceil() as usize).clamp(1, host);
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            answer(&Ready::Err {
                code: ErrorCode::Internal,
                message: format!("the wasm runner cannot start its runtime: {e}"),
            });
            return 70;
        }
    };
    rt.block_on(serve(launch, confined))
}

/// Confines this process, the wall behind wasmtime's own: no capabilities, no new
/// privileges, writes only below the sandbox's own directory, the artifact cache and
/// the spec's writable mounts (landlock), and the seccomp allowlist of every sandbox
/// (no ptrace, no namespaces, no io_uring, bpf or keyctl, sockets of the usual
/// families only). Returns what it applied, for `SandboxInfo::applied`.
fn confine(launch: &Launch) -> std::result::Result<String, String> {
    let c = &launch.config;
    let own = c.scratch_dir.join(std::process::id().to_string());
    let mut writable = vec![own.clone(), c.cache_dir.clone()];
    if let Some(keys) = c.key_file.parent() {
        writable.push(keys.to_path_buf());
    }
    // Landlock names directories that exist.
    for dir in &writable {
        stockade_wasm_host::home::make_private_dir(dir).map_err(|e| e.to_string())?;
    }
    writable.extend(
        launch
            .spec
            .mounts
            .iter()
            .filter(|m| m.writable)
            .map(|m| m.host.clone()),
    );
    let writable: Vec<String> = writable
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if stockade_sys::caps::has_any() {
        stockade_sys::caps::drop_bounding().map_err(|e| e.to_string())?;
        stockade_sys::caps::clear_all().map_err(|e| e.to_string())?;
    }
    let landlock = stockade_sys::landlock::restrict_min(&writable, Some(1), true)
        .map_err(|e| e.to_string())?;
    stockade_sys::seccomp::build()
        .and_then(|f| f.apply())
        .map_err(|e| e.to_string())?;
    Ok(format!(
        "runner: a process of its own (pid {}), no capabilities, seccomp allowlist, {landlock} \
         (writes below its directory, the artifact cache and writable mounts only)",
        std::process::id()
    ))
}

fn answer(ready: &Ready) {
    let mut out = std::io::stdout().lock();
    let _ = serde_json::to_writer(&mut out, ready);
    let _ = out.write_all(b"\n");
    let _ = out.flush();
}

fn refused(e: &Error) -> Ready {
    Ready::Err {
        code: e.code(),
        message: e.to_string(),
    }
}

async fn serve(launch: Launch, confined: String) -> i32 {
    let provider = match WasmProvider::with_config(launch.config) {
        Ok(p) => p,
        Err(e) => {
            answer(&refused(&e));
            return 0;
        }
    };
    let made = async {
        let spec = launch.spec.validate()?;
        let spec = CheckedSpec::new(spec, &provider)?;
        let info = provider
            .create(
                spec,
                CreateOptions {
                    owner_pid: launch.owner_pid,
                },
            )
            .await?;
        let dir = provider
            .tmp_host_path(&info.id)?
            .parent()
            .map(Path::to_path_buf)
            .ok_or_else(|| Error::Internal("a sandbox directory without a parent".into()))?;
        let socket = dir.join("agent.sock");
        let listener = UnixListener::bind(&socket)
            .map_err(|e| Error::io(format!("cannot listen on {}", socket.display()), e))?;
        std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| Error::io(format!("cannot restrict {}", socket.display()), e))?;
        Ok::<_, Error>((info, socket, listener))
    };
    let (mut info, socket, listener) = match made.await {
        Ok(m) => m,
        Err(e) => {
            answer(&refused(&e));
            return 0;
        }
    };
    let id = info.id.clone();
    info.applied.push(stockade_core::Wall::on(
        stockade_core::WallKind::Isolation,
        confined,
    ));
    answer(&Ready::Ok {
        info: Box::new(info),
        socket,
    });

    // The host holds our stdin; when it closes (destroy, or the host died) the
    // sandbox ends.
    let (closed_tx, mut closed) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        let mut buf = [0u8; 512];
        let mut stdin = std::io::stdin();
        while matches!(stdin.read(&mut buf), Ok(n) if n > 0) {}
        let _ = closed_tx.send(());
    });

    let me = stockade_core::host::euid();
    loop {
        tokio::select! {
            _ = &mut closed => break,
            _ = provider.ended(&id) => break,
            conn = listener.accept() => {
                let Ok((stream, _)) = conn else { continue };
                // Only this uid (the host that started us) or root may drive the sandbox.
                match stream.peer_cred() {
                    Ok(c) if c.uid() == me || c.uid() == 0 => {}
                    _ => continue,
                }
                let (provider, id) = (provider.clone(), id.clone());
                tokio::spawn(async move {
                    let _ = connection(provider, id, stream).await;
                });
            }
        }
    }
    // The sandbox's files go with it; the (now empty) directory of this runner is
    // removed by the host that waits for it, or by gc (landlock lets this process
    // write only below it).
    let _ = provider.destroy(&id).await;
    0
}

/// A codec or socket failure: the connection is dropped.
type ConnResult = std::result::Result<(), String>;

async fn send(w: &mut (impl tokio::io::AsyncWrite + Unpin), msg: &AgentMsg) -> ConnResult {
    write_msg(w, msg).await.map_err(|e| e.to_string())
}

fn error_msg(e: &Error) -> AgentMsg {
    AgentMsg::Error {
        code: e.code(),
        message: e.to_string(),
    }
}

/// One agent-protocol connection: hello, then one request.
async fn connection(provider: WasmProvider, id: String, mut s: UnixStream) -> ConnResult {
    match read_msg::<_, ClientMsg>(&mut s)
        .await
        .map_err(|e| e.to_string())?
    {
        Some(ClientMsg::Hello { version }) if version == PROTOCOL_VERSION => {}
        Some(ClientMsg::Hello { version }) => {
            let message = format!(
                "protocol version {version} is not supported; this runner speaks {PROTOCOL_VERSION}"
            );
            return send(
                &mut s,
                &AgentMsg::Error {
                    code: ErrorCode::Unavailable,
                    message,
                },
            )
            .await;
        }
        _ => return Err("connection did not start with hello".into()),
    }
    send(
        &mut s,
        &AgentMsg::Hello {
            version: PROTOCOL_VERSION,
            agent_version: concat!("stockade-wasm-runner ", env!("CARGO_PKG_VERSION")).into(),
        },
    )
    .await?;
    match read_msg::<_, ClientMsg>(&mut s)
        .await
        .map_err(|e| e.to_string())?
    {
        None => Ok(()),
        Some(ClientMsg::Ping | ClientMsg::Warm) => send(&mut s, &AgentMsg::Pong).await,
        Some(ClientMsg::File(op)) => {
            let answer = match provider.file(&id, op).await {
                Ok(r) => AgentMsg::FileDone(r),
                Err(e) => error_msg(&e),
            };
            send(&mut s, &answer).await
        }
        Some(ClientMsg::FileAs { uid, op }) => {
            let p: &dyn stockade_core::Provider = &provider;
            let answer = match p.file_as(&id, uid, op).await {
                Ok(r) => AgentMsg::FileDone(r),
                Err(e) => error_msg(&e),
            };
            send(&mut s, &answer).await
        }
        Some(ClientMsg::Exec(req)) => exec(provider, id, s, req).await,
        Some(ClientMsg::ExecAs { uid, mut req }) => {
            req.uid = Some(uid);
            exec(provider, id, s, req).await
        }
        // The in-process provider's answer: a module has no sockets to connect to.
        Some(ClientMsg::Connect { port }) => {
            let e = provider
                .connect_port(&id, port)
                .await
                .err()
                .unwrap_or_else(|| Error::Internal("the wasm provider connected a port".into()));
            send(&mut s, &error_msg(&e)).await
        }
        Some(other) => {
            let e = Error::InvalidRequest(format!("{other:?} is not a request"));
            send(&mut s, &error_msg(&e)).await
        }
    }
}

/// Runs one exec: stdin and kill requests from the connection, output back on it as
/// it comes. A connection that closes kills the exec.
async fn exec(
    provider: WasmProvider,
    id: String,
    s: UnixStream,
    req: stockade_core::ExecRequest,
) -> ConnResult {
    let (mut r, mut w) = s.into_split();
    let stream = req.stream;
    let req = match CheckedRequest::new(req) {
        Ok(req) => req,
        Err(e) => return send(&mut w, &error_msg(&e)).await,
    };
    let (in_tx, in_rx) = mpsc::channel(16);
    // Reading a frame is not cancel-safe: the reader is a task of its own.
    let reader = tokio::spawn(async move {
        loop {
            let msg = match read_msg::<_, ClientMsg>(&mut r).await {
                Ok(Some(ClientMsg::Stdin(d))) => ExecInput::Stdin(d),
                Ok(Some(ClientMsg::CloseStdin)) => ExecInput::CloseStdin,
                Ok(Some(ClientMsg::Kill)) => ExecInput::Kill,
                Ok(Some(ClientMsg::Signal(n))) => ExecInput::Signal(n),
                Ok(Some(_)) => continue,
                // The host went away: kill the exec.
                Ok(None) | Err(_) => {
                    let _ = in_tx.send(ExecInput::Kill).await;
                    return;
                }
            };
            if in_tx.send(msg).await.is_err() {
                return;
            }
        }
    });
    let (out_tx, mut out_rx) = mpsc::channel(16);
    let io = ExecIo {
        output: stream.then_some(out_tx),
        input: Some(in_rx),
    };
    let run = provider.exec(&id, req, io);
    tokio::pin!(run);
    let done = loop {
        tokio::select! {
            done = &mut run => break done,
            Some(chunk) = out_rx.recv() => {
                send(&mut w, &AgentMsg::Output { stream: chunk.stream, data: chunk.data }).await?;
            }
        }
    };
    while let Ok(chunk) = out_rx.try_recv() {
        send(
            &mut w,
            &AgentMsg::Output {
                stream: chunk.stream,
                data: chunk.data,
            },
        )
        .await?;
    }
    reader.abort();
    let last = match done {
        Ok(outcome) => AgentMsg::Exited(outcome),
        Err(e) => error_msg(&e),
    };
    send(&mut w, &last).await
}

/// `precompile --home DIR MODULE` and `engine-key --home DIR`.
pub fn tool(cmd: &str, args: &[String]) -> Result<String> {
    let (home, rest) = match args {
        [flag, home, rest @ ..] if flag == "--home" => (Path::new(home), rest),
        _ => {
            return Err(Error::InvalidRequest(format!(
                "usage: stockade-wasm-runner {cmd} --home DIR{}",
                if cmd == "precompile" { " MODULE" } else { "" }
            )));
        }
    };
    let provider = WasmProvider::with_config(stockade_wasm_host::WasmConfig::in_home(home))?;
    match (cmd, rest) {
        ("engine-key", []) => Ok(provider.engine_key().to_string()),
        ("precompile", [module]) => {
            let how = provider.precompile(Path::new(module))?;
            Ok(format!("{how:?}"))
        }
        _ => Err(Error::InvalidRequest(format!(
            "unexpected arguments to {cmd}: {rest:?}"
        ))),
    }
}
