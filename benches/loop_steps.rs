//! One loop of `n` steps that answer at once, in `loop_fn` or in tokio's
//! `loop { x = step(x).await }`: the program `scripts/loop_instructions.sh`
//! runs under callgrind to count instructions per step, which a shared,
//! noisy machine cannot blur. `cargo test` runs a few steps of each.
//!
//! `cargo bench --bench loop_steps -- loop_fn 1000000` (or `tokio`).

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
                other => panic!("loop_fn or tokio, not {other}"),
            };
            assert_eq!(x, n);
        }
        _ => {
            assert_eq!(with_loop_fn(1000), 1000);
            assert_eq!(with_tokio(1000), 1000);
        }
    }
}
