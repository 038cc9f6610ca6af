//! The ready queue: callbacks to run on the next step 6. Owns `ReadyQueue`, `Task`, `Job`.
//!
//! A FIFO (`VecDeque`) of tasks, each numbered by a running sequence number, so a
//! handle finds its task in O(1) (`seq - head`) and cancelling it drops the
//! callback at once, leaving a tombstone that step 6 skips. Step 6 runs a
//! *snapshot*: only the tasks present when it began (see `Inner::run_ready`).
//!
//! A task is five words: the job (a [`Callback`] stored inline, see
//! reactor/callback.rs, whose niche also holds the other kinds of job), the
//! context and the scheduling location. Every callback is written here once
//! and read back once, so the rarely used parts live beside the queue: the
//! ids of due timers, by sequence number. Not here: running tasks (reactor/mod.rs). Tests: below,
//! tests/loop_order.rs, tests/loop_callbacks.rs.

use super::decay::Peak;
use super::key::SourceKey;
use crate::context::Context;
use crate::timers::TimerId;
use std::collections::VecDeque;
use std::panic::Location;
use std::time::Instant;

/// A scheduled callback: stored inline when small (reactor/callback.rs).
pub(crate) type Callback = super::callback::LoopFn;

/// What a task does. No tag of its own: `Io` lives in the callback's niche (a
/// null table pointer), so a job is three words. A cancelled task's job is
/// [`Job::cancelled`], a callback with a table of its own, which step 6 skips.
/// A third variant would bring a tag back (every task 48 bytes, not 40; the
/// size test below fails): a new kind of job can be a callback instead.
pub(crate) enum Job {
    /// A user callback, or a cancelled one (a tombstone).
    Call(Callback),
    /// An I/O source is ready: dispatch it (reactor/source.rs).
    Io(SourceKey),
}

impl Job {
    /// The tombstone a cancelled task's job becomes.
    pub(crate) fn cancelled() -> Job {
        Job::Call(Callback::cancelled())
    }

    /// Whether this is a tombstone left by a cancel.
    #[inline]
    pub(crate) fn is_cancelled(&self) -> bool {
        matches!(self, Job::Call(f) if f.is_cancelled())
    }
}

/// One entry of the ready queue: the job plus what was current when it was scheduled.
pub(crate) struct Task {
    pub(crate) job: Job,
    pub(crate) ctx: Context,
    pub(crate) loc: &'static Location<'static>,
}

/// Capacity, in tasks, the queue keeps once empty (40 KiB).
pub(crate) const KEEP: usize = 1024;

#[derive(Default)]
pub(crate) struct ReadyQueue {
    q: VecDeque<Task>,
    /// Sequence number of `q[0]`.
    head: u64,
    /// The due timers in `q`, by sequence number, in queue order: each one's
    /// slot is freed when it is popped. Kept apart so that a task is 40 bytes,
    /// not 56: every callback is written to and read back from the queue.
    timers: VecDeque<(u64, TimerId)>,
    /// `head` at the last `trim`, and the most tasks a turn ran recently
    /// (decay.rs): what the queue keeps room for.
    trimmed_at: u64,
    peak: Peak,
}

impl ReadyQueue {
    pub(crate) fn len(&self) -> usize {
        self.q.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.q.is_empty()
    }

    /// Sequence number the next pushed task will get.
    pub(crate) fn next_seq(&self) -> u64 {
        self.head + self.q.len() as u64
    }

    /// Makes room for one more task, so that a `push` right after it does not
    /// call out (see `Inner::push_ready`).
    #[inline]
    pub(crate) fn reserve_one(&mut self) {
        if self.q.len() == self.q.capacity() {
            self.grow();
        }
    }

    #[cold]
    #[inline(never)]
    fn grow(&mut self) {
        self.q.reserve(1);
    }

    #[inline]
    pub(crate) fn push(&mut self, task: Task) -> u64 {
        let seq = self.next_seq();
        self.q.push_back(task);
        seq
    }

    /// Pushes due timer `id`'s task; [`pop`](Self::pop) hands `id` back.
    pub(crate) fn push_timer(&mut self, task: Task, id: TimerId) -> u64 {
        let seq = self.push(task);
        self.timers.push_back((seq, id));
        seq
    }

