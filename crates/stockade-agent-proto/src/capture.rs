//! Bounded output capture: keeps the head and the tail of a stream, counts the rest.

use std::collections::VecDeque;

/// Captures at most `limit` bytes of a stream: the first half and the last half, with
/// the number of bytes dropped in between. Memory use never exceeds `limit`.
#[derive(Debug, Clone)]
pub struct BoundedCapture {
    limit: usize,
    head: Vec<u8>,
    tail: VecDeque<u8>,
    dropped: u64,
}

impl BoundedCapture {
    /// A capture keeping at most `limit` bytes.
    pub fn new(limit: u64) -> Self {
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        BoundedCapture {
            limit,
            head: Vec::new(),
            tail: VecDeque::new(),
            dropped: 0,
        }
    }

    fn head_cap(&self) -> usize {
        self.limit - self.limit / 2
    }

    fn tail_cap(&self) -> usize {
        self.limit / 2
    }

    /// Bytes seen so far that are kept in the head (and so may be streamed live).
    pub fn head_len(&self) -> usize {
        self.head.len()
    }

    /// Adds bytes. Returns the prefix of `data` that went into the head, which callers
    /// stream live; the rest is kept only as the tail.
    pub fn push<'a>(&mut self, data: &'a [u8]) -> &'a [u8] {
        let room = self.head_cap().saturating_sub(self.head.len());
        let (to_head, rest) = data.split_at(room.min(data.len()));
        self.head.extend_from_slice(to_head);
        let tail_cap = self.tail_cap();
        if tail_cap == 0 {
            self.dropped += rest.len() as u64;
            return to_head;
        }
        // Only the last tail_cap bytes of `rest` can survive.
        let skip = rest.len().saturating_sub(tail_cap);
        self.dropped += skip as u64;
        let rest = &rest[skip..];
        let overflow = (self.tail.len() + rest.len()).saturating_sub(tail_cap);
        self.tail.drain(..overflow);
        self.dropped += overflow as u64;
        self.tail.extend(rest);
        to_head
    }

    /// Whether any bytes were dropped.
    pub fn truncated(&self) -> bool {
        self.dropped > 0
    }

    /// Bytes dropped between head and tail.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// The head followed by the tail (the dropped middle is left out).
    pub fn into_bytes(self) -> Vec<u8> {
        let mut out = self.head;
        out.extend(self.tail);
        out
    }

    /// The bytes kept after the head (the part not streamed live).
    pub fn tail_bytes(&self) -> Vec<u8> {
        self.tail.iter().copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_everything_under_the_limit() {
        let mut c = BoundedCapture::new(10);
        assert_eq!(c.push(b"hello"), b"hello");
        assert_eq!(c.push(b"abc"), b"");
        assert!(!c.truncated());
        assert_eq!(c.into_bytes(), b"helloabc");
    }

    #[test]
    fn keeps_head_and_tail_and_counts_the_middle() {
        let mut c = BoundedCapture::new(10);
        for chunk in [&b"0123456789"[..], b"abcdefghij", b"ABCDE"] {
            c.push(chunk);
        }
        assert_eq!(c.dropped(), 15);
        assert!(c.truncated());
        assert_eq!(c.into_bytes(), b"01234ABCDE");
    }

    #[test]
    fn huge_single_push_is_bounded() {
        let mut c = BoundedCapture::new(4);
        let data = vec![b'x'; 1_000_000];
        c.push(&data);
        c.push(b"yz");
        assert_eq!(c.dropped(), 1_000_000 - 2);
        assert_eq!(c.into_bytes(), b"xxyz");
    }

    #[test]
    fn zero_limit_drops_everything() {
        let mut c = BoundedCapture::new(0);
        assert_eq!(c.push(b"abc"), b"");
        assert_eq!(c.dropped(), 3);
        assert!(c.into_bytes().is_empty());
    }
}
