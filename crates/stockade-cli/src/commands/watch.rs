//! `stockade watch ID PATH [-r] [--json]`: what changes in a directory of a sandbox,
//! a line per change, until Ctrl-C, the directory goes or the sandbox ends. The
//! agent's own watcher (inotify as the sandbox user) does the watching, so nothing
//! is needed in the image.

use std::io::Write;

use clap::Args;
use stockade::{
    CheckedRequest, Error, ErrorCode, ExecIo, ExecRequest, Result, Stream, WatchError, WatchKind,
    WatchLine,
};
use tokio::sync::mpsc;

use super::Ctx;

#[derive(Args, Debug)]
pub struct WatchArgs {
    /// Sandbox id.
    pub id: String,
    /// The directory to watch: an absolute path in the sandbox.
    pub path: String,
    /// Watch every directory below it too (also those made later).
    #[arg(long, short = 'r')]
    pub recursive: bool,
}

fn kind(k: WatchKind) -> &'static str {
    match k {
        WatchKind::Create => "create",
        WatchKind::Write => "write",
        WatchKind::Remove => "remove",
        WatchKind::Rename => "rename",
        WatchKind::Chmod => "chmod",
    }
}

/// The error of a watch that could not start, as the watcher said it.
fn failed(error: WatchError, message: String) -> Error {
    let code = match error {
        WatchError::NotFound => ErrorCode::NotFound,
        WatchError::NotADirectory | WatchError::PermissionDenied => ErrorCode::InvalidSpec,
        WatchError::Exhausted => ErrorCode::LimitExceeded,
        WatchError::Io => ErrorCode::Internal,
    };
    Error::Remote { code, message }
}

pub async fn run(ctx: &Ctx, a: WatchArgs, json: bool) -> Result<i32> {
    let provider = ctx.provider_for(&a.id).await?;
    let req = CheckedRequest::new(ExecRequest::watch_dir(&a.path, a.recursive))?;
    let (tx, mut rx) = mpsc::channel(64);
    let exec = provider.exec(&a.id, req, ExecIo::output(tx));
    tokio::pin!(exec);
    let mut out = std::io::stdout().lock();
    let mut buf = Vec::new();
    let mut ready = false;
    let write = |line: &WatchLine, out: &mut std::io::StdoutLock| -> Result<()> {
        let text = if json {
            line.to_json()
        } else {
            match line {
                WatchLine::Event { name, kind: k } => format!("{:<6} {name}", kind(*k)),
                _ => return Ok(()),
            }
        };
        writeln!(out, "{text}")
            .and_then(|()| out.flush())
            .map_err(|e| Error::io("cannot write the events", e))
    };
    // Each complete line of `buf`: printed, or the failure it says.
    let mut take = |buf: &mut Vec<u8>, ready: &mut bool| -> Result<()> {
        while let Some(n) = buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buf.drain(..=n).collect();
            match WatchLine::parse(&line[..n]) {
                Some(WatchLine::Ready) => {
                    *ready = true;
                    if !json {
                        eprintln!(
                            "watching {}{} in {} (Ctrl-C ends it)",
                            a.path,
                            if a.recursive { " and below" } else { "" },
                            a.id
                        );
                    }
                }
                Some(WatchLine::Failed { error, message }) => return Err(failed(error, message)),
                Some(l) => write(&l, &mut out)?,
                None => {}
            }
        }
        Ok(())
    };
    loop {
        tokio::select! {
            r = &mut exec => {
                let o = r?;
                while let Ok(c) = rx.try_recv() {
                    if c.stream == Stream::Stdout {
                        buf.extend_from_slice(&c.data);
                    }
                }
                take(&mut buf, &mut ready)?;
                // A failure may also be in what the outcome kept.
                for l in o.stdout.split(|b| *b == b'\n').filter_map(WatchLine::parse) {
                    if let WatchLine::Failed { error, message } = l {
                        return Err(failed(error, message));
                    }
                }
                if !ready || o.exit_code != 0 {
                    return Err(Error::Internal(format!(
                        "the watch ended with exit {}: {}",
                        o.exit_code,
                        String::from_utf8_lossy(&o.stderr).trim()
                    )));
                }
                // The directory went: nothing is left to watch.
                return Ok(0);
            }
            Some(c) = rx.recv() => {
                if c.stream == Stream::Stdout {
                    buf.extend_from_slice(&c.data);
                    take(&mut buf, &mut ready)?;
                }
            }
        }
    }
}
