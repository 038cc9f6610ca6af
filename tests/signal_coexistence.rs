//! Signal handlers among other libraries' (signal-hook, tokio, a C host):
//! a function installed before ours is still called (chained), one
//! installed after ours is left in place when ours goes, and when ours is
//! still installed at removal the old disposition comes back. Signals are
//! process-wide, so each test here uses a signal of its own (USR1, USR2,
//! WINCH, URG, CHLD); no test in this binary starts a child process.
//! Deliveries are waited for by a bounded count of turns that never sleep
//! (`stop()` before `run()` makes one turn with a zero poll timeout).

use deferloop::{EventLoop, Signal};
use std::cell::Cell;
use std::rc::Rc;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering::SeqCst};

fn raise(sig: i32) {
    // SAFETY: raise(3) on this thread, with a signal the test has a handler for.
    assert_eq!(unsafe { libc::raise(sig) }, 0);
}

fn disposition(sig: i32) -> libc::sighandler_t {
    // SAFETY: queries only (a null new action), into a zeroed local.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        assert_eq!(libc::sigaction(sig, std::ptr::null(), &mut old), 0);
        old.sa_sigaction
    }
}

type InfoFn = extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void);

/// A plain handler's address, as `sigaction` holds it.
fn plain(f: extern "C" fn(libc::c_int)) -> libc::sighandler_t {
    f as libc::sighandler_t
}

/// An SA_SIGINFO handler's address, as `sigaction` holds it.
fn with_info(f: InfoFn) -> libc::sighandler_t {
    f as libc::sighandler_t
}

/// Installs `handler` for `sig` as another library would, with `flags`.
fn install_foreign(sig: i32, handler: libc::sighandler_t, flags: i32) {
    // SAFETY: sigaction with a zeroed action (valid) holding a plain
    // `extern "C"` function of the shape `flags` says.
    unsafe {
        let mut new: libc::sigaction = std::mem::zeroed();
        new.sa_sigaction = handler;
        new.sa_flags = flags;
        libc::sigemptyset(&mut new.sa_mask);
        assert_eq!(libc::sigaction(sig, &new, std::ptr::null_mut()), 0);
    }
}

/// Turns the loop (never sleeping) until `done`, at most 1,000 turns.
fn turn_until(ev: &EventLoop, done: impl Fn() -> bool) {
    for _ in 0..1000 {
        if done() {
            return;
        }
        ev.stop();
        ev.run().unwrap();
    }
    assert!(done(), "not heard within 1,000 turns");
}

fn counting(heard: &Rc<Cell<usize>>) -> impl FnMut(&deferloop::Loop, Signal) + 'static {
    let h = heard.clone();
    move |_, _| h.set(h.get() + 1)
}

static USR1_FOREIGN: AtomicUsize = AtomicUsize::new(0);
extern "C" fn usr1_foreign(_: libc::c_int) {
    USR1_FOREIGN.fetch_add(1, SeqCst);
}

/// A plain handler installed before ours is called each time the signal
/// arrives, while ours is installed; when ours goes it is back.
#[test]
fn a_handler_installed_before_ours_is_chained() {
    install_foreign(libc::SIGUSR1, plain(usr1_foreign), 0);
    let ev = EventLoop::new().unwrap();
    let heard = Rc::new(Cell::new(0));
    let h = ev
        .add_signal_handler(Signal::USR1, counting(&heard))
        .unwrap();
    assert_ne!(disposition(libc::SIGUSR1), plain(usr1_foreign));
    raise(libc::SIGUSR1);
    turn_until(&ev, || heard.get() == 1);
    raise(libc::SIGUSR1);
    turn_until(&ev, || heard.get() == 2);
    assert_eq!(USR1_FOREIGN.load(SeqCst), 2, "the earlier handler, chained");
    assert!(h.remove());
    assert_eq!(disposition(libc::SIGUSR1), plain(usr1_foreign));
}

static USR2_FOREIGN: AtomicUsize = AtomicUsize::new(0);
static USR2_SIGNO: AtomicI32 = AtomicI32::new(0);
extern "C" fn usr2_foreign(sig: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // SAFETY: the kernel's siginfo for this delivery (SA_SIGINFO), passed on.
    let signo = unsafe { info.as_ref() }.map_or(-1, |i| i.si_signo);
    USR2_SIGNO.store(signo * 1000 + sig, SeqCst);
    USR2_FOREIGN.fetch_add(1, SeqCst);
}

/// A handler installed with SA_SIGINFO before ours gets the kernel's
/// `siginfo_t` through the chain.
#[test]
fn a_siginfo_handler_installed_before_ours_gets_its_siginfo() {
    install_foreign(libc::SIGUSR2, with_info(usr2_foreign), libc::SA_SIGINFO);
    let ev = EventLoop::new().unwrap();
    let heard = Rc::new(Cell::new(0));
    let h = ev
        .add_signal_handler(Signal::USR2, counting(&heard))
        .unwrap();
    raise(libc::SIGUSR2);
    turn_until(&ev, || heard.get() == 1);
    assert_eq!(USR2_FOREIGN.load(SeqCst), 1, "the earlier handler, chained");
    assert_eq!(
        USR2_SIGNO.load(SeqCst),
        libc::SIGUSR2 * 1000 + libc::SIGUSR2,
        "with the signal's siginfo"
    );
    h.remove();
    // SAFETY: back to the default.
    unsafe { libc::signal(libc::SIGUSR2, libc::SIG_DFL) };
}

