//! The engine, the linker, and one exec: a fresh instance of the sandbox's module
//! running `_start` under the sandbox's caps, with its output captured.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use stockade_core::{Error, ExecOutcome, ExecRequest, OutputSender, Result, Stream};
use tokio::sync::mpsc;
use wasmtime::{
    AsContextMut, Caller, Config, Engine, Extern, InstancePre, Linker, Module, OptLevel, Store,
    Trap, UpdateDeadline,
};
use wasmtime_wasi::p1::wasi_snapshot_preview1::{self, WasiSnapshotPreview1 as _};
use wasmtime_wasi::p1::{self, WasiP1Ctx};
use wasmtime_wasi::p2::pipe::MemoryInputPipe;
use wasmtime_wasi::{FsPerms, I32Exit, WasiCtxBuilder};

use crate::WasmConfig;
use crate::output::Capture;
use crate::quota::{Limiter, TmpQuota};
use crate::sandbox::SandboxEntry;

const P1: &str = "wasi_snapshot_preview1";

/// WASI errno `nospc`: no space left on device.
const ERRNO_NOSPC: i32 = wasmtime_wasi::p1::types::Errno::Nospc as i32;
/// WASI errno `noent`: no such file or directory.
const ERRNO_NOENT: i32 = wasmtime_wasi::p1::types::Errno::Noent as i32;
/// WASI `oflags` bits of `path_open`.
const OFLAGS_CREAT: i32 = 1;
const OFLAGS_EXCL: i32 = 4;

/// What a store holds for one exec.
pub(crate) struct ExecState {
    wasi: WasiP1Ctx,
    limiter: Limiter,
    quota: Arc<TmpQuota>,
    deadline: Instant,
    dead: Arc<AtomicBool>,
}

/// The engine of a provider: async (so that a deadline can drop a running exec),
/// epoch interruption (so that running code notices it), fuel when configured.
pub(crate) fn engine(config: &WasmConfig) -> Result<Engine> {
    let mut c = Config::new();
    c.epoch_interruption(true)
        .consume_fuel(config.fuel_per_exec.is_some())
        .cranelift_opt_level(OptLevel::Speed)
        .parallel_compilation(true);
    Engine::new(&c).map_err(|e| Error::Internal(format!("cannot create the wasm engine: {e:#}")))
}

/// Counts epochs so that running code checks its deadline every `tick`. Stops when
/// `alive` (held by the provider) is dropped.
pub(crate) fn start_ticker(engine: Engine, tick: Duration, alive: std::sync::Weak<()>) {
    let spawned = std::thread::Builder::new()
        .name("stockade-wasm-epoch".into())
        .spawn(move || {
            while alive.strong_count() > 0 {
                std::thread::sleep(tick);
                engine.increment_epoch();
            }
        });
    // Without the ticker, host-side deadlines still end execs (see `run`).
    drop(spawned);
}

/// The linker: WASI preview 1, with the quota shims in front of the calls that take
/// disk space. No other import is offered, so a module asking for anything else
/// (sockets of other ABIs, threads) fails to link at create.
pub(crate) fn linker(engine: &Engine) -> Result<Linker<ExecState>> {
    let link_err = |e: wasmtime::Error| Error::Internal(format!("cannot link WASI: {e:#}"));
    let mut linker: Linker<ExecState> = Linker::new(engine);
    p1::add_to_linker_async(&mut linker, |s: &mut ExecState| &mut s.wasi).map_err(link_err)?;
    linker.allow_shadowing(true);
    add_quota_shims(&mut linker).map_err(link_err)?;
    Ok(linker)
}

/// Links `module` once; every exec instantiates from the result.
pub(crate) fn prelink(
    linker: &Linker<ExecState>,
    module: &Module,
    source: &Path,
) -> Result<InstancePre<ExecState>> {
    let has_start = module
        .exports()
        .any(|e| e.name() == "_start" && e.ty().func().is_some());
    if !has_start {
        return Err(Error::InvalidRequest(format!(
            "module {} has no _start function; it is not a WASI command",
            source.display()
        )));
    }
    linker.instantiate_pre(module).map_err(|e| {
        Error::InvalidRequest(format!(
            "module {} needs imports the wasm sandbox does not give: {e:#}",
            source.display()
        ))
    })
}

