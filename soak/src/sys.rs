//! Measuring the process: a counting allocator (heap bytes live and their
//! peak), RSS, open fds, heap trim, the fd limit, and socket options.

use super::*;

/// The system allocator, counting the bytes live on the heap and their peak.
pub(crate) struct Counting;

pub(crate) static HEAP: AtomicIsize = AtomicIsize::new(0);
pub(crate) static HEAP_PEAK: AtomicIsize = AtomicIsize::new(0);

pub(crate) fn heap_note(delta: isize) {
    let now = HEAP.fetch_add(delta, Relaxed) + delta;
    HEAP_PEAK.fetch_max(now, Relaxed);
}

// SAFETY: every call is forwarded to `System` with the same arguments; the
// counters are statistics only.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        heap_note(l.size() as isize);
        // SAFETY: the caller's contract is `System`'s.
        unsafe { System.alloc(l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        heap_note(l.size() as isize);
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        heap_note(-(l.size() as isize));
        // SAFETY: as above.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        heap_note(new as isize - l.size() as isize);
        // SAFETY: as above.
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
pub(crate) static ALLOC: Counting = Counting;

/// Resident set size, from /proc (Linux).
pub(crate) fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

pub(crate) fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

/// Gives freed memory back to the OS before RSS is read (glibc keeps it).
pub(crate) fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory; no pointer is involved.
    unsafe {
        libc::malloc_trim(0);
    }
}

pub(crate) fn raise_fd_limit(n: u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid pointer to a local struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < n as libc::rlim_t {
            lim.rlim_cur = (n as libc::rlim_t).min(lim.rlim_max);
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

/// Sets a socket option of `t`'s socket to an `int` value.
pub(crate) fn set_int_opt(
    t: &Transport,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) {
    if let Some(fd) = t.raw_fd() {
        // SAFETY: a valid open fd and a pointer to a local int of the size given.
        unsafe {
            libc::setsockopt(
                fd,
                level,
                name,
                (&value as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
    }
}

/// Closes `t` with a reset: SO_LINGER with a zero timeout, then `abort`.
pub(crate) fn reset(t: &Transport) {
    if let Some(fd) = t.raw_fd() {
        let linger = libc::linger {
            l_onoff: 1,
            l_linger: 0,
        };
        // SAFETY: a valid open fd and a pointer to a local `linger` of the size given.
        unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_LINGER,
                (&linger as *const libc::linger).cast(),
                std::mem::size_of::<libc::linger>() as libc::socklen_t,
            );
        }
    }
    t.abort();
}
