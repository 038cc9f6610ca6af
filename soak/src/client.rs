//! The client loop: connections that send requests of random size, check
//! every echoed byte, and end in one of four ways; a small deterministic RNG.

use super::*;

pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    /// Mostly small, sometimes large: 70 % up to 1 KiB, 25 % up to 64 KiB.
    pub(crate) fn size(&mut self, max: usize) -> usize {
        let cap = match self.below(100) {
            0..=69 => 1024,
            70..=94 => 64 * 1024,
            _ => max,
        }
        .min(max);
        1 + self.below(cap as u64) as usize
    }
}

pub(crate) struct Client {
    pub(crate) addr: SocketAddr,
    pub(crate) unix: Option<PathBuf>,
    pub(crate) cfg: Config,
    pub(crate) rng: RefCell<Rng>,
    pub(crate) stats: RefCell<ClientStats>,
    pub(crate) live: Cell<usize>,
    pub(crate) deadline: Instant,
    pub(crate) done: RefCell<Option<mpsc::Sender<u64>>>,
}

impl Client {
    /// Opens connections until `conns` are live, while there is time.
    pub(crate) fn maintain(self: &Rc<Self>, lp: &Loop) {
        while Instant::now() < self.deadline && self.live.get() < self.cfg.conns {
            self.live.set(self.live.get() + 1);
            self.stats.borrow_mut().connects += 1;
            let (requests, end, unix) = {
                let mut rng = self.rng.borrow_mut();
                let requests = 1 + rng.below(30) as usize;
                let unix = self
                    .unix
                    .as_ref()
                    .filter(|_| rng.below(100) < self.cfg.unix_pct);
                let end = match rng.below(100) {
                    0..=49 => End::Close,
                    50..=69 => End::HalfClose,
                    // A Unix socket cannot be reset: it closes instead.
                    70..=89 if unix.is_some() => End::Close,
                    70..=89 => End::Reset,
                    _ => End::ServerPanic,
                };
                (requests, end, unix)
            };
            let conn = ClientConn {
                client: self.clone(),
                unix: unix.is_some(),
                requests_left: requests,
                end,
                expect: VecDeque::new(),
                pending: None,
                sent: 0,
                echoed: 0,
                lost: false,
                closing: false,
                eof_sent: false,
                reset_scheduled: false,
                timers: Vec::new(),
            };
            let me = self.clone();
            let connecting = match unix {
                Some(path) => lp.connect_unix(path, conn).connected(),
                None => lp.connect_tcp(self.addr, conn).connected(),
            };
            let _ = connecting.add_both(move |r: Result<Transport, Failure>| {
                if let Err(f) = r {
                    // Failed before connection_made: no protocol call.
                    eprintln!("soak client: connect failed: {f}");
                    me.stats.borrow_mut().connect_failures += 1;
                    me.live.set(me.live.get() - 1);
                    let me2 = me.clone();
                    let _ = Loop::current().map(|lp| {
                        lp.call_later(Duration::from_millis(10), move |lp| me2.maintain(lp))
                    });
                }
                Ok::<_, Failure>(())
            });
        }
        if self.live.get() == 0 && Instant::now() >= self.deadline {
            if let Some(tx) = self.done.borrow_mut().take() {
                let _ = tx.send(self.stats.borrow().made);
            }
        }
    }
}

/// One request in flight.
pub(crate) struct Pending {
    pub(crate) resolver: deferloop::Resolver<usize>,
    pub(crate) watchdog: Handle,
    pub(crate) left: usize,
    pub(crate) size: usize,
}

