//! Shared test helpers: a log capture that every test binary can install.
#![allow(dead_code)]

use std::sync::{Mutex, OnceLock};
use std::thread::{self, ThreadId};
use std::time::Instant;

/// One captured `log` record.
#[derive(Debug, Clone)]
pub struct Record {
    pub level: log::Level,
    pub target: String,
    pub message: String,
    pub thread: ThreadId,
    pub at: Instant,
    /// The record's key-value fields (`log`'s `kv`), rendered.
    pub kv: Vec<(String, String)>,
}

impl Record {
    /// The field `key`, rendered, if the record has it.
    pub fn field(&self, key: &str) -> Option<&str> {
        self.kv
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

struct Fields(Vec<(String, String)>);

impl<'k> log::kv::VisitSource<'k> for Fields {
    fn visit_pair(
        &mut self,
        key: log::kv::Key<'k>,
        value: log::kv::Value<'k>,
    ) -> Result<(), log::kv::Error> {
        self.0.push((key.to_string(), value.to_string()));
        Ok(())
    }
}

/// A logger that keeps every record in memory. Tests in one binary run in
/// parallel, so filter: by thread (`mine`) or by a needle unique to the test.
pub struct Capture {
    records: Mutex<Vec<Record>>,
}

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, r: &log::Record<'_>) {
        let mut fields = Fields(Vec::new());
        let _ = r.key_values().visit(&mut fields);
        self.records.lock().unwrap().push(Record {
            level: r.level(),
            target: r.target().to_owned(),
            message: r.args().to_string(),
            thread: thread::current().id(),
            at: Instant::now(),
            kv: fields.0,
        });
    }
    fn flush(&self) {}
}

impl Capture {
    /// Records logged on the calling thread.
    pub fn mine(&self) -> Vec<Record> {
        let me = thread::current().id();
        self.records
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.thread == me)
            .cloned()
            .collect()
    }

    /// This thread's records whose message contains `needle`.
    pub fn mine_containing(&self, needle: &str) -> Vec<Record> {
        let mut mine = self.mine();
        mine.retain(|r| r.message.contains(needle));
        mine
    }

    /// Records whose message contains `needle`.
    pub fn containing(&self, needle: &str) -> Vec<Record> {
        self.records
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.message.contains(needle))
            .cloned()
            .collect()
    }
}

/// The process-wide capture, installed on first use.
pub fn logs() -> &'static Capture {
    static CAPTURE: OnceLock<&'static Capture> = OnceLock::new();
    CAPTURE.get_or_init(|| {
        let c: &'static Capture = Box::leak(Box::new(Capture {
            records: Mutex::new(Vec::new()),
        }));
        log::set_logger(c).expect("another logger is installed");
        log::set_max_level(log::LevelFilter::Trace);
        c
    })
}

pub mod net;

/// How many cases a model test runs: `PROPTEST_CASES` if set (the long run,
/// see RELIABILITY.md), else `ci`, the count every `cargo test` runs.
pub fn cases(ci: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(ci)
}

/// Runs `ev` turn by turn until `done()` holds; panics after `timeout`.
pub fn run_until(
    ev: &deferloop::EventLoop,
    timeout: std::time::Duration,
    mut done: impl FnMut() -> bool,
) {
    let deadline = Instant::now() + timeout;
    // A timer at the deadline bounds every poll.
    let wake = ev.call_later(timeout, |_| {}).unwrap();
    while !done() {
        assert!(Instant::now() < deadline, "timed out after {timeout:?}");
        ev.run_once().unwrap();
    }
    wake.cancel();
}

/// Raises the soft limit on open files to at least `n` (up to the hard limit).
pub fn raise_fd_limit(n: usize) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid pointer to a local struct.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        if (lim.rlim_cur as usize) < n {
            lim.rlim_cur = (n as libc::rlim_t).min(lim.rlim_max);
            assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
        }
    }
}
