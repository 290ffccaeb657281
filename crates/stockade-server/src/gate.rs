//! What stands between a connection and the gRPC service: the token is checked on
//! the request's headers before one byte of its body is read, each RPC's body is
//! capped by what that RPC can need, the large-message RPC (`File`) runs a few at a
//! time, and connections are counted.
//!
//! Why here and not in the handlers: tonic decodes the whole message before the
//! handler runs, so a handler that checks the token has already buffered whatever
//! an anonymous caller sent (up to the message limit, per stream, per connection).

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http_body::Frame;
use stockade_client::{MAX_FILE_MESSAGE_BYTES, MAX_REQUEST_BYTES};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::Status;
use tonic::body::Body;
use tonic::codegen::{BoxFuture, Bytes, Service, http};
use tonic::server::NamedService;

use crate::auth::Auth;
use crate::handshake::{ConnState, Guarded, Handshakes};

/// The standing of the connection a request came on (plain TCP, TLS or the unix
/// socket).
fn conn_state(ext: &http::Extensions) -> Option<&Arc<ConnState>> {
    use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo, UdsConnectInfo};
    ext.get::<Guarded<TcpConnectInfo>>()
        .map(|g| &g.state)
        .or_else(|| {
            ext.get::<TlsConnectInfo<Guarded<TcpConnectInfo>>>()
                .map(|t| &t.get_ref().state)
        })
        .or_else(|| ext.get::<Guarded<UdsConnectInfo>>().map(|g| &g.state))
}

/// The authenticated tenant of a request, put in its extensions by [`Gate`].
#[derive(Clone, Debug)]
pub struct Tenant(pub String);

/// The largest body each RPC may send: `File` carries file contents and upload
/// archives (one unary message of up to the 32 MiB transfer limit: uploads do not
/// stream yet), `ConnectPort` a connection's bytes (no total), every other RPC a
/// spec, an argv, or some stdin.
pub fn body_limit(path: &str) -> usize {
    match path.rsplit('/').next() {
        Some("File") => MAX_FILE_MESSAGE_BYTES,
        // A port connection's bytes, for as long as it lives (each message is still
        // capped by the message limit; nothing of it is kept).
        Some("ConnectPort") => usize::MAX,
        _ => MAX_REQUEST_BYTES,
    }
}

/// The service behind the gate: authentication on headers, per-RPC body caps, and
/// at most `files` large-message RPCs at once.
#[derive(Clone)]
pub struct Gate<S> {
    inner: S,
    auth: Arc<Auth>,
    files: Arc<Semaphore>,
    via: Via,
    /// The daemon's own uid (its callers on the unix socket are local, as root is).
    own_uid: u32,
}

/// How a request reached the daemon (in its extensions): an owner pid means
/// something only from a unix socket, a process on the daemon's host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    Unix,
    Tcp,
}

impl<S> Gate<S> {
    /// `files`: how many `File` calls may hold their (up to 33 MiB) message at once.
    /// Requests count as local (unix socket) until [`Gate::via`] says otherwise.
    pub fn new(inner: S, auth: Auth, files: usize) -> Gate<S> {
        Gate {
            inner,
            auth: Arc::new(auth),
            files: Arc::new(Semaphore::new(files.max(1))),
            via: Via::Unix,
            own_uid: rustix::process::geteuid().as_raw(),
        }
    }

    /// The same gate (tokens and `File` slots shared) for one listener's requests.
    pub fn via(mut self, via: Via) -> Gate<S> {
        self.via = via;
        self
    }
}

impl<S: NamedService> NamedService for Gate<S> {
    const NAME: &'static str = S::NAME;
}

