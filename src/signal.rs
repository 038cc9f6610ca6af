//! Unix signals as ordinary callbacks in the turn: [`Loop::add_signal_handler`]
//! calls a function on the loop's thread when a signal arrives, and returns a
//! [`SignalHandler`] that removes it.
//!
//! How a signal travels: the C handler (`on_signal`) runs on whatever thread
//! the kernel picked and only stores a flag and writes one byte to the pipe
//! of every handler watching that signal (a *slot*: an atomic fd, signal
//! number and "pending" flag, so the handler takes no lock and allocates
//! nothing). Each [`SignalHandler`] is a source in its loop, on the public
//! [`EventSource`] trait in [`Mode::Edge`], that drains its pipe and calls
//! the user's callback in a turn, with the other ready callbacks, on the
//! loop's thread. A byte is written only when the flag goes from clear to set, so a
//! burst of one signal costs one byte and one callback, as wake-ups do.
//!
//! The process's disposition is changed when the first handler of a signal
//! is added (the old one is saved), whichever loop or thread it is on.
//!
//! Living with other libraries (signal-hook, tokio, a C host): the handler
//! that was installed before ours is not lost. If it was a function (not
//! `SIG_DFL` or `SIG_IGN`), our C handler calls it after its own work, with
//! the `siginfo_t` and context when it asked for them (`SA_SIGINFO`), as
//! signal-hook chains. When the last of our handlers of a signal goes, the
//! old disposition comes back only if ours is still the one installed (asked
//! with `sigaction`); if another library installed its own since, it stays,
//! and ours, which it may chain to, goes on chaining to the one before
//! (signal-hook never gives a disposition back and tokio never restores
//! one; a library that restores blindly clobbers whoever came later). A
//! cycle (a later library chaining to ours while ours chains to it) is cut:
//! a C handler reached again through its own chain does not chain twice.

use crate::source::{EventSource, Mode, PostAction, Readiness, WeakSource};
use crate::{Error, ExceptionContext, Failure, Loop};
use std::cell::Cell;
use std::fmt;
use std::io::{self, Read};
use std::os::unix::io::{AsFd, AsRawFd, BorrowedFd};
use std::panic::{catch_unwind, AssertUnwindSafe, Location};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering::SeqCst};
use std::sync::Mutex;

/// How many signal handlers may exist at once in the process, over every
/// loop (each holds a slot and a pipe).
pub const MAX_SIGNAL_HANDLERS: usize = 256;

/// A Unix signal number, with names for the ones services handle.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Signal(i32);

impl Signal {
    /// `SIGINT`: Ctrl-C at a terminal.
    pub const INT: Signal = Signal(libc::SIGINT);
    /// `SIGTERM`: the polite "stop" of `kill`, systemd and container runtimes.
    pub const TERM: Signal = Signal(libc::SIGTERM);
    /// `SIGHUP`: the terminal went away; by convention "reload the configuration".
    pub const HUP: Signal = Signal(libc::SIGHUP);
    /// `SIGQUIT`.
    pub const QUIT: Signal = Signal(libc::SIGQUIT);
    /// `SIGUSR1`, free for the program's own use.
    pub const USR1: Signal = Signal(libc::SIGUSR1);
    /// `SIGUSR2`, free for the program's own use.
    pub const USR2: Signal = Signal(libc::SIGUSR2);
    /// `SIGCHLD`: a child process stopped or exited.
    pub const CHLD: Signal = Signal(libc::SIGCHLD);
    /// `SIGWINCH`: the terminal's size changed.
    pub const WINCH: Signal = Signal(libc::SIGWINCH);
    /// `SIGALRM`.
    pub const ALRM: Signal = Signal(libc::SIGALRM);
    /// `SIGPIPE` (a write to a closed pipe; sockets are written without it).
    pub const PIPE: Signal = Signal(libc::SIGPIPE);

    /// The signal with number `n` (`libc::SIGRTMIN() + 1`, say).
    pub const fn from_raw(n: i32) -> Signal {
        Signal(n)
    }

    /// Its number.
    pub const fn as_raw(self) -> i32 {
        self.0
    }
}

