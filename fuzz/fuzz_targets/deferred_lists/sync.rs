//! `DeferredLock`/`DeferredSemaphore` and `DeferredQueue` against their models.

use super::*;

// ---------------------------------------------------------------- locks

#[derive(Default)]
pub(crate) struct LockModel {
    tokens: usize,
    waiting: VecDeque<usize>,
    held: Vec<usize>,
    grants: Vec<usize>,
    auto: Vec<bool>,
}

impl LockModel {
    fn grant(&mut self, id: usize) {
        self.grants.push(id);
        if self.auto[id] {
            self.release(id);
        } else {
            self.held.push(id);
        }
    }
    fn release(&mut self, id: usize) {
        self.held.retain(|&h| h != id);
        match self.waiting.pop_front() {
            Some(w) => self.grant(w),
            None => self.tokens += 1,
        }
    }
}

pub(crate) fn locks(input: &mut Input<'_>) {
    let b = input.byte();
    let limit = 1 + b as usize % 3;
    let use_lock = limit == 1 && b & 4 != 0;
    let lock = DeferredLock::new();
    let sem = DeferredSemaphore::new(NonZeroUsize::new(limit).unwrap());
    let acquire = || {
        if use_lock {
            lock.acquire()
        } else {
            sem.acquire()
        }
    };
    let guards: Rc<RefCell<Vec<Option<LockGuard>>>> = Rc::default();
    let grants: Rc<RefCell<Vec<usize>>> = Rc::default();
    let cancelled: Rc<RefCell<Vec<usize>>> = Rc::default();
    let mut handles: Vec<Deferred<()>> = Vec::new();
    let mut m = LockModel {
        tokens: limit,
        ..LockModel::default()
    };
    let mut steps = 0;
    while !input.0.is_empty() && steps < 100 {
        steps += 1;
        let (op, k) = (input.byte(), input.byte() as usize);
        match op % 3 {
            0 => {
                let id = handles.len();
                let auto = op & 8 != 0;
                m.auto.push(auto);
                guards.borrow_mut().push(None);
                let (g, gr, c) = (guards.clone(), grants.clone(), cancelled.clone());
                let d = acquire().add_both(move |r: Result<LockGuard, Failure>| {
                    match r {
                        Ok(guard) => {
                            gr.borrow_mut().push(id);
                            if !auto {
                                g.borrow_mut()[id] = Some(guard);
                            }
                        }
                        Err(f) => {
                            assert!(f.check::<Cancelled>(), "{f}");
                            c.borrow_mut().push(id);
                        }
                    }
                    Ok::<(), Failure>(())
                });
                handles.push(d);
                if m.tokens > 0 {
                    m.tokens -= 1;
                    m.grant(id);
                } else {
                    m.waiting.push_back(id);
                }
            }
            1 if !m.held.is_empty() => {
                let id = m.held[k % m.held.len()];
                let guard = guards.borrow_mut()[id].take().expect("held");
                if k & 1 == 0 {
                    drop(guard);
                } else {
                    guard.release();
                }
                m.release(id);
            }
            _ if !handles.is_empty() => {
                let id = k % handles.len();
                if let Some(at) = m.waiting.iter().position(|&w| w == id) {
                    m.waiting.remove(at);
                    assert!(!cancelled.borrow().contains(&id));
                    handles[id].cancel();
                    assert_eq!(cancelled.borrow().last(), Some(&id), "cancel fires at once");
                } else {
                    handles[id].cancel(); // fired: nothing happens
                }
            }
            _ => {}
        }
        assert_eq!(*grants.borrow(), m.grants, "grants, FIFO");
        let (tokens, waiting) = if use_lock {
            assert_eq!(lock.is_locked(), m.tokens == 0);
            (m.tokens, lock.waiting())
        } else {
            (sem.tokens(), sem.waiting())
        };
        assert_eq!((tokens, waiting), (m.tokens, m.waiting.len()));
    }
    // Break the cycles (a waiter's callback holds the guards, a guard the
    // semaphore): no more waiters, then no guards.
    handles.iter().for_each(Deferred::cancel);
    let held = std::mem::take(&mut *guards.borrow_mut());
    drop(held);
}

