//! One loop per core (src/cores/): connections spread over the loops both
//! ways, loops calling each other, setup on the designated loop, failures
//! that stop the pool, and the coordinated drain.

#[path = "../examples/echo_cores.rs"]
#[allow(dead_code)]
mod echo_cores;

use deferloop::cores::{Cores, Peers, Spread};
use deferloop::net::{Protocol, SockAddr, Transport};
use deferloop::{Error, Loop};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

fn any() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

/// Echo that counts its connections per serving thread.
struct Echo;
impl Protocol for Echo {
    fn data_received(&mut self, t: &Transport, data: &[u8]) {
        t.write(data);
    }
}

type Seen = Arc<Mutex<HashMap<String, usize>>>;

fn counting(seen: &Seen) -> impl Fn(&SockAddr) -> Echo + Send + Sync + 'static {
    let seen = seen.clone();
    move |_| {
        let me = std::thread::current().name().unwrap_or("?").to_owned();
        *seen.lock().unwrap().entry(me).or_default() += 1;
        Echo
    }
}

fn echo(addr: SocketAddr, msg: &[u8]) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(msg).unwrap();
    let mut back = vec![0; msg.len()];
    s.read_exact(&mut back).unwrap();
    assert_eq!(back, msg);
}

fn spreads(spread: Spread) {
    let seen: Seen = Arc::default();
    let cores = Cores::builder()
        .loops(2)
        .pin(true)
        .listen_tcp_spread(any(), spread, counting(&seen))
        .start(|_, _| Ok(()))
        .unwrap();
    assert_eq!(cores.len(), 2);
    let addr = cores.local_addrs()[0];
    let clients: Vec<_> = (0..32)
        .map(|i| std::thread::spawn(move || echo(addr, format!("hello {i}").as_bytes())))
        .collect();
    for c in clients {
        c.join().unwrap();
    }
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.values().sum::<usize>(), 32);
    assert_eq!(seen.len(), 2, "both loops served: {seen:?}");
    cores.shutdown();
    cores.wait().unwrap();
}

#[test]
#[cfg(target_os = "linux")]
fn reuseport_spreads_connections_over_the_loops() {
    spreads(Spread::ReusePort);
}

#[test]
fn hand_off_spreads_connections_over_the_loops() {
    spreads(Spread::HandOff);
}

#[test]
fn loops_call_each_other_and_setup_runs_first_on_loop_zero() {
    let (tx, rx) = mpsc::channel();
    let first_tx = Mutex::new(tx.clone());
    let tx = Mutex::new(tx);
    let cores = Cores::builder()
        .loops(3)
        .on_first(move |_, peers| {
            first_tx
                .lock()
                .unwrap()
                .send(format!("first on {}", peers.index()))
                .unwrap();
            Ok(())
        })
        .start(move |_, peers: &Peers| {
            let me = peers.index();
            let tx = tx.lock().unwrap().clone();
            // Each loop asks the next one for its index; the answer comes back
            // to this loop, which reports it.
            let next = (me + 1) % peers.len();
            let back = peers.clone();
            peers.call(next, move |_: &Loop| {
                let answer = format!("{me} heard {}", (me + 1) % back.len());
                back.call(me, move |_| tx.send(answer).unwrap()).unwrap();
            })
        })
        .unwrap();
    let mut got: Vec<String> = Vec::new();
    for _ in 0..4 {
        match rx.recv_timeout(Duration::from_secs(5)) {
            Ok(m) => got.push(m),
            Err(e) => panic!("{e} after {got:?}"),
        }
    }
    got.sort();
    assert_eq!(got, ["0 heard 1", "1 heard 2", "2 heard 0", "first on 0"]);
    cores.shutdown();
    cores.wait().unwrap();
}

#[test]
fn a_call_to_a_loop_the_pool_does_not_have_is_an_error() {
    let (tx, rx) = mpsc::channel();
    let tx = Mutex::new(tx);
    let cores = Cores::builder()
        .loops(2)
        .start(move |_, peers: &Peers| {
            let past_end = peers.call(peers.len(), |_| {});
            let r = matches!(past_end, Err(Error::InvalidInput(_)));
            tx.lock().unwrap().send(r).unwrap();
            Ok(())
        })
        .unwrap();
    for _ in 0..2 {
        assert!(rx.recv_timeout(Duration::from_secs(5)).unwrap());
    }
    cores.shutdown();
    cores.wait().unwrap();
}