impl fmt::Debug for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self.0 {
            libc::SIGINT => "SIGINT",
            libc::SIGTERM => "SIGTERM",
            libc::SIGHUP => "SIGHUP",
            libc::SIGQUIT => "SIGQUIT",
            libc::SIGUSR1 => "SIGUSR1",
            libc::SIGUSR2 => "SIGUSR2",
            libc::SIGCHLD => "SIGCHLD",
            libc::SIGWINCH => "SIGWINCH",
            libc::SIGALRM => "SIGALRM",
            libc::SIGPIPE => "SIGPIPE",
            n => return write!(f, "signal {n}"),
        };
        f.write_str(name)
    }
}

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

// ---- the process-wide part: what the C handler reads ----------------------

#[allow(clippy::declare_interior_mutable_const)]
const NO_FD: AtomicI32 = AtomicI32::new(-1);
#[allow(clippy::declare_interior_mutable_const)]
const NO_SIG: AtomicI32 = AtomicI32::new(0);
#[allow(clippy::declare_interior_mutable_const)]
const CLEAR: AtomicBool = AtomicBool::new(false);
#[allow(clippy::declare_interior_mutable_const)]
const IDLE: AtomicUsize = AtomicUsize::new(0);

/// The write end of each slot's pipe, or -1.
static SLOT_FD: [AtomicI32; MAX_SIGNAL_HANDLERS] = [NO_FD; MAX_SIGNAL_HANDLERS];
/// The signal each slot watches, or 0.
static SLOT_SIG: [AtomicI32; MAX_SIGNAL_HANDLERS] = [NO_SIG; MAX_SIGNAL_HANDLERS];
/// Set by the C handler, cleared by the loop that reads the slot.
static SLOT_PENDING: [AtomicBool; MAX_SIGNAL_HANDLERS] = [CLEAR; MAX_SIGNAL_HANDLERS];
/// C handlers running on a slot now: a slot's fd is closed only at zero.
static SLOT_BUSY: [AtomicUsize; MAX_SIGNAL_HANDLERS] = [IDLE; MAX_SIGNAL_HANDLERS];
/// One past the highest slot ever used (the C handler looks no further).
static SLOT_HIGH: AtomicUsize = AtomicUsize::new(0);

/// Signal numbers are below this (`check_signal`).
const SIGNALS: usize = 128;
#[allow(clippy::declare_interior_mutable_const)]
const NO_PREV: AtomicUsize = AtomicUsize::new(0);

/// Per signal: the function installed before ours, to chain to, or 0 (none,
/// `SIG_DFL` or `SIG_IGN`). Written before our handler is installed (and
/// after, only if another thread's `sigaction` raced ours), read by the C
/// handler: plain atomics, no lock.
static PREV_FN: [AtomicUsize; SIGNALS] = [NO_PREV; SIGNALS];
/// Per signal: whether that function takes `siginfo_t` (`SA_SIGINFO`).
static PREV_SIGINFO: [AtomicBool; SIGNALS] = [CLEAR; SIGNALS];
/// Per signal: a C handler is calling the previous one now; a call that
/// comes back through a cycle of chains does not chain again.
static CHAINING: [AtomicBool; SIGNALS] = [CLEAR; SIGNALS];

/// What only threads (never the C handler) touch, under a lock.
struct Table {
    used: [bool; MAX_SIGNAL_HANDLERS],
    /// Per signal number: handlers installed, and the disposition before ours
    /// was last installed (kept while another library's handler sits on ours).
    signals: Vec<(usize, Option<libc::sigaction>)>,
}

static TABLE: Mutex<Table> = Mutex::new(Table {
    used: [false; MAX_SIGNAL_HANDLERS],
    signals: Vec::new(),
});

fn table() -> std::sync::MutexGuard<'static, Table> {
    TABLE.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn errno_location() -> *mut libc::c_int {
    // SAFETY: returns the calling thread's errno slot; no preconditions.
    unsafe { libc::__errno_location() }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn errno_location() -> *mut libc::c_int {
    // SAFETY: as above (the BSDs and macOS name it `__error`).
    unsafe { libc::__error() }
}

/// `on_signal` as `sigaction` stores it.
fn our_handler() -> libc::sighandler_t {
    on_signal as extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void)
        as libc::sighandler_t
}

/// The C handler: async-signal-safe (atomics, `write`, and the previous
/// handler, which its library made safe to call here).
extern "C" fn on_signal(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    notify_slots(sig);
    chain(sig, info, ctx);
}

