//! What the loop does with errors it cannot hand to anyone: the exception
//! handler (asyncio's `set_exception_handler`), `ExceptionContext`, and the
//! default handler, which logs. Tests: tests/loop_panics.rs,
//! tests/loop_default_handler_contained.rs, tests/loop_handler_panics_contained.rs.

use super::Loop;
use crate::Failure;
use std::panic::{self, AssertUnwindSafe, Location};

pub(crate) type ExceptionHandler = Box<dyn FnMut(&Loop, &ExceptionContext<'_>)>;

impl Loop {
    /// Installs the function that receives errors the loop cannot hand to
    /// anyone else (a panicking callback, a failing accept), replacing the
    /// one before; [`reset_exception_handler`](Self::reset_exception_handler)
    /// restores the default, which logs them with `log::error!`.
    ///
    /// A panic inside the handler is caught and logged (on stderr if the
    /// logger panics too), then the default handler reports the error; the
    /// loop goes on.
    ///
    /// # Examples
    /// ```
    /// use deferloop::EventLoop;
    /// use std::{cell::Cell, rc::Rc};
    ///
    /// let ev = EventLoop::new()?;
    /// let seen = Rc::new(Cell::new(0));
    /// let s = seen.clone();
    /// ev.set_exception_handler(move |_, cx| {
    ///     eprintln!("reported: {}", cx.message);
    ///     s.set(s.get() + 1);
    /// });
    /// ev.call_soon(|_| panic!("oops"))?;
    /// ev.stop();
    /// ev.run()?;
    /// assert_eq!(seen.get(), 1);
    /// ev.reset_exception_handler();
    /// # Ok::<(), deferloop::Error>(())
    /// ```
    pub fn set_exception_handler(
        &self,
        handler: impl FnMut(&Loop, &ExceptionContext<'_>) + 'static,
    ) {
        *self.inner.handler.borrow_mut() = Some(Box::new(handler));
    }

    /// Restores the default exception handler, [`default_exception_handler`].
    pub fn reset_exception_handler(&self) {
        self.inner.handler.borrow_mut().take();
    }

    /// Passes `ctx` to the exception handler (or the default one).
    pub fn call_exception_handler(&self, ctx: &ExceptionContext<'_>) {
        let taken = self.inner.handler.borrow_mut().take();
        let Some(mut handler) = taken else {
            contained_default_handler(ctx);
            return;
        };
        let r = panic::catch_unwind(AssertUnwindSafe(|| handler(self, ctx)));
        // Put it back unless the handler installed a new one meanwhile.
        let mut slot = self.inner.handler.borrow_mut();
        if slot.is_none() && !self.inner.closed.get() {
            *slot = Some(handler);
        }
        drop(slot);
        if let Err(payload) = r {
            let msg = crate::deferred::failure::panic_message(&*payload);
            // The report is contained too: a logger that panics here would
            // otherwise take the panic out of `run()`.
            let reported = panic::catch_unwind(AssertUnwindSafe(|| {
                log::error!(
                    "deferloop: the exception handler panicked ({msg}) while handling: {}",
                    ctx.message
                )
            }));
            if reported.is_err() {
                eprintln!(
                    "deferloop: the exception handler panicked ({msg}), and the logger \
                     while reporting it, while handling: {}",
                    ctx.message
                );
            }
            contained_default_handler(ctx);
        }
    }
}

/// What a [`Loop`]'s exception handler receives.
#[derive(Debug)]
#[non_exhaustive]
pub struct ExceptionContext<'a> {
    /// What happened, e.g. `"Exception in callback"`.
    pub message: &'a str,
    /// The failure, if there is one (for a panic: a [`Panicked`](crate::Panicked) error).
    pub failure: Option<&'a Failure>,
    /// Where the code involved was scheduled or registered.
    pub location: Option<&'static Location<'static>>,
}

impl<'a> ExceptionContext<'a> {
    /// A context with a message only.
    pub fn new(message: &'a str) -> Self {
        ExceptionContext {
            message,
            failure: None,
            location: None,
        }
    }
}

/// Runs the default handler; if it panics (a logger that fails), says so on
/// stderr instead of letting the panic out of `run()` (asyncio's
/// "Exception in default exception handler").
fn contained_default_handler(ctx: &ExceptionContext<'_>) {
    if let Err(payload) = panic::catch_unwind(AssertUnwindSafe(|| default_exception_handler(ctx))) {
        let msg = crate::deferred::failure::panic_message(&*payload);
        eprintln!(
            "deferloop: the default exception handler panicked ({msg}) while handling: {}",
            ctx.message
        );
    }
}

/// Logs `ctx` with `log::error!`: message, failure, location.
pub fn default_exception_handler(ctx: &ExceptionContext<'_>) {
    match (ctx.failure, ctx.location) {
        (Some(f), Some(loc)) => log::error!(
            "deferloop: {} scheduled at {loc}: {f} (raised at {})",
            ctx.message,
            f.origin()
        ),
        (Some(f), None) => {
            log::error!("deferloop: {}: {f} (raised at {})", ctx.message, f.origin())
        }
        (None, Some(loc)) => log::error!("deferloop: {} (at {loc})", ctx.message),
        (None, None) => log::error!("deferloop: {}", ctx.message),
    }
}
