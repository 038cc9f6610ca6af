//! The server loop: echo with flow control, an idle timer re-armed on every
//! read, every 16th read through the thread pool, a panic on request.

use super::*;

/// The byte the client never sends in a payload; eight in a row make the
/// server's protocol panic (the injected fault).
pub(crate) const PANIC_BYTE: u8 = 0xff;
pub(crate) const PANIC_RUN: usize = 8;
pub(crate) const IDLE: Duration = Duration::from_secs(60);

pub(crate) struct Server {
    pub(crate) stats: RefCell<ServerStats>,
    pub(crate) live: Cell<u64>,
    pub(crate) pool_in_flight: Cell<u64>,
    /// TCP first, then Unix.
    pub(crate) listeners: RefCell<Vec<deferloop::net::Listener>>,
}

thread_local! {
    /// The server's state, for the audit's threadsafe queries.
    static SERVER: RefCell<Option<Rc<Server>>> = const { RefCell::new(None) };
}

/// On the server loop: (connections made, lost, accepted, pool jobs in flight).
pub(crate) fn server_state() -> (u64, u64, u64, u64) {
    SERVER.with(|s| {
        let s = s.borrow();
        let srv = s.as_ref().expect("the server thread");
        let st = srv.stats.borrow();
        let accepted = srv.listeners.borrow().iter().map(|l| l.accepted()).sum();
        (st.made, st.lost, accepted, srv.pool_in_flight.get())
    })
}

pub(crate) struct EchoConn {
    pub(crate) srv: Rc<Server>,
    pub(crate) idle: Option<Handle>,
    pub(crate) reads: u64,
    pub(crate) ff_run: usize,
    pub(crate) bytes_in: u64,
    pub(crate) lost: bool,
}

impl EchoConn {
    pub(crate) fn rearm(&mut self, t: &Transport) {
        if let Some(h) = self.idle.take() {
            if h.cancel() {
                self.srv.stats.borrow_mut().idle_cancelled += 1;
            }
        }
        let (srv, t2) = (self.srv.clone(), t.clone());
        let h = t
            .event_loop()
            .expect("the connection is open")
            .call_later(IDLE, move |_| {
                srv.stats.borrow_mut().idle_fired += 1;
                t2.abort();
            });
        if let Ok(h) = h {
            self.srv.stats.borrow_mut().idle_set += 1;
            self.idle = Some(h);
        }
    }
}

impl Protocol for EchoConn {
    fn connection_made(&mut self, t: &Transport) {
        let n = {
            let mut s = self.srv.stats.borrow_mut();
            s.made += 1;
            s.made
        };
        if n % 2 == 0 {
            // A small send buffer: echoes queue up in the write buffer, and
            // flow control (pause_writing → pause_reading) comes into play.
            set_int_opt(t, libc::SOL_SOCKET, libc::SO_SNDBUF, 8 * 1024);
        }
        self.srv.live.set(self.srv.live.get() + 1);
        self.rearm(t);
    }

    fn data_received(&mut self, t: &Transport, data: &[u8]) {
        for &b in data {
            self.ff_run = if b == PANIC_BYTE { self.ff_run + 1 } else { 0 };
            if self.ff_run == PANIC_RUN {
                panic!("soak: injected protocol panic");
            }
        }
        self.bytes_in += data.len() as u64;
        {
            let mut s = self.srv.stats.borrow_mut();
            s.bytes_in += data.len() as u64;
            s.bytes_out += data.len() as u64;
        }
        t.write(data);
        self.rearm(t);
        self.reads += 1;
        if self.reads.is_multiple_of(16) {
            // Some work for the pool, and a Deferred that must fire once.
            let sample: Vec<u8> = data.iter().take(64).copied().collect();
            let srv = self.srv.clone();
            srv.stats.borrow_mut().pool_jobs += 1;
            srv.pool_in_flight.set(srv.pool_in_flight.get() + 1);
            let _ = t
                .event_loop()
                .expect("the connection is open")
                .defer_to_thread(move || sample.iter().map(|&b| u64::from(b)).sum::<u64>())
                .add_both(move |_r: Result<u64, Failure>| {
                    srv.stats.borrow_mut().pool_fired += 1;
                    srv.pool_in_flight.set(srv.pool_in_flight.get() - 1);
                    Ok::<_, Failure>(())
                });
        }
    }

