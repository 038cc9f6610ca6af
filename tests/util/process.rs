//! Helpers for the child-process tests: a protocol that records everything,
//! and checks that a pid was reaped.
#![allow(dead_code)]

use deferloop::process::{ChildPipe, Process, ProcessProtocol};
use deferloop::Failure;
use std::cell::RefCell;
use std::process::ExitStatus;
use std::rc::Rc;
use std::time::Instant;

#[derive(Debug)]
pub enum Event {
    Made,
    Out(Vec<u8>),
    Err(Vec<u8>),
    /// The pipe, when, and the reason given, if any.
    Closed(ChildPipe, Option<Instant>, Option<String>),
    Paused,
    Resumed,
    /// The status, or the failure rendered.
    Exited(Result<ExitStatus, String>),
}

pub struct Recorder(Rc<RefCell<Vec<Event>>>);

impl Recorder {
    pub fn new() -> (Recorder, Rc<RefCell<Vec<Event>>>) {
        let log = Rc::new(RefCell::new(Vec::new()));
        (Recorder(log.clone()), log)
    }
}

impl ProcessProtocol for Recorder {
    fn connection_made(&mut self, _: &Process) {
        self.0.borrow_mut().push(Event::Made);
    }
    fn out_received(&mut self, _: &Process, data: &[u8]) {
        self.0.borrow_mut().push(Event::Out(data.to_vec()));
    }
    fn err_received(&mut self, _: &Process, data: &[u8]) {
        self.0.borrow_mut().push(Event::Err(data.to_vec()));
    }
    fn pipe_closed(&mut self, _: &Process, pipe: ChildPipe, reason: Option<Failure>) {
        let reason = reason.map(|f| f.to_string());
        self.0
            .borrow_mut()
            .push(Event::Closed(pipe, Some(Instant::now()), reason));
    }
    fn pause_writing(&mut self, _: &Process) {
        self.0.borrow_mut().push(Event::Paused);
    }
    fn resume_writing(&mut self, _: &Process) {
        self.0.borrow_mut().push(Event::Resumed);
    }
    fn process_exited(&mut self, _: &Process, status: Result<ExitStatus, Failure>) {
        let status = status.map_err(|f| f.to_string());
        self.0.borrow_mut().push(Event::Exited(status));
    }
}

pub fn stdout(log: &[Event]) -> Vec<u8> {
    log.iter()
        .filter_map(|e| match e {
            Event::Out(d) => Some(d.as_slice()),
            _ => None,
        })
        .flatten()
        .copied()
        .collect()
}

pub fn stderr(log: &[Event]) -> Vec<u8> {
    log.iter()
        .filter_map(|e| match e {
            Event::Err(d) => Some(d.as_slice()),
            _ => None,
        })
        .flatten()
        .copied()
        .collect()
}

/// Whether `pid` is no child of ours any more (reaped: `ECHILD`).
pub fn reaped(pid: u32) -> bool {
    // SAFETY: waitpid with WNOHANG and a null status pointer only asks; it
    // reaps nothing if the child is still running (and a zombie would be
    // reaped here, which the assertion below then reports).
    let r = unsafe { libc::waitpid(pid as libc::pid_t, std::ptr::null_mut(), libc::WNOHANG) };
    r == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ECHILD)
}

/// Asserts that `pid` was reaped by the loop (no zombie is left).
pub fn assert_reaped(pid: u32) {
    assert!(reaped(pid), "child {pid} was not reaped");
}

/// Whether a process with `pid` exists (a zombie counts).
pub fn alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks for existence.
    unsafe { libc::kill(pid as libc::pid_t, 0) == 0 }
}
