//! The agent protocol, host side: ping, exec (streamed, with stdin and kill) and file
//! operations, each over one connection of a [`Transport`].

use stockade_agent_proto::codec::asynch::read_msg;
use stockade_agent_proto::{AgentMsg, ClientMsg, ExecOutcome, ExecRequest, PROTOCOL_VERSION};
use stockade_core::{Error, ExecInput, ExecIo, OutputChunk, OutputSender};
use tokio::io::AsyncRead;

use crate::transport::{Connection, Transport};

/// The connection to the agent broke: the sandbox went away during the call.
fn lost(id: &str, e: impl std::fmt::Display) -> Error {
    Error::Gone {
        id: id.to_string(),
        detail: format!("its agent connection broke ({e})"),
    }
}

/// The agent closed the connection before answering: the sandbox ended.
fn closed(id: &str) -> Error {
    Error::Gone {
        id: id.to_string(),
        detail: "it was destroyed or its lifetime ended during the call".into(),
    }
}

/// The agent answered something the protocol does not allow here: a bug.
fn unexpected(id: &str, what: impl std::fmt::Display) -> Error {
    Error::Internal(format!("the agent of sandbox {id} sent {what}"))
}

/// Connects and sends hello and `then` together (pipelined), then reads the hello.
async fn open<T: Transport + ?Sized>(
    id: &str,
    transport: &T,
    then: &ClientMsg,
) -> Result<Connection, Error> {
    let mut s = transport.connect().await?;
    let mut buf = stockade_agent_proto::codec::encode(&ClientMsg::Hello {
        version: PROTOCOL_VERSION,
    })
    .map_err(|e| Error::Internal(format!("cannot encode a message: {e}")))?;
    buf.extend(
        stockade_agent_proto::codec::encode(then)
            .map_err(|e| Error::Internal(format!("cannot encode a message: {e}")))?,
    );
    tokio::io::AsyncWriteExt::write_all(&mut s, &buf)
        .await
        .map_err(|e| lost(id, e))?;
    match read_msg::<_, AgentMsg>(&mut s)
        .await
        .map_err(|e| lost(id, e))?
    {
        Some(AgentMsg::Hello { .. }) => Ok(s),
        None => Err(closed(id)),
        Some(AgentMsg::Error { code, message }) => Err(Error::remote(code, message)),
        Some(other) => Err(unexpected(
            id,
            format!("an unexpected answer to hello: {other:?}"),
        )),
    }
}

/// Checks the agent answers.
pub async fn ping<T: Transport + ?Sized>(id: &str, transport: &T) -> Result<(), Error> {
    pong(id, transport, ClientMsg::Ping, "ping").await
}

/// Has the agent start what its later execs are served by now (the exec zygote; see
/// `ClientMsg::Warm`), and waits until it has.
pub async fn warm<T: Transport + ?Sized>(id: &str, transport: &T) -> Result<(), Error> {
    pong(id, transport, ClientMsg::Warm, "warm").await
}

/// A byte stream to TCP `port` on the sandbox's own loopback (see
/// `ClientMsg::Connect`); nothing listening there is `Unavailable`, saying so.
pub async fn connect_port<T: Transport + ?Sized>(
    id: &str,
    transport: &T,
    port: u16,
) -> Result<Connection, Error> {
    let mut s = open(id, transport, &ClientMsg::Connect { port }).await?;
    match read_msg::<_, AgentMsg>(&mut s)
        .await
        .map_err(|e| lost(id, e))?
    {
        Some(AgentMsg::Connected) => Ok(s),
        None => Err(closed(id)),
        Some(AgentMsg::Error { code, message }) => Err(Error::remote(code, message)),
        Some(other) => Err(unexpected(
            id,
            format!("an unexpected answer to a port connection: {other:?}"),
        )),
    }
}

/// Sends `msg` (`what`), which the agent answers with `Pong`.
async fn pong<T: Transport + ?Sized>(
    id: &str,
    transport: &T,
    msg: ClientMsg,
    what: &str,
) -> Result<(), Error> {
    let mut s = open(id, transport, &msg).await?;
    match read_msg::<_, AgentMsg>(&mut s)
        .await
        .map_err(|e| lost(id, e))?
    {
        Some(AgentMsg::Pong) => Ok(()),
        None => Err(closed(id)),
        Some(AgentMsg::Error { code, message }) => Err(Error::remote(code, message)),
        Some(other) => Err(unexpected(
            id,
            format!("an unexpected answer to {what}: {other:?}"),
        )),
    }
}

