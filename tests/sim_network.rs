//! The simulated network's streams: connect and accept, refusal, half-close,
//! latency, partitions, crash and restart — through the same `connect_tcp`,
//! `listen_tcp` and `Protocol` code a real program uses.

use deferloop::net::{ConnectFailed, Protocol, Transport};
use deferloop::sim::{HostId, Link, Sim};
use deferloop::{Failure, Loop};
use std::cell::RefCell;
use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

type Log = Rc<RefCell<Vec<String>>>;

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// Echoes, and answers the peer's EOF with its own.
struct Echo;
impl Protocol for Echo {
    fn data_received(&mut self, t: &Transport, data: &[u8]) {
        t.write(data);
    }
}

/// Records what happens to it, with the simulated time.
struct Rec {
    log: Log,
    lp: Loop,
    send: &'static [u8],
    eof_after_send: bool,
}
impl Rec {
    fn note(&self, what: String) {
        let ms = self.lp.time().elapsed_since_start_ms();
        self.log.borrow_mut().push(format!("{ms} {what}"));
    }
}
trait Ms {
    fn elapsed_since_start_ms(&self) -> u128;
}
thread_local! {
    static START: RefCell<Option<std::time::Instant>> = const { RefCell::new(None) };
}
impl Ms for std::time::Instant {
    fn elapsed_since_start_ms(&self) -> u128 {
        START.with(|s| {
            self.duration_since(s.borrow().expect("start set"))
                .as_millis()
        })
    }
}
impl Protocol for Rec {
    fn connection_made(&mut self, t: &Transport) {
        self.note("made".into());
        t.write(self.send);
        if self.eof_after_send {
            t.write_eof();
        }
    }
    fn data_received(&mut self, _: &Transport, data: &[u8]) {
        self.note(format!("data {}", String::from_utf8_lossy(data)));
    }
    fn eof_received(&mut self, _: &Transport) -> bool {
        self.note("eof".into());
        false
    }
    fn connection_lost(&mut self, _: &Transport, reason: Option<Failure>) {
        let why = match reason {
            None => "clean".to_string(),
            Some(f) => match f.downcast_ref::<io::Error>() {
                Some(e) => format!("{:?}", e.kind()),
                None => f.to_string(),
            },
        };
        self.note(format!("lost {why}"));
    }
}

fn sim_with(latency_ms: u64) -> Sim {
    let sim = Sim::new(1);
    START.with(|s| *s.borrow_mut() = Some(deferloop::Clock::now(sim.clock())));
    let mut sim = sim;
    sim.set_default_link(Link {
        latency: Duration::from_millis(latency_ms),
        ..Link::default()
    });
    sim
}

fn server(sim: &mut Sim) -> HostId {
    sim.host("server", "10.0.0.1".parse().unwrap(), |lp| {
        lp.listen_tcp(addr("0.0.0.0:7"), || Echo).unwrap();
    })
    .unwrap()
}

fn client(sim: &mut Sim, log: &Log, to: &'static str, eof: bool) -> HostId {
    let log = log.clone();
    sim.host("client", "10.0.0.2".parse().unwrap(), move |lp| {
        let rec = Rec {
            log: log.clone(),
            lp: lp.clone(),
            send: b"ping",
            eof_after_send: eof,
        };
        let log = log.clone();
        lp.connect_tcp(addr(to), rec)
            .connected()
            .add_both(move |r| {
                if let Err(f) = r {
                    let kind = match (
                        f.downcast_ref::<ConnectFailed>(),
                        f.downcast_ref::<io::Error>(),
                    ) {
                        (Some(c), _) => format!("{:?}", c.cause().kind()),
                        (None, Some(e)) => format!("{:?}", e.kind()),
                        _ => format!("{f:?}"),
                    };
                    log.borrow_mut().push(format!("connect failed {kind}"));
                }
                Ok::<(), Failure>(())
            })
            .detach();
    })
    .unwrap()
}

#[test]
fn a_round_trip_takes_the_links_latency() {
    let mut sim = sim_with(10);
    server(&mut sim);
    let log = Log::default();
    client(&mut sim, &log, "10.0.0.1:7", true);
    sim.run_for(Duration::from_secs(1)).unwrap();
    // Connect: one round trip (20 ms); the echo: another; the EOF answered
    // by the server's close comes with it.
    assert_eq!(
        *log.borrow(),
        ["20 made", "40 data ping", "40 eof", "40 lost clean"]
    );
}

#[test]
fn a_port_without_listener_refuses() {
    let mut sim = sim_with(10);
    server(&mut sim);
    let log = Log::default();
    client(&mut sim, &log, "10.0.0.1:8", false);
    sim.run_for(Duration::from_secs(1)).unwrap();
    assert_eq!(*log.borrow(), ["connect failed ConnectionRefused"]);
}

#[test]
fn a_partition_holds_the_bytes_until_it_heals() {
    let mut sim = sim_with(10);
    let s = server(&mut sim);
    let log = Log::default();
    let c = client(&mut sim, &log, "10.0.0.1:7", false);
    sim.run_for(Duration::from_millis(25)).unwrap(); // connected at 20, ping in flight
    sim.partition(s, c);
    sim.run_for(Duration::from_secs(2)).unwrap();
    assert_eq!(*log.borrow(), ["20 made"]);
    sim.heal(s, c);
    sim.run_for(Duration::from_secs(1)).unwrap();
    let log = log.borrow();
    assert_eq!(log.len(), 2, "{log:?}");
    // Retransmitted every 200 ms: the echo comes after the heal (2025 ms).
    let ms: u128 = log[1].split(' ').next().unwrap().parse().unwrap();
    assert!(log[1].ends_with("data ping") && ms > 2025, "{log:?}");
}

