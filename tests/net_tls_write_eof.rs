//! `write_eof` over TLS sends every record, then close_notify, before the
//! write side closes; and a connection whose peer has ended too closes only
//! then. The records rustls accepted are not in the core's write buffer, so
//! "buffer empty" is not "all sent": with a small socket send buffer the
//! last of a large reply used to be cut off, with no close_notify.
#![cfg(feature = "tls")]

#[path = "util/tls.rs"]
mod tls;
mod util;

use deferloop::net::tls::rustls;
use deferloop::net::{Protocol, Transport};
use deferloop::EventLoop;
use std::io::{Read, Write};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use util::run_until;

const T: Duration = Duration::from_secs(30);
const REPLY: usize = 8 << 20;

/// Replies with `REPLY` bytes and `write_eof`, to the request or to the
/// peer's end (`in_eof`), over a socket whose send buffer is 8 KiB, so that
/// records wait in the layer when the core's buffer has emptied.
struct Reply {
    in_eof: bool,
}

impl Reply {
    fn reply(t: &Transport) {
        t.write(&vec![b'r'; REPLY]);
        t.write_eof();
    }
}

impl Protocol for Reply {
    fn connection_made(&mut self, t: &Transport) {
        let fd = t.raw_fd().unwrap();
        let size: libc::c_int = 8192;
        // SAFETY: a setsockopt on the connection's own open socket, with a
        // pointer to a c_int and its size.
        let r = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_SNDBUF,
                (&size as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        assert_eq!(r, 0);
    }
    fn data_received(&mut self, t: &Transport, _: &[u8]) {
        if !self.in_eof {
            Self::reply(t);
        }
    }
    fn eof_received(&mut self, t: &Transport) -> bool {
        if self.in_eof {
            Self::reply(t);
        }
        true
    }
}

/// What the client read, and how the stream ended.
fn exchange(in_eof: bool) -> (usize, String) {
    let pki = tls::localhost();
    let ev = EventLoop::new().unwrap();
    let l = ev
        .listen_tls(
            "127.0.0.1:0".parse().unwrap(),
            &tls::server(&pki),
            move || Reply { in_eof },
        )
        .unwrap();
    let addr = l.local_addr().as_inet().unwrap();
    let out = Arc::new(Mutex::new(None));
    let (out2, remote) = (out.clone(), ev.remote());
    let client = std::thread::spawn(move || {
        let (mut sock, mut c) = tls::raw_connect(&pki, addr);
        c.writer().write_all(b"request").unwrap();
        c.send_close_notify();
        while c.wants_write() {
            c.write_tls(&mut sock).unwrap();
        }
        // Let the server's socket fill before reading.
        std::thread::sleep(Duration::from_millis(200));
        let mut got = 0;
        let mut buf = vec![0; 1 << 16];
        let end = loop {
            match rustls::Stream::new(&mut c, &mut sock).read(&mut buf) {
                Ok(0) => break "close_notify".to_string(),
                Ok(n) => got += n,
                Err(e) => break e.to_string(),
            }
        };
        *out2.lock().unwrap() = Some((got, end));
        remote.call_soon_threadsafe(|_| {}).unwrap();
    });
    run_until(&ev, T, || out.lock().unwrap().is_some());
    client.join().unwrap();
    let r = out.lock().unwrap().take().unwrap();
    r
}

#[test]
fn write_eof_after_the_peer_ended_sends_every_record_then_close_notify() {
    assert_eq!(exchange(true), (REPLY, "close_notify".to_string()));
}

#[test]
fn write_eof_before_the_peer_ends_sends_every_record_then_close_notify() {
    assert_eq!(exchange(false), (REPLY, "close_notify".to_string()));
}