/// Calls the function installed before ours, if there was one.
fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let Some(n) = usize::try_from(sig).ok().filter(|&n| n < SIGNALS) else {
        return;
    };
    let prev = PREV_FN[n].load(SeqCst);
    if prev == 0 || CHAINING[n].swap(true, SeqCst) {
        return;
    }
    if PREV_SIGINFO[n].load(SeqCst) {
        // SAFETY: `prev` is a handler `sigaction` reported with SA_SIGINFO
        // (`save_prev`), so it is an `extern "C" fn(c_int, *mut siginfo_t,
        // *mut c_void)`; it gets the kernel's own `info` and `ctx`.
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
            unsafe { std::mem::transmute(prev) };
        f(sig, info, ctx);
    } else {
        // SAFETY: `prev` is a handler `sigaction` reported without
        // SA_SIGINFO, neither SIG_DFL nor SIG_IGN (`save_prev`): an
        // `extern "C" fn(c_int)`.
        let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(prev) };
        f(sig);
    }
    CHAINING[n].store(false, SeqCst);
}

/// Records `old` as the handler to chain to for `sig` (none for SIG_DFL,
/// SIG_IGN, or ours).
fn save_prev(sig: Signal, old: &libc::sigaction) {
    let n = sig.0 as usize;
    let h = old.sa_sigaction;
    let chained = h != libc::SIG_DFL && h != libc::SIG_IGN && h != our_handler();
    PREV_FN[n].store(0, SeqCst);
    PREV_SIGINFO[n].store(old.sa_flags & libc::SA_SIGINFO != 0, SeqCst);
    if chained {
        PREV_FN[n].store(h, SeqCst);
    }
}

/// The disposition of `sig` now.
fn current(sig: Signal) -> io::Result<libc::sigaction> {
    // SAFETY: a query (null new action) into a zero-initialised local, a
    // valid `sigaction` value that outlives the call.
    unsafe {
        let mut cur: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(sig.0, std::ptr::null(), &mut cur) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(cur)
    }
}

/// Wakes every slot watching `sig`.
fn notify_slots(sig: libc::c_int) {
    let errno = errno_location();
    // SAFETY: the thread's own errno slot, valid for the thread's lifetime;
    // saved and restored so the interrupted code sees its own errno.
    let saved = unsafe { *errno };
    let high = SLOT_HIGH.load(SeqCst);
    for i in 0..high {
        if SLOT_SIG[i].load(SeqCst) != sig {
            continue;
        }
        SLOT_BUSY[i].fetch_add(1, SeqCst);
        let fd = SLOT_FD[i].load(SeqCst);
        if fd >= 0 && SLOT_SIG[i].load(SeqCst) == sig && !SLOT_PENDING[i].swap(true, SeqCst) {
            let byte = 1u8;
            // SAFETY: `fd` is the open write end of slot `i`'s pipe: a slot's
            // fd is closed only after it was set to -1 and no handler was
            // busy on the slot (`release_slot`). A full pipe (EAGAIN) is fine:
            // a byte is already waiting to wake the loop.
            unsafe {
                libc::write(fd, (&byte as *const u8).cast(), 1);
            }
        }
        SLOT_BUSY[i].fetch_sub(1, SeqCst);
    }
    // SAFETY: as above.
    unsafe { *errno = saved };
}

fn check_signal(sig: Signal) -> Result<(), Error> {
    match sig.0 {
        libc::SIGKILL | libc::SIGSTOP => {
            Err(Error::InvalidInput("SIGKILL and SIGSTOP cannot be caught"))
        }
        libc::SIGSEGV | libc::SIGBUS | libc::SIGILL | libc::SIGFPE => Err(Error::InvalidInput(
            "a fault signal must be handled where it happens, not in a later turn",
        )),
        n if !(1..128).contains(&n) => Err(Error::InvalidInput("not a signal number")),
        _ => Ok(()),
    }
}

