//! `DeferredList`, `gather_results` and `race` against their model.

use super::*;

// ---------------------------------------------------------------- lists

#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Which {
    List {
        one_ok: bool,
        one_err: bool,
        consume: bool,
    },
    Gather,
    Race,
}

/// What a combinator over inputs fires with, as text.
pub(crate) type Out = Option<Result<String, String>>;

pub(crate) struct ListModel {
    which: Which,
    fired: bool,
    out: Out,
    results: Vec<Option<Result<u32, String>>>,
    remaining: usize,
    unhandled: usize,
    /// Each input has its result.
    done: Vec<bool>,
    /// Cancelled inputs absorb one later fire (Twisted's rule).
    absorb: Vec<bool>,
    /// Inputs that had fired before the build: a cancel does nothing to them.
    ready: Vec<bool>,
}

impl ListModel {
    fn record(&mut self, i: usize, r: Result<u32, String>) {
        assert!(!self.done[i]);
        self.done[i] = true;
        let (one_ok, one_err, consume) = match self.which {
            Which::List {
                one_ok,
                one_err,
                consume,
            } => (one_ok, one_err, consume),
            Which::Gather => (false, true, false),
            Which::Race => {
                if self.fired {
                    return;
                }
                match r {
                    Ok(v) => {
                        self.fire(Ok(format!("({i}, {v})")));
                        self.cancel_inputs();
                    }
                    Err(e) => {
                        self.results[i] = Some(Err(e));
                        self.remaining -= 1;
                        if self.remaining == 0 {
                            let all: Vec<String> = self
                                .results
                                .iter()
                                .map(|r| r.clone().unwrap().unwrap_err())
                                .collect();
                            self.fire(Err(format!("Group({all:?})")));
                        }
                    }
                }
                return;
            }
        };
        if self.fired {
            if r.is_err() && !consume {
                self.unhandled += 1;
            }
            return;
        }
        match r {
            Ok(v) if one_ok => {
                if !consume {
                    self.unhandled += self.results.iter().flatten().filter(|r| r.is_err()).count();
                }
                self.fire(Ok(format!("First({i}, {v})")));
            }
            Err(e) if one_err => self.fire(Err(format!("FirstError({i}, {e})"))),
            r => {
                self.results[i] = Some(r);
                self.remaining -= 1;
                if self.remaining == 0 {
                    let all: Vec<Result<u32, String>> =
                        self.results.iter().map(|r| r.clone().unwrap()).collect();
                    self.fire(Ok(match self.which {
                        Which::Gather => format!(
                            "{:?}",
                            all.iter().map(|r| *r.as_ref().unwrap()).collect::<Vec<_>>()
                        ),
                        _ => format!("All({all:?})"),
                    }));
                }
            }
        }
    }
    fn fire(&mut self, out: Result<String, String>) {
        self.fired = true;
        self.out = Some(out);
    }
    fn cancel_inputs(&mut self) {
        for i in 0..self.done.len() {
            if !self.done[i] && !self.ready[i] {
                self.absorb[i] = true;
                self.record(i, Err("Cancelled".into()));
            }
        }
    }
}

