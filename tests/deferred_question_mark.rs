//! A `Failure` leaves through `?` into `Box<dyn Error>` and
//! `Box<dyn Error + Send + Sync>`, as `anyhow::Error` does: from `run_until`
//! as `Error::Failed` (its source the failure's error), bare as the error.

use deferloop::deferred::{fail, Deferred};
use deferloop::{EventLoop, Failure};
use std::error::Error;
use std::io;

fn main_like(d: Deferred<u8>) -> Result<u8, Box<dyn Error>> {
    let ev = EventLoop::new()?;
    let n = ev.run_until(d)?;
    Ok(n)
}

fn threaded(d: Deferred<u8>) -> Result<u8, Box<dyn Error + Send + Sync>> {
    let ev = EventLoop::new()?;
    Ok(ev.run_until(d)?)
}

#[derive(Debug)]
struct Outer(io::Error);
impl std::fmt::Display for Outer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("outer")
    }
}
impl Error for Outer {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(&self.0)
    }
}

/// `?` into `Box<dyn Error>` keeps the message and the cause chain.
#[test]
fn failure_converts_into_box_dyn_error_with_its_causes() {
    let e = main_like(fail(Outer(io::Error::other("inner")))).unwrap_err();
    assert!(e.to_string().starts_with("Deferred failed"), "{e}");
    let outer = e.source().unwrap();
    assert_eq!(outer.to_string(), "outer");
    assert_eq!(outer.source().unwrap().to_string(), "inner");
    assert!(format!("{e:?}").contains(file!()), "Debug shows the origin");
    assert!(e.to_string().contains(file!()), "Display names the origin");
}

/// `?` into `Box<dyn Error + Send + Sync>` keeps the failure itself, with the
/// same chain; the result can be sent to another thread.
#[test]
fn failure_converts_into_a_send_sync_box_whole() {
    let e = threaded(fail(Outer(io::Error::other("inner")))).unwrap_err();
    let e = std::thread::spawn(move || e).join().unwrap();
    let r = e.downcast_ref::<deferloop::Error>().unwrap();
    let f = r.failure().unwrap();
    assert_eq!(f.to_string(), "outer: inner");
    assert!(f.check::<Outer>());
    assert_eq!(e.source().unwrap().to_string(), "outer");
    assert!(f.origin().file().ends_with("deferred_question_mark.rs"));
    assert!(!f.is_panic());
    let f: Failure = Failure::msg("x");
    assert_eq!(f.into_error().source().unwrap().to_string(), "x");
}

/// A bare `Failure` goes into a box as its own error when no clone is alive.
#[test]
fn a_bare_failure_boxes_as_its_error() {
    fn bare(r: Result<u8, Failure>) -> Result<u8, Box<dyn Error>> {
        Ok(r?)
    }
    let e = bare(Err(Failure::new(Outer(io::Error::other("inner"))))).unwrap_err();
    assert_eq!(e.to_string(), "outer");
    assert_eq!(e.source().unwrap().to_string(), "inner");
    assert!(e.downcast_ref::<Outer>().is_some());
}
