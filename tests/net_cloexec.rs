//! Every descriptor the library makes is close-on-exec from its creation:
//! set by `fcntl` afterwards, a `fork` + `exec` on another thread in between
//! leaks it into the child. Linux only: the check reads /proc/self/fd.
#![cfg(target_os = "linux")]

mod util;

use deferloop::net::{bind_reuseport, DatagramProtocol, DatagramTransport, SockAddr};
use deferloop::signal::Signal;
use deferloop::EventLoop;
use std::cell::Cell;
use std::net::SocketAddr;
use std::os::unix::io::AsRawFd;
use std::time::Duration;
use util::net::Rec;
use util::run_until;

thread_local! {
    /// `fcntl(F_SETFD)` calls made on this thread since it started.
    static SETFD_CALLS: Cell<u32> = const { Cell::new(0) };
}

/// Stands in for libc's `fcntl` in this test binary (the executable's
/// definition is the one every call in it binds to), counting the calls that
/// set descriptor flags: a descriptor made close-on-exec only by such a call
/// was open without the flag for a moment. Non-variadic: `fcntl`'s third
/// argument is an int or a pointer, passed in the same register either way
/// on the targets this runs on.
///
/// # Safety
/// As `fcntl(2)`: `arg` must be what `cmd` expects.
#[no_mangle]
pub unsafe extern "C" fn fcntl(
    fd: libc::c_int,
    cmd: libc::c_int,
    arg: libc::c_long,
) -> libc::c_int {
    if cmd == libc::F_SETFD {
        let _ = SETFD_CALLS.try_with(|c| c.set(c.get() + 1));
    }
    // SAFETY: the raw system call takes the same arguments as the wrapper;
    // the caller vouches for `arg` as for `fcntl` itself.
    unsafe { libc::syscall(libc::SYS_fcntl, fd, cmd, arg) as libc::c_int }
}

fn setfd_calls() -> u32 {
    SETFD_CALLS.with(Cell::get)
}

fn has_cloexec(fd: libc::c_int) -> bool {
    // SAFETY: F_GETFD only reads the descriptor's flags.
    let flags = unsafe { libc::syscall(libc::SYS_fcntl, fd, libc::F_GETFD) };
    assert!(flags >= 0, "fd {fd} is not open");
    flags as libc::c_int & libc::FD_CLOEXEC != 0
}

/// Every descriptor open in the process above stdio (but the one the
/// listing itself used, closed by now).
fn open_fds() -> Vec<libc::c_int> {
    let listed: Vec<libc::c_int> = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|fd| *fd > 2)
        .collect();
    listed
        .into_iter()
        // SAFETY: F_GETFD only reads the descriptor's flags.
        .filter(|fd| unsafe { libc::syscall(libc::SYS_fcntl, *fd, libc::F_GETFD) } >= 0)
        .collect()
}

#[test]
fn a_reuseport_socket_is_close_on_exec_from_its_creation() {
    let before = setfd_calls();
    let l = bind_reuseport("127.0.0.1:0".parse().unwrap()).unwrap();
    assert!(has_cloexec(l.as_raw_fd()));
    assert_eq!(
        setfd_calls(),
        before,
        "the flag was set by fcntl after socket(): a fork + exec in between leaks the socket"
    );
}

struct Quiet;
impl DatagramProtocol for Quiet {
    fn datagram_received(&mut self, _: &DatagramTransport, _: &[u8], _: SocketAddr) {}
}

/// Each kind of descriptor a loop makes: its poller and waker, listeners
/// (TCP, Unix, adopted), accepted and connected sockets of each, UDP, a
/// signal handler's pipe. None is made with a later `fcntl`, and each is
/// close-on-exec.
#[test]
fn every_kind_of_descriptor_is_close_on_exec() {
    let before = setfd_calls();
    // What was open already (inherited from the test's parent) is not ours.
    let inherited = open_fds();
    let ev = EventLoop::new().unwrap();
    let tcp = ev
        .listen_tcp("127.0.0.1:0".parse().unwrap(), || Rec::echo().0)
        .unwrap();
    let addr = match tcp.local_addr() {
        SockAddr::Inet(a) => *a,
        other => panic!("not an inet address: {other:?}"),
    };
    let path = std::env::temp_dir().join(format!("deferloop-{}-cloexec.sock", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let _unix = ev.listen_unix(&path, || Rec::echo().0).unwrap();
    let adopted = bind_reuseport("127.0.0.1:0".parse().unwrap()).unwrap();
    let _adopted = ev.listen_tcp_std(adopted, || Rec::echo().0).unwrap();
    let _udp = ev
        .listen_udp("127.0.0.1:0".parse().unwrap(), Quiet)
        .unwrap();
    let _sig = ev.add_signal_handler(Signal::USR2, |_, _| {}).unwrap();
    let (rec, tcp_seen) = Rec::new();
    let t1 = ev.run_until(ev.connect_tcp(addr, rec).connected()).unwrap();
    let (rec, unix_seen) = Rec::new();
    let t2 = ev
        .run_until(ev.connect_unix(&path, rec).connected())
        .unwrap();
    // Round trips: both accepted connections are up.
    t1.write(b"x");
    t2.write(b"y");
    run_until(&ev, Duration::from_secs(10), || {
        tcp_seen.borrow().bytes == b"x" && unix_seen.borrow().bytes == b"y"
    });
    let fds: Vec<_> = open_fds()
        .into_iter()
        .filter(|fd| !inherited.contains(fd))
        .collect();
    assert!(fds.len() >= 10, "expected the loop's descriptors: {fds:?}");
    for fd in fds {
        assert!(
            has_cloexec(fd),
            "fd {fd} ({:?}) is inherited by exec",
            std::fs::read_link(format!("/proc/self/fd/{fd}"))
        );
    }
    assert_eq!(
        setfd_calls(),
        before,
        "a descriptor was made close-on-exec after its creation"
    );
    drop(ev);
    let _ = std::fs::remove_file(&path);
}
