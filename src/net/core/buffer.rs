//! The write buffer of a transport and its flow control. Owns `WriteBuf`, `Flow`.
//!
//! Pure data: no I/O here. The transport writes what it can straight to the
//! socket and keeps only the rest in this buffer; every change of the buffered
//! size or of the limits goes through [`WriteBuf::recheck`], the one choke point
//! that decides whether the protocol must be paused (size above `high`) or
//! resumed (size at or below `low`) — asyncio forgot it in `writelines` and in
//! `set_write_buffer_limits` (gh-127655, python/asyncio#140).
//! Tests: below, and tests/net_flow_control.rs.

use crate::net::Limits;
use crate::Error;
use std::cell::Cell;

/// Default high-water mark: above it the protocol is paused (asyncio's 64 KiB).
pub(crate) const DEFAULT_HIGH_WATER: usize = Limits::DEFAULT.high_water;
/// Default low-water mark: at or below it a paused protocol is resumed (16 KiB).
pub(crate) const DEFAULT_LOW_WATER: usize = Limits::DEFAULT.low_water;

/// Capacity kept once the buffer empties: enough for a burst of the default
/// high-water size, so that steady traffic reuses one allocation.
const KEEP_CAPACITY: usize = 256 * 1024;

/// Flow control by byte count: shared by the stream write buffer and the
/// datagram send queue.
#[derive(Debug)]
pub(crate) struct Flow {
    high: usize,
    low: usize,
    /// Set when the size went above `high`, cleared when it fell to `low` or below.
    paused: bool,
    /// What the protocol was last told (`pause_writing` → true).
    told: bool,
    /// The state went paused and back while the protocol believed "not
    /// paused": it may have seen `is_writing_paused()` and stopped, so it is
    /// owed the pair (`pause_writing`, `resume_writing`).
    bounced: bool,
}

impl Default for Flow {
    fn default() -> Self {
        Flow {
            high: DEFAULT_HIGH_WATER,
            low: DEFAULT_LOW_WATER,
            paused: false,
            told: false,
            bounced: false,
        }
    }
}

impl Flow {
    /// `(low, high)`.
    pub(crate) fn limits(&self) -> (usize, usize) {
        (self.low, self.high)
    }

    /// asyncio's rules: `high` defaults to 64 KiB, or to 4 × `low` when only
    /// `low` is given; `low` defaults to `high / 4`. Re-checks at once.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] unless `high >= low`; the limits stay as they were.
    pub(crate) fn set_limits(
        &mut self,
        high: Option<usize>,
        low: Option<usize>,
        size: usize,
    ) -> Result<(), Error> {
        let high = match (high, low) {
            (Some(h), _) => h,
            (None, Some(l)) => l.saturating_mul(4),
            (None, None) => DEFAULT_HIGH_WATER,
        };
        let low = low.unwrap_or(high / 4);
        if high < low {
            return Err(Error::InvalidInput(
                "write buffer limits: high must be >= low",
            ));
        }
        self.high = high;
        self.low = low;
        self.recheck(size);
        Ok(())
    }

    /// The one place the flow-control state changes; called after every
    /// change of `size` or of the limits.
    pub(crate) fn recheck(&mut self, size: usize) {
        if !self.paused && size > self.high {
            self.paused = true;
        } else if self.paused && size <= self.low {
            self.paused = false;
            if !self.told {
                self.bounced = true;
            }
        }
    }

    /// Whether the size is above the high-water mark (and not yet back at low).
    pub(crate) fn is_paused(&self) -> bool {
        self.paused
    }

    /// What the protocol must hear now, if anything: `Some(true)` for
    /// `pause_writing`, `Some(false)` for `resume_writing`. Calls are paired
    /// (a resume only ever follows a pause), and a pause the protocol could
    /// have observed through `is_writing_paused()` is never swallowed: a
    /// protocol that stopped producing always hears `resume_writing`.
    pub(crate) fn take_note(&mut self) -> Option<bool> {
        if self.paused != self.told {
            self.told = self.paused;
            if self.paused {
                // Paused again after a bounce: this pause covers it.
                self.bounced = false;
            }
            return Some(self.paused);
        }
        if std::mem::take(&mut self.bounced) {
            self.told = true; // the resume follows on the next call
            return Some(true);
        }
        None
    }

    /// Whether [`take_note`](Self::take_note) has something to say.
    pub(crate) fn has_note(&self) -> bool {
        self.paused != self.told || self.bounced
    }
}

thread_local! {
    /// Bytes held in the write buffers of this thread's stream connections.
    static HELD: Cell<usize> = const { Cell::new(0) };
}

