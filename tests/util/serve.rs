//! Set-up shared by the examples' adversarial tests: a server started on a
//! loop of its own thread, and clients whose every read and write is bounded.
#![allow(dead_code)]

use deferloop::net::Listener;
use deferloop::EventLoop;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// The longest any single read or write of a test may block.
pub const T: Duration = Duration::from_secs(10);

pub fn any() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

/// Runs `start` on a loop of its own thread, for the rest of the process.
pub fn serve(start: impl FnOnce(&EventLoop) -> Listener + Send + 'static) -> SocketAddr {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let ev = EventLoop::new().unwrap();
        let listener = start(&ev);
        tx.send(listener.local_addr().as_inet().unwrap()).unwrap();
        ev.run().unwrap();
    });
    rx.recv_timeout(T).unwrap()
}

pub fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(T)).unwrap();
    s.set_write_timeout(Some(T)).unwrap();
    s
}
