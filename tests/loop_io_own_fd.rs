//! Raw readers and writers that change their own fd from inside their
//! callback: the other direction is left intact, `remove_*` returns `true`
//! exactly when it removed something (the running callback included), and a
//! reader still wanted goes on being called while its fd is readable.

use deferloop::{Error, EventLoop, Loop};
use std::cell::{Cell, RefCell};
use std::io::Write;
use std::os::unix::io::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::rc::Rc;

/// A socket with unread data (always readable) that is also writable.
fn readable_and_writable() -> (UnixStream, UnixStream, RawFd) {
    let (a, mut b) = UnixStream::pair().unwrap();
    a.set_nonblocking(true).unwrap();
    b.write_all(b"never read").unwrap();
    let fd = a.as_raw_fd();
    (a, b, fd)
}

#[derive(Default)]
struct Counts {
    reader: Cell<u32>,
    writer: Cell<u32>,
    /// What the in-callback call returned, the first time.
    returned: RefCell<Option<bool>>,
    /// What an in-callback `add_*` returned (checked after the turns).
    added: RefCell<Option<Result<(), Error>>>,
}

fn count_reader(c: &Rc<Counts>) -> impl FnMut(&Loop) + 'static {
    let c = c.clone();
    move |_| c.reader.set(c.reader.get() + 1)
}

fn count_writer(c: &Rc<Counts>) -> impl FnMut(&Loop) + 'static {
    let c = c.clone();
    move |_| c.writer.set(c.writer.get() + 1)
}

/// Runs `n` turns; a timer bounds each, so a turn with nothing ready ends.
fn turns(ev: &EventLoop, n: u32) -> Result<(), Error> {
    for _ in 0..n {
        let h = ev.call_later(std::time::Duration::from_millis(20), |_| {})?;
        ev.run_once()?;
        h.cancel();
    }
    Ok(())
}

/// Which call a callback makes on its own fd, once, on its first run.
#[derive(Clone, Copy, Debug)]
enum Op {
    RemoveReader,
    RemoveWriter,
    AddReader,
    AddWriter,
}

/// Installs a reader (or writer) that makes `op` on its own fd on its first
/// call, with the other direction installed or not; runs three turns.
fn run_case(from_reader: bool, other_installed: bool, op: Op) -> Result<Rc<Counts>, Error> {
    let ev = EventLoop::new()?;
    let (_a, _b, fd) = readable_and_writable();
    let c = Rc::new(Counts::default());
    let c2 = c.clone();
    let mut first = true;
    let own = move |lp: &Loop| {
        if from_reader {
            c2.reader.set(c2.reader.get() + 1);
        } else {
            c2.writer.set(c2.writer.get() + 1);
        }
        if std::mem::take(&mut first) {
            let r = match op {
                Op::RemoveReader => Some(lp.remove_reader(fd)),
                Op::RemoveWriter => Some(lp.remove_writer(fd)),
                // Recorded, not unwrapped, here: the loop contains its panics.
                Op::AddReader => {
                    let added = lp.add_reader(fd, count_reader(&c2)).map(|_| ());
                    *c2.added.borrow_mut() = Some(added);
                    None
                }
                Op::AddWriter => {
                    let added = lp.add_writer(fd, count_writer(&c2)).map(|_| ());
                    *c2.added.borrow_mut() = Some(added);
                    None
                }
            };
            *c2.returned.borrow_mut() = r;
        }
    };
    if from_reader {
        ev.add_reader(fd, own)?;
        if other_installed {
            ev.add_writer(fd, count_writer(&c))?;
        }
    } else {
        ev.add_writer(fd, own)?;
        if other_installed {
            ev.add_reader(fd, count_reader(&c))?;
        }
    }
    turns(&ev, 3)?;
    if matches!(op, Op::AddReader | Op::AddWriter) {
        let added = c.added.borrow_mut().take();
        added.expect("the callback ran").unwrap();
    }
    Ok(c)
}