// ---------------------------------------------------------------- queue

#[derive(Default)]
pub(crate) struct QueueModel {
    size: Option<usize>,
    backlog: Option<usize>,
    stored: VecDeque<u32>,
    waiting: VecDeque<usize>,
    /// Which getter got which value.
    got: Vec<(usize, u32)>,
    /// The outcome of every put, in order.
    puts: Vec<(u32, bool)>,
    next: u32,
    again: Vec<bool>,
}

impl QueueModel {
    fn put(&mut self) {
        let v = self.next;
        self.next += 1;
        match self.waiting.pop_front() {
            Some(w) => {
                self.puts.push((v, true));
                self.receive(w, v);
            }
            None if self.size.is_none_or(|s| self.stored.len() < s) => {
                self.puts.push((v, true));
                self.stored.push_back(v);
            }
            None => self.puts.push((v, false)),
        }
    }
    fn receive(&mut self, id: usize, v: u32) {
        self.got.push((id, v));
        if self.again[id] {
            self.put();
        }
    }
}

pub(crate) fn queue(input: &mut Input<'_>) {
    let b = input.byte();
    let mut m = QueueModel {
        size: small_limit(b),
        backlog: small_limit(b >> 2),
        ..QueueModel::default()
    };
    let q: DeferredQueue<u32> = new_queue(m.size, m.backlog);
    let next = Rc::new(Cell::new(0u32));
    let got: Rc<RefCell<Vec<(usize, u32)>>> = Rc::default();
    let puts: Rc<RefCell<Vec<(u32, bool)>>> = Rc::default();
    let put = {
        let (next, puts) = (next.clone(), puts.clone());
        move |q: &DeferredQueue<u32>| {
            let v = next.get();
            next.set(v + 1);
            let ok = q.put(v).is_ok();
            puts.borrow_mut().push((v, ok));
        }
    };
    let mut handles: Vec<Deferred<()>> = Vec::new();
    let mut steps = 0;
    while !input.0.is_empty() && steps < 100 {
        steps += 1;
        let (op, k) = (input.byte(), input.byte() as usize);
        match op % 3 {
            0 => {
                put(&q);
                m.put();
            }
            1 => {
                let id = handles.len();
                let again = op & 8 != 0;
                let underflow =
                    m.stored.is_empty() && !m.backlog.is_none_or(|bl| m.waiting.len() < bl);
                match q.get() {
                    Err(_) => assert!(underflow, "underflow"),
                    Ok(d) => {
                        assert!(!underflow, "no underflow");
                        m.again.push(again);
                        let (g, q2, put) = (got.clone(), q.clone(), put.clone());
                        handles.push(d.add_both(move |r: Result<u32, Failure>| {
                            if let Ok(v) = r {
                                g.borrow_mut().push((id, v));
                                if again {
                                    put(&q2);
                                }
                            }
                            Ok::<(), Failure>(())
                        }));
                        match m.stored.pop_front() {
                            Some(v) => m.receive(id, v),
                            None => m.waiting.push_back(id),
                        }
                    }
                }
            }
            _ if !handles.is_empty() => {
                let id = k % handles.len();
                m.waiting.retain(|&w| w != id);
                handles[id].cancel();
            }
            _ => {}
        }
        assert_eq!(*got.borrow(), m.got, "who got what");
        // (A put from a getter's callback ends inside the outer put.)
        let mut seen = puts.borrow().clone();
        seen.sort_unstable();
        let mut want = m.puts.clone();
        want.sort_unstable();
        assert_eq!(seen, want, "puts taken or refused");
        assert_eq!((q.len(), q.waiting()), (m.stored.len(), m.waiting.len()));
    }
    // Break the cycle (a waiting getter's callback holds the queue).
    handles.iter().for_each(Deferred::cancel);
    // No value lost or doubled: each was refused, stored, or got once.
    let mut all: Vec<u32> = m.got.iter().map(|g| g.1).collect();
    all.extend(m.stored.iter());
    all.extend(m.puts.iter().filter(|p| !p.1).map(|p| p.0));
    all.sort_unstable();
    assert_eq!(all, (0..next.get()).collect::<Vec<_>>());
}
