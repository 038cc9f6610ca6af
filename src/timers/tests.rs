//! Unit tests of the timer wheel (the model test is tests/timers_model.rs).
use super::*;
use std::time::Duration;

fn at(base: Instant, ms: u64) -> Instant {
    base + Duration::from_millis(ms)
}

#[test]
fn equal_deadlines_leave_in_insertion_order() {
    let base = Instant::now();
    let mut h = TimerWheel::new(base);
    for i in 0..20 {
        h.insert(at(base, 5), i);
    }
    let out: Vec<_> = std::iter::from_fn(|| h.pop_due(at(base, 5)).map(|(_, v)| v)).collect();
    assert_eq!(out, (0..20).collect::<Vec<_>>());
}

#[test]
fn a_timer_is_not_due_before_its_deadline() {
    let base = Instant::now();
    let mut h = TimerWheel::new(base);
    h.insert(at(base, 10), ());
    assert!(h.pop_due(at(base, 9)).is_none());
    assert!(h.pop_due(at(base, 10)).is_some());
}

#[test]
fn cancel_removes_from_the_middle_and_keeps_order() {
    let base = Instant::now();
    let mut h = TimerWheel::new(base);
    let ids: Vec<_> = (0..100u64)
        .map(|i| h.insert(at(base, (i * 37) % 101), i))
        .collect();
    for id in ids.iter().step_by(3) {
        assert!(matches!(h.cancel(*id), Removed::Pending(_)));
        h.check_invariants();
    }
    assert!(matches!(h.cancel(ids[0]), Removed::Gone));
    let mut last = None;
    while let Some((_, v)) = h.pop_due(at(base, 1000)) {
        assert!(v % 3 != 0);
        let key = ((v * 37) % 101, v);
        assert!(last < Some(key));
        last = Some(key);
    }
    assert_eq!(h.reserved(), 0);
}

#[test]
fn reserved_timers_can_be_cancelled_until_released() {
    let base = Instant::now();
    let mut h = TimerWheel::new(base);
    let id = h.insert(base, "a");
    let (got, _) = h.pop_due_reserved(base, |_| 42).unwrap();
    assert_eq!(got, id);
    assert!(h.contains(id));
    assert!(matches!(h.cancel(id), Removed::Ready(42)));
    assert!(!h.contains(id));
    let id = h.insert(base, "b");
    h.pop_due_reserved(base, |_| 7).unwrap();
    h.release(id);
    assert!(matches!(h.cancel(id), Removed::Gone));
}

#[test]
fn release_leaves_a_pending_timer_alone() {
    let base = Instant::now();
    let mut h = TimerWheel::new(base);
    let early = h.insert(at(base, 1), "early");
    let late = h.insert(at(base, 2), "late");
    h.release(late);
    h.check_invariants();
    assert!(h.contains(late));
    assert_eq!(h.len(), 2);
    assert!(matches!(h.cancel(late), Removed::Pending("late")));
    h.release(early);
    assert!(matches!(h.pop_due(at(base, 5)), Some((id, "early")) if id == early));
    assert!(h.pop_due(at(base, 5)).is_none());
}

#[test]
fn stale_ids_do_not_touch_reused_slots() {
    let base = Instant::now();
    let mut h = TimerWheel::new(base);
    let old = h.insert(base, 1);
    h.pop_due(base).unwrap();
    let new = h.insert(base, 2);
    assert!(matches!(h.cancel(old), Removed::Gone));
    assert!(h.contains(new));
}

#[test]
fn buffers_shrink_after_mass_cancellation_at_the_next_trim() {
    let base = Instant::now();
    let mut h = TimerWheel::new(base);
    let ids: Vec<_> = (0..10_000u64).map(|i| h.insert(at(base, i), i)).collect();
    for (i, id) in ids.iter().enumerate() {
        if i % 100 != 0 {
            let _ = h.cancel(*id);
        }
    }
    assert_eq!(h.len(), 100);
    assert!(h.capacity() >= 10_000, "no reallocation during the cancels");
    h.trim();
    assert!(h.capacity() <= 400, "capacity {}", h.capacity());
    h.check_invariants();
    // So does the near heap's, after timers set for a time already passed.
    let past: Vec<_> = (0..1000).map(|i| h.insert(base, i)).collect();
    assert!(h.near_capacity() >= 1000);
    for id in past {
        let _ = h.cancel(id);
    }
    h.trim();
    assert!(
        h.near_capacity() <= 64,
        "near capacity {}",
        h.near_capacity()
    );
    // Once no timer is left, the nodes go too.
    while h.pop_due(at(base, 20_000)).is_some() {}
    h.trim();
    assert_eq!(h.nodes.capacity(), 0);
    assert!(matches!(h.cancel(ids[0]), Removed::Gone));
    let id = h.insert(at(base, 1), 1);
    assert!(h.contains(id) && !h.contains(ids[0]));
}

