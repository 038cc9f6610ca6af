//! The remote queue's jobs: a lock-free multi-producer, single-consumer list
//! of blocks (the shape of crossbeam's and tokio's unbounded channels). Owns
//! `JobQueue` and the job it carries, `RemoteJob`.
//!
//! A block holds `BLOCK_CAP` jobs inline. A sender claims the next position
//! with one compare-and-swap on the tail word, writes its job into that slot
//! and publishes it with a release store of the slot's ready flag: no lock,
//! so a sender preempted halfway holds up no other sender, only the loop's
//! drain at that slot (the drain takes the calls before it, and the rest in a
//! later turn). The sender that claims a block's last slot takes the next
//! block (a drained one if kept, else a new one) before its claim and links
//! it after; the others wait for that link only while the tail sits on the
//! block's end (a few instructions). The loop alone owns the head: it takes
//! published slots in position order and, once it has taken all of a
//! block, keeps it for reuse (up to `SPARES`) or frees it, so memory follows
//! what is queued — 40 bytes a call, a block of 63 at rest plus the kept
//! ones; the loop runs each call from its slot, copying none to its ready
//! queue — and a burst's blocks go back to the allocator as the loop drains
//! them, while a steady flow allocates nothing. The closed bit lives in the
//! tail word: a send either claims its slot before the bit, and the close's
//! drain drops its job, or sees the bit and fails. Tests: below (senders,
//! order, loss, closes, marks), tests/loop_threadsafe.rs.

use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::panic::Location;
use std::ptr;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize};
use std::sync::Mutex;

/// A queued call: stored inline when small (reactor/callback.rs).
pub(crate) type RemoteFn = super::callback::SendLoopFn;

pub(crate) struct RemoteJob {
    pub(crate) f: RemoteFn,
    pub(crate) loc: &'static Location<'static>,
}

/// Positions per block: `BLOCK_CAP` slots, then one position that is never
/// a slot (the tail sits there while the next block is linked).
const LAP: usize = 64;
const BLOCK_CAP: usize = LAP - 1;
/// The tail word is `position << SHIFT | CLOSED`.
const SHIFT: usize = 1;
const CLOSED: usize = 1;

struct Slot {
    job: UnsafeCell<MaybeUninit<RemoteJob>>,
    /// Set (release) once `job` is written; read (acquire) by the loop.
    ready: AtomicBool,
}

struct Block {
    next: AtomicPtr<Block>,
    slots: [Slot; BLOCK_CAP],
}

impl Block {
    /// A block with no job written: only the link and the flags are
    /// initialised (zeroing the whole block cost 40 instructions a call).
    fn new() -> Box<Block> {
        let mut b = Box::<Block>::new_uninit();
        let p = b.as_mut_ptr();
        // SAFETY: `p` points to the block's (uninitialised) memory; the
        // writes go through raw places, with no reference to it. Every
        // field other than the jobs is written, and the jobs are
        // `MaybeUninit`, valid uninitialised (not read before their flag is
        // set), so the block is then initialised.
        unsafe {
            ptr::addr_of_mut!((*p).next).write(AtomicPtr::new(ptr::null_mut()));
            for i in 0..BLOCK_CAP {
                ptr::addr_of_mut!((*p).slots[i].ready).write(AtomicBool::new(false));
            }
            b.assume_init()
        }
    }
}

/// The loop's end: the next position to take and its block, and where the
/// next [`JobQueue::take_marked`] stops (the tail at the last `mark`).
struct Head {
    pos: usize,
    block: *mut Block,
    end: usize,
}

// SAFETY: `block` is only dereferenced by the holder of the `Mutex<Head>`,
// and a block is reached by one thread at a time that way; the jobs in it
// are `Send`.
unsafe impl Send for Head {}

/// The tail, alone on its cache line: senders write it, the loop reads it
/// once a drain.
#[repr(align(64))]
struct Tail {
    word: AtomicUsize,
    block: AtomicPtr<Block>,
}

pub(crate) struct JobQueue {
    tail: Tail,
    head: Mutex<Head>,
    /// Blocks the loop has drained, reset, for the next senders to link:
    /// each slot is taken with a swap, so a block is in one hand at a time.
    spares: [AtomicPtr<Block>; SPARES],
}

/// Drained blocks kept for reuse (10 KiB at most); the rest are freed.
/// Without them every block was allocated on a sending thread and freed on
/// the loop's, into the sender's malloc arena: the two threads contended
/// for that arena's lock (hundreds of futex waits a million calls).
const SPARES: usize = 4;

