//! A custom exception handler that panics, reported through a logger that
//! panics too, does not take `run()` down: the loop goes on, as
//! `set_exception_handler`'s rustdoc says. The logger is process-global, so
//! this check has its test binary to itself.

use deferloop::{EventLoop, ExceptionContext, Loop};
use std::cell::Cell;
use std::rc::Rc;

struct PanickingLogger;

impl log::Log for PanickingLogger {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, _: &log::Record<'_>) {
        panic!("logger is broken");
    }
    fn flush(&self) {}
}

/// Two panicking callbacks, each handed to a handler that panics, each
/// panic reported through a logger that panics: `run()` returns normally,
/// the handler saw both (it stays installed), and the callback after them
/// ran.
#[test]
fn a_panicking_handler_and_logger_do_not_escape_run() {
    log::set_logger(&PanickingLogger).unwrap();
    log::set_max_level(log::LevelFilter::Trace);
    let ev = EventLoop::new().unwrap();
    let handled = Rc::new(Cell::new(0));
    let h = handled.clone();
    ev.set_exception_handler(move |_: &Loop, _: &ExceptionContext<'_>| {
        h.set(h.get() + 1);
        panic!("handler is broken");
    });
    let after = Rc::new(Cell::new(false));
    let a = after.clone();
    ev.call_soon(|_| panic!("first callback fails")).unwrap();
    ev.call_soon(|_| panic!("second callback fails")).unwrap();
    ev.call_soon(move |lp| {
        a.set(true);
        lp.stop();
    })
    .unwrap();
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ev.run()));
    assert!(ran.is_ok(), "a panic escaped run()");
    ran.unwrap().unwrap();
    assert_eq!(handled.get(), 2);
    assert!(after.get());
}
