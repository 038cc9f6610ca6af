//! Determinism: a busy cluster — jitter, loss, a partition, a crash and a
//! restart — gives a byte-identical trace for one seed, and another trace
//! for another seed.

use deferloop::net::{Protocol, Transport};
use deferloop::sim::{Link, Sim};
use deferloop::{Failure, Loop};
use std::time::Duration;

struct Echo;
impl Protocol for Echo {
    fn data_received(&mut self, t: &Transport, data: &[u8]) {
        t.write(data);
    }
}

/// Sends `n` bytes, closes once they came back.
struct Ping {
    left: usize,
}
impl Protocol for Ping {
    fn connection_made(&mut self, t: &Transport) {
        t.write(&vec![b'x'; self.left]);
    }
    fn data_received(&mut self, t: &Transport, data: &[u8]) {
        self.left = self.left.saturating_sub(data.len());
        if self.left == 0 {
            t.close();
        }
    }
    fn connection_lost(&mut self, t: &Transport, _: Option<Failure>) {
        if let Some(lp) = t.event_loop() {
            deferloop::sim::note(&lp, "ping done");
        }
    }
}

/// A client that connects every 30 ms, each time with a larger message.
fn client(lp: &Loop) {
    fn again(lp: &Loop, n: usize) {
        lp.connect_tcp("10.0.0.1:7".parse().unwrap(), Ping { left: n })
            .connected()
            .add_both(|_| Ok::<(), Failure>(()))
            .detach();
        lp.call_later(Duration::from_millis(30), move |lp| {
            again(lp, n % 5000 + 700)
        })
        .unwrap();
    }
    again(lp, 100);
}

fn run(seed: u64) -> String {
    let mut sim = Sim::new(seed);
    sim.set_default_link(Link {
        latency: Duration::from_millis(5),
        jitter: Duration::from_millis(5),
        bandwidth: Some(1_000_000),
        loss: 0.05,
        ..Link::default()
    });
    let s = sim
        .host("server", "10.0.0.1".parse().unwrap(), |lp| {
            lp.listen_tcp("0.0.0.0:7".parse().unwrap(), || Echo)
                .unwrap();
        })
        .unwrap();
    let c1 = sim.host("c1", "10.0.0.2".parse().unwrap(), client).unwrap();
    sim.host("c2", "10.0.0.3".parse().unwrap(), client).unwrap();
    // Faults at times the seed chooses.
    let t1 = sim.random_below(300);
    sim.run_for(Duration::from_millis(100 + t1)).unwrap();
    sim.partition(s, c1);
    sim.run_for(Duration::from_millis(500)).unwrap();
    sim.heal(s, c1);
    let t2 = sim.random_below(300);
    sim.run_for(Duration::from_millis(t2)).unwrap();
    sim.crash(s);
    sim.run_for(Duration::from_millis(150)).unwrap();
    sim.restart(s).unwrap();
    sim.run_for(Duration::from_secs(1)).unwrap();
    sim.trace()
}

#[test]
fn one_seed_one_trace_byte_for_byte() {
    let a = run(7);
    let b = run(7);
    assert!(
        a.lines().count() > 1000,
        "a busy trace: {}",
        a.lines().count()
    );
    for needle in [
        "partition",
        "heal",
        "crash",
        "restart",
        "reset",
        "refused",
        "ping done",
    ] {
        assert!(a.contains(needle), "the trace has `{needle}`");
    }
    if a != b {
        let first = a.lines().zip(b.lines()).position(|(x, y)| x != y);
        panic!("seed 7 gave two traces; first difference at line {first:?}");
    }
}

#[test]
fn another_seed_another_trace() {
    assert_ne!(run(7), run(8));
}
