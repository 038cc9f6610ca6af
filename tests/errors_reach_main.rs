//! Errors leave the library whole: `run_until(d)?` compiles into
//! `anyhow::Result`, `Box<dyn Error + Send + Sync>` and `Box<dyn Error>`, and
//! the library's own error types (and an `io::Error`) are still found in the
//! result, by chain walk or, for a bare `Failure` boxed alone, directly.

use deferloop::deferred::{defer_later, fail, Abandoned, Cancelled, Deferred, LoopClosed};
use deferloop::net::Stream;
use deferloop::{Error, EventLoop, Failure, ManualClock, TimedOut};
use std::error::Error as StdError;
use std::fmt;
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

const SEC: Duration = Duration::from_secs(1);

/// The first error of `e`'s chain (itself included) that is an `E`.
fn find<'a, E: StdError + 'static>(e: &'a (dyn StdError + 'static)) -> Option<&'a E> {
    let mut next = Some(e);
    while let Some(e) = next {
        if let Some(found) = e.downcast_ref::<E>() {
            return Some(found);
        }
        next = e.source();
    }
    None
}

/// A Deferred that times out when the manual clock moves, and the line
/// where its timeout was added (the failure's origin).
fn timing_out(ev: &EventLoop, clock: &ManualClock) -> (Deferred<u8>, u32) {
    let (d, r) = Deferred::<u8>::new();
    std::mem::forget(r); // never fired, never abandoned
    let line = line!() + 1;
    let d = d.add_timeout(5 * SEC, ev);
    clock.advance(5 * SEC);
    (d, line)
}

fn manual() -> (EventLoop, ManualClock) {
    let clock = ManualClock::new();
    (EventLoop::with_manual_clock(clock.clone()).unwrap(), clock)
}

fn anyhow_run<T: 'static>(ev: &EventLoop, d: Deferred<T>) -> anyhow::Result<T> {
    let v = ev.run_until(d)?;
    Ok(v)
}

fn send_sync_run<T: 'static>(
    ev: &EventLoop,
    d: Deferred<T>,
) -> Result<T, Box<dyn StdError + Send + Sync>> {
    Ok(ev.run_until(d)?)
}

fn boxed_run<T: 'static>(ev: &EventLoop, d: Deferred<T>) -> Result<T, Box<dyn StdError>> {
    Ok(ev.run_until(d)?)
}

#[test]
fn a_timeout_reaches_anyhow_with_its_chain_and_origin() {
    let (ev, clock) = manual();
    let (d, line) = timing_out(&ev, &clock);
    let e = anyhow_run(&ev, d).unwrap_err();
    let t = e.chain().find_map(|e| e.downcast_ref::<TimedOut>());
    assert_eq!(t, Some(&TimedOut { after: 5 * SEC }));
    assert!(e.root_cause().downcast_ref::<TimedOut>().is_some());
    let origin = format!("{}:{line}:", file!());
    let alt = format!("{e:#}");
    assert!(
        alt.contains("Deferred failed") && alt.contains(&origin),
        "{alt}"
    );
    assert!(alt.contains("timed out after 5s"), "{alt}");
    let debug = format!("{e:?}");
    assert!(debug.contains(&origin), "{debug}");
    assert!(debug.contains("timed out after 5s"), "{debug}");
    // What `run_until` returned is inside, with its helpers.
    let inner = e.downcast_ref::<Error>().expect("a deferloop::Error");
    assert!(inner.check::<TimedOut>());
    assert_eq!(inner.failure().unwrap().origin().line(), line);
}

