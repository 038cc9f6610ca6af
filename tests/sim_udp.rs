//! Datagrams on simulated hosts: the program's own `listen_udp` and
//! `connect_udp` code, over links that lose datagrams and reorder them by
//! jitter, and a partition that drops them.

use deferloop::net::{DatagramProtocol, DatagramTransport};
use deferloop::sim::{Link, Sim};
use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

/// Answers each datagram with the same bytes.
struct Echo;
impl DatagramProtocol for Echo {
    fn datagram_received(&mut self, t: &DatagramTransport, data: &[u8], from: SocketAddr) {
        t.send_to(data, from);
    }
}

/// Sends 100 numbered datagrams at once, and records the answers' numbers.
struct Client(Rc<RefCell<Vec<u32>>>);
impl DatagramProtocol for Client {
    fn connection_made(&mut self, t: &DatagramTransport) {
        for i in 0..100u32 {
            t.send(&i.to_be_bytes());
        }
    }
    fn datagram_received(&mut self, _: &DatagramTransport, data: &[u8], _: SocketAddr) {
        self.0
            .borrow_mut()
            .push(u32::from_be_bytes(data.try_into().unwrap()));
    }
}

fn run(seed: u64, link: Link, cut: bool) -> (Vec<u32>, String) {
    let mut sim = Sim::new(seed);
    sim.set_default_link(link);
    let s = sim
        .host("server", "10.0.0.1".parse().unwrap(), |lp| {
            lp.listen_udp("0.0.0.0:53".parse().unwrap(), Echo).unwrap();
        })
        .unwrap();
    let got = Rc::new(RefCell::new(Vec::new()));
    let g = got.clone();
    let c = sim
        .host("client", "10.0.0.2".parse().unwrap(), move |lp| {
            lp.connect_udp("10.0.0.1:53".parse().unwrap(), Client(g.clone()))
                .unwrap();
        })
        .unwrap();
    if cut {
        sim.partition(s, c);
    }
    sim.run_for(Duration::from_secs(1)).unwrap();
    let got = got.borrow().clone();
    (got, sim.trace())
}

#[test]
fn a_clean_link_carries_every_datagram_in_order() {
    let (got, _) = run(1, Link::default(), false);
    assert_eq!(got, (0..100).collect::<Vec<_>>());
}

#[test]
fn loss_and_jitter_drop_and_reorder_datagrams_the_same_way_for_one_seed() {
    let link = Link {
        latency: Duration::from_millis(10),
        jitter: Duration::from_millis(10),
        loss: 0.2,
        ..Link::default()
    };
    let (got, trace) = run(4, link.clone(), false);
    // Each way loses a fifth: about 64 of 100 come back.
    assert!((40..90).contains(&got.len()), "{} came back", got.len());
    assert!(
        got.windows(2).any(|w| w[0] > w[1]),
        "jitter reorders: {got:?}"
    );
    assert!(trace.contains("lost"), "the trace says what was lost");
    let (again, trace2) = run(4, link, false);
    assert_eq!(got, again);
    assert!(trace == trace2);
}

#[test]
fn a_partition_drops_datagrams() {
    let (got, trace) = run(1, Link::default(), true);
    assert!(got.is_empty(), "{got:?}");
    assert!(trace.contains("dropped (partition)"), "{trace}");
}
