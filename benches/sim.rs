//! The simulation's speed (feature `sim`): simulated time that costs nothing
//! while nothing happens, and many connections exchanging many messages.
//!
//! `cargo bench --features sim --bench sim` prints the figures BENCHMARKS.md
//! quotes; `cargo test --features sim --benches` runs a small smoke of each.
//!
//! - an idle cluster: 5 hosts, each with a 1 s heartbeat timer and an open
//!   idle connection to the next, for one simulated hour;
//! - 1,000 connections between two hosts (1 ms apart), each making 1,000
//!   request/response exchanges of 64 bytes, one after the other.

use deferloop::net::{Protocol, Transport};
use deferloop::sim::{Link, Sim};
use deferloop::{Failure, Loop};
use std::cell::Cell;
use std::rc::Rc;
use std::time::{Duration, Instant};

struct Echo;
impl Protocol for Echo {
    fn data_received(&mut self, t: &Transport, data: &[u8]) {
        t.write(data);
    }
}

struct Quiet;
impl Protocol for Quiet {
    fn data_received(&mut self, _: &Transport, _: &[u8]) {}
}

/// CPU time this process used so far (user + system): what a run costs
/// on a machine shared with other work, where wall time waits its turn.
fn cpu() -> Duration {
    // SAFETY: `getrusage` writes into the zeroed struct we own.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_SELF with a valid pointer.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn idle_cluster(hours: u64) -> (Duration, Duration, u64) {
    let mut sim = Sim::new(1);
    sim.set_trace(false, false);
    let beats = Rc::new(Cell::new(0u64));
    for i in 0..5u8 {
        let b = beats.clone();
        let next = format!("10.0.0.{}:9", (i + 1) % 5 + 1);
        sim.host(
            &format!("h{i}"),
            format!("10.0.0.{}", i + 1).parse().unwrap(),
            move |lp| {
                lp.listen_tcp("0.0.0.0:9".parse().unwrap(), || Quiet)
                    .unwrap();
                lp.connect_tcp(next.parse().unwrap(), Quiet)
                    .connected()
                    .add_both(|_| Ok::<(), Failure>(()))
                    .detach();
                fn beat(lp: &Loop, b: Rc<Cell<u64>>) {
                    b.set(b.get() + 1);
                    lp.call_later(Duration::from_secs(1), move |lp| beat(lp, b))
                        .unwrap();
                }
                beat(lp, b.clone());
            },
        )
        .unwrap();
    }
    let (t0, c0) = (Instant::now(), cpu());
    sim.run_for(Duration::from_secs(3600 * hours)).unwrap();
    (t0.elapsed(), cpu() - c0, beats.get())
}

/// Sends a 64-byte request, waits for all of it back, `left` times.
struct Pinger {
    left: u32,
    got: usize,
    done: Rc<Cell<u64>>,
}
impl Protocol for Pinger {
    fn connection_made(&mut self, t: &Transport) {
        t.write(&[b'x'; 64]);
    }
    fn data_received(&mut self, t: &Transport, data: &[u8]) {
        self.got += data.len();
        while self.got >= 64 {
            self.got -= 64;
            self.done.set(self.done.get() + 1);
            self.left -= 1;
            if self.left == 0 {
                return t.close();
            }
            t.write(&[b'x'; 64]);
        }
    }
}

fn exchanges(conns: u32, messages: u32) -> (Duration, Duration, Duration, u64) {
    let mut sim = Sim::new(2);
    sim.set_trace(false, false);
    sim.host("server", "10.0.0.1".parse().unwrap(), |lp| {
        lp.listen_tcp("0.0.0.0:7".parse().unwrap(), || Echo)
            .unwrap();
    })
    .unwrap();
    let done = Rc::new(Cell::new(0u64));
    let d = done.clone();
    sim.host("client", "10.0.0.2".parse().unwrap(), move |lp| {
        for _ in 0..conns {
            let p = Pinger {
                left: messages,
                got: 0,
                done: d.clone(),
            };
            lp.connect_tcp("10.0.0.1:7".parse().unwrap(), p)
                .connected()
                .add_both(|_| Ok::<(), Failure>(()))
                .detach();
        }
    })
    .unwrap();
    sim.set_default_link(Link {
        latency: Duration::from_millis(1),
        ..Link::default()
    });
    let want = u64::from(conns) * u64::from(messages);
    let (t0, c0) = (Instant::now(), cpu());
    let d = done.clone();
    let finished = sim
        .run_until(Duration::from_secs(3600), move |_| d.get() == want)
        .unwrap();
    assert!(finished, "{} of {want} exchanges", done.get());
    (t0.elapsed(), cpu() - c0, sim.elapsed(), done.get())
}

fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let (hours, conns, messages) = if bench { (1, 1000, 1000) } else { (1, 20, 20) };
    println!(
        "One thread; wall time waits its turn on a shared machine, CPU time (user + system) does not."
    );
    println!();
    let (wall, cpu, beats) = idle_cluster(hours);
    assert_eq!(beats, 5 * (3600 * hours + 1));
    println!(
        "- idle cluster, 5 hosts with 1 s heartbeats, {hours} simulated hour: {:.3} s wall, {:.3} s CPU ({beats} timer calls)",
        wall.as_secs_f64(),
        cpu.as_secs_f64()
    );
    let (wall, cpu, simulated, n) = exchanges(conns, messages);
    println!(
        "- {conns} connections x {messages} request/response exchanges of 64 B, 1 ms links: {:.3} s wall, {:.3} s CPU ({n} exchanges in {:.3} simulated s, {:.0} exchanges per CPU second)",
        wall.as_secs_f64(),
        cpu.as_secs_f64(),
        simulated.as_secs_f64(),
        n as f64 / cpu.as_secs_f64()
    );
}
