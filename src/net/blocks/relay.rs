//! Copies and relays: one [`Stream`]'s bytes written into another, with flow
//! control both ways and half-closes passed on. Owns [`copy`], [`relay`] and
//! the producer that pauses the source; the source's `Tap` is its state's
//! (`stream_state.rs`). Tests: tests/net_relay_*.rs.

use crate::net::blocks::stream::Stream;
use crate::net::blocks::stream_state::{update_reading, StreamCell, Tap};
use crate::net::{Producer, Transport};
use crate::{Deferred, Failure, Resolver};
use std::cell::RefCell;
use std::io;
use std::rc::{Rc, Weak};

/// The producer a copy registers with its destination: pauses and resumes
/// the source's reading; fails the copy if the destination goes.
struct Hold {
    source: Weak<StreamCell>,
    transport: Transport,
}

impl Hold {
    fn hold(&self, on: bool) {
        if let Some(shared) = self.source.upgrade() {
            shared.borrow_mut().held = on;
            update_reading(&shared, &self.transport);
        }
    }
}

impl Producer for Hold {
    fn pause_producing(&mut self) {
        self.hold(true);
    }

    fn resume_producing(&mut self) {
        self.hold(false);
    }

    fn stop_producing(&mut self, reason: Option<Failure>) {
        self.hold(false);
        let Some(shared) = self.source.upgrade() else {
            return;
        };
        let tap = shared.borrow_mut().tap.take();
        if let Some(tap) = tap {
            let _ = tap.done.errback(reason.unwrap_or_else(|| {
                Failure::new(io::Error::new(
                    io::ErrorKind::BrokenPipe,
                    "the destination closed",
                ))
            }));
        }
    }
}

/// Writes everything `from` receives into `to` until `from`'s end of file,
/// which is passed on as a half-close (`to.write_eof()`): Twisted's
/// `registerProducer` with one connection as the other's producer; tokio's
/// `io::copy`, with the end of file passed on. While
/// `to`'s write buffer is above its high-water mark, `from` is not read.
///
/// The Deferred fires with the number of bytes passed on, or fails if `from`
/// is lost first (with its reason) or `to` goes first (with its reason, or a
/// `BrokenPipe` `io::Error`). Neither connection is closed: see [`relay`].
/// What `from` had buffered is passed on first; reads on `from` wait until
/// the copy is over.
///
/// # Examples
/// An echo server is a stream copied into itself:
/// ```
/// use deferloop::net::{copy, Stream};
/// use deferloop::EventLoop;
///
/// let ev = EventLoop::new()?;
/// let (s, peer) = Stream::open_memory(&ev)?;
/// let echoed = copy(&s, &s);
/// peer.send(b"hello");
/// peer.send_eof();
/// assert_eq!(ev.run_until(echoed).unwrap(), 5);
/// assert_eq!(peer.take_written(), b"hello");
/// assert!(peer.got_eof());
/// # Ok::<(), deferloop::Error>(())
/// ```
pub fn copy(from: &Stream, to: &Stream) -> Deferred<u64> {
    let (d, done) = Deferred::new();
    // `from` is paused for `to`'s sake, not for its own write buffer.
    from.set_read_while_write_paused(true);
    let (buffered, eof, lost) = {
        let mut st = from.shared.borrow_mut();
        let n = st.buffered_len();
        (st.take(n), st.at_eof(), st.lost.clone())
    };
    let mut tap = Tap {
        to: to.transport.clone(),
        to_shared: Rc::downgrade(&to.shared),
        bytes: 0,
        done,
    };
    if !buffered.is_empty() {
        tap.pass(&buffered);
    }
    match (lost, eof) {
        (Some(reason), false) => tap.source_lost(reason),
        (_, true) => tap.source_ended(),
        (None, false) => {
            // A copy it replaces is dropped with the stream unborrowed: its
            // Resolver's callbacks may use the stream.
            let old = from.shared.borrow_mut().tap.replace(tap);
            drop(old);
            to.register_producer(Hold {
                source: Rc::downgrade(&from.shared),
                transport: from.transport.clone(),
            });
            from.update_reading();
        }
    }
    d
}

/// Relays two streams into each other until both directions are done, then
/// closes both: tokio's `copy_bidirectional`, Twisted's `portforward`. Each
/// side's end of file is passed on as a half-close; each side is read only
/// while the other takes what it is sent. Fires with the bytes relayed
/// `(a to b, b to a)`. If either side fails (a reset, a failed connect), the
/// Deferred fails with that reason and both sides are closed — a side still
/// connecting is abandoned, a side that is up is flushed first (within its
/// linger time).
///
/// # Examples
/// A TCP proxy:
/// ```no_run
/// use deferloop::net::{relay, Stream};
/// use deferloop::EventLoop;
///
/// let ev = EventLoop::new()?;
/// let target = "backend.internal:7000"; // or an address
/// let lp = ev.to_loop();
/// Stream::listen_tcp(&ev, "127.0.0.1:7002".parse()?, move |client| {
///     relay(&client, &Stream::connect(&lp, target))
///         .add_errback(|_| Ok((0, 0))) // a failed connect or a reset ends it
///         .detach();
/// })?;
/// ev.run()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn relay(a: &Stream, b: &Stream) -> Deferred<(u64, u64)> {
    let (d, done) = Deferred::new();
    let state = Rc::new(RefCell::new(Relay {
        counts: [None, None],
        done: Some(done),
        sides: [a.transport.clone(), b.transport.clone()],
    }));
    for (i, copied) in [copy(a, b), copy(b, a)].into_iter().enumerate() {
        let state = state.clone();
        let _ = copied.add_both(move |r: Result<u64, Failure>| {
            Relay::finished(&state, i, r);
            Ok::<(), Failure>(())
        });
    }
    d
}

struct Relay {
    counts: [Option<u64>; 2],
    done: Option<Resolver<(u64, u64)>>,
    sides: [Transport; 2],
}

impl Relay {
    fn finished(state: &RefCell<Relay>, i: usize, r: Result<u64, Failure>) {
        let mut st = state.borrow_mut();
        let outcome = match r {
            Ok(n) => {
                st.counts[i] = Some(n);
                match st.counts {
                    [Some(ab), Some(ba)] => Ok((ab, ba)),
                    _ => return,
                }
            }
            Err(f) => Err(f),
        };
        let Some(done) = st.done.take() else { return };
        let sides = st.sides.clone();
        drop(st);
        for t in &sides {
            if t.is_connecting() {
                t.abort();
            } else {
                t.close();
            }
        }
        let _ = done.resolve(outcome);
    }
}