/// Deadlines from a tick to years away, set in a scrambled order and popped
/// while time moves in uneven steps across slot and level boundaries: each
/// fires at the first `now` at or past its deadline, never before, in
/// (deadline, seq) order, through cascades from every level.
#[test]
fn timers_cascade_from_every_level_and_fire_exactly_on_time() {
    let base = Instant::now();
    let mut h = TimerWheel::new(base);
    let mut want = Vec::new();
    for i in 0..400u64 {
        // ns offsets spread over ~13 orders of magnitude, some repeated.
        let ns = (i * 7919 % 400).pow(5) % (1 << 52) + (i % 3) * 1_000_000;
        let d = base + Duration::from_nanos(ns);
        h.insert(d, (d, i));
        want.push((d, i));
    }
    want.sort();
    h.check_invariants();
    let mut now = base;
    let mut step = 1u64;
    let mut got = Vec::new();
    while h.len() > 0 {
        // Exact while the earliest slot is small, never later than the truth.
        let next = h.next_deadline().unwrap();
        assert!(next <= want[got.len()].0);
        now += Duration::from_nanos(step);
        step = (step * 3 + 12345) % (1 << 44);
        while let Some((_, (d, i))) = h.pop_due(now) {
            assert!(d <= now, "timer {i} fired early");
            got.push((d, i));
        }
        // Nothing due is left behind.
        assert!(want.get(got.len()).is_none_or(|&(d, _)| d > now));
        h.check_invariants();
    }
    assert_eq!(got, want);
}

/// A deadline long before the wheel was made is due at once; one past the
/// representable range (584 years) still waits, and reports a deadline.
#[test]
fn deadlines_far_in_the_past_or_future() {
    let base = Instant::now();
    let mut h = TimerWheel::new(base);
    let far = base + Duration::from_secs(200 * 365 * 24 * 3600);
    let beyond = base + Duration::from_secs(600 * 365 * 24 * 3600);
    let (f, b) = (h.insert(far, "far"), h.insert(beyond, "beyond"));
    if let Some(past) = base.checked_sub(Duration::from_secs(2 * 366 * 24 * 3600)) {
        h.insert(past, "past");
        assert_eq!(h.pop_due(base).map(|(_, v)| v), Some("past"));
    }
    assert!(h.pop_due(base + Duration::from_secs(3600)).is_none());
    assert_eq!(h.deadline(f), Some(far));
    assert!(h.deadline(b).is_some_and(|d| d > far));
    assert!(h.next_deadline().is_some_and(|d| d <= far));
    assert_eq!(h.pop_due(far).map(|(_, v)| v), Some("far"));
    h.check_invariants();
}

/// With more than `SCAN` timers in the earliest slot, `next_deadline` is the
/// slot's start: earlier than the truth, and a pop at that time cascades the
/// slot a level down, so the answer moves strictly later, and is exact after
/// at most one early wake-up per level (shared by all those timers).
#[test]
fn next_deadline_is_exact_or_a_bound_that_makes_progress() {
    let base = Instant::now();
    let mut h = TimerWheel::new(base);
    // About 9 s away: a level-2 slot, which spans 4.3 s.
    let d = base + Duration::from_millis(9_000);
    for i in 0..SCAN as u64 + 1 {
        h.insert(d + Duration::from_micros(i), i);
    }
    let mut wakes = 0;
    let mut bound = h.next_deadline().unwrap();
    while bound < d {
        wakes += 1;
        assert!(h.pop_due(bound).is_none());
        let next = h.next_deadline().unwrap();
        assert!(next > bound, "progress");
        bound = next;
    }
    assert_eq!(bound, d, "exact in the end");
    assert!(
        (1..=3).contains(&wakes),
        "{wakes} early wake-ups from level 2"
    );
    assert_eq!(h.pop_due(d).map(|(_, v)| v), Some(0));
    // A small slot is read exactly.
    let mut h = TimerWheel::new(base);
    h.insert(d + Duration::from_micros(5), 1);
    h.insert(d, 2);
    assert_eq!(h.next_deadline(), Some(d));
}

