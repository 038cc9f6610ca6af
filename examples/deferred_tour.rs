//! A walk through Deferreds on a real loop: chaining, recovery, a timeout and
//! a gather, printing what happens. Run: `cargo run --example deferred_tour`.

use deferloop::deferred::TimedOut;
use deferloop::{gather_results, Deferred, EventLoop, Failure, Loop};
use std::time::Duration;

/// A pretend remote call: answers `n * 10` after `delay`.
fn fetch(lp: &Loop, n: u32, delay: Duration) -> Deferred<u32> {
    let (d, r) = Deferred::new();
    lp.call_later(delay, move |_| {
        r.callback_if_pending(n * 10);
    })
    .expect("loop is open");
    d
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The library reports through `log` (fd exhaustion, contained panics,
    // unhandled failures, ignored writes): show warnings unless RUST_LOG says otherwise.
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let ev = EventLoop::new()?;
    let lp = ev.to_loop();

    // 1. Chaining: a callback that returns a Deferred pauses the chain until it fires.
    let d = fetch(&lp, 1, Duration::from_millis(5))
        .add_callback(|v| {
            println!("1. first answer: {v}; asking again");
            Ok(v + 1)
        })
        .add_callback({
            let lp = lp.clone();
            move |v| fetch(&lp, v, Duration::from_millis(5))
        });
    println!("1. chained result: {}", ev.run_until(d)?);

    // 2. Recovery: an error switches to the errback path; an errback can recover.
    let d = fetch(&lp, 2, Duration::from_millis(1))
        .add_callback(|v| {
            if v > 10 {
                Err(Failure::msg(format!("{v} is too big")))
            } else {
                Ok(v)
            }
        })
        .add_callback(|v| {
            println!("2. never printed: {v}");
            Ok(v)
        })
        .add_errback(|f| {
            println!("2. recovered from: {f}");
            Ok(0)
        });
    println!("2. result after recovery: {}", ev.run_until(d)?);

    // 3. Timeout: a slow answer is cancelled, and Cancelled becomes TimedOut.
    let d = fetch(&lp, 3, Duration::from_secs(10)).add_timeout(Duration::from_millis(20), &lp);
    match ev.run_until(d) {
        Ok(v) => println!("3. unexpected: {v}"),
        Err(f) => println!(
            "3. timed out: {:#} (is TimedOut: {})",
            f,
            f.check::<TimedOut>()
        ),
    }

    // 4. Gather: many requests in flight at once, values in input order.
    let ds = (1..=5).map(|n| fetch(&lp, n, Duration::from_millis(u64::from(6 - n))));
    println!("4. gathered: {:?}", ev.run_until(gather_results(ds))?);
    Ok(())
}
