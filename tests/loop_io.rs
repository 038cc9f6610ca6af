//! Raw readers and writers: level-triggered on an edge-triggered selector.

use deferloop::{Error, EventLoop};
use std::cell::Cell;
use std::io::Write;
use std::os::unix::io::AsRawFd;
use std::os::unix::net::UnixStream;
use std::rc::Rc;

/// A reader that leaves data unread is called again on every turn.
#[test]
fn a_reader_is_called_every_turn_while_data_is_unread() -> Result<(), Error> {
    let ev = EventLoop::new()?;
    let (a, mut b) = UnixStream::pair().unwrap();
    a.set_nonblocking(true).unwrap();
    b.write_all(b"unread").unwrap();
    let calls = Rc::new(Cell::new(0));
    let c = calls.clone();
    ev.add_reader(a.as_raw_fd(), move |_| c.set(c.get() + 1))?;
    for _ in 0..5 {
        ev.run_once()?;
    }
    assert_eq!(calls.get(), 5);
    assert!(ev.remove_reader(a.as_raw_fd()));
    assert!(!ev.remove_reader(a.as_raw_fd()));
    assert_eq!(ev.io_source_count(), 0);
    Ok(())
}

/// A new reader replaces the old one; a writer runs while the fd is writable.
#[test]
fn one_reader_per_fd_and_writers_fire_while_writable() -> Result<(), Error> {
    let ev = EventLoop::new()?;
    let (a, mut b) = UnixStream::pair().unwrap();
    a.set_nonblocking(true).unwrap();
    b.write_all(b"x").unwrap();
    let (old, new, wrote) = (
        Rc::new(Cell::new(0)),
        Rc::new(Cell::new(0)),
        Rc::new(Cell::new(0)),
    );
    let o = old.clone();
    ev.add_reader(a.as_raw_fd(), move |_| o.set(o.get() + 1))?;
    let n = new.clone();
    ev.add_reader(a.as_raw_fd(), move |_| n.set(n.get() + 1))?;
    let w = wrote.clone();
    ev.add_writer(a.as_raw_fd(), move |lp| {
        w.set(w.get() + 1);
        if w.get() == 2 {
            lp.remove_writer(3_000_000); // unknown fd: harmless
        }
    })?;
    assert_eq!(ev.io_source_count(), 1);
    ev.run_once()?;
    ev.run_once()?;
    assert_eq!((old.get(), new.get(), wrote.get()), (0, 2, 2));
    assert!(ev.remove_writer(a.as_raw_fd()));
    ev.run_once()?;
    assert_eq!((new.get(), wrote.get()), (3, 2));
    ev.close()?;
    assert!(matches!(
        ev.add_reader(a.as_raw_fd(), |_| {}),
        Err(Error::Closed)
    ));
    Ok(())
}