    fn pause_writing(&mut self, t: &Transport) {
        t.pause_reading();
    }

    fn resume_writing(&mut self, t: &Transport) {
        t.resume_reading();
    }

    fn connection_lost(&mut self, _: &Transport, reason: Option<Failure>) {
        let mut s = self.srv.stats.borrow_mut();
        if std::mem::replace(&mut self.lost, true) {
            s.lost_twice += 1;
            return;
        }
        s.lost += 1;
        match &reason {
            None => {
                s.lost_clean += 1;
                s.clean_bytes_in += self.bytes_in;
            }
            Some(f) if f.is_panic() => s.lost_panic += 1,
            Some(_) => s.lost_error += 1,
        }
        drop(s);
        self.srv.live.set(self.srv.live.get() - 1);
        if let Some(h) = self.idle.take() {
            if h.cancel() {
                self.srv.stats.borrow_mut().idle_cancelled += 1;
            }
        }
    }
}

/// Where the server listens: TCP, and the Unix socket path if any.
pub(crate) type Listening = (SocketAddr, Option<PathBuf>, Remote);

pub(crate) fn server_thread(ready: mpsc::Sender<Listening>, unix: Option<PathBuf>) -> ServerStats {
    let ev = EventLoop::new().expect("server loop");
    let srv = Rc::new(Server {
        stats: RefCell::default(),
        live: Cell::new(0),
        pool_in_flight: Cell::new(0),
        listeners: RefCell::new(Vec::new()),
    });
    SERVER.with(|s| *s.borrow_mut() = Some(srv.clone()));
    let s2 = srv.clone();
    ev.set_exception_handler(move |_: &Loop, cx: &ExceptionContext<'_>| {
        let mut s = s2.stats.borrow_mut();
        match cx.failure {
            Some(f) if f.is_panic() => s.handler_panics += 1,
            _ => {
                s.handler_other += 1;
                eprintln!(
                    "soak server: {} {:?}",
                    cx.message,
                    cx.failure.map(|f| f.to_string())
                );
            }
        }
    });
    let factory = |srv: &Rc<Server>| {
        let srv = srv.clone();
        move || EchoConn {
            srv: srv.clone(),
            idle: None,
            reads: 0,
            ff_run: 0,
            bytes_in: 0,
            lost: false,
        }
    };
    let listener = ev
        .listen_tcp("127.0.0.1:0".parse().unwrap(), factory(&srv))
        .expect("listen");
    let addr = listener.local_addr().as_inet().unwrap();
    srv.listeners.borrow_mut().push(listener);
    let unix = unix.and_then(|path| {
        let _ = std::fs::remove_file(&path);
        match ev.listen_unix(&path, factory(&srv)) {
            Ok(l) => {
                srv.listeners.borrow_mut().push(l);
                Some(path)
            }
            Err(e) => {
                eprintln!("soak server: no Unix socket at {}: {e}", path.display());
                None
            }
        }
    });
    // The remote is handed out from the first turn: a blocking call made
    // before the loop runs fails with `NotRunning` (the callers start at once).
    let remote = ev.remote();
    ev.call_soon(move |_| ready.send((addr, unix, remote)).unwrap())
        .expect("server loop open");
    ev.run().expect("server run");
    let mut stats = srv.stats.borrow().clone();
    let listeners = std::mem::take(&mut *srv.listeners.borrow_mut());
    stats.listeners = listeners.len();
    stats.accepted = listeners.iter().map(|l| l.accepted()).sum();
    stats.unix_accepted = listeners.get(1).map_or(0, |l| l.accepted());
    // The count of sources is taken with the listeners still open.
    stats.timers_left = ev.timer_count();
    stats.sources_left = ev.io_source_count();
    drop(listeners);
    SERVER.with(|s| s.borrow_mut().take());
    drop(srv);
    drop(ev);
    stats
}
