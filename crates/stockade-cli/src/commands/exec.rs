//! `stockade exec ID CMD...`

use std::io::Write;

use clap::Args;
use stockade::{ExecOutcome, ExecRequest, OutputChunk, Provider, Result, Stream};
use tokio::sync::mpsc;

use super::Ctx;
use crate::output;

#[derive(Args, Debug)]
pub struct ExecArgs {
    /// Sandbox id.
    pub id: String,
    /// Exec deadline in seconds; at it everything the command started is killed.
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<f64>,
    /// Extra environment variable (repeatable).
    #[arg(long = "env", short = 'e', value_name = "K=V")]
    pub env: Vec<String>,
    /// Working directory for this command (default: the sandbox's).
    #[arg(long, short = 'w', value_name = "PATH")]
    pub workdir: Option<String>,
    /// Cap on each captured stream, e.g. 1m (default 1m).
    #[arg(long, value_name = "SIZE")]
    pub output_limit: Option<String>,
    /// Read stdin and pass it to the command.
    #[arg(long, short = 'i')]
    pub stdin: bool,
    /// Leave what the command starts (`server &`) running after it exits, until the
    /// sandbox ends; without it everything the command started ends with it.
    #[arg(long)]
    pub background: bool,
    /// Start the command and return at once with its pid, leaving it running (as
    /// `docker exec -d`); `stockade logs ID PID` prints what it writes.
    #[arg(long, short = 'd', conflicts_with = "stdin")]
    pub detach: bool,
    /// With --detach: keep none of its output.
    #[arg(long, requires = "detach")]
    pub discard_output: bool,
    /// Run the command on a terminal, with this terminal's keys and size (a shell,
    /// an editor, `top`): `stockade exec -t ID -- bash` (`-it`, as docker's, is the same).
    #[arg(long, short = 't', conflicts_with = "detach")]
    pub tty: bool,
    /// The command and its arguments. Every flag after the command's first word is
    /// the command's own, as with `docker exec`; a `--` before the command is accepted
    /// too.
    #[arg(trailing_var_arg = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// Builds the request from the exec flags.
pub fn request(
    argv: Vec<String>,
    timeout_secs: Option<f64>,
    env: &[String],
    workdir: Option<String>,
    limit: Option<&str>,
    stdin: bool,
) -> Result<ExecRequest> {
    let mut req = ExecRequest::new(argv);
    req.timeout_ms = timeout_secs.map(|s| (s * 1000.0).round().max(1.0) as u64);
    for kv in env {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| stockade::Error::InvalidRequest(format!("--env {kv:?} is not K=V")))?;
        req.env.insert(k.into(), v.into());
    }
    req.cwd = workdir;
    if let Some(l) = limit {
        req.output_limit_bytes = stockade::spec::parse_size(l)
            .map_err(|e| stockade::Error::InvalidRequest(format!("--output-limit: {e}")))?;
    }
    if stdin {
        let mut buf = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut buf)
            .map_err(|e| stockade::Error::io("cannot read stdin", e))?;
        req.stdin = buf;
    }
    Ok(req)
}

/// Runs `req`, streaming output live unless `json`, then prints the result. Returns
/// the command's exit code.
pub async fn exec_and_print(
    ctx: &Ctx,
    provider: &dyn Provider,
    id: &str,
    req: ExecRequest,
) -> Result<i32> {
    let outcome = exec_streaming(ctx, provider, id, req).await?;
    print_outcome(ctx, id, &outcome);
    Ok(outcome.exit_code)
}