/// Sum of the lengths of `count` iovecs at `ptr` in the guest's memory (0 when they
/// cannot be read; the real call then fails on its own).
fn iovec_bytes(caller: &mut Caller<'_, ExecState>, ptr: i32, count: i32) -> u64 {
    let Some(mem) = caller
        .get_export("memory")
        .and_then(wasmtime::Extern::into_memory)
    else {
        return 0;
    };
    let data = mem.data(&caller);
    let start = ptr as u32 as usize;
    let Some(len) = (count as u32 as usize).checked_mul(8) else {
        return 0;
    };
    let Some(iovs) = start.checked_add(len).and_then(|end| data.get(start..end)) else {
        return 0;
    };
    iovs.chunks_exact(8)
        .map(|iov| u32::from_le_bytes([iov[4], iov[5], iov[6], iov[7]]) as u64)
        .sum()
}

/// Runs wasmtime-wasi's own implementation of the WASI function `$name`, called the
/// way its generated linker code calls it (memory view, hostcall fuel).
macro_rules! call_wasi {
    ($caller:ident, $name:ident, $($arg:expr),*) => {{
        let fuel = $caller.as_context_mut().hostcall_fuel();
        let Some(Extern::Memory(memory)) = $caller.get_export("memory") else {
            wasmtime::bail!("missing required memory export");
        };
        let (bytes, state) = memory.data_and_store_mut(&mut $caller);
        let ctx = &mut state.wasi;
        ctx.set_hostcall_fuel(fuel);
        let mut guest = wiggle::GuestMemory::Unshared(bytes);
        let errno: i32 = wasi_snapshot_preview1::$name(ctx, &mut guest, $($arg),*).await?;
        errno
    }};
}

/// Defines the WASI function `$name` as: charge `$cost` (bytes, entries) to the
/// `/tmp` quota, then run wasmtime-wasi's implementation. When the quota refuses, the
/// call fails with `ENOSPC`, or returns what `refused` says.
macro_rules! shim {
    ($linker:expr, $name:ident, ($($arg:ident: $ty:ty),*), |$caller:ident| $cost:expr $(, refused => $refused:expr)?) => {
        $linker.func_wrap_async(
            P1,
            stringify!($name),
            |mut $caller: Caller<'_, ExecState>, ($($arg,)*): ($($ty,)*)| {
                Box::new(async move {
                    let (bytes, entries): (u64, u64) = $cost;
                    if (bytes > 0 || entries > 0) && !$caller.data().quota.reserve(bytes, entries) {
                        $(return $refused;)?
                        #[allow(unreachable_code)]
                        return Ok(ERRNO_NOSPC);
                    }
                    Ok(call_wasi!($caller, $name, $($arg),*))
                })
            },
        )?;
    };
}

/// Puts the `/tmp` quota in front of every WASI call that can take disk space or add
/// an entry. Each charges an upper bound of what it may add (writes: their bytes
/// rounded up to blocks; new entries: one block and one entry); when the bound would
/// pass a cap the quota measures the directory, and refuses with `ENOSPC` only if it
/// is really full.
/// Writes to other places (stdout, writable mounts) are charged too, which costs a
/// measurement now and then but never refuses them wrongly. These definitions
/// replace wasmtime-wasi's and call its implementation, pinned to 48.0.2.
fn add_quota_shims(linker: &mut Linker<ExecState>) -> wasmtime::Result<()> {
    shim!(linker, fd_write, (fd: i32, iovs: i32, n: i32, nwritten: i32), |caller| {
        (TmpQuota::write_cost(iovec_bytes(&mut caller, iovs, n)), 0)
    });
    shim!(
        linker,
        fd_pwrite,
        (fd: i32, iovs: i32, n: i32, offset: i64, nwritten: i32),
        |caller| (TmpQuota::write_cost(iovec_bytes(&mut caller, iovs, n)), 0)
    );
    shim!(
        linker,
        path_open,
        (
            dirfd: i32,
            dirflags: i32,
            path: i32,
            path_len: i32,
            oflags: i32,
            base: i64,
            inheriting: i64,
            fdflags: i32,
            fd_out: i32
        ),
        |caller| {
            // Only `O_CREAT` adds an entry.
            if oflags & OFLAGS_CREAT != 0 {
                (TmpQuota::entry_cost(), 1)
            } else {
                (0, 0)
            }
        },
        refused => {
            // At the cap, opening a file that exists with `O_CREAT` (but not
            // `O_EXCL`) adds nothing: it is opened as it is; only a new one is refused.
            if oflags & OFLAGS_EXCL != 0 {
                Ok(ERRNO_NOSPC)
            } else {
                let errno = call_wasi!(
                    caller, path_open, dirfd, dirflags, path, path_len,
                    oflags & !OFLAGS_CREAT, base, inheriting, fdflags, fd_out
                );
                Ok(if errno == ERRNO_NOENT { ERRNO_NOSPC } else { errno })
            }
        }
    );
    shim!(linker, path_create_directory, (fd: i32, path: i32, path_len: i32), |caller| {
        (TmpQuota::entry_cost(), 1)
    });
    shim!(
        linker,
        path_symlink,
        (old: i32, old_len: i32, fd: i32, new: i32, new_len: i32),
        |caller| (TmpQuota::entry_cost(), 1)
    );
    shim!(
        linker,
        path_link,
        (
            old_fd: i32,
            old_flags: i32,
            old: i32,
            old_len: i32,
            new_fd: i32,
            new: i32,
            new_len: i32
        ),
        |caller| (TmpQuota::entry_cost(), 1)
    );
    Ok(())
}

