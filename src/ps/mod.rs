//! `ps` and `pstree` for a running loop: what each pending [`Deferred`](crate::Deferred)
//! waits on, and the loop's timers and ready queue — inside the process, or
//! from outside it over an owner-only Unix socket.
//!
//! Owns the public switch ([`enable`], `DEFERLOOP_PS`), [`Report`] and its
//! text views ([`Report::ps`], [`Report::pstree`], [`Report::loop_summary`],
//! [`Report::ss`]),
//! the socket server ([`serve`], [`PsServer`]) and its client ([`query`]), and
//! the dump to the log on a signal ([`log_on_signal`]). The
//! table of Deferreds itself is `deferred/registry.rs`; what runs on the
//! server thread is `serve.rs`; the text is `text.rs`. Tests: tests/ps_*.rs.
//!
//! # Off by default, and free when off
//! Nothing is recorded until [`enable`] is called on the loop's thread, or a
//! loop is made with the environment variable `DEFERLOOP_PS` set (`1`:
//! record; `serve`: record and [`serve`] at the default path). Off, making a
//! Deferred tests one thread-local flag; chaining, firing and running
//! callbacks test nothing (BENCHMARKS.md has the measurement).
//!
//! # What waits on what
//! An edge from a Deferred to another is read from the chain itself (a
//! callback returned a pending Deferred; `chain_deferred` feeds one) or was
//! recorded by [`DeferredList`](crate::DeferredList), [`race`](crate::race),
//! `gather_results`, scopes and `map_limit` for their inputs. A leaf is tagged
//! by the code that made it: a timer (`defer_later`), a thread-pool job, a
//! lock, semaphore or queue turn, a stream read, a connect, a child process,
//! a signal. A Deferred made with `Deferred::new` whose `Resolver` user code
//! holds waits on nothing the registry can name: it is listed with its
//! creation site, and that site is the place to look.
//!
//! # Cycles
//! A cycle of waits (`a` fed by `b`, `b` fed by `a`) never fires. `pstree`
//! prints each cycle as `cycle: #a → #b → #a` and still prints every tree:
//! asyncio's `pstree` refuses the whole output when it finds one.
//!
//! # Security model of the socket
//! - Opt-in: no socket unless [`serve`] is called or `DEFERLOOP_PS=serve`.
//! - Unix socket only, never TCP: in a directory the process creates with mode
//!   0700 (or finds owned by its user with no group or other permissions —
//!   anything else is refused), the socket itself chmod 0600.
//! - Each connection's peer is checked with `SO_PEERCRED` (`getpeereid` off
//!   Linux): a peer whose uid is not the process's effective uid gets
//!   `refused` and is closed. Root is not let in by this check either; it
//!   can read the process's memory anyway.
//! - Read-only: a request names a view (`ps`, `pstree`, `ss`, `loop`, `all`);
//!   nothing a client sends changes the process.
//! - What it shows: counts, sizes, durations, peer addresses and code
//!   locations (file:line:column) — never payload bytes, never values carried
//!   by Deferreds.
//!
//! Compared with the anchors: `python -m asyncio ps` attaches to whoever may
//! ptrace the process and reads its memory (its users meet EPERM reported as
//! a missing section, and torn reads retried); tokio-console listens on TCP
//! with no authentication. Here the process publishes a consistent snapshot
//! itself, and only its own user can read it.

mod serve;
mod text;

pub use crate::deferred::registry::{PendingDeferred, PendingState, Wait, WaitsOn};
pub use crate::net::core::ss::Connection;
pub use serve::{default_dir, query, serve, serve_in, PsServer};

use crate::deferred::registry;
use crate::{Loop, Snapshot};
use std::rc::Rc;
use std::time::Instant;

/// Turns the registry on for `lp`'s thread: from now on every Deferred made
/// on it is listed while it is pending, stamped with `lp`'s time. Deferreds
/// made before are not listed (an edge to one shows its creation site).
pub fn enable(lp: &Loop) {
    let weak = lp.downgrade();
    registry::set_clock(Rc::new(move || {
        weak.upgrade().map_or_else(Instant::now, |lp| lp.time())
    }));
    registry::set_on(true);
    // The loop records its current callback and publishes its queues, and
    // tells `serve` of each turn.
    lp.observe_turns(serve::on_turn);
}

/// Turns the registry off for this thread and forgets what it listed.
pub fn disable() {
    registry::set_on(false);
}

/// Whether the registry is on for this thread.
pub fn is_enabled() -> bool {
    registry::on()
}

/// What the loop and its pending Deferreds look like now; taken on the loop's
/// thread. With the registry off, the list of Deferreds is empty.
pub fn snapshot(lp: &Loop) -> Report {
    let (deferreds, _) = registry::pending();
    let now = lp.time();
    Report {
        now,
        registry_on: registry::on(),
        deferreds,
        monitor: lp.monitor_now(),
        connections: crate::net::core::ss::list(now),
    }
}

/// Turns the registry on and logs the whole report (`loop`, `ps`, `pstree`,
/// `ss`) at `info` level, target `deferloop::ps`, each time `sig` arrives:
/// the same dump without a socket. The handler runs on the loop's thread,
/// between callbacks, so a loop blocked in a callback logs it only once the
/// callback returns (the socket, or [`Loop::enable_watchdog`], answer while
/// it is blocked).
///
/// # Errors
/// As for [`Loop::add_signal_handler`].
pub fn log_on_signal(lp: &Loop, sig: crate::Signal) -> Result<crate::SignalHandler, crate::Error> {
    enable(lp);
    lp.add_signal_handler(sig, |lp, sig| {
        log::info!(target: "deferloop::ps", "{sig:?}: {}", snapshot(lp).all());
    })
}

/// A consistent picture of a loop at one moment: its pending Deferreds (what
/// each waits on) and its queues. `Send`, so it can be handed to another
/// thread; it holds no value a Deferred carries.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Report {
    /// The loop's time when it was taken.
    pub now: Instant,
    /// Whether the registry was on (if not, `deferreds` is empty).
    pub registry_on: bool,
    /// The pending Deferreds, oldest first.
    pub deferreds: Vec<PendingDeferred>,
    /// The loop's queues (timers, ready callbacks, I/O sources), fresh.
    pub monitor: Snapshot,
    /// The stream connections opened since the registry was on (`ss`).
    pub connections: Vec<Connection>,
}

/// Reads `DEFERLOOP_PS` for a new loop: `1` turns the registry on, `serve`
/// also serves at the default path (a failure to is logged, not fatal).
pub(crate) fn from_env(lp: &Loop) {
    let Some(v) = std::env::var_os("DEFERLOOP_PS") else {
        return;
    };
    if v.is_empty() || v == "0" {
        return;
    }
    enable(lp);
    if v == "serve" {
        match serve(lp) {
            Ok(server) => {
                log::info!("deferloop: ps served at {}", server.path().display());
                serve::keep_for_thread(server);
            }
            Err(e) => log::warn!("deferloop: DEFERLOOP_PS=serve: {e}"),
        }
    }
}
