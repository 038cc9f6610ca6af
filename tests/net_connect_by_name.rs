//! Connecting by name everywhere: `Stream::connect` and `connect_with` take
//! `"host:port"` (looked up, addresses raced) as `connect_tcp_to` does; one
//! `ConnectOptions` value — resolver, timeouts, address preference — serves
//! TCP, streams and UDP. Bad input is a clear error on the Deferred: a name
//! that does not resolve, a malformed target, a preference that leaves no
//! address. Only loopback is contacted.

use deferloop::net::{
    AddressPreference, ConnectOptions, DatagramProtocol, DatagramTransport, HostResolver, Stream,
};
use deferloop::{EventLoop, Failure};
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

const T: Duration = Duration::from_secs(20);

/// A line server on 127.0.0.1: says `hi` to each client.
fn greeter(ev: &EventLoop) -> (deferloop::net::Listener, u16) {
    let l = Stream::listen_tcp(ev, "127.0.0.1:0".parse().unwrap(), |s| s.write(b"hi\n")).unwrap();
    let port = l.local_addr().as_inet().unwrap().port();
    (l, port)
}

/// The failure `d` ends with (it must fail), as the chain holds it.
fn failure_of<V: 'static>(ev: &EventLoop, d: deferloop::Deferred<V>) -> Failure {
    let outcome = d
        .add_timeout(T, &ev.to_loop())
        .add_both(|r: Result<V, Failure>| Ok::<_, Failure>(r.err()));
    ev.run_until(outcome).unwrap().expect("expected a failure")
}

/// Answers `v4only.test` with a loopback IPv4 address, and nothing else.
fn v4_only_table() -> HostResolver {
    HostResolver::with_lookup(1, move |host, port| {
        if host == "v4only.test" {
            Ok(vec![SocketAddr::from(([127, 0, 0, 1], port))])
        } else {
            Err(io::Error::new(io::ErrorKind::NotFound, "no such host"))
        }
    })
}

#[test]
fn a_stream_connects_by_host_and_port_text() {
    let ev = EventLoop::new().unwrap();
    let (_l, port) = greeter(&ev);
    for target in [format!("localhost:{port}"), format!("127.0.0.1:{port}")] {
        let s = Stream::connect(&ev, target.as_str());
        let line = ev
            .run_until(s.read_line().add_timeout(T, &ev.to_loop()))
            .unwrap();
        assert_eq!(line, "hi", "{target}");
        s.close();
    }
    // A (host, port) pair and a SocketAddr, as before.
    let s = Stream::connect(&ev, ("localhost", port));
    assert_eq!(ev.run_until(s.read_line()).unwrap(), "hi");
    let s = Stream::connect(&ev, SocketAddr::from(([127, 0, 0, 1], port)));
    assert_eq!(ev.run_until(s.read_line()).unwrap(), "hi");
}

#[test]
fn a_name_that_does_not_resolve_fails_every_read_naming_it() {
    let ev = EventLoop::new().unwrap();
    let s = Stream::connect(&ev, "nonexistent.invalid:80");
    let read = s.read_line();
    let f = failure_of(&ev, s.connected());
    assert!(f.to_string().contains("nonexistent.invalid"), "{f}");
    assert!(f.downcast_ref::<io::Error>().is_some(), "{f:?}");
    let f = failure_of(&ev, read);
    assert!(f.to_string().contains("nonexistent.invalid"), "{f}");
}

#[test]
fn a_malformed_target_is_invalid_input_not_a_panic() {
    let ev = EventLoop::new().unwrap();
    for bad in ["no-port", "host:notaport", ":80", ""] {
        let s = Stream::connect(&ev, bad);
        let f = failure_of(&ev, s.connected());
        let e = f.downcast_ref::<io::Error>().expect("an io::Error");
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{bad:?}: {e}");
    }
}

#[test]
fn one_options_value_serves_tcp_streams_and_udp() {
    let ev = EventLoop::new().unwrap();
    let (_l, port) = greeter(&ev);
    let opts = ConnectOptions::default()
        .with_resolver(v4_only_table())
        .with_preference(AddressPreference::Ipv4Only)
        .with_lookup_timeout(Duration::from_secs(5))
        .with_connect_timeout(Duration::from_secs(10));

    let s = Stream::connect_with(&ev, format!("v4only.test:{port}"), &opts);
    assert_eq!(ev.run_until(s.read_line()).unwrap(), "hi");

    struct Quiet;
    impl deferloop::net::Protocol for Quiet {
        fn data_received(&mut self, _: &deferloop::net::Transport, _: &[u8]) {}
    }
    let c = ev.connect_tcp_with(("v4only.test", port), Quiet, &opts);
    let t = ev.run_until(c.connected()).unwrap();
    assert_eq!(t.peer_addr().unwrap().as_inet().unwrap().port(), port);

    struct Dgram;
    impl DatagramProtocol for Dgram {
        fn datagram_received(&mut self, _: &DatagramTransport, _: &[u8], _: SocketAddr) {}
    }
    let u = ev
        .run_until(ev.connect_udp_with(("v4only.test", 9), Dgram, &opts))
        .unwrap();
    assert_eq!(
        u.peer_addr().unwrap(),
        SocketAddr::from(([127, 0, 0, 1], 9))
    );

    // The same options' resolver fails an unknown name for each of them.
    let f = failure_of(
        &ev,
        Stream::connect_with(&ev, "other.test:1", &opts).connected(),
    );
    assert!(f.to_string().contains("other.test"), "{f}");
    let f = failure_of(&ev, ev.connect_udp_with("other.test:1", Dgram, &opts));
    assert!(f.to_string().contains("other.test"), "{f}");
}

#[test]
fn a_preference_that_leaves_no_address_fails_naming_the_host() {
    let ev = EventLoop::new().unwrap();
    let opts = ConnectOptions::default()
        .with_resolver(v4_only_table())
        .with_preference(AddressPreference::Ipv6Only);
    let f = failure_of(
        &ev,
        Stream::connect_with(&ev, "v4only.test:1", &opts).connected(),
    );
    let e = f.downcast_ref::<io::Error>().expect("an io::Error");
    assert_eq!(e.kind(), io::ErrorKind::NotFound, "{e}");
    assert!(e.to_string().contains("v4only.test"), "{e}");
}

#[test]
fn the_options_connect_timeout_bounds_a_lookup_that_never_answers() {
    let ev = EventLoop::new().unwrap();
    let hang = HostResolver::with_lookup(1, |_, _| {
        std::thread::sleep(Duration::from_secs(3));
        Err(io::Error::new(io::ErrorKind::NotFound, "too late"))
    });
    let opts = ConnectOptions::default()
        .with_resolver(hang)
        .with_connect_timeout(Duration::from_millis(50));
    let f = failure_of(
        &ev,
        Stream::connect_with(&ev, "slow.test:1", &opts).connected(),
    );
    let e = f.downcast_ref::<io::Error>().expect("an io::Error");
    assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}");
    assert!(e.to_string().contains("slow.test"), "{e}");
}
