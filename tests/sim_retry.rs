//! The HTTP client twin of examples/compare (timeouts per request, retries
//! with back-off, kept-alive connections) run unchanged on a simulated host,
//! over links that lose segments and delay them, against a server that
//! crashes in the middle and restarts: every fetch still succeeds, and the
//! server shows the retries.

#[path = "../examples/compare/http_client_deferloop.rs"]
#[allow(dead_code)]
mod http_client_deferloop;

use deferloop::net::{Protocol, Transport};
use deferloop::sim::{Link, Sim};
use deferloop::Failure;
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Duration;

/// `GET /ok/NAME` answers `NAME`, on a kept-alive connection.
struct Http {
    buf: Vec<u8>,
    requests: Rc<Cell<usize>>,
}

impl Protocol for Http {
    fn data_received(&mut self, t: &Transport, data: &[u8]) {
        self.buf.extend_from_slice(data);
        while let Some(end) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head: Vec<u8> = self.buf.drain(..end + 4).collect();
            let head = String::from_utf8_lossy(&head);
            let path = head.split(' ').nth(1).unwrap_or("");
            self.requests.set(self.requests.get() + 1);
            let reply = match path.strip_prefix("/ok/") {
                Some(name) => format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{name}",
                    name.len()
                ),
                None => "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n".into(),
            };
            t.write(reply.as_bytes());
        }
    }
}

type Results = Rc<RefCell<Option<Vec<Result<String, String>>>>>;

/// The fetches' results, the requests and connections the server saw, and
/// the trace.
fn run(seed: u64, down: Duration) -> (Vec<Result<String, String>>, usize, usize, String) {
    let mut sim = Sim::new(seed);
    sim.set_default_link(Link {
        latency: Duration::from_millis(5),
        jitter: Duration::from_millis(10),
        loss: 0.03,
        ..Link::default()
    });
    let requests = Rc::new(Cell::new(0));
    let accepted = Rc::new(Cell::new(0));
    let (r, a) = (requests.clone(), accepted.clone());
    let server = sim
        .host("server", "10.0.0.1".parse().unwrap(), move |lp| {
            let (r, conns) = (r.clone(), a.clone());
            lp.listen_tcp("0.0.0.0:80".parse().unwrap(), move || {
                conns.set(conns.get() + 1);
                Http {
                    buf: Vec::new(),
                    requests: r.clone(),
                }
            })
            .unwrap();
        })
        .unwrap();
    let paths: Vec<String> = (0..30).map(|i| format!("/ok/page{i}")).collect();
    let results: Results = Rc::default();
    let (res, p) = (results.clone(), paths.clone());
    sim.host("client", "10.0.0.2".parse().unwrap(), move |lp| {
        let res = res.clone();
        http_client_deferloop::fetch_all(lp, "10.0.0.1:80".parse().unwrap(), p.clone(), 3)
            .add_callback(move |all| {
                *res.borrow_mut() = Some(all);
                Ok::<(), Failure>(())
            })
            .detach();
    })
    .unwrap();
    // A crash at a moment the seed picks, and a restart `down` later.
    let at = sim.random_below(150);
    sim.run_for(Duration::from_millis(at)).unwrap();
    sim.crash(server);
    sim.run_for(down).unwrap();
    sim.restart(server).unwrap();
    let done = results.clone();
    let finished = sim
        .run_until(Duration::from_secs(60), move |_| done.borrow().is_some())
        .unwrap();
    assert!(finished, "seed {seed}: the fetches never finished");
    let all = results.borrow_mut().take().unwrap();
    (all, requests.get(), accepted.get(), sim.trace())
}

#[test]
fn the_http_clients_retries_hold_under_loss_latency_and_a_crash() {
    let mut retried = 0;
    for seed in 0..10 {
        // Within the policy's budget: 3 attempts, 50 and 100 ms apart,
        // outlast a server down for 80 ms (reset, then refused, then up).
        let (all, requests, accepted, _) = run(seed, Duration::from_millis(80));
        for (i, r) in all.iter().enumerate() {
            assert_eq!(r, &Ok(format!("page{i}")), "seed {seed}");
        }
        assert!(requests >= all.len());
        // The 3 workers keep their connections: more means a retry
        // reconnected after a failure.
        if accepted > 3 {
            retried += 1;
        }
    }
    // The crash did fail requests: what held was the retry logic, not a
    // lucky network.
    assert!(retried >= 5, "only {retried} of 10 seeds retried");
}

#[test]
fn past_its_budget_the_client_gives_up_cleanly() {
    // A server down for 5 s outlasts every retry: the fetches caught in
    // it fail with the retry's GaveUp, none hangs, the others succeed.
    let (all, _, _, _) = run(1, Duration::from_secs(5));
    let gave_up = all
        .iter()
        .filter(|r| matches!(r, Err(e) if e.starts_with("gave up after 3 attempts")))
        .count();
    assert!(gave_up > 0, "{all:?}");
    for (i, r) in all.iter().enumerate() {
        assert!(r.is_err() || r == &Ok(format!("page{i}")), "{r:?}");
    }
}

#[test]
fn a_seeds_run_replays_exactly() {
    let (a, ra, ca, ta) = run(3, Duration::from_millis(80));
    let (b, rb, cb, tb) = run(3, Duration::from_millis(80));
    assert_eq!((a, ra, ca), (b, rb, cb));
    assert!(ta == tb, "one seed, one trace");
}
