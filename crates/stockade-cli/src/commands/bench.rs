//! `stockade bench burst`: N clients doing real work against a daemon (or in-process)
//! for T seconds, and the latency percentiles and errors of what they did.
//!
//! Each client has its own connection to the daemon and loops until the time is up:
//! in `one-shot` mode it creates a sandbox, runs the command in it and destroys it
//! (what `stockade run` does); in `held` mode it creates one sandbox before the clock
//! starts and runs the command in it over and over. An operation counts as completed
//! only when every step of it succeeded and the command exited 0; anything else is an
//! error, counted and never retried in place (a failing client pauses
//! [`ERROR_PAUSE`] before its next operation, so a dead daemon is not spun on).

use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, Subcommand, ValueEnum};
use serde_json::{Value, json};
use stockade::{
    CheckedRequest, CreateOptions, Error, ExecIo, ExecRequest, Provider, Result, SandboxSpec,
};
use stockade_client::{Address, ConnectOptions, RemoteProvider};

use super::Ctx;
use crate::output;

/// How long a client waits after a failed operation before its next one.
const ERROR_PAUSE: Duration = Duration::from_millis(20);

/// How many distinct error messages the report keeps.
const ERROR_EXAMPLES: usize = 5;

/// How long `--warm` waits for the pool to fill.
const WARM_WAIT: Duration = Duration::from_secs(120);

#[derive(Subcommand, Debug)]
pub enum BenchCmd {
    /// N clients x T seconds of one-shot (create, exec, destroy) or held-sandbox
    /// execs; prints p50/p90/p99/p999 of each step and every error.
    Burst(BurstArgs),
}

/// What each client does in a loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// Create a sandbox, run the command, destroy it.
    OneShot,
    /// Run the command in a sandbox the client created before the clock started.
    Held,
    /// Create a sandbox and destroy it, no exec (creates per second).
    Create,
}

#[derive(Args, Debug)]
pub struct BurstArgs {
    /// Concurrent clients, each with its own connection.
    #[arg(long, short = 'c', default_value_t = 10)]
    pub clients: usize,
    /// How long the clients start new operations, in seconds.
    #[arg(long, short = 't', default_value_t = 10.0)]
    pub secs: f64,
    /// What each client does.
    #[arg(long, value_enum, default_value_t = Mode::OneShot)]
    pub mode: Mode,
    /// Warm a pool of this many sandboxes of the benchmark's spec first, and wait
    /// until it is full (a daemon only; 0: no pool is made).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub warm: u32,
    /// The daemon to use (unix:///path, http(s)://host:port), instead of
    /// $STOCKADE_HOST or the default socket.
    #[arg(long, value_name = "ADDR")]
    pub host: Option<String>,
    /// Hold this many more idle sandboxes for the whole run (created before the clock
    /// starts, 8 at a time; destroyed after): the clients' numbers at that density.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub idle: usize,
    /// Create cold sandboxes even where a pool of the spec has warm ones (a daemon).
    #[arg(long)]
    pub no_pool: bool,
    /// Lifetime of each sandbox, in seconds.
    #[arg(long, default_value_t = 300, value_name = "SECS")]
    pub timeout: u64,
    /// The command each operation runs (default: /bin/true).
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "COMMAND"
    )]
    pub command: Vec<String>,
}

/// Where the clients' sandboxes come from.
#[derive(Clone)]
enum Target {
    /// A daemon; each client gets a connection of its own. The flag is `--no-pool`.
    Daemon(Address, ConnectOptions, bool),
    /// In this process (`--direct`, or no daemon answers).
    Embedded(Arc<dyn Provider>),
}

/// One client's provider.
enum Client {
    Daemon(Box<RemoteProvider>, bool),
    Embedded(Arc<dyn Provider>),
}

impl Client {
    fn provider(&self) -> &dyn Provider {
        match self {
            Client::Daemon(r, _) => r.as_ref(),
            Client::Embedded(p) => p.as_ref(),
        }
    }