    /// The next task; then [`popped_timer`](Self::popped_timer) says whether
    /// it was a due timer.
    #[inline]
    pub(crate) fn pop(&mut self) -> Option<Task> {
        let t = self.q.pop_front()?;
        self.head += 1;
        Some(t)
    }

    /// The timer id of the task [`pop`](Self::pop) just returned, if it is a
    /// due timer.
    #[inline]
    pub(crate) fn popped_timer(&mut self) -> Option<TimerId> {
        match self.timers.front() {
            Some(&(s, id)) if s + 1 == self.head => {
                self.timers.pop_front();
                Some(id)
            }
            _ => None,
        }
    }

    fn get_mut(&mut self, seq: u64) -> Option<&mut Task> {
        let idx = seq.checked_sub(self.head)?;
        self.q.get_mut(usize::try_from(idx).ok()?)
    }

    /// Whether task `seq` is still queued and not cancelled.
    pub(crate) fn is_pending(&self, seq: u64) -> bool {
        let Some(idx) = seq.checked_sub(self.head) else {
            return false;
        };
        matches!(self.q.get(idx as usize), Some(t) if !t.job.is_cancelled())
    }

    /// Cancels task `seq` if it is queued; returns its job for the caller to
    /// drop outside any borrow (dropping a closure may run arbitrary code).
    pub(crate) fn cancel(&mut self, seq: u64) -> Option<Job> {
        let t = self.get_mut(seq)?;
        if t.job.is_cancelled() {
            return None;
        }
        Some(std::mem::replace(&mut t.job, Job::cancelled()))
    }

    /// Takes task `seq` back out if it is queued (a due timer being reset),
    /// leaving a tombstone as [`cancel`](Self::cancel) does.
    pub(crate) fn take(&mut self, seq: u64) -> Option<Task> {
        let t = self.get_mut(seq)?;
        if t.job.is_cancelled() {
            return None;
        }
        let job = std::mem::replace(&mut t.job, Job::cancelled());
        Some(Task {
            job,
            ctx: std::mem::take(&mut t.ctx),
            loc: t.loc,
        })
    }

    /// Gives back a burst's memory once the queue is empty: capacity past
    /// [`KEEP`] and four times what recent turns ran (the most tasks a turn
    /// ran, halved every [`DECAY`](super::decay::DECAY) of loop time) goes.
    /// The loop calls it once a turn (step 1), with its clock, read only
    /// while there is a burst to forget: a steady load, or bursts less than
    /// a few `DECAY` apart, never reallocate here; after a burst, the queue
    /// is back to `KEEP` within a few `DECAY`.
    pub(crate) fn trim(&mut self, now: impl Fn() -> Instant) {
        let ran = usize::try_from(self.head - self.trimmed_at).unwrap_or(usize::MAX);
        self.trimmed_at = self.head;
        self.peak.note(ran, &now);
        if !self.holds_burst() {
            return;
        }
        let keep = KEEP.max(2 * self.peak.room(now()));
        if self.q.is_empty() && self.q.capacity() > 2 * keep {
            self.q = VecDeque::with_capacity(keep);
        }
        if self.timers.is_empty() && self.timers.capacity() > 2 * keep {
            self.timers = VecDeque::new();
        }
    }

    /// Whether the queue has room past what it keeps when quiet: a later
    /// trim may give it back.
    pub(crate) fn holds_burst(&self) -> bool {
        self.q.capacity() > 2 * KEEP || self.timers.capacity() > 2 * KEEP
    }

    /// Takes every task out (for `close()`); sequence numbers stay consumed.
    pub(crate) fn drain(&mut self) -> Vec<Task> {
        self.head += self.q.len() as u64;
        let out = self.q.drain(..).collect();
        self.q.shrink_to_fit();
        self.timers = VecDeque::new();
        out
    }

