//! A producer attached to a stream is paused by its flow control and
//! stopped when the consumer's connection goes.

use deferloop::net::{Producer, Stream};
use deferloop::{Abandoned, EventLoop, Failure};
use std::cell::RefCell;
use std::rc::Rc;

/// One turn that never blocks for long: a timer bounds the wait.
fn turn(ev: &EventLoop) {
    let _ = ev.call_later(std::time::Duration::from_millis(2), |_| {});
    ev.run_once().unwrap();
}

#[test]
fn a_generator_whose_consumer_resets_fails_with_the_reset() {
    let ev = EventLoop::new().unwrap();
    let (s, peer) = Stream::open_memory(&ev).unwrap();
    peer.set_room(Some(0)); // the peer reads nothing
    let d = s.produce(|| Some(vec![0; 1024])); // endless
    turn(&ev);
    assert!(s.is_writing_paused());
    peer.reset();
    let f = ev.run_until(d).unwrap_err();
    let e = f.downcast_ref::<std::io::Error>().unwrap();
    assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset);
}

#[test]
fn a_generator_is_called_only_while_the_consumer_takes_bytes() {
    let ev = EventLoop::new().unwrap();
    let (s, peer) = Stream::open_memory(&ev).unwrap();
    s.set_write_buffer_limits(Some(4096), Some(1024)).unwrap();
    peer.set_room(Some(0));
    let calls = Rc::new(RefCell::new(0u32));
    let c = calls.clone();
    let d = s.produce(move || {
        *c.borrow_mut() += 1;
        (*c.borrow() <= 100).then(|| vec![b'z'; 1000])
    });
    for _ in 0..5 {
        turn(&ev);
    }
    assert_eq!(
        *calls.borrow(),
        5,
        "stopped one chunk past the high-water mark"
    );
    peer.set_room(None); // the peer reads again
    assert_eq!(ev.run_until(d).unwrap(), 100_000);
    turn(&ev);
    assert_eq!(peer.take_written().len(), 100_000);
}

#[test]
fn a_generator_whose_consumer_closes_cleanly_fails_with_broken_pipe() {
    let ev = EventLoop::new().unwrap();
    let (s, peer) = Stream::open_memory(&ev).unwrap();
    peer.set_room(Some(0));
    let d = s.produce(|| Some(vec![0; 1024]));
    turn(&ev);
    s.abort();
    let f = ev.run_until(d).unwrap_err();
    let e = f.downcast_ref::<std::io::Error>().unwrap();
    assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe);
}

#[derive(Default)]
struct Log(Rc<RefCell<Vec<String>>>);

impl Producer for Log {
    fn pause_producing(&mut self) {
        self.0.borrow_mut().push("pause".into());
    }
    fn resume_producing(&mut self) {
        self.0.borrow_mut().push("resume".into());
    }
    fn stop_producing(&mut self, reason: Option<Failure>) {
        self.0
            .borrow_mut()
            .push(format!("stop {}", reason.is_some()));
    }
}

#[test]
fn a_push_producer_hears_pause_resume_and_stop() {
    let ev = EventLoop::new().unwrap();
    let (s, peer) = Stream::open_memory(&ev).unwrap();
    let log = Log::default();
    let seen = log.0.clone();
    s.register_producer(log);
    peer.set_room(Some(0));
    s.write(&vec![0; 128 << 10]);
    turn(&ev);
    peer.set_room(None);
    turn(&ev);
    turn(&ev);
    peer.reset();
    turn(&ev);
    assert_eq!(*seen.borrow(), ["pause", "resume", "stop true"]);
}

#[test]
fn a_producer_registered_on_a_closed_stream_is_stopped_at_once() {
    let ev = EventLoop::new().unwrap();
    let (s, _peer) = Stream::open_memory(&ev).unwrap();
    s.abort();
    turn(&ev);
    let log = Log::default();
    let seen = log.0.clone();
    s.register_producer(log);
    assert_eq!(*seen.borrow(), ["stop false"]);
}

/// Detaching (or replacing) a `produce` drops its Resolver, which fails its
/// Deferred with `Abandoned` then and there; the callbacks that run may use
/// the stream, which is not borrowed at that moment.
#[test]
fn callbacks_of_a_detached_producer_may_use_the_stream() {
    let ev = EventLoop::new().unwrap();
    let (s, peer) = Stream::open_memory(&ev).unwrap();
    peer.set_room(Some(0));
    let seen = Rc::new(RefCell::new(Vec::new()));
    for replace in [false, true] {
        let (s2, seen2) = (s.clone(), seen.clone());
        let d = s
            .produce(|| Some(vec![0; 1024]))
            .add_both(move |r: Result<u64, Failure>| {
                let abandoned = r.as_ref().is_err_and(|f| f.check::<Abandoned>());
                // Reads the stream's state from inside the callback.
                seen2.borrow_mut().push((abandoned, s2.buffered()));
                Ok::<_, Failure>(())
            });
        turn(&ev);
        assert!(s.is_writing_paused());
        if replace {
            s.register_producer(Idle);
        } else {
            s.unregister_producer();
        }
        assert!(d.result().unwrap().is_ok());
    }
    assert_eq!(*seen.borrow(), [(true, 0), (true, 0)]);
}

/// A producer that does nothing.
struct Idle;
impl Producer for Idle {
    fn pause_producing(&mut self) {}
    fn resume_producing(&mut self) {}
    fn stop_producing(&mut self, _: Option<Failure>) {}
}
