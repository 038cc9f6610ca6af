//! Model test: random sequences of add-callback / add-errback / fire / pause /
//! unpause / chain against a small reference model of one chain must produce the
//! same observable trace, flags and final result.

use deferloop::deferred::{succeed, Deferred, Resolver};
use deferloop::Failure;
use proptest::prelude::*;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

#[derive(Debug, Clone)]
enum Op {
    AddCallback(i64),
    AddFailing,
    AddErrback(i64),
    AddChainPending,
    AddChainReady(i64),
    Fire(i64),
    FireErr,
    FireInner(i64),
    FireInnerErr,
    Pause,
    Unpause,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (-5i64..5).prop_map(Op::AddCallback),
        1 => Just(Op::AddFailing),
        2 => (-5i64..5).prop_map(Op::AddErrback),
        1 => Just(Op::AddChainPending),
        1 => (-5i64..5).prop_map(Op::AddChainReady),
        1 => (-5i64..5).prop_map(Op::Fire),
        1 => Just(Op::FireErr),
        1 => (-5i64..5).prop_map(Op::FireInner),
        1 => Just(Op::FireInnerErr),
        1 => Just(Op::Pause),
        1 => Just(Op::Unpause),
    ]
}

type R = Result<i64, String>;

#[derive(Debug, Clone, Copy)]
enum LinkM {
    Cb(usize, i64),
    Fail(usize),
    Eb(usize, i64),
    ChainPending(usize),
    ChainReady(usize, i64),
}

/// The reference model: Twisted's rules written as plainly as possible.
#[derive(Default)]
struct Model {
    links: VecDeque<LinkM>,
    fired: bool,
    result: Option<R>,
    paused: u32,
    waiting: bool,
    trace: Vec<String>,
}

impl Model {
    fn run(&mut self) {
        while self.fired && self.paused == 0 && !self.waiting {
            let Some(l) = self.links.pop_front() else {
                break;
            };
            let r = self.result.take().unwrap();
            self.result = Some(match (l, r) {
                (LinkM::Cb(id, k), Ok(x)) => {
                    self.trace.push(format!("cb{id}:{x}"));
                    Ok(x + k)
                }
                (LinkM::Fail(id), Ok(x)) => {
                    self.trace.push(format!("fail{id}:{x}"));
                    Err(format!("f{id}"))
                }
                (LinkM::Eb(id, v), Err(e)) => {
                    self.trace.push(format!("eb{id}:{e}"));
                    Ok(v)
                }
                (LinkM::ChainPending(id), Ok(x)) => {
                    self.trace.push(format!("chain{id}:{x}"));
                    self.waiting = true;
                    break;
                }
                (LinkM::ChainReady(id, v), Ok(x)) => {
                    self.trace.push(format!("ready{id}:{x}"));
                    Ok(v)
                }
                (_, r) => r,
            });
        }
    }

    fn fire(&mut self, r: R) -> bool {
        if self.fired {
            return false;
        }
        self.fired = true;
        self.result = Some(r);
        self.run();
        true
    }

    fn fire_inner(&mut self, r: R) -> bool {
        // Only the inner the chain waits on is ever fired by the test.
        if !self.waiting {
            return false;
        }
        self.waiting = false;
        self.result = Some(r);
        self.run();
        true
    }
}

struct Real {
    d: Option<Deferred<i64>>,
    r: Resolver<i64>,
    inner: Rc<RefCell<Option<Resolver<i64>>>>,
    trace: Rc<RefCell<Vec<String>>>,
}

impl Real {
    fn add(&mut self, f: impl FnOnce(Deferred<i64>) -> Deferred<i64>) {
        let d = self.d.take().unwrap();
        self.d = Some(f(d));
    }
}

fn check(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let mut m = Model::default();
    let (d, r) = Deferred::<i64>::new();
    let mut real = Real {
        d: Some(d),
        r,
        inner: Rc::default(),
        trace: Rc::default(),
    };
    for (id, op) in ops.into_iter().enumerate() {
        let t = real.trace.clone();
        match op {
            Op::AddCallback(k) => {
                m.links.push_back(LinkM::Cb(id, k));
                m.run();
                real.add(|d| {
                    d.add_callback(move |x| {
                        t.borrow_mut().push(format!("cb{id}:{x}"));
                        Ok::<_, Failure>(x + k)
                    })
                });
            }
            Op::AddFailing => {
                m.links.push_back(LinkM::Fail(id));
                m.run();
                real.add(|d| {
                    d.add_callback(move |x| {
                        t.borrow_mut().push(format!("fail{id}:{x}"));
                        Err::<i64, _>(Failure::msg(format!("f{id}")))
                    })
                });
            }
            Op::AddErrback(v) => {
                m.links.push_back(LinkM::Eb(id, v));
                m.run();
                real.add(|d| {
                    d.add_errback(move |f| {
                        t.borrow_mut().push(format!("eb{id}:{f}"));
                        Ok(v)
                    })
                });
            }
            Op::AddChainPending => {
                m.links.push_back(LinkM::ChainPending(id));
                m.run();
                let slot = real.inner.clone();
                real.add(|d| {
                    d.add_callback(move |x| {
                        t.borrow_mut().push(format!("chain{id}:{x}"));
                        let (inner, ir) = Deferred::<i64>::new();
                        *slot.borrow_mut() = Some(ir);
                        inner
                    })
                });
            }
            Op::AddChainReady(v) => {
                m.links.push_back(LinkM::ChainReady(id, v));
                m.run();
                real.add(|d| {
                    d.add_callback(move |x| {
                        t.borrow_mut().push(format!("ready{id}:{x}"));
                        succeed(v)
                    })
                });
            }
            Op::Fire(v) => {
                let ok = m.fire(Ok(v));
                prop_assert_eq!(real.r.callback(v).is_ok(), ok);
            }
            Op::FireErr => {
                let ok = m.fire(Err(format!("e{id}")));
                prop_assert_eq!(real.r.errback(Failure::msg(format!("e{id}"))).is_ok(), ok);
            }
            Op::FireInner(_) | Op::FireInnerErr if m.waiting => {
                let r: R = match op {
                    Op::FireInner(v) => Ok(v),
                    _ => Err(format!("i{id}")),
                };
                m.fire_inner(r.clone());
                let ir = real.inner.borrow_mut().take().expect("real waits too");
                prop_assert!(ir.resolve(r.map_err(Failure::msg)).is_ok());
            }
            Op::FireInner(_) | Op::FireInnerErr => {}
            Op::Pause => {
                m.paused += 1;
                real.d.as_ref().unwrap().pause();
            }
            Op::Unpause => {
                let ok = m.paused > 0;
                if ok {
                    m.paused -= 1;
                    m.run();
                }
                prop_assert_eq!(real.d.as_ref().unwrap().unpause().is_ok(), ok);
            }
        }
        prop_assert_eq!(&*real.trace.borrow(), &m.trace);
        let d = real.d.as_ref().unwrap();
        prop_assert_eq!(d.is_called(), m.fired);
        prop_assert_eq!(d.is_paused(), m.paused > 0 || m.waiting);
    }
    let idle = m.fired && m.paused == 0 && !m.waiting && m.links.is_empty();
    let got = real
        .d
        .take()
        .unwrap()
        .result()
        .map(|r| r.map_err(|f| f.to_string()));
    prop_assert_eq!(got, if idle { m.result.clone() } else { None });
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, .. ProptestConfig::default() })]
    #[test]
    fn chain_matches_the_reference_model(ops in proptest::collection::vec(op(), 0..24)) {
        check(ops)?;
    }
}
