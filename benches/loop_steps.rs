//! One loop of `n` steps that answer at once, in `loop_fn` or in tokio's
//! `loop { x = step(x).await }`: the program `scripts/loop_instructions.sh`
//! runs under callgrind to count instructions per step, which a shared,
//! noisy machine cannot blur. Also `n` calls from another thread, as the
//! threadsafe table of benches/loop.rs makes them: `call_soon_threadsafe`
//! (`remote`) or tokio's unbounded mpsc (`mpsc`). `cargo test` runs a few
//! of each.
//!
//! `cargo bench --bench loop_steps -- loop_fn 1000000` (or `tokio`,
//! `remote`, `mpsc`).

use deferloop::deferred::loop_fn;
use deferloop::Failure;
use std::hint::black_box;
use std::ops::ControlFlow::{Break, Continue};

async fn step(x: u64) -> u64 {
    x + 1
}

fn with_loop_fn(n: u64) -> u64 {
    let d = loop_fn(0u64, move |x| {
        Ok::<_, Failure>(if x == n {
            Break(x)
        } else {
            Continue(black_box(x) + 1)
        })
    });
    d.result().unwrap().unwrap()
}

fn with_tokio(n: u64) -> u64 {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(async move {
        let mut x = 0u64;
        loop {
            x = step(black_box(x)).await;
            if x == n {
                break x;
            }
        }
    })
}

/// `n` calls from another thread, the last one stopping the loop.
fn with_remote(n: u64) -> u64 {
    let ev = deferloop::EventLoop::new().unwrap();
    let remote = ev.remote();
    let t = std::thread::spawn(move || {
        for i in 0..n {
            remote
                .call_soon_threadsafe(move |lp| {
                    if i == n - 1 {
                        lp.stop();
                    }
                })
                .unwrap();
        }
    });
    ev.run().unwrap();
    t.join().unwrap();
    n
}

/// `n` numbers sent from another thread, all received.
fn with_mpsc(n: u64) -> u64 {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<u64>();
    let t = std::thread::spawn(move || {
        for i in 0..n {
            tx.send(i).unwrap();
        }
    });
    let got = rt.block_on(async move {
        let mut got = 0;
        while rx.recv().await.is_some() {
            got += 1;
        }
        got
    });
    t.join().unwrap();
    got
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    match args.as_slice() {
        [which, n] => {
            let n: u64 = n.parse().expect("a number of steps");
            let x = match which.as_str() {
                "loop_fn" => with_loop_fn(n),
                "tokio" => with_tokio(n),
                "remote" => with_remote(n),
                "mpsc" => with_mpsc(n),
                other => panic!("loop_fn, tokio, remote or mpsc, not {other}"),
            };
            assert_eq!(x, n);
        }
        _ => {
            assert_eq!(with_loop_fn(1000), 1000);
            assert_eq!(with_tokio(1000), 1000);
            assert_eq!(with_remote(1000), 1000);
            assert_eq!(with_mpsc(1000), 1000);
        }
    }
}
