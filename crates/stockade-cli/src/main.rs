//! `stockade`: run untrusted code in a sandbox that is secure by default.

mod commands;
#[cfg(test)]
mod help_text;
mod output;
mod spec_args;

use clap::{Parser, Subcommand};

/// The help heading of the flags every command takes.
const GLOBAL: &str = "Global options";

/// Run untrusted, AI-written code in sandboxes that are secure by default.
#[derive(Parser, Debug)]
#[command(name = "stockade", version, propagate_version = true)]
struct Cli {
    /// Print machine-readable JSON: one object per command result, an array for a list.
    #[arg(long, global = true, help_heading = GLOBAL)]
    json: bool,
    /// Isolation backend (default: $STOCKADE_PROVIDER or native).
    #[arg(long, global = true, value_name = "NAME", help_heading = GLOBAL)]
    provider: Option<String>,
    /// Where sessions, runtimes and images live (default: $STOCKADE_HOME, else
    /// /var/lib/stockade for root, else the XDG data dir).
    #[arg(long, global = true, value_name = "DIR", env = "STOCKADE_HOME", help_heading = GLOBAL)]
    home: Option<std::path::PathBuf>,
    /// Run in-process even when a daemon answers (STOCKADE_HOST or the default socket).
    #[arg(long, global = true, help_heading = GLOBAL)]
    direct: bool,
    /// The CA certificate (PEM) a TLS daemon's certificate must chain to (default:
    /// $STOCKADE_TLS_CA, else the system's roots).
    #[arg(long, global = true, value_name = "FILE", help_heading = GLOBAL)]
    tls_ca: Option<std::path::PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Create a sandbox, run one command (or --language code) in it, destroy it.
    Run(commands::run::RunArgs),
    /// Create a sandbox and print its id; it lives until `rm` or its lifetime ends.
    Create(commands::create::CreateArgs),
    /// Run a command in an existing sandbox.
    Exec(commands::exec::ExecArgs),
    /// Listen on this host's 127.0.0.1 and carry each connection to a port of a
    /// sandbox (a server its code started); until Ctrl-C or the sandbox ends.
    Forward(commands::forward::ForwardArgs),
    /// Print what a detached exec (`exec --detach`) wrote; --follow until it ends.
    Logs(commands::logs::LogsArgs),
    /// Print each change in a directory of a sandbox (created, written, removed,
    /// renamed, chmod) until Ctrl-C or the directory goes; --json: one JSON line each.
    /// Needs nothing in the image.
    Watch(commands::watch::WatchArgs),
    /// List live sandboxes (of every provider, unless --provider names one).
    Ls,
    /// Show a sandbox's spec and the hardening actually applied.
    Inspect {
        /// Sandbox id.
        id: String,
    },
    /// Replace a running sandbox's egress policy (--allow, --deny), or show it and
    /// what it refused.
    #[command(after_help = stockade::served_by_line(stockade::Verb::EgressControl))]
    Net(commands::net::NetArgs),
    /// What a sandbox's egress policy refused, as events (--follow streams them).
    Events(commands::events::EventsArgs),
    /// Destroy sandboxes.
    Rm(commands::rm::RmArgs),
    /// Pause a sandbox, keeping its processes and memory. Native: every process is
    /// frozen by the cgroup freezer and its memory stays in RAM; docker: `docker
    /// pause` (runc's freezer); gvisor: `runsc pause`; microvm: memory and device
    /// state are written to disk and the VM stops. While paused, execs and file
    /// operations are refused, and its lifetime does not run. Through the daemon when
    /// one is used (--host or STOCKADE_HOST).
    #[command(after_help = stockade::served_by_line(stockade::Verb::Pause))]
    Pause {
        /// Sandbox id.
        id: String,
    },
    /// Resume a paused sandbox where it stopped. Its lifetime ends later by the time
    /// it spent paused.
    #[command(after_help = stockade::served_by_line(stockade::Verb::Pause))]
    Resume {
        /// Sandbox id.
        id: String,
    },
    /// Start copies of a paused sandbox, each with its own id; prints their ids.
    #[command(after_help = stockade::served_by_line(stockade::Verb::Fork))]
    Fork(commands::snapshot::ForkArgs),
    /// Keep a sandbox's state (processes, memory, files) as a named snapshot to start
    /// new sandboxes from (`create --from-snapshot NAME`); `snapshot ls`, `snapshot rm
    /// NAME`. Each start checks its digest. Through the daemon a tenant sees only its
    /// own.
    #[command(after_help = stockade::served_by_line(stockade::Verb::Snapshots))]
    Snapshot(commands::snapshot::SnapshotArgs),
    /// Reap sandboxes whose owner died or whose lifetime passed, and leftovers of crashes.
    Gc,
    /// Check what this host supports, which providers are usable and which languages run.
    Doctor,
    /// List the languages --language runs here and how (host interpreter, image in the
    /// store, image pulled on first use, WASI runtime).
    Languages,
    /// Run file operations inside a sandbox, as the sandbox user.
    Fs {
        /// Sandbox id.
        id: String,
        #[command(subcommand)]
        cmd: commands::fs::FsCmd,
    },
    /// Copy files or directories between the host and a sandbox (ID:/path).
    Cp(commands::cp::CpArgs),
    /// Manage named, persistent workspaces, each with a sandbox while in use.
    #[command(subcommand)]
    Session(commands::session::SessionCmd),
    /// Manage the WASI runtimes of the wasm provider.
    #[command(subcommand)]
    Runtime(commands::runtime::RuntimeCmd),
    /// Manage the OCI images that --image runs: pull, import, ls, inspect, rm, prune.
    #[command(subcommand)]
    Image(commands::image::ImageCmd),
    /// Run the daemon (stockaded), which serves gRPC with warm pools and tenants.
    Serve(stockade_server::ServeArgs),
    /// Manage the daemon's warm pools: warm, ls, drain.
    #[command(subcommand)]
    Pool(commands::pool::PoolCmd),
    /// Serve sandboxes as tools to MCP clients (over stdio, or HTTP with --http ADDR).
    Mcp(stockade_mcp::McpArgs),
    /// One-time host setup, as root (`setup rootless --user NAME`).
    #[command(subcommand)]
    Setup(commands::setup::SetupCmd),
    /// Measure a daemon (or this host in-process) under load: `bench burst`.
    #[command(subcommand)]
    Bench(commands::bench::BenchCmd),
    /// Print a shell completion script (bash, zsh, fish, elvish or powershell).
    Completions(commands::docs::CompletionsArgs),
    /// Print the manual page (roff), generated from this command line's definition.
    Man(commands::docs::ManArgs),
}

