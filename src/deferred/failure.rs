//! [`Failure`]: an error travelling down a Deferred's errback chain.
//!
//! A `Failure` wraps any `std::error::Error + 'static` (or a caught panic,
//! [`Panicked`]), remembers where it arose, and is cheap to clone: clones are
//! the *same* failure ([`Failure::ptr_eq`]), which is what
//! [`trap`](Failure::trap) relies on to hand back the identical failure. An
//! errback tells failures apart with [`check`](Failure::check) and `trap`.

use std::any::Any;
use std::backtrace::{Backtrace, BacktraceStatus};
use std::error::Error as StdError;
use std::fmt;
use std::panic::Location;
use std::rc::Rc;

/// An error as a value in a callback chain: Twisted's `Failure`, typed.
///
/// `Failure` deliberately does **not** implement `std::error::Error` (as with
/// `anyhow::Error`): that is what lets every error convert into it with `?`.
/// Like `anyhow::Error`, it converts into `Box<dyn Error + 'static>` (keeping
/// the wrapped error as the source chain) and into `Box<dyn Error + Send +
/// Sync + 'static>` (as a [`FailureReport`], since a `Failure` cannot cross
/// threads), so `?` takes it all the way out of `main`:
///
/// ```
/// use deferloop::{succeed, EventLoop};
///
/// fn main() -> Result<(), Box<dyn std::error::Error>> {
///     let ev = EventLoop::new()?;
///     let n = ev.run_until(succeed(2u8))?;
///     assert_eq!(n, 2);
///     Ok(())
/// }
/// ```
///
/// # Examples
/// ```
/// use deferloop::Failure;
/// use std::io;
///
/// let f = Failure::new(io::Error::new(io::ErrorKind::NotFound, "no such thing"));
/// assert!(f.check::<io::Error>());
/// assert_eq!(f.trap::<io::Error>().unwrap().kind(), io::ErrorKind::NotFound);
/// assert!(f.trap::<std::fmt::Error>().is_err()); // the same failure comes back
/// ```
#[derive(Clone)]
pub struct Failure(Rc<Inner>);

struct Inner {
    error: Box<dyn StdError + 'static>,
    origin: &'static Location<'static>,
    backtrace: Option<Backtrace>,
    panic: bool,
}

