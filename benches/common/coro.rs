//! Coroutines on deferloop's own loop — for the benches only, never `src/`.
//!
//! A minimal executor in asyncio's manner: a task is a boxed `Future`; every
//! wake-up schedules one step of it with `call_soon`, so it runs in a later
//! step 6, as asyncio's `Task.__step` does (a wake-up never polls inline).
//! Beside it, [`Stream`]: async reads and writes built on deferloop's
//! transport and a protocol that buffers what arrives (asyncio's
//! `StreamReaderProtocol`). Comparing these with plain callbacks on the same
//! loop measures what the coroutine *style* costs, apart from the runtime.
//!
//! Tasks live in a thread-local slab; a waker is the task's slab index and
//! nothing else (no reference count), so waking a finished task whose index was
//! reused is only a spurious poll, which futures tolerate.

use deferloop::net::{Protocol, Transport};
use deferloop::Loop;
use slab::Slab;
use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, RawWaker, RawWakerVTable, Waker};

type Task = Pin<Box<dyn Future<Output = ()>>>;

struct Slot {
    /// `None` while the task is being polled.
    fut: Option<Task>,
    /// A step is in the ready queue already.
    scheduled: bool,
}

thread_local! {
    static TASKS: RefCell<Slab<Slot>> = const { RefCell::new(Slab::new()) };
}

/// Starts `fut` as a task: its first step runs in the loop's next step 6.
pub fn spawn(lp: &Loop, fut: impl Future<Output = ()> + 'static) {
    let id = TASKS.with(|t| {
        t.borrow_mut().insert(Slot {
            fut: Some(Box::pin(fut)),
            scheduled: false,
        })
    });
    schedule(lp, id);
}

/// Tasks not finished yet (for checks).
pub fn live_tasks() -> usize {
    TASKS.with(|t| t.borrow().len())
}

/// Queues one step of task `id` with `call_soon`, unless one is queued.
fn schedule(lp: &Loop, id: usize) {
    let go = TASKS.with(|t| match t.borrow_mut().get_mut(id) {
        Some(s) if !s.scheduled => {
            s.scheduled = true;
            true
        }
        _ => false,
    });
    if go {
        lp.call_soon(move |lp| step(lp, id))
            .expect("coro: the loop is closed");
    }
}

/// One step: poll the task once; drop it if it finished.
fn step(_lp: &Loop, id: usize) {
    let fut = TASKS.with(|t| {
        let mut t = t.borrow_mut();
        let s = t.get_mut(id)?;
        s.scheduled = false;
        s.fut.take()
    });
    let Some(mut fut) = fut else { return };
    let waker = waker(id);
    if fut
        .as_mut()
        .poll(&mut Context::from_waker(&waker))
        .is_ready()
    {
        TASKS.with(|t| t.borrow_mut().remove(id));
        drop(fut); // outside the borrow: a finished task may drop other tasks' wakers
        return;
    }
    TASKS.with(|t| {
        if let Some(s) = t.borrow_mut().get_mut(id) {
            s.fut = Some(fut);
        }
    });
}

fn wake(id: usize) {
    let lp = Loop::current().expect("coro: a task was woken outside its loop's run()");
    schedule(&lp, id);
}

const VTABLE: RawWakerVTable = RawWakerVTable::new(
    |data| RawWaker::new(data, &VTABLE),
    |data| wake(data as usize),
    |data| wake(data as usize),
    |_| {},
);

fn waker(id: usize) -> Waker {
    // SAFETY: the data pointer is the task's index, an integer that is never
    // dereferenced; clone copies it, drop does nothing, and wake looks the task
    // up through the waking thread's own loop and slab, so every function is
    // safe to call from any thread, any number of times (the RawWaker contract).
    unsafe { Waker::from_raw(RawWaker::new(id as *const (), &VTABLE)) }
}

/// Gives the other ready callbacks and tasks a turn: one wake-up, one step
/// (asyncio's `sleep(0)`).
pub fn yield_now() -> impl Future<Output = ()> {
    let mut yielded = false;
    std::future::poll_fn(move |cx| {
        if yielded {
            return Poll::Ready(());
        }
        yielded = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    })
}

/// Above this many buffered bytes the protocol pauses reading until the task
/// takes them (asyncio's StreamReader pauses at twice its 64 KiB limit).
pub const READ_LIMIT: usize = 128 * 1024;

