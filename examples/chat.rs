//! A line-based chat server: the first line a client sends is its nickname,
//! every line after it goes to everyone else as `<nick> line`; `/nick NAME`
//! renames, `/quit` leaves. A client that does not read is dropped once its
//! backlog passes [`MAX_BACKLOG`] instead of being buffered for ever.
//! Prints the address it bound as its first line.
//!
//! Run: `cargo run --example chat -- 127.0.0.1:7001`, then `nc 127.0.0.1 7001`
//! from two terminals.
//!
//! The room is shared by every connection's protocol as `Rc<RefCell<Room>>`.
//! Broadcasting writes to other transports while the room is borrowed; that is
//! safe because a transport never calls back into a protocol from `write`
//! (the loop delivers `pause_writing`/`connection_lost` later), so no borrow
//! is ever taken twice.

use deferloop::net::framing::{FrameProtocol, Lines};
use deferloop::net::{Listener, Transport};
use deferloop::{EventLoop, Failure};
use std::cell::RefCell;
use std::collections::HashMap;
use std::io::Write;
use std::net::SocketAddr;
use std::rc::Rc;

/// Bytes a client may have waiting (unread by it) before it is dropped.
pub const MAX_BACKLOG: usize = 256 * 1024;
/// The longest line accepted.
pub const MAX_LINE: usize = 1024;

/// Who is here: each transport with its nickname (`None` until it gave one).
#[derive(Default)]
pub struct Room {
    members: HashMap<Transport, Option<String>>,
}

impl Room {
    fn taken(&self, nick: &str) -> bool {
        self.members.values().any(|n| n.as_deref() == Some(nick))
    }

    /// Sends `line` to every named member but `from`; drops the slow ones.
    fn broadcast(&mut self, from: &Transport, line: &str) {
        let mut slow = Vec::new();
        for (t, nick) in &self.members {
            if t == from || nick.is_none() {
                continue;
            }
            if t.write_buffer_size() > MAX_BACKLOG {
                slow.push(t.clone());
            } else {
                t.write_vectored(&[line.as_bytes(), b"\n"]);
            }
        }
        for t in slow {
            t.abort_with(Failure::msg("too slow: backlog over the limit"));
            self.members.remove(&t);
        }
    }
}

/// One client's protocol.
pub struct Client {
    room: Rc<RefCell<Room>>,
}

impl FrameProtocol for Client {
    fn connection_made(&mut self, t: &Transport) {
        self.room.borrow_mut().members.insert(t.clone(), None);
        t.write(b"Welcome! Your nickname?\n");
    }

    fn frame_received(&mut self, t: &Transport, line: &[u8]) {
        let line = String::from_utf8_lossy(line);
        let line = line.trim_end_matches('\r');
        if line == "/quit" {
            t.close();
            return;
        }
        let mut room = self.room.borrow_mut();
        let current = room.members.get(t).cloned().flatten();
        if let Some(new) = line.strip_prefix("/nick ") {
            rename(&mut room, t, current, new.trim());
            return;
        }
        match current {
            None => rename(&mut room, t, None, line),
            Some(nick) => room.broadcast(t, &format!("<{nick}> {line}")),
        }
    }

    fn frame_error(&mut self, t: &Transport, _: &deferloop::net::framing::FrameError) {
        t.write(b"line too long, bye\n");
    }

    fn connection_lost(&mut self, t: &Transport, _: Option<Failure>) {
        let mut room = self.room.borrow_mut();
        if let Some(Some(nick)) = room.members.remove(t) {
            room.broadcast(t, &format!("* {nick} left"));
        }
    }
}

fn rename(room: &mut Room, t: &Transport, old: Option<String>, new: &str) {
    if new.is_empty() || new.contains(char::is_whitespace) {
        t.write(b"A nickname is one word. Your nickname?\n");
    } else if room.taken(new) {
        t.write(b"That nickname is taken. Another?\n");
    } else {
        room.members.insert(t.clone(), Some(new.to_owned()));
        let news = match old {
            Some(old) => format!("* {old} is now {new}"),
            None => format!("* {new} joined"),
        };
        t.write(format!("Hello, {new}!\n").as_bytes());
        room.broadcast(t, &news);
    }
}

/// Listens on `addr`; every connection joins one room.
pub fn start(ev: &EventLoop, addr: SocketAddr) -> Result<Listener, deferloop::Error> {
    let room = Rc::new(RefCell::new(Room::default()));
    ev.listen_tcp(addr, move || {
        Lines::with_delimiter(Client { room: room.clone() }, b"\n", MAX_LINE)
            .expect("a non-empty delimiter")
    })
}

#[allow(dead_code)]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The library reports through `log` (fd exhaustion, contained panics,
    // unhandled failures, ignored writes): show warnings unless RUST_LOG says otherwise.
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:0".into());
    let ev = EventLoop::new()?;
    let listener = start(&ev, addr.parse()?)?;
    println!("{}", listener.local_addr());
    std::io::stdout().flush()?;
    ev.run()?;
    Ok(())
}
