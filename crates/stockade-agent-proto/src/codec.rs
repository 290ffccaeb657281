//! Length-prefixed postcard frames, blocking and (feature `tokio`) async.

use std::io::{self, Read, Write};

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::MAX_FRAME_BYTES;

/// A framing or decoding failure.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    #[error("agent connection: {0}")]
    Io(#[from] io::Error),
    #[error("agent frame of {0} bytes exceeds the {MAX_FRAME_BYTES}-byte limit")]
    TooLarge(u32),
    #[error("cannot decode agent message: {0}")]
    Decode(#[from] postcard::Error),
}

/// Encodes one message as a frame.
pub fn encode<T: Serialize>(msg: &T) -> Result<Vec<u8>, CodecError> {
    let mut buf = vec![0u8; 4];
    buf = postcard::to_extend(msg, buf)?;
    let len = u32::try_from(buf.len() - 4).map_err(|_| CodecError::TooLarge(u32::MAX))?;
    if len > MAX_FRAME_BYTES {
        return Err(CodecError::TooLarge(len));
    }
    buf[..4].copy_from_slice(&len.to_le_bytes());
    Ok(buf)
}

/// Writes one frame.
pub fn write_msg<W: Write, T: Serialize>(w: &mut W, msg: &T) -> Result<(), CodecError> {
    w.write_all(&encode(msg)?)?;
    Ok(())
}

/// Reads one frame; `Ok(None)` at a clean end of stream.
pub fn read_msg<R: Read, T: DeserializeOwned>(r: &mut R) -> Result<Option<T>, CodecError> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let len = u32::from_le_bytes(len);
    if len > MAX_FRAME_BYTES {
        return Err(CodecError::TooLarge(len));
    }
    let mut buf = vec![0u8; len as usize];
    r.read_exact(&mut buf)?;
    Ok(Some(postcard::from_bytes(&buf)?))
}

/// Async framing over tokio streams.
#[cfg(feature = "tokio")]
pub mod asynch {
    use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

    use super::*;

    /// Writes one frame.
    pub async fn write_msg<W: AsyncWrite + Unpin, T: Serialize>(
        w: &mut W,
        msg: &T,
    ) -> Result<(), CodecError> {
        w.write_all(&encode(msg)?).await?;
        Ok(())
    }

    /// Reads one frame; `Ok(None)` at a clean end of stream.
    pub async fn read_msg<R: AsyncRead + Unpin, T: DeserializeOwned>(
        r: &mut R,
    ) -> Result<Option<T>, CodecError> {
        let mut len = [0u8; 4];
        match r.read_exact(&mut len).await {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
            Err(e) => return Err(e.into()),
        }
        let len = u32::from_le_bytes(len);
        if len > MAX_FRAME_BYTES {
            return Err(CodecError::TooLarge(len));
        }
        let mut buf = vec![0u8; len as usize];
        r.read_exact(&mut buf).await?;
        Ok(Some(postcard::from_bytes(&buf)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AgentMsg, ClientMsg, ExecOutcome, ExecRequest};

    #[test]
    fn signal_and_exec_as_leave_the_older_messages_bytes_alone() {
        // The variant indexes older agents know are unchanged (postcard encodes the
        // index first): Kill is still 5, File 6; the new ones come after.
        assert_eq!(encode(&ClientMsg::Kill).unwrap()[4..], [5]);
        assert_eq!(encode(&ClientMsg::Signal(15)).unwrap()[4..], [7, 30]);
        // A request's uid is not in its bytes: an `Exec` is what it always was.
        let mut req = ExecRequest::new(["true"]);
        let plain = encode(&ClientMsg::Exec(req.clone())).unwrap();
        req.uid = Some(0);
        assert_eq!(encode(&ClientMsg::Exec(req.clone())).unwrap(), plain);
        let as_root = encode(&ClientMsg::ExecAs {
            uid: 0,
            req: req.clone(),
        })
        .unwrap();
        let back: ClientMsg = read_msg(&mut &as_root[..]).unwrap().unwrap();
        match back {
            ClientMsg::ExecAs { uid: 0, req: r } => assert_eq!(r.argv, req.argv),
            other => panic!("decoded as {other:?}"),
        }
    }

    #[test]
    fn round_trips_messages() {
        let mut buf = Vec::new();
        let req = ClientMsg::Exec(ExecRequest::new(["echo", "hi"]));
        write_msg(&mut buf, &ClientMsg::Hello { version: 1 }).unwrap();
        write_msg(&mut buf, &req).unwrap();
        let out = AgentMsg::Exited(ExecOutcome {
            exit_code: 3,
            stdout: vec![0, 255, 1],
            ..Default::default()
        });
        write_msg(&mut buf, &out).unwrap();
        let mut r = &buf[..];
        assert_eq!(
            read_msg::<_, ClientMsg>(&mut r).unwrap(),
            Some(ClientMsg::Hello { version: 1 })
        );
        assert_eq!(read_msg::<_, ClientMsg>(&mut r).unwrap(), Some(req));
        assert_eq!(read_msg::<_, AgentMsg>(&mut r).unwrap(), Some(out));
        assert_eq!(read_msg::<_, AgentMsg>(&mut r).unwrap(), None);
    }

    #[test]
    fn refuses_oversized_frames() {
        let mut bytes = (MAX_FRAME_BYTES + 1).to_le_bytes().to_vec();
        bytes.extend([0; 8]);
        let err = read_msg::<_, ClientMsg>(&mut &bytes[..]).unwrap_err();
        assert!(matches!(err, CodecError::TooLarge(_)), "{err}");
    }

    #[test]
    fn garbage_is_a_decode_error_not_a_panic() {
        let mut bytes = 3u32.to_le_bytes().to_vec();
        bytes.extend([0xff, 0xff, 0xff]);
        assert!(read_msg::<_, ClientMsg>(&mut &bytes[..]).is_err());
    }
}