#[test]
fn a_failed_setup_stops_every_loop_and_start_says_why() {
    let t0 = Instant::now();
    // A grace of an hour: a failed start that waited for it would show past
    // the 10 minutes below, a bound no loaded machine comes near (with 60 s
    // and 10 s, or the default 5 s, the margin was one it could use up).
    let r = Cores::builder()
        .loops(2)
        .grace(Duration::from_secs(3600))
        .listen_tcp(any(), |_| Echo)
        .start(|_, peers| {
            if peers.index() == 1 {
                Err(Error::InvalidInput("loop 1 refuses"))
            } else {
                Ok(())
            }
        });
    match r {
        Err(Error::InvalidInput(m)) => assert_eq!(m, "loop 1 refuses"),
        Err(e) => panic!("wrong error {e}"),
        Ok(_) => panic!("started"),
    }
    assert!(t0.elapsed() < Duration::from_secs(600), "no grace waited");
}

#[test]
fn a_loop_that_fails_at_run_time_stops_the_pool() {
    let cores = Cores::builder()
        .loops(2)
        .start(|lp, peers| {
            if peers.index() == 1 {
                let p = peers.clone();
                lp.call_later(Duration::from_millis(20), move |_| {
                    p.fail(Error::InvalidInput("gave up"));
                })?;
            }
            Ok(())
        })
        .unwrap();
    match cores.wait() {
        Err(Error::InvalidInput("gave up")) => {}
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_loop_that_stops_stops_the_pool() {
    let cores = Cores::builder()
        .loops(2)
        .start(|lp, peers| {
            if peers.index() == 0 {
                lp.call_later(Duration::from_millis(20), |lp| lp.stop())?;
            }
            Ok(())
        })
        .unwrap();
    cores.wait().unwrap();
}

#[test]
fn a_setup_that_panics_is_an_error_not_a_hang() {
    let r = Cores::builder().loops(2).start(|_, peers| {
        assert!(peers.index() != 0, "loop 0 panics");
        Ok(())
    });
    assert!(matches!(r, Err(Error::Failed(_))));
}

/// Two connections served, for the shutdown tests: both have echoed a byte.
fn two_served(addr: SocketAddr) -> (TcpStream, TcpStream) {
    let mut quick = TcpStream::connect(addr).unwrap();
    let mut stays = TcpStream::connect(addr).unwrap();
    for s in [&mut quick, &mut stays] {
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        s.write_all(b"x").unwrap();
        let mut b = [0];
        s.read_exact(&mut b).unwrap();
    }
    (quick, stays)
}

fn pool(spread: Spread, grace: Duration, drained: &Arc<Mutex<usize>>) -> Cores {
    let d = drained.clone();
    Cores::builder()
        .loops(2)
        .grace(grace)
        .listen_tcp_spread(any(), spread, |_| Echo)
        .on_drain(move |_| *d.lock().unwrap() += 1)
        .start(|_, _| Ok(()))
        .unwrap()
}

#[test]
fn shutdown_drains_open_connections_then_aborts_what_is_left() {
    for spread in [Spread::HandOff, Spread::default()] {
        // Draining, with a grace no run comes near (an hour): accepting
        // stops, an open connection is still served, and `wait` returns as
        // soon as the last one closes. (With a grace of seconds, serving
        // "while draining" was a window a loaded machine could miss.)
        let drained = Arc::new(Mutex::new(0));
        let cores = pool(spread, Duration::from_secs(3600), &drained);
        let addr = cores.local_addrs()[0];
        let (quick, mut stays) = two_served(addr);
        let t0 = Instant::now();
        cores.shutdown();
        // Waited for, not guessed with a sleep (the cap only ends a
        // failure): every loop has stopped its listener once its `on_drain`
        // has run. (Not "until a connect fails": with a socket per loop, a
        // connect queued on the first one to close is reset while the other
        // still accepts.)
        let deadline = Instant::now() + Duration::from_secs(120);
        while *drained.lock().unwrap() < 2 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(
            TcpStream::connect(addr).is_err(),
            "{spread:?}: no longer accepting"
        );
        stays.write_all(b"y").unwrap();
        let mut b = [0];
        stays.read_exact(&mut b).unwrap();
        assert_eq!(&b, b"y", "{spread:?}: still served while draining");
        drop(quick);
        drop(stays);
        cores.wait().unwrap();
        assert!(
            t0.elapsed() < Duration::from_secs(600),
            "{spread:?}: stopped once drained, not at the grace"
        );
        assert_eq!(*drained.lock().unwrap(), 2, "on_drain ran on each loop");

        // Then aborted: a connection still open when the grace is over is
        // aborted, and `wait` returns, no sooner than the grace (the clock
        // starts before `shutdown`: a lower bound no load can break) and
        // long before the 30 s linger or connect timeouts could end it.
        let grace = Duration::from_millis(300);
        let drained = Arc::new(Mutex::new(0));
        let cores = pool(spread, grace, &drained);
        let (quick, mut stays) = two_served(cores.local_addrs()[0]);
        drop(quick);
        let t0 = Instant::now();
        cores.shutdown();
        cores.wait().unwrap();
        let took = t0.elapsed();
        assert!(
            took >= grace && took < Duration::from_secs(25),
            "{spread:?}: waited the grace period, then aborted: {took:?}"
        );
        // Aborted: end of file or a reset, not the read timeout.
        let mut rest = Vec::new();
        let r = stays.read_to_end(&mut rest);
        assert!(
            matches!(&r, Ok(0))
                || matches!(&r, Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset),
            "the lingering connection was closed: {r:?}"
        );
        assert_eq!(*drained.lock().unwrap(), 2, "on_drain ran on each loop");
    }
}

#[test]
fn what_crosses_threads_is_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Cores>();
    send_sync::<Peers>();
}

#[test]
fn the_echo_cores_example_serves_on_every_loop_and_counts_them() {
    let (tx, rx) = mpsc::channel();
    let tx = Mutex::new(tx);
    let grace = Duration::from_secs(5);
    let cores = echo_cores::start(any(), 2, grace, Duration::from_millis(100), move |counts| {
        let _ = tx.lock().unwrap().send(counts);
    })
    .unwrap();
    let addr = cores.local_addrs()[0];
    let clients: Vec<_> = (0..16)
        .map(|_| std::thread::spawn(move || echo(addr, b"hi")))
        .collect();
    for c in clients {
        c.join().unwrap();
    }
    // A census every 100 ms: the next ones count all 16 (the cap, far
    // beyond any turn of a loaded machine, only ends a failure).
    let t0 = Instant::now();
    loop {
        let counts = rx.recv_timeout(Duration::from_secs(120)).unwrap();
        if counts.iter().sum::<u64>() == 16 {
            assert!(
                counts.iter().all(|&c| c > 0),
                "both loops served: {counts:?}"
            );
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(120), "{counts:?}");
    }
    cores.shutdown();
    cores.wait().unwrap();
}

/// The child side of the next test: this binary, re-run with
/// `DEFERLOOP_CORES_CHILD` set, runs the example's `main` body.
#[test]
fn echo_cores_child_entry() {
    if std::env::var_os("DEFERLOOP_CORES_CHILD").is_none() {
        return; // an ordinary test run
    }
    println!(); // end the harness's "test echo_cores_child_entry ..." line
                // A grace of an hour: the test tells "stopped once drained" from "at the
                // grace" by a margin no loaded machine uses up.
    let args = ["127.0.0.1:0", "2", "3600"].map(str::to_owned);
    let code = match echo_cores::run(args) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("echo_cores: {e}");
            1
        }
    };
    std::process::exit(code);
}

