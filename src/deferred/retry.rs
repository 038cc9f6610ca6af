//! Retrying an operation: [`retry`] runs it until it succeeds, a
//! [`RetryPolicy`] says to give up, or it is cancelled; [`Backoff`] is the
//! wait between attempts (exponential, capped, with seeded jitter).
//!
//! The policy is a value (tenacity's shape: attempts, wait, which failures to
//! retry), the driver is [`loop_fn`] with a timer between
//! attempts. Differences from the retry libraries users know, on purpose:
//! - **No unbounded default** (a bare tenacity decorator retries forever
//!   without waiting): 3 attempts, 100 ms doubling to at most 10 s, full jitter.
//! - **The final failure keeps every attempt** ([`GaveUp`]); its `source()`
//!   is the last attempt's error, so a chain walk finds it. Where an errback
//!   must see the last error itself (tenacity's `reraise=True`), say
//!   [`RetryPolicy::reraise`].
//! - **A cancelled attempt is never retried**: cancelling the retry cancels
//!   the attempt or the timer that is pending, and nothing runs after it.
//! - **Seeded jitter**: [`Backoff::seed`] makes the waits the same on every
//!   run, for tests on a [`ManualClock`](crate::ManualClock).

// Tests: tests/deferred_retry.rs.

use super::flow::loop_fn;
use super::{defer_later, fail, maybe_deferred, Cancelled, Deferred, IntoStep};
use crate::{AsClock, Clock, Failure};
use std::cell::RefCell;
use std::error::Error as StdError;
use std::fmt;
use std::ops::ControlFlow;
use std::panic::Location;
use std::rc::Rc;
use std::time::{Duration, Instant};

type Predicate = Box<dyn FnMut(&Failure) -> bool>;
type Hint = Box<dyn FnMut(&Failure) -> Option<Duration>>;

/// When to retry and how long to wait: the attempts, the [`Backoff`], an
/// overall deadline, which failures are worth another attempt.
///
/// ```
/// use deferloop::deferred::{Backoff, RetryPolicy};
/// use std::time::Duration;
///
/// let policy = RetryPolicy::new()
///     .attempts(5)
///     .backoff(Backoff::exponential(Duration::from_millis(50)).max(Duration::from_secs(2)))
///     .deadline(Duration::from_secs(10))
///     .retry_if(|f| f.check::<std::io::Error>());
/// # let _ = policy;
/// ```
pub struct RetryPolicy {
    attempts: u32,
    backoff: Box<dyn Iterator<Item = Duration>>,
    deadline: Option<Duration>,
    retry_if: Option<Predicate>,
    delay_hint: Option<Hint>,
    reraise: bool,
}

impl RetryPolicy {
    /// 3 attempts, [`Backoff::default`] between them, no deadline, every
    /// failure but a cancellation retried.
    pub fn new() -> RetryPolicy {
        RetryPolicy {
            attempts: 3,
            backoff: Box::new(Backoff::default()),
            deadline: None,
            retry_if: None,
            delay_hint: None,
            reraise: false,
        }
    }

    /// At most `n` attempts in all (the first one included). `0` is refused:
    /// [`retry`] then fails at once with
    /// [`Error::InvalidInput`](crate::Error::InvalidInput).
    pub fn attempts(mut self, n: u32) -> RetryPolicy {
        self.attempts = n;
        self
    }

    /// The waits between attempts: a [`Backoff`], or any iterator of
    /// durations (its end means no more attempts).
    pub fn backoff(mut self, waits: impl Iterator<Item = Duration> + 'static) -> RetryPolicy {
        self.backoff = Box::new(waits);
        self
    }

    /// Gives up once `deadline` has passed since [`retry`] was called: an
    /// attempt still running then is cancelled (its failure is a
    /// [`TimedOut`](super::TimedOut)), and no attempt starts whose wait
    /// would end after it.
    pub fn deadline(mut self, deadline: Duration) -> RetryPolicy {
        self.deadline = Some(deadline);
        self
    }

    /// Retries only the failures for which `pred` is true; another failure
    /// gives up at once ([`GiveUpReason::NotRetried`]).
    pub fn retry_if(mut self, pred: impl FnMut(&Failure) -> bool + 'static) -> RetryPolicy {
        self.retry_if = Some(Box::new(pred));
        self
    }

    /// A wait the failure itself asks for (an HTTP `Retry-After`, a server's
    /// "busy, come back in 2 s"): when `hint` returns `Some`, that wait
    /// replaces the back-off's next one.
    pub fn delay_hint(
        mut self,
        hint: impl FnMut(&Failure) -> Option<Duration> + 'static,
    ) -> RetryPolicy {
        self.delay_hint = Some(Box::new(hint));
        self
    }

    /// On giving up, fail with the last attempt's own failure instead of a
    /// [`GaveUp`] (tenacity's `reraise=True`): errbacks that `trap` the
    /// operation's error keep working; the earlier failures are dropped.
    pub fn reraise(mut self) -> RetryPolicy {
        self.reraise = true;
        self
    }
}