// SAFETY: the slots' jobs are written by the one sender that claimed the
// slot, before its release store of `ready`, and read by the loop after an
// acquire load of it; blocks are freed only by the head's owner, after every
// slot in them was taken (see `drain`). `RemoteJob` is `Send`.
unsafe impl Send for JobQueue {}
// SAFETY: as above; all shared state is atomics or behind the mutex.
unsafe impl Sync for JobQueue {}

/// What `drain` found.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Drained {
    /// Every call claimed when the drain began was taken.
    All,
    /// A sender had claimed a slot but not yet written it: the calls from
    /// there on wait for a later drain.
    Behind,
}

impl JobQueue {
    pub(crate) fn new() -> JobQueue {
        let first = Box::into_raw(Block::new());
        JobQueue {
            tail: Tail {
                word: AtomicUsize::new(0),
                block: AtomicPtr::new(first),
            },
            head: Mutex::new(Head {
                pos: 0,
                block: first,
                end: 0,
            }),
            spares: Default::default(),
        }
    }

    /// A drained block if one is kept, else a new one.
    fn take_block(&self) -> Box<Block> {
        for s in &self.spares {
            let b = s.swap(ptr::null_mut(), Acquire);
            if !b.is_null() {
                // SAFETY: `give_block` put it there from a `Box`, reset;
                // the swap took it out, so it is ours alone.
                return unsafe { Box::from_raw(b) };
            }
        }
        Block::new()
    }

    /// Keeps `b` (no job in it: every slot taken, or never written) for
    /// reuse if a spare slot is free, else frees it. Returns whether freed.
    fn give_block(&self, mut b: Box<Block>) -> bool {
        *b.next.get_mut() = ptr::null_mut();
        for slot in &mut b.slots {
            *slot.ready.get_mut() = false;
        }
        let raw = Box::into_raw(b);
        for s in &self.spares {
            if s.compare_exchange(ptr::null_mut(), raw, Release, Relaxed)
                .is_ok()
            {
                return false;
            }
        }
        // SAFETY: no spare slot took it, so it is still ours.
        drop(unsafe { Box::from_raw(raw) });
        true
    }

    /// Queues `job`, or gives it back if the queue is closed. The claim is
    /// `SeqCst`: a sender that reads the loop's wake flag after it is ordered
    /// with the loop's clear of that flag and its read of the tail
    /// (remote.rs, `CrossThread::wake`). Inlined: a slot before its block's
    /// last, claimed at the first try, is all of it (about 15 instructions);
    /// the rest (closed, a lost race, a block to link) is `push_slow`.
    #[inline]
    pub(crate) fn push(&self, job: RemoteJob) -> Result<(), RemoteJob> {
        let word = self.tail.word.load(Acquire);
        let offset = (word >> SHIFT) % LAP;
        if word & CLOSED == 0 && offset + 1 < BLOCK_CAP {
            let block = self.tail.block.load(Acquire);
            if self.claim(word) {
                // SAFETY: as in `push_slow` (a claim of a slot before the
                // block's last, so no block to link).
                unsafe {
                    let slot = &(*block).slots[offset];
                    slot.job.get().write(MaybeUninit::new(job));
                    slot.ready.store(true, Release);
                }
                return Ok(());
            }
        }
        self.push_slow(job)
    }

    /// Claims the position after `word`'s, if the tail is still there.
    #[inline]
    fn claim(&self, word: usize) -> bool {
        let (t, n) = (&self.tail.word, word + (1 << SHIFT));
        t.compare_exchange_weak(word, n, SeqCst, Relaxed).is_ok()
    }

