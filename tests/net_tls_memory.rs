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

/// Answers a request `<n>\n` with `n` bytes; counts the requests, and the
/// most a reply left in the write buffer (the socket took it in parts).
struct Replies {
    requests: Rc<Cell<usize>>,
    most_buffered: Rc<Cell<usize>>,
    small_sndbuf: bool,
}

impl Protocol for Replies {
    fn connection_made(&mut self, t: &Transport) {
        if !self.small_sndbuf {
            return;
        }
        util::net::set_send_buffer(t, 8192);
    }
    fn data_received(&mut self, t: &Transport, data: &[u8]) {
        let n: usize = std::str::from_utf8(data).unwrap().trim().parse().unwrap();
        t.write(&vec![b'r'; n]);
        self.requests.set(self.requests.get() + 1);
        let most = self.most_buffered.get().max(t.write_buffer_size());
        self.most_buffered.set(most);
    }
}

#[test]
fn an_idle_tls_connection_keeps_no_memory_of_a_reply_the_socket_took_at_once() {
    let (held, most_buffered) = held_after_replies(false);
    assert_eq!(most_buffered, 0, "every reply went out at once");
    check(&held);
}

/// The same with an 8 KiB send buffer and a client slow to read: the
/// replies wait in the layer and the core's buffer, and go out on
/// writable edges.
#[test]
fn an_idle_tls_connection_keeps_no_memory_of_a_reply_sent_in_parts() {
    let (held, most_buffered) = held_after_replies(true);
    assert!(most_buffered > 0, "no reply waited for the socket");
    check(&held);
}

fn check(held: &[(usize, isize)]) {
    for &(size, grew) in held {
        assert!(
            grew < 8 * 1024,
            "after a {size}-byte reply, the idle connection holds {grew} bytes more"
        );
    }
}

/// Bytes held on the loop's thread after each reply, over what a
/// connection holds after a 1-byte one; and the most a reply left in the
/// core's write buffer.
fn held_after_replies(small_sndbuf: bool) -> (Vec<(usize, isize)>, usize) {
    let pki = tls::localhost();
    let ev = EventLoop::new().unwrap();
    let requests = Rc::new(Cell::new(0));
    let most_buffered = Rc::new(Cell::new(0));
    let (r, m) = (requests.clone(), most_buffered.clone());
    let l = ev
        .listen_tls(
            "127.0.0.1:0".parse().unwrap(),
            &tls::server(&pki),
            move || Replies {
                requests: r.clone(),
                most_buffered: m.clone(),
                small_sndbuf,
            },
        )
        .unwrap();
    let addr = l.local_addr().as_inet().unwrap();
    // One byte first, so what a connection always holds is live before the
    // baseline; then replies of growing size (with default buffers, sizes
    // that loopback takes at once).
    let sizes: &'static [usize] = if small_sndbuf {
        &[1, 16 << 10, 48 << 10, 100 << 10, 400 << 10]
    } else {
        &[1, 16 << 10, 48 << 10, 100 << 10]
    };
    // The client has read the reply to request i when `read` is i + 1; it
    // sends request i + 1 once `go` is i + 1.
    let (read, go) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(1)));
    let (read2, go2, remote) = (read.clone(), go.clone(), ev.remote());
    let client = std::thread::spawn(move || {
        let (mut sock, mut c) = tls::raw_connect(&pki, addr);
        for (i, &n) in sizes.iter().enumerate() {
            while go2.load(Ordering::SeqCst) <= i {
                std::thread::sleep(Duration::from_millis(1));
            }
            let mut s = deferloop::net::tls::rustls::Stream::new(&mut c, &mut sock);
            s.write_all(format!("{n}\n").as_bytes()).unwrap();
            if small_sndbuf {
                // Let the server's socket fill before reading.
                std::thread::sleep(Duration::from_millis(20));
            }
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
    for (i, &size) in sizes.iter().enumerate() {
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
    (held, most_buffered.get())
}
