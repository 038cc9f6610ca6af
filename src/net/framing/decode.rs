//! The pure decoders: lines and length-prefixed messages, no I/O.
//! Tests: below (against one-shot parsing, at every split point), and the
//! fuzz targets in fuzz/.

use super::FrameError;
use crate::Error;

/// Splits a byte stream into lines ending with a delimiter (Twisted's
/// `LineReceiver`, default `b"\r\n"` and 16 KiB as there).
///
/// # Examples
/// ```
/// use deferloop::net::framing::LineDecoder;
///
/// let mut d = LineDecoder::new(b"\n", 100).unwrap();
/// let mut lines = Vec::new();
/// d.feed(b"one\ntw", |l| { lines.push(l.to_vec()); true }).unwrap();
/// d.feed(b"o\n", |l| { lines.push(l.to_vec()); true }).unwrap();
/// assert_eq!(lines, [b"one".to_vec(), b"two".to_vec()]);
/// ```
#[derive(Debug, Clone)]
pub struct LineDecoder {
    delimiter: Box<[u8]>,
    max_line: usize,
    /// The start of a line whose end has not arrived.
    partial: Vec<u8>,
}

/// Twisted's `LineReceiver.MAX_LENGTH`.
pub const DEFAULT_MAX_LINE: usize = 16 * 1024;

impl LineDecoder {
    /// A decoder for lines ending with `delimiter`, at most `max_line` bytes
    /// long (without the delimiter; `usize::MAX` for no limit, which holds a
    /// peer's line however long it grows).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for an empty delimiter.
    pub fn new(delimiter: &[u8], max_line: usize) -> Result<LineDecoder, Error> {
        if delimiter.is_empty() {
            return Err(Error::InvalidInput("line delimiter must not be empty"));
        }
        Ok(LineDecoder {
            delimiter: delimiter.into(),
            max_line,
            partial: Vec::new(),
        })
    }

    /// Bytes held for a line not yet complete (at most `max_line +
    /// delimiter.len() - 1`).
    pub fn buffered(&self) -> usize {
        self.partial.len()
    }

    /// Whether a line has begun and not ended.
    pub(crate) fn mid_frame(&self) -> bool {
        !self.partial.is_empty()
    }

    /// Feeds `data`; calls `on_line` with each complete line (delimiter
    /// stripped). `on_line` returns `false` to stop: the rest of `data` is
    /// then dropped (the connection is going away).
    ///
    /// # Errors
    /// [`FrameError::LineTooLong`] as soon as a line is known to be over the
    /// limit; lines before it were delivered, the decoder keeps nothing.
    pub fn feed(
        &mut self,
        data: &[u8],
        on_line: impl FnMut(&[u8]) -> bool,
    ) -> Result<(), FrameError> {
        self.feed_counted(data, on_line).map(drop)
    }

    /// As [`feed`](Self::feed); returns how much of `data` was used: all of
    /// it, unless `on_line` stopped, then up to the end of that line (so
    /// the rest can be fed later).
    pub(crate) fn feed_counted(
        &mut self,
        data: &[u8],
        mut on_line: impl FnMut(&[u8]) -> bool,
    ) -> Result<usize, FrameError> {
        let k = self.delimiter.len();
        let mut rest = data;
        // A line started in an earlier read: find where it ends, which may be
        // inside a delimiter split across the two reads.
        if !self.partial.is_empty() {
            let Some(end) = self.end_of_partial(data) else {
                return self.keep_partial(data).map(|()| data.len());
            };
            // Checked before copying: the rest of the line may be a whole read.
            let line_len = self.partial.len() + end - k;
            if line_len > self.max_line {
                return Err(self.too_long(line_len));
            }
            self.partial.extend_from_slice(&data[..end]);
            rest = &data[end..];
            let go_on = on_line(&self.partial[..line_len]);
            release(&mut self.partial);
            if !go_on {
                return Ok(end);
            }
        }
        // Whole lines straight from `data`.
        while let Some(at) = find(rest, &self.delimiter) {
            if at > self.max_line {
                return Err(self.too_long(at));
            }
            let line = &rest[..at];
            rest = &rest[at + k..];
            if !on_line(line) {
                return Ok(data.len() - rest.len());
            }
        }
        self.keep_partial(rest).map(|()| data.len())
    }

