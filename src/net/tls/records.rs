//! [`RecordCounter`]: counts TLS records in a byte stream as it passes, by
//! their 5-byte headers, however the stream is split into reads. The TLS
//! layer's read budget charges each record (see `TlsIo::charge`): a record
//! costs far more to process than its bytes, and a peer chooses how many
//! records its bytes make.

/// Where the stream is: inside a record's body, or inside a header.
#[derive(Default)]
pub(crate) struct RecordCounter {
    /// Bytes of the current record's body still to come.
    body_left: usize,
    /// Bytes of the current header seen (0 to 4).
    seen: u8,
    /// The header's first length byte.
    len_hi: u8,
}

impl RecordCounter {
    /// Takes the next bytes of the stream; returns how many record headers
    /// ended in them.
    pub(crate) fn count(&mut self, mut bytes: &[u8]) -> usize {
        let mut n = 0;
        while !bytes.is_empty() {
            if self.body_left > 0 {
                let k = self.body_left.min(bytes.len());
                self.body_left -= k;
                bytes = &bytes[k..];
                continue;
            }
            // A header: type, version (2), length (2, big-endian).
            match self.seen {
                3 => self.len_hi = bytes[0],
                4 => {
                    self.body_left = usize::from(u16::from_be_bytes([self.len_hi, bytes[0]]));
                    n += 1;
                }
                _ => {}
            }
            self.seen = (self.seen + 1) % 5;
            bytes = &bytes[1..];
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stream of records of many lengths (empty ones too), fed in pieces
    /// of every size from 1 to 40 bytes and at random: always the count.
    #[test]
    fn records_are_counted_however_the_stream_is_split() {
        let lens = [0usize, 1, 4, 5, 22, 300, 16384 + 256, 3, 0, 0, 70];
        let mut stream = Vec::new();
        for (i, &len) in lens.iter().enumerate() {
            let [hi, lo] = (len as u16).to_be_bytes();
            stream.extend_from_slice(&[23, 3, 3, hi, lo]);
            stream.extend(std::iter::repeat_n(i as u8, len));
        }
        let mut seed = 0x9e37_79b9_u32;
        for piece in 1..=41 {
            let mut c = RecordCounter::default();
            let mut n = 0;
            let mut at = 0;
            while at < stream.len() {
                // Piece 41: pseudo-random sizes, 1 to 64.
                let k = if piece == 41 {
                    seed ^= seed << 13;
                    seed ^= seed >> 17;
                    seed ^= seed << 5;
                    1 + (seed % 64) as usize
                } else {
                    piece
                };
                let end = (at + k).min(stream.len());
                n += c.count(&stream[at..end]);
                at = end;
            }
            assert_eq!(n, lens.len(), "pieces of {piece}");
            assert_eq!((c.body_left, c.seen), (0, 0), "at a record boundary");
        }
    }
}
