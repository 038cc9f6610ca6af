//! The default exception handler is contained: if the logger behind it
//! panics, the panic does not escape `run()` (asyncio logs that its default
//! handler failed). `reset_exception_handler` restores the default.

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

/// A panicking callback, reported through a logger that panics, does not
/// take `run()` down; the callbacks after it still run.
#[test]
fn a_panicking_logger_does_not_escape_run() {
    log::set_logger(&PanickingLogger).unwrap();
    log::set_max_level(log::LevelFilter::Error);
    let ev = EventLoop::new().unwrap();
    let after = Rc::new(Cell::new(false));
    let a = after.clone();
    ev.call_soon(|_| panic!("callback fails")).unwrap();
    ev.call_soon(move |lp| {
        a.set(true);
        lp.stop();
    })
    .unwrap();
    ev.run().unwrap();
    assert!(after.get());
}

/// `reset_exception_handler` takes the installed handler out again.
#[test]
fn reset_restores_the_default_handler() {
    let ev = EventLoop::new().unwrap();
    let calls = Rc::new(Cell::new(0));
    let c = calls.clone();
    ev.set_exception_handler(move |_: &Loop, _: &ExceptionContext<'_>| c.set(c.get() + 1));
    ev.call_exception_handler(&ExceptionContext::new("one"));
    ev.reset_exception_handler();
    ev.call_exception_handler(&ExceptionContext::new("two"));
    assert_eq!(calls.get(), 1);
}