pub(crate) struct ClientConn {
    pub(crate) client: Rc<Client>,
    /// Over a Unix socket (else TCP).
    pub(crate) unix: bool,
    pub(crate) requests_left: usize,
    pub(crate) end: End,
    /// Bytes sent and not yet echoed, in order.
    pub(crate) expect: VecDeque<u8>,
    pub(crate) pending: Option<Pending>,
    pub(crate) sent: u64,
    pub(crate) echoed: u64,
    pub(crate) lost: bool,
    pub(crate) closing: bool,
    pub(crate) eof_sent: bool,
    pub(crate) reset_scheduled: bool,
    /// Resume-reading and reset timers, cancelled if the connection goes first.
    pub(crate) timers: Vec<Handle>,
}

impl ClientConn {
    pub(crate) fn start_request(&mut self, t: &Transport) {
        let c = self.client.clone();
        if self.requests_left == 0 || Instant::now() >= c.deadline {
            self.finish(t);
            return;
        }
        self.requests_left -= 1;
        let last = self.requests_left == 0;
        let size = c.rng.borrow_mut().size(c.cfg.max_size);
        let payload: Vec<u8> = {
            let mut rng = c.rng.borrow_mut();
            (0..size).map(|_| (rng.next() % 255) as u8).collect()
        };
        // A Deferred per request: fired once, by the echo or by the loss.
        let (d, resolver) = Deferred::<usize>::new();
        let c2 = c.clone();
        let _ = d.add_both(move |_r: Result<usize, Failure>| {
            c2.stats.borrow_mut().deferreds_fired += 1;
            Ok::<_, Failure>(())
        });
        let t2 = t.clone();
        let c3 = c.clone();
        let watchdog = t
            .event_loop()
            .expect("the connection is open")
            .call_later(Duration::from_secs(30), move |_| {
                c3.stats.borrow_mut().watchdogs_fired += 1;
                eprintln!("soak client: a request stalled for 30 s");
                t2.abort();
            })
            .expect("loop open");
        {
            let mut s = c.stats.borrow_mut();
            s.deferreds += 1;
            s.watchdogs_set += 1;
            s.requests += 1;
            s.bytes_sent += size as u64;
        }
        self.sent += size as u64;
        self.expect.extend(&payload);
        self.pending = Some(Pending {
            resolver,
            watchdog,
            left: size,
            size,
        });
        t.write(&payload);
        if c.rng.borrow_mut().below(4) == 0 {
            // A slow reader for a few milliseconds: the server's echo backs up.
            t.pause_reading();
            let delay = Duration::from_micros(500 + c.rng.borrow_mut().below(10_000));
            let t4 = t.clone();
            let h = t
                .event_loop()
                .expect("the connection is open")
                .call_later(delay, move |_| t4.resume_reading());
            self.timers.extend(h.ok());
        }
        if last && self.end == End::HalfClose {
            self.eof_sent = true;
            t.write_eof();
        }
        if last && self.end == End::Reset {
            // Reset mid-request, up to a few milliseconds in.
            self.reset_scheduled = true;
            let delay = Duration::from_micros(c.rng.borrow_mut().below(3000));
            let t3 = t.clone();
            let h = t
                .event_loop()
                .expect("the connection is open")
                .call_later(delay, move |_| reset(&t3));
            self.timers.extend(h.ok());
        }
    }

    pub(crate) fn complete_request(&mut self) {
        let p = self.pending.take().expect("a request in flight");
        let cancelled = p.watchdog.cancel();
        // Fired with no borrow held: its callbacks count too.
        let twice = p.resolver.callback(p.size).is_err();
        let mut s = self.client.stats.borrow_mut();
        s.watchdogs_cancelled += u64::from(cancelled);
        s.fired_twice += u64::from(twice);
    }

    /// No request in flight, none to send (the last one is done, or time
    /// is up): end the connection as chosen.
    pub(crate) fn finish(&mut self, t: &Transport) {
        if std::mem::replace(&mut self.closing, true) {
            return;
        }
        match self.end {
            End::Close => t.close(),
            // The server flushes its echo and closes; then so do we.
            End::HalfClose if !self.eof_sent => {
                self.eof_sent = true;
                t.write_eof();
            }
            End::HalfClose => {}
            End::Reset if !self.reset_scheduled => reset(t),
            End::Reset => {}
            End::ServerPanic => t.write(&[PANIC_BYTE; PANIC_RUN]),
        }
    }
}