    /// Scheduling locations of the queued tasks, for diagnostics.
    pub(crate) fn locations(&self) -> impl Iterator<Item = &'static Location<'static>> + '_ {
        self.q
            .iter()
            .filter(|t| !t.job.is_cancelled())
            .map(|t| t.loc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task() -> Task {
        Task {
            job: Job::Call(Callback::new(|_| {})),
            ctx: Context::default(),
            loc: Location::caller(),
        }
    }

    #[test]
    fn sequence_numbers_find_tasks_after_pops() {
        let mut q = ReadyQueue::default();
        let a = q.push(task());
        let b = q.push(task());
        assert!(q.pop().is_some());
        assert!(!q.is_pending(a));
        assert!(q.is_pending(b));
        assert!(q.cancel(b).is_some());
        assert!(q.cancel(b).is_none(), "cancel is idempotent");
        assert!(!q.is_pending(b));
        assert_eq!(q.len(), 1, "the tombstone stays until popped");
        let c = q.push(task());
        assert_eq!(c, b + 1);
        assert!(q.cancel(a).is_none());
    }

    #[test]
    fn due_timers_get_their_ids_back_when_popped() {
        let mut q = ReadyQueue::default();
        let now = std::time::Instant::now();
        let mut heap = crate::timers::TimerWheel::new(now);
        let (t1, t2) = (heap.insert(now, ()), heap.insert(now, ()));
        q.push(task());
        let s1 = q.push_timer(task(), t1);
        q.push(task());
        q.push_timer(task(), t2);
        assert!(
            q.cancel(s1).is_some(),
            "a due timer's task cancels like any other"
        );
        let ids: Vec<_> = std::iter::from_fn(|| q.pop().map(|_| q.popped_timer())).collect();
        assert_eq!(ids, [None, Some(t1), None, Some(t2)]);
        q.push_timer(task(), t1);
        assert_eq!(q.drain().len(), 1);
        q.push(task());
        assert!(q.pop().is_some());
        assert_eq!(q.popped_timer(), None, "drain forgot the timer");
    }

    #[test]
    fn an_emptied_queue_gives_back_a_burst_s_memory() {
        let mut q = ReadyQueue::default();
        let now = std::time::Instant::now();
        let mut heap = crate::timers::TimerWheel::new(now);
        for _ in 0..10 * KEEP {
            q.push(task());
            q.push_timer(task(), heap.insert(now, ()));
        }
        let t0 = std::time::Instant::now();
        let at = |ms: u64| move || t0 + std::time::Duration::from_millis(ms);
        q.trim(at(0));
        assert!(q.q.capacity() >= 20 * KEEP, "not while tasks wait");
        while q.pop().is_some() {
            q.popped_timer();
        }
        let seq = q.next_seq();
        // Quiet turns, many, within one `DECAY`: the room is kept (a
        // burst a few turns later would only fault it in again).
        for _ in 0..100 {
            q.trim(at(50));
        }
        assert!(q.q.capacity() >= 20 * KEEP, "given back within a DECAY");
        // Quiet time: back to `KEEP` within a few `DECAY`.
        for i in 1..=8 {
            q.trim(at(100 * i));
        }
        assert!(q.q.capacity() <= KEEP && q.timers.capacity() <= KEEP);
        assert_eq!(q.next_seq(), seq, "sequence numbers go on");
        // A steady load past `KEEP`, the queue empty between turns (I/O
        // tasks and remote calls are queued in the turn): no reallocation,
        // however long it lasts.
        let mut caps = Vec::new();
        for i in 0..20 {
            q.trim(at(1000 + 70 * i));
            caps.push(q.q.capacity());
            for _ in 0..5 * KEEP {
                q.push(task());
            }
            while q.pop().is_some() {}
        }
        assert!(
            caps[2..].iter().all(|&c| c >= 5 * KEEP) && caps[2..].windows(2).all(|w| w[0] == w[1]),
            "room for the load kept between turns: {caps:?}"
        );
        // A queue that never grew past `KEEP` is left alone.
        let mut q = ReadyQueue::default();
        for _ in 0..KEEP / 2 {
            q.push(task());
        }
        while q.pop().is_some() {}
        let cap = q.q.capacity();
        q.trim(std::time::Instant::now);
        assert_eq!(q.q.capacity(), cap);
    }

    #[test]
    fn a_task_is_at_most_five_words() {
        // Every queued callback costs this much memory traffic; see `Task`.
        assert!(std::mem::size_of::<Task>() <= 5 * std::mem::size_of::<usize>());
    }

    #[test]
    fn drain_consumes_sequence_numbers() {
        let mut q = ReadyQueue::default();
        let a = q.push(task());
        assert_eq!(q.drain().len(), 1);
        assert!(!q.is_pending(a));
        assert_eq!(q.push(task()), a + 1);
    }
}
