//! The line decoder, fed an arbitrary stream cut at arbitrary points, must
//! deliver exactly what one-shot parsing of the whole stream delivers (and
//! what a naive reference splitter delivers), refuse an over-long line the
//! same way, keep at most `max_line + delimiter - 1` bytes between reads, and
//! never allocate more than about twice that while it is fed, whatever the
//! size of a read.
#![no_main]

use deferloop::net::framing::{FrameError, LineDecoder};
use deferloop_fuzz::{feed_within_bound, Counting, Input};
use libfuzzer_sys::fuzz_target;

#[global_allocator]
static ALLOC: Counting = Counting;

/// Lines delivered, and the error that ended the stream, if any.
type Outcome = (Vec<Vec<u8>>, Option<FrameError>);

fn feed_all(delim: &[u8], max: usize, chunks: &[&[u8]]) -> (Outcome, usize) {
    let mut dec = LineDecoder::new(delim, max).unwrap();
    let mut lines = Vec::new();
    for c in chunks {
        let r = dec.feed(c, |l| {
            lines.push(l.to_vec());
            true
        });
        assert!(
            dec.buffered() < max + delim.len(),
            "buffered {}",
            dec.buffered()
        );
        if let Err(e) = r {
            assert_eq!(dec.buffered(), 0, "keeps nothing after an error");
            return ((lines, Some(e)), 0);
        }
    }
    let left = dec.buffered();
    ((lines, None), left)
}

/// The reference: find each delimiter in the whole stream, in order.
fn naive(delim: &[u8], max: usize, data: &[u8]) -> (Vec<Vec<u8>>, bool, usize) {
    let mut lines = Vec::new();
    let mut rest = data;
    loop {
        let at = rest.windows(delim.len()).position(|w| w == delim);
        match at {
            Some(at) if at > max => return (lines, true, 0),
            Some(at) => {
                lines.push(rest[..at].to_vec());
                rest = &rest[at + delim.len()..];
            }
            None if rest.len() > max + delim.len() - 1 => return (lines, true, 0),
            None => return (lines, false, rest.len()),
        }
    }
}

fuzz_target!(|bytes: &[u8]| {
    let mut input = Input(bytes);
    let k = 1 + (input.byte() % 4) as usize;
    let delim = input.bytes(k).to_vec();
    if delim.len() < k {
        return;
    }
    let max = match input.byte() {
        b @ 0..=199 => (b % 64) as usize,
        _ => input.u16() as usize % 4096,
    };
    let (chunks, data) = input.chunks();

    let (one, one_left) = feed_all(&delim, max, &[data]);
    let (cut, cut_left) = feed_all(&delim, max, &chunks);
    let (ref_lines, ref_err, ref_left) = naive(&delim, max, data);

    assert_eq!(one.0, ref_lines, "one-shot against the reference");
    assert_eq!(one.1.is_some(), ref_err, "one-shot error: {:?}", one.1);
    assert_eq!(one_left, ref_left);
    assert_eq!(
        cut.0,
        one.0,
        "split at {:?}",
        chunks.iter().map(|c| c.len()).collect::<Vec<_>>()
    );
    match (&one.1, &cut.1) {
        (None, None) => assert_eq!(cut_left, one_left),
        (
            Some(FrameError::LineTooLong { limit: a, .. }),
            Some(FrameError::LineTooLong { limit: b, .. }),
        ) => {
            assert_eq!((*a, *b), (max, max))
        }
        (a, b) => panic!("one-shot {a:?}, split {b:?}"),
    }
    for l in &one.0 {
        assert!(l.len() <= max);
    }

    // Memory: with a callback that allocates nothing, feeding never grows
    // the heap by more than twice what the decoder may keep.
    let mut dec = LineDecoder::new(&delim, max).unwrap();
    feed_within_bound(&chunks, 2 * (max + k) + 64, &one.0, |c, digest| {
        dec.feed(c, |l| {
            digest.add(l);
            true
        })
    });
});