/// SIGTERM reaches the designated loop's handler, which drains every loop:
/// an open connection is still served, then the process exits 0.
#[test]
fn echo_cores_drains_every_loop_on_sigterm_and_exits_0() {
    use std::io::BufRead;
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "echo_cores_child_entry",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("DEFERLOOP_CORES_CHILD", "1")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let addr: SocketAddr = loop {
        let l = lines
            .next()
            .expect("the child printed its address")
            .unwrap();
        if let Ok(a) = l.trim().parse() {
            break a;
        }
    };
    let mut open = TcpStream::connect(addr).unwrap();
    open.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    echo(addr, b"before");
    // SAFETY: kill(2) on our own child, not yet waited for.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    // Draining once accepting has stopped (waited for, not guessed with a
    // sleep; the cap only ends a failure): the open connection is still
    // served (the grace is an hour).
    let deadline = Instant::now() + Duration::from_secs(120);
    while TcpStream::connect(addr).is_ok() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(TcpStream::connect(addr).is_err(), "no longer accepting");
    open.write_all(b"during").unwrap();
    let mut b = [0; 6];
    open.read_exact(&mut b).unwrap();
    assert_eq!(&b, b"during");
    drop(open); // the last connection closes: the loops stop
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t0.elapsed() > Duration::from_secs(600) {
            let _ = child.kill();
            panic!("the pool did not stop: not when drained, and the grace is an hour");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(status.success(), "{status}");
}