/// Write-buffered bytes on this thread under which a read may take more than
/// a connection's high-water mark allows (see `dispatch::read`): what peers
/// that stop reading can make the thread hold beyond one mark each.
pub(crate) const GROWTH_ALLOWANCE: usize = 4 * 1024 * 1024;

/// Bytes held in the write buffers of this thread's stream connections.
pub(crate) fn held_on_this_thread() -> usize {
    HELD.try_with(Cell::get).unwrap_or(usize::MAX)
}

fn held_add(n: usize) {
    let _ = HELD.try_with(|h| h.set(h.get() + n));
}

fn held_sub(n: usize) {
    let _ = HELD.try_with(|h| h.set(h.get().saturating_sub(n)));
}

/// The bytes a stream transport could not write yet, with their flow control.
#[derive(Debug, Default)]
pub(crate) struct WriteBuf {
    buf: Vec<u8>,
    /// Bytes before `start` have been written.
    start: usize,
    pub(crate) flow: Flow,
}

impl WriteBuf {
    /// Buffered bytes not yet written.
    pub(crate) fn len(&self) -> usize {
        self.buf.len() - self.start
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes to write next.
    pub(crate) fn pending(&self) -> &[u8] {
        &self.buf[self.start..]
    }

    /// Appends `data` and re-checks the limits.
    pub(crate) fn push(&mut self, data: &[u8]) {
        if self.start > 0 && self.start >= self.buf.len() / 2 {
            // Compact before growing: the written half is dead weight.
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.buf.extend_from_slice(data);
        held_add(data.len());
        self.flow.recheck(self.len());
    }

    /// Marks `n` bytes as written and re-checks the limits.
    pub(crate) fn consume(&mut self, n: usize) {
        held_sub(n);
        self.start += n;
        debug_assert!(self.start <= self.buf.len());
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
            let keep = KEEP_CAPACITY.max(self.flow.high);
            if self.buf.capacity() > keep {
                self.buf.shrink_to(keep);
            }
        }
        self.flow.recheck(self.len());
    }

    /// Gives the memory back if nothing is buffered (a quiet connection).
    pub(crate) fn release_if_empty(&mut self) {
        if self.is_empty() && self.buf.capacity() > 0 {
            crate::reactor::give_back::freed(self.buf.capacity());
            self.buf = Vec::new();
            self.start = 0;
        }
    }

    /// Drops everything buffered (abort) and gives the memory back.
    pub(crate) fn clear(&mut self) {
        held_sub(self.len());
        self.buf = Vec::new();
        self.start = 0;
        self.flow.recheck(0);
    }

    pub(crate) fn set_limits(
        &mut self,
        high: Option<usize>,
        low: Option<usize>,
    ) -> Result<(), Error> {
        let size = self.len();
        self.flow.set_limits(high, low, size)
    }
}

impl Drop for WriteBuf {
    fn drop(&mut self) {
        held_sub(self.len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_thread_count_follows_every_buffer_in_and_out() {
        let base = held_on_this_thread();
        let mut a = WriteBuf::default();
        let mut b = WriteBuf::default();
        a.push(&[1; 1000]);
        b.push(&[1; 500]);
        assert_eq!(held_on_this_thread(), base + 1500);
        a.consume(400);
        assert_eq!(held_on_this_thread(), base + 1100);
        a.push(&[1; 100]);
        b.clear();
        assert_eq!(held_on_this_thread(), base + 700);
        drop(a);
        assert_eq!(held_on_this_thread(), base);
        drop(b);
        assert_eq!(held_on_this_thread(), base);
    }

    #[test]
    fn a_quiet_empty_buffer_gives_its_memory_back() {
        let mut w = WriteBuf::default();
        w.push(&[1; 100_000]);
        w.consume(50_000);
        w.release_if_empty();
        assert_eq!(w.len(), 50_000, "not while bytes are buffered");
        w.consume(50_000);
        assert!(w.buf.capacity() > 0, "kept across a burst");
        w.release_if_empty();
        assert_eq!(w.buf.capacity(), 0);
    }

    #[test]
    fn pauses_above_high_and_resumes_at_low() {
        let mut w = WriteBuf::default();
        w.set_limits(Some(10), Some(4)).unwrap();
        w.push(&[0; 10]);
        assert_eq!(w.flow.take_note(), None, "at high is not above it");
        w.push(&[0; 1]);
        assert_eq!(w.flow.take_note(), Some(true));
        assert_eq!(w.flow.take_note(), None, "told once");
        w.consume(6);
        assert_eq!(w.len(), 5);
        assert_eq!(w.flow.take_note(), None, "still above low");
        w.consume(1);
        assert_eq!(w.flow.take_note(), Some(false), "at low resumes");
    }

    #[test]
    fn changing_limits_rechecks() {
        let mut w = WriteBuf::default();
        w.push(&[0; 100]);
        assert_eq!(w.flow.take_note(), None);
        w.set_limits(Some(50), None).unwrap();
        assert_eq!(w.flow.limits(), (12, 50));
        assert_eq!(
            w.flow.take_note(),
            Some(true),
            "lowering high pauses at once"
        );
        w.set_limits(Some(1000), Some(200)).unwrap();
        assert_eq!(
            w.flow.take_note(),
            Some(false),
            "raising low resumes at once"
        );
    }

    #[test]
    fn limit_defaults_follow_asyncio_and_bad_limits_are_refused() {
        let mut w = WriteBuf::default();
        assert_eq!(w.flow.limits(), (16 * 1024, 64 * 1024));
        w.set_limits(None, Some(100)).unwrap();
        assert_eq!(w.flow.limits(), (100, 400));
        w.set_limits(None, None).unwrap();
        assert_eq!(w.flow.limits(), (16 * 1024, 64 * 1024));
        assert!(matches!(
            w.set_limits(Some(1), Some(2)),
            Err(Error::InvalidInput(_))
        ));
        assert_eq!(
            w.flow.limits(),
            (16 * 1024, 64 * 1024),
            "unchanged on error"
        );
    }

    #[test]
    fn a_pause_and_resume_before_the_protocol_hears_are_both_delivered() {
        // A producer that saw `is_writing_paused()` and stopped must hear
        // `resume_writing`, even if the buffer drained before it was told.
        let mut w = WriteBuf::default();
        w.set_limits(Some(4), Some(0)).unwrap();
        w.push(&[1; 8]);
        assert!(w.flow.is_paused());
        w.consume(8);
        assert!(!w.flow.is_paused());
        assert!(w.flow.has_note());
        assert_eq!(w.flow.take_note(), Some(true));
        assert_eq!(w.flow.take_note(), Some(false));
        assert_eq!(w.flow.take_note(), None);
        // Many bounces still make one pair.
        for _ in 0..3 {
            w.push(&[1; 8]);
            w.consume(8);
        }
        assert_eq!(w.flow.take_note(), Some(true));
        assert_eq!(w.flow.take_note(), Some(false));
        assert!(!w.flow.has_note());
    }

    #[test]
    fn a_pause_resume_pause_before_the_protocol_hears_is_one_pause() {
        // Raising the limits resumes a pause the protocol was not yet told
        // of; a write then pauses again. It hears one pause, not two.
        let mut w = WriteBuf::default();
        w.set_limits(Some(4), Some(0)).unwrap();
        w.push(&[1; 8]);
        w.set_limits(Some(100), Some(10)).unwrap();
        assert!(!w.flow.is_paused());
        w.push(&[1; 100]);
        assert!(w.flow.is_paused());
        assert_eq!(w.flow.take_note(), Some(true));
        assert_eq!(w.flow.take_note(), None);
        let n = w.len();
        w.consume(n);
        assert_eq!(w.flow.take_note(), Some(false));
        assert_eq!(w.flow.take_note(), None);
    }

    #[test]
    fn a_resume_and_pause_before_the_protocol_hears_need_no_call() {
        let mut w = WriteBuf::default();
        w.set_limits(Some(4), Some(0)).unwrap();
        w.push(&[1; 8]);
        assert_eq!(w.flow.take_note(), Some(true));
        w.consume(8);
        w.push(&[1; 8]);
        assert_eq!(w.flow.take_note(), None, "told paused, and paused it is");
        w.consume(8);
        assert_eq!(w.flow.take_note(), Some(false));
    }

    #[test]
    fn bytes_come_out_in_order_across_compaction() {
        let mut w = WriteBuf::default();
        let mut expected = Vec::new();
        let mut got = Vec::new();
        for i in 0..1000u32 {
            let chunk: Vec<u8> = (0..(i % 37)).map(|j| (i + j) as u8).collect();
            expected.extend_from_slice(&chunk);
            w.push(&chunk);
            let take = w.len().min((i % 23) as usize);
            got.extend_from_slice(&w.pending()[..take]);
            w.consume(take);
        }
        got.extend_from_slice(w.pending());
        let n = w.len();
        w.consume(n);
        assert_eq!(got, expected);
        assert!(w.is_empty());
    }

    #[test]
    fn an_emptied_buffer_keeps_a_bounded_allocation() {
        let mut w = WriteBuf::default();
        w.push(&vec![0; 4 << 20]);
        let n = w.len();
        w.consume(n);
        assert!(w.buf.capacity() <= KEEP_CAPACITY);
        w.push(&[1; 10]);
        w.clear();
        assert_eq!(w.buf.capacity(), 0);
    }

    /// The buffer against a byte queue, and its notes against the protocol's
    /// side of the contract, over random pushes, writes, aborts, limit
    /// changes and deliveries.
    mod model {
        use super::*;
        use proptest::prelude::*;
        use std::collections::VecDeque;

        #[derive(Debug, Clone)]
        enum Op {
            Push(u16),
            /// Write out this many bytes (modulo what is buffered, plus one).
            Consume(u16),
            Clear,
            Limits(Option<u16>, Option<u16>),
            /// The loop delivers every note the protocol is owed.
            Deliver,
        }

        fn op() -> impl Strategy<Value = Op> {
            prop_oneof![
                4 => (0u16..300).prop_map(Op::Push),
                4 => any::<u16>().prop_map(Op::Consume),
                1 => Just(Op::Clear),
                1 => (
                    proptest::option::of(0u16..400),
                    proptest::option::of(0u16..200)
                )
                    .prop_map(|(h, l)| Op::Limits(h, l)),
                3 => Just(Op::Deliver),
            ]
        }

        fn cases() -> u32 {
            std::env::var("PROPTEST_CASES")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(2_000)
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(cases()))]

            #[test]
            fn write_buffer_matches_a_byte_queue_and_its_notes_pair_up(
                ops in proptest::collection::vec(op(), 1..120)
            ) {
                let mut w = WriteBuf::default();
                let mut bytes: VecDeque<u8> = VecDeque::new();
                let mut next = 0u8;
                let (mut high, mut low) = (DEFAULT_HIGH_WATER, DEFAULT_LOW_WATER);
                // Above high pauses; at or below low resumes (asyncio's rule).
                let mut paused = false;
                // What the protocol heard last (`pause_writing` → true).
                let mut heard = false;
                // Since the last delivery, `is_writing_paused()` said true
                // while the protocol believed it was not paused.
                let mut observable = false;
                for op in ops {
                    let mut emptied = false;
                    match op {
                        Op::Push(n) => {
                            let data: Vec<u8> = (0..n)
                                .map(|_| {
                                    next = next.wrapping_add(1);
                                    next
                                })
                                .collect();
                            w.push(&data);
                            bytes.extend(&data);
                        }
                        Op::Consume(k) => {
                            let k = usize::from(k) % (bytes.len() + 1);
                            let want: Vec<u8> = bytes.drain(..k).collect();
                            prop_assert_eq!(&w.pending()[..k], &want[..]);
                            w.consume(k);
                            emptied = bytes.is_empty();
                        }
                        Op::Clear => {
                            w.clear();
                            bytes.clear();
                            prop_assert_eq!(w.buf.capacity(), 0);
                        }
                        Op::Limits(h, l) => {
                            let (h, l) = (h.map(usize::from), l.map(usize::from));
                            let want_high = h.unwrap_or_else(|| l.map_or(DEFAULT_HIGH_WATER, |l| l * 4));
                            let want_low = l.unwrap_or(want_high / 4);
                            let r = w.set_limits(h, l);
                            if want_high < want_low {
                                prop_assert!(r.is_err());
                            } else {
                                prop_assert!(r.is_ok());
                                (high, low) = (want_high, want_low);
                            }
                            prop_assert_eq!(w.flow.limits(), (low, high));
                        }
                        Op::Deliver => {
                            let mut notes = Vec::new();
                            while let Some(n) = w.flow.take_note() {
                                notes.push(n);
                                prop_assert!(notes.len() <= 2, "notes {:?}", notes);
                            }
                            prop_assert!(!w.flow.has_note());
                            for &n in &notes {
                                prop_assert_eq!(n, !heard, "unpaired notes {:?}", notes);
                                heard = n;
                            }
                            prop_assert_eq!(heard, paused, "the protocol ends up told the truth");
                            if observable {
                                prop_assert!(notes.contains(&true), "an observable pause was swallowed");
                            }
                            observable = false;
                        }
                    }
                    if !paused && bytes.len() > high {
                        paused = true;
                    } else if paused && bytes.len() <= low {
                        paused = false;
                    }
                    prop_assert_eq!(w.flow.is_paused(), paused);
                    observable |= paused && !heard;
                    prop_assert_eq!(w.flow.has_note(), paused != heard || (observable && !paused));
                    prop_assert_eq!(w.len(), bytes.len());
                    prop_assert!(w.pending().iter().eq(bytes.iter()));
                    if emptied {
                        prop_assert!(w.buf.capacity() <= KEEP_CAPACITY.max(high));
                    }
                }
            }
        }
    }
}