/// How an exec ended, before it becomes an [`ExecOutcome`].
enum Ended {
    Returned(std::result::Result<(), Failure>),
    Deadline,
    Destroyed,
}

/// Why the guest did not return normally.
enum Failure {
    /// Making the instance failed (memory, or a bug of ours).
    Instantiate(wasmtime::Error),
    /// `_start` ended with an exit, a trap, or an error a WASI call raised.
    Run(wasmtime::Error),
}

/// POSIX signal a native process would have died of for this trap: what callers of
/// every provider already understand (`exit_code` 128 + signal).
fn trap_signal(trap: &Trap) -> i32 {
    const SIGABRT: i32 = 6;
    const SIGFPE: i32 = 8;
    const SIGSEGV: i32 = 11;
    match trap {
        Trap::IntegerDivisionByZero | Trap::IntegerOverflow | Trap::BadConversionToInteger => {
            SIGFPE
        }
        Trap::MemoryOutOfBounds
        | Trap::HeapMisaligned
        | Trap::TableOutOfBounds
        | Trap::IndirectCallToNull
        | Trap::BadSignature
        | Trap::StackOverflow => SIGSEGV,
        _ => SIGABRT,
    }
}

const SIGKILL: i32 = 9;

/// Runs one exec in `sb`.
pub(crate) async fn run(
    engine: &Engine,
    config: &WasmConfig,
    sb: &Arc<SandboxEntry>,
    req: ExecRequest,
    output: Option<OutputSender>,
) -> Result<ExecOutcome> {
    let id = &sb.info.id;
    let _slot = sb
        .exec_slots
        .clone()
        .try_acquire_owned()
        .map_err(|_| Error::LimitExceeded {
            what: format!("concurrent execs in sandbox {id}"),
            limit: sb.spec.limits.pids.to_string(),
        })?;
    let started = Instant::now();
    let mut deadline = sb.expires_at;
    if let Some(ms) = req.timeout_ms {
        deadline = deadline.min(started + Duration::from_millis(ms));
    }
    if deadline <= started {
        return Err(Error::Timeout {
            operation: format!("sandbox {id}"),
            after_ms: 0,
        });
    }

    let (live_tx, live_rx) = match &output {
        Some(_) => {
            let (tx, rx) = mpsc::unbounded_channel();
            (Some(tx), Some(rx))
        }
        None => (None, None),
    };
    let forwarder = match (live_rx, output) {
        (Some(rx), Some(to)) => Some(tokio::spawn(crate::output::forward(rx, to))),
        _ => None,
    };
    let stdout = Capture::new(Stream::Stdout, req.output_limit_bytes, live_tx.clone());
    let stderr = Capture::new(Stream::Stderr, req.output_limit_bytes, live_tx);

    let mut env = sb.spec.base_env();
    env.extend(req.env.clone());
    let mut b = WasiCtxBuilder::new();
    b.args(&req.argv)
        .stdin(MemoryInputPipe::new(req.stdin.clone()))
        .stdout(stdout.clone())
        .stderr(stderr.clone())
        // Off: with it on, a guest's sleep blocks the thread where no deadline can
        // end it; file I/O then runs on tokio's blocking pool instead.
        .allow_blocking_current_thread(false)
        .initial_cwd(req.cwd.as_deref().unwrap_or(&sb.workdir));
    for (k, v) in &env {
        b.env(k, v);
    }
    let perms = |writable: bool| {
        if writable {
            FsPerms::ReadWrite
        } else {
            FsPerms::ReadOnly
        }
    };
    for p in &sb.preopens {
        b.preopened_dir(&p.host, &p.guest, perms(p.writable))
            .map_err(|e| {
                Error::Internal(format!(
                    "cannot open {} for {} in sandbox {id}: {e:#}",
                    p.host.display(),
                    p.guest
                ))
            })?;
    }
    // WASI preview 1 has no working directory: wasi-libc starts every program in
    // `/` and resolves a path by the longest matching preopen name. A preopen named
    // `.` matches what nothing else does, relative paths included, so it makes the
    // working directory where relative paths land (`getcwd` still says `/`).
    let cwd = req.cwd.as_deref().unwrap_or(&sb.workdir);
    let (cwd_host, cwd_writable, _cwd_handle) = crate::fs::open_cwd(sb, cwd)?;
    b.preopened_dir(&cwd_host, ".", perms(cwd_writable))
        .map_err(|e| Error::Internal(format!("cannot open working directory {cwd}: {e:#}")))?;
    let refused = Arc::new(AtomicBool::new(false));
    let mut store = Store::new(
        engine,
        ExecState {
            wasi: b.build_p1(),
            limiter: Limiter::new(sb.memory.clone(), refused.clone()),
            quota: sb.quota.clone(),
            deadline,
            dead: sb.dead_flag.clone(),
        },
    );
    store.limiter(|s| &mut s.limiter);
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(|ctx| {
        let s = ctx.data();
        if Instant::now() >= s.deadline || s.dead.load(Ordering::Acquire) {
            Ok(UpdateDeadline::Interrupt)
        } else {
            Ok(UpdateDeadline::Yield(1))
        }
    });
    if let Some(fuel) = config.fuel_per_exec {
        store
            .set_fuel(fuel)
            .map_err(|e| Error::Internal(format!("cannot set fuel: {e:#}")))?;
    }

    let pre = sb.module.pre.clone();
    let guest = async move {
        let instance = pre
            .instantiate_async(&mut store)
            .await
            .map_err(Failure::Instantiate)?;
        let start = instance
            .get_typed_func::<(), ()>(&mut store, "_start")
            .map_err(Failure::Instantiate)?;
        start.call_async(&mut store, ()).await.map_err(Failure::Run)
    };
    let mut dead = sb.dead.subscribe();
    let ended = tokio::select! {
        r = guest => Ended::Returned(r),
        _ = tokio::time::sleep_until(tokio::time::Instant::from_std(deadline)) => Ended::Deadline,
        _ = dead.wait_for(|d| *d) => Ended::Destroyed,
    };

    // A destroy at the end of the lifetime is a timeout too.
    let past_deadline = Instant::now() >= deadline;
    let mut outcome = ExecOutcome::default();
    let killed = |o: &mut ExecOutcome| {
        o.exit_code = 128 + SIGKILL;
        o.signal = Some(SIGKILL);
    };
    match ended {
        Ended::Returned(Ok(())) => outcome.exit_code = 0,
        Ended::Deadline => {
            killed(&mut outcome);
            outcome.timed_out = true;
        }
        Ended::Destroyed => {
            killed(&mut outcome);
            outcome.timed_out = past_deadline;
        }
        Ended::Returned(Err(Failure::Run(e))) => {
            if let Some(exit) = e.downcast_ref::<I32Exit>() {
                outcome.exit_code = exit.0;
            } else if let Some(trap) = e.downcast_ref::<Trap>() {
                match trap {
                    Trap::Interrupt => {
                        killed(&mut outcome);
                        outcome.timed_out = past_deadline;
                    }
                    Trap::OutOfFuel => {
                        killed(&mut outcome);
                        outcome.timed_out = true;
                        stderr.push(b"\nstockade: the exec used up its fuel\n");
                    }
                    other => {
                        let sig = trap_signal(other);
                        outcome.exit_code = 128 + sig;
                        outcome.signal = Some(sig);
                        stderr.push(format!("\nstockade: wasm trap: {other}\n").as_bytes());
                    }
                }
            } else {
                // A WASI call refused the guest fatally (an exit status WASI does not
                // allow, a bad argument): the guest aborted.
                outcome.exit_code = 128 + 6;
                outcome.signal = Some(6);
                stderr.push(format!("\nstockade: wasm exec aborted: {e:#}\n").as_bytes());
            }
        }
        Ended::Returned(Err(Failure::Instantiate(e))) => {
            if refused.load(Ordering::Acquire) {
                // The module needs more memory than the sandbox has left.
                killed(&mut outcome);
                stderr.push(format!("\nstockade: {e:#}\n").as_bytes());
            } else {
                return Err(Error::Internal(format!(
                    "cannot instantiate the module of sandbox {id}: {e:#}"
                )));
            }
        }
    }
    outcome.oom_killed =
        refused.load(Ordering::Acquire) && outcome.exit_code != 0 && !outcome.timed_out;
    outcome.duration_ms = started.elapsed().as_millis() as u64;
    (outcome.stdout, outcome.stdout_dropped) = stdout.finish();
    (outcome.stderr, outcome.stderr_dropped) = stderr.finish();
    drop((stdout, stderr));
    if let Some(f) = forwarder {
        let _ = f.await;
    }
    Ok(outcome)
}