#[derive(Default)]
struct Conn {
    /// What arrived and no read took yet.
    buf: Vec<u8>,
    eof: bool,
    reading_paused: bool,
    writing_paused: bool,
    reader: Option<Waker>,
    writer: Option<Waker>,
}

/// The async side of a connection, given to the task that serves it.
pub struct Stream {
    conn: Rc<RefCell<Conn>>,
    transport: Transport,
}

impl Stream {
    /// Waits for data, then swaps it into `out` (cleared first): whole chunks
    /// as they arrived, no copy beyond the protocol's one. 0 means end of file.
    pub fn read_into<'a>(&'a self, out: &'a mut Vec<u8>) -> impl Future<Output = usize> + 'a {
        std::future::poll_fn(move |cx| {
            let mut c = self.conn.borrow_mut();
            if !c.buf.is_empty() {
                out.clear();
                std::mem::swap(&mut c.buf, out);
                if std::mem::take(&mut c.reading_paused) {
                    self.transport.resume_reading();
                }
                return Poll::Ready(out.len());
            }
            if c.eof {
                return Poll::Ready(0);
            }
            c.reader = Some(cx.waker().clone());
            Poll::Pending
        })
    }

    /// Sends `data` (written at once when the socket takes it, as the
    /// transport does); follow with [`drain`](Self::drain).
    pub fn write(&self, data: &[u8]) {
        self.transport.write(data);
    }

    /// Waits while the transport's write buffer is above its high-water mark.
    pub fn drain(&self) -> impl Future<Output = ()> + '_ {
        std::future::poll_fn(move |cx| {
            let mut c = self.conn.borrow_mut();
            if !c.writing_paused || c.eof {
                return Poll::Ready(());
            }
            c.writer = Some(cx.waker().clone());
            Poll::Pending
        })
    }

    /// Closes the connection once what is buffered is written.
    pub fn close(&self) {
        self.transport.close();
    }
}

/// The protocol under a [`Stream`]: buffers data and wakes the task.
/// `serve` is called once, when the connection is made, and its future is
/// spawned as the connection's task.
pub struct StreamProtocol<F> {
    conn: Rc<RefCell<Conn>>,
    serve: Option<F>,
}

impl<F, Fut> StreamProtocol<F>
where
    F: FnOnce(Stream) -> Fut + 'static,
    Fut: Future<Output = ()> + 'static,
{
    pub fn new(serve: F) -> Self {
        StreamProtocol {
            conn: Rc::default(),
            serve: Some(serve),
        }
    }
}

fn wake_slot(w: &mut Option<Waker>) {
    if let Some(w) = w.take() {
        w.wake();
    }
}

impl<F, Fut> Protocol for StreamProtocol<F>
where
    F: FnOnce(Stream) -> Fut + 'static,
    Fut: Future<Output = ()> + 'static,
{
    fn connection_made(&mut self, t: &Transport) {
        if let Some(serve) = self.serve.take() {
            let s = Stream {
                conn: self.conn.clone(),
                transport: t.clone(),
            };
            spawn(&t.event_loop().expect("the connection is open"), serve(s));
        }
    }

    fn data_received(&mut self, t: &Transport, data: &[u8]) {
        let mut c = self.conn.borrow_mut();
        c.buf.extend_from_slice(data);
        if c.buf.len() > READ_LIMIT && !c.reading_paused {
            c.reading_paused = true;
            t.pause_reading();
        }
        wake_slot(&mut c.reader);
    }

    fn eof_received(&mut self, _t: &Transport) -> bool {
        let mut c = self.conn.borrow_mut();
        c.eof = true;
        wake_slot(&mut c.reader);
        false
    }

    fn connection_lost(&mut self, _t: &Transport, _reason: Option<deferloop::Failure>) {
        let mut c = self.conn.borrow_mut();
        c.eof = true;
        wake_slot(&mut c.reader);
        wake_slot(&mut c.writer);
    }

    fn pause_writing(&mut self, _t: &Transport) {
        self.conn.borrow_mut().writing_paused = true;
    }

    fn resume_writing(&mut self, _t: &Transport) {
        let mut c = self.conn.borrow_mut();
        c.writing_paused = false;
        wake_slot(&mut c.writer);
    }
}