/// `stockade ls | head`: when whoever reads our output has gone, end quietly with the
/// shell's code for a SIGPIPE death (141), as `ls` does. Rust's runtime ignores
/// SIGPIPE, and the CLI keeps it so (a write to a daemon or agent that died then fails
/// with an error it reports, instead of killing the process silently), so `print!`
/// panics on a closed stdout instead: this hook turns that one panic into the quiet
/// exit. Every other panic goes to the default hook.
fn quiet_on_closed_stdout() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let msg = payload
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| payload.downcast_ref::<&str>().copied())
            .unwrap_or("");
        if msg.starts_with("failed printing to stdout") && msg.contains("Broken pipe") {
            std::process::exit(141);
        }
        default(info);
    }));
}

/// The command line, with the name this program was started by taken into account:
/// `stockaded` (a link to `stockade`, as `run.sh install` makes) is `stockade serve`.
fn args() -> Vec<std::ffi::OsString> {
    let mut args: Vec<_> = std::env::args_os().collect();
    let name = args
        .first()
        .and_then(|a| std::path::Path::new(a).file_name())
        .map(std::ffi::OsStr::to_os_string);
    if name.as_deref() == Some(std::ffi::OsStr::new("stockaded")) {
        args.insert(1, "serve".into());
    }
    args
}

/// For a flag docker users type that Stockade spells otherwise (or needs not), what
/// to write instead.
fn docker_hint(arg: &str) -> Option<&'static str> {
    let flag = arg.split('=').next().unwrap_or(arg);
    Some(match flag {
        "--rm" => {
            "`stockade run` always destroys its sandbox when the command ends (no --rm); \
             `stockade create` makes one that lives until `stockade rm ID`"
        }
        "-v" | "--volume" => {
            "Stockade mounts a host directory with --mount HOST:TARGET (read-only) or \
             --mount HOST:TARGET:rw"
        }
        "-d" | "--detach" => {
            "`stockade create` makes a sandbox that lives until `stockade rm ID`; \
             `stockade exec --detach ID -- CMD` starts a command in it and returns"
        }
        "-p" | "--publish" => {
            "sandboxes have no network unless asked (see --network); \
             `stockade forward ID [LOCAL:]PORT` reaches a server inside from this host"
        }
        "--name" => "sandboxes are named by the id `stockade create` prints",
        _ => return None,
    })
}