    #[cold]
    #[inline(never)]
    fn push_slow(&self, job: RemoteJob) -> Result<(), RemoteJob> {
        let mut spins = 0u32;
        let mut next: Option<Box<Block>> = None;
        loop {
            let word = self.tail.word.load(Acquire);
            if word & CLOSED != 0 {
                return Err(job);
            }
            let offset = (word >> SHIFT) % LAP;
            if offset == BLOCK_CAP {
                // Another sender is linking the next block.
                backoff(&mut spins);
                continue;
            }
            let block = self.tail.block.load(Acquire);
            if offset + 1 == BLOCK_CAP && next.is_none() {
                next = Some(self.take_block());
            }
            if !self.claim(word) {
                backoff(&mut spins);
                continue;
            }
            // SAFETY: the claim succeeded with the tail in `block` (the
            // block pointer changes only while the tail sits on a block's
            // end, where no claim is made, and it was loaded after the word,
            // with acquire), so slot `offset` of `block` is ours alone. The
            // loop frees a block only after taking its last slot, which is
            // written after the link below, so `block` is live.
            unsafe {
                if offset + 1 == BLOCK_CAP {
                    let next = Box::into_raw(next.take().expect("allocated before the claim"));
                    self.tail.block.store(next, Release);
                    // Past the block's end position; keeps the closed bit.
                    self.tail.word.fetch_add(1 << SHIFT, Release);
                    (*block).next.store(next, Release);
                }
                let slot = &(*block).slots[offset];
                slot.job.get().write(MaybeUninit::new(job));
                slot.ready.store(true, Release);
            }
            if let Some(unused) = next {
                // Taken for a last slot another sender claimed first.
                self.give_block(unused);
            }
            return Ok(());
        }
    }

    /// Marks the queue closed: later pushes fail.
    pub(crate) fn close(&self) {
        self.tail.word.fetch_or(CLOSED, SeqCst);
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.tail.word.load(Acquire) & CLOSED != 0
    }

    /// Calls ever queued.
    pub(crate) fn calls(&self) -> u64 {
        let pos = self.tail.word.load(Acquire) >> SHIFT;
        ((pos / LAP) * BLOCK_CAP + (pos % LAP).min(BLOCK_CAP)) as u64
    }

    /// Blocks allocated (one at rest).
    #[cfg(test)]
    pub(crate) fn blocks(&self) -> usize {
        let head = self.lock_head();
        let mut n = 0;
        let mut b = head.block;
        while !b.is_null() {
            n += 1;
            // SAFETY: blocks from the head on are live while we hold it.
            b = unsafe { (*b).next.load(Acquire) };
        }
        n
    }

    fn lock_head(&self) -> std::sync::MutexGuard<'_, Head> {
        // A panic in `take_marked`'s `each` leaves the head consistent: it
        // is moved past a job before the job is handed out.
        self.head.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes, in order, the jobs claimed before this call, up to the first
    /// one still being written (unless `wait`: then waits for it), and
    /// hands each to `each`: a [`mark`](Self::mark), then
    /// [`take_marked`](Self::take_marked).
    pub(crate) fn drain(&self, wait: bool, each: impl FnMut(RemoteJob)) -> Drained {
        self.mark();
        self.take_marked(wait, each)
    }

    /// Notes the calls claimed so far: the next `take_marked` takes those
    /// and no later ones. Only the loop calls it (and `Drop`).
    ///
    /// The tail is read `SeqCst`, after the loop's `SeqCst` clear of its
    /// wake flag: a claim this read misses is made by a sender that then
    /// sees the flag clear and wakes the loop.
    pub(crate) fn mark(&self) {
        let end = self.tail.word.load(SeqCst) >> SHIFT;
        self.lock_head().end = end;
    }

    /// Takes, in order, the jobs claimed before the last [`mark`](Self::mark),
    /// up to the first one still being written (unless `wait`: then waits
    /// for it), and hands each to `each`, which may run it: the head moves
    /// past a job before `each` gets it, so a panic in `each` loses no other
    /// job and runs none twice (a later call goes on from the next).
    pub(crate) fn take_marked(&self, wait: bool, mut each: impl FnMut(RemoteJob)) -> Drained {
        let mut head = self.lock_head();
        let end = head.end;
        let mut spins = 0u32;
        loop {
            let offset = head.pos % LAP;
            if offset == BLOCK_CAP {
                // SAFETY: every slot of this block was taken, so the sender
                // of its last one linked `next` before publishing that slot
                // (acquired when we took it); no sender reaches a block
                // whose slots are all claimed, so we may reuse or free it.
                let done = unsafe {
                    let next = (*head.block).next.load(Acquire);
                    debug_assert!(!next.is_null());
                    std::mem::replace(&mut head.block, next)
                };
                head.pos += 1;
                // SAFETY: as above; it came from `Box::into_raw` in `push`.
                if self.give_block(unsafe { Box::from_raw(done) }) {
                    // A burst's block: handed back to the system when the
                    // loop next waits (give_back.rs).
                    super::give_back::freed(std::mem::size_of::<Block>());
                }
                continue;
            }
            if head.pos >= end {
                return Drained::All;
            }
            // SAFETY: `head.block` is live (freed only above, by us).
            let slot = unsafe { &(*head.block).slots[offset] };
            if !slot.ready.load(Acquire) {
                if !wait {
                    return Drained::Behind;
                }
                backoff(&mut spins);
                continue;
            }
            // SAFETY: `ready` was set (acquire) after the job was written,
            // and the job is read once: the head moves past it at once.
            let job = unsafe { slot.job.get().read().assume_init() };
            head.pos += 1;
            each(job);
        }
    }
}

