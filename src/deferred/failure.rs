//! [`Failure`]: an error travelling down a Deferred's errback chain.
//!
//! A `Failure` wraps any `std::error::Error + Send + Sync + 'static` (or a
//! caught panic, [`Panicked`]; [`Failure::local`] snapshots one that is not
//! `Send`), remembers where it arose, and is cheap to clone: clones are the
//! *same* failure ([`Failure::ptr_eq`]), which is what [`trap`](Failure::trap)
//! relies on to hand back the identical failure. An errback tells failures
//! apart with [`check`](Failure::check) and `trap`. A `Failure` is `Send +
//! Sync`, so it reaches another thread and `main` whole.

use std::any::Any;
use std::backtrace::{Backtrace, BacktraceStatus};
use std::error::Error as StdError;
use std::fmt;
use std::panic::Location;
use std::sync::Arc;

/// An error as a value in a callback chain: Twisted's `Failure`, typed.
///
/// `Failure` deliberately does **not** implement `std::error::Error` (as with
/// `anyhow::Error`): that is what lets every error convert into it with `?`
/// (a blanket `From<E: Error>` and an `Error` impl cannot both exist). So the
/// way out is the crate's [`Error`](crate::Error): [`run_until`](crate::Loop::run_until)
/// returns `Error::Failed(failure)`, a `std::error::Error + Send + Sync`
/// whose `source()` is the failure's own error, and `?` takes it into
/// `anyhow::Result` or `Box<dyn Error>`, where a chain walk (`chain()`,
/// `root_cause()`, `source()`) still finds the `TimedOut` or `io::Error`
/// inside. A bare `Result<_, Failure>` goes into `Box<dyn Error + Send +
/// Sync>` or `Box<dyn Error>` with `?` (the box is the failure's own error
/// when no clone is alive, so `downcast_ref` works on it directly), and into
/// `anyhow::Result` with `.map_err(Failure::into_error)?`:
///
/// ```
/// use deferloop::{fail, succeed, EventLoop, Failure};
/// use deferloop::deferred::Cancelled;
///
/// fn main() -> Result<(), Box<dyn std::error::Error>> {
///     let ev = EventLoop::new()?;
///     let n = ev.run_until(succeed(2u8))?;
///     assert_eq!(n, 2);
///     let e = ev.run_until(fail::<u8>(Cancelled)).unwrap_err();
///     assert!(e.check::<Cancelled>());
///     let bare: Result<u8, Failure> = Err(Failure::new(Cancelled));
///     let boxed: Box<dyn std::error::Error> = bare.unwrap_err().into();
///     assert!(boxed.downcast_ref::<Cancelled>().is_some());
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
pub struct Failure(Arc<Inner>);

struct Inner {
    error: Box<dyn StdError + Send + Sync + 'static>,
    origin: &'static Location<'static>,
    backtrace: Option<Backtrace>,
    panic: bool,
}