impl Default for RetryPolicy {
    fn default() -> RetryPolicy {
        RetryPolicy::new()
    }
}

impl fmt::Debug for RetryPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryPolicy")
            .field("attempts", &self.attempts)
            .field("deadline", &self.deadline)
            .field("retry_if", &self.retry_if.is_some())
            .field("delay_hint", &self.delay_hint.is_some())
            .field("reraise", &self.reraise)
            .finish_non_exhaustive()
    }
}

/// How jitter spreads a back-off's waits (AWS's names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Jitter {
    /// The wait as computed.
    None,
    /// Uniform in `[0, wait]`: clients that failed together spread the most.
    Full,
    /// Uniform in `[wait / 2, wait]`: never less than half the wait.
    Equal,
}

/// Exponentially growing waits, capped, with jitter: an endless
/// `Iterator<Item = Duration>` (the attempts are counted by the policy).
///
/// The random numbers come from a small generator seeded by
/// [`seed`](Self::seed) — the same seed gives the same waits, on any clock —
/// or, without one, from the standard library's per-process random keys.
///
/// ```
/// use deferloop::deferred::{Backoff, Jitter};
/// use std::time::Duration;
///
/// let ms = Duration::from_millis;
/// let waits: Vec<_> = Backoff::exponential(ms(100)).max(ms(500)).jitter(Jitter::None).take(5).collect();
/// assert_eq!(waits, [ms(100), ms(200), ms(400), ms(500), ms(500)]);
/// ```
#[derive(Debug, Clone)]
pub struct Backoff {
    next: Duration,
    factor: u32,
    max: Duration,
    jitter: Jitter,
    rng: u64,
}

impl Backoff {
    /// Waits of `initial`, then doubling, capped at 10 s; full jitter.
    pub fn exponential(initial: Duration) -> Backoff {
        let seed = {
            use std::hash::{BuildHasher, RandomState};
            RandomState::new().hash_one(0u8)
        };
        Backoff {
            next: initial,
            factor: 2,
            max: Duration::from_secs(10),
            jitter: Jitter::Full,
            rng: seed,
        }
    }

    /// The same wait every time, no jitter.
    pub fn constant(wait: Duration) -> Backoff {
        Backoff::exponential(wait)
            .factor(1)
            .max(wait)
            .jitter(Jitter::None)
    }

    /// Each wait is the previous one times `factor` (default 2; `0` counts as 1).
    pub fn factor(mut self, factor: u32) -> Backoff {
        self.factor = factor.max(1);
        self
    }

    /// No wait is longer than `max` (before jitter; default 10 s).
    pub fn max(mut self, max: Duration) -> Backoff {
        self.max = max;
        self
    }

    /// How the waits are spread (default [`Jitter::Full`]).
    pub fn jitter(mut self, jitter: Jitter) -> Backoff {
        self.jitter = jitter;
        self
    }

    /// Makes the jitter deterministic: the same seed, the same waits.
    pub fn seed(mut self, seed: u64) -> Backoff {
        self.rng = seed;
        self
    }