#[test]
fn a_reader_removing_the_writer_keeps_reading() -> Result<(), Error> {
    let c = run_case(true, true, Op::RemoveWriter)?;
    assert_eq!(*c.returned.borrow(), Some(true));
    assert_eq!(
        c.reader.get(),
        3,
        "the reader is not dropped with the writer"
    );
    assert!(
        c.writer.get() <= 1,
        "the writer ran at most in the first turn"
    );
    let c = run_case(true, false, Op::RemoveWriter)?;
    assert_eq!(*c.returned.borrow(), Some(false), "there was no writer");
    assert_eq!(c.reader.get(), 3);
    Ok(())
}

#[test]
fn a_reader_adding_a_writer_keeps_reading_and_the_writer_runs() -> Result<(), Error> {
    let c = run_case(true, false, Op::AddWriter)?;
    assert_eq!(c.reader.get(), 3, "the reader is called again");
    assert_eq!(c.writer.get(), 2, "the writer runs from the next turn");
    Ok(())
}

#[test]
fn a_reader_removing_itself_returns_true_and_leaves_the_writer() -> Result<(), Error> {
    let c = run_case(true, true, Op::RemoveReader)?;
    assert_eq!(
        *c.returned.borrow(),
        Some(true),
        "the running reader counts"
    );
    assert_eq!(c.reader.get(), 1);
    assert_eq!(c.writer.get(), 3, "the writer is intact");
    let c = run_case(true, false, Op::RemoveReader)?;
    assert_eq!(*c.returned.borrow(), Some(true));
    assert_eq!(c.reader.get(), 1);
    Ok(())
}

#[test]
fn a_reader_replacing_itself_hands_over_to_the_new_one() -> Result<(), Error> {
    let c = run_case(true, true, Op::AddReader)?;
    assert_eq!(
        c.reader.get(),
        1 + 2,
        "old once, then the new one each turn"
    );
    assert_eq!(c.writer.get(), 3);
    Ok(())
}

#[test]
fn a_writer_removing_the_reader_keeps_writing() -> Result<(), Error> {
    let c = run_case(false, true, Op::RemoveReader)?;
    assert_eq!(*c.returned.borrow(), Some(true));
    assert_eq!(c.writer.get(), 3);
    assert!(c.reader.get() <= 1);
    let c = run_case(false, false, Op::RemoveReader)?;
    assert_eq!(*c.returned.borrow(), Some(false), "there was no reader");
    assert_eq!(c.writer.get(), 3);
    Ok(())
}

#[test]
fn a_writer_adding_a_reader_keeps_writing_and_the_reader_runs() -> Result<(), Error> {
    let c = run_case(false, false, Op::AddReader)?;
    assert_eq!(c.writer.get(), 3);
    assert_eq!(c.reader.get(), 2, "the reader runs from the next turn");
    Ok(())
}

#[test]
fn a_writer_removing_itself_returns_true_and_leaves_the_reader() -> Result<(), Error> {
    let c = run_case(false, true, Op::RemoveWriter)?;
    assert_eq!(
        *c.returned.borrow(),
        Some(true),
        "the running writer counts"
    );
    assert_eq!(c.writer.get(), 1);
    assert_eq!(c.reader.get(), 3, "the reader is intact");
    Ok(())
}

#[test]
fn a_writer_replacing_itself_hands_over_to_the_new_one() -> Result<(), Error> {
    let c = run_case(false, true, Op::AddWriter)?;
    assert_eq!(c.writer.get(), 1 + 2);
    assert_eq!(c.reader.get(), 3);
    Ok(())
}

/// Removing both from inside a callback leaves no source behind.
#[test]
fn removing_both_from_inside_frees_the_source() -> Result<(), Error> {
    let ev = EventLoop::new()?;
    let (_a, _b, fd) = readable_and_writable();
    ev.add_writer(fd, |_| {})?;
    // Recorded, not asserted, in the reader: the loop contains its panics.
    let said = Rc::new(RefCell::new(Vec::new()));
    let s = said.clone();
    ev.add_reader(fd, move |lp| {
        let mut s = s.borrow_mut();
        s.push(lp.remove_writer(fd));
        s.push(lp.remove_reader(fd));
        s.push(lp.remove_reader(fd)); // already removed
    })?;
    turns(&ev, 2)?;
    assert_eq!(*said.borrow(), [true, true, false]);
    assert_eq!(ev.io_source_count(), 0);
    Ok(())
}