    /// Where in `data` the partial line's delimiter ends, if it does.
    fn end_of_partial(&self, data: &[u8]) -> Option<usize> {
        let k = self.delimiter.len();
        // The delimiter may start in the last k-1 bytes kept.
        for back in (1..k).rev() {
            if back > self.partial.len() || k - back > data.len() {
                continue;
            }
            let tail = &self.partial[self.partial.len() - back..];
            if tail == &self.delimiter[..back] && data[..k - back] == self.delimiter[back..] {
                return Some(k - back);
            }
        }
        find(data, &self.delimiter).map(|at| at + k)
    }

    /// Keeps `rest` (no delimiter in it) as the start of the next line,
    /// refusing it if the line is already too long to be valid.
    fn keep_partial(&mut self, rest: &[u8]) -> Result<(), FrameError> {
        let total = self.partial.len() + rest.len();
        // Up to k-1 trailing bytes may be the start of the delimiter.
        if total > self.max_line.saturating_add(self.delimiter.len() - 1) {
            return Err(self.too_long(total));
        }
        self.partial.extend_from_slice(rest);
        Ok(())
    }

    fn too_long(&mut self, seen: usize) -> FrameError {
        self.partial = Vec::new();
        FrameError::LineTooLong {
            limit: self.max_line,
            seen,
        }
    }
}

/// The first position of `needle` in `hay`.
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    match needle {
        [b] => hay.iter().position(|x| x == b),
        [first, rest @ ..] => {
            let mut from = 0;
            while let Some(i) = hay[from..].iter().position(|x| x == first) {
                let at = from + i;
                if hay.len() - at > rest.len() && hay[at + 1..at + 1 + rest.len()] == *rest {
                    return Some(at);
                }
                from = at + 1;
            }
            None
        }
        [] => None,
    }
}

/// The size of a length prefix: big-endian `u16` or `u32` (Twisted's
/// `Int16StringReceiver`, `Int32StringReceiver`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prefix {
    /// Two bytes, messages up to 65,535 bytes.
    U16,
    /// Four bytes.
    U32,
}

impl Prefix {
    fn len(self) -> usize {
        match self {
            Prefix::U16 => 2,
            Prefix::U32 => 4,
        }
    }

    fn decode(self, b: &[u8]) -> usize {
        match self {
            Prefix::U16 => u16::from_be_bytes([b[0], b[1]]) as usize,
            Prefix::U32 => u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize,
        }
    }

    /// The prefix for a message of `len` bytes, or `None` if it does not fit.
    pub fn encode(self, len: usize) -> Option<PrefixBytes> {
        match self {
            Prefix::U16 => u16::try_from(len).ok().map(|n| {
                let b = n.to_be_bytes();
                PrefixBytes([b[0], b[1], 0, 0], 2)
            }),
            Prefix::U32 => u32::try_from(len)
                .ok()
                .map(|n| PrefixBytes(n.to_be_bytes(), 4)),
        }
    }
}

/// An encoded length prefix (see [`Prefix::encode`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrefixBytes([u8; 4], usize);

impl AsRef<[u8]> for PrefixBytes {
    fn as_ref(&self) -> &[u8] {
        &self.0[..self.1]
    }
}

/// Splits a byte stream into length-prefixed messages.
///
/// # Examples
/// ```
/// use deferloop::net::framing::{LengthDecoder, Prefix};
///
/// let mut d = LengthDecoder::new(Prefix::U16, 1024);
/// let mut got = Vec::new();
/// d.feed(&[0, 3, b'a', b'b'], |m| { got.push(m.to_vec()); true }).unwrap();
/// d.feed(&[b'c', 0, 0], |m| { got.push(m.to_vec()); true }).unwrap();
/// assert_eq!(got, [b"abc".to_vec(), Vec::new()]);
/// ```
#[derive(Debug, Clone)]
pub struct LengthDecoder {
    prefix: Prefix,
    max: usize,
    /// The prefix (while incomplete), then the message (while incomplete).
    partial: Vec<u8>,
    /// The size of the message being assembled, once its prefix is known.
    want: Option<usize>,
}