impl Failure {
    /// Wraps `error`; the failure's origin is the caller's location.
    #[track_caller]
    pub fn new<E: StdError + Send + Sync + 'static>(error: E) -> Failure {
        Failure::from_boxed(Box::new(error))
    }

    /// Wraps an already boxed error.
    #[track_caller]
    pub fn from_boxed(error: Box<dyn StdError + Send + Sync + 'static>) -> Failure {
        Failure(Arc::new(Inner {
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

    /// Wraps an error that is not `Send + Sync` (one holding an `Rc`, say),
    /// which `Failure::new` and `?` do not take: it keeps a [`LocalError`],
    /// a faithful text snapshot of the error (its type name, message and
    /// `source()` chain). Lossy: the original type can no longer be
    /// downcast to. A failure crosses threads, so its error must be able to.
    #[track_caller]
    pub fn local<E: StdError + 'static>(error: E) -> Failure {
        Failure::new(LocalError::of(&error))
    }

    /// Like [`Failure::new`], and also captures a backtrace of the caller's stack
    /// (always, whatever `RUST_BACKTRACE` says). Capturing costs microseconds: ask
    /// for it where the context matters, not on hot paths.
    #[track_caller]
    pub fn with_backtrace<E: StdError + Send + Sync + 'static>(error: E) -> Failure {
        Failure(Arc::new(Inner {
            error: Box::new(error),
            origin: Location::caller(),
            backtrace: Some(Backtrace::force_capture()),
            panic: false,
        }))
    }

    /// Wraps `error` with an explicit origin (for failures the Deferred machinery
    /// makes on behalf of user code, e.g. `ChainedToSelf` at the callback's site).
    pub(crate) fn with_origin<E: StdError + Send + Sync + 'static>(
        error: E,
        at: &'static Location<'static>,
    ) -> Failure {
        Failure(Arc::new(Inner {
            error: Box::new(error),
            origin: at,
            backtrace: None,
            panic: false,
        }))
    }

    /// Like [`with_origin`](Self::with_origin), with a backtrace of the
    /// current stack if `RUST_BACKTRACE` (or `RUST_LIB_BACKTRACE`) asks for one.
    pub(crate) fn with_origin_and_backtrace<E: StdError + Send + Sync + 'static>(
        error: E,
        at: &'static Location<'static>,
    ) -> Failure {
        Failure(Arc::new(Inner {
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
        Failure(Arc::new(Inner {
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

    /// This failure as the crate's [`Error`](crate::Error): `Error::Failed`,
    /// a `std::error::Error + Send + Sync` whose `source()` is the failure's
    /// error. The way to `?` a bare `Result<_, Failure>` into `anyhow::Result`:
    /// `.map_err(Failure::into_error)?`.
    pub fn into_error(self) -> crate::Error {
        crate::Error::Failed(self)
    }

    /// Whether `a` and `b` are the same failure (clones of one another).
    pub fn ptr_eq(a: &Failure, b: &Failure) -> bool {
        Arc::ptr_eq(&a.0, &b.0)
    }
}

impl<E: StdError + Send + Sync + 'static> From<E> for Failure {
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

/// The failure's own error, as the box it was made with when this is the
/// only clone (so `downcast_ref::<TimedOut>()` works on the box itself); when
/// another clone is still alive, an [`Error::Failed`](crate::Error::Failed)
/// holding it, whose `source()` is the failure's error (a chain walk finds it).
/// The unique case keeps the error alone: ask for [`Failure::into_error`]
/// where the origin matters more than a direct downcast.
impl From<Failure> for Box<dyn StdError + Send + Sync + 'static> {
    fn from(f: Failure) -> Self {
        match Arc::try_unwrap(f.0) {
            Ok(inner) => inner.error,
            Err(shared) => Box::new(crate::Error::Failed(Failure(shared))),
        }
    }
}

/// As for `Box<dyn Error + Send + Sync>`.
impl From<Failure> for Box<dyn StdError + 'static> {
    fn from(f: Failure) -> Self {
        let boxed: Box<dyn StdError + Send + Sync + 'static> = f.into();
        boxed
    }
}

impl From<Failure> for crate::Error {
    fn from(f: Failure) -> Self {
        crate::Error::Failed(f)
    }
}

/// The text of an error that cannot cross threads, kept by [`Failure::local`]:
/// its type's name, its message, and its `source()` chain, each as text.
/// Displays as the original did; it can no longer be downcast to the
/// original type (as a stringified traceback loses the exception object).
#[derive(Clone, PartialEq, Eq)]
pub struct LocalError {
    type_name: &'static str,
    message: String,
    source: Option<Box<LocalError>>,
}

impl LocalError {
    fn of<E: StdError + 'static>(error: &E) -> LocalError {
        let mut chain = Vec::new();
        let mut source = error.source();
        while let Some(s) = source {
            chain.push(s.to_string());
            source = s.source();
        }
        let mut tail = None;
        for message in chain.into_iter().rev() {
            tail = Some(Box::new(LocalError {
                type_name: "",
                message,
                source: tail,
            }));
        }
        LocalError {
            type_name: std::any::type_name::<E>(),
            message: error.to_string(),
            source: tail,
        }
    }

    /// The original error's type name (empty for the causes, whose type a
    /// `dyn Error` does not tell).
    pub fn type_name(&self) -> &'static str {
        self.type_name
    }
}

impl fmt::Display for LocalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl fmt::Debug for LocalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.type_name.is_empty() {
            write!(f, "{:?}", self.message)
        } else {
            write!(f, "{}({:?})", self.type_name, self.message)
        }
    }
}

impl StdError for LocalError {
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
