//! The length-prefixed decoder, fed an arbitrary stream cut at arbitrary
//! points, must deliver exactly what one-shot parsing and a naive reference
//! deliver, refuse an oversize prefix the same way, keep at most `max` bytes
//! between reads, and never allocate more than about twice that while fed.
#![no_main]

use deferloop::net::framing::{FrameError, LengthDecoder, Prefix};
use deferloop_fuzz::{feed_within_bound, Counting, Input};
use libfuzzer_sys::fuzz_target;

#[global_allocator]
static ALLOC: Counting = Counting;

type Outcome = (Vec<Vec<u8>>, Option<FrameError>);

fn feed_all(prefix: Prefix, max: usize, chunks: &[&[u8]]) -> (Outcome, usize) {
    let mut dec = LengthDecoder::new(prefix, max);
    let mut msgs = Vec::new();
    for c in chunks {
        let r = dec.feed(c, |m| {
            msgs.push(m.to_vec());
            true
        });
        assert!(dec.buffered() <= max.max(4), "buffered {}", dec.buffered());
        if let Err(e) = r {
            assert_eq!(dec.buffered(), 0, "keeps nothing after an error");
            return ((msgs, Some(e)), 0);
        }
    }
    let left = dec.buffered();
    ((msgs, None), left)
}

/// The reference: read a prefix, then that many bytes, until the end.
fn naive(p: usize, max: usize, data: &[u8]) -> Outcome {
    let mut msgs = Vec::new();
    let mut rest = data;
    while rest.len() >= p {
        let size = rest[..p].iter().fold(0usize, |n, &b| n << 8 | b as usize);
        if size > max {
            return (msgs, Some(FrameError::MessageTooLarge { size, limit: max }));
        }
        if rest.len() - p < size {
            break;
        }
        msgs.push(rest[p..p + size].to_vec());
        rest = &rest[p + size..];
    }
    (msgs, None)
}

fuzz_target!(|bytes: &[u8]| {
    let mut input = Input(bytes);
    let b = input.byte();
    let (prefix, p) = if b & 1 == 0 {
        (Prefix::U16, 2)
    } else {
        (Prefix::U32, 4)
    };
    let max = match b >> 1 {
        0..=99 => input.byte() as usize % 64,
        100..=125 => input.u16() as usize,
        _ => usize::MAX >> (input.byte() % 8),
    };
    let (chunks, data) = input.chunks();

    let (one, one_left) = feed_all(prefix, max, &[data]);
    let (cut, cut_left) = feed_all(prefix, max, &chunks);
    assert_eq!(one, naive(p, max, data), "one-shot against the reference");
    assert_eq!(
        cut,
        one,
        "split at {:?}",
        chunks.iter().map(|c| c.len()).collect::<Vec<_>>()
    );
    if one.1.is_none() {
        assert_eq!(cut_left, one_left);
    }

    // What the decoder may keep: one message (at most `max`, and never more
    // than the input it was given) or a partial prefix.
    let bound = 2 * max.min(data.len()).max(p) + 64;
    let mut dec = LengthDecoder::new(prefix, max);
    feed_within_bound(&chunks, bound, &one.0, |c, digest| {
        dec.feed(c, |m| {
            digest.add(m);
            true
        })
    });
});
