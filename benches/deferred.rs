//! Deferred micro-benchmarks beside tokio equivalents, in one run.
//! `cargo bench --bench deferred` for figures; `cargo test` runs one tiny sample.

mod common;

use common::{compare, target, target_at_most, target_ns, Contender};
use deferloop::deferred::loop_fn;
use deferloop::{gather_results, succeed, Deferred, Failure};
use std::ops::ControlFlow::{Break, Continue};

async fn step(x: u64) -> u64 {
    x + 1
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();

    let m = compare(
        "10-step chain: create, 10 callbacks, fire (deferloop) vs oneshot + 10 awaits (tokio)",
        200_000,
        &mut [
            Contender {
                name: "deferloop chain",
                run: Box::new(|n| {
                    let mut sum = 0;
                    for i in 0..n {
                        let (d, r) = Deferred::<u64>::new();
                        let mut d = d;
                        for _ in 0..10 {
                            d = d.add_callback(|x| Ok::<_, Failure>(x + 1));
                        }
                        r.callback(i).unwrap();
                        sum += d.result().unwrap().unwrap();
                    }
                    assert!(sum > 0);
                }),
            },
            Contender {
                name: "tokio spawn + oneshot + 10 awaits",
                run: Box::new(|n| {
                    let local = tokio::task::LocalSet::new();
                    local.block_on(&rt, async {
                        let mut sum = 0;
                        for i in 0..n {
                            let (tx, rx) = tokio::sync::oneshot::channel::<u64>();
                            let h = tokio::task::spawn_local(async move {
                                let mut x = rx.await.unwrap();
                                for _ in 0..10 {
                                    x = step(x).await;
                                }
                                x
                            });
                            tx.send(i).unwrap();
                            sum += h.await.unwrap();
                        }
                        assert!(sum > 0);
                    });
                }),
            },
        ],
    );

    // The chain's targets: both at once.
    target_ns("10-step chain at most 100 ns", m[0], 100.0);
    target(
        "10-step chain at least 3x cheaper than tokio",
        m[0],
        m[1],
        3.0,
    );

    let m = compare(
        "a loop of 1,000,000 steps that answer at once (per step)",
        1_000_000,
        &mut [
            Contender {
                name: "deferloop loop_fn",
                run: Box::new(|n| {
                    let d = loop_fn(0u64, move |x| {
                        Ok::<_, Failure>(if x == n { Break(x) } else { Continue(x + 1) })
                    });
                    assert_eq!(d.result().unwrap().unwrap(), n);
                }),
            },
            Contender {
                // What a loop of known length is without `loop_fn`: one
                // callback per step, all added, then fired. (A chain built
                // by recursion from inside callbacks that fire at once
                // would overflow the stack long before a million.)
                name: "deferloop chain of n callbacks, built then fired",
                run: Box::new(|n| {
                    let (mut d, r) = Deferred::<u64>::new();
                    for _ in 0..n {
                        d = d.add_callback(|x| Ok::<_, Failure>(x + 1));
                    }
                    r.callback(0).unwrap();
                    assert_eq!(d.result().unwrap().unwrap(), n);
                }),
            },
            Contender {
                name: "tokio loop { x = step(x).await }",
                run: Box::new(|n| {
                    rt.block_on(async {
                        let mut x = 0u64;
                        loop {
                            x = step(std::hint::black_box(x)).await;
                            if x == n {
                                break;
                            }
                        }
                        assert_eq!(x, n);
                    });
                }),
            },
        ],
    );
    target_at_most("loop_fn step at most 1.0x tokio's loop", m[0], m[2], 1.0);
    println!(
        "\n- Not a target: loop_fn costs {:.2}x the chain of callbacks.",
        m[0] / m[1]
    );

    let m = compare(
        "gather of 100,000 already-fired results (per result)",
        100_000,
        &mut [
            Contender {
                name: "deferloop gather_results",
                run: Box::new(|n| {
                    let ds: Vec<_> = (0..n).map(succeed).collect();
                    let v = gather_results(ds).result().unwrap().unwrap();
                    assert_eq!(v.len() as u64, n);
                }),
            },
            Contender {
                name: "tokio join of ready futures",
                run: Box::new(|n| {
                    rt.block_on(async {
                        let fs: Vec<_> = (0..n).map(std::future::ready).collect();
                        let mut out = Vec::with_capacity(fs.len());
                        for f in fs {
                            out.push(f.await);
                        }
                        assert_eq!(out.len() as u64, n);
                    });
                }),
            },
        ],
    );
    target_ns("gather of fired inputs at most 25 ns per input", m[0], 25.0);
    println!(
        "\n- Not a target: gather costs {:.2}x the tokio floor (ready futures awaited inline).",
        m[0] / m[1]
    );
}
