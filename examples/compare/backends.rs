//! Fake backends for the fan-out twins (shared by both, so neither style gets
//! an easier server): plain threads that read one question line and then
//! answer after a delay, or hang up without answering.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

/// What a backend does with a question.
#[derive(Clone, Copy, Debug)]
pub enum Backend {
    /// Answers with this line after the delay.
    Answer(Duration, &'static str),
    /// Closes the connection after the delay, without answering.
    HangUp(Duration),
    /// Nothing listens: connecting is refused.
    Refuse,
}

/// Starts `b` on a free loopback port and returns its address.
pub fn spawn(b: Backend) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    if let Backend::Refuse = b {
        return addr; // the listener is dropped here: the port refuses
    }
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            std::thread::spawn(move || {
                let mut question = String::new();
                let _ = BufReader::new(&conn).read_line(&mut question);
                match b {
                    Backend::Answer(after, line) => {
                        std::thread::sleep(after);
                        let _ = writeln!(conn, "{line}");
                    }
                    Backend::HangUp(after) => std::thread::sleep(after),
                    Backend::Refuse => {}
                }
            });
        }
    });
    addr
}

/// The two scenarios both twins run: a first success among failures and a
/// slow loser, and a timeout.
pub fn scenarios() -> [(Vec<SocketAddr>, Duration); 2] {
    let ms = Duration::from_millis;
    [
        (
            vec![
                spawn(Backend::HangUp(ms(10))),
                spawn(Backend::Answer(ms(100), "blue")),
                spawn(Backend::Answer(ms(2000), "red")),
            ],
            ms(1000),
        ),
        (
            vec![
                spawn(Backend::Refuse),
                spawn(Backend::Answer(ms(2000), "green")),
                spawn(Backend::HangUp(ms(3000))),
            ],
            ms(300),
        ),
    ]
}
