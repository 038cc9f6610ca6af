//! examples/supervisor.rs and examples/echo_server.rs as services: each runs
//! in a child process (this test binary, re-run with `DEFERLOOP_EXAMPLE`
//! set, calls the example's `run`), gets SIGTERM, and must exit 0 leaving no
//! child behind — having let its open connections finish, for the server.

#[path = "../examples/echo_server.rs"]
#[allow(dead_code)]
mod echo_server;
#[path = "../examples/supervisor.rs"]
#[allow(dead_code)]
mod supervisor;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The child side: runs the example named in `DEFERLOOP_EXAMPLE` with the
/// arguments in `DEFERLOOP_ARGS` (separated by `\x1f`) and exits with its status.
#[test]
fn example_child_entry() {
    let Ok(name) = std::env::var("DEFERLOOP_EXAMPLE") else {
        return; // an ordinary test run: nothing to do
    };
    println!(); // end the harness's "test example_child_entry ..." line
    let args: Vec<String> = std::env::var("DEFERLOOP_ARGS")
        .unwrap_or_default()
        .split('\x1f')
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    let r = match name.as_str() {
        "echo_server" => echo_server::run(args),
        "supervisor" => supervisor::run(args),
        _ => Err("unknown example".into()),
    };
    let code = match r {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("{name}: {e}");
            1
        }
    };
    std::process::exit(code);
}

/// The example's process; killed and reaped if a test fails before it exits.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        if self.0.try_wait().ok().flatten().is_none() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

impl std::ops::Deref for Guard {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Guard {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

fn start(name: &str, args: &[&str]) -> (Guard, mpsc::Receiver<String>) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "example_child_entry",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("DEFERLOOP_EXAMPLE", name)
        .env("DEFERLOOP_ARGS", args.join("\x1f"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Both streams' lines, in the order they arrive; stderr is also passed
    // on, so a failing test still shows what the example said.
    let (tx, rx) = mpsc::channel();
    let out: Box<dyn Read + Send> = Box::new(child.stdout.take().unwrap());
    let err: Box<dyn Read + Send> = Box::new(child.stderr.take().unwrap());
    for (stream, echo) in [(out, false), (err, true)] {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines() {
                let Ok(line) = line else { break };
                if echo {
                    eprintln!("{line}");
                }
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
    }
    (Guard(child), rx)
}

/// The next line that `pick` accepts.
fn next_line<T>(rx: &mpsc::Receiver<String>, mut pick: impl FnMut(&str) -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = rx.recv_timeout(left).expect("a line from the example");
        if let Some(v) = pick(&line) {
            return v;
        }
    }
}

fn term(child: &Child) {
    // SAFETY: kill(2) on our own child, which has not been waited for.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
}

fn wait_exit(child: &mut Child, within: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + within;
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the example did not exit within {within:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks whether the process exists.
    unsafe { libc::kill(pid as i32, 0) == 0 }
}

#[test]
fn supervisor_restarts_with_back_off_and_stops_cleanly_on_sigterm() {
    let (mut sup, rx) = start("supervisor", &["sh", "-c", "echo up; sleep 0.2; exit 1"]);
    // Started three times: the restart delays it announces, and when.
    let (mut starts, mut delays) = (Vec::new(), Vec::new());
    while starts.len() < 3 {
        next_line(&rx, |l| {
            if let Some(pid) = l.strip_prefix("started ") {
                starts.push((Instant::now(), pid.parse::<u32>().unwrap()));
            } else if let Some(d) = l.split("; restarting in ").nth(1) {
                delays.push(d.to_string());
            } else {
                return None;
            }
            Some(())
        });
    }
    assert_eq!(delays, ["100ms", "200ms"], "the back-off doubles");
    // Each child runs 0.2 s, then the delay passes: never sooner (less
    // 100 ms for a late read of the earlier line).
    let gaps: Vec<Duration> = starts.windows(2).map(|w| w[1].0 - w[0].0).collect();
    assert!(
        gaps[0] >= Duration::from_millis(200) && gaps[1] >= Duration::from_millis(300),
        "{gaps:?}"
    );
    let pids: Vec<u32> = starts.iter().map(|s| s.1).collect();
    term(&sup);
    let status = wait_exit(&mut sup, Duration::from_secs(10));
    assert!(status.success(), "{status}");
    for pid in pids {
        assert!(!alive(pid), "child {pid} left behind");
    }
}

#[test]
fn supervisor_kills_a_child_that_ignores_sigterm_after_its_timeout() {
    let (mut sup, rx) = start(
        "supervisor",
        &[
            "--stop-timeout-ms",
            "300",
            "sh",
            "-c",
            "trap '' TERM; echo ready; while :; do sleep 0.05; done",
        ],
    );
    let pid = next_line(&rx, |l| {
        l.strip_prefix("started ")
            .map(|p| p.parse::<u32>().unwrap())
    });
    next_line(&rx, |l| (l == "ready").then_some(()));
    let t0 = Instant::now();
    term(&sup);
    let status = wait_exit(&mut sup, Duration::from_secs(10));
    assert!(status.success(), "{status}");
    assert!(
        t0.elapsed() >= Duration::from_millis(250),
        "waited for the child first"
    );
    // Its end is waited for (up to 10 s), not guessed with a 100 ms sleep.
    let deadline = Instant::now() + Duration::from_secs(10);
    while alive(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(!alive(pid), "the stubborn child was killed");
}

#[test]
fn supervisor_kills_a_child_that_ignores_sigterm_at_a_second_signal() {
    // A stop timeout no test waits for: only the second signal ends it.
    let (mut sup, rx) = start(
        "supervisor",
        &[
            "--stop-timeout-ms",
            "600000",
            "sh",
            "-c",
            "trap '' TERM; echo ready; while :; do sleep 0.05; done",
        ],
    );
    let pid = next_line(&rx, |l| {
        l.strip_prefix("started ")
            .map(|p| p.parse::<u32>().unwrap())
    });
    next_line(&rx, |l| (l == "ready").then_some(()));
    term(&sup);
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        sup.try_wait().unwrap().is_none(),
        "waits for the child first"
    );
    term(&sup);
    let status = wait_exit(&mut sup, Duration::from_secs(60));
    assert!(status.success(), "{status}");
    assert!(!alive(pid), "the stubborn child was killed");
}

#[test]
fn echo_server_drains_its_connections_on_sigterm_and_exits_0() {
    let (mut server, rx) = start("echo_server", &["127.0.0.1:0"]);
    let addr: std::net::SocketAddr = next_line(&rx, |l| l.parse().ok());
    let mut open = TcpStream::connect(addr).unwrap();
    open.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    open.write_all(b"before").unwrap();
    let mut buf = [0u8; 6];
    open.read_exact(&mut buf).unwrap();
    term(&server);
    // It stops accepting…
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(addr).is_ok() {
        assert!(Instant::now() < deadline, "still accepting after SIGTERM");
        std::thread::sleep(Duration::from_millis(10));
    }
    // …but the open connection still works, and the server waits for it.
    open.write_all(b"during").unwrap();
    open.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"during");
    assert!(
        server.try_wait().unwrap().is_none(),
        "exited before its connection ended"
    );
    drop(open);
    let status = wait_exit(&mut server, Duration::from_secs(5));
    assert!(status.success(), "{status}");
}
