//! Model test of the turn's ordering rules, through the public API.
//!
//! Random programs of callbacks that schedule more callbacks (`call_soon`,
//! zero-delay and far timers, `Remote` calls made on the loop thread) and
//! cancel earlier ones run turn by turn (`run_once`) against a model of the
//! six steps: each turn runs exactly the snapshot of the ready queue taken when
//! step 6 began — what was queued before the turn, then remote calls, then due
//! timers — and everything scheduled meanwhile waits for the next turn. After
//! every turn the real loop must have run the same callbacks in the same order,
//! agree on every handle's state and on `cancel`'s answers, and report the
//! same `ready_len` (cancelled entries stay until skipped) and `timer_count`.
//! Cases: `PROPTEST_CASES`, else the count below (RELIABILITY.md).

mod util;

use deferloop::{EventLoop, Handle, HandleState, Loop};
use proptest::prelude::*;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::time::Duration;

/// What a callback does when it runs (each scheduling act creates a task whose
/// own acts are the next unused script).
#[derive(Debug, Clone, Copy)]
enum Act {
    Soon,
    /// `call_later(0)`: due at the next turn's step 5.
    Later0,
    /// `call_later(1 hour)`: never due in this test.
    LaterFar,
    /// `Remote::call_soon_threadsafe`, from the loop thread: step 4 of the next turn.
    Remote,
    /// Cancel the `k`-th task created so far (modulo).
    Cancel(usize),
}

