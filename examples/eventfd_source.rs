//! A user source on a real descriptor: an eventfd that another thread
//! writes to, read by an `EventSource` on the loop. The loop stops after
//! the thread's last count has been read.
//!
//! ```text
//! cargo run --example eventfd_source
//! ```

use deferloop::source::{EventSource, PostAction, Readiness};
use deferloop::{EventLoop, Loop};
use std::cell::Cell;
use std::io;
use std::os::unix::io::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::rc::Rc;

/// An eventfd: a kernel counter, readable while it is not zero.
struct EventFd {
    fd: OwnedFd,
    total: Rc<Cell<u64>>,
    want: u64,
}

impl EventFd {
    fn new(want: u64) -> io::Result<EventFd> {
        // SAFETY: eventfd takes no pointers; the result is checked before use.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by eventfd and is owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(EventFd {
            fd,
            total: Rc::new(Cell::new(0)),
            want,
        })
    }
}

/// Adds `n` to the counter (what the other thread does).
fn add(fd: i32, n: u64) -> io::Result<()> {
    let buf = n.to_ne_bytes();
    // SAFETY: `buf` is 8 readable bytes, as eventfd's write requires.
    let r = unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) };
    if r == 8 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

impl EventSource for EventFd {
    type Ret = io::Result<PostAction>;

    fn fd(&self) -> Option<BorrowedFd<'_>> {
        Some(self.fd.as_fd())
    }

    fn process(&mut self, lp: &Loop, r: Readiness) -> io::Result<PostAction> {
        if !r.readable {
            return Ok(PostAction::Continue);
        }
        let mut buf = [0u8; 8];
        // SAFETY: `buf` is 8 writable bytes, as eventfd's read requires.
        let n = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), 8) };
        if n != 8 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock => Ok(PostAction::Continue),
                _ => Err(e), // reported by the loop; the source is removed
            };
        }
        let got = u64::from_ne_bytes(buf);
        self.total.set(self.total.get() + got);
        println!("read {got} (total {})", self.total.get());
        if self.total.get() >= self.want {
            lp.stop();
            return Ok(PostAction::Remove);
        }
        Ok(PostAction::Continue)
    }

    fn name(&self) -> &'static str {
        "eventfd"
    }
}

/// Runs the example; returns the total the source read.
pub fn run() -> Result<u64, Box<dyn std::error::Error>> {
    let ev = EventLoop::new()?;
    let src = EventFd::new(1 + 2 + 3 + 4 + 5)?;
    let raw = src.fd.as_raw_fd();
    let total = src.total.clone();
    let handle = ev.add_source(src)?;
    // The descriptor outlives the thread: the source is removed only after
    // the last count, and the thread is joined before `handle` drops.
    let writer = std::thread::spawn(move || {
        for n in 1..=5 {
            add(raw, n).expect("eventfd write");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    });
    ev.run()?;
    writer.join().expect("writer thread");
    // Removed by its own `PostAction::Remove`: nothing to give back.
    assert!(handle.remove().is_none());
    Ok(total.get())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("total {}", run()?);
    Ok(())
}
