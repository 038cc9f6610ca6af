//! Testing time without sleeping: a heartbeat `LoopingCall` and a reply with a
//! timeout, on a `ManualClock` (Twisted's `task.Clock`) moved by hand. A test
//! runs this way in microseconds, and the same every time.
//! Run: `cargo run --example manual_clock`.
//!
//! For a whole loop on a manual clock (timers, idle timeouts of connections),
//! see `EventLoop::with_manual_clock` and tests/loop_manual_clock.rs.

use deferloop::{Deferred, LoopingCall, ManualClock, TimedOut};
use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

fn main() {
    let clock = ManualClock::new();
    let secs = Duration::from_secs;

    // A heartbeat every 10 s that stops itself after three beats.
    let beats = Rc::new(Cell::new(0));
    let b = beats.clone();
    let heartbeat = LoopingCall::with_handle(&clock, move |lc| {
        b.set(b.get() + 1);
        println!("beat {} at {:?}", b.get(), lc.interval() * b.get());
        if b.get() == 3 {
            lc.stop()?;
        }
        Ok(())
    });
    let stopped = heartbeat.start_later(secs(10)).unwrap();

    // A reply that never comes, with a 25 s timeout. The resolver is kept:
    // dropping it would fail the reply at once with `Abandoned`.
    let (reply, _resolver) = Deferred::<String>::new();
    let reply = reply.add_timeout(secs(25), &clock);

    clock.pump(&[secs(10), secs(10)]); // two beats; the reply still waits
    assert_eq!(beats.get(), 2);
    let reply = reply.result().expect_err("no reply yet, and no timeout");

    clock.advance(secs(5)); // 25 s: the timeout fires
    let failure = reply.result().ok().unwrap().unwrap_err();
    assert_eq!(failure.downcast_ref(), Some(&TimedOut { after: secs(25) }));
    println!("reply: {failure} at {:?}", clock.elapsed());

    clock.advance(secs(5)); // 30 s: the third beat stops the heartbeat
    assert_eq!(beats.get(), 3);
    assert!(stopped.result().ok().unwrap().is_ok());
    assert_eq!(clock.pending(), 0);
    println!("heartbeat stopped after {} beats", beats.get());
}
