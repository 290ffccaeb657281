//! `exec -t` and `run -t`: a command on a terminal inside the sandbox, driven from this
//! one. This terminal goes raw (every key reaches the command: Ctrl-C interrupts it
//! there, not here), its size follows this window's (`SIGWINCH`), and it is restored
//! however the exec ends. Without a terminal here (stdin piped), the command still gets
//! one, of 24 x 80, and the input's end is typed as Ctrl-D.

use std::io::{IsTerminal, Read, Write};

use rustix::termios::{OptionalActions, Termios, tcgetattr, tcgetwinsize, tcsetattr};
use stockade::{
    CheckedRequest, ExecInput, ExecIo, ExecOutcome, ExecRequest, OutputChunk, Provider, Result,
    TtySize,
};
use tokio::sync::mpsc;

/// This terminal's size, or the default one when stdout is no terminal.
fn local_size() -> TtySize {
    let out = std::io::stdout();
    if !out.is_terminal() {
        return TtySize::DEFAULT;
    }
    match tcgetwinsize(&out) {
        Ok(w) if w.ws_row > 0 && w.ws_col > 0 => TtySize {
            rows: w.ws_row,
            cols: w.ws_col,
        },
        _ => TtySize::DEFAULT,
    }
}

/// This terminal in raw mode until dropped, when its settings come back.
struct Raw(Option<Termios>);

impl Raw {
    fn enter() -> Raw {
        let stdin = std::io::stdin();
        if !stdin.is_terminal() {
            return Raw(None);
        }
        let Ok(saved) = tcgetattr(&stdin) else {
            return Raw(None);
        };
        let mut raw = saved.clone();
        raw.make_raw();
        if tcsetattr(&stdin, OptionalActions::Now, &raw).is_err() {
            return Raw(None);
        }
        Raw(Some(saved))
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        if let Some(saved) = &self.0 {
            let _ = tcsetattr(std::io::stdin(), OptionalActions::Now, saved);
        }
    }
}

/// Runs `req` on a terminal in sandbox `id`, this process's stdin typed on it and its
/// output written here as it comes. Returns the outcome (its stdout is the terminal's
/// capture, already shown).
pub async fn exec(provider: &dyn Provider, id: &str, req: ExecRequest) -> Result<ExecOutcome> {
    let req = CheckedRequest::new(ExecRequest {
        tty: Some(local_size()),
        keep_stdin_open: true,
        stream: true,
        ..req
    })?;
    let (out_tx, mut out_rx) = mpsc::channel::<OutputChunk>(64);
    let (in_tx, in_rx) = mpsc::channel::<ExecInput>(64);
    // The keys, read on a thread of their own (a read of a terminal cannot be
    // cancelled); the process ends after the exec, and the thread with it.
    let keys = in_tx.clone();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        let mut stdin = std::io::stdin();
        loop {
            match stdin.read(&mut buf) {
                Ok(0) | Err(_) => {
                    let _ = keys.blocking_send(ExecInput::CloseStdin);
                    break;
                }
                Ok(n) => {
                    if keys
                        .blocking_send(ExecInput::Stdin(buf[..n].to_vec()))
                        .is_err()
                    {
                        break;
                    }
                }
            }
        }
    });
    // This window's size, each time it changes.
    let resizes = tokio::spawn(async move {
        let Ok(mut winch) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::window_change())
        else {
            return;
        };
        while winch.recv().await.is_some() {
            if in_tx.send(ExecInput::Resize(local_size())).await.is_err() {
                break;
            }
        }
    });
    let printer = tokio::spawn(async move {
        let mut out = std::io::stdout();
        while let Some(c) = out_rx.recv().await {
            let _ = out.write_all(&c.data).and_then(|()| out.flush());
        }
    });
    let raw = Raw::enter();
    let io = ExecIo {
        output: Some(out_tx),
        input: Some(in_rx),
    };
    let r = provider.exec(id, req, io).await;
    let _ = printer.await;
    drop(raw);
    resizes.abort();
    r
}
