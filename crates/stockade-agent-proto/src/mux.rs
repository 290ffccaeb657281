//! Many agent connections over one byte stream: the microVM's virtio-serial port.
//!
//! The agent protocol opens one connection per request (an exec stays open while it
//! runs, file operations and pings come and go beside it), but a VM without vsock has
//! one serial port. Both ends of the port run this small multiplexer: the host side
//! (`stockade-agent vm-host`) accepts unix connections and turns each into a stream;
//! the guest side (PID 1 of the VM) connects each stream to the agent's own socket.
//!
//! A frame is `stream id (u32 BE) | kind (u8) | length (u32 BE) | payload`. Streams are
//! opened by the host only. [`Kind::Reset`] starts a new host session: the guest drops
//! every stream it had (after a resume or a fork, those belonged to a host side that
//! is gone) and takes the identity in its payload ([`Identity`]).

use std::io::{self, Read, Write};

use serde::{Deserialize, Serialize};

/// The largest payload of one frame.
pub const MAX_FRAME: usize = 64 * 1024;

/// What a frame says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// Host to guest: a new host session; payload = [`Identity`] as JSON.
    Reset = 0,
    /// Host to guest: a new stream.
    Open = 1,
    /// Bytes of a stream.
    Data = 2,
    /// The sender will write no more on this stream (half close).
    Eof = 3,
    /// The stream is gone in both directions.
    Close = 4,
}

impl Kind {
    fn from_u8(b: u8) -> Option<Kind> {
        Some(match b {
            0 => Kind::Reset,
            1 => Kind::Open,
            2 => Kind::Data,
            3 => Kind::Eof,
            4 => Kind::Close,
            _ => return None,
        })
    }
}

/// One frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    pub stream: u32,
    pub kind: Kind,
    pub payload: Vec<u8>,
}

/// Who the guest is in this host session: a fork gets its own.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Identity {
    /// The guest's hostname (the sandbox id).
    pub hostname: String,
    /// Bytes mixed into the guest's random pool, so copies of one snapshot do not
    /// draw the same numbers.
    pub seed: Vec<u8>,
    /// The host's wall clock (unix ms): a restored guest's clock stopped while it
    /// was paused.
    pub unix_ms: u64,
}

/// Writes one frame in a single `write_all` (callers share the writer under a lock).
pub fn write_frame<W: Write>(w: &mut W, stream: u32, kind: Kind, payload: &[u8]) -> io::Result<()> {
    if payload.len() > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("a mux frame of {} bytes is over {MAX_FRAME}", payload.len()),
        ));
    }
    let mut buf = Vec::with_capacity(9 + payload.len());
    buf.extend_from_slice(&stream.to_be_bytes());
    buf.push(kind as u8);
    buf.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    buf.extend_from_slice(payload);
    w.write_all(&buf)?;
    w.flush()
}

/// Reads one frame; `None` at a clean end of the stream.
pub fn read_frame<R: Read>(r: &mut R) -> io::Result<Option<Frame>> {
    let mut head = [0u8; 9];
    let mut got = 0;
    while got < head.len() {
        match r.read(&mut head[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let stream = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
    let kind = Kind::from_u8(head[4]).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("mux frame kind {} is not known", head[4]),
        )
    })?;
    let len = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) as usize;
    if len > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("mux frame of {len} bytes is over {MAX_FRAME}"),
        ));
    }
    let mut payload = vec![0u8; len];
    r.read_exact(&mut payload)?;
    Ok(Some(Frame {
        stream,
        kind,
        payload,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_bad_ones_are_refused() {
        let mut buf = Vec::new();
        write_frame(&mut buf, 7, Kind::Data, b"hello").unwrap();
        write_frame(&mut buf, 7, Kind::Eof, b"").unwrap();
        let mut r = &buf[..];
        let f = read_frame(&mut r).unwrap().unwrap();
        assert_eq!(
            (f.stream, f.kind, &f.payload[..]),
            (7, Kind::Data, &b"hello"[..])
        );
        assert_eq!(read_frame(&mut r).unwrap().unwrap().kind, Kind::Eof);
        assert!(read_frame(&mut r).unwrap().is_none());
        let bad = [0, 0, 0, 1, 9, 0, 0, 0, 0];
        assert!(read_frame(&mut &bad[..]).is_err());
        let huge = [0, 0, 0, 1, 2, 0xff, 0xff, 0xff, 0xff];
        assert!(read_frame(&mut &huge[..]).is_err());
        assert!(write_frame(&mut Vec::new(), 1, Kind::Data, &vec![0; MAX_FRAME + 1]).is_err());
    }
}