#[test]
fn cancelled_abandoned_and_loop_closed_reach_anyhow() {
    let ev = EventLoop::new().unwrap();
    let (d, _r) = Deferred::<u8>::new();
    d.cancel();
    let e = anyhow_run(&ev, d).unwrap_err();
    assert!(e.chain().any(|e| e.is::<Cancelled>()), "{e:#}");

    let (d, r) = Deferred::<u8>::new();
    drop(r);
    let e = anyhow_run(&ev, d).unwrap_err();
    let a = e.chain().find_map(|e| e.downcast_ref::<Abandoned>());
    assert!(a.is_some(), "{e:#}");

    let closed = EventLoop::new().unwrap();
    let lp = closed.to_loop();
    closed.close().unwrap();
    let d = defer_later(&lp, SEC, || Ok(1u8));
    let e = anyhow_run(&ev, d).unwrap_err();
    assert!(e.chain().any(|e| e.is::<LoopClosed>()), "{e:#}");

    // The loop's own refusal is its own variant, not a failure.
    let e = anyhow_run(&closed, Deferred::<u8>::new().0).unwrap_err();
    assert!(
        matches!(e.downcast_ref::<Error>(), Some(Error::Closed)),
        "{e:?}"
    );
}

/// A port on 127.0.0.1 with nothing listening (it was, a moment ago).
fn refused_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

#[test]
fn a_refused_connect_reaches_anyhow_as_an_io_error() {
    let ev = EventLoop::new().unwrap();
    let addr = refused_port();
    let s = Stream::connect(&ev, addr);
    let e = anyhow_run(&ev, s.connected().add_timeout(30 * SEC, &ev)).unwrap_err();
    let io = e.chain().find_map(|e| e.downcast_ref::<io::Error>());
    let io = io.unwrap_or_else(|| panic!("an io::Error in {e:#}"));
    assert_eq!(io.kind(), io::ErrorKind::ConnectionRefused, "{io}");
    assert!(format!("{e:#}").contains(&addr.to_string()), "{e:#}");
}

#[test]
fn boxes_find_the_error_by_chain_walk() {
    let (ev, clock) = manual();
    let (d, line) = timing_out(&ev, &clock);
    let e = send_sync_run(&ev, d).unwrap_err();
    let e = std::thread::spawn(move || e).join().unwrap(); // it crosses threads
    assert!(find::<TimedOut>(&*e).is_some(), "{e:?}");
    assert!(format!("{e:?}").contains(&format!("{}:{line}:", file!())));

    let (d, _) = timing_out(&ev, &clock);
    let e = boxed_run(&ev, d).unwrap_err();
    assert!(find::<TimedOut>(&*e).is_some(), "{e:?}");

    let addr = refused_port();
    let s = Stream::connect(&ev, addr);
    let e = boxed_run(&ev, s.connected().add_timeout(30 * SEC, &ev)).unwrap_err();
    let io = find::<io::Error>(&*e).unwrap_or_else(|| panic!("an io::Error in {e:?}"));
    assert_eq!(io.kind(), io::ErrorKind::ConnectionRefused);
}

#[test]
fn a_unique_bare_failure_boxes_as_its_own_error() {
    let (ev, clock) = manual();
    let (d, _) = timing_out(&ev, &clock);
    let f = ev.run_until(d).unwrap_err().into_failure().unwrap();
    let b: Box<dyn StdError + Send + Sync> = f.into();
    assert_eq!(
        b.downcast_ref::<TimedOut>(),
        Some(&TimedOut { after: 5 * SEC })
    );

    let (d, _) = timing_out(&ev, &clock);
    let f = ev.run_until(d).unwrap_err().into_failure().unwrap();
    let b: Box<dyn StdError> = f.into();
    assert!(b.downcast_ref::<TimedOut>().is_some());

    // `?` from a bare `Result<_, Failure>`, as a `main` would.
    fn bare(r: Result<u8, Failure>) -> Result<u8, Box<dyn StdError + Send + Sync>> {
        Ok(r?)
    }
    let b = bare(Err(Failure::new(Cancelled))).unwrap_err();
    assert!(b.downcast_ref::<Cancelled>().is_some());
}

#[test]
fn a_shared_failure_boxes_as_error_failed_and_keeps_the_chain() {
    let f = Failure::new(TimedOut { after: SEC });
    let keep = f.clone();
    let b: Box<dyn StdError + Send + Sync> = f.into();
    assert!(
        b.downcast_ref::<TimedOut>().is_none(),
        "shared: not moved out"
    );
    let e = b.downcast_ref::<Error>().expect("Error::Failed");
    assert!(Failure::ptr_eq(e.failure().unwrap(), &keep));
    assert!(find::<TimedOut>(&*b).is_some());
}