impl Failure {
    /// Wraps `error`; the failure's origin is the caller's location.
    #[track_caller]
    pub fn new<E: StdError + 'static>(error: E) -> Failure {
        Failure::from_boxed(Box::new(error))
    }

    /// Wraps an already boxed error.
    #[track_caller]
    pub fn from_boxed(error: Box<dyn StdError + 'static>) -> Failure {
        Failure(Rc::new(Inner {
            error,
            origin: Location::caller(),
            backtrace: None,
            panic: false,
        }))
    }

    /// A failure carrying only a message (the error type is [`Message`]).
    #[track_caller]
    pub fn msg(message: impl Into<String>) -> Failure {
        Failure::new(Message(message.into()))
    }

    /// Like [`Failure::new`], and also captures a backtrace of the caller's stack
    /// (always, whatever `RUST_BACKTRACE` says). Capturing costs microseconds: ask
    /// for it where the context matters, not on hot paths.
    #[track_caller]
    pub fn with_backtrace<E: StdError + 'static>(error: E) -> Failure {
        Failure(Rc::new(Inner {
            error: Box::new(error),
            origin: Location::caller(),
            backtrace: Some(Backtrace::force_capture()),
            panic: false,
        }))
    }

    /// Wraps `error` with an explicit origin (for failures the Deferred machinery
    /// makes on behalf of user code, e.g. `ChainedToSelf` at the callback's site).
    pub(crate) fn with_origin<E: StdError + 'static>(
        error: E,
        at: &'static Location<'static>,
    ) -> Failure {
        Failure(Rc::new(Inner {
            error: Box::new(error),
            origin: at,
            backtrace: None,
            panic: false,
        }))
    }

    /// Like [`with_origin`](Self::with_origin), with a backtrace of the
    /// current stack if `RUST_BACKTRACE` (or `RUST_LIB_BACKTRACE`) asks for one.
    pub(crate) fn with_origin_and_backtrace<E: StdError + 'static>(
        error: E,
        at: &'static Location<'static>,
    ) -> Failure {
        Failure(Rc::new(Inner {
            error: Box::new(error),
            origin: at,
            backtrace: Some(Backtrace::capture()),
            panic: false,
        }))
    }

    /// Turns a caught panic payload into a failure whose error is [`Panicked`];
    /// `at` is the location of the code that was running (its scheduling site).
    pub(crate) fn from_panic(
        payload: Box<dyn Any + Send>,
        at: &'static Location<'static>,
    ) -> Failure {
        let message = panic_message(&*payload);
        Failure(Rc::new(Inner {
            error: Box::new(Panicked { message }),
            origin: at,
            backtrace: None,
            panic: true,
        }))
    }

    /// Where the failure arose: the `Failure::new`/`?` call, or for a panic the
    /// place the panicking callback was added or scheduled.
    pub fn origin(&self) -> &'static Location<'static> {
        self.0.origin
    }

    /// The captured backtrace, if one was asked for.
    pub fn backtrace(&self) -> Option<&Backtrace> {
        self.0
            .backtrace
            .as_ref()
            .filter(|b| b.status() == BacktraceStatus::Captured)
    }

    /// Whether this failure is a caught panic.
    pub fn is_panic(&self) -> bool {
        self.0.panic
    }

    /// The wrapped error.
    pub fn error(&self) -> &(dyn StdError + 'static) {
        &*self.0.error
    }

    /// Whether the wrapped error is an `E` (Twisted's `check`).
    pub fn check<E: StdError + 'static>(&self) -> bool {
        self.0.error.is::<E>()
    }

    /// The wrapped error as an `E`, if it is one.
    pub fn downcast_ref<E: StdError + 'static>(&self) -> Option<&E> {
        self.0.error.downcast_ref::<E>()
    }

    /// Twisted's `trap`: the error as an `E`, or else `Err` with this **same**
    /// failure, so that in an errback `f.trap::<E>()?` lets other errors flow on.
    ///
    /// # Errors
    /// A clone of this failure when its error is not an `E`.
    pub fn trap<E: StdError + 'static>(&self) -> Result<&E, Failure> {
        self.0.error.downcast_ref::<E>().ok_or_else(|| self.clone())
    }

    /// The failure rendered as a `Send + Sync` error: what crosses threads
    /// (see [`FailureReport`]).
    pub fn report(&self) -> FailureReport {
        FailureReport::of(self)
    }

    /// Whether `a` and `b` are the same failure (clones of one another).
    pub fn ptr_eq(a: &Failure, b: &Failure) -> bool {
        Rc::ptr_eq(&a.0, &b.0)
    }
}

impl<E: StdError + 'static> From<E> for Failure {
    #[track_caller]
    fn from(error: E) -> Failure {
        Failure::new(error)
    }
}

/// The error, then each `source()` in turn, separated by `": "`.
impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0.error)?;
        let mut source = self.0.error.source();
        while let Some(s) = source {
            write!(f, ": {s}")?;
            source = s.source();
        }
        Ok(())
    }
}

impl fmt::Debug for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Failure({self} at {})", self.0.origin)?;
        if let Some(bt) = self.backtrace() {
            write!(f, "\n{bt}")?;
        }
        Ok(())
    }
}

/// A [`Failure`] as a standard error: what `?` turns a `Failure` into when the
/// function returns `Box<dyn Error>`. Its source is the wrapped error's source,
/// its `Debug` the failure's (with origin and backtrace).
struct AsStdError(Failure);

impl fmt::Display for AsStdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0 .0.error, f)
    }
}

impl fmt::Debug for AsStdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl StdError for AsStdError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.0 .0.error.source()
    }
}

impl From<Failure> for Box<dyn StdError + 'static> {
    fn from(f: Failure) -> Self {
        Box::new(AsStdError(f))
    }
}

impl From<Failure> for Box<dyn StdError + Send + Sync + 'static> {
    fn from(f: Failure) -> Self {
        Box::new(f.report())
    }
}

/// A [`Failure`] rendered so that it can cross threads (`Send + Sync`): each
/// error of its cause chain as text, where it arose, whether it was a panic,
/// and its backtrace if one was captured. Its `source()` chain mirrors the
/// failure's. Made by [`Failure::report`]; what
/// [`Remote::call_blocking`](crate::Remote::call_blocking) returns for a failed
/// Deferred, inside [`Error::Failed`](crate::Error::Failed).
#[derive(Clone, PartialEq, Eq)]
pub struct FailureReport {
    message: String,
    source: Option<Box<FailureReport>>,
    origin: &'static Location<'static>,
    panic: bool,
    backtrace: Option<String>,
}

