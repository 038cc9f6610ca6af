//! Callbacks of every size and alignment (stored inline or boxed) run once and
//! drop what they captured once: when they run, are cancelled, or the loop closes.

use deferloop::{Error, EventLoop, Handle, Loop};
use std::cell::Cell;
use std::rc::Rc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[repr(align(64))]
struct OverAligned(u64);

/// Something that schedules a callback (generic, so each closure keeps its
/// own type, size and alignment all the way into the loop).
trait Schedule {
    fn schedule<F: FnOnce(&Loop) + 'static>(&mut self, f: F);
}

/// `call_soon`, keeping the handles.
struct Soon<'a>(&'a EventLoop, Vec<Handle>);
impl Schedule for Soon<'_> {
    fn schedule<F: FnOnce(&Loop) + 'static>(&mut self, f: F) {
        self.1.push(self.0.call_soon(f).unwrap());
    }
}

/// `call_later`, keeping the handles.
struct Later<'a>(&'a EventLoop, Duration, Vec<Handle>);
impl Schedule for Later<'_> {
    fn schedule<F: FnOnce(&Loop) + 'static>(&mut self, f: F) {
        self.2.push(self.0.call_later(self.1, f).unwrap());
    }
}

/// Schedules closures of five shapes: capturing one word, two words, three
/// words, eight words and an over-aligned value (the first two stored inline,
/// the rest boxed). Each adds to `ran` when it runs; each holds `token`.
/// Returns what `ran` reaches once all have run.
fn shapes(token: &Rc<()>, ran: &Rc<Cell<u64>>, s: &mut impl Schedule) -> u64 {
    let t = token.clone();
    s.schedule(move |_| drop(t));
    let (t, r) = (token.clone(), ran.clone());
    s.schedule(move |_| {
        let _t = &t;
        r.set(r.get() + 1);
    });
    let (t, r, three) = (token.clone(), ran.clone(), 10u64);
    s.schedule(move |_| {
        let _t = &t;
        r.set(r.get() + three);
    });
    let (t, r, big) = (token.clone(), ran.clone(), [100u64; 8]);
    s.schedule(move |_| {
        let _t = &t;
        r.set(r.get() + big[7]);
    });
    let (t, r, al) = (token.clone(), ran.clone(), OverAligned(1000));
    s.schedule(move |_| {
        let _t = &t;
        assert_eq!(&al as *const OverAligned as usize % 64, 0, "misaligned");
        r.set(r.get() + al.0);
    });
    1 + 10 + 100 + 1000
}

/// `call_soon` and `call_later` with each shape: each runs once, and every
/// capture is dropped by the time the turn is over.
#[test]
fn callbacks_of_every_shape_run_once_and_drop_their_captures() -> Result<(), Error> {
    let ev = EventLoop::new()?;
    let token = Rc::new(());
    let ran = Rc::new(Cell::new(0));
    let soon = shapes(&token, &ran, &mut Soon(&ev, Vec::new()));
    let later = shapes(&token, &ran, &mut Later(&ev, Duration::ZERO, Vec::new()));
    assert_eq!(Rc::strong_count(&token), 11);
    ev.run_once()?;
    assert_eq!(ran.get(), soon + later);
    assert_eq!(Rc::strong_count(&token), 1, "a capture was not dropped");
    Ok(())
}

/// Cancelled callbacks of each shape are dropped at once and never run.
#[test]
fn cancelled_callbacks_of_every_shape_drop_at_once() -> Result<(), Error> {
    let ev = EventLoop::new()?;
    let token = Rc::new(());
    let ran = Rc::new(Cell::new(0));
    let mut soon = Soon(&ev, Vec::new());
    shapes(&token, &ran, &mut soon);
    let mut later = Later(&ev, Duration::from_secs(60), Vec::new());
    shapes(&token, &ran, &mut later);
    assert_eq!(Rc::strong_count(&token), 11);
    for h in soon.1.iter().chain(&later.2) {
        assert!(h.cancel());
    }
    assert_eq!(Rc::strong_count(&token), 1);
    ev.run_once()?;
    assert_eq!(ran.get(), 0);
    Ok(())
}

/// Closing the loop drops queued callbacks of each shape without running them.
#[test]
fn close_drops_queued_callbacks_of_every_shape() -> Result<(), Error> {
    let ev = EventLoop::new()?;
    let token = Rc::new(());
    let ran = Rc::new(Cell::new(0));
    shapes(&token, &ran, &mut Soon(&ev, Vec::new()));
    shapes(
        &token,
        &ran,
        &mut Later(&ev, Duration::from_secs(60), Vec::new()),
    );
    ev.close()?;
    assert_eq!(Rc::strong_count(&token), 1);
    assert_eq!(ran.get(), 0);
    Ok(())
}

/// A panicking callback, inline or boxed, drops its captures once; the
/// turn goes on.
#[test]
fn a_panicking_callback_drops_its_captures_once() -> Result<(), Error> {
    let ev = EventLoop::new()?;
    ev.set_exception_handler(|_: &Loop, _: &deferloop::ExceptionContext<'_>| {});
    let token = Rc::new(());
    let t = token.clone();
    ev.call_soon(move |_| {
        let _t = &t;
        panic!("inline");
    })?;
    let (t, big) = (token.clone(), [0u64; 8]);
    ev.call_soon(move |_| {
        let _t = (&t, big);
        panic!("boxed");
    })?;
    let ran = Rc::new(Cell::new(false));
    let r = ran.clone();
    ev.call_soon(move |_| r.set(true))?;
    ev.run_once()?;
    assert!(ran.get());
    assert_eq!(Rc::strong_count(&token), 1);
    Ok(())
}

/// Threadsafe calls of each size run once on the loop and drop their captures
/// there; calls refused by a closed loop are dropped too.
#[test]
fn threadsafe_calls_of_every_size_run_once_and_drop_their_captures() -> Result<(), Error> {
    let ev = EventLoop::new()?;
    let remote = ev.remote();
    let token = Arc::new(());
    let ran = Arc::new(AtomicUsize::new(0));
    let (t, r) = (token.clone(), ran.clone());
    std::thread::spawn(move || {
        let (t1, r1) = (t.clone(), r.clone());
        remote
            .call_soon_threadsafe(move |_| {
                let _t = &t1;
                r1.fetch_add(1, Ordering::Relaxed);
            })
            .unwrap();
        let (t2, r2, big) = (t.clone(), r.clone(), [10usize; 8]);
        remote
            .call_soon_threadsafe(move |lp| {
                let _t = &t2;
                r2.fetch_add(big.iter().sum(), Ordering::Relaxed);
                lp.stop();
            })
            .unwrap();
    })
    .join()
    .unwrap();
    ev.run()?;
    assert_eq!(ran.load(Ordering::Relaxed), 81);
    assert_eq!(Arc::strong_count(&token), 1);

    let remote = ev.remote();
    drop(ev);
    let t = token.clone();
    let big = [0u64; 8];
    let r = remote.call_soon_threadsafe(move |_| drop((t, big)));
    assert!(matches!(r, Err(Error::Closed)));
    assert_eq!(
        Arc::strong_count(&token),
        1,
        "a refused call was not dropped"
    );
    Ok(())
}