#[test]
fn a_bare_failure_reaches_anyhow_through_into_error() {
    fn step() -> Result<u8, Failure> {
        Err(Failure::new(Cancelled))
    }
    fn f() -> anyhow::Result<u8> {
        let v = step().map_err(Failure::into_error)?;
        Ok(v)
    }
    let e = f().unwrap_err();
    assert!(e.root_cause().is::<Cancelled>());
}

#[derive(Debug)]
struct Query {
    source: io::Error,
}

impl fmt::Display for Query {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("query failed")
    }
}

impl StdError for Query {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        Some(&self.source)
    }
}

#[test]
fn a_user_error_keeps_its_source_chain() {
    let ev = EventLoop::new().unwrap();
    let source = io::Error::new(io::ErrorKind::BrokenPipe, "pipe broke");
    let e = anyhow_run(&ev, fail::<u8>(Query { source })).unwrap_err();
    let chain: Vec<String> = e.chain().map(|e| e.to_string()).collect();
    assert_eq!(chain.len(), 3, "{chain:?}");
    assert!(
        chain[0].starts_with("Deferred failed (raised at "),
        "{chain:?}"
    );
    assert_eq!(&chain[1..], ["query failed", "pipe broke"]);
    let alt = format!("{e:#}");
    assert!(alt.ends_with(": query failed: pipe broke"), "{alt}");
    assert!(e.chain().any(|e| e.is::<Query>()));
    let q = e.chain().find_map(|e| e.downcast_ref::<Query>()).unwrap();
    assert_eq!(q.source.kind(), io::ErrorKind::BrokenPipe);
}

#[test]
fn a_local_error_is_kept_as_text_with_its_chain() {
    use std::rc::Rc;
    #[derive(Debug)]
    struct NotSend(Rc<io::Error>);
    impl fmt::Display for NotSend {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("not send")
        }
    }
    impl StdError for NotSend {
        fn source(&self) -> Option<&(dyn StdError + 'static)> {
            Some(&*self.0)
        }
    }
    let f = Failure::local(NotSend(Rc::new(io::Error::other("under"))));
    assert_eq!(f.to_string(), "not send: under");
    let l = f.downcast_ref::<deferloop::LocalError>().unwrap();
    assert!(l.type_name().ends_with("NotSend"), "{}", l.type_name());
    let e = f.into_error();
    let mut chain = vec![e.to_string()];
    let mut next = e.source();
    while let Some(s) = next {
        chain.push(s.to_string());
        next = s.source();
    }
    assert_eq!(&chain[1..], ["not send", "under"]);
}

#[test]
fn call_blocking_returns_the_failure_itself() {
    let ev = EventLoop::new().unwrap();
    let remote = ev.remote();
    let (tx, rx) = std::sync::mpsc::channel();
    ev.call_soon(move |_| {
        std::thread::spawn(move || {
            let r = remote.call_blocking(Duration::from_secs(30), |_| fail::<u8>(Cancelled));
            tx.send(r).unwrap();
            remote.stop().unwrap();
        });
    })
    .unwrap();
    ev.run().unwrap();
    let e = rx.recv().unwrap().unwrap_err();
    assert!(e.check::<Cancelled>(), "{e:?}");
    let f = e.failure().expect("Error::Failed");
    assert!(f.origin().file().ends_with("errors_reach_main.rs"), "{f:?}");
}

#[test]
fn error_failed_displays_its_origin_and_with_alternate_the_chain() {
    let f = Failure::new(TimedOut { after: SEC });
    let line = line!() - 1;
    let e = f.into_error();
    let plain = e.to_string();
    assert_eq!(
        plain,
        format!("Deferred failed (raised at {}:{line}:13)", file!())
    );
    assert_eq!(
        format!("{e:#}"),
        format!("{plain}: Deferred timed out after 1s")
    );
    assert!(format!("{e:?}").contains("Deferred timed out after 1s"));
}
