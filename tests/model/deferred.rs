//! The Deferred reference model and the check that runs a sequence of
//! operations against both it and the real `Deferred`, shared by the model
//! test (tests/deferred_model.rs, random sequences from proptest) and the
//! fuzz target (fuzz/fuzz_targets/deferred_ops.rs, sequences decoded from the
//! fuzzer's bytes). What is compared is described in tests/deferred_model.rs.
#![allow(dead_code)]

use deferloop::deferred::{fail, succeed, Abandoned, AlreadyCalled, Cancelled, Deferred, Resolver};
use deferloop::{Failure, Panicked};
use proptest::prelude::*;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

#[derive(Debug, Clone)]
pub enum Op {
    AddCallback(i64),
    AddFailing,
    AddPanicking,
    AddErrback(i64),
    AddChainPending,
    AddChainReady(i64),
    AddChainFailed,
    /// Fire the `k`-th Deferred of the main line (modulo): the first one, or
    /// one that a `chain_deferred` forwards into.
    Fire(usize, i64),
    FireErr(usize),
    /// Fire the `k`-th Deferred (modulo) that a callback returned pending.
    FireInner(usize, i64),
    FireInnerErr(usize),
    Pause,
    Unpause,
    Cancel,
    /// `d.chain_deferred(&e)` with a new `e`, which the next ops extend.
    ChainTo,
    /// The same with an `e` that has already fired with this value.
    ChainToFired(i64),
}

pub fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (-5i64..5).prop_map(Op::AddCallback),
        1 => Just(Op::AddFailing),
        1 => Just(Op::AddPanicking),
        2 => (-5i64..5).prop_map(Op::AddErrback),
        1 => Just(Op::AddChainPending),
        1 => (-5i64..5).prop_map(Op::AddChainReady),
        1 => Just(Op::AddChainFailed),
        1 => (any::<usize>(), -5i64..5).prop_map(|(k, v)| Op::Fire(k, v)),
        1 => any::<usize>().prop_map(Op::FireErr),
        2 => (any::<usize>(), -5i64..5).prop_map(|(k, v)| Op::FireInner(k, v)),
        1 => any::<usize>().prop_map(Op::FireInnerErr),
        1 => Just(Op::Pause),
        1 => Just(Op::Unpause),
        1 => Just(Op::Cancel),
        1 => Just(Op::ChainTo),
        1 => (-5i64..5).prop_map(Op::ChainToFired),
    ]
}

/// What the first Deferred's canceller does, if it has one.
#[derive(Debug, Clone, Copy)]
pub enum CancellerM {
    Noop,
    Callback(i64),
    Errback,
    Panic,
}

pub fn canceller() -> impl Strategy<Value = Option<CancellerM>> {
    prop_oneof![
        3 => Just(None),
        1 => Just(Some(CancellerM::Noop)),
        1 => (-5i64..5).prop_map(|v| Some(CancellerM::Callback(v))),
        1 => Just(Some(CancellerM::Errback)),
        1 => Just(Some(CancellerM::Panic)),
    ]
}

type R = Result<i64, String>;

#[derive(Debug, Clone, Copy)]
enum LinkM {
    Cb(usize, i64),
    Fail(usize),
    Panic(usize),
    Eb(usize, i64),
    ChainPending(usize),
    ChainReady(usize, i64),
    ChainFailed(usize),
    /// Twisted's CONTINUE marker: hand the result to this waiting node.
    Continue(usize),
    /// `chain_deferred`: fire this node with the result.
    Forward(usize),
}

/// One Deferred of the model.
#[derive(Debug, Default)]
struct NodeM {
    links: VecDeque<LinkM>,
    called: bool,
    result: Option<R>,
    paused: u32,
    /// The inner node this one waits on.
    waiting: Option<usize>,
    suppress: bool,
    canceller: Option<CancellerM>,
}