/// Takes a slot for `sig` writing to `fd`, installing the C handler if this
/// is the signal's first. Returns the slot.
fn acquire_slot(sig: Signal, fd: i32) -> Result<usize, Error> {
    let mut t = table();
    let slot = t.used.iter().position(|u| !u).ok_or(Error::InvalidInput(
        "too many signal handlers in the process",
    ))?;
    let n = sig.0 as usize;
    if t.signals.len() <= n {
        t.signals.resize(n + 1, (0, None));
    }
    if t.signals[n].0 == 0 {
        let cur = current(sig)?;
        // Ours may still be installed: left under another library's handler
        // that has gone since, giving ours back. Then nothing changes.
        if cur.sa_sigaction != our_handler() {
            // The handler to chain to is known before ours can run.
            save_prev(sig, &cur);
            // SAFETY: `sigaction` with pointers to zero-initialised locals (a
            // valid `sigaction` value) that outlive the call; the handler is
            // an `extern "C" fn(c_int, *mut siginfo_t, *mut c_void)`, as
            // `sa_sigaction` wants with SA_SIGINFO.
            let old = unsafe {
                let mut new: libc::sigaction = std::mem::zeroed();
                new.sa_sigaction = our_handler();
                new.sa_flags = libc::SA_RESTART | libc::SA_SIGINFO;
                libc::sigemptyset(&mut new.sa_mask);
                let mut old: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(sig.0, &new, &mut old) != 0 {
                    return Err(io::Error::last_os_error().into());
                }
                old
            };
            if old.sa_sigaction != cur.sa_sigaction || old.sa_flags != cur.sa_flags {
                save_prev(sig, &old); // another thread's sigaction came between
            }
            t.signals[n].1 = Some(old);
        }
    }
    t.signals[n].0 += 1;
    t.used[slot] = true;
    SLOT_PENDING[slot].store(false, SeqCst);
    SLOT_SIG[slot].store(sig.0, SeqCst);
    SLOT_FD[slot].store(fd, SeqCst);
    SLOT_HIGH.fetch_max(slot + 1, SeqCst);
    Ok(slot)
}

/// Gives a slot back; the last handler of its signal restores the old
/// disposition if ours is still installed, and otherwise leaves the one
/// installed since (and what ours chains to, for it may chain to ours).
/// Afterwards no C handler uses the slot's fd: it may be closed.
fn release_slot(slot: usize, sig: Signal) {
    let mut t = table();
    let n = sig.0 as usize;
    if let Some(entry) = t.signals.get_mut(n) {
        entry.0 -= 1;
        let ours = current(sig).is_ok_and(|cur| cur.sa_sigaction == our_handler());
        if entry.0 == 0 && ours {
            if let Some(old) = entry.1.take() {
                // SAFETY: restores the disposition saved by `acquire_slot`,
                // a value `sigaction` itself filled in.
                unsafe {
                    libc::sigaction(sig.0, &old, std::ptr::null_mut());
                }
            }
        }
    }
    SLOT_FD[slot].store(-1, SeqCst);
    SLOT_SIG[slot].store(0, SeqCst);
    while SLOT_BUSY[slot].load(SeqCst) != 0 {
        std::hint::spin_loop();
    }
    t.used[slot] = false;
}

// ---- the loop's part: one source per handler -------------------------------

type Callback = Box<dyn FnMut(&Loop, Signal)>;

/// One handler, a source on the public [`EventSource`] trait: its slot, its
/// pipe, its callback. Edge-triggered: each dispatch drains the pipe.
struct SignalSource {
    sig: Signal,
    at: &'static Location<'static>,
    /// The slot while it is held; shared with the [`SignalHandler`], which
    /// releases it at once on `remove` (the pipe closes when this drops).
    slot: Rc<Cell<Option<usize>>>,
    rx: mio::unix::pipe::Receiver,
    /// Kept open while the slot is; closed after `release_slot` (in `drop`).
    _tx: mio::unix::pipe::Sender,
    cb: Callback,
}

impl SignalSource {
    /// Leaves the slot (restoring the disposition if last); the pipe stays
    /// open until the source is dropped, after its deregistration.
    fn release(&self) -> bool {
        let Some(slot) = self.slot.take() else {
            return false;
        };
        release_slot(slot, self.sig);
        true
    }
}

impl Drop for SignalSource {
    fn drop(&mut self) {
        self.release(); // before `_tx` is closed
    }
}

impl EventSource for SignalSource {
    type Ret = PostAction;

    fn fd(&self) -> Option<BorrowedFd<'_>> {
        Some(self.rx.as_fd())
    }

    fn mode(&self) -> Mode {
        Mode::Edge
    }

    fn process(&mut self, lp: &Loop, _: Readiness) -> PostAction {
        let Some(slot) = self.slot.get() else {
            return PostAction::Continue; // removed; dropped on return
        };
        let mut buf = [0u8; 64];
        loop {
            match self.rx.read(&mut buf) {
                // A short read emptied the pipe (epoll(7)): the next byte
                // is a new edge, so no second read to hear `WouldBlock`.
                Ok(n) if n < buf.len() => break,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => break, // WouldBlock: drained
            }
        }
        if !SLOT_PENDING[slot].swap(false, SeqCst) {
            return PostAction::Continue;
        }
        let (cb, sig) = (&mut self.cb, self.sig);
        if let Err(payload) = catch_unwind(AssertUnwindSafe(|| cb(lp, sig))) {
            let failure = Failure::from_panic(payload, self.at);
            lp.call_exception_handler(&ExceptionContext {
                message: "Exception in signal handler",
                failure: Some(&failure),
                location: Some(self.at),
            });
        }
        PostAction::Continue
    }

    fn loop_closed(&mut self, _lp: &Loop) {
        self.release();
    }

    fn name(&self) -> &'static str {
        "signal"
    }
}