#[test]
fn a_crash_resets_the_peers_and_a_restart_runs_setup_again() {
    let mut sim = sim_with(10);
    let s = server(&mut sim);
    let log = Log::default();
    let c = client(&mut sim, &log, "10.0.0.1:7", false);
    sim.run_for(Duration::from_millis(100)).unwrap();
    sim.crash(s);
    assert!(!sim.is_up(s));
    sim.run_for(Duration::from_millis(100)).unwrap();
    assert_eq!(
        *log.borrow(),
        ["20 made", "40 data ping", "110 lost ConnectionReset"]
    );
    // Down: its port refuses. Restarted: the setup listens again.
    sim.crash(c);
    sim.restart(c).unwrap();
    sim.run_for(Duration::from_millis(100)).unwrap();
    sim.restart(s).unwrap();
    sim.crash(c);
    sim.restart(c).unwrap();
    sim.run_for(Duration::from_millis(100)).unwrap();
    let log = log.borrow();
    assert_eq!(log[3], "connect failed ConnectionRefused", "{log:?}");
    assert_eq!(log[4..], ["320 made", "340 data ping"], "{log:?}");
    let trace = sim.trace();
    assert!(trace.contains("server crash"), "{trace}");
    assert!(trace.contains("server restart"), "{trace}");
}

#[test]
fn an_idle_hour_with_a_ticking_timer_passes_in_simulated_time() {
    let mut sim = Sim::new(5);
    let ticks = Rc::new(RefCell::new(0u32));
    let t = ticks.clone();
    sim.host("ticker", "10.0.0.9".parse().unwrap(), move |lp| {
        fn tick(lp: &Loop, t: Rc<RefCell<u32>>) {
            *t.borrow_mut() += 1;
            lp.call_later(Duration::from_secs(1), move |lp| tick(lp, t))
                .unwrap();
        }
        tick(lp, t.clone());
    })
    .unwrap();
    sim.run_for(Duration::from_secs(3600)).unwrap();
    assert_eq!(*ticks.borrow(), 3601);
    assert_eq!(sim.elapsed(), Duration::from_secs(3600));
}

/// Collects everything, then answers the EOF by closing.
struct Sink(
    Rc<RefCell<Vec<u8>>>,
    Rc<RefCell<Option<std::time::Instant>>>,
);
impl Protocol for Sink {
    fn data_received(&mut self, _: &Transport, data: &[u8]) {
        self.0.borrow_mut().extend_from_slice(data);
    }
    fn eof_received(&mut self, t: &Transport) -> bool {
        if let Some(lp) = t.event_loop() {
            *self.1.borrow_mut() = Some(lp.time());
        }
        false
    }
}

struct Source(Vec<u8>);
impl Protocol for Source {
    fn connection_made(&mut self, t: &Transport) {
        t.write(&self.0);
        t.write_eof();
    }
    fn data_received(&mut self, _: &Transport, _: &[u8]) {}
}

#[test]
fn a_stream_arrives_whole_and_in_order_through_jitter_loss_and_a_bandwidth_limit() {
    let mut sim = Sim::new(11);
    let start = deferloop::Clock::now(sim.clock());
    sim.set_default_link(Link {
        latency: Duration::from_millis(5),
        jitter: Duration::from_millis(20),
        bandwidth: Some(1_000_000),
        loss: 0.1,
        ..Link::default()
    });
    sim.set_window(16 * 1024); // the writer must wait for the reader, often
    let got = Rc::new(RefCell::new(Vec::new()));
    let eof_at = Rc::new(RefCell::new(None));
    let (g, e) = (got.clone(), eof_at.clone());
    sim.host("server", "10.0.0.1".parse().unwrap(), move |lp| {
        let (g, e) = (g.clone(), e.clone());
        lp.listen_tcp(addr("0.0.0.0:7"), move || Sink(g.clone(), e.clone()))
            .unwrap();
    })
    .unwrap();
    let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let d = data.clone();
    sim.host("client", "10.0.0.2".parse().unwrap(), move |lp| {
        lp.connect_tcp(addr("10.0.0.1:7"), Source(d.clone()))
            .connected()
            .detach();
    })
    .unwrap();
    sim.run_for(Duration::from_secs(30)).unwrap();
    assert!(
        *got.borrow() == data,
        "{} of {} bytes, in order",
        got.borrow().len(),
        data.len()
    );
    // 300 kB at 1 MB/s: at least 0.3 s, whatever the window and losses.
    let took = eof_at.borrow().expect("the EOF came") - start;
    assert!(took >= Duration::from_millis(300), "{took:?}");
}

#[test]
fn a_simulated_hosts_name_resolves_to_its_address() {
    let mut sim = sim_with(10);
    server(&mut sim);
    let got = Rc::new(RefCell::new(Vec::new()));
    let g = got.clone();
    sim.host("client", "10.0.0.2".parse().unwrap(), move |lp| {
        let s = deferloop::net::Stream::connect(lp, "server:7");
        s.write(b"by name");
        let g = g.clone();
        s.read_exactly(7)
            .add_callback(move |b| {
                *g.borrow_mut() = b;
                Ok::<(), Failure>(())
            })
            .detach();
    })
    .unwrap();
    sim.run_for(Duration::from_secs(1)).unwrap();
    assert_eq!(*got.borrow(), b"by name");
    assert!(sim.trace().contains("10.0.0.2:49152 > 10.0.0.1:7 connect"));
}