fn main() {
    let cli = match Cli::try_parse_from(args()) {
        Ok(cli) => cli,
        Err(e) => {
            let hint = (e.kind() == clap::error::ErrorKind::UnknownArgument)
                .then(|| e.get(clap::error::ContextKind::InvalidArg))
                .flatten()
                .and_then(|v| match v {
                    clap::error::ContextValue::String(s) => docker_hint(s),
                    _ => None,
                });
            if let Some(hint) = hint {
                let arg = match e.get(clap::error::ContextKind::InvalidArg) {
                    Some(clap::error::ContextValue::String(s)) => s.clone(),
                    _ => String::new(),
                };
                eprintln!("error: unexpected argument '{arg}': {hint}");
                eprintln!("  (to pass '{arg}' to the command, put `--` before the command)");
                std::process::exit(2);
            }
            e.exit()
        }
    };
    if !matches!(cli.command, Command::Serve(_) | Command::Mcp(_)) {
        quiet_on_closed_stdout();
    }
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("stockade: error: cannot start the runtime: {e}");
            std::process::exit(70);
        }
    };
    if let Command::Serve(args) = cli.command {
        drop(rt);
        std::process::exit(commands::serve::run(args));
    }
    match cli.command {
        Command::Completions(a) => std::process::exit(commands::docs::completions(a)),
        Command::Man(a) => std::process::exit(commands::docs::man(a)),
        _ => {}
    }
    if let Command::Mcp(args) = cli.command {
        drop(rt);
        let code = commands::mcp::run(args, cli.provider, cli.home, cli.direct);
        std::process::exit(code);
    }
    if let Command::Bench(commands::bench::BenchCmd::Burst(args)) = cli.command {
        // Many clients: a runtime with a worker per core, not the CLI's one thread.
        drop(rt);
        let ctx = commands::Ctx {
            json: cli.json,
            provider: cli.provider,
            home: cli.home,
            remote: None,
        };
        std::process::exit(commands::bench::main(
            ctx,
            cli.direct,
            cli.tls_ca.as_deref(),
            args,
        ));
    }
    let mut ctx = commands::Ctx {
        json: cli.json,
        provider: cli.provider.clone(),
        home: cli.home.clone(),
        remote: None,
    };
    let code = rt.block_on(async {
        // Image and runtime management are local; everything else may use a daemon.
        let local = matches!(
            cli.command,
            Command::Image(_) | Command::Runtime(_) | Command::Languages | Command::Setup(_)
        );
        if !local && let Err(e) = ctx.connect(cli.direct, cli.tls_ca.as_deref()).await {
            return output::error(ctx.json, &e);
        }
        let result = match cli.command {
            Command::Run(a) => commands::run::run(&ctx, a).await,
            Command::Create(a) => commands::create::run(&ctx, a).await,
            Command::Exec(a) => commands::exec::run(&ctx, a).await,
            Command::Logs(a) => commands::logs::run(&ctx, a).await,
            Command::Watch(a) => commands::watch::run(&ctx, a, ctx.json).await,
            Command::Forward(a) => commands::forward::run(&ctx, a).await,
            Command::Ls => commands::ls::run(&ctx).await,
            Command::Inspect { id } => commands::inspect::run(&ctx, &id).await,
            Command::Net(a) => commands::net::run(&ctx, a).await,
            Command::Events(a) => commands::events::run(&ctx, a).await,
            Command::Rm(a) => commands::rm::run(&ctx, a).await,
            Command::Gc => commands::gc::run(&ctx).await,
            Command::Pause { id } => commands::snapshot::pause(&ctx, &id).await,
            Command::Resume { id } => commands::snapshot::resume(&ctx, &id).await,
            Command::Fork(a) => commands::snapshot::fork(&ctx, a).await,
            Command::Snapshot(a) => commands::snapshot::snapshot(&ctx, a).await,
            Command::Doctor => commands::doctor::run(&ctx).await,
            Command::Languages => commands::languages::run(&ctx),
            Command::Runtime(c) => commands::runtime::run(&ctx, c).await,
            Command::Image(c) => commands::image::run(&ctx, c).await,
            Command::Fs { id, cmd } => commands::fs::run(&ctx, &id, cmd).await,
            Command::Cp(a) => commands::cp::run(&ctx, a).await,
            Command::Session(c) => commands::session::run(&ctx, c).await,
            Command::Pool(c) => commands::pool::run(&ctx, c).await,
            Command::Setup(c) => commands::setup::run(&ctx, c).await,
            Command::Serve(_)
            | Command::Mcp(_)
            | Command::Bench(_)
            | Command::Completions(_)
            | Command::Man(_) => Ok(0),
        };
        match result {
            Ok(code) => code,
            Err(e) => output::error(ctx.json, &e),
        }
    });
    // Do not wait for the runtime's blocking pool; everything owed is done.
    drop(rt);
    std::process::exit(code);
}
