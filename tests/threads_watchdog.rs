//! The blocked-loop watchdog reports a callback while it is still blocked.

mod util;

use deferloop::{Error, EventLoop};
use std::time::{Duration, Instant};

/// A callback sleeping 300 ms with a 100 ms threshold is logged during the sleep.
#[test]
fn the_watchdog_logs_a_blocked_callback_while_it_sleeps() -> Result<(), Error> {
    let logs = util::logs();
    let ev = EventLoop::new()?;
    ev.enable_watchdog(Duration::from_millis(100))?;
    let woke = std::rc::Rc::new(std::cell::Cell::new(None));
    let w = woke.clone();
    let line = line!() + 2;
    let needle = format!("tests/threads_watchdog.rs:{line}");
    ev.call_soon(move |lp| {
        // Blocked at least 300 ms, and until the report is in (at most
        // 10 s): a watchdog thread slow to run on a loaded machine cannot
        // make the report come after the callback.
        let t0 = Instant::now();
        std::thread::sleep(Duration::from_millis(300));
        while logs.containing(&needle).is_empty() && t0.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(5));
        }
        w.set(Some(Instant::now()));
        lp.stop();
    })?;
    let started = Instant::now();
    ev.run()?;
    let woke = woke.get().expect("the callback ran");
    let needle = format!("tests/threads_watchdog.rs:{line}");
    let recs = logs.containing(&needle);
    assert!(!recs.is_empty(), "no watchdog report");
    let first = &recs[0];
    assert_eq!(first.level, log::Level::Warn);
    assert!(first.message.contains("blocked"), "{}", first.message);
    assert!(
        first.at < woke,
        "reported only after the callback's sleep ended"
    );
    assert!(
        first.at - started >= Duration::from_millis(100),
        "reported too early"
    );
    Ok(())
}

/// A zero threshold is refused.
#[test]
fn a_zero_watchdog_threshold_is_an_error() -> Result<(), Error> {
    let ev = EventLoop::new()?;
    assert!(matches!(
        ev.enable_watchdog(Duration::ZERO),
        Err(Error::InvalidInput(_))
    ));
    Ok(())
}
