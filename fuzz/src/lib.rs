//! What the fuzz targets share: a byte reader for their inputs, the split of
//! a stream into chunks, and a counting allocator that measures how much a
//! decoder allocates while it is fed.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// The system allocator, counting live bytes and their peak.
pub struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded to `System` with the same arguments; the
// counters are only statistics.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is `System`'s contract.
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            grew(l.size());
        }
        p
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        // SAFETY: as above.
        let p = unsafe { System.alloc_zeroed(l) };
        if !p.is_null() {
            grew(l.size());
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size(), Relaxed);
        // SAFETY: as above.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        // SAFETY: as above.
        let q = unsafe { System.realloc(p, l, new) };
        if !q.is_null() {
            LIVE.fetch_sub(l.size(), Relaxed);
            grew(new);
        }
        q
    }
}

fn grew(n: usize) {
    let live = LIVE.fetch_add(n, Relaxed) + n;
    PEAK.fetch_max(live, Relaxed);
}

/// Runs `f` and returns how many bytes above the live count at the start it
/// had allocated at its peak (the fuzz targets are single-threaded).
pub fn peak_growth(f: impl FnOnce()) -> usize {
    let start = LIVE.load(Relaxed);
    PEAK.store(start, Relaxed);
    f();
    PEAK.load(Relaxed) - start
}

/// Reads a fuzz input from the front.
pub struct Input<'a>(pub &'a [u8]);

impl<'a> Input<'a> {
    pub fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }

    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.byte(), self.byte()])
    }

    pub fn bytes(&mut self, n: usize) -> &'a [u8] {
        let n = n.min(self.0.len());
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        a
    }

    /// Up to seven split points, then the rest of the input as the stream:
    /// the stream cut at those points (sorted; empty chunks allowed).
    pub fn chunks(&mut self) -> (Vec<&'a [u8]>, &'a [u8]) {
        let n = self.byte() % 8;
        let mut cuts: Vec<usize> = (0..n).map(|_| self.u16() as usize).collect();
        let data = self.0;
        for c in &mut cuts {
            *c %= data.len() + 1;
        }
        cuts.sort_unstable();
        let mut out = Vec::new();
        let mut from = 0;
        for c in cuts {
            out.push(&data[from..c]);
            from = c;
        }
        out.push(&data[from..]);
        (out, data)
    }
}

/// Feeds `chunks` in order through `feed` (which hands each frame to the
/// digest, allocating nothing itself) until one fails, asserting that no feed
/// grows the heap by more than `bound` bytes; then asserts that the frames
/// delivered are `want`.
pub fn feed_within_bound<E>(
    chunks: &[&[u8]],
    bound: usize,
    want: &[Vec<u8>],
    mut feed: impl FnMut(&[u8], &mut Digest) -> Result<(), E>,
) {
    let mut digest = Digest::default();
    for c in chunks {
        let mut r = Ok(());
        let grew = peak_growth(|| r = feed(c, &mut digest));
        assert!(
            grew <= bound,
            "fed {} bytes, allocated {grew} (bound {bound})",
            c.len()
        );
        if r.is_err() {
            break;
        }
    }
    let mut expected = Digest::default();
    want.iter().for_each(|f| expected.add(f));
    assert_eq!(digest, expected);
}

/// A cheap hash of delivered frames that allocates nothing.
#[derive(Default, PartialEq, Eq, Debug, Clone, Copy)]
pub struct Digest(pub u64, pub usize);

impl Digest {
    pub fn add(&mut self, frame: &[u8]) {
        let mut h = self.0 ^ (frame.len() as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        for &b in frame {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = h.rotate_left(5);
        self.1 += 1;
    }
}
