//! `ps::log_on_signal`: the report goes to the log when the chosen signal
//! arrives. (Its own test binary: signals and the logger are process-wide.)

mod util;

use deferloop::signal::Signal;
use deferloop::{ps, Deferred, EventLoop};
use std::time::Duration;

#[test]
fn the_chosen_signal_logs_the_report() {
    let logs = util::logs();
    let ev = EventLoop::new().unwrap();
    let h = ps::log_on_signal(&ev, Signal::USR2).unwrap();
    let line = line!() + 1;
    let (_d, _r) = Deferred::<u8>::new();
    // SAFETY: `kill` to this process with a signal it handles.
    assert_eq!(unsafe { libc::kill(libc::getpid(), libc::SIGUSR2) }, 0);
    let site = format!("{}:{line}", file!());
    util::run_until(&ev, Duration::from_secs(10), || {
        !logs.mine_containing(&site).is_empty()
    });
    let dump = &logs.mine_containing(&site)[0].message;
    assert!(dump.contains("== pstree"), "{dump}");
    h.remove();
}
