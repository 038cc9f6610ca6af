//! The system calls that wait for and signal one child, by pidfd where the
//! kernel has one (no pid reuse: a pidfd names one process for good), else
//! by the child's own pid — never `waitpid(-1)`, which would steal other
//! code's children. `ECHILD` from a wait means the child is gone without
//! us: another part of the program reaped it, or `SIGCHLD` is ignored
//! (`SIG_IGN` or `SA_NOCLDWAIT`) and the kernel did. Used by `exit.rs` and
//! `Process::signal`; tests: tests/process_*.rs.

use std::io;
use std::os::unix::io::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

/// Set (to anything) in the environment, exits are watched through
/// `SIGCHLD` even where the kernel has pidfds: for a sandbox that refuses
/// `pidfd_open` in a way the fallback does not notice, and for the tests of
/// the `SIGCHLD` path (tests/process_sigchld.rs). Read at each spawn with
/// `ExitWatch::Auto`.
pub(crate) const NO_PIDFD_ENV: &str = "DEFERLOOP_NO_PIDFD";

/// What `pidfd_open` gave.
pub(crate) enum Opened {
    /// A pidfd: readable once the child exits.
    Fd(OwnedFd),
    /// No pidfd here (old kernel, sandbox, `DEFERLOOP_NO_PIDFD`).
    Unsupported,
    /// The child is already gone, reaped without us.
    Gone,
}

#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) fn pidfd_open(pid: u32, heed_env: bool) -> Opened {
    if heed_env && std::env::var_os(NO_PIDFD_ENV).is_some() {
        return Opened::Unsupported;
    }
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return Opened::Unsupported;
    };
    // SAFETY: pidfd_open(2) takes a pid and flags and returns a new fd or -1;
    // the pid is our child's, not yet reaped by us, so it names it — or no
    // process (ESRCH) if it was reaped without us.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    match i32::try_from(fd) {
        // SAFETY: a new fd that nothing else owns (O_CLOEXEC by default).
        Ok(fd) if fd >= 0 => Opened::Fd(unsafe { OwnedFd::from_raw_fd(fd) }),
        _ if io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) => Opened::Gone,
        _ => Opened::Unsupported,
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub(crate) fn pidfd_open(_: u32, _: bool) -> Opened {
    Opened::Unsupported
}

/// The wait status `waitpid` would have given, from `waitid`'s siginfo.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn status_of(info: &libc::siginfo_t) -> ExitStatus {
    // SAFETY: after a successful waitid with WEXITED that found a child,
    // the siginfo is a SIGCHLD one, whose si_status is set.
    let st = unsafe { info.si_status() };
    let raw = match info.si_code {
        libc::CLD_EXITED => (st & 0xff) << 8,
        libc::CLD_DUMPED => (st & 0x7f) | 0x80,
        _ => st & 0x7f,
    };
    ExitStatus::from_raw(raw)
}