    /// Creates a sandbox owned by this process; returns its id and whether it came
    /// from a pool (always false in-process).
    async fn create(&self, spec: &SandboxSpec) -> Result<(String, bool)> {
        match self {
            Client::Daemon(r, no_pool) => {
                let (info, pooled) = r
                    .create_spec(spec, Some(std::process::id()), *no_pool)
                    .await?;
                Ok((info.id, pooled))
            }
            Client::Embedded(p) => {
                let checked = stockade::CheckedSpec::new(spec.clone().validate()?, p.as_ref())?;
                let opts = CreateOptions {
                    owner_pid: Some(std::process::id()),
                };
                Ok((p.create(checked, opts).await?.id, false))
            }
        }
    }

    async fn exec(&self, id: &str, req: &ExecRequest) -> Result<()> {
        let o = self
            .provider()
            .exec(id, CheckedRequest::new(req.clone())?, ExecIo::none())
            .await?;
        if o.exit_code != 0 {
            return Err(Error::Internal(format!(
                "the command exited {} (signal {:?}, timed out {}): {}",
                o.exit_code,
                o.signal,
                o.timed_out,
                String::from_utf8_lossy(&o.stderr).trim()
            )));
        }
        Ok(())
    }

    async fn destroy(&self, id: &str) -> Result<()> {
        self.provider().destroy(id).await
    }
}

impl Target {
    async fn client(&self) -> Result<Client> {
        Ok(match self {
            Target::Daemon(a, o, no_pool) => Client::Daemon(
                Box::new(RemoteProvider::connect_with(a, o).await?),
                *no_pool,
            ),
            Target::Embedded(p) => Client::Embedded(p.clone()),
        })
    }

    fn describe(&self) -> String {
        match self {
            Target::Daemon(a, _, _) => format!("the daemon at {a}"),
            Target::Embedded(p) => format!("in-process ({})", p.name()),
        }
    }
}

/// What one client did.
#[derive(Default)]
struct Tally {
    /// Whole operations: one-shot create+exec+destroy, or one held exec.
    total: Vec<Duration>,
    create: Vec<Duration>,
    exec: Vec<Duration>,
    destroy: Vec<Duration>,
    pooled: u64,
    errors: Vec<String>,
}

impl Tally {
    fn merge(&mut self, o: Tally) {
        self.total.extend(o.total);
        self.create.extend(o.create);
        self.exec.extend(o.exec);
        self.destroy.extend(o.destroy);
        self.pooled += o.pooled;
        self.errors.extend(o.errors);
    }
}

/// The nearest-rank percentile `p` (0..=1) of sorted samples, in ms.
fn pct_ms(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1].as_secs_f64() * 1000.0
}

/// Percentiles of `v` (sorted in place), as JSON.
fn summary(v: &mut [Duration]) -> Value {
    v.sort_unstable();
    json!({
        "n": v.len(),
        "p50_ms": pct_ms(v, 0.5),
        "p90_ms": pct_ms(v, 0.9),
        "p99_ms": pct_ms(v, 0.99),
        "p999_ms": pct_ms(v, 0.999),
        "max_ms": v.last().map_or(0.0, |d| d.as_secs_f64() * 1000.0),
    })
}

/// One client's loop until `end`.
async fn one_client(
    target: Target,
    mode: Mode,
    spec: Arc<SandboxSpec>,
    req: Arc<ExecRequest>,
    ready: Arc<tokio::sync::Barrier>,
    run_for: Duration,
) -> Tally {
    let mut t = Tally::default();
    let client = match target.client().await {
        Ok(c) => Some(c),
        Err(e) => {
            t.errors.push(format!("connect: {e}"));
            None
        }
    };
    let mut held = None;
    if let (Some(c), Mode::Held) = (&client, mode) {
        match c.create(&spec).await {
            Ok((id, pooled)) => {
                t.pooled += u64::from(pooled);
                held = Some(id);
            }
            Err(e) => t.errors.push(format!("create: {e}")),
        }
    }
    // Every client passes the barrier, also one that failed to get ready.
    ready.wait().await;
    let end = Instant::now() + run_for;
    let Some(client) = client else {
        return t;
    };
    if mode == Mode::Held && held.is_none() {
        return t;
    }
    while Instant::now() < end {
        let t0 = Instant::now();
        let failed = match &held {
            Some(id) => match client.exec(id, &req).await {
                Ok(()) => {
                    t.total.push(t0.elapsed());
                    false
                }
                Err(e) => {
                    t.errors.push(format!("exec: {e}"));
                    true
                }
            },
            None => {
                one_shot(
                    &client,
                    &spec,
                    (mode == Mode::OneShot).then_some(&*req),
                    &mut t,
                    t0,
                )
                .await
            }
        };
        if failed {
            tokio::time::sleep(ERROR_PAUSE).await;
        }
    }
    if let Some(id) = held
        && let Err(e) = client.destroy(&id).await
    {
        t.errors.push(format!("destroy: {e}"));
    }
    t
}

