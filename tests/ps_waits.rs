//! The Deferred registry (`deferloop::ps`): each kind of wait it tags, the
//! edges it reads or records, and that it records nothing while off. Each
//! test runs on its own thread, and the registry is per thread.

use deferloop::deferred::{map_limit, scope, DeferredLock, DeferredQueue, DeferredSemaphore};
use deferloop::ps::{self, PendingState, Wait, WaitsOn};
use deferloop::{defer_later, race, Deferred, DeferredList, EventLoop};
use std::num::NonZeroUsize;
use std::time::Duration;

#[path = "util/ps.rs"]
mod ps_util;
use ps_util::{at_line, manual};

#[test]
fn off_by_default_nothing_is_listed() {
    let ev = EventLoop::new().unwrap();
    assert!(!ps::is_enabled());
    let (_d, _r) = Deferred::<u8>::new();
    let r = ps::snapshot(&ev);
    assert!(!r.registry_on);
    assert!(r.deferreds.is_empty());
    assert!(r.ps().contains("registry is off"));
}

#[test]
fn a_plain_deferred_is_listed_with_site_age_and_no_wait() {
    let (ev, clock) = manual();
    let line = line!() + 1;
    let (d, r) = Deferred::<u8>::new();
    clock.advance(Duration::from_secs(3));
    let rep = ps::snapshot(&ev);
    let p = at_line(&rep, file!(), line);
    assert_eq!(p.state, PendingState::Unfired);
    assert_eq!(p.age, Duration::from_secs(3));
    assert!(p.waits_on.is_empty());
    r.callback(1).unwrap();
    assert!(
        ps::snapshot(&ev).deferreds.is_empty(),
        "a fired Deferred is not pending"
    );
    drop(d);
}

#[test]
fn a_timer_is_tagged_with_its_deadline() {
    let (ev, clock) = manual();
    let line = line!() + 1;
    let d = defer_later(&ev, Duration::from_secs(10), || Ok(1u8));
    clock.advance(Duration::from_secs(4));
    let rep = ps::snapshot(&ev);
    let p = at_line(&rep, file!(), line);
    assert_eq!(
        p.waits_on,
        vec![WaitsOn::Leaf(Wait::Timer {
            deadline: rep.now + Duration::from_secs(6)
        })]
    );
    assert!(rep.ps().contains("timer due in 6.0s"), "{}", rep.ps());
    drop(d);
}

#[test]
fn a_timeout_is_shown_beside_what_is_waited_on() {
    let (ev, _clock) = manual();
    let line = line!() + 1;
    let (d, _r) = Deferred::<u8>::new();
    let d = d.add_timeout(Duration::from_secs(30), &ev);
    let rep = ps::snapshot(&ev);
    assert_eq!(
        at_line(&rep, file!(), line).timeout_at,
        Some(rep.now + Duration::from_secs(30))
    );
    assert!(rep.ps().contains("(times out in 30.0s)"), "{}", rep.ps());
    drop(d);
}

#[test]
fn a_thread_pool_job_is_tagged() {
    let (ev, _clock) = manual();
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let line = line!() + 1;
    let d = ev.defer_to_thread(move || rx.recv().is_ok());
    let rep = ps::snapshot(&ev);
    assert_eq!(
        at_line(&rep, file!(), line).waits_on,
        vec![WaitsOn::Leaf(Wait::ThreadJob)]
    );
    tx.send(()).unwrap();
    assert!(ev.run_until(d).unwrap());
}

#[test]
fn lock_semaphore_and_queue_turns_name_their_kind_and_site() {
    let (ev, _clock) = manual();
    let lock_line = line!() + 1;
    let lock = DeferredLock::new();
    let sem_line = line!() + 1;
    let sem = DeferredSemaphore::new(NonZeroUsize::new(1).unwrap());
    let q_line = line!() + 1;
    let q = DeferredQueue::<u8>::unbounded();
    let held = (lock.acquire(), sem.acquire());
    let (l_line, lw) = (line!(), lock.acquire());
    let (s_line, sw) = (line!(), sem.acquire());
    let (g_line, gw) = (line!(), q.get().unwrap());
    let rep = ps::snapshot(&ev);
    for (line, kind, made) in [
        (l_line, "lock", lock_line),
        (s_line, "semaphore", sem_line),
        (g_line, "queue", q_line),
    ] {
        match &at_line(&rep, file!(), line).waits_on[..] {
            [WaitsOn::Leaf(Wait::Turn {
                kind: k,
                created_at,
            })] => {
                assert_eq!((*k, created_at.line()), (kind, made));
            }
            other => panic!("{kind}: {other:?}"),
        }
    }
    drop((held, lw, sw, gw));
}

