//! `map_limit`, `loop_fn` and `scope` against what their documentation says.

use super::*;

// ---------------------------------------------------------------- map_limit

pub(crate) fn mapping(input: &mut Input<'_>) {
    let b = input.byte();
    let limit = 1 + b as usize % 4;
    let n = input.byte() as usize % 10;
    // Each item: 0 answers at once, 1 fails at once, else waits.
    let plan: Vec<u8> = (0..n).map(|_| input.byte() % 4).collect();
    let started: Rc<RefCell<Vec<usize>>> = Rc::default();
    let flying: Rc<RefCell<Vec<(usize, Resolver<u32>)>>> = Rc::default();
    let max_flying = Rc::new(Cell::new(0));
    let (s, fl, mf, p) = (
        started.clone(),
        flying.clone(),
        max_flying.clone(),
        plan.clone(),
    );
    let out: Rc<RefCell<Out>> = Rc::default();
    let o = out.clone();
    let d = map_limit(0..n, limit, move |i| {
        s.borrow_mut().push(i);
        match p[i] {
            0 => succeed(i as u32),
            1 => fail(Failure::msg(format!("e{i}"))),
            _ => {
                let (d, r) = Deferred::new();
                fl.borrow_mut().push((i, r));
                let waiting = fl.borrow().iter().filter(|(_, r)| !r.is_called()).count();
                mf.set(mf.get().max(waiting));
                d
            }
        }
    })
    .add_both(move |r: Result<Vec<u32>, Failure>| {
        *o.borrow_mut() = Some(r.map(|v| format!("{v:?}")).map_err(|f| name(&f)));
        Ok::<(), Failure>(())
    });
    // The model.
    let mut next = 0;
    let mut in_flight: Vec<usize> = Vec::new();
    let mut values = vec![None; n];
    let mut first: Option<String> = None;
    let mut stopped = false;
    let mut cancelled = false;
    let mut model_started = Vec::new();
    let mut m_out: Out = None;
    let unhandled = Rc::new(Cell::new(0));
    let u = unhandled.clone();
    let old = set_unhandled_failure_hook(Some(Box::new(move |_| u.set(u.get() + 1))));
    let mut steps = 0;
    loop {
        // Fill, as the model sees it.
        loop {
            if stopped || in_flight.len() >= limit || next >= n {
                break;
            }
            let i = next;
            next += 1;
            model_started.push(i);
            match plan[i] {
                0 => values[i] = Some(i as u32),
                1 => {
                    first = Some(format!("FirstError({i}, e{i})"));
                    stopped = true;
                }
                _ => in_flight.push(i),
            }
        }
        if stopped {
            in_flight.clear(); // cancelled
        }
        if m_out.is_none() && in_flight.is_empty() && (stopped || next >= n) {
            m_out = Some(if cancelled {
                Err("Cancelled".into())
            } else if let Some(f) = &first {
                Err(f.clone())
            } else {
                Ok(format!(
                    "{:?}",
                    values.iter().map(|v| v.unwrap()).collect::<Vec<u32>>()
                ))
            });
        }
        assert_eq!(*started.borrow(), model_started, "items started, in order");
        assert!(max_flying.get() <= limit, "more than {limit} in flight");
        assert_eq!(*out.borrow(), m_out, "the result");
        if input.0.is_empty() || steps >= 40 || m_out.is_some() {
            break;
        }
        steps += 1;
        let (op, k) = (input.byte(), input.byte() as usize);
        if op % 8 == 7 {
            d.cancel();
            if m_out.is_none() {
                cancelled = true;
                stopped = true;
            }
            continue;
        }
        if in_flight.is_empty() {
            continue;
        }
        let i = in_flight.remove(k % in_flight.len());
        let r = {
            let fl = flying.borrow();
            let (_, r) = fl.iter().find(|(j, _)| *j == i).expect("in flight");
            r.clone()
        };
        if op & 1 == 0 {
            r.callback(1000 + i as u32).expect("pending");
            values[i] = Some(1000 + i as u32);
        } else {
            r.errback(Failure::msg(format!("f{i}"))).expect("pending");
            if !stopped {
                first = Some(format!("FirstError({i}, f{i})"));
                stopped = true;
            }
        }
    }
    let left = std::mem::take(&mut *flying.borrow_mut());
    drop(left);
    drop(d);
    set_unhandled_failure_hook(old);
    assert_eq!(unhandled.get(), 0, "failures reported unhandled");
}

// ---------------------------------------------------------------- loop_fn