impl<S> Service<http::Request<Body>> for Gate<S>
where
    S: Service<http::Request<Body>, Response = http::Response<Body>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Infallible>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let (mut parts, body) = req.into_parts();
        // Refused on the headers alone: the body is dropped unread (the stream is
        // reset), so an anonymous caller costs at most the flow-control window.
        let tenant = match self.via {
            Via::Tcp => self.auth.tenant(&parts.headers),
            // On the unix socket, who the caller is comes from the kernel.
            Via::Unix => {
                let uid = parts
                    .extensions
                    .get::<Guarded<tonic::transport::server::UdsConnectInfo>>()
                    .and_then(|c| c.inner.peer_cred)
                    .map(|c| c.uid());
                self.auth
                    .tenant_on_socket(&parts.headers, uid, self.own_uid)
            }
        };
        let tenant = match tenant {
            Ok(t) => t,
            Err(status) => return Box::pin(async move { Ok(status.into_http()) }),
        };
        if let Some(state) = conn_state(&parts.extensions) {
            state.authenticated();
        }
        parts.extensions.insert(Tenant(tenant));
        parts.extensions.insert(self.via);
        let path = parts.uri.path().to_string();
        let limit = body_limit(&path);
        let body = Body::new(Capped {
            inner: body,
            left: limit,
            limit,
            rpc: path.rsplit('/').next().unwrap_or("").to_string(),
        });
        let req = http::Request::from_parts(parts, body);
        let files = (limit == MAX_FILE_MESSAGE_BYTES).then(|| self.files.clone());
        // The clone that was made ready is the one that serves this call.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        Box::pin(async move {
            let _permit = match files {
                Some(s) => s.acquire_owned().await.ok(),
                None => None,
            };
            inner.call(req).await
        })
    }
}

/// A request body that fails once it has carried more than `limit` bytes.
struct Capped {
    inner: Body,
    left: usize,
    limit: usize,
    rpc: String,
}

impl http_body::Body for Capped {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let f = std::task::ready!(Pin::new(&mut self.inner).poll_frame(cx));
        if let Some(Ok(frame)) = &f
            && let Some(data) = frame.data_ref()
        {
            if data.len() > self.left {
                let (rpc, limit) = (self.rpc.clone(), self.limit);
                return Poll::Ready(Some(Err(Status::resource_exhausted(format!(
                    "the {rpc} request is larger than its {limit}-byte limit \
                     (move large data with file uploads, in parts of at most 32 MiB)"
                )))));
            }
            self.left -= data.len();
        }
        Poll::Ready(f)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// A connection that holds one of the daemon's connection slots while it is open,
/// and is closed if it does not authenticate in time ([`crate::handshake`]).
pub struct Counted<IO> {
    io: IO,
    _slot: OwnedSemaphorePermit,
    state: Arc<ConnState>,
}

impl<IO> Counted<IO> {
    pub fn new(io: IO, slot: OwnedSemaphorePermit, state: Arc<ConnState>) -> Counted<IO> {
        Counted {
            io,
            _slot: slot,
            state,
        }
    }

    /// The connection's standing in the handshake budget.
    pub fn state(&self) -> &Arc<ConnState> {
        &self.state
    }
}

impl<IO: tonic::transport::server::Connected> tonic::transport::server::Connected for Counted<IO> {
    type ConnectInfo = Guarded<IO::ConnectInfo>;
    fn connect_info(&self) -> Self::ConnectInfo {
        Guarded {
            inner: self.io.connect_info(),
            state: self.state.clone(),
        }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Counted<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if let Some(e) = self.state.poll_refused(cx) {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Counted<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

/// `incoming` holding one of `slots` per open connection: when none is left, the
/// next accept waits for one (new connections queue in the kernel's backlog). Each
/// connection is pending in `handshakes` until it authenticates. The listeners of one
/// daemon share their slots and their handshake budget.
pub fn counted<S, IO, E>(
    incoming: S,
    slots: Arc<Semaphore>,
    handshakes: Arc<Handshakes>,
) -> impl tokio_stream::Stream<Item = Result<Counted<IO>, E>>
where
    S: tokio_stream::Stream<Item = Result<IO, E>>,
{
    futures_util::stream::unfold(
        (Box::pin(incoming), slots, handshakes),
        |(mut incoming, slots, handshakes)| async move {
            let slot = slots.clone().acquire_owned().await.ok()?;
            let next = tokio_stream::StreamExt::next(&mut incoming).await?;
            let conn = next.map(|io| Counted::new(io, slot, handshakes.open()));
            Some((conn, (incoming, slots, handshakes)))
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_file_gets_the_large_limit() {
        assert_eq!(
            body_limit("/stockade.v1.Stockade/File"),
            MAX_FILE_MESSAGE_BYTES
        );
        for rpc in ["Create", "Exec", "ExecStream", "ExecInput", "PoolWarm", "X"] {
            assert_eq!(
                body_limit(&format!("/stockade.v1.Stockade/{rpc}")),
                MAX_REQUEST_BYTES
            );
        }
        const { assert!(MAX_REQUEST_BYTES < MAX_FILE_MESSAGE_BYTES) };
    }
}