/// Runs one exec. Dropping the future closes the connection, and the agent then kills
/// everything the exec started. Stdin and kill requests from `input` are passed on
/// while it runs.
pub async fn exec<T: Transport + ?Sized>(
    id: &str,
    transport: &T,
    mut req: ExecRequest,
    io: ExecIo,
) -> Result<ExecOutcome, Error> {
    let ExecIo { output, input } = io;
    req.stream = output.is_some();
    let msg = match req.uid {
        Some(uid) => ClientMsg::ExecAs { uid, req },
        None => ClientMsg::Exec(req),
    };
    let mut s = open(id, transport, &msg).await?;
    let Some(mut input) = input else {
        return exec_events(id, &mut s, output).await;
    };
    let (mut r, mut w) = tokio::io::split(s);
    // Reading a frame is not cancel-safe, so writing input gets its own task. It
    // holds the write half, so it ends with this exec, also when this future is
    // dropped (a caller gone): the connection then closes and the agent kills the
    // exec.
    let _writer = AbortOnDrop(tokio::spawn(async move {
        while let Some(m) = input.recv().await {
            let msg = match m {
                ExecInput::Stdin(d) => ClientMsg::Stdin(d),
                ExecInput::CloseStdin => ClientMsg::CloseStdin,
                ExecInput::Kill => ClientMsg::Kill,
                ExecInput::Signal(n) => ClientMsg::Signal(n),
                ExecInput::Resize(size) => ClientMsg::Resize(size),
            };
            let Ok(buf) = stockade_agent_proto::codec::encode(&msg) else {
                break;
            };
            if tokio::io::AsyncWriteExt::write_all(&mut w, &buf)
                .await
                .is_err()
            {
                break;
            }
        }
        // Keep the write half open: closing it would tell the agent to kill the exec.
        std::future::pending::<()>().await;
    }));
    exec_events(id, &mut r, output).await
}

/// A task aborted when this is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn exec_events<R: AsyncRead + Unpin>(
    id: &str,
    s: &mut R,
    output: Option<OutputSender>,
) -> Result<ExecOutcome, Error> {
    loop {
        match read_msg::<_, AgentMsg>(s).await.map_err(|e| lost(id, e))? {
            Some(AgentMsg::Started { .. }) => {}
            Some(AgentMsg::Output { stream, data }) => {
                if let Some(tx) = &output {
                    // A reader that went away does not stop the exec.
                    let _ = tx.send(OutputChunk { stream, data }).await;
                }
            }
            Some(AgentMsg::Exited(outcome)) => return Ok(outcome),
            Some(AgentMsg::Error { code, message }) => return Err(Error::remote(code, message)),
            Some(other) => return Err(unexpected(id, format!("an unexpected message {other:?}"))),
            None => {
                return Err(closed(id));
            }
        }
    }
}

/// Runs one file operation as the sandbox user, or (`uid`) as that uid of the sandbox
/// (its own user namespace's; the agent refuses one it does not map).
pub async fn file<T: Transport + ?Sized>(
    id: &str,
    transport: &T,
    uid: Option<u32>,
    op: stockade_core::FileOp,
) -> Result<stockade_core::FileResult, Error> {
    let msg = match uid {
        None => ClientMsg::File(op),
        Some(uid) => ClientMsg::FileAs { uid, op },
    };
    let mut s = open(id, transport, &msg).await?;
    match read_msg::<_, AgentMsg>(&mut s)
        .await
        .map_err(|e| lost(id, e))?
    {
        Some(AgentMsg::FileDone(r)) => Ok(r),
        Some(AgentMsg::Error { code, message }) => Err(Error::remote(code, message)),
        Some(other) => Err(unexpected(
            id,
            format!("an unexpected answer to a file operation: {other:?}"),
        )),
        None => Err(closed(id)),
    }
}