impl Protocol for ClientConn {
    fn connection_made(&mut self, t: &Transport) {
        let mut s = self.client.stats.borrow_mut();
        s.made += 1;
        s.unix_made += u64::from(self.unix);
        drop(s);
        self.start_request(t);
    }

    fn data_received(&mut self, t: &Transport, data: &[u8]) {
        let n = data.len().min(self.expect.len());
        let mut bad = (data.len() - n) as u64;
        for (&got, want) in data.iter().zip(self.expect.drain(..n)) {
            bad += u64::from(got != want);
        }
        self.echoed += data.len() as u64;
        {
            let mut s = self.client.stats.borrow_mut();
            s.bytes_echoed += data.len() as u64;
            s.mismatched += bad;
        }
        let mut rest = data.len();
        while rest > 0 {
            let Some(p) = self.pending.as_mut() else {
                break;
            };
            let k = rest.min(p.left);
            p.left -= k;
            rest -= k;
            if p.left == 0 {
                self.complete_request();
                self.start_request(t);
            }
        }
    }

    fn connection_lost(&mut self, _t: &Transport, reason: Option<Failure>) {
        let c = self.client.clone();
        let mut s = c.stats.borrow_mut();
        if std::mem::replace(&mut self.lost, true) {
            s.lost_twice += 1;
            return;
        }
        s.lost += 1;
        for h in self.timers.drain(..) {
            h.cancel();
        }
        s.endings[ENDS.iter().position(|e| *e == self.end).unwrap()] += 1;
        let clean = matches!(self.end, End::Close | End::HalfClose);
        if clean {
            s.clean_bytes_sent += self.sent;
            s.clean_bytes_echoed += self.echoed;
            if !self.expect.is_empty() || self.pending.is_some() {
                s.short_clean += 1;
            }
            if let Some(f) = &reason {
                s.unexpected_errors
                    .push(format!("{:?} connection lost with {f}", self.end));
            }
        }
        drop(s);
        if let Some(p) = self.pending.take() {
            let cancelled = p.watchdog.cancel();
            let why = reason.unwrap_or_else(|| Failure::msg("connection closed mid-request"));
            let twice = p.resolver.errback(why).is_err();
            let mut s = c.stats.borrow_mut();
            s.watchdogs_cancelled += u64::from(cancelled);
            s.fired_twice += u64::from(twice);
        }
        c.live.set(c.live.get() - 1);
        let _ = Loop::current().map(|lp| lp.call_soon(move |lp| c.maintain(lp)));
    }
}

pub(crate) fn client_thread(
    cfg: Config,
    (addr, unix): (SocketAddr, Option<PathBuf>),
    ready: mpsc::Sender<Remote>,
    done: mpsc::Sender<u64>,
) -> ClientStats {
    let ev = EventLoop::new().expect("client loop");
    let client = Rc::new(Client {
        addr,
        unix,
        rng: RefCell::new(Rng(cfg.seed | 1)),
        deadline: Instant::now() + Duration::from_secs_f64(cfg.secs),
        cfg,
        stats: RefCell::default(),
        live: Cell::new(0),
        done: RefCell::new(Some(done)),
    });
    let c2 = client.clone();
    ev.set_exception_handler(move |_: &Loop, cx: &ExceptionContext<'_>| {
        c2.stats.borrow_mut().handler_calls += 1;
        eprintln!(
            "soak client: {} {:?}",
            cx.message,
            cx.failure.map(|f| f.to_string())
        );
    });
    ready.send(ev.remote()).unwrap();
    client.maintain(&ev);
    ev.run().expect("client run");
    let mut stats = client.stats.borrow().clone();
    stats.timers_left = ev.timer_count();
    stats.sources_left = ev.io_source_count();
    drop(ev);
    stats
}
