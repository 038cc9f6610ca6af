//! Set-up shared by the ps tests: a loop on a manual clock with ps's
//! registry on, and the one pending entry a test file created at a line.
//! A test binary that wants it says `#[path = "util/ps.rs"] mod ps_util;`.
#![allow(dead_code)]

use deferloop::ps::{self, PendingDeferred, Report};
use deferloop::{EventLoop, ManualClock};

/// A loop on a manual clock, with ps's registry on.
pub fn manual() -> (EventLoop, ManualClock) {
    let clock = ManualClock::new();
    let ev = EventLoop::with_manual_clock(clock.clone()).unwrap();
    ps::enable(&ev);
    (ev, clock)
}

/// The single pending entry created at `line` of `file` (the test's `file!()`,
/// which is what `Location::file` says of it).
pub fn at_line<'r>(r: &'r Report, file: &str, line: u32) -> &'r PendingDeferred {
    let found: Vec<_> = r
        .deferreds
        .iter()
        .filter(|p| p.created_at.file() == file)
        .filter(|p| p.created_at.line() == line)
        .collect();
    assert_eq!(found.len(), 1, "one entry made at {file}:{line}: {r:#?}");
    found[0]
}
