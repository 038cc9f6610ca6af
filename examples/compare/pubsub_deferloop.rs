//! Pub/sub over lines, callback style: `SUB topic` (answered `OK`) and
//! `PUB topic message` (sent as `topic message` to every subscriber of the
//! topic). A subscriber with more than 1 MiB waiting to be written is
//! dropped. The twin of `pubsub_tokio.rs`.
//!
//! Run: `cargo run --example compare_pubsub_deferloop -- 127.0.0.1:7003`

use deferloop::net::{Listener, Stream};
use deferloop::{EventLoop, Failure};
use std::cell::RefCell;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::rc::Rc;

/// A subscriber with more than this many bytes waiting is dropped.
pub const LIMIT: usize = 1 << 20;

/// Subscribers by topic, shared by every connection.
type Topics = Rc<RefCell<HashMap<String, Vec<Stream>>>>;

/// Serves one command, then the next, until the client goes.
fn serve(s: Stream, topics: Topics) {
    s.clone()
        .read_line()
        .add_both(move |line: Result<String, Failure>| {
            let Ok(line) = line else {
                s.close(); // end of file, over-long line or reset
                return Ok(());
            };
            match line.split_once(' ') {
                Some(("SUB", topic)) => {
                    let mut topics = topics.borrow_mut();
                    topics.entry(topic.into()).or_default().push(s.clone());
                    s.write(b"OK\n");
                }
                Some(("PUB", rest)) => publish(&topics, rest),
                _ => s.write(b"ERR\n"),
            }
            serve(s, topics);
            Ok::<(), Failure>(())
        })
        .detach();
}

/// Sends `topic message` to the topic's subscribers; drops the ones gone
/// and the ones too far behind.
fn publish(topics: &Topics, rest: &str) {
    let topic = rest.split(' ').next().unwrap_or_default();
    let line = format!("{rest}\n");
    if let Some(subs) = topics.borrow_mut().get_mut(topic) {
        subs.retain(|sub| {
            if sub.is_closing() {
                return false;
            }
            sub.write(line.as_bytes());
            if sub.write_buffer_size() > LIMIT {
                sub.abort();
                return false;
            }
            true
        });
    }
}

pub fn start(ev: &EventLoop, addr: SocketAddr) -> Result<Listener, deferloop::Error> {
    let topics = Topics::default();
    Stream::listen_tcp(ev, addr, move |s| serve(s, topics.clone()))
}

#[allow(dead_code)]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The library reports through `log`: show its warnings (RUST_LOG overrides).
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:0".into());
    let ev = EventLoop::new()?;
    println!("{}", start(&ev, addr.parse()?)?.local_addr());
    ev.run()?;
    Ok(())
}