fn act() -> impl Strategy<Value = Act> {
    prop_oneof![
        4 => Just(Act::Soon),
        2 => Just(Act::Later0),
        1 => Just(Act::LaterFar),
        2 => Just(Act::Remote),
        3 => any::<usize>().prop_map(Act::Cancel),
    ]
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    /// Task 0: the test body, run before the first turn (no handle).
    Body,
    Soon,
    Later0,
    Far,
    Remote,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum St {
    Pending,
    Cancelled,
    Done,
}

/// The model: where each task is, and the turn's three sources.
struct Model {
    scripts: Vec<Vec<Act>>,
    kinds: Vec<Kind>,
    states: Vec<St>,
    /// The ready queue: task ids, `true` once cancelled (a tombstone).
    ready: VecDeque<(usize, bool)>,
    /// Zero-delay timers not yet moved to the ready queue, in creation order.
    timers: Vec<usize>,
    far: usize,
    remote: Vec<usize>,
    log: Vec<String>,
}

impl Model {
    fn new(scripts: Vec<Vec<Act>>) -> Model {
        Model {
            scripts,
            // Task 0 is the test body itself, run before the first turn.
            kinds: vec![Kind::Body],
            states: vec![St::Done],
            ready: VecDeque::new(),
            timers: Vec::new(),
            far: 0,
            remote: Vec::new(),
            log: Vec::new(),
        }
    }

    fn perform(&mut self, me: usize) {
        let acts = self.scripts.get(me).cloned().unwrap_or_default();
        for a in acts {
            match a {
                Act::Cancel(k) => {
                    let k = k % self.kinds.len();
                    if matches!(self.kinds[k], Kind::Body | Kind::Remote) {
                        continue; // no handle
                    }
                    let hit = self.cancel(k);
                    self.log.push(format!("c{k}:{hit}"));
                }
                a => {
                    let id = self.kinds.len();
                    let kind = match a {
                        Act::Soon => Kind::Soon,
                        Act::Later0 => Kind::Later0,
                        Act::LaterFar => Kind::Far,
                        _ => Kind::Remote,
                    };
                    self.kinds.push(kind);
                    self.states.push(St::Pending);
                    match kind {
                        Kind::Soon => self.ready.push_back((id, false)),
                        Kind::Later0 => self.timers.push(id),
                        Kind::Far => self.far += 1,
                        Kind::Remote | Kind::Body => self.remote.push(id),
                    }
                }
            }
        }
    }

    fn cancel(&mut self, k: usize) -> bool {
        if self.states[k] != St::Pending {
            return false;
        }
        self.states[k] = St::Cancelled;
        if let Some(e) = self.ready.iter_mut().find(|e| e.0 == k) {
            e.1 = true;
        } else if let Some(i) = self.timers.iter().position(|&t| t == k) {
            self.timers.remove(i);
        } else {
            assert_eq!(self.kinds[k], Kind::Far);
            self.far -= 1;
        }
        true
    }

    fn has_work(&self) -> bool {
        !self.ready.is_empty() || !self.timers.is_empty() || !self.remote.is_empty()
    }

    /// One turn: step 4 (remote calls), step 5 (due timers), step 6 (snapshot).
    fn turn(&mut self) {
        for id in std::mem::take(&mut self.remote) {
            self.ready.push_back((id, false));
        }
        for id in std::mem::take(&mut self.timers) {
            self.ready.push_back((id, false));
        }
        let n = self.ready.len();
        for _ in 0..n {
            let (id, cancelled) = self.ready.pop_front().unwrap();
            if cancelled {
                continue;
            }
            self.states[id] = St::Done;
            self.log.push(format!("r{id}"));
            self.perform(id);
        }
    }

    fn timer_count(&self) -> usize {
        self.timers.len() + self.far
    }
}

/// The real side: every task's handle (remote calls have none) and the log.
#[derive(Default)]
struct Real {
    scripts: Vec<Vec<Act>>,
    handles: RefCell<Vec<Option<Handle>>>,
    log: RefCell<Vec<String>>,
}

fn perform(lp: &Loop, real: &Rc<Real>, me: usize) {
    let acts = real.scripts.get(me).cloned().unwrap_or_default();
    for a in acts {
        if let Act::Cancel(k) = a {
            let k = k % real.handles.borrow().len();
            let h = real.handles.borrow_mut()[k].take();
            if let Some(h) = h {
                let hit = h.cancel();
                real.log.borrow_mut().push(format!("c{k}:{hit}"));
                real.handles.borrow_mut()[k] = Some(h);
            }
            continue;
        }
        let id = real.handles.borrow().len();
        real.handles.borrow_mut().push(None);
        let r = real.clone();
        let task = move |lp: &Loop| {
            r.log.borrow_mut().push(format!("r{id}"));
            perform(lp, &r, id);
        };
        let h = match a {
            Act::Soon => Some(lp.call_soon(task).unwrap()),
            Act::Later0 => Some(lp.call_later(Duration::ZERO, task).unwrap()),
            Act::LaterFar => Some(lp.call_later(Duration::from_secs(3600), task).unwrap()),
            _ => {
                // A `Send` closure cannot carry the `Rc`s: it names the task,
                // and the loop thread's registry runs it.
                lp.remote()
                    .call_soon_threadsafe(move |lp| REGISTRY.with(|g| run_registered(lp, g, id)))
                    .unwrap();
                REGISTRY.with(|g| g.borrow_mut().push((id, Box::new(task))));
                None
            }
        };
        real.handles.borrow_mut()[id] = h;
    }
}

type Registered = Vec<(usize, Box<dyn FnOnce(&Loop)>)>;

thread_local! {
    static REGISTRY: RefCell<Registered> = const { RefCell::new(Vec::new()) };
}

fn run_registered(lp: &Loop, reg: &RefCell<Registered>, id: usize) {
    let i = reg.borrow().iter().position(|e| e.0 == id).unwrap();
    let (_, f) = reg.borrow_mut().remove(i);
    f(lp);
}

fn check(scripts: Vec<Vec<Act>>) -> Result<(), TestCaseError> {
    REGISTRY.with(|g| g.borrow_mut().clear());
    let ev = EventLoop::new().unwrap();
    let mut m = Model::new(scripts.clone());
    let real = Rc::new(Real {
        scripts,
        handles: RefCell::new(vec![None]),
        log: RefCell::default(),
    });
    m.perform(0);
    perform(&ev, &real, 0);
    let mut turns = 0;
    loop {
        prop_assert_eq!(&*real.log.borrow(), &m.log, "after {} turns", turns);
        prop_assert_eq!(ev.ready_len(), m.ready.len(), "ready_len");
        prop_assert_eq!(ev.timer_count(), m.timer_count(), "timer_count");
        for (id, h) in real.handles.borrow().iter().enumerate() {
            if let Some(h) = h {
                let want = match m.states[id] {
                    St::Pending => HandleState::Pending,
                    St::Cancelled => HandleState::Cancelled,
                    St::Done => HandleState::Done,
                };
                prop_assert_eq!(h.state(), want, "state of task {}", id);
            }
        }
        if !m.has_work() {
            break;
        }
        m.turn();
        ev.run_once().unwrap();
        turns += 1;
    }
    prop_assert_eq!(REGISTRY.with(|g| g.borrow().len()), 0);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: util::cases(2000),
        failure_persistence: None,
        .. ProptestConfig::default()
    })]

    #[test]
    fn each_turn_runs_the_snapshot_taken_when_step_6_began(
        scripts in proptest::collection::vec(proptest::collection::vec(act(), 0..4), 1..40)
    ) {
        check(scripts)?;
    }
}
