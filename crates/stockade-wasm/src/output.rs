//! The guest's stdout and stderr: each goes into a [`BoundedCapture`] (head and tail
//! kept, the middle counted), and the head is also sent live when the caller asked.
//!
//! The live path never blocks the guest: the head of a stream is at most half the
//! output cap, so queueing it unbounded between the guest and the forwarding task
//! is bounded by that cap; the forwarding task is the one that waits for a slow
//! reader.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use stockade_core::{BoundedCapture, OutputChunk, OutputSender, Stream};
use tokio::io::AsyncWrite;
use tokio::sync::mpsc;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

use crate::lock;

/// Size of the chunks sent live (the forwarder joins small guest writes up to it).
const LIVE_CHUNK_BYTES: usize = 64 << 10;

/// One captured output stream of an exec.
#[derive(Clone)]
pub(crate) struct Capture {
    stream: Stream,
    buf: Arc<Mutex<BoundedCapture>>,
    live: Option<mpsc::UnboundedSender<OutputChunk>>,
}

impl Capture {
    /// A capture of `limit` bytes for `stream`, sending its head to `live`.
    pub fn new(
        stream: Stream,
        limit: u64,
        live: Option<mpsc::UnboundedSender<OutputChunk>>,
    ) -> Capture {
        Capture {
            stream,
            buf: Arc::new(Mutex::new(BoundedCapture::new(limit))),
            live,
        }
    }

    /// Adds bytes written by the guest (or by us, e.g. a trap message).
    pub fn push(&self, data: &[u8]) {
        let mut buf = lock(&self.buf);
        let head = buf.push(data);
        if let Some(live) = &self.live
            && !head.is_empty()
        {
            let _ = live.send(OutputChunk {
                stream: self.stream,
                data: head.to_vec(),
            });
        }
    }

    /// The bytes kept and the count dropped.
    pub fn finish(&self) -> (Vec<u8>, u64) {
        let buf = lock(&self.buf);
        (buf.clone().into_bytes(), buf.dropped())
    }
}

impl IsTerminal for Capture {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for Capture {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl OutputStream for Capture {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.push(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(1 << 20)
    }
}

#[async_trait::async_trait]
impl Pollable for Capture {
    async fn ready(&mut self) {}
}

impl AsyncWrite for Capture {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.push(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// Moves live chunks to the caller's sender, joining consecutive small chunks of
/// one stream. Ends when every capture is gone (the exec finished) or the caller
/// stopped listening.
pub(crate) async fn forward(mut rx: mpsc::UnboundedReceiver<OutputChunk>, to: OutputSender) {
    let mut pending: Option<OutputChunk> = None;
    loop {
        let next = match pending.take() {
            Some(c) => Some(c),
            None => rx.recv().await,
        };
        let Some(mut chunk) = next else { return };
        while chunk.data.len() < LIVE_CHUNK_BYTES {
            match rx.try_recv() {
                Ok(more) if more.stream == chunk.stream => chunk.data.extend(more.data),
                Ok(other) => {
                    pending = Some(other);
                    break;
                }
                Err(_) => break,
            }
        }
        if to.send(chunk).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn head_goes_live_and_all_is_capped() {
        let (tx, rx) = mpsc::unbounded_channel();
        let out = Capture::new(Stream::Stdout, 8, Some(tx.clone()));
        let err = Capture::new(Stream::Stderr, 8, Some(tx));
        out.push(b"ab");
        out.push(b"cd");
        err.push(b"E");
        out.push(b"efghijkl");
        let (bytes, dropped) = out.finish();
        assert_eq!(bytes, b"abcdijkl");
        assert_eq!(dropped, 4);
        drop((out, err));
        let (to, mut got) = mpsc::channel(16);
        forward(rx, to).await;
        let mut chunks = Vec::new();
        while let Ok(c) = got.try_recv() {
            chunks.push((c.stream, c.data));
        }
        assert_eq!(
            chunks,
            [
                (Stream::Stdout, b"abcd".to_vec()),
                (Stream::Stderr, b"E".to_vec())
            ]
        );
    }
}