#[test]
fn a_child_process_wait_names_its_pid() {
    let (ev, _clock) = manual();
    struct Quiet;
    impl deferloop::process::ProcessProtocol for Quiet {}
    let p = ev
        .spawn_process(std::process::Command::new("sleep").arg("30"), Quiet)
        .unwrap();
    let line = line!() + 1;
    let w = p.wait();
    let rep = ps::snapshot(&ev);
    assert_eq!(
        at_line(&rep, file!(), line).waits_on,
        vec![WaitsOn::Leaf(Wait::Process { pid: p.pid() })]
    );
    p.kill().unwrap();
    assert!(!ev.run_until(w).unwrap().success());
}

#[test]
fn a_chain_waiting_on_a_returned_deferred_points_at_it() {
    let (ev, _clock) = manual();
    let (inner, inner_r) = Deferred::<u8>::new();
    let inner_line = line!() - 1;
    let outer_line = line!() + 1;
    let (outer, outer_r) = Deferred::<u8>::new();
    let outer = outer.add_callback(move |_| inner);
    outer_r.callback(0).unwrap();
    let rep = ps::snapshot(&ev);
    let (o, i) = (
        at_line(&rep, file!(), outer_line),
        at_line(&rep, file!(), inner_line),
    );
    assert_eq!(o.state, PendingState::Waiting);
    assert_eq!(o.waits_on, vec![WaitsOn::Deferred(i.id)]);
    assert!(format!("{outer:?}").contains(&format!("waits_on: Deferred #{}", i.id)));
    inner_r.callback(1).unwrap();
    assert_eq!(outer.result().unwrap().unwrap(), 1);
}

#[test]
fn lists_races_scopes_and_maps_wait_on_their_inputs() {
    let (ev, _clock) = manual();
    let (a, ra) = Deferred::<u8>::new();
    let (b, rb) = Deferred::<u8>::new();
    let (c, rc) = Deferred::<u8>::new();
    let (e, re) = Deferred::<u8>::new();
    let ids_line = line!() - 4;
    let list_line = line!() + 1;
    let list = DeferredList::new(vec![a, b]).build();
    let race_line = line!() + 1;
    let raced = race(vec![c]);
    let scope_line = line!() + 1;
    let scoped = scope(|s| {
        s.spawn(e).unwrap();
        Ok(())
    });
    let (f, rf) = Deferred::<u8>::new();
    let mut f = Some(f);
    let map_line = line!() + 1;
    let mapped = map_limit(vec![0u8], 1, move |_| f.take().unwrap());
    let rep = ps::snapshot(&ev);
    let id = |l| at_line(&rep, file!(), l).id;
    let deferreds = |l| -> Vec<WaitsOn> { at_line(&rep, file!(), l).waits_on.clone() };
    let (ia, ib, ic, ie) = (
        id(ids_line),
        id(ids_line + 1),
        id(ids_line + 2),
        id(ids_line + 3),
    );
    assert_eq!(
        deferreds(list_line),
        vec![WaitsOn::Deferred(ia), WaitsOn::Deferred(ib)]
    );
    assert_eq!(deferreds(race_line), vec![WaitsOn::Deferred(ic)]);
    assert_eq!(deferreds(scope_line), vec![WaitsOn::Deferred(ie)]);
    let mw = deferreds(map_line);
    assert_eq!(mw.len(), 1, "{mw:?}");
    let tree = rep.pstree();
    assert!(tree.contains("└── #"), "{tree}");
    for r in [ra, rb, rc, re, rf] {
        r.callback(1).unwrap();
    }
    drop((list, raced, scoped, mapped));
}

#[test]
fn a_cycle_is_reported_and_the_rest_of_the_forest_still_prints() {
    let (ev, _clock) = manual();
    let (a, ra) = Deferred::<u8>::new();
    let (b, rb) = Deferred::<u8>::new();
    let a_line = line!() - 2;
    a.chain_deferred(&rb);
    b.chain_deferred(&ra);
    let other_line = line!() + 1;
    let other = defer_later(&ev, Duration::from_secs(1), || Ok(0u8));
    let rep = ps::snapshot(&ev);
    let (ia, ib) = (
        at_line(&rep, file!(), a_line).id,
        at_line(&rep, file!(), a_line + 1).id,
    );
    let io = at_line(&rep, file!(), other_line).id;
    let tree = rep.pstree();
    let (lo, hi) = (ia.min(ib), ia.max(ib));
    assert!(
        tree.contains(&format!("cycle: #{lo} → #{hi} → #{lo}")),
        "{tree}"
    );
    assert!(tree.contains(&format!("#{io} unfired")), "{tree}");
    assert!(tree.contains("timer due in 1.0s"), "{tree}");
    assert!(tree.contains(&format!("#{lo} (cycle)")), "{tree}");
    drop((ra, rb, other));
}