/// The reference model: Twisted's rules written as plainly as possible,
/// recursively (the order of callbacks is the same as the iterative runner's).
#[derive(Default)]
struct Model {
    nodes: Vec<NodeM>,
    /// The main line: the first node, then each `chain_deferred` target.
    main: Vec<usize>,
    /// Nodes returned pending by callbacks, in creation order.
    inners: Vec<usize>,
    trace: Vec<String>,
    canceller_panics: usize,
}

impl Model {
    fn new_node(&mut self) -> usize {
        self.nodes.push(NodeM::default());
        self.nodes.len() - 1
    }

    fn cur(&self) -> usize {
        *self.main.last().unwrap()
    }

    fn runnable(&self, id: usize) -> bool {
        let n = &self.nodes[id];
        n.called && n.paused == 0 && n.waiting.is_none() && n.result.is_some()
    }

    fn run(&mut self, id: usize) {
        while self.runnable(id) {
            let Some(l) = self.nodes[id].links.pop_front() else {
                break;
            };
            let r = self.nodes[id].result.take().unwrap();
            let next = match (l, r) {
                (LinkM::Cb(i, k), Ok(x)) => {
                    self.trace.push(format!("cb{i}:{x}"));
                    Some(Ok(x + k))
                }
                (LinkM::Fail(i), Ok(x)) => {
                    self.trace.push(format!("fail{i}:{x}"));
                    Some(Err(format!("f{i}")))
                }
                (LinkM::Panic(i), Ok(x)) => {
                    self.trace.push(format!("panic{i}:{x}"));
                    Some(Err(format!("panic:model-panic {i}")))
                }
                (LinkM::Eb(i, v), Err(e)) => {
                    self.trace.push(format!("eb{i}:{e}"));
                    Some(Ok(v))
                }
                (LinkM::ChainPending(i), Ok(x)) => {
                    self.trace.push(format!("chain{i}:{x}"));
                    let inner = self.new_node();
                    self.nodes[inner].links.push_back(LinkM::Continue(id));
                    self.inners.push(inner);
                    self.nodes[id].waiting = Some(inner);
                    None
                }
                (LinkM::ChainReady(i, v), Ok(x)) => {
                    self.trace.push(format!("ready{i}:{x}"));
                    Some(Ok(v))
                }
                (LinkM::ChainFailed(i), Ok(x)) => {
                    self.trace.push(format!("failed{i}:{x}"));
                    Some(Err(format!("r{i}")))
                }
                (LinkM::Continue(w), r) => {
                    self.nodes[w].result = Some(r);
                    self.nodes[w].waiting = None;
                    self.run(w);
                    None
                }
                (LinkM::Forward(t), r) => {
                    let target = &mut self.nodes[t];
                    if !target.called {
                        target.called = true;
                        target.result = Some(r);
                        target.canceller = None;
                        self.run(t);
                        None
                    } else if std::mem::take(&mut target.suppress) {
                        None
                    } else {
                        Some(Err("already".to_owned()))
                    }
                }
                (_, r) => Some(r),
            };
            self.nodes[id].result = next;
        }
    }

    fn fire(&mut self, id: usize, r: R) -> bool {
        let n = &mut self.nodes[id];
        if n.called {
            return std::mem::take(&mut n.suppress);
        }
        n.called = true;
        n.result = Some(r);
        n.canceller = None;
        self.run(id);
        true
    }

    fn add(&mut self, l: LinkM) {
        let id = self.cur();
        self.nodes[id].links.push_back(l);
        self.run(id);
    }

    fn cancel(&mut self, id: usize) {
        if !self.nodes[id].called {
            match self.nodes[id].canceller.take() {
                Some(c) => {
                    self.trace.push("canceller".to_owned());
                    match c {
                        CancellerM::Noop => {}
                        CancellerM::Callback(v) => {
                            self.fire(id, Ok(v));
                        }
                        CancellerM::Errback => {
                            self.fire(id, Err("ce".to_owned()));
                        }
                        CancellerM::Panic => {
                            self.canceller_panics += 1;
                            return;
                        }
                    }
                    if !self.nodes[id].called {
                        self.fire(id, Err("cancelled".to_owned()));
                    }
                }
                None => {
                    self.nodes[id].suppress = true;
                    self.fire(id, Err("cancelled".to_owned()));
                }
            }
        } else if let Some(inner) = self.nodes[id].waiting {
            self.cancel(inner);
        }
    }