/// Create, exec (unless `req` is `None`), destroy; records each step and the whole.
/// Returns whether it failed.
async fn one_shot(
    client: &Client,
    spec: &SandboxSpec,
    req: Option<&ExecRequest>,
    t: &mut Tally,
    t0: Instant,
) -> bool {
    let (id, pooled) = match client.create(spec).await {
        Ok(v) => v,
        Err(e) => {
            t.errors.push(format!("create: {e}"));
            return true;
        }
    };
    t.pooled += u64::from(pooled);
    let t1 = Instant::now();
    t.create.push(t1 - t0);
    let ran = match req {
        Some(req) => client.exec(&id, req).await,
        None => Ok(()),
    };
    let t2 = Instant::now();
    let gone = client.destroy(&id).await;
    let t3 = Instant::now();
    match (ran, gone) {
        (Ok(()), Ok(())) => {
            if req.is_some() {
                t.exec.push(t2 - t1);
            }
            t.destroy.push(t3 - t2);
            t.total.push(t3 - t0);
            false
        }
        (Err(e), _) => {
            t.errors.push(format!("exec: {e}"));
            true
        }
        (Ok(()), Err(e)) => {
            t.errors.push(format!("destroy: {e}"));
            true
        }
    }
}

/// Sandboxes held idle through the run.
struct Idle {
    ids: Vec<String>,
    errors: Vec<String>,
}

/// How many idle sandboxes are created (and destroyed) at once.
const IDLE_CONCURRENCY: usize = 8;

/// Creates `n` idle sandboxes, [`IDLE_CONCURRENCY`] at a time.
async fn hold_idle(target: &Target, spec: &Arc<SandboxSpec>, n: usize) -> Idle {
    let mut out = Idle {
        ids: Vec::new(),
        errors: Vec::new(),
    };
    let workers: Vec<_> = (0..IDLE_CONCURRENCY.min(n))
        .map(|w| {
            let (target, spec) = (target.clone(), spec.clone());
            let count = n / IDLE_CONCURRENCY + usize::from(w < n % IDLE_CONCURRENCY);
            tokio::spawn(async move {
                let mut got = Idle {
                    ids: Vec::new(),
                    errors: Vec::new(),
                };
                let client = match target.client().await {
                    Ok(c) => c,
                    Err(e) => {
                        got.errors.push(format!("idle: connect: {e}"));
                        return got;
                    }
                };
                for _ in 0..count {
                    match client.create(&spec).await {
                        Ok((id, _)) => got.ids.push(id),
                        Err(e) => got.errors.push(format!("idle: create: {e}")),
                    }
                }
                got
            })
        })
        .collect();
    for w in workers {
        if let Ok(got) = w.await {
            out.ids.extend(got.ids);
            out.errors.extend(got.errors);
        }
    }
    out
}

/// Destroys the idle sandboxes; returns the errors met.
async fn release_idle(target: &Target, ids: Vec<String>) -> Vec<String> {
    let chunks: Vec<Vec<String>> = ids
        .chunks(ids.len().div_ceil(IDLE_CONCURRENCY).max(1))
        .map(<[String]>::to_vec)
        .collect();
    let workers: Vec<_> = chunks
        .into_iter()
        .map(|ids| {
            let target = target.clone();
            tokio::spawn(async move {
                let mut errors = Vec::new();
                match target.client().await {
                    Ok(c) => {
                        for id in ids {
                            if let Err(e) = c.destroy(&id).await {
                                errors.push(format!("idle: destroy: {e}"));
                            }
                        }
                    }
                    Err(e) => errors.push(format!("idle: connect: {e}")),
                }
                errors
            })
        })
        .collect();
    let mut errors = Vec::new();
    for w in workers {
        if let Ok(e) = w.await {
            errors.extend(e);
        }
    }
    errors
}