impl LengthDecoder {
    /// A decoder for `prefix`-sized lengths, refusing messages over `max` bytes.
    pub fn new(prefix: Prefix, max: usize) -> LengthDecoder {
        LengthDecoder {
            prefix,
            max,
            partial: Vec::new(),
            want: None,
        }
    }

    /// Bytes held for a message not yet complete (at most `max`).
    pub fn buffered(&self) -> usize {
        self.partial.len()
    }

    /// Whether a message has begun and not ended: part of its prefix, or
    /// its whole prefix (even with none of its bytes yet).
    pub(crate) fn mid_frame(&self) -> bool {
        self.want.is_some() || !self.partial.is_empty()
    }

    /// Feeds `data`; calls `on_message` with each complete message.
    /// `on_message` returns `false` to stop (the rest is dropped).
    ///
    /// # Errors
    /// [`FrameError::MessageTooLarge`] as soon as a prefix over the limit is
    /// read — before anything is allocated for it.
    pub fn feed(
        &mut self,
        data: &[u8],
        on_message: impl FnMut(&[u8]) -> bool,
    ) -> Result<(), FrameError> {
        self.feed_counted(data, on_message).map(drop)
    }

    /// As [`feed`](Self::feed); returns how much of `input` was used: all
    /// of it, unless `on_message` stopped, then up to the end of that
    /// message (so the rest can be fed later).
    pub(crate) fn feed_counted(
        &mut self,
        input: &[u8],
        mut on_message: impl FnMut(&[u8]) -> bool,
    ) -> Result<usize, FrameError> {
        let p = self.prefix.len();
        let mut data = input;
        let used = |rest: &[u8]| input.len() - rest.len();
        loop {
            match self.want {
                None if self.partial.is_empty() && data.len() >= p => {
                    // Zero-copy path: prefix (and maybe the message) in `data`.
                    let size = self.check(self.prefix.decode(&data[..p]))?;
                    data = &data[p..];
                    if data.len() >= size {
                        let message = &data[..size];
                        data = &data[size..];
                        if !on_message(message) {
                            return Ok(used(data));
                        }
                    } else {
                        self.want = Some(size);
                        self.partial.extend_from_slice(data);
                        return Ok(input.len());
                    }
                }
                None => {
                    let take = (p - self.partial.len()).min(data.len());
                    self.partial.extend_from_slice(&data[..take]);
                    data = &data[take..];
                    if self.partial.len() < p {
                        return Ok(input.len());
                    }
                    let size = self.check(self.prefix.decode(&self.partial))?;
                    self.partial.clear();
                    self.want = Some(size);
                }
                Some(size) => {
                    let take = (size - self.partial.len()).min(data.len());
                    self.partial.extend_from_slice(&data[..take]);
                    data = &data[take..];
                    if self.partial.len() < size {
                        return Ok(input.len());
                    }
                    self.want = None;
                    let go_on = on_message(&self.partial);
                    release(&mut self.partial);
                    if !go_on {
                        return Ok(used(data));
                    }
                }
            }
            if data.is_empty() && self.want.is_none() {
                return Ok(input.len());
            }
        }
    }

    fn check(&mut self, size: usize) -> Result<usize, FrameError> {
        if size > self.max {
            self.partial = Vec::new();
            self.want = None;
            return Err(FrameError::MessageTooLarge {
                size,
                limit: self.max,
            });
        }
        Ok(size)
    }
}

/// What a decoder keeps of its partial-frame buffer once a frame is out.
const KEEP: usize = 4096;