/// A timer set for a time the wheel has already passed goes to the near
/// heap and still keeps (deadline, seq) order with the timers there.
#[test]
fn timers_set_in_the_past_keep_order_with_due_ones() {
    let base = Instant::now();
    let mut h = TimerWheel::new(base);
    h.insert(at(base, 10), "b");
    h.insert(at(base, 12), "d");
    assert!(h.pop_due(at(base, 9)).is_none());
    assert!(h.pop_due(at(base, 11)).is_some_and(|(_, v)| v == "b"));
    h.insert(at(base, 12), "e");
    h.insert(at(base, 5), "a");
    h.insert(at(base, 11), "c");
    h.check_invariants();
    let out: Vec<_> = std::iter::from_fn(|| h.pop_due(at(base, 12)).map(|(_, v)| v)).collect();
    assert_eq!(out, ["a", "c", "d", "e"]);
}

#[test]
fn reset_moves_a_timer_later_or_earlier_in_place() {
    let base = Instant::now();
    let mut h = TimerWheel::new(base);
    let a = h.insert(at(base, 10), "a");
    let b = h.insert(at(base, 5_000), "b"); // a few levels up
    let nodes = h.reserved();
    let Reset::Moved(a2) = h.reset(a, at(base, 20_000)) else {
        panic!("a was pending")
    };
    let Reset::Moved(b2) = h.reset(b, at(base, 1)) else {
        panic!("b was pending")
    };
    h.check_invariants();
    assert_eq!(h.reserved(), nodes, "moved in place: no node made");
    assert!(!h.contains(a) && h.contains(a2), "the old id is stale");
    assert_eq!(h.reset(a, at(base, 3)), Reset::Gone);
    assert_eq!(h.deadline(a2), Some(at(base, 20_000)));
    assert_eq!(h.pop_due(at(base, 1)), Some((b2, "b")));
    assert!(
        h.pop_due(at(base, 19_999)).is_none(),
        "a is not due at 10 ms"
    );
    assert_eq!(h.pop_due(at(base, 20_000)).map(|(_, v)| v), Some("a"));
    h.check_invariants();
}

#[test]
fn a_reset_timer_leaves_after_those_already_set_for_its_deadline() {
    let base = Instant::now();
    let mut h = TimerWheel::new(base);
    // The start of a tick (1,048,576 ns) ten ticks on; both timers are in
    // it, so once time reaches it they wait in the near heap, where a reset
    // is a remove and a push.
    let tick = h.instant(((h.ns(base) >> TICK_SHIFT) + 10) << TICK_SHIFT);
    let due = tick + Duration::from_micros(500);
    let first = h.insert(due, 0);
    h.insert(due, 1);
    assert!(h.pop_due(tick + Duration::from_micros(100)).is_none());
    let Reset::Moved(_) = h.reset(first, due) else {
        panic!("pending")
    };
    h.check_invariants();
    let out: Vec<_> = std::iter::from_fn(|| h.pop_due(due).map(|(_, v)| v)).collect();
    assert_eq!(out, [1, 0], "as if set anew");
}

#[test]
fn resetting_a_reserved_timer_frees_it_and_says_where_it_waits() {
    let base = Instant::now();
    let mut h = TimerWheel::new(base);
    let id = h.insert(base, "a");
    h.pop_due_reserved(base, |_| 9).unwrap();
    assert_eq!(h.reset(id, at(base, 5)), Reset::Ready(9));
    assert!(!h.contains(id));
    assert_eq!(h.reserved(), 0);
    assert_eq!(h.reset(id, at(base, 5)), Reset::Gone);
    h.check_invariants();
}