/// Waits until the daemon's pools hold `n` idle sandboxes.
async fn wait_warm(r: &RemoteProvider, n: u32) -> Result<()> {
    let until = Instant::now() + WARM_WAIT;
    loop {
        let idle: u32 = r.pool_list().await?.iter().map(|p| p.idle).sum();
        if idle >= n {
            return Ok(());
        }
        if Instant::now() > until {
            return Err(Error::Unavailable {
                what: "the warm pool".into(),
                reason: format!(
                    "only {idle} of {n} sandboxes were warm after {} s",
                    WARM_WAIT.as_secs()
                ),
                fix: "warm a smaller pool (--warm), or check the daemon's log".into(),
            });
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `stockade bench burst` on a runtime of its own (a worker per core); returns the
/// exit code: 0 when every operation succeeded, 1 when some failed.
pub fn main(mut ctx: Ctx, direct: bool, tls_ca: Option<&std::path::Path>, a: BurstArgs) -> i32 {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("stockade: error: cannot start the runtime: {e}");
            return 70;
        }
    };
    let json = ctx.json;
    let code = rt.block_on(async {
        let mut opts = ConnectOptions::from_env();
        opts.tls_ca = tls_ca.map(Into::into).or(opts.tls_ca);
        let found = match &a.host {
            Some(h) => match Address::parse(h) {
                Ok(addr) => RemoteProvider::connect_with(&addr, &opts).await.map(Some),
                Err(e) => Err(e),
            },
            None => ctx
                .connect(direct, tls_ca)
                .await
                .map(|()| ctx.remote.take()),
        };
        let result = match found {
            Ok(remote) => {
                ctx.remote = remote.clone();
                burst(&ctx, remote, opts, a).await
            }
            Err(e) => Err(e),
        };
        match result {
            Ok(code) => code,
            Err(e) => output::error(json, &e),
        }
    });
    drop(rt);
    code
}

async fn burst(
    ctx: &Ctx,
    remote: Option<RemoteProvider>,
    opts: ConnectOptions,
    a: BurstArgs,
) -> Result<i32> {
    if a.clients == 0 || !(a.secs > 0.0 && a.secs.is_finite()) {
        return Err(Error::InvalidRequest(
            "--clients and --secs must be above 0".into(),
        ));
    }
    let as_json = ctx.json;
    let target = match &remote {
        Some(r) => Target::Daemon(r.host().clone(), opts, a.no_pool),
        None => Target::Embedded(ctx.provider()?),
    };
    let spec = SandboxSpec {
        timeout_secs: a.timeout,
        ..SandboxSpec::default()
    };
    let argv = if a.command.is_empty() {
        vec!["/bin/true".to_string()]
    } else {
        a.command.clone()
    };
    let req = Arc::new(ExecRequest::new(argv.clone()));
    let spec = Arc::new(spec);
    let held_idle = hold_idle(&target, &spec, a.idle).await;
    let idle_made = held_idle.ids.len();
    // After the idle ones, so that the run starts from a full pool.
    if a.warm > 0 {
        let Some(r) = &remote else {
            return Err(Error::InvalidRequest(
                "--warm needs a daemon (--host, $STOCKADE_HOST or the default socket); \
                 pools live in the daemon"
                    .into(),
            ));
        };
        r.pool_warm(
            &spec,
            a.warm,
            a.warm.saturating_mul(2).max(a.clients as u32),
        )
        .await?;
        wait_warm(r, a.warm).await?;
    }
    // Connections are opened and held sandboxes made before the clock starts; every
    // client starts when the last one is ready.
    let ready = Arc::new(tokio::sync::Barrier::new(a.clients + 1));
    let run_for = Duration::from_secs_f64(a.secs);
    let tasks: Vec<_> = (0..a.clients)
        .map(|_| {
            tokio::spawn(one_client(
                target.clone(),
                a.mode,
                spec.clone(),
                req.clone(),
                ready.clone(),
                run_for,
            ))
        })
        .collect();
    ready.wait().await;
    let start = Instant::now();
    let mut all = Tally::default();
    for t in tasks {
        match t.await {
            Ok(t) => all.merge(t),
            Err(e) => all.errors.push(format!("client task: {e}")),
        }
    }
    // Until the last operation in flight at the end finished.
    let elapsed = start.elapsed().as_secs_f64().max(f64::EPSILON);
    all.errors.extend(held_idle.errors);
    all.errors
        .extend(release_idle(&target, held_idle.ids).await);
    let completed = all.total.len();
    let mut examples: Vec<String> = Vec::new();
    for e in &all.errors {
        if examples.len() < ERROR_EXAMPLES && !examples.contains(e) {
            examples.push(e.clone());
        }
    }
    let mode = match a.mode {
        Mode::OneShot => "one-shot",
        Mode::Held => "held",
        Mode::Create => "create",
    };
    let mut latency = serde_json::Map::new();
    latency.insert("operation".into(), summary(&mut all.total));
    if a.mode != Mode::Held {
        latency.insert("create".into(), summary(&mut all.create));
        if a.mode == Mode::OneShot {
            latency.insert("exec".into(), summary(&mut all.exec));
        }
        latency.insert("destroy".into(), summary(&mut all.destroy));
    }
    let report = json!({
        "mode": mode,
        "target": target.describe(),
        "clients": a.clients,
        "secs": a.secs,
        "command": argv,
        "completed": completed,
        "errors": all.errors.len(),
        "error_examples": examples,
        "pooled": all.pooled,
        "idle_held": idle_made,
        "ops_per_sec": completed as f64 / elapsed,
        "latency": latency,
    });
    if as_json {
        println!("{report}");
    } else {
        print_table(&report);
    }
    Ok(if all.errors.is_empty() { 0 } else { 1 })
}

fn print_table(r: &Value) {
    println!(
        "burst: {} clients x {} s, {} ({}), {}",
        r["clients"],
        r["secs"],
        r["mode"].as_str().unwrap_or_default(),
        r["command"]
            .as_array()
            .map(|a| a
                .iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(" "))
            .unwrap_or_default(),
        r["target"].as_str().unwrap_or_default()
    );
    println!();
    println!("| step | n | p50 ms | p90 ms | p99 ms | p999 ms | max ms |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    if let Some(l) = r["latency"].as_object() {
        let steps = ["operation", "create", "exec", "destroy"];
        for (name, s) in steps.iter().filter_map(|k| Some((k, l.get(*k)?))) {
            println!(
                "| {name} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |",
                s["n"],
                s["p50_ms"].as_f64().unwrap_or(0.0),
                s["p90_ms"].as_f64().unwrap_or(0.0),
                s["p99_ms"].as_f64().unwrap_or(0.0),
                s["p999_ms"].as_f64().unwrap_or(0.0),
                s["max_ms"].as_f64().unwrap_or(0.0),
            );
        }
    }
    println!();
    println!(
        "completed: {} ({:.1}/s), from a pool: {}, errors: {}",
        r["completed"],
        r["ops_per_sec"].as_f64().unwrap_or(0.0),
        r["pooled"],
        r["errors"]
    );
    if let Some(ex) = r["error_examples"].as_array() {
        for e in ex {
            println!("  error: {}", e.as_str().unwrap_or_default());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<Duration> = (1..=1000).map(Duration::from_millis).collect();
        assert_eq!(pct_ms(&v, 0.5), 500.0);
        assert_eq!(pct_ms(&v, 0.99), 990.0);
        assert_eq!(pct_ms(&v, 0.999), 999.0);
        assert_eq!(pct_ms(&v[..1], 0.999), 1.0);
        assert_eq!(pct_ms(&[], 0.5), 0.0);
    }
}
