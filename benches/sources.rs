//! A listener's and a UDP socket's cost, all in one loop (no other process,
//! so callgrind's counts repeat): the program `scripts/source_instructions.sh`
//! runs to count instructions per datagram and per accepted connection.
//! `udp N`: a client and an echo server, N round trips (2N datagrams);
//! `accept N`: a listener accepts N connections, one at a time, each made
//! by a blocking `std` connect and closed at once by that client.
//! `cargo test` runs a few of each.
//!
//! `cargo bench --bench sources -- udp 100000` (or `accept`).

use deferloop::net::{DatagramProtocol, DatagramTransport, Protocol, Transport};
use deferloop::{EventLoop, Failure, Loop};
use std::cell::Cell;
use std::net::{SocketAddr, TcpStream};
use std::rc::Rc;

struct Echo;
impl DatagramProtocol for Echo {
    fn datagram_received(&mut self, t: &DatagramTransport, data: &[u8], from: SocketAddr) {
        t.send_to(data, from);
    }
}

struct Ping(u64, u64, Loop);
impl DatagramProtocol for Ping {
    fn connection_made(&mut self, t: &DatagramTransport) {
        t.send(&[b'x'; 64]);
    }
    fn datagram_received(&mut self, t: &DatagramTransport, data: &[u8], _: SocketAddr) {
        self.0 += 1;
        if self.0 == self.1 {
            self.2.stop();
        } else {
            t.send(data);
        }
    }
}

struct Drop1(Rc<Cell<u64>>, u64, SocketAddr);
impl Protocol for Drop1 {
    fn data_received(&mut self, _: &Transport, _: &[u8]) {}
    fn connection_lost(&mut self, t: &Transport, _: Option<Failure>) {
        self.0.set(self.0.get() + 1);
        let lp = t.event_loop().unwrap();
        if self.0.get() == self.1 {
            lp.stop();
        } else {
            let addr = self.2;
            lp.call_soon(move |_| drop(TcpStream::connect(addr).unwrap()))
                .unwrap();
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    match args.as_slice() {
        [mode, n] => run(mode, n.parse().expect("a count")),
        _ => {
            run("udp", 10);
            run("accept", 10);
        }
    }
}

fn run(mode: &str, n: u64) {
    let ev = EventLoop::new().unwrap();
    let lp: Loop = ev.to_loop();
    let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let _keep: Box<dyn std::any::Any> = match mode {
        "udp" => {
            let s = ev.listen_udp(addr, Echo).unwrap();
            let c = ev
                .connect_udp(s.local_addr().unwrap(), Ping(0, n, lp))
                .unwrap();
            Box::new((s, c))
        }
        _ => {
            let count = Rc::new(Cell::new(0));
            let cell: Rc<Cell<Option<SocketAddr>>> = Rc::default();
            let (c2, a2) = (count.clone(), cell.clone());
            let l = ev
                .listen_tcp(addr, move || Drop1(c2.clone(), n, a2.get().unwrap()))
                .unwrap();
            let local = match l.local_addr() {
                deferloop::net::SockAddr::Inet(a) => *a,
                _ => unreachable!(),
            };
            cell.set(Some(local));
            drop(TcpStream::connect(local).unwrap());
            Box::new(l)
        }
    };
    ev.run().unwrap();
}
