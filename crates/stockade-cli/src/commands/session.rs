//! `stockade session exec|release|rm|ls`: named, persistent workspaces.

use clap::Subcommand;
use serde_json::json;
use stockade::{Result, SessionConfig, SessionManager};

use super::Ctx;
use super::exec::{exec_and_print, request};

#[derive(Subcommand, Debug)]
pub enum SessionCmd {
    /// Run a command in the session's sandbox (created on first use; the workspace is
    /// mounted read-write at /work).
    Exec {
        /// The session's name.
        name: String,
        /// Exec deadline in seconds.
        #[arg(long, value_name = "SECS")]
        timeout: Option<f64>,
        /// Extra environment variable (repeatable).
        #[arg(long = "env", short = 'e', value_name = "K=V")]
        env: Vec<String>,
        /// Working directory for this command (default /work, the workspace).
        #[arg(long, short = 'w', value_name = "PATH")]
        workdir: Option<String>,
        /// Destroy the sandbox after this many idle seconds (default 600).
        #[arg(long, value_name = "SECS")]
        idle_timeout: Option<u64>,
        /// The command and its arguments. Every flag after the command's first word is
        /// the command's own; a `--` before the command is accepted too.
        #[arg(trailing_var_arg = true, required = true, value_name = "COMMAND")]
        command: Vec<String>,
    },
    /// Destroy the session's sandbox, keep its workspace.
    Release {
        /// The session's name.
        name: String,
    },
    /// Destroy the sandbox and remove the workspace.
    Rm {
        /// The session's name.
        name: String,
    },
    /// List sessions.
    Ls,
}

/// `--home`, else `$STOCKADE_HOME`, else /var/lib/stockade (root) or the XDG data dir.
fn manager(ctx: &Ctx, idle: Option<u64>) -> Result<SessionManager> {
    let home = ctx
        .home
        .clone()
        .unwrap_or_else(stockade::wasm::stockade_home);
    let mut cfg = SessionConfig::new(home);
    if let Some(i) = idle {
        cfg.idle_timeout_secs = i;
    }
    Ok(SessionManager::new(ctx.provider()?, cfg))
}

pub async fn run(ctx: &Ctx, cmd: SessionCmd) -> Result<i32> {
    match cmd {
        SessionCmd::Exec {
            name,
            timeout,
            env,
            workdir,
            idle_timeout,
            command,
        } => {
            let m = manager(ctx, idle_timeout)?;
            let sb = m.get_or_create(&name).await?;
            let req = request(command, timeout, &env, workdir, None, false)?;
            let provider = ctx.provider()?;
            exec_and_print(ctx, provider.as_ref(), sb.id(), req).await
        }
        SessionCmd::Release { name } => {
            manager(ctx, None)?.release(&name).await?;
            if ctx.json {
                println!("{}", json!({"name": name, "released": true}));
            }
            Ok(0)
        }
        SessionCmd::Rm { name } => {
            manager(ctx, None)?.delete(&name).await?;
            if ctx.json {
                println!("{}", json!({"name": name, "removed": true}));
            }
            Ok(0)
        }
        SessionCmd::Ls => {
            let list = manager(ctx, None)?.list().await?;
            if ctx.json {
                println!("{}", json!(list));
            } else {
                println!("{:<20} {:<16} WORKSPACE", "SESSION", "SANDBOX");
                for s in list {
                    println!(
                        "{:<20} {:<16} {}",
                        s.name,
                        s.sandbox_id.unwrap_or_else(|| "-".into()),
                        s.workspace.display()
                    );
                }
            }
            Ok(0)
        }
    }
}
