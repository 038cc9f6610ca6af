//! Structured diagnostics: `Loop::stats()` counts connections, bytes,
//! timers, the ready queue, callbacks run and slow ones, without a wall
//! clock (the threshold is zero, the transport in memory); the log records
//! about a connection and a Deferred carry key-value fields (`log`'s `kv`).

use deferloop::net::Stream;
use deferloop::{Deferred, EventLoop, Failure};
use std::time::Duration;

mod util;

#[test]
fn stats_count_timers_ready_callbacks_and_slow_ones() {
    let ev = EventLoop::with_manual_clock(deferloop::ManualClock::new()).unwrap();
    let s0 = ev.stats();
    ev.call_soon(|_| {}).unwrap();
    ev.call_soon(|_| {}).unwrap();
    ev.call_later(Duration::from_secs(5), |_| {}).unwrap();
    let s1 = ev.stats();
    assert_eq!((s1.ready, s1.timers), (s0.ready + 2, s0.timers + 1));
    ev.run_once_timeout(Duration::ZERO).unwrap();
    let s2 = ev.stats();
    assert_eq!(s2.callbacks_run, s1.callbacks_run + 2);
    assert_eq!(s2.ready, s0.ready);
    assert_eq!(
        s2.slow_callbacks, s1.slow_callbacks,
        "not timed: not counted"
    );
    assert!(s2.turns > s1.turns);

    // Timed (debug mode) with a zero threshold: every callback is slow.
    ev.set_debug(true);
    ev.set_slow_callback_duration(Duration::ZERO);
    ev.call_soon(|_| {}).unwrap();
    ev.run_once_timeout(Duration::ZERO).unwrap();
    let s3 = ev.stats();
    assert_eq!(s3.slow_callbacks, s2.slow_callbacks + 1);
    assert_eq!(s3.callbacks_run, s2.callbacks_run + 1);
}

#[test]
fn stats_count_connections_and_bytes_both_ways() {
    let ev = EventLoop::new().unwrap();
    let s0 = ev.stats();
    let (s, peer) = Stream::open_memory(&ev).unwrap();
    let s1 = ev.stats();
    assert_eq!(s1.connections_open, s0.connections_open + 1);
    assert_eq!(s1.connections_opened, s0.connections_opened + 1);

    peer.send(b"hello");
    assert_eq!(ev.run_until(s.read_exactly(5)).unwrap(), b"hello");
    s.write(b"abc");
    ev.run_once_timeout(Duration::ZERO).unwrap();
    let s2 = ev.stats();
    assert_eq!(s2.bytes_received, s1.bytes_received + 5);
    assert_eq!(s2.bytes_sent, s1.bytes_sent + 3);

    s.abort();
    drop(s);
    for _ in 0..3 {
        ev.run_once_timeout(Duration::ZERO).unwrap();
    }
    let s3 = ev.stats();
    assert_eq!(s3.connections_open, s0.connections_open);
    assert_eq!(s3.connections_opened, s1.connections_opened);
    drop(peer);
}

#[test]
fn a_write_to_a_closed_connection_is_logged_with_its_peer_and_size() {
    let logs = util::logs();
    let ev = EventLoop::new().unwrap();
    let (s, _peer) = Stream::open_memory(&ev).unwrap();
    s.close();
    s.write(b"0123456789");
    let mine = logs.mine();
    let r = mine
        .iter()
        .find(|r| r.message.contains("closing or closed transport"))
        .expect("the ignored write is logged");
    assert_eq!(r.field("bytes"), Some("10"), "{:?}", r.kv);
    assert!(r.field("peer").is_some(), "{:?}", r.kv);
    assert!(
        r.field("conn_at")
            .is_some_and(|at| at.contains("loop_stats.rs")),
        "{:?}",
        r.kv
    );
}

#[test]
fn an_unhandled_failure_is_logged_with_the_deferreds_origin() {
    let logs = util::logs();
    let (d, r) = Deferred::<()>::new();
    r.errback(Failure::msg("kv-needle")).unwrap();
    drop(d);
    drop(r);
    let mine = logs.mine();
    let rec = mine
        .iter()
        .find(|r| r.message.contains("Unhandled error") && r.message.contains("kv-needle"))
        .expect("logged");
    assert!(
        rec.field("deferred_created_at")
            .is_some_and(|at| at.contains("loop_stats.rs")),
        "{:?}",
        rec.kv
    );
    assert_eq!(rec.field("failure"), Some("kv-needle"), "{:?}", rec.kv);
    assert!(rec.field("failure_origin").is_some(), "{:?}", rec.kv);
}

#[allow(dead_code)]
#[path = "../examples/stats_exporter.rs"]
mod exporter;

#[test]
fn the_exporter_example_renders_every_counter_as_prometheus_text() {
    let ev = EventLoop::new().unwrap();
    ev.call_soon(|_| {}).unwrap();
    ev.run_once_timeout(Duration::ZERO).unwrap();
    let stats = ev.stats();
    let text = exporter::prometheus(&stats);
    let line = format!("deferloop_callbacks_run_total {}\n", stats.callbacks_run);
    assert!(text.contains(&line), "{text}");
    for name in [
        "connections_open",
        "bytes_received_total",
        "bytes_sent_total",
        "timers",
    ] {
        assert!(
            text.contains(&format!("# TYPE deferloop_{name} ")),
            "{name}: {text}"
        );
    }
    let samples = text.lines().filter(|l| !l.starts_with('#')).count();
    assert_eq!(samples, 10, "{text}");
}
