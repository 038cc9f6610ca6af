//! Running the loop: `run`, `run_once`, `run_until`, `stop`, `close`, and the
//! guard that sets and resets the running state. The turn itself is `turn.rs`.
//! Tests: tests/loop_callbacks.rs, tests/deferred_run_until_edges.rs.

use super::{Inner, Loop, CURRENT_LOOP};
use crate::deferred::failure::Failure;
use crate::Error;
use std::cell::{Cell, RefCell};
use std::rc::{Rc, Weak};

impl Loop {
    /// Runs turns until [`stop`](Self::stop) is called.
    ///
    /// `stop()` lets the current turn finish; what was queued during it stays
    /// queued for the next `run()`. `stop()` before `run()` makes `run()` do
    /// exactly one turn, with a zero poll timeout.
    ///
    /// # Errors
    /// [`Error::Closed`], [`Error::Running`] if this or another loop is
    /// already running on this thread, or an error from the selector.
    pub fn run(&self) -> Result<(), Error> {
        let _running = RunGuard::enter(self, false)?;
        loop {
            self.inner.turn(self, None)?;
            if self.inner.stopping.get() {
                return Ok(());
            }
        }
    }

    /// Runs one turn: the six steps once. It may sleep in poll as a normal turn
    /// does (until I/O, the next timer, or a remote call; at most 100 ms while
    /// a past burst's buffer room waits to be given back).
    ///
    /// # Errors
    /// As for [`run`](Self::run).
    pub fn run_once(&self) -> Result<(), Error> {
        let _running = RunGuard::enter(self, false)?;
        self.inner.turn(self, None)
    }

    /// Runs until `d` fires, then returns its result (asyncio's
    /// `run_until_complete`).
    ///
    /// The loop's own checks come first, whatever state `d` is in: on a
    /// closed loop or from inside a running one this returns at once with
    /// that error, without touching the running loop, and a `d` that has
    /// already fired returns without running a turn. When it returns, its
    /// hold on `d` ends: if it returned early (the loop was stopped) and `d`
    /// fires later, nothing stops the loop then, and a failure `d` ends with
    /// is reported as unhandled. `d` is never left pending forever by its
    /// producer: a Deferred whose Resolvers are all dropped fails with
    /// [`Abandoned`](crate::deferred::Abandoned).
    ///
    /// # Errors
    /// [`Error::Failed`] with the Deferred's failure (check it with
    /// [`Error::check`], take it with [`Error::into_failure`]); or the loop's
    /// own refusal: [`Error::Closed`], [`Error::Running`] (this or another
    /// loop is running on this thread), [`Error::Stopped`] (the loop was
    /// stopped before `d` fired), or a selector error ([`Error::Io`]). `?`
    /// takes it into `anyhow::Result` or `Box<dyn Error>` with the failure's
    /// error as its `source()`.
    pub fn run_until<T: 'static>(
        &self,
        d: impl Into<crate::deferred::Deferred<T>>,
    ) -> Result<T, Error> {
        let d = d.into();
        let running = RunGuard::enter(self, false)?;
        let slot: Rc<RefCell<Option<Result<T, Failure>>>> = Rc::new(RefCell::new(None));
        let waiting = Rc::new(Cell::new(true));
        let (s, w, inner) = (slot.clone(), waiting.clone(), Rc::downgrade(&self.inner));
        d.add_both(move |r: Result<T, Failure>| {
            if !w.get() {
                // `run_until` has returned: pass a failure on, to be reported.
                return r.map(drop);
            }
            *s.borrow_mut() = Some(r);
            if let Some(inner) = inner.upgrade() {
                inner.stopping.set(true);
            }
            Ok(())
        })
        .detach();
        // As `run()`: a stop ends the run after the current turn.
        let turns = || {
            while slot.borrow().is_none() {
                self.inner.turn(self, None)?;
                if self.inner.stopping.get() {
                    break;
                }
            }
            Ok(())
        };
        let ran: Result<(), Error> = turns();
        waiting.set(false);
        drop(running); // also clears the stop set above
        ran?;
        let r = slot.borrow_mut().take();
        match r {
            Some(r) => r.map_err(Error::Failed),
            None => Err(Error::Stopped),
        }
    }

    /// Asks the loop to stop once the current turn is over.
    pub fn stop(&self) {
        self.inner.stopping.set(true);
        self.inner.wake_host();
    }

    /// Closes the loop: drops, without running them, every queued callback,
    /// timer, registered source and remote call. Afterwards every scheduling
    /// call returns [`Error::Closed`]. Closing a closed loop does nothing.
    ///
    /// # Errors
    /// [`Error::Running`] if called while the loop runs.
    pub fn close(&self) -> Result<(), Error> {
        let inner = &self.inner;
        if inner.running.get() {
            return Err(Error::Running);
        }
        if inner.closed.replace(true) {
            return Ok(());
        }
        inner.refresh_push_check();
        // Collect first, drop after: dropping a closure can run user code that
        // calls back in (and must then see a closed loop, not a held borrow).
        let remote = inner.shared.close();
        let ready = inner.ready.borrow_mut().drain();
        let timers = inner.timers.borrow_mut().drain();
        let sources = inner.io.borrow_mut().drain();
        inner.handler.borrow_mut().take();
        let waiting = inner.shutdown_pool();
        // Each source finishes what it owes (a protocol's `connection_lost`).
        for src in &sources {
            src.clone().close(self);
        }
        drop((remote, ready, timers, sources, waiting));
        Ok(())
    }
}

/// Sets and resets the running state around `run()`/`run_once()`, even if
/// something unwinds out of a turn.
///
/// An `embedded` turn (embed.rs) may run inside another loop's callback on
/// the same thread (that loop is current again afterwards), and leaves
/// blocking remote calls waiting between turns: for them the loop runs until
/// a turn ends stopped.
pub(super) struct RunGuard<'a> {
    lp: &'a Loop,
    outer: Option<Weak<Inner>>,
    embedded: bool,
}

impl<'a> RunGuard<'a> {
    pub(super) fn enter(lp: &'a Loop, embedded: bool) -> Result<RunGuard<'a>, Error> {
        let inner = &lp.inner;
        inner.check_open()?;
        if inner.running.get()
            || (!embedded
                && CURRENT_LOOP.with(|c| c.borrow().as_ref().is_some_and(|w| w.strong_count() > 0)))
        {
            return Err(Error::Running);
        }
        inner.running.set(true);
        inner.refresh_push_check();
        if !inner.remote_running.replace(true) {
            inner.shared.set_running(true);
        }
        let outer = CURRENT_LOOP.with(|c| c.borrow_mut().replace(Rc::downgrade(inner)));
        Ok(RunGuard {
            lp,
            outer,
            embedded,
        })
    }
}

impl Drop for RunGuard<'_> {
    fn drop(&mut self) {
        let inner = &self.lp.inner;
        let stopped = inner.stopping.replace(false);
        inner.running.set(false);
        inner.refresh_push_check();
        if (!self.embedded || stopped) && inner.remote_running.replace(false) {
            inner.shared.set_running(false);
        }
        let outer = self.outer.take();
        CURRENT_LOOP.with(|c| *c.borrow_mut() = outer);
        if inner.close_after_run.get() {
            let _ = self.lp.close();
        }
    }
}
