//! Unix stream sockets: a round trip over a path, and the path's life.

mod util;

use deferloop::net::SockAddr;
use deferloop::{Error, EventLoop};
use std::path::PathBuf;
use std::time::Duration;
use util::net::{assert_lifecycle, lost_count, Rec};
use util::run_until;

fn temp_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("deferloop-{}-{name}.sock", std::process::id()))
}

#[test]
fn a_round_trip_over_a_unix_socket() {
    let path = temp_path("echo");
    let ev = EventLoop::new().unwrap();
    let l = ev.listen_unix(&path, || Rec::echo().0).unwrap();
    assert_eq!(l.local_addr(), &SockAddr::Unix(Some(path.clone())));
    let (rec, client) = Rec::new();
    let t = ev
        .run_until(ev.connect_unix(&path, rec).connected())
        .unwrap();
    assert_eq!(t.peer_addr().unwrap(), SockAddr::Unix(Some(path.clone())));
    assert!(
        t.set_nodelay(true).is_err(),
        "no TCP options on a Unix socket"
    );
    t.write(b"over a path");
    run_until(&ev, Duration::from_secs(10), || {
        client.borrow().bytes == b"over a path"
    });
    t.close();
    run_until(&ev, Duration::from_secs(10), || lost_count(&client) == 1);
    assert_lifecycle(&client);
    l.stop_listening().result().unwrap().unwrap();
    assert!(
        !path.exists(),
        "the path is removed when the listener stops"
    );
}

#[test]
fn listening_on_a_taken_path_is_an_error() {
    let path = temp_path("taken");
    let ev = EventLoop::new().unwrap();
    let _l = ev.listen_unix(&path, || Rec::new().0).unwrap();
    match ev.listen_unix(&path, || Rec::new().0) {
        Err(Error::Io(e)) => assert_eq!(e.kind(), std::io::ErrorKind::AddrInUse),
        other => panic!("{other:?}"),
    }
    drop(ev);
    assert!(!path.exists(), "closing the loop removes the path too");
}

#[test]
fn connecting_to_a_missing_path_fails_with_not_found() {
    let ev = EventLoop::new().unwrap();
    let f = ev
        .run_until(
            ev.connect_unix(temp_path("missing"), Rec::new().0)
                .connected(),
        )
        .unwrap_err();
    let e = f.downcast_ref::<std::io::Error>().unwrap();
    assert_eq!(e.kind(), std::io::ErrorKind::NotFound, "{f}");
}

/// A listener whose file was removed by hand, and a new listener bound at
/// the same path since: stopping the first leaves the second's file, and
/// the second still accepts.
#[test]
fn stopping_a_listener_leaves_a_newer_listener_s_file_alone() {
    let path = temp_path("rebound");
    let ev = EventLoop::new().unwrap();
    let a = ev.listen_unix(&path, || Rec::echo().0).unwrap();
    std::fs::remove_file(&path).unwrap();
    let b = ev.listen_unix(&path, || Rec::echo().0).unwrap();
    a.stop_listening().result().unwrap().unwrap();
    drop(a);
    assert!(path.exists(), "the newer listener's file was removed");
    let (rec, client) = Rec::new();
    let t = ev
        .run_until(ev.connect_unix(&path, rec).connected())
        .unwrap();
    t.write(b"still here");
    run_until(&ev, Duration::from_secs(10), || {
        client.borrow().bytes == b"still here"
    });
    t.close();
    run_until(&ev, Duration::from_secs(10), || lost_count(&client) == 1);
    b.stop_listening().result().unwrap().unwrap();
    assert!(!path.exists(), "the newer listener removes its own file");
}