pub(crate) fn looping(input: &mut Input<'_>) {
    // Step k: 0 continue at once, 1 break, 2 fail, else wait.
    let plan: Vec<u8> = (0..input.byte() as usize % 12)
        .map(|_| input.byte() % 5)
        .collect();
    let ran = Rc::new(Cell::new(0usize));
    let waiting: Rc<RefCell<Option<Resolver<ControlFlow<usize, usize>>>>> = Rc::default();
    let (r2, w2, p) = (ran.clone(), waiting.clone(), plan.clone());
    let out: Rc<RefCell<Out>> = Rc::default();
    let o = out.clone();
    let d = loop_fn(0usize, move |k| {
        r2.set(r2.get() + 1);
        assert_eq!(k + 1, r2.get(), "state handed on");
        let step = p.get(k).copied().unwrap_or(1);
        let d: Deferred<ControlFlow<usize, usize>> = match step {
            0 | 3 => succeed(ControlFlow::Continue(k + 1)),
            1 => succeed(ControlFlow::Break(k)),
            2 => fail(Failure::msg(format!("e{k}"))),
            _ => {
                let (d, r) = Deferred::new();
                *w2.borrow_mut() = Some(r);
                d
            }
        };
        d
    })
    .add_both(move |r: Result<usize, Failure>| {
        *o.borrow_mut() = Some(r.map(|v| v.to_string()).map_err(|f| name(&f)));
        Ok::<(), Failure>(())
    });
    let mut k = 0; // the model: the step running or waiting
    let mut m_out: Out = None;
    let advance = |k: &mut usize, m_out: &mut Out| loop {
        match plan.get(*k).copied().unwrap_or(1) {
            0 | 3 => *k += 1,
            1 => return *m_out = Some(Ok(k.to_string())),
            2 => return *m_out = Some(Err(format!("e{k}"))),
            _ => return,
        }
    };
    advance(&mut k, &mut m_out);
    while m_out.is_none() && !input.0.is_empty() {
        let op = input.byte();
        let r = waiting.borrow_mut().take().expect("a step waits");
        match op % 4 {
            0 => {
                r.callback(ControlFlow::Continue(k + 1)).unwrap();
                k += 1;
                advance(&mut k, &mut m_out);
            }
            1 => {
                r.callback(ControlFlow::Break(k + 50)).unwrap();
                m_out = Some(Ok((k + 50).to_string()));
            }
            2 => {
                r.errback(Failure::msg("late")).unwrap();
                m_out = Some(Err("late".into()));
            }
            _ => {
                d.cancel();
                assert!(r.is_called(), "the waiting step is cancelled");
                m_out = Some(Err("Cancelled".into()));
            }
        }
        assert_eq!(*out.borrow(), m_out);
    }
    assert_eq!(*out.borrow(), m_out);
    assert_eq!(ran.get(), k + 1, "steps run");
    let left = waiting.borrow_mut().take();
    drop(left);
}

// ---------------------------------------------------------------- scope

pub(crate) fn scoping(input: &mut Input<'_>) {
    let n = input.byte() as usize % 6;
    let body_fails = input.byte() % 8 == 0;
    let children: Rc<RefCell<Vec<Resolver<u32>>>> = Rc::default();
    let c = children.clone();
    let out: Rc<RefCell<Out>> = Rc::default();
    let o = out.clone();
    let d = scope(move |s| {
        for _ in 0..n {
            let (d, r) = Deferred::<u32>::new();
            s.spawn(d).expect("the scope runs");
            c.borrow_mut().push(r);
        }
        if body_fails {
            Err(Failure::msg("body"))
        } else {
            Ok(7u32)
        }
    })
    .add_both(move |r: Result<u32, Failure>| {
        *o.borrow_mut() = Some(r.map(|v| v.to_string()).map_err(|f| name(&f)));
        Ok::<(), Failure>(())
    });
    let mut pending: Vec<bool> = vec![true; n];
    let mut m_out: Out = None;
    let mut failures: Vec<String> = Vec::new();
    let mut cancelled = false;
    if body_fails {
        failures.push("body".into());
        pending.iter_mut().for_each(|p| *p = false);
    }
    loop {
        if m_out.is_none() && pending.iter().all(|p| !p) {
            m_out = Some(if !failures.is_empty() {
                Err(format!("Scope({failures:?})"))
            } else if cancelled {
                Err("Cancelled".into())
            } else {
                Ok("7".into())
            });
        }
        assert_eq!(*out.borrow(), m_out, "the scope's result");
        if m_out.is_some() || input.0.is_empty() {
            break;
        }
        let (op, k) = (input.byte(), input.byte() as usize % n.max(1));
        let r = children.borrow()[k].clone();
        match op % 4 {
            0 | 1 => {
                if r.callback(k as u32).is_ok() {
                    pending[k] = false;
                }
            }
            2 => {
                if r.errback(Failure::msg(format!("f{k}"))).is_ok() {
                    pending[k] = false;
                    failures.push(format!("f{k}"));
                    pending.iter_mut().for_each(|p| *p = false); // cancelled
                }
            }
            _ => {
                d.cancel();
                cancelled = true;
                pending.iter_mut().for_each(|p| *p = false);
            }
        }
        assert_eq!(
            children.borrow().iter().filter(|r| !r.is_called()).count(),
            pending.iter().filter(|p| **p).count(),
            "children still running"
        );
    }
    children.borrow_mut().clear();
}
