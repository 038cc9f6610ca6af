//! Framing over real sockets: lines and length-prefixed messages across reads,
//! and a peer that breaks the limits is told, then closed, with the error
//! reported to `connection_lost`.

mod util;

use deferloop::net::framing::{FrameError, FrameProtocol, LengthPrefixed, Lines, Prefix};
use deferloop::net::Transport;
use deferloop::{EventLoop, Failure};
use std::cell::RefCell;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::rc::Rc;
use std::time::Duration;
use util::run_until;

#[derive(Default)]
struct Seen {
    frames: Vec<Vec<u8>>,
    errors: Vec<FrameError>,
    lost: Vec<Option<Failure>>,
}

/// Replies to each frame; on a framing error writes a last "ERR" reply.
struct Replier {
    seen: Rc<RefCell<Seen>>,
    prefix: Option<Prefix>,
}

impl Replier {
    fn reply(&self, t: &Transport, msg: &[u8]) {
        match self.prefix {
            Some(p) => LengthPrefixed::<Replier>::send(t, p, msg).unwrap(),
            None => t.write_vectored(&[msg, b"\n"]),
        }
    }
}

impl FrameProtocol for Replier {
    fn frame_received(&mut self, t: &Transport, frame: &[u8]) {
        self.seen.borrow_mut().frames.push(frame.to_vec());
        self.reply(t, &[b"you said: ", frame].concat());
    }
    fn frame_error(&mut self, t: &Transport, error: &FrameError) {
        self.seen.borrow_mut().errors.push(error.clone());
        self.reply(t, b"ERR");
    }
    fn connection_lost(&mut self, _: &Transport, reason: Option<Failure>) {
        self.seen.borrow_mut().lost.push(reason);
    }
}

/// Sends `parts` with pauses between them (so they arrive as separate reads),
/// then reads everything until the server closes.
fn peer(addr: SocketAddr, parts: Vec<Vec<u8>>) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        for p in parts {
            s.write_all(&p).unwrap();
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut back = Vec::new();
        let _ = s.read_to_end(&mut back);
        back
    })
}

fn be32(n: u32) -> Vec<u8> {
    n.to_be_bytes().to_vec()
}

#[test]
fn lines_split_across_reads_then_an_over_long_line_closes_with_the_error() {
    let ev = EventLoop::new().unwrap();
    let seen = Rc::new(RefCell::new(Seen::default()));
    let s2 = seen.clone();
    let l = ev
        .listen_tcp("127.0.0.1:0".parse().unwrap(), move || {
            Lines::with_delimiter(
                Replier {
                    seen: s2.clone(),
                    prefix: None,
                },
                b"\n",
                16,
            )
            .unwrap()
        })
        .unwrap();
    let p = peer(
        l.local_addr().as_inet().unwrap(),
        vec![
            b"hel".to_vec(),
            b"lo\nwor".to_vec(),
            b"ld\n".to_vec(),
            vec![b'a'; 40],
            b"\nnever seen\n".to_vec(),
        ],
    );
    run_until(&ev, Duration::from_secs(20), || {
        seen.borrow().lost.len() == 1
    });
    let back = p.join().unwrap();
    assert_eq!(back, b"you said: hello\nyou said: world\nERR\n");
    let s = seen.borrow();
    assert_eq!(s.frames, [b"hello".to_vec(), b"world".to_vec()]);
    assert_eq!(
        s.errors,
        [FrameError::LineTooLong {
            limit: 16,
            seen: 40
        }]
    );
    let reason = s.lost[0].as_ref().expect("closed with the framing error");
    assert_eq!(
        reason.downcast_ref::<FrameError>(),
        Some(&FrameError::LineTooLong {
            limit: 16,
            seen: 40
        })
    );
}

#[test]
fn length_prefixed_messages_then_an_oversize_prefix_closes_with_the_error() {
    let ev = EventLoop::new().unwrap();
    let seen = Rc::new(RefCell::new(Seen::default()));
    let s2 = seen.clone();
    let l = ev
        .listen_tcp("127.0.0.1:0".parse().unwrap(), move || {
            LengthPrefixed::new(
                Replier {
                    seen: s2.clone(),
                    prefix: Some(Prefix::U32),
                },
                Prefix::U32,
                1024,
            )
        })
        .unwrap();
    let mut first = be32(3);
    first.extend_from_slice(b"ab");
    let p = peer(
        l.local_addr().as_inet().unwrap(),
        vec![
            first,
            b"c".to_vec(),
            [be32(0), be32(2), b"xy".to_vec()].concat(),
            be32(1 << 30),
            vec![0; 100],
        ],
    );
    run_until(&ev, Duration::from_secs(20), || {
        seen.borrow().lost.len() == 1
    });
    let back = p.join().unwrap();
    let mut want = Vec::new();
    for m in [
        &b"you said: abc"[..],
        b"you said: ",
        b"you said: xy",
        b"ERR",
    ] {
        want.extend_from_slice(&be32(m.len() as u32));
        want.extend_from_slice(m);
    }
    assert_eq!(back, want);
    let s = seen.borrow();
    assert_eq!(s.frames, [b"abc".to_vec(), Vec::new(), b"xy".to_vec()]);
    let e = FrameError::MessageTooLarge {
        size: 1 << 30,
        limit: 1024,
    };
    assert_eq!(s.errors, std::slice::from_ref(&e));
    assert_eq!(
        s.lost[0].as_ref().unwrap().downcast_ref::<FrameError>(),
        Some(&e)
    );
}

