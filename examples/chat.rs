//! A line-based chat server: the first line a client sends is its nickname,
//! every line after it goes to everyone else as `<nick> line`; `/nick NAME`
//! renames, `/quit` leaves. A client that does not read is dropped once its
//! backlog passes [`MAX_BACKLOG`] instead of being buffered for ever.
//! Control characters (C0, DEL, C1) and the ANSI escape sequences they start
//! are stripped from every line, so no client can drive another's terminal.
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
use std::process::ExitCode;
use std::rc::Rc;

/// Bytes a client may have waiting (unread by it) before it is dropped.
pub const MAX_BACKLOG: usize = 256 * 1024;
/// The longest line accepted.
pub const MAX_LINE: usize = 1024;

/// One client: its nickname (`None` until it gave one), and whether its next
/// line is a nickname (it has none yet, or the one it asked for was taken).
#[derive(Default)]
struct Member {
    nick: Option<String>,
    asked: bool,
}

/// Who is here.
#[derive(Default)]
pub struct Room {
    members: HashMap<Transport, Member>,
}

impl Room {
    fn taken(&self, nick: &str) -> bool {
        self.members
            .values()
            .any(|m| m.nick.as_deref() == Some(nick))
    }

    /// Sends `line` to every named member but `from`; drops the slow ones.
    fn broadcast(&mut self, from: &Transport, line: &str) {
        let mut slow = Vec::new();
        for (t, m) in &self.members {
            // A member that is leaving (/quit) would log an ignored write.
            if t == from || m.nick.is_none() || t.is_closing() {
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
        let asking = Member {
            nick: None,
            asked: true,
        };
        self.room.borrow_mut().members.insert(t.clone(), asking);
        t.write(b"Welcome! Your nickname?\n");
    }

    fn frame_received(&mut self, t: &Transport, line: &[u8]) {
        let line = printable(&String::from_utf8_lossy(line));
        let line = line.trim();
        if line == "/quit" {
            t.close();
            return;
        }
        let mut room = self.room.borrow_mut();
        let Some(me) = room.members.get(t) else {
            return; // dropped as too slow
        };
        if let Some(new) = line.strip_prefix("/nick ") {
            rename(&mut room, t, new.trim());
        } else if me.asked {
            rename(&mut room, t, line);
        } else if !line.is_empty() {
            let said = format!("<{}> {line}", me.nick.as_deref().unwrap_or_default());
            room.broadcast(t, &said);
        }
    }

    fn frame_error(&mut self, t: &Transport, _: &deferloop::net::framing::FrameError) {
        t.write(b"line too long, bye\n");
    }

    fn connection_lost(&mut self, t: &Transport, _: Option<Failure>) {
        let mut room = self.room.borrow_mut();
        if let Some(Member {
            nick: Some(nick), ..
        }) = room.members.remove(t)
        {
            room.broadcast(t, &format!("* {nick} left"));
        }
    }
}

/// `s` without control characters (C0 including tab, DEL, C1) and without the
/// ANSI escape sequences that ESC starts: CSI (`ESC [` … a final byte in
/// `@`..=`~`), OSC (`ESC ]` … BEL or `ESC \\`), and two-character ones.
pub fn printable(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '\x1b' => match chars.next() {
                Some('[') => {
                    chars.by_ref().find(|c| ('@'..='~').contains(c));
                }
                Some(']') => {
                    let mut prev = ' ';
                    chars.by_ref().find(|&c| {
                        let end = c == '\x07' || (prev == '\x1b' && c == '\\');
                        prev = c;
                        end
                    });
                }
                _ => {}
            },
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

/// Gives `t` the nickname `new`, or asks again (and takes its next line).
fn rename(room: &mut Room, t: &Transport, new: &str) {
    let ask_again = if new.is_empty() || new.contains(char::is_whitespace) {
        Some(&b"A nickname is one word. Your nickname?\n"[..])
    } else if room.taken(new) {
        Some(&b"That nickname is taken. Another?\n"[..])
    } else {
        None
    };
    let me = room.members.get_mut(t).expect("a member");
    if let Some(question) = ask_again {
        me.asked = true;
        t.write(question);
        return;
    }
    me.asked = false;
    let news = match me.nick.replace(new.to_owned()) {
        Some(old) => format!("* {old} is now {new}"),
        None => format!("* {new} joined"),
    };
    t.write(format!("Hello, {new}!\n").as_bytes());
    room.broadcast(t, &news);
}

/// Listens on `addr`; every connection joins one room.
pub fn start(ev: &EventLoop, addr: SocketAddr) -> Result<Listener, deferloop::Error> {
    let room = Rc::new(RefCell::new(Room::default()));
    ev.listen_tcp(addr, move || {
        Lines::with_delimiter(Client { room: room.clone() }, b"\n", MAX_LINE)
            .expect("a non-empty delimiter")
    })
}

/// `[ADDR]`: serves until killed.
pub fn run(args: impl IntoIterator<Item = String>) -> Result<(), Box<dyn std::error::Error>> {
    let mut args = args.into_iter();
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:0".into());
    if let Some(extra) = args.next() {
        return Err(format!("unexpected argument {extra:?}; usage: chat [ADDR]").into());
    }
    let addr: SocketAddr = addr.parse().map_err(|e| format!("address {addr:?}: {e}"))?;
    let ev = EventLoop::new()?;
    let listener = start(&ev, addr).map_err(|e| format!("listen on {addr}: {e}"))?;
    println!("{}", listener.local_addr());
    std::io::stdout().flush()?;
    ev.run()?;
    Ok(())
}

#[allow(dead_code)]
fn main() -> ExitCode {
    // The library reports through `log` (fd exhaustion, contained panics,
    // unhandled failures, ignored writes): show warnings unless RUST_LOG says otherwise.
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    match run(std::env::args().skip(1)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("chat: {e}");
            ExitCode::FAILURE
        }
    }
}