pub(crate) fn lists(input: &mut Input<'_>) {
    let b = input.byte();
    let which = match b % 4 {
        0 | 1 => Which::List {
            one_ok: b & 4 != 0,
            one_err: b & 8 != 0,
            consume: b & 16 != 0,
        },
        2 => Which::Gather,
        _ => Which::Race,
    };
    let n = input.byte() as usize % 6;
    let mut inputs = Vec::new();
    let mut resolvers: Vec<Option<Resolver<u32>>> = Vec::new();
    let mut m = ListModel {
        which,
        fired: false,
        out: None,
        results: vec![None; n],
        remaining: n,
        unhandled: 0,
        done: vec![false; n],
        absorb: vec![false; n],
        ready: vec![false; n],
    };
    let mut prefired = Vec::new();
    for i in 0..n {
        match input.byte() % 4 {
            0 => {
                inputs.push(succeed(i as u32 * 10));
                prefired.push((i, Ok(i as u32 * 10)));
                m.ready[i] = true;
                resolvers.push(None);
            }
            1 => {
                inputs.push(fail(Failure::msg(format!("e{i}"))));
                prefired.push((i, Err(format!("e{i}"))));
                m.ready[i] = true;
                resolvers.push(None);
            }
            _ => {
                let (d, r) = Deferred::new();
                inputs.push(d);
                resolvers.push(Some(r));
            }
        }
    }
    let unhandled = Rc::new(Cell::new(0));
    let u = unhandled.clone();
    let old = set_unhandled_failure_hook(Some(Box::new(move |_| u.set(u.get() + 1))));
    let out: Rc<RefCell<Out>> = Rc::default();
    let o = out.clone();
    let d = match which {
        Which::List {
            one_ok,
            one_err,
            consume,
        } => DeferredList::new(inputs)
            .fire_on_one_callback(one_ok)
            .fire_on_one_errback(one_err)
            .consume_errors(consume)
            .build()
            .map(|r| match r {
                ListResult::All(all) => format!(
                    "All({:?})",
                    all.iter()
                        .map(|r| r.as_ref().map(|v| *v).map_err(name))
                        .collect::<Vec<_>>()
                ),
                ListResult::First { index, value } => format!("First({index}, {value})"),
                _ => unreachable!("a ListResult this target does not know"),
            }),
        Which::Gather => gather_results(inputs).map(|v| format!("{v:?}")),
        Which::Race => race(inputs).map(|(i, v)| format!("({i}, {v})")),
    };
    let d = d.add_both(move |r: Result<String, Failure>| {
        assert!(o.borrow().is_none(), "fired twice");
        *o.borrow_mut() = Some(r.map_err(|f| name(&f)));
        Ok::<(), Failure>(())
    });
    // At build, inputs that had fired record in input order.
    for (i, r) in prefired {
        m.record(i, r);
    }
    if n == 0 {
        match which {
            Which::List { one_ok: true, .. } => m.fire(Err("Abandoned".into())),
            // Nothing can fire it: `Abandoned` at once (Twisted's waits forever).
            Which::Race => m.fire(Err("Abandoned".into())),
            Which::Gather => m.fire(Ok("[]".into())),
            Which::List { .. } => m.fire(Ok("All([])".into())),
        }
    }
    let mut steps = 0;
    while !input.0.is_empty() && steps < 40 && n > 0 {
        steps += 1;
        let (op, k) = (input.byte(), input.byte() as usize % n);
        match op % 8 {
            0..=2 => {
                if let Some(r) = &resolvers[k] {
                    let v = 100 + op as u32;
                    if r.callback(v).is_ok() && !std::mem::take(&mut m.absorb[k]) {
                        m.record(k, Ok(v));
                    }
                }
            }
            3..=4 => {
                if let Some(r) = &resolvers[k] {
                    if r.errback(Failure::msg(format!("f{k}"))).is_ok()
                        && !std::mem::take(&mut m.absorb[k])
                    {
                        m.record(k, Err(format!("f{k}")));
                    }
                }
            }
            5 => {
                // A dropped resolver: the input fails with `Abandoned`.
                if let Some(r) = resolvers[k].take() {
                    let pending = !r.is_called();
                    drop(r);
                    if pending {
                        m.record(k, Err("Abandoned".into()));
                    }
                }
            }
            6 => {
                d.cancel();
                if !m.fired && which == Which::Race {
                    // Decided: what the inputs do now is ignored.
                    for k in 0..n {
                        m.absorb[k] |= !m.done[k];
                        m.done[k] = true;
                    }
                    m.fire(Err("Cancelled".into()));
                } else if !m.fired {
                    m.cancel_inputs();
                    if !m.fired {
                        m.fire(Err("Cancelled".into()));
                    }
                }
            }
            _ => {}
        }
        assert_eq!(*out.borrow(), m.out, "the result");
    }
    assert_eq!(*out.borrow(), m.out, "the result");
    // The resolvers left are dropped in order: their inputs are abandoned.
    for (k, r) in resolvers.iter_mut().enumerate() {
        if let Some(r) = r.take() {
            let pending = !r.is_called() && !m.done[k];
            drop(r);
            if pending {
                m.record(k, Err("Abandoned".into()));
            }
        }
    }
    drop(d);
    set_unhandled_failure_hook(old);
    assert_eq!(unhandled.get(), m.unhandled, "failures reported unhandled");
}
