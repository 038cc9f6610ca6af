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

/// A reader may remove or replace itself from inside its own call; a reader
/// that panics is reported and stays installed.
#[test]
fn readers_can_remove_or_replace_themselves_and_survive_panics() -> Result<(), Error> {
    let ev = EventLoop::new()?;
    ev.set_exception_handler(|_: &deferloop::Loop, _: &deferloop::ExceptionContext<'_>| {});
    let (a, mut b) = UnixStream::pair().unwrap();
    b.write_all(b"unread").unwrap();
    let fd = a.as_raw_fd();
    let (first, second) = (Rc::new(Cell::new(0)), Rc::new(Cell::new(0)));
    let (f, s) = (first.clone(), second.clone());
    ev.add_reader(fd, move |lp| {
        f.set(f.get() + 1);
        let s = s.clone();
        lp.add_reader(fd, move |lp| {
            s.set(s.get() + 1);
            if s.get() == 2 {
                lp.remove_reader(fd);
            }
        })
        .unwrap();
    })?;
    for _ in 0..3 {
        ev.run_once()?;
    }
    assert_eq!((first.get(), second.get()), (1, 2));
    // Nothing is registered any more: a turn with a timer does not call either.
    ev.call_later(std::time::Duration::from_millis(1), |_| {})?;
    ev.run_once()?;
    assert_eq!((first.get(), second.get()), (1, 2));
    assert_eq!(ev.io_source_count(), 0);

    let panics = Rc::new(Cell::new(0));
    let p = panics.clone();
    ev.add_reader(fd, move |_| {
        p.set(p.get() + 1);
        panic!("reader panic");
    })?;
    ev.run_once()?;
    ev.run_once()?;
    assert_eq!(panics.get(), 2, "the panicking reader stays installed");
    assert!(ev.remove_reader(fd));
    Ok(())
}

/// A transport's or listener's fd cannot be taken over by `add_reader` or
/// `add_writer` (asyncio's `_ensure_fd_no_transport`), nor its reader removed.
#[test]
fn a_transport_owned_fd_cannot_be_hijacked() -> Result<(), Error> {
    use deferloop::net::{Protocol, Transport};
    struct Quiet;
    impl Protocol for Quiet {
        fn data_received(&mut self, _: &Transport, _: &[u8]) {}
    }
    let ev = EventLoop::new()?;
    let l = ev.listen_tcp("127.0.0.1:0".parse().unwrap(), || Quiet)?;
    let lfd = l.raw_fd().unwrap();
    assert!(matches!(ev.add_reader(lfd, |_| {}), Err(Error::Owned)));
    let d = ev
        .connect_tcp(l.local_addr().as_inet().unwrap(), Quiet)
        .connected();
    let t = ev.run_until(d).unwrap();
    let fd = t.raw_fd().unwrap();
    assert!(matches!(ev.add_reader(fd, |_| {}), Err(Error::Owned)));
    assert!(matches!(ev.add_writer(fd, |_| {}), Err(Error::Owned)));
    assert!(!ev.remove_reader(fd));
    assert!(!ev.remove_writer(lfd));
    // Once the transport is closed, its fd number is free for others again.
    t.abort();
    assert!(t.raw_fd().is_none());
    Ok(())
}