static WINCH_FOREIGN: AtomicUsize = AtomicUsize::new(0);
extern "C" fn winch_foreign(_: libc::c_int) {
    WINCH_FOREIGN.fetch_add(1, SeqCst);
}

/// A handler another library installs after ours stays when ours goes
/// (SIGWINCH: its default is to ignore, so a clobbered one fails quietly).
#[test]
fn a_handler_installed_after_ours_is_left_in_place() {
    let ev = EventLoop::new().unwrap();
    let heard = Rc::new(Cell::new(0));
    let h = ev
        .add_signal_handler(Signal::WINCH, counting(&heard))
        .unwrap();
    install_foreign(libc::SIGWINCH, plain(winch_foreign), 0);
    assert!(h.remove());
    assert_eq!(
        disposition(libc::SIGWINCH),
        plain(winch_foreign),
        "the later library's handler is still installed"
    );
    raise(libc::SIGWINCH);
    assert_eq!(WINCH_FOREIGN.load(SeqCst), 1);
    ev.stop();
    ev.run().unwrap();
    assert_eq!(heard.get(), 0, "ours is gone");
    // SAFETY: back to the default.
    unsafe { libc::signal(libc::SIGWINCH, libc::SIG_DFL) };
}

static URG_FOREIGN: AtomicUsize = AtomicUsize::new(0);
extern "C" fn urg_foreign(_: libc::c_int) {
    URG_FOREIGN.fetch_add(1, SeqCst);
}

/// When ours is still the installed handler at removal, the one before it
/// comes back (and hears the signal alone).
#[test]
fn with_ours_still_installed_the_old_disposition_comes_back() {
    install_foreign(libc::SIGURG, plain(urg_foreign), 0);
    let ev = EventLoop::new().unwrap();
    let heard = Rc::new(Cell::new(0));
    let h = ev.add_signal_handler(Signal::from_raw(libc::SIGURG), counting(&heard));
    let h = h.unwrap();
    assert_ne!(disposition(libc::SIGURG), plain(urg_foreign));
    assert!(h.remove());
    assert_eq!(disposition(libc::SIGURG), plain(urg_foreign));
    raise(libc::SIGURG);
    assert_eq!(URG_FOREIGN.load(SeqCst), 1);
    ev.stop();
    ev.run().unwrap();
    assert_eq!(heard.get(), 0);
    // SAFETY: back to the default.
    unsafe { libc::signal(libc::SIGURG, libc::SIG_DFL) };
}

/// What a chaining library saved when it installed its handler over ours.
static CHLD_SAVED: AtomicUsize = AtomicUsize::new(0);
static CHLD_FOREIGN: AtomicUsize = AtomicUsize::new(0);
extern "C" fn chld_foreign(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    CHLD_FOREIGN.fetch_add(1, SeqCst);
    let prev = CHLD_SAVED.load(SeqCst);
    if prev != libc::SIG_DFL && prev != libc::SIG_IGN {
        // SAFETY: `prev` is the SA_SIGINFO handler `sigaction` reported
        // when this one was installed (ours installs with SA_SIGINFO).
        let f: InfoFn = unsafe { std::mem::transmute(prev) };
        f(sig, info, ctx);
    }
}

/// A library that chains to ours, installed after it, then ours added again
/// on top of it: ours chains to it and it chains to ours. Each delivery
/// reaches both once (the cycle is cut), and nothing recurses for ever.
#[test]
fn a_cycle_of_chains_is_cut() {
    let ev = EventLoop::new().unwrap();
    let heard = Rc::new(Cell::new(0));
    let first = ev
        .add_signal_handler(Signal::CHLD, counting(&heard))
        .unwrap();
    // The other library installs its handler, saving ours to chain to.
    // SAFETY: sigaction with a zeroed action (valid) holding an SA_SIGINFO
    // handler, the old one read into a zeroed local.
    unsafe {
        let mut new: libc::sigaction = std::mem::zeroed();
        new.sa_sigaction = with_info(chld_foreign);
        new.sa_flags = libc::SA_SIGINFO;
        libc::sigemptyset(&mut new.sa_mask);
        let mut old: libc::sigaction = std::mem::zeroed();
        assert_eq!(libc::sigaction(libc::SIGCHLD, &new, &mut old), 0);
        CHLD_SAVED.store(old.sa_sigaction, SeqCst);
    }
    first.remove();
    assert_eq!(disposition(libc::SIGCHLD), with_info(chld_foreign));
    let again = ev
        .add_signal_handler(Signal::CHLD, counting(&heard))
        .unwrap();
    raise(libc::SIGCHLD);
    turn_until(&ev, || heard.get() == 1);
    assert_eq!(CHLD_FOREIGN.load(SeqCst), 1, "the other library's, once");
    again.remove();
    assert_eq!(disposition(libc::SIGCHLD), with_info(chld_foreign));
    // SAFETY: back to the default.
    unsafe { libc::signal(libc::SIGCHLD, libc::SIG_DFL) };
}