impl Drop for JobQueue {
    fn drop(&mut self) {
        // No sender is left (each holds the queue through an `Arc`), so
        // every claimed slot is written: drop the jobs, then the blocks.
        self.drain(true, drop);
        for s in &mut self.spares {
            let b = std::mem::replace(s.get_mut(), ptr::null_mut());
            if !b.is_null() {
                // SAFETY: a spare is a `Box` no one else holds.
                drop(unsafe { Box::from_raw(b) });
            }
        }
        let head = self.head.get_mut().unwrap_or_else(|e| e.into_inner());
        let mut b = std::mem::replace(&mut head.block, ptr::null_mut());
        while !b.is_null() {
            // SAFETY: the blocks from the head on are ours alone now; their
            // jobs were all taken by the drain above.
            let block = unsafe { Box::from_raw(b) };
            b = block.next.load(Acquire);
        }
    }
}

/// Spins a little, then yields: a wait on another sender's few instructions
/// (or on its return if it was preempted).
fn backoff(spins: &mut u32) {
    if *spins < 6 {
        for _ in 0..1 << *spins {
            std::hint::spin_loop();
        }
    } else {
        std::thread::yield_now();
    }
    *spins += 1;
}

#[cfg(test)]
mod tests {
    use super::RemoteFn;
    use super::*;
    use std::panic::Location;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex as StdMutex};

    /// A job that records (sender, sequence) when run, and counts its drop.
    fn job(
        log: &Arc<StdMutex<Vec<(u32, u32)>>>,
        dropped: &Arc<AtomicU64>,
        t: u32,
        i: u32,
    ) -> RemoteJob {
        struct Counted(Arc<AtomicU64>);
        impl Drop for Counted {
            fn drop(&mut self) {
                self.0.fetch_add(1, Ordering::Relaxed);
            }
        }
        let (log, c) = (log.clone(), Counted(dropped.clone()));
        RemoteJob {
            // Three words of captures: boxed (callback.rs), so both the
            // inline and the boxed forms cross the queue.
            f: RemoteFn::new(move |_| {
                let _c = c;
                log.lock().unwrap().push((t, i));
            }),
            loc: Location::caller(),
        }
    }

    fn run(job: RemoteJob) {
        let ev = crate::EventLoop::new().unwrap();
        job.f.into_local().call(&ev);
    }

    /// Four senders, 20,000 calls each, crossing hundreds of block ends
    /// while the consumer drains: every call arrives once, each sender's in
    /// order, and the blocks drained are freed (one left at rest).
    #[test]
    fn four_senders_lose_nothing_and_keep_their_order() {
        const PER: u32 = 20_000;
        let q = Arc::new(JobQueue::new());
        let log = Arc::new(StdMutex::new(Vec::new()));
        let dropped = Arc::new(AtomicU64::new(0));
        let senders: Vec<_> = (0..4u32)
            .map(|t| {
                let (q, log, dropped) = (q.clone(), log.clone(), dropped.clone());
                std::thread::spawn(move || {
                    for i in 0..PER {
                        assert!(q.push(job(&log, &dropped, t, i)).is_ok());
                    }
                })
            })
            .collect();
        let ev = crate::EventLoop::new().unwrap();
        let mut taken = 0u64;
        while taken < 4 * PER as u64 {
            q.drain(false, |j| {
                j.f.into_local().call(&ev);
                taken += 1;
            });
        }
        for s in senders {
            s.join().unwrap();
        }
        assert_eq!(q.drain(false, |_| panic!("nothing left")), Drained::All);
        assert_eq!(q.calls(), 4 * PER as u64);
        assert_eq!(dropped.load(Ordering::Relaxed), 4 * PER as u64);
        let log = log.lock().unwrap();
        let mut next = [0u32; 4];
        for &(t, i) in log.iter() {
            assert_eq!(i, next[t as usize], "sender {t} out of order");
            next[t as usize] += 1;
        }
        assert_eq!(next, [PER; 4]);
        assert_eq!(q.blocks(), 1);
    }

    /// A close racing three senders: each call either ran (drained before
    /// the close), was dropped unrun by the close's drain, or failed; none
    /// is lost or run twice, and no call succeeds after the close.
    #[test]
    fn a_close_racing_senders_loses_and_leaks_nothing() {
        let q = Arc::new(JobQueue::new());
        let log = Arc::new(StdMutex::new(Vec::new()));
        let dropped = Arc::new(AtomicU64::new(0));
        let senders: Vec<_> = (0..3u32)
            .map(|t| {
                let (q, log, dropped) = (q.clone(), log.clone(), dropped.clone());
                std::thread::spawn(move || {
                    let mut ok = 0u64;
                    for i in 0.. {
                        match q.push(job(&log, &dropped, t, i)) {
                            Ok(()) => ok += 1,
                            Err(j) => {
                                drop(j);
                                break;
                            }
                        }
                    }
                    ok
                })
            })
            .collect();
        let ev = crate::EventLoop::new().unwrap();
        let mut ran = 0u64;
        while ran < 5_000 {
            q.drain(false, |j| {
                j.f.into_local().call(&ev);
                ran += 1;
            });
        }
        q.close();
        let mut unrun = 0u64;
        assert_eq!(
            q.drain(true, |j| {
                drop(j);
                unrun += 1;
            }),
            Drained::All
        );
        let ok: u64 = senders.into_iter().map(|s| s.join().unwrap()).sum();
        assert_eq!(ran + unrun, ok);
        assert_eq!(q.calls(), ok);
        assert_eq!(log.lock().unwrap().len() as u64, ran);
        // Every job made was dropped once: run, unrun, or refused.
        assert_eq!(dropped.load(Ordering::Relaxed), ok + 3);
        assert!(q.is_closed());
    }

    /// `take_marked` takes the calls claimed before the `mark`, across a
    /// block's end, and none after it; a panic in `each` loses none of the
    /// others and takes none twice.
    #[test]
    fn a_marked_take_stops_at_the_mark_and_goes_on_after_a_panic() {
        let q = JobQueue::new();
        let log = Arc::new(StdMutex::new(Vec::new()));
        let dropped = Arc::new(AtomicU64::new(0));
        let push = |r: std::ops::Range<u32>| {
            r.for_each(|i| assert!(q.push(job(&log, &dropped, 0, i)).is_ok()))
        };
        push(0..100);
        q.mark();
        push(100..150);
        let ev = crate::EventLoop::new().unwrap();
        let mut taken = 0;
        let taking = std::panic::AssertUnwindSafe(|| {
            q.take_marked(false, |j| {
                taken += 1;
                j.f.into_local().call(&ev);
                assert!(taken != 70, "boom");
            })
        });
        assert!(std::panic::catch_unwind(taking).is_err());
        assert_eq!(
            q.take_marked(false, |j| j.f.into_local().call(&ev)),
            Drained::All
        );
        let ran: Vec<u32> = log.lock().unwrap().iter().map(|&(_, i)| i).collect();
        assert_eq!(ran, (0..100).collect::<Vec<_>>());
        assert_eq!(q.drain(false, |j| j.f.into_local().call(&ev)), Drained::All);
        assert_eq!(log.lock().unwrap().len(), 150);
        assert_eq!(dropped.load(Ordering::Relaxed), 150);
    }

    /// Jobs still queued when the queue is dropped are dropped with it.
    #[test]
    fn dropping_the_queue_drops_its_jobs() {
        let q = JobQueue::new();
        let log = Arc::new(StdMutex::new(Vec::new()));
        let dropped = Arc::new(AtomicU64::new(0));
        for i in 0..200 {
            assert!(q.push(job(&log, &dropped, 0, i)).is_ok());
        }
        let mut first = None;
        q.drain(false, |j| {
            if first.is_none() {
                first = Some(j);
            }
        });
        run(first.unwrap());
        for i in 200..300 {
            assert!(q.push(job(&log, &dropped, 0, i)).is_ok());
        }
        drop(q);
        assert_eq!(dropped.load(Ordering::Relaxed), 300);
        assert_eq!(log.lock().unwrap().len(), 1);
    }
}
