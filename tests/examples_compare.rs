//! The side-by-side twins of examples/compare/ behave the same: each pair is
//! compiled in here and run against the same peers.

// Each fan-out twin embeds the shared fake backends.
#![allow(clippy::duplicate_mod)]

mod util;

#[path = "../examples/compare/echo_deferloop.rs"]
#[allow(dead_code)]
mod echo_deferloop;
#[path = "../examples/compare/echo_tokio.rs"]
#[allow(dead_code)]
mod echo_tokio;
#[path = "../examples/compare/fan_out_deferloop.rs"]
#[allow(dead_code)]
mod fan_out_deferloop;
#[path = "../examples/compare/fan_out_tokio.rs"]
#[allow(dead_code)]
mod fan_out_tokio;
#[path = "../examples/compare/proxy_deferloop.rs"]
#[allow(dead_code)]
mod proxy_deferloop;
#[path = "../examples/compare/proxy_tokio.rs"]
#[allow(dead_code)]
mod proxy_tokio;

#[path = "../examples/compare/backends.rs"]
#[allow(dead_code)]
mod backends;

use deferloop::deferred::TimedOut;
use deferloop::EventLoop;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::Duration;

/// Sends `n` bytes through `addr`, half-closes, and returns what came back.
fn round_trip(addr: SocketAddr, n: usize) -> bool {
    let data: Vec<u8> = (0..n).map(|i| (i % 251) as u8).collect();
    let mut s = TcpStream::connect(addr).unwrap();
    let mut r = s.try_clone().unwrap();
    let reader = std::thread::spawn(move || {
        let mut back = Vec::new();
        r.read_to_end(&mut back).unwrap();
        back
    });
    s.write_all(&data).unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    reader.join().unwrap() == data
}

/// Runs a tokio twin's server on its own thread; returns its address.
fn tokio_server<F, Fut>(serve: F) -> SocketAddr
where
    F: FnOnce(tokio::net::TcpListener) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = std::io::Result<()>> + 'static,
{
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        tokio::task::LocalSet::new().block_on(&rt, async move {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(l.local_addr().unwrap()).unwrap();
            let _ = serve(l).await;
        });
    });
    rx.recv().unwrap()
}

/// Runs a deferloop twin's server on its own thread; returns its address.
fn deferloop_server(
    start: impl FnOnce(&EventLoop) -> deferloop::net::Listener + Send + 'static,
) -> SocketAddr {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let ev = EventLoop::new().unwrap();
        let l = start(&ev);
        tx.send(l.local_addr().as_inet().unwrap()).unwrap();
        ev.run().unwrap();
    });
    rx.recv().unwrap()
}

fn any() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

#[test]
fn both_echo_twins_echo_everything() {
    let d = deferloop_server(|ev| echo_deferloop::start(ev, any()).unwrap());
    let t = tokio_server(echo_tokio::serve);
    assert!(round_trip(d, 4 << 20));
    assert!(round_trip(t, 4 << 20));
}

#[test]
fn both_proxy_twins_relay_both_ways_with_half_close() {
    let echo = deferloop_server(|ev| echo_deferloop::start(ev, any()).unwrap());
    let d = deferloop_server(move |ev| proxy_deferloop::start(ev, any(), echo).unwrap());
    let t = tokio_server(move |l| proxy_tokio::serve(l, echo));
    assert!(round_trip(d, 4 << 20));
    assert!(round_trip(t, 4 << 20));
}

#[test]
fn both_fan_out_twins_agree_and_the_callbacks_close_their_losers() {
    let [(first, t1), (second, t2)] = backends::scenarios();

    let ev = EventLoop::new().unwrap();
    let win = ev
        .run_until(fan_out_deferloop::fan_out(&ev, &first, t1))
        .unwrap();
    assert_eq!(win, (1, "blue".to_owned()));
    // The slow loser's connection is aborted, not left to time out.
    util::run_until(&ev, Duration::from_secs(1), || ev.io_source_count() == 0);
    let f = ev
        .run_until(fan_out_deferloop::fan_out(&ev, &second, t2))
        .unwrap_err();
    assert!(f.check::<TimedOut>(), "{f}");
    util::run_until(&ev, Duration::from_secs(1), || ev.io_source_count() == 0);

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let win = rt.block_on(fan_out_tokio::fan_out(&first, t1)).unwrap();
    assert_eq!(win, (1, "blue".to_owned()));
    let e = rt
        .block_on(fan_out_tokio::fan_out(&second, t2))
        .unwrap_err();
    assert!(e.starts_with("timed out"), "{e}");
}
