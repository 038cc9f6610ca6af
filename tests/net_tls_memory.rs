//! A TLS connection that sent a large reply holds none of it once the reply
//! is out, whether the socket took it at once or in parts: an idle TLS
//! connection costs the same after a burst as before it. Measured with a
//! counting allocator, on the loop's thread.
#![cfg(feature = "tls")]

#[path = "util/alloc_count.rs"]
mod alloc_count;
#[path = "util/tls.rs"]
mod tls;
mod util;

use deferloop::net::{Protocol, Transport};
use deferloop::EventLoop;
use std::cell::Cell;
use std::io::{Read, Write};
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use util::run_until;

#[global_allocator]
static ALLOC: alloc_count::Counting = alloc_count::Counting;

const T: Duration = Duration::from_secs(30);

/// Answers a request `<n>\n` with `n` bytes; counts the requests.
struct Replies(Rc<Cell<usize>>);

impl Protocol for Replies {
    fn data_received(&mut self, t: &Transport, data: &[u8]) {
        let n: usize = std::str::from_utf8(data).unwrap().trim().parse().unwrap();
        t.write(&vec![b'r'; n]);
        self.0.set(self.0.get() + 1);
    }
}

#[test]
fn an_idle_tls_connection_keeps_no_memory_of_its_last_reply() {
    let pki = tls::localhost();
    let ev = EventLoop::new().unwrap();
    let requests = Rc::new(Cell::new(0));
    let r = requests.clone();
    let l = ev
        .listen_tls(
            "127.0.0.1:0".parse().unwrap(),
            &tls::server(&pki),
            move || Replies(r.clone()),
        )
        .unwrap();
    let addr = l.local_addr().as_inet().unwrap();
    // One byte first, so what a connection always holds is live before the
    // baseline; then replies of growing size.
    let sizes = [1, 16 << 10, 48 << 10, 100 << 10, 400 << 10];
    // The client has read the reply to request i when `read` is i + 1; it
    // sends request i + 1 once `go` is i + 1.
    let (read, go) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(1)));
    let (read2, go2, remote) = (read.clone(), go.clone(), ev.remote());
    let client = std::thread::spawn(move || {
        let (mut sock, mut c) = tls::raw_connect(&pki, addr);
        for (i, n) in sizes.into_iter().enumerate() {
            while go2.load(Ordering::SeqCst) <= i {
                std::thread::sleep(Duration::from_millis(1));
            }
            let mut s = deferloop::net::tls::rustls::Stream::new(&mut c, &mut sock);
            s.write_all(format!("{n}\n").as_bytes()).unwrap();
            let mut reply = vec![0; n];
            s.read_exact(&mut reply).unwrap();
            assert!(reply.iter().all(|&b| b == b'r'));
            read2.store(i + 1, Ordering::SeqCst);
            // Wakes the loop, which waits for this with nothing to do.
            remote.call_soon_threadsafe(|_| {}).unwrap();
        }
        // Stay open until the test is done with the connection.
        while go2.load(Ordering::SeqCst) <= sizes.len() {
            std::thread::sleep(Duration::from_millis(1));
        }
    });
    // A few turns with nothing to do: no event comes for a connection whose
    // reply the socket took at once.
    let idle = |ev: &EventLoop| {
        for _ in 0..3 {
            let fired = Rc::new(Cell::new(false));
            let f = fired.clone();
            ev.call_later(Duration::from_millis(2), move |_| f.set(true))
                .unwrap();
            run_until(ev, T, || fired.get());
        }
    };
    let mut baseline = 0;
    let mut held = Vec::new();
    for (i, size) in sizes.into_iter().enumerate() {
        run_until(&ev, T, || read.load(Ordering::SeqCst) == i + 1);
        idle(&ev);
        if i == 0 {
            baseline = alloc_count::live();
        } else {
            held.push((size, alloc_count::live() - baseline));
        }
        go.store(i + 2, Ordering::SeqCst);
    }
    client.join().unwrap();
    assert_eq!(requests.get(), sizes.len());
    for (size, grew) in held {
        assert!(
            grew < 8 * 1024,
            "after a {size}-byte reply, the idle connection holds {grew} bytes more"
        );
    }
}
