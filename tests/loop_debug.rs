//! Debug mode's slow-callback warning, and the monitor.

mod util;

use deferloop::{Error, EventLoop};
use std::time::Duration;

/// In debug mode a callback slower than the threshold is reported with its
/// location. The threshold is 1 s, not 20 ms: on a loaded machine an empty
/// callback can be preempted for 20 ms, never for a second.
#[test]
fn debug_mode_warns_about_slow_callbacks() -> Result<(), Error> {
    let logs = util::logs();
    let ev = EventLoop::new()?;
    ev.set_debug(true);
    let threshold = Duration::from_secs(1);
    ev.set_slow_callback_duration(threshold);
    ev.call_soon(|_| {})?; // fast: not reported
    let line = line!() + 1;
    ev.call_soon(move |_| std::thread::sleep(threshold))?;
    ev.run_once()?;
    let warns: Vec<_> = logs
        .mine()
        .into_iter()
        .filter(|r| r.level == log::Level::Warn && r.message.contains("tests/loop_debug.rs"))
        .collect();
    assert_eq!(warns.len(), 1, "{warns:?}");
    assert!(warns[0].message.contains(&format!("loop_debug.rs:{line}")));
    Ok(())
}

/// Without debug mode nothing is reported.
#[test]
fn slow_callbacks_are_silent_without_debug_mode() -> Result<(), Error> {
    let logs = util::logs();
    let ev = EventLoop::new()?;
    ev.set_debug(false);
    ev.set_slow_callback_duration(Duration::from_millis(1));
    ev.call_soon(|_| std::thread::sleep(Duration::from_millis(5)))?;
    ev.run_once()?;
    assert!(logs.mine().iter().all(|r| !r.message.contains("took")));
    Ok(())
}

/// A monitor on another thread sees the callback a blocked loop is stuck in,
/// and the timers it holds, while it is blocked.
#[test]
fn a_monitor_sees_a_blocked_loop_while_it_is_blocked() -> Result<(), Error> {
    let ev = EventLoop::new()?;
    let monitor = ev.monitor();
    let timer_line = line!() + 1;
    ev.call_later(Duration::from_secs(30), |_| {})?;
    let (tx, rx) = std::sync::mpsc::channel();
    let (taken_tx, taken) = std::sync::mpsc::channel();
    let watcher = std::thread::spawn(move || {
        rx.recv().unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let snap = monitor.snapshot();
        taken_tx.send(()).unwrap();
        snap
    });
    let line = line!() + 1;
    ev.call_soon(move |lp| {
        tx.send(()).unwrap();
        // Blocked until the snapshot is taken (not for a 150 ms guess).
        let _ = taken.recv_timeout(Duration::from_secs(60));
        lp.stop();
    })?;
    ev.run()?;
    let snap = watcher.join().unwrap();
    let cur = snap.current.clone().expect("inside a callback");
    assert_eq!(cur.scheduled_at.line(), line);
    assert!(cur.running_for >= Duration::from_millis(40));
    assert_eq!(snap.timer_count, 1);
    assert_eq!(snap.timers[0].scheduled_at.line(), timer_line);
    assert!(snap.to_string().contains("running callback scheduled at"));
    Ok(())
}
