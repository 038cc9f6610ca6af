//! The Deferred registry on the network side: a `Stream` read names its
//! connection's peer and what is buffered, a connect names its address.

use deferloop::net::Stream;
use deferloop::ps::{self, Wait, WaitsOn};
use std::time::Duration;

#[path = "util/ps.rs"]
mod ps_util;
use ps_util::{at_line, manual};

#[test]
fn a_stream_read_names_its_peer_and_what_is_buffered() {
    let (ev, _clock) = manual();
    let (s, peer) = Stream::open_memory(&ev).unwrap();
    peer.send(b"partial line");
    ev.run_once_timeout(Duration::ZERO).unwrap();
    let line = line!() + 1;
    let d = s.read_line();
    let rep = ps::snapshot(&ev);
    match &at_line(&rep, file!(), line).waits_on[..] {
        [WaitsOn::Leaf(Wait::Read { peer, buffered })] => {
            assert_eq!(*buffered, 12);
            assert!(!peer.is_empty());
        }
        other => panic!("{other:?}"),
    }
    drop(d);
}

#[test]
fn a_connect_names_its_address() {
    let (ev, _clock) = manual();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    struct Quiet;
    impl deferloop::net::Protocol for Quiet {
        fn data_received(&mut self, _: &deferloop::net::Transport, _: &[u8]) {}
    }
    let c = ev.connect_tcp(addr, Quiet);
    let rep = ps::snapshot(&ev);
    let connect: Vec<_> = rep
        .deferreds
        .iter()
        .filter(|p| {
            p.waits_on
                == vec![WaitsOn::Leaf(Wait::Connect {
                    addr: addr.to_string(),
                })]
        })
        .collect();
    assert_eq!(connect.len(), 1, "{rep:#?}");
    drop(c);
}

#[test]
fn ss_lists_connections_with_state_pauses_and_idle_time() {
    let (ev, clock) = manual();
    let (s, _peer) = Stream::open_memory(&ev).unwrap();
    s.pause_reading();
    s.set_idle_timeout(Some(Duration::from_secs(60)));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let connecting = Stream::connect(&ev, addr);
    clock.advance(Duration::from_secs(5));
    let rep = ps::snapshot(&ev);
    assert_eq!(rep.connections.len(), 2, "{rep:#?}");
    let ss = rep.ss();
    assert!(ss.contains("open "), "{ss}");
    assert!(ss.contains("reading paused, idle 5.0s of 1m00s"), "{ss}");
    assert!(
        ss.contains(&format!("connecting {addr}: 0 bytes to write")),
        "{ss}"
    );
    drop((s, connecting));
}

#[test]
fn ss_counts_the_bytes_of_an_echo_in_and_out() {
    use deferloop::net::{memory, Protocol, Transport};
    struct Echo;
    impl Protocol for Echo {
        fn data_received(&mut self, t: &Transport, data: &[u8]) {
            t.write(data);
        }
    }
    let (ev, _clock) = manual();
    let (_t, peer) = memory::open(&ev, Echo).unwrap();
    // The peer takes 1000 bytes at a time: the rest of the echo waits in
    // the buffer, and counts as out only once taken.
    peer.set_room(Some(1000));
    peer.send(&[7; 10_000]);
    peer.send(b"and a short one");
    ev.run_once_timeout(Duration::ZERO).unwrap();
    let rep = ps::snapshot(&ev);
    let c = &rep.connections[0];
    assert_eq!(
        (c.bytes_in, c.bytes_out, c.write_buffered),
        (10_015, 1000, 9015)
    );
    let mut echoed = peer.take_written();
    for _ in 0..20 {
        peer.set_room(Some(1000));
        ev.run_once_timeout(Duration::ZERO).unwrap();
        echoed.extend(peer.take_written());
    }
    assert_eq!(echoed.len(), 10_015);
    let rep = ps::snapshot(&ev);
    let c = &rep.connections[0];
    assert_eq!(
        (c.bytes_in, c.bytes_out, c.write_buffered),
        (10_015, 10_015, 0)
    );
    let ss = rep.ss();
    assert!(
        ss.contains("0 bytes to write, 10015 bytes in, 10015 out"),
        "{ss}"
    );
}

/// A connection opened through `Stream::connect` (by address or by name)
/// names the line that opened it, not the library's: a stuck program's `ss`
/// points at its own code.
#[test]
fn a_stream_connect_is_opened_at_the_callers_line() {
    let (ev, _clock) = manual();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let by_addr_line = line!() + 1;
    let by_addr = Stream::connect(&ev, addr);
    let by_name_line = line!() + 1;
    let by_name = Stream::connect(&ev, format!("127.0.0.1:{}", addr.port()).as_str());
    let rep = ps::snapshot(&ev);
    let mut lines: Vec<_> = rep
        .connections
        .iter()
        .map(|c| (c.opened_at.file(), c.opened_at.line()))
        .collect();
    lines.sort();
    let me = file!();
    assert_eq!(
        lines,
        vec![(me, by_addr_line), (me, by_name_line)],
        "{rep:#?}"
    );
    drop((by_addr, by_name));
}
