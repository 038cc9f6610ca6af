//! Pub/sub over lines, async style on tokio: `SUB topic` (answered `OK`)
//! and `PUB topic message` (sent as `topic message` to every subscriber of
//! the topic). A subscriber with more than 1024 messages (1 MiB of 1 KiB
//! messages) waiting is dropped. The twin of `pubsub_deferloop.rs`.
//!
//! Run: `cargo run --example compare_pubsub_tokio -- 127.0.0.1:7003`

use std::cell::RefCell;
use std::collections::HashMap;
use std::io;
use std::rc::Rc;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc::{self, error::TrySendError};
use tokio::sync::Notify;

/// A subscriber with more than this many messages waiting is dropped.
pub const LIMIT: usize = 1024;

/// A subscriber: its queue, and how to tell its task it is dropped.
struct Sub {
    queue: mpsc::Sender<Rc<str>>,
    dropped: Rc<Notify>,
}

/// Subscribers by topic, shared by every connection (on a `LocalSet`).
type Topics = Rc<RefCell<HashMap<String, Vec<Sub>>>>;

pub async fn serve(listener: TcpListener) -> io::Result<()> {
    let topics = Topics::default();
    loop {
        let (sock, _) = listener.accept().await?;
        sock.set_nodelay(true)?;
        tokio::task::spawn_local(client(sock, topics.clone()));
    }
}

/// One connection: commands in, messages out, until the client goes or is
/// dropped. One writer, so replies go through the queue too.
async fn client(sock: TcpStream, topics: Topics) {
    let (r, mut w) = sock.into_split();
    let (queue, mut rx) = mpsc::channel::<Rc<str>>(LIMIT);
    let dropped = Rc::new(Notify::new());
    let commands = async {
        let mut lines = BufReader::new(r).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let reply = match line.split_once(' ') {
                Some(("SUB", topic)) => {
                    let sub = Sub {
                        queue: queue.clone(),
                        dropped: dropped.clone(),
                    };
                    topics
                        .borrow_mut()
                        .entry(topic.into())
                        .or_default()
                        .push(sub);
                    "OK\n"
                }
                Some(("PUB", rest)) => {
                    publish(&topics, rest);
                    continue;
                }
                _ => "ERR\n",
            };
            let _ = queue.send(reply.into()).await;
        }
    };
    let messages = async {
        while let Some(m) = rx.recv().await {
            if w.write_all(m.as_bytes()).await.is_err() {
                return;
            }
        }
    };
    tokio::select! {
        _ = commands => {}
        _ = messages => {}
        _ = dropped.notified() => {}
    }
}

/// Queues `topic message` for the topic's subscribers; drops the ones gone
/// and the ones too far behind.
fn publish(topics: &Topics, rest: &str) {
    let topic = rest.split(' ').next().unwrap_or_default();
    let line: Rc<str> = format!("{rest}\n").into();
    if let Some(subs) = topics.borrow_mut().get_mut(topic) {
        subs.retain(|sub| match sub.queue.try_send(line.clone()) {
            Ok(()) => true,
            Err(TrySendError::Full(_)) => {
                sub.dropped.notify_one();
                false
            }
            Err(TrySendError::Closed(_)) => false,
        });
    }
}

#[allow(dead_code)]
fn main() -> io::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:0".into());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    tokio::task::LocalSet::new().block_on(&rt, async {
        let listener = TcpListener::bind(addr).await?;
        println!("{}", listener.local_addr()?);
        serve(listener).await
    })
}