/// A signal handler added with [`Loop::add_signal_handler`]. It stays until
/// [`remove`](Self::remove)d or until its loop closes; dropping this handle
/// does not remove it (as a [`Handle`](crate::Handle) does not cancel its call).
#[derive(Clone)]
pub struct SignalHandler {
    src: WeakSource<SignalSource>,
    slot: Rc<Cell<Option<usize>>>,
    sig: Signal,
}

impl SignalHandler {
    /// Removes the handler; returns whether it was still there. When it was
    /// the last handler of its signal in the process, the disposition the
    /// process had before the first one was added is restored (a default,
    /// an ignore, or another library's handler) if ours is still the one
    /// installed; a handler another library installed since stays.
    pub fn remove(&self) -> bool {
        let removed = match self.slot.take() {
            Some(slot) => {
                release_slot(slot, self.sig);
                true
            }
            None => false,
        };
        self.src.remove();
        removed
    }

    /// The signal it handles.
    pub fn signal(&self) -> Signal {
        self.sig
    }

    /// Whether it is still installed.
    pub fn is_active(&self) -> bool {
        self.slot.get().is_some()
    }
}

impl fmt::Debug for SignalHandler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SignalHandler")
            .field("signal", &self.sig)
            .field("active", &self.is_active())
            .finish()
    }
}

impl Loop {
    /// Calls `f` in a turn of this loop, on its thread, after `sig` arrives.
    ///
    /// Works on any loop on any thread (not only the main one). Several
    /// handlers, on one loop or on many, may watch the same signal: each is
    /// called. A burst of the same signal before the loop gets to it is one
    /// call (as wake-ups coalesce): count events, not calls. The process's
    /// previous disposition is saved when the first handler of `sig` is added
    /// and restored when the last one is removed (or its loop closes), unless
    /// another library installed its own since; a previous handler that is a
    /// function is called too, each time the signal arrives (see the
    /// [module docs](crate::signal)).
    ///
    /// A handler panic goes to the exception handler; the handler stays.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for `SIGKILL`, `SIGSTOP`, fault signals
    /// (`SIGSEGV`, `SIGBUS`, `SIGILL`, `SIGFPE`), a number out of range, or
    /// more than [`MAX_SIGNAL_HANDLERS`] in the process; [`Error::Closed`];
    /// [`Error::Io`] if the pipe or `sigaction` fails.
    ///
    /// # Examples
    /// ```
    /// use deferloop::{EventLoop, Signal};
    ///
    /// let ev = EventLoop::new()?;
    /// let h = ev.add_signal_handler(Signal::USR2, |lp, sig| {
    ///     println!("got {sig}");
    ///     lp.stop();
    /// })?;
    /// // Here the process signals itself.
    /// std::process::Command::new("kill")
    ///     .args(["-USR2", &std::process::id().to_string()])
    ///     .status()?;
    /// ev.run()?;
    /// h.remove();
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[track_caller]
    pub fn add_signal_handler(
        &self,
        sig: Signal,
        f: impl FnMut(&Loop, Signal) + 'static,
    ) -> Result<SignalHandler, Error> {
        let at = Location::caller();
        check_signal(sig)?;
        if self.is_closed() {
            return Err(Error::Closed);
        }
        let (tx, rx) = mio::unix::pipe::new()?;
        let slot = Rc::new(Cell::new(Some(acquire_slot(sig, tx.as_raw_fd())?)));
        // On failure the source is dropped, which releases the slot.
        let h = self.add_source(SignalSource {
            sig,
            at,
            slot: slot.clone(),
            rx,
            _tx: tx,
            cb: Box::new(f),
        })?;
        // A signal that arrived between the slot and the registration left
        // its byte in the pipe: the edge was seen at registration. Look anyway.
        h.wake();
        let src = h.downgrade();
        h.detach();
        Ok(SignalHandler { src, slot, sig })
    }
}