    /// SplitMix64: small, fast, and good enough to spread waits.
    fn random(&mut self) -> u64 {
        self.rng = self.rng.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, d]`, to the nanosecond.
    fn up_to(&mut self, d: Duration) -> Duration {
        let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(self.random() % nanos.saturating_add(1))
    }
}

impl Default for Backoff {
    /// `Backoff::exponential(100 ms)`: 100 ms doubling to at most 10 s, full jitter.
    fn default() -> Backoff {
        Backoff::exponential(Duration::from_millis(100))
    }
}

impl Iterator for Backoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let wait = self.next.min(self.max);
        self.next = self.next.saturating_mul(self.factor).min(self.max);
        Some(match self.jitter {
            Jitter::None => wait,
            Jitter::Full => self.up_to(wait),
            Jitter::Equal => wait / 2 + self.up_to(wait - wait / 2),
        })
    }
}

/// Why [`retry`] gave up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum GiveUpReason {
    /// Every attempt the policy allows failed (or the back-off ended).
    Attempts,
    /// The policy's deadline passed.
    Deadline,
    /// The last failure is not one the policy retries.
    NotRetried,
}

/// [`retry`] gave up: every attempt's failure, in order, and why.
///
/// Its `source()` is the last attempt's error, so `anyhow`'s chain (and any
/// `source()` walk) finds the operation's own error type.
#[derive(Debug, Clone)]
pub struct GaveUp {
    /// Each attempt's failure, first to last (never empty).
    pub attempts: Vec<Failure>,
    /// Why no further attempt was made.
    pub reason: GiveUpReason,
}

impl GaveUp {
    /// The last attempt's failure.
    pub fn last(&self) -> &Failure {
        self.attempts
            .last()
            .expect("a GaveUp has at least one attempt")
    }
}

impl fmt::Display for GaveUp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let why = match self.reason {
            GiveUpReason::Attempts => "no attempts left",
            GiveUpReason::Deadline => "deadline passed",
            GiveUpReason::NotRetried => "not a failure to retry",
        };
        write!(f, "gave up after {} attempt", self.attempts.len())?;
        if self.attempts.len() != 1 {
            f.write_str("s")?;
        }
        write!(f, " ({why})")
    }
}

impl StdError for GaveUp {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        Some(self.last().error())
    }
}

/// Runs `op` until it succeeds, and fires with its value; between failed
/// attempts waits as `policy` says, on `clock`. `op` gets the attempt's
/// number (0 first) and returns what a callback may return.
///
/// - Gives up with a [`GaveUp`] holding every attempt's failure (or, with
///   [`RetryPolicy::reraise`], the last failure itself).
/// - A panic in `op` is that attempt's failure.
/// - A [`Cancelled`] attempt is never retried: cancelling the returned
///   Deferred cancels the attempt or the wait that is pending, and no
///   attempt follows.
/// - A policy of 0 attempts fails at once with
///   [`Error::InvalidInput`](crate::Error::InvalidInput); `op` never runs.
///
/// # Examples
/// An operation that fails twice, retried on a manual clock with seeded jitter:
/// ```
/// use deferloop::deferred::{retry, Backoff, RetryPolicy};
/// use deferloop::{Failure, ManualClock};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let policy = RetryPolicy::new()
///     .attempts(5)
///     .backoff(Backoff::exponential(Duration::from_secs(1)).seed(7));
/// let d = retry(&clock, policy, |attempt| {
///     if attempt < 2 { Err(Failure::msg("busy")) } else { Ok(attempt) }
/// });
/// clock.pump(&[Duration::from_secs(1); 3]); // two waits: at most 1 s, then 2 s
/// assert_eq!(d.result().unwrap().unwrap(), 2);
/// ```
#[track_caller]
pub fn retry<C, R, F>(clock: &C, policy: RetryPolicy, op: F) -> Deferred<R::Output>
where
    C: AsClock,
    R: IntoStep,
    F: FnMut(u32) -> R + 'static,
{
    let at = Location::caller();
    if policy.attempts == 0 {
        return fail(Failure::new(crate::Error::InvalidInput(
            "retry: a policy needs at least one attempt",
        )));
    }
    let clock = clock.as_clock().clone();
    let end = policy.deadline.map(|d| clock.now() + d);
    let policy = Rc::new(RefCell::new(policy));
    let op = Rc::new(RefCell::new(op));
    loop_fn(
        (0u32, Vec::new()),
        move |(n, failures): (u32, Vec<Failure>)| {
            let attempt = {
                let op = op.clone();
                maybe_deferred(move || (op.borrow_mut())(n))
            };
            let attempt = match end {
                Some(end) => {
                    attempt.add_timeout(end.saturating_duration_since(clock.now()), &clock)
                }
                None => attempt,
            };
            let (policy, clock) = (policy.clone(), clock.clone());
            attempt.add_both(move |r| match r {
                Ok(v) => super::succeed(ControlFlow::Break(v)),
                Err(f) => after_failure(&clock, &policy, end, n, failures, f, at),
            })
        },
    )
}

/// What follows a failed attempt `n`: a wait then attempt `n + 1`, or the
/// final failure.
fn after_failure<C: Clock, T: 'static>(
    clock: &C,
    policy: &RefCell<RetryPolicy>,
    end: Option<Instant>,
    n: u32,
    mut failures: Vec<Failure>,
    f: Failure,
    at: &'static Location<'static>,
) -> Deferred<ControlFlow<T, (u32, Vec<Failure>)>> {
    if f.check::<Cancelled>() {
        return fail(f);
    }
    let mut p = policy.borrow_mut();
    let retried = p.retry_if.as_mut().is_none_or(|pred| pred(&f));
    let hint = p.delay_hint.as_mut().and_then(|h| h(&f));
    let reraise = p.reraise;
    failures.push(f);
    let now = clock.now();
    let reason = if !retried {
        GiveUpReason::NotRetried
    } else if end.is_some_and(|end| now >= end) {
        GiveUpReason::Deadline
    } else if n + 1 >= p.attempts {
        GiveUpReason::Attempts
    } else {
        match hint.or_else(|| p.backoff.next()) {
            None => GiveUpReason::Attempts,
            Some(wait) if end.is_some_and(|end| now + wait >= end) => GiveUpReason::Deadline,
            Some(wait) => {
                drop(p);
                return defer_later(clock, wait, move || {
                    Ok(ControlFlow::Continue((n + 1, failures)))
                });
            }
        }
    };
    if reraise {
        return fail(failures.pop().expect("pushed above"));
    }
    fail(Failure::with_origin(
        GaveUp {
            attempts: failures,
            reason,
        },
        at,
    ))
}