    /// What `result()` gives on node `id` (taking it, as `result()` does).
    fn take_result(&mut self, id: usize) -> Option<R> {
        let n = &mut self.nodes[id];
        let idle = n.called && n.paused == 0 && n.waiting.is_none() && n.links.is_empty();
        if idle {
            n.result.take()
        } else {
            None
        }
    }

    /// What dropping the last handles does: the main line's Resolvers in
    /// order, then the inner ones. A node whose last Resolver goes while it is
    /// unfired, has links queued, and no live `chain_deferred` source feeds
    /// it, fails with "abandoned".
    fn drop_resolvers(&mut self) {
        // Every node is held by its Resolver until that is dropped; inner
        // nodes made while abandoned chains run are appended (and held).
        let mut held = vec![true; self.nodes.len()];
        let mut k = 0;
        while k < self.main.len() + self.inners.len() {
            let id = match self.main.get(k) {
                Some(&id) => id,
                None => self.inners[k - self.main.len()],
            };
            k += 1;
            held.resize(self.nodes.len(), true);
            let alive = self.alive(&held);
            held[id] = false;
            let fed = (0..self.nodes.len()).any(|j| {
                j != id
                    && alive[j]
                    && self.nodes[j]
                        .links
                        .iter()
                        .any(|l| matches!(l, LinkM::Forward(t) if *t == id))
            });
            let n = &self.nodes[id];
            if !n.called && !fed && !n.links.is_empty() {
                self.fire(id, Err("abandoned".to_owned()));
            }
        }
        held.resize(self.nodes.len(), true);
    }

    /// Nodes held by a Resolver in `held` or by a link of a live node.
    fn alive(&self, held: &[bool]) -> Vec<bool> {
        let mut alive = held.to_vec();
        let mut changed = true;
        while changed {
            changed = false;
            for j in 0..self.nodes.len() {
                if !alive[j] {
                    continue;
                }
                for l in &self.nodes[j].links {
                    if let LinkM::Continue(t) | LinkM::Forward(t) = *l {
                        if !alive[t] {
                            alive[t] = true;
                            changed = true;
                        }
                    }
                }
            }
        }
        alive
    }

    /// Nodes that will report an unhandled failure when dropped.
    fn unhandled(&self) -> usize {
        let failed = |n: &&NodeM| matches!(n.result, Some(Err(_)));
        self.nodes.iter().filter(failed).count()
    }
}

/// A failure as the model writes it.
fn render(f: &Failure) -> String {
    if f.check::<Cancelled>() {
        "cancelled".to_owned()
    } else if f.check::<Abandoned>() {
        "abandoned".to_owned()
    } else if f.check::<AlreadyCalled>() {
        "already".to_owned()
    } else if let Some(p) = f.downcast_ref::<Panicked>() {
        format!("panic:{}", p.message)
    } else {
        f.to_string()
    }
}

struct Real {
    /// The current end of the main line.
    d: Option<Deferred<i64>>,
    /// Resolvers of the main line, in order.
    main: Vec<Resolver<i64>>,
    inners: Rc<RefCell<Vec<Resolver<i64>>>>,
    trace: Rc<RefCell<Vec<String>>>,
}

impl Real {
    fn add(&mut self, f: impl FnOnce(Deferred<i64>) -> Deferred<i64>) {
        let d = self.d.take().unwrap();
        self.d = Some(f(d));
    }
}

thread_local! {
    /// (unhandled-failure reports, panicking-canceller reports) logged here.
    static LOGGED: std::cell::Cell<(usize, usize)> = const { std::cell::Cell::new((0, 0)) };
}

/// Counts, per thread, the two reports the model predicts.
struct Counter;

impl log::Log for Counter {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, r: &log::Record<'_>) {
        let msg = r.args().to_string();
        LOGGED.with(|c| {
            let (u, p) = c.get();
            if msg.starts_with("Unhandled error in Deferred") {
                c.set((u + 1, p));
            } else if msg.starts_with("canceller of Deferred") {
                c.set((u, p + 1));
            }
        });
    }
    fn flush(&self) {}
}

