//! A loop serving timers while blocking work runs on the pool.
//! Run: `cargo run --example threads`.

use deferloop::{gather_results, EventLoop, LoopingCall};
use std::time::{Duration, Instant};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The library reports through `log` (fd exhaustion, contained panics,
    // unhandled failures, ignored writes): show warnings unless RUST_LOG says otherwise.
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let ev = EventLoop::new()?;
    let lp = ev.to_loop();
    let t0 = Instant::now();
    // A heartbeat every 50 ms keeps running while the pool blocks.
    let beat = LoopingCall::new(lp.clone(), move || {
        println!("[{:>4} ms] tick", t0.elapsed().as_millis());
        Ok(())
    });
    // The heartbeat's Deferred fires when it stops; nothing waits for it.
    beat.start(Duration::from_millis(50))?.detach();
    let jobs = (1..=4u64).map(|n| {
        lp.defer_to_thread(move || {
            std::thread::sleep(Duration::from_millis(60 * n)); // blocking work
            n * 100
        })
        .add_callback(move |v| {
            println!("[{:>4} ms] job {n} done: {v}", t0.elapsed().as_millis());
            Ok(v)
        })
    });
    let all = ev.run_until(gather_results(jobs))?;
    beat.stop()?;
    println!("all jobs: {all:?}");
    Ok(())
}
