//! A deliberately stuck program, to look at with `ps` from outside.
//!
//! It serves `ps` on its socket, then makes the waits a stuck service has:
//! a request that waits for a lock, whose holder waits for a reply on a
//! connection that never comes; a fan-out whose slowest part waits on a
//! timer; a child process; two Deferreds that feed each other (a cycle).
//! After two seconds one callback blocks the loop for ten (a blocking call
//! where none belongs), and after fifteen it stops.
//!
//! ```text
//! cargo run --example stuck &
//! cargo run --example ps -- <pid> all
//! ```

use deferloop::deferred::DeferredLock;
use deferloop::net::Stream;
use deferloop::process::ProcessProtocol;
use deferloop::{defer_later, gather_results, ps, Deferred, EventLoop, Failure};
use std::process::Command;
use std::time::Duration;

struct Child;
impl ProcessProtocol for Child {}

/// A request that needs the lock, then the upstream's reply.
fn request(lock: &DeferredLock, upstream: &Stream, id: u32) -> Deferred<String> {
    let upstream = upstream.clone();
    lock.acquire().add_callback(move |guard| {
        upstream.write(format!("GET /item/{id}\n").as_bytes());
        upstream.read_line().add_callback(move |line| {
            drop(guard);
            Ok::<_, Failure>(line)
        })
    })
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let ev = EventLoop::new()?;
    let server = ps::serve(&ev)?;
    println!(
        "pid {} serves ps at {}",
        std::process::id(),
        server.path().display()
    );

    // An upstream connection that never answers.
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let upstream = Stream::connect(&ev, listener.local_addr()?);
    let lock = DeferredLock::new();
    let requests: Vec<_> = (1..=2).map(|i| request(&lock, &upstream, i)).collect();

    // A fan-out: two parts are quick, one waits on a timer.
    let parts = vec![
        defer_later(&ev, Duration::from_millis(1), || Ok(1u32)),
        defer_later(&ev, Duration::from_secs(3600), || Ok(2u32)),
        ev.defer_to_thread(|| 3u32),
    ];
    let fan_out = gather_results(parts);

    let child = ev.spawn_process(Command::new("sleep").arg("30"), Child)?;
    let exited = child.wait();

    // Two Deferreds that feed each other: neither ever fires.
    let (a, ra) = Deferred::<u32>::new();
    let (b, rb) = Deferred::<u32>::new();
    a.chain_deferred(&rb);
    b.chain_deferred(&ra);

    ev.call_later(Duration::from_secs(2), |_| {
        // A blocking call on the loop's thread: the loop can do nothing.
        std::thread::sleep(Duration::from_secs(10));
    })?;
    ev.call_later(Duration::from_secs(15), |lp| lp.stop())?;
    ev.run()?;

    child.kill()?;
    let _ = ev.run_until(exited);
    drop((requests, fan_out, ra, rb, server, listener));
    Ok(())
}
