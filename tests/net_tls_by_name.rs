//! TLS by name: `connect_tls_to("localhost:PORT")` looks the name up, races
//! its addresses, and sends and verifies that same name; `Stream` reads over
//! it. A certificate for another name, and a name that does not resolve,
//! fail the connect with a clear error. Only loopback is contacted.
#![cfg(feature = "tls")]

#[path = "util/tls.rs"]
mod tls;
mod util;

use deferloop::net::{AddressPreference, ConnectOptions, Listener, Protocol, Stream, Transport};
use deferloop::{EventLoop, Failure};
use std::time::Duration;

const T: Duration = Duration::from_secs(20);

struct Hello;
impl Protocol for Hello {
    fn connection_made(&mut self, t: &Transport) {
        t.write(b"hello over tls\n");
    }
    fn data_received(&mut self, _: &Transport, _: &[u8]) {}
}

/// A TLS server on 127.0.0.1 with `pki`'s certificate, greeting each client.
fn server(ev: &EventLoop, pki: &tls::Pki) -> (Listener, u16) {
    let l = ev
        .listen_tls("127.0.0.1:0".parse().unwrap(), &tls::server(pki), || Hello)
        .unwrap();
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

#[test]
fn connect_tls_to_a_name_verifies_that_name_and_reads_as_a_stream() {
    let pki = tls::pki(&["localhost"], false);
    let ev = EventLoop::new().unwrap();
    let (_l, port) = server(&ev, &pki);
    let config = tls::client(&pki);

    struct Quiet;
    impl Protocol for Quiet {
        fn data_received(&mut self, _: &Transport, _: &[u8]) {}
    }
    let c = ev.connect_tls_to(format!("localhost:{port}"), &config, Quiet);
    let t = ev
        .run_until(c.connected().add_timeout(T, &ev.to_loop()))
        .unwrap();
    assert!(t.is_tls_handshake_done());
    assert!(t.peer_addr().unwrap().as_inet().unwrap().ip().is_loopback());
    t.close();

    let s = Stream::connect_tls(&ev, ("localhost", port), &config);
    let line = ev
        .run_until(s.read_line().add_timeout(T, &ev.to_loop()))
        .unwrap();
    assert_eq!(line, "hello over tls");
    assert!(s.is_tls_handshake_done());

    let opts = ConnectOptions::default().with_preference(AddressPreference::Ipv4Only);
    let s = Stream::connect_tls_with(&ev, format!("localhost:{port}"), &config, &opts);
    assert_eq!(ev.run_until(s.read_line()).unwrap(), "hello over tls");
}

#[test]
fn a_certificate_for_another_name_fails_the_connect_by_name() {
    // The certificate is valid for 127.0.0.1 but not for "localhost": the
    // name connected to is the name checked.
    let pki = tls::pki(&["127.0.0.1", "other.example"], false);
    let ev = EventLoop::new().unwrap();
    let (_l, port) = server(&ev, &pki);
    let config = tls::client(&pki);
    let s = Stream::connect_tls(&ev, format!("localhost:{port}"), &config);
    let f = failure_of(&ev, s.connected());
    assert!(f.to_string().contains("not valid for name"), "{f}");
    // By address, the same certificate is accepted.
    let s = Stream::connect_tls(&ev, format!("127.0.0.1:{port}"), &config);
    assert_eq!(ev.run_until(s.read_line()).unwrap(), "hello over tls");
}

#[test]
fn a_name_that_does_not_resolve_fails_the_tls_connect_naming_it() {
    let pki = tls::localhost();
    let ev = EventLoop::new().unwrap();
    let s = Stream::connect_tls(&ev, "nonexistent.invalid:443", &tls::client(&pki));
    let f = failure_of(&ev, s.connected());
    assert!(f.to_string().contains("nonexistent.invalid"), "{f}");
    let bad = Stream::connect_tls(&ev, "no-port", &tls::client(&pki));
    let f = failure_of(&ev, bad.connected());
    let e = f.downcast_ref::<std::io::Error>().expect("an io::Error");
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{e}");
}