/// Keeps the panics the model asks for off stderr; counts the reports.
fn quiet_model_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let msg = info
                .payload()
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| info.payload().downcast_ref::<&str>().copied())
                .unwrap_or("");
            if !msg.starts_with("model-panic") {
                prev(info);
            }
        }));
        log::set_logger(&Counter).unwrap();
        log::set_max_level(log::LevelFilter::Error);
    });
}

pub fn check(
    cancel_with: Option<CancellerM>,
    start: Option<i64>,
    ops: Vec<Op>,
) -> Result<(), TestCaseError> {
    quiet_model_panics();
    LOGGED.with(|c| c.set((0, 0)));
    let mut m = Model::default();
    let root = m.new_node();
    // A chain that starts fired (`succeed`) has no canceller.
    let cancel_with = cancel_with.filter(|_| start.is_none());
    m.nodes[root].canceller = cancel_with;
    m.main.push(root);
    let trace: Rc<RefCell<Vec<String>>> = Rc::default();
    let (d, r) = match (start, cancel_with) {
        (Some(v), _) => {
            // `succeed(v)`: a bare result with no node, until something needs
            // one. Its stand-in Resolver answers as the root's would (it has
            // fired).
            m.fire(root, Ok(v));
            let (_, r) = Deferred::<i64>::new();
            r.callback(v).unwrap();
            (succeed(v), r)
        }
        (None, None) => Deferred::<i64>::new(),
        (None, Some(c)) => {
            let t = trace.clone();
            Deferred::with_canceller(move |r: &Resolver<i64>| {
                t.borrow_mut().push("canceller".to_owned());
                match c {
                    CancellerM::Noop => {}
                    CancellerM::Callback(v) => r.callback(v).unwrap(),
                    CancellerM::Errback => r.errback(Failure::msg("ce")).unwrap(),
                    CancellerM::Panic => panic!("model-panic in canceller"),
                }
            })
        }
    };
    let mut real = Real {
        d: Some(d),
        main: vec![r],
        inners: Rc::default(),
        trace,
    };
    for (id, op) in ops.into_iter().enumerate() {
        let t = real.trace.clone();
        match op {
            Op::AddCallback(k) => {
                m.add(LinkM::Cb(id, k));
                real.add(|d| {
                    d.add_callback(move |x| {
                        t.borrow_mut().push(format!("cb{id}:{x}"));
                        Ok(x + k)
                    })
                });
            }
            Op::AddFailing => {
                m.add(LinkM::Fail(id));
                real.add(|d| {
                    d.add_callback(move |x| {
                        t.borrow_mut().push(format!("fail{id}:{x}"));
                        Err::<i64, _>(Failure::msg(format!("f{id}")))
                    })
                });
            }
            Op::AddPanicking => {
                m.add(LinkM::Panic(id));
                real.add(|d| {
                    d.add_callback(move |x| -> Result<i64, Failure> {
                        t.borrow_mut().push(format!("panic{id}:{x}"));
                        panic!("model-panic {id}")
                    })
                });
            }
            Op::AddErrback(v) => {
                m.add(LinkM::Eb(id, v));
                real.add(|d| {
                    d.add_errback(move |f| {
                        t.borrow_mut().push(format!("eb{id}:{}", render(&f)));
                        Ok(v)
                    })
                });
            }
            Op::AddChainPending => {
                m.add(LinkM::ChainPending(id));
                // Weak: a chain must not keep the inner Deferreds alive (a
                // cycle would hide their unhandled failures).
                let slot = Rc::downgrade(&real.inners);
                real.add(|d| {
                    d.add_callback(move |x| {
                        t.borrow_mut().push(format!("chain{id}:{x}"));
                        let (inner, ir) = Deferred::<i64>::new();
                        // After the check, while its state is torn down, the
                        // list is gone: the Resolver is dropped, and the inner
                        // Deferred is abandoned, as a dropped one is.
                        if let Some(list) = slot.upgrade() {
                            list.borrow_mut().push(ir);
                        }
                        inner
                    })
                });
            }
            Op::AddChainReady(v) => {
                m.add(LinkM::ChainReady(id, v));
                real.add(|d| {
                    d.add_callback(move |x| {
                        t.borrow_mut().push(format!("ready{id}:{x}"));
                        succeed(v)
                    })
                });
            }
            Op::AddChainFailed => {
                m.add(LinkM::ChainFailed(id));
                real.add(|d| {
                    d.add_callback(move |x| {
                        t.borrow_mut().push(format!("failed{id}:{x}"));
                        fail::<i64>(Failure::msg(format!("r{id}")))
                    })
                });
            }
            Op::Fire(k, v) => {
                let k = k % m.main.len();
                let ok = m.fire(m.main[k], Ok(v));
                prop_assert_eq!(real.main[k].callback(v).is_ok(), ok, "fire {}", k);
            }
            Op::FireErr(k) => {
                let k = k % m.main.len();
                let ok = m.fire(m.main[k], Err(format!("e{id}")));
                let got = real.main[k].errback(Failure::msg(format!("e{id}")));
                prop_assert_eq!(got.is_ok(), ok, "errback {}", k);
            }
            Op::FireInner(k, _) | Op::FireInnerErr(k) if !m.inners.is_empty() => {
                let k = k % m.inners.len();
                let r: R = match op {
                    Op::FireInner(_, v) => Ok(v),
                    _ => Err(format!("i{id}")),
                };
                let ok = m.fire(m.inners[k], r.clone());
                let ir = real.inners.borrow()[k].clone();
                prop_assert_eq!(ir.resolve(r.map_err(Failure::msg)).is_ok(), ok);
            }
            Op::FireInner(..) | Op::FireInnerErr(_) => {}
            Op::Pause => {
                let c = m.cur();
                m.nodes[c].paused += 1;
                real.d.as_ref().unwrap().pause();
            }
            Op::Unpause => {
                let c = m.cur();
                let ok = m.nodes[c].paused > 0;
                if ok {
                    m.nodes[c].paused -= 1;
                    m.run(c);
                }
                prop_assert_eq!(real.d.as_ref().unwrap().unpause().is_ok(), ok);
            }
            Op::Cancel => {
                m.cancel(m.cur());
                real.d.as_ref().unwrap().cancel();
            }
            Op::ChainTo | Op::ChainToFired(_) => {
                let target = m.new_node();
                let (e, er) = Deferred::<i64>::new();
                if let Op::ChainToFired(v) = op {
                    m.fire(target, Ok(v));
                    er.callback(v).unwrap();
                }
                m.add(LinkM::Forward(target));
                m.main.push(target);
                real.d.take().unwrap().chain_deferred(&er);
                real.d = Some(e);
                real.main.push(er);
            }
        }
        prop_assert_eq!(&*real.trace.borrow(), &m.trace);
        let d = real.d.as_ref().unwrap();
        let c = &m.nodes[m.cur()];
        prop_assert_eq!(d.is_called(), c.called);
        prop_assert_eq!(d.is_paused(), c.paused > 0 || c.waiting.is_some());
        for (k, r) in real.main.iter().enumerate() {
            prop_assert_eq!(r.is_called(), m.nodes[m.main[k]].called, "main {}", k);
        }
        prop_assert_eq!(real.inners.borrow().len(), m.inners.len());
        for (k, r) in real.inners.borrow().iter().enumerate() {
            prop_assert_eq!(r.is_called(), m.nodes[m.inners[k]].called, "inner {}", k);
        }
    }
    let want = m.take_result(m.cur());
    let got = real
        .d
        .take()
        .unwrap()
        .result()
        .ok()
        .map(|r| r.map_err(|f| render(&f)));
    prop_assert_eq!(got, want);
    drop(real);
    m.drop_resolvers();
    let logged = LOGGED.with(|c| c.get());
    prop_assert_eq!(logged, (m.unhandled(), m.canceller_panics), "reports");
    Ok(())
}
