//! A fake transactional line server for the transaction twins (shared by
//! both, so neither style gets an easier server): plain threads, one line
//! per command, one line per answer.
//!
//! - `AUTH TOKEN` answers `OK`, or `ERR bad token`.
//! - `BEGIN` answers `OK` once authenticated, else `ERR not authenticated`.
//! - `SET KEY VALUE` answers `OK` inside a transaction, else `ERR no transaction`.
//! - `COMMIT` answers `CONFLICT` the first `conflicts` times (the
//!   transaction is dropped), then `OK`.
//! - The command named in `hang_on` is never answered, nor anything after it.
//!
//! It records every line it reads, and the connections it has open.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};

/// How the server behaves.
#[derive(Clone, Copy, Debug)]
pub struct Script {
    /// The token `AUTH` accepts.
    pub token: &'static str,
    /// How many `COMMIT`s answer `CONFLICT` before one succeeds.
    pub conflicts: usize,
    /// A command (`AUTH`, `BEGIN`, `SET` or `COMMIT`) never answered.
    pub hang_on: Option<&'static str>,
}

/// What the server saw.
#[derive(Default, Debug)]
pub struct Seen {
    /// Every line read, on every connection, as `CONNECTION_NUMBER LINE`.
    pub lines: Mutex<Vec<String>>,
    /// Connections accepted.
    pub connections: AtomicUsize,
    /// Connections still open (not yet closed by the client).
    pub open: AtomicUsize,
    conflicts_left: AtomicUsize,
}

/// Starts the server on a free loopback port.
pub fn spawn(script: Script) -> (SocketAddr, Arc<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Seen::default());
    seen.conflicts_left.store(script.conflicts, SeqCst);
    let st = seen.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            let n = st.connections.fetch_add(1, SeqCst);
            st.open.fetch_add(1, SeqCst);
            let st = st.clone();
            std::thread::spawn(move || {
                serve(&conn, n, script, &st);
                st.open.fetch_sub(1, SeqCst);
            });
        }
    });
    (addr, seen)
}

/// One connection, until the client closes it.
fn serve(conn: &std::net::TcpStream, n: usize, script: Script, st: &Seen) {
    let (mut authed, mut in_txn, mut hung) = (false, false, false);
    for line in BufReader::new(conn).lines() {
        let Ok(line) = line else { return };
        st.lines.lock().unwrap().push(format!("{n} {line}"));
        let mut words = line.split(' ');
        let command = words.next().unwrap_or("");
        hung |= script.hang_on == Some(command);
        if hung {
            continue; // read on, answer nothing
        }
        let answer = match command {
            "AUTH" if words.next() == Some(script.token) => {
                authed = true;
                "OK"
            }
            "AUTH" => "ERR bad token",
            "BEGIN" if authed => {
                in_txn = true;
                "OK"
            }
            "BEGIN" => "ERR not authenticated",
            "SET" if in_txn => "OK",
            "SET" => "ERR no transaction",
            "COMMIT" if in_txn => {
                in_txn = false;
                let conflict = st
                    .conflicts_left
                    .fetch_update(SeqCst, SeqCst, |c| c.checked_sub(1))
                    .is_ok();
                if conflict {
                    "CONFLICT"
                } else {
                    "OK"
                }
            }
            _ => "ERR unknown command",
        };
        if (&*conn)
            .write_all(format!("{answer}\n").as_bytes())
            .is_err()
        {
            return;
        }
    }
}

/// The writes both twins make in one transaction.
pub fn writes() -> Vec<(String, String)> {
    (0..4).map(|i| (format!("k{i}"), format!("v{i}"))).collect()
}

/// The runs both twins' `main` show (the client's token is `secret`).
pub fn scenarios() -> Vec<(&'static str, Script)> {
    let ok = Script {
        token: "secret",
        conflicts: 0,
        hang_on: None,
    };
    vec![
        ("commits", ok),
        ("conflict, then commits", Script { conflicts: 1, ..ok }),
        (
            "a write never answered",
            Script {
                hang_on: Some("SET"),
                ..ok
            },
        ),
        (
            "a wrong token",
            Script {
                token: "other",
                ..ok
            },
        ),
    ]
}
