//! A TLS failure reaches `main` through `run_until(d)?` into
//! `anyhow::Result`: the connect's `io::Error` (kind `InvalidData`) is found
//! by chain walk, and `{:#}` prints why the handshake failed.
#![cfg(feature = "tls")]

#[path = "util/tls.rs"]
mod tls;
mod util;

use deferloop::net::Transport;
use deferloop::EventLoop;
use std::io;
use std::time::Duration;
use util::net::Rec;

fn connect(ev: &EventLoop, pki: &tls::Pki, name: &str) -> anyhow::Result<Transport> {
    let l = ev.listen_tls("127.0.0.1:0".parse()?, &tls::server(pki), || Rec::echo().0)?;
    let to = l.local_addr().as_inet().expect("an inet address");
    let c = ev.connect_tls(to, name, &tls::client(pki), Rec::new().0);
    let t = ev.run_until(c.connected().add_timeout(Duration::from_secs(20), ev))?;
    Ok(t)
}

#[test]
fn a_wrong_host_name_reaches_anyhow_as_an_io_error_with_the_reason() {
    let ev = EventLoop::new().unwrap();
    let pki = tls::localhost();
    let e = connect(&ev, &pki, "not-localhost.example").unwrap_err();
    let io = e.chain().find_map(|e| e.downcast_ref::<io::Error>());
    let io = io.unwrap_or_else(|| panic!("an io::Error in {e:#}"));
    assert_eq!(io.kind(), io::ErrorKind::InvalidData, "{e:#}");
    let alt = format!("{e:#}");
    assert!(alt.starts_with("Deferred failed (raised at "), "{alt}");
    assert!(alt.contains("not valid for name"), "{alt}");
    // And the same connect with the right name succeeds.
    assert!(connect(&ev, &pki, "localhost").is_ok());
}
