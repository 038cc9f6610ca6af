//! Pub/sub over lines, callback style: `SUB topic` (answered `OK`) and
//! `PUB topic message` (sent as `topic message` to every subscriber of the
//! topic). A subscriber with more than 1 MiB waiting to be written is
//! dropped. The twin of `pubsub_tokio.rs`.
//!
//! Run: `cargo run --example compare_pubsub_deferloop -- 127.0.0.1:7003`

use deferloop::deferred::{fail, loop_fn, DeferredQueue};
use deferloop::net::{Listener, Stream};
use deferloop::{Deferred, EventLoop, Failure};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::ops::ControlFlow::{Break, Continue};

/// A subscriber with more than this many bytes waiting is dropped.
pub const LIMIT: usize = 1 << 20;

/// Subscribers by topic, owned by the broker.
type Topics = HashMap<String, Vec<Stream>>;

/// What a connection asks of the broker.
enum Command {
    Sub(String, Stream),
    /// `topic message`.
    Pub(String),
    Unknown(Stream),
}

/// Serves one connection: each line is a command for the broker, until the
/// client goes.
fn serve(s: Stream, commands: DeferredQueue<Command>) {
    loop_fn((), move |()| {
        let (s, commands) = (s.clone(), commands.clone());
        s.read_line()
            .add_both(move |line: Result<String, Failure>| {
                let Ok(line) = line else {
                    s.close(); // end of file, over-long line or reset
                    return Ok(Break(()));
                };
                let command = match line.split_once(' ') {
                    Some(("SUB", topic)) => Command::Sub(topic.into(), s),
                    Some(("PUB", rest)) => Command::Pub(rest.into()),
                    _ => Command::Unknown(s),
                };
                let _ = commands.put(command); // unbounded: never refused
                Ok(Continue(()))
            })
    })
    .detach();
}

/// The broker: owns the subscribers by topic and serves every connection's
/// commands, one at a time, in the order they came.
fn broker(commands: DeferredQueue<Command>) -> Deferred<()> {
    loop_fn(HashMap::new(), move |mut topics: Topics| {
        let next = commands.get().unwrap_or_else(fail); // the backlog is unbounded
        next.map(move |command| {
            match command {
                Command::Sub(topic, s) => {
                    topics.entry(topic).or_default().push(s.clone());
                    s.write(b"OK\n");
                }
                Command::Pub(rest) => publish(&mut topics, &rest),
                Command::Unknown(s) => s.write(b"ERR\n"),
            }
            Continue(topics)
        })
    })
}

/// Sends `topic message` to the topic's subscribers; drops the ones gone
/// and the ones too far behind.
fn publish(topics: &mut Topics, rest: &str) {
    let topic = rest.split(' ').next().unwrap_or_default();
    let line = format!("{rest}\n");
    if let Some(subs) = topics.get_mut(topic) {
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
    let commands = DeferredQueue::unbounded();
    broker(commands.clone()).detach();
    Stream::listen_tcp(ev, addr, move |s| serve(s, commands.clone()))
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
