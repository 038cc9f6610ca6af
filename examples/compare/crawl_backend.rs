//! A fake page server for the crawler twins (shared by both, so neither
//! style gets an easier server): plain threads, one request per connection,
//! `GET PATH\n` answered by one line.
//!
//! - `/page/NAME` answers `OK NAME` after 20 ms.
//! - `/slow/NAME` answers `OK NAME` after 10 s (past any test's patience),
//!   unless the client hangs up first.
//! - `/fatal` answers `FATAL disk on fire`.
//! - Any other path answers `MISSING`.
//!
//! It counts requests in flight, so a test can check the client's limit,
//! and connections open, so it can check that a client hung up.

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the server saw.
#[derive(Default, Debug)]
pub struct Seen {
    /// The paths asked for, in order.
    pub paths: Mutex<Vec<String>>,
    /// Connections open now.
    pub open: AtomicUsize,
    in_flight: AtomicUsize,
    /// The most requests in flight at once (read, not yet answered).
    pub max_in_flight: AtomicUsize,
}

/// Starts the server on a free loopback port.
pub fn spawn() -> (SocketAddr, Arc<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Seen::default());
    let st = seen.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            st.open.fetch_add(1, SeqCst);
            let st = st.clone();
            std::thread::spawn(move || {
                serve(&conn, &st);
                st.open.fetch_sub(1, SeqCst);
            });
        }
    });
    (addr, seen)
}

/// One request, then waits for the client to hang up.
fn serve(conn: &TcpStream, st: &Seen) {
    let mut line = String::new();
    let mut r = BufReader::new(conn);
    if r.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let path = line
        .trim_end()
        .strip_prefix("GET ")
        .unwrap_or("")
        .to_owned();
    st.paths.lock().unwrap().push(path.clone());
    let now = st.in_flight.fetch_add(1, SeqCst) + 1;
    st.max_in_flight.fetch_max(now, SeqCst);
    let rest = path.get(1..).unwrap_or("");
    let (kind, name) = rest.split_once('/').unwrap_or((rest, ""));
    let (wait, answer) = match kind {
        "page" => (Duration::from_millis(20), format!("OK {name}")),
        "slow" => (Duration::from_secs(10), format!("OK {name}")),
        "fatal" => (Duration::ZERO, "FATAL disk on fire".into()),
        _ => (Duration::ZERO, "MISSING".into()),
    };
    // Waits by reading: a hang-up (EOF or reset) ends the wait early.
    conn.set_read_timeout(Some(wait.max(Duration::from_millis(1))))
        .unwrap();
    let mut buf = [0; 1];
    let waited = r.read(&mut buf);
    st.in_flight.fetch_sub(1, SeqCst);
    match waited {
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
        _ => return, // hung up (or sent more than it should)
    }
    if (&*conn)
        .write_all(format!("{answer}\n").as_bytes())
        .is_err()
    {
        return;
    }
    conn.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let _ = r.read(&mut buf); // until the client hangs up
}

/// The paths both twins' `main` crawl: pages and a missing one (the tests
/// add slow and fatal ones).
pub fn paths() -> Vec<String> {
    let mut all: Vec<String> = (0..8).map(|i| format!("/page/{i}")).collect();
    all.insert(3, "/nowhere".into());
    all
}
