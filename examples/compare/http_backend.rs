//! A fake HTTP/1.1 server for the HTTP-client twins (shared by both, so
//! neither style gets an easier server): plain threads, keep-alive, and
//! paths that fail on purpose.
//!
//! - `/ok/NAME` answers `NAME`.
//! - `/flaky/NAME` hangs up without answering the first two times it is
//!   asked, then answers `NAME`.
//! - `/slow/NAME` answers after 1 s the first time (past any sane timeout),
//!   then at once.
//! - `/gone` always hangs up: it fails however often it is retried.
//!
//! Any other path gets a 404. It counts requests in flight, so a test can
//! check the client's limit.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the server saw.
#[derive(Default, Debug)]
pub struct Stats {
    /// Connections accepted.
    pub connections: AtomicUsize,
    /// Requests answered or refused.
    pub requests: AtomicUsize,
    in_flight: AtomicUsize,
    /// The most requests in flight at once.
    pub max_in_flight: AtomicUsize,
    hits: Mutex<HashMap<String, usize>>,
}

/// Starts the server on a free loopback port.
pub fn spawn() -> (SocketAddr, Arc<Stats>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let stats = Arc::new(Stats::default());
    let st = stats.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            st.connections.fetch_add(1, SeqCst);
            let st = st.clone();
            std::thread::spawn(move || {
                let mut r = BufReader::new(&conn);
                while let Some(path) = read_head(&mut r) {
                    let now = st.in_flight.fetch_add(1, SeqCst) + 1;
                    st.max_in_flight.fetch_max(now, SeqCst);
                    st.requests.fetch_add(1, SeqCst);
                    let hit = {
                        let mut hits = st.hits.lock().unwrap();
                        let n = hits.entry(path.clone()).or_default();
                        *n += 1;
                        *n
                    };
                    let answer = answer(&path, hit);
                    st.in_flight.fetch_sub(1, SeqCst);
                    let Some((status, body)) = answer else { return }; // hang up
                    let reply = format!(
                        "HTTP/1.1 {status}\r\nContent-Length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if (&conn).write_all(reply.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, stats)
}

/// The path of the next request, once its head has arrived; `None` at EOF.
fn read_head(r: &mut impl BufRead) -> Option<String> {
    let mut line = String::new();
    r.read_line(&mut line).ok().filter(|&n| n > 0)?;
    let path = line.split(' ').nth(1)?.to_owned();
    loop {
        line.clear();
        r.read_line(&mut line).ok().filter(|&n| n > 0)?;
        if line == "\r\n" {
            return Some(path);
        }
    }
}

fn answer(path: &str, hit: usize) -> Option<(&'static str, String)> {
    let (kind, name) = path[1..].split_once('/').unwrap_or((&path[1..], ""));
    match kind {
        "ok" => Some(("200 OK", name.to_owned())),
        "flaky" if hit <= 2 => None,
        "flaky" => Some(("200 OK", name.to_owned())),
        "slow" if hit == 1 => {
            std::thread::sleep(Duration::from_secs(1));
            Some(("200 OK", name.to_owned()))
        }
        "slow" => Some(("200 OK", name.to_owned())),
        "gone" => None,
        _ => Some(("404 Not Found", String::new())),
    }
}

/// The paths both twins fetch, and what each should end with: the body, or
/// `None` for a failure.
pub fn paths() -> Vec<(String, Option<String>)> {
    let mut all: Vec<(String, Option<String>)> = (0..12)
        .map(|i| (format!("/ok/{i}"), Some(i.to_string())))
        .collect();
    all.push(("/flaky/f".into(), Some("f".into())));
    all.push(("/slow/s".into(), Some("s".into())));
    all.push(("/gone".into(), None));
    all.push(("/missing".into(), None));
    all
}