#[test]
fn a_message_too_long_for_its_prefix_is_refused_before_writing() {
    let ev = EventLoop::new().unwrap();
    let servers = Rc::new(RefCell::new(Vec::new()));
    let s2 = servers.clone();
    let l = ev
        .listen_tcp("127.0.0.1:0".parse().unwrap(), move || {
            let (r, seen) = util::net::Rec::new();
            s2.borrow_mut().push(seen);
            r
        })
        .unwrap();
    let (rec, _seen) = util::net::Rec::new();
    let t = ev
        .run_until(
            ev.connect_tcp(l.local_addr().as_inet().unwrap(), rec)
                .connected(),
        )
        .unwrap();
    let big = vec![7; 70_000];
    assert!(LengthPrefixed::<Replier>::send(&t, Prefix::U16, &big).is_err());
    assert!(LengthPrefixed::<Replier>::send(&t, Prefix::U32, &big).is_ok());
    t.close();
    run_until(&ev, Duration::from_secs(20), || {
        servers
            .borrow()
            .first()
            .is_some_and(|s| matches!(s.borrow().events.last(), Some(util::net::Ev::Lost(_))))
    });
    // The peer got the second message only: nothing of the refused one.
    let got = servers.borrow()[0].borrow().bytes.clone();
    assert_eq!(got.len(), 4 + 70_000);
    assert_eq!(got[..4], 70_000u32.to_be_bytes());
    assert!(got[4..].iter().all(|&b| b == 7));
}

/// Records frames, frame errors and the end of file.
struct Log(Rc<RefCell<Vec<String>>>);
impl FrameProtocol for Log {
    fn frame_received(&mut self, _: &Transport, frame: &[u8]) {
        self.0
            .borrow_mut()
            .push(String::from_utf8_lossy(frame).into_owned());
    }
    fn frame_error(&mut self, _: &Transport, e: &FrameError) {
        self.0.borrow_mut().push(format!("error: {e:?}"));
    }
    fn eof_received(&mut self, _: &Transport) -> bool {
        self.0.borrow_mut().push("eof".into());
        false
    }
}

/// An end of file in the middle of a frame is told, not silent: a line
/// without its delimiter, a message shorter than its prefix said.
#[test]
fn an_end_of_file_inside_a_frame_is_a_truncated_frame_error() {
    use deferloop::net::memory;
    let ev = EventLoop::new().unwrap();
    let seen = Rc::new(RefCell::new(Vec::new()));
    let (_t, peer) = memory::open(&ev, Lines::new(Log(seen.clone()))).unwrap();
    peer.send(b"HELO\r\nQUI");
    peer.send_eof();
    run_until(&ev, Duration::from_secs(20), || seen.borrow().len() == 3);
    assert_eq!(
        *seen.borrow(),
        ["HELO", "error: Truncated { buffered: 3 }", "eof"]
    );

    let seen = Rc::new(RefCell::new(Vec::new()));
    let framer = LengthPrefixed::new(Log(seen.clone()), Prefix::U32, 1 << 20);
    let (_t, peer) = memory::open(&ev, framer).unwrap();
    let mut short = 100u32.to_be_bytes().to_vec();
    short.extend_from_slice(&[7; 50]);
    peer.send(&short);
    peer.send_eof();
    run_until(&ev, Duration::from_secs(20), || seen.borrow().len() == 2);
    assert_eq!(*seen.borrow(), ["error: Truncated { buffered: 50 }", "eof"]);
}

/// A message whose whole prefix came, and none of its bytes, is cut short
/// too: the end of file is told as `Truncated` with 0 bytes of it, not
/// taken for a clean end between messages. (Found by the `framing_dispatch`
/// fuzz target.)
#[test]
fn an_end_of_file_right_after_a_prefix_is_a_truncated_frame_error() {
    use deferloop::net::memory;
    let ev = EventLoop::new().unwrap();
    let seen = Rc::new(RefCell::new(Vec::new()));
    let framer = LengthPrefixed::new(Log(seen.clone()), Prefix::U32, 1 << 20);
    let (_t, peer) = memory::open(&ev, framer).unwrap();
    peer.send(&[&be32(2)[..], b"ok", &be32(4)].concat());
    peer.send_eof();
    run_until(&ev, Duration::from_secs(20), || seen.borrow().len() == 3);
    assert_eq!(
        *seen.borrow(),
        ["ok", "error: Truncated { buffered: 0 }", "eof"]
    );
}