impl FailureReport {
    fn of(f: &Failure) -> FailureReport {
        let mut chain = vec![f.0.error.to_string()];
        let mut source = f.0.error.source();
        while let Some(s) = source {
            chain.push(s.to_string());
            source = s.source();
        }
        let mut report = None;
        for message in chain.into_iter().rev() {
            report = Some(FailureReport {
                message,
                source: report.map(Box::new),
                origin: f.0.origin,
                panic: false,
                backtrace: None,
            });
        }
        let mut report = report.expect("the chain has the error itself");
        report.panic = f.0.panic;
        report.backtrace = f.backtrace().map(|b| b.to_string());
        report
    }

    /// Where the failure arose (see [`Failure::origin`]).
    pub fn origin(&self) -> &'static Location<'static> {
        self.origin
    }

    /// Whether the failure was a caught panic.
    pub fn is_panic(&self) -> bool {
        self.panic
    }

    /// The failure's backtrace, rendered, if one was captured.
    pub fn backtrace(&self) -> Option<&str> {
        self.backtrace.as_deref()
    }
}

/// The error's message only; the causes are its `source()` chain.
impl fmt::Display for FailureReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// As a `Failure`'s: the message with its causes, then the origin.
impl fmt::Debug for FailureReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        let mut source = self.source.as_deref();
        while let Some(s) = source {
            write!(f, ": {}", s.message)?;
            source = s.source.as_deref();
        }
        write!(f, " (raised at {})", self.origin)?;
        if let Some(bt) = &self.backtrace {
            write!(f, "\n{bt}")?;
        }
        Ok(())
    }
}

impl StdError for FailureReport {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.source
            .as_deref()
            .map(|s| s as &(dyn StdError + 'static))
    }
}

/// The error inside a [`Failure`] made from a caught panic.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Panicked {
    /// The panic message (`"Box<dyn Any>"` when the payload was not a string).
    pub message: String,
}

impl fmt::Display for Panicked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "panicked: {}", self.message)
    }
}

impl StdError for Panicked {}

/// A plain message as an error, for [`Failure::msg`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message(pub String);

impl fmt::Display for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl StdError for Message {}

pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&'static str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "Box<dyn Any>".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;

    #[derive(Debug)]
    struct Outer(io::Error);
    impl fmt::Display for Outer {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("outer")
        }
    }
    impl StdError for Outer {
        fn source(&self) -> Option<&(dyn StdError + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn display_walks_the_cause_chain() {
        let f = Failure::new(Outer(io::Error::other("inner")));
        assert_eq!(f.to_string(), "outer: inner");
    }

    #[test]
    fn trap_returns_the_same_failure_when_the_type_differs() {
        let f = Failure::msg("boom");
        let back = f.trap::<io::Error>().unwrap_err();
        assert!(Failure::ptr_eq(&f, &back));
        assert_eq!(f.trap::<Message>().unwrap().0, "boom");
    }

    #[test]
    fn question_mark_records_its_own_line_as_origin() {
        fn parse() -> Result<u8, Failure> {
            let n: u8 = "x".parse::<u8>()?;
            Ok(n)
        }
        let line = line!() - 3;
        let f = parse().unwrap_err();
        assert_eq!(f.origin().line(), line);
        assert!(f.check::<std::num::ParseIntError>());
    }

    #[test]
    fn panic_payloads_become_panicked_errors() {
        let f = Failure::from_panic(Box::new("bad"), Location::caller());
        assert!(f.is_panic());
        assert_eq!(f.downcast_ref::<Panicked>().unwrap().message, "bad");
        let f = Failure::from_panic(Box::new(String::from("worse")), Location::caller());
        assert_eq!(f.to_string(), "panicked: worse");
        let f = Failure::from_panic(Box::new(7u8), Location::caller());
        assert_eq!(f.to_string(), "panicked: Box<dyn Any>");
    }

    #[test]
    fn backtrace_is_captured_only_when_asked() {
        assert!(Failure::msg("x").backtrace().is_none());
        let f = Failure::with_backtrace(Message("y".into()));
        assert!(f.backtrace().is_some());
    }
}