/// Runs `req`, streaming output live unless `json`; the result is for
/// [`print_outcome`] (what `run` calls after its destroy, so that a reader who has
/// gone, which ends this process at that print, never cuts a destroy short).
pub async fn exec_streaming(
    ctx: &Ctx,
    provider: &dyn Provider,
    id: &str,
    req: ExecRequest,
) -> Result<ExecOutcome> {
    let req = stockade::CheckedRequest::new(req)?;
    let outcome = if ctx.json {
        provider.exec(id, req, stockade::ExecIo::none()).await?
    } else {
        let (tx, mut rx) = mpsc::channel::<OutputChunk>(16);
        let printer = tokio::spawn(async move {
            while let Some(c) = rx.recv().await {
                let _ = match c.stream {
                    Stream::Stdout => std::io::stdout()
                        .write_all(&c.data)
                        .and_then(|_| std::io::stdout().flush()),
                    Stream::Stderr => std::io::stderr().write_all(&c.data),
                };
            }
        });
        let r = provider.exec(id, req, stockade::ExecIo::output(tx)).await;
        let _ = printer.await;
        r?
    };
    Ok(outcome)
}

pub fn print_outcome(ctx: &Ctx, id: &str, o: &ExecOutcome) {
    if ctx.json {
        println!("{}", output::outcome_json(id, o));
        return;
    }
    // Live streaming showed the head of each stream; what remains is the tail.
    for (stream, data, dropped) in [
        (Stream::Stdout, &o.stdout, o.stdout_dropped),
        (Stream::Stderr, &o.stderr, o.stderr_dropped),
    ] {
        if dropped == 0 {
            continue;
        }
        let head = data.len() - data.len() / 2;
        let tail = &data[head.min(data.len())..];
        let note = format!(
            "\n[stockade: {dropped} bytes of {stream:?} dropped; the last {} bytes follow]\n",
            tail.len()
        )
        .to_lowercase();
        let _ = std::io::stderr().write_all(note.as_bytes());
        let _ = match stream {
            Stream::Stdout => std::io::stdout().write_all(tail),
            Stream::Stderr => std::io::stderr().write_all(tail),
        };
    }
    print_ending(o);
}

/// What the output does not show of how the exec ended.
pub fn print_ending(o: &ExecOutcome) {
    if o.timed_out {
        eprintln!("stockade: the command passed its deadline and everything it started was killed");
    }
    if o.oom_killed {
        eprintln!("stockade: the command ran out of memory and was killed");
    }
    for d in &o.egress_denied {
        eprintln!("stockade: {d}");
    }
}

pub async fn run(ctx: &Ctx, a: ExecArgs) -> Result<i32> {
    let provider = ctx.provider_for(&a.id).await?;
    let req = request(
        a.command,
        a.timeout,
        &a.env,
        a.workdir,
        a.output_limit.as_deref(),
        // On a terminal, stdin is typed as it comes, not read first.
        a.stdin && !a.tty,
    )?;
    let req = stockade::ExecRequest {
        background: a.background,
        detach: a.detach,
        discard_output: a.discard_output,
        ..req
    };
    if a.tty {
        if ctx.json {
            return Err(stockade::Error::InvalidRequest(
                "--tty shows the terminal as it is; it gives no JSON: drop --json, or -t".into(),
            ));
        }
        let o = super::terminal::exec(provider.as_ref(), &a.id, req).await?;
        print_ending(&o);
        return Ok(o.exit_code);
    }
    if a.detach {
        let req = stockade::CheckedRequest::new(req)?;
        let o = provider.exec(&a.id, req, stockade::ExecIo::none()).await?;
        let Some(pid) = o.pid else {
            // It never ran: the answer says why, as an exec that waited would.
            print_outcome(ctx, &a.id, &o);
            return Ok(o.exit_code);
        };
        let log = (!a.discard_output).then(|| stockade::detached_log(pid));
        if ctx.json {
            println!(
                "{}",
                serde_json::json!({"id": a.id, "pid": pid, "log": log})
            );
        } else {
            println!("{pid}");
            if log.is_some() {
                eprintln!("stockade: its output: stockade logs {} {pid}", a.id);
            }
        }
        return Ok(0);
    }
    exec_and_print(ctx, provider.as_ref(), &a.id, req).await
}