/// Empties a delivered frame's buffer, and frees it if a long frame grew it:
/// a connection that once got a 16 MiB message does not hold 16 MiB after.
fn release(partial: &mut Vec<u8>) {
    if partial.capacity() > KEEP {
        *partial = Vec::new();
    } else {
        partial.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one_shot_lines(d: &[u8], data: &[u8], max: usize) -> Result<Vec<Vec<u8>>, FrameError> {
        let mut dec = LineDecoder::new(d, max).unwrap();
        let mut out = Vec::new();
        dec.feed(data, |l| {
            out.push(l.to_vec());
            true
        })?;
        Ok(out)
    }

    #[test]
    fn lines_split_at_every_point_match_one_shot() {
        for delim in [&b"\n"[..], b"\r\n", b"<END>"] {
            let mut data = Vec::new();
            for (i, w) in ["a", "", "hello world", "x", "last one"].iter().enumerate() {
                data.extend_from_slice(w.as_bytes());
                if i < 4 {
                    data.extend_from_slice(delim);
                }
            }
            data.extend_from_slice(delim);
            let want = one_shot_lines(delim, &data, 64).unwrap();
            assert_eq!(want.len(), 5);
            for a in 0..=data.len() {
                for b in a..=data.len() {
                    let mut dec = LineDecoder::new(delim, 64).unwrap();
                    let mut got = Vec::new();
                    for part in [&data[..a], &data[a..b], &data[b..]] {
                        dec.feed(part, |l| {
                            got.push(l.to_vec());
                            true
                        })
                        .unwrap();
                    }
                    assert_eq!(got, want, "delim {delim:?} split at {a},{b}");
                    assert_eq!(dec.buffered(), 0);
                }
            }
        }
    }

    #[test]
    fn a_line_over_the_limit_is_refused_before_it_is_buffered() {
        let mut dec = LineDecoder::new(b"\r\n", 8).unwrap();
        // 8 bytes plus the first half of the delimiter may still be a valid line.
        dec.feed(b"12345678\r", |_| true).unwrap();
        assert_eq!(dec.buffered(), 9);
        let e = dec.feed(b"x", |_| true).unwrap_err();
        assert_eq!(e, FrameError::LineTooLong { limit: 8, seen: 10 });
        assert_eq!(dec.buffered(), 0);
        // Exactly at the limit is fine, whole or split.
        assert_eq!(one_shot_lines(b"\n", b"12345678\n", 8).unwrap().len(), 1);
        assert!(one_shot_lines(b"\n", b"123456789\n", 8).is_err());
        let mut dec = LineDecoder::new(b"\n", 8).unwrap();
        let mut n = 0;
        dec.feed(b"1234", |_| true).unwrap();
        dec.feed(b"5678\nab", |_| {
            n += 1;
            true
        })
        .unwrap();
        assert_eq!((n, dec.buffered()), (1, 2));
        assert!(dec.feed(b"cdefghijk", |_| true).is_err());
    }

    #[test]
    fn lines_before_the_bad_one_are_delivered_and_stopping_drops_the_rest() {
        let mut got = Vec::new();
        let mut dec = LineDecoder::new(b"\n", 3).unwrap();
        let e = dec.feed(b"ab\ncd\ntoolong\nzz\n", |l| {
            got.push(l.to_vec());
            true
        });
        assert!(e.is_err());
        assert_eq!(got, [b"ab".to_vec(), b"cd".to_vec()]);
        let mut dec = LineDecoder::new(b"\n", 3).unwrap();
        let mut n = 0;
        dec.feed(b"a\nb\nc", |_| {
            n += 1;
            false
        })
        .unwrap();
        assert_eq!((n, dec.buffered()), (1, 0));
        assert!(LineDecoder::new(b"", 3).is_err());
    }

    /// A stopped feed says where it stopped, and feeding the rest from
    /// there gives the frames a whole feed would: a line split across two
    /// reads, and a message split across two reads, included.
    #[test]
    fn a_stopped_feed_resumes_where_it_stopped() {
        let mut dec = LineDecoder::new(b"\r\n", 8).unwrap();
        dec.feed(b"sp", |_| true).unwrap();
        let input = b"lit\r\nb\r\nc\r\nd";
        let mut got = Vec::new();
        let mut at = 0;
        while at < input.len() {
            at += dec
                .feed_counted(&input[at..], |l| {
                    got.push(l.to_vec());
                    false
                })
                .unwrap();
        }
        assert_eq!(got, [&b"split"[..], b"b", b"c"]);
        assert_eq!(dec.buffered(), 1);

        let mut dec = LengthDecoder::new(Prefix::U16, 8);
        dec.feed(&[0, 3, b'a'], |_| true).unwrap();
        let input = [b'b', b'c', 0, 0, 0, 1, b'x', 0];
        let mut got = Vec::new();
        let mut at = 0;
        while at < input.len() {
            at += dec
                .feed_counted(&input[at..], |m| {
                    got.push(m.to_vec());
                    false
                })
                .unwrap();
        }
        assert_eq!(got, [&b"abc"[..], b"", b"x"]);
        assert_eq!(dec.buffered(), 1);
    }

    #[test]
    fn messages_split_at_every_point_match_one_shot() {
        for prefix in [Prefix::U16, Prefix::U32] {
            let mut data = Vec::new();
            let msgs: [&[u8]; 4] = [b"", b"a", b"hello", &[7; 300]];
            for m in msgs {
                data.extend_from_slice(prefix.encode(m.len()).unwrap().as_ref());
                data.extend_from_slice(m);
            }
            for a in 0..=data.len() {
                for b in (a..=data.len()).step_by(7) {
                    let mut dec = LengthDecoder::new(prefix, 300);
                    let mut got = Vec::new();
                    for part in [&data[..a], &data[a..b], &data[b..]] {
                        dec.feed(part, |m| {
                            got.push(m.to_vec());
                            true
                        })
                        .unwrap();
                    }
                    let want: Vec<Vec<u8>> = msgs.iter().map(|m| m.to_vec()).collect();
                    assert_eq!(got, want, "{prefix:?} split at {a},{b}");
                    assert_eq!(dec.buffered(), 0);
                }
            }
        }
    }

    /// After a long frame split across reads, the buffer that held it is
    /// freed; a short one keeps its (small) buffer for the next.
    #[test]
    fn a_long_frame_s_buffer_is_freed_once_it_is_delivered() {
        let mut lines = LineDecoder::new(b"\n", 1 << 20).unwrap();
        let mut n = 0;
        let big = vec![b'x'; 100_000];
        lines.feed(&big, |_| unreachable!()).unwrap();
        assert!(lines.partial.capacity() >= 100_000);
        lines
            .feed(b"\nab", |l| {
                n += l.len();
                true
            })
            .unwrap();
        assert_eq!(n, 100_000);
        lines.feed(b"c\n", |_| true).unwrap();
        assert!(lines.partial.capacity() <= KEEP);

        let mut msgs = LengthDecoder::new(Prefix::U32, 1 << 20);
        let mut framed = 100_000u32.to_be_bytes().to_vec();
        framed.extend_from_slice(&big);
        let (head, tail) = framed.split_at(50_000);
        msgs.feed(head, |_| unreachable!()).unwrap();
        assert!(msgs.partial.capacity() >= 49_996);
        msgs.feed(tail, |m| m.len() == 100_000).unwrap();
        assert!(
            msgs.partial.capacity() <= KEEP,
            "{}",
            msgs.partial.capacity()
        );
    }

    #[test]
    fn an_oversize_prefix_is_refused_before_allocating() {
        let mut dec = LengthDecoder::new(Prefix::U32, 1024);
        let e = dec
            .feed(&[0xff, 0xff, 0xff, 0xff, 1, 2], |_| true)
            .unwrap_err();
        assert_eq!(
            e,
            FrameError::MessageTooLarge {
                size: u32::MAX as usize,
                limit: 1024
            }
        );
        assert_eq!(dec.buffered(), 0);
        assert_eq!(dec.partial.capacity(), 0, "nothing was allocated for it");
        let mut dec = LengthDecoder::new(Prefix::U16, 10);
        dec.feed(&[0], |_| true).unwrap();
        assert!(dec.feed(&[11], |_| true).is_err());
    }

    #[test]
    fn prefixes_encode_big_endian_and_refuse_what_does_not_fit() {
        assert_eq!(Prefix::U16.encode(258).unwrap().as_ref(), &[1, 2]);
        assert_eq!(Prefix::U32.encode(258).unwrap().as_ref(), &[0, 0, 1, 2]);
        assert!(Prefix::U16.encode(65_536).is_none());
    }
}
