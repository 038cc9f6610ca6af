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
        self.records.lock().unwrap().push(Record {
            level: r.level(),
            target: r.target().to_owned(),
            message: r.args().to_string(),
            thread: thread::current().id(),
            at: Instant::now(),
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