/// `waitid(P_PIDFD, fd, WEXITED | flags)`: `Ok(None)` while the child runs
/// (with `WNOHANG`); `Err(EINVAL)` on a kernel without `P_PIDFD` (5.3).
#[cfg(any(target_os = "linux", target_os = "android"))]
fn waitid_pidfd(fd: &OwnedFd, flags: libc::c_int) -> io::Result<Option<ExitStatus>> {
    loop {
        // SAFETY: an all-zero siginfo_t is a valid value (plain integers).
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid(2) with a pidfd we own and a siginfo it may fill.
        let r = unsafe {
            libc::waitid(
                libc::P_PIDFD,
                fd.as_raw_fd() as libc::id_t,
                &mut info,
                libc::WEXITED | flags,
            )
        };
        if r == 0 {
            // SAFETY: as in status_of; si_pid is 0 when nothing was found.
            return Ok((unsafe { info.si_pid() } != 0).then(|| status_of(&info)));
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn waitid_pidfd(_: &OwnedFd, _: libc::c_int) -> io::Result<Option<ExitStatus>> {
    Err(io::Error::from_raw_os_error(libc::EINVAL))
}

/// `waitpid(pid, flags)` for our own child: `Ok(None)` while it runs.
fn waitpid(pid: u32, flags: libc::c_int) -> io::Result<Option<ExitStatus>> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| io::Error::from_raw_os_error(libc::ECHILD))?;
    loop {
        let mut st = 0;
        // SAFETY: waitpid(2) for one pid (never -1), with a status it fills.
        let r = unsafe { libc::waitpid(pid, &mut st, flags) };
        if r == pid {
            return Ok(Some(ExitStatus::from_raw(st)));
        }
        if r == 0 {
            return Ok(None);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Reaps the child if it exited (`block`: waits for it). `Ok(None)`: still
/// running. `Err(ECHILD)`: reaped without us.
pub(crate) fn wait(
    pid: u32,
    pidfd: Option<&OwnedFd>,
    block: bool,
) -> io::Result<Option<ExitStatus>> {
    let flags = if block { 0 } else { libc::WNOHANG };
    if let Some(fd) = pidfd {
        match waitid_pidfd(fd, flags) {
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
            r => return r,
        }
    }
    waitpid(pid, flags)
}

/// Whether the child is still ours to signal: not yet reaped (asked with
/// `WNOWAIT`, which reaps nothing: a zombie keeps its pid, so a signal to
/// it reaches no other process). By pidfd where there is one.
fn unreaped(pid: libc::pid_t, pidfd: Option<&OwnedFd>) -> bool {
    let ask = |idtype, id: libc::id_t| {
        // SAFETY: an all-zero siginfo_t is a valid value (plain integers).
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let flags = libc::WEXITED | libc::WNOHANG | libc::WNOWAIT;
        // SAFETY: waitid(2) with WNOWAIT only asks, for one child.
        if unsafe { libc::waitid(idtype, id, &mut info, flags) } == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    };
    #[cfg(any(target_os = "linux", target_os = "android"))]
    if let Some(fd) = pidfd {
        match ask(libc::P_PIDFD, fd.as_raw_fd() as libc::id_t) {
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
            r => return r.is_ok(),
        }
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    let _ = pidfd;
    ask(libc::P_PID, pid as libc::id_t).is_ok()
}

/// Sends `sig` to the child: through its pidfd where there is one, else by
/// pid while it is known unreaped. `ESRCH` once it is gone.
pub(crate) fn send_signal(pid: u32, pidfd: Option<&OwnedFd>, sig: i32) -> io::Result<()> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    if let Some(fd) = pidfd {
        // SAFETY: pidfd_send_signal(2) with a pidfd we own, no siginfo.
        let r = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                fd.as_raw_fd(),
                sig,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        };
        if r == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ENOSYS) {
            return Err(e);
        }
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    let _ = pidfd;
    let pid = libc::pid_t::try_from(pid).map_err(|_| io::Error::from_raw_os_error(libc::ESRCH))?;
    if !unreaped(pid, None) {
        return Err(io::Error::from_raw_os_error(libc::ESRCH));
    }
    // SAFETY: kill(2) on our own child, just seen unreaped (a zombie at
    // worst), so the pid still names it.
    if unsafe { libc::kill(pid, sig) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Sends `sig` to the process group the child leads. Only while the
/// leader is unreaped: its pid then still names the group (a pid is not
/// given to a new process while a group of that id has members, but once
/// the group is empty it may be, and a new group with it).
pub(crate) fn send_group_signal(pid: u32, pidfd: Option<&OwnedFd>, sig: i32) -> io::Result<()> {
    let pgid = libc::pid_t::try_from(pid).map_err(|_| io::Error::from_raw_os_error(libc::ESRCH))?;
    if !unreaped(pgid, pidfd) {
        return Err(io::Error::from_raw_os_error(libc::ESRCH));
    }
    // SAFETY: killpg(2) on the group our child leads, just seen unreaped
    // (a zombie at worst), so its pid still names the group.
    if unsafe { libc::killpg(pgid, sig) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether `SIGCHLD` is ignored (`SIG_IGN`, or a handler with
/// `SA_NOCLDWAIT`): the kernel then reaps children itself, and no wait
/// sees their status.
pub(crate) fn sigchld_ignored() -> bool {
    // SAFETY: an all-zero sigaction is a valid value to be filled.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: sigaction(2) with a null new action only reads the current one.
    let r = unsafe { libc::sigaction(libc::SIGCHLD, std::ptr::null(), &mut old) };
    r == 0 && (old.sa_sigaction == libc::SIG_IGN || old.sa_flags & libc::SA_NOCLDWAIT != 0)
}
