//! Linux specifics the harness needs: CPU affinity (server and client on
//! separate cores), a process's CPU time from `/proc/PID/stat`, and a counting
//! global allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

/// Counts every allocation (and reallocation) and free of this process.
pub struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);
static FREES: AtomicU64 = AtomicU64::new(0);

// SAFETY: every method forwards to the system allocator with the caller's
// arguments unchanged, so its guarantees are `System`'s; the counters are
// atomics and never affect the memory returned.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded as received (see the impl).
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded as received (see the impl).
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded as received (see the impl).
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        FREES.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded as received (see the impl).
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// Allocations (including reallocations) and frees so far in this process.
pub fn alloc_counts() -> (u64, u64) {
    (
        ALLOCS.load(Ordering::Relaxed),
        FREES.load(Ordering::Relaxed),
    )
}

fn cpu_set(cpus: &[usize]) -> libc::cpu_set_t {
    // SAFETY: `cpu_set_t` is a plain bit array, for which all zeroes is the
    // valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus {
        // SAFETY: `CPU_SET` writes one bit of `set`; it checks `c` against
        // the set's size itself.
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    set
}

/// The CPUs this process may run on, in order.
pub fn allowed_cpus() -> Vec<usize> {
    let mut set = cpu_set(&[]);
    // SAFETY: pid 0 is the calling thread; size and pointer describe `set`.
    let r = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) };
    if r != 0 {
        return Vec::new();
    }
    (0..libc::CPU_SETSIZE as usize)
        // SAFETY: `CPU_ISSET` reads one bit of `set`, index checked by it.
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect()
}

/// Pins the calling thread (and the threads it starts afterwards) to `cpu`.
pub fn pin_self(cpu: usize) -> io::Result<()> {
    let set = cpu_set(&[cpu]);
    // SAFETY: pid 0 is the calling thread; size and pointer describe `set`.
    let r = unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Makes the process `cmd` starts run on `cpus` only, from its first
/// instruction (all of them: not the harness's own pinning, which it would
/// otherwise inherit).
pub fn pin_child(cmd: &mut Command, cpus: &[usize]) {
    let set = cpu_set(cpus);
    // SAFETY: the closure runs in the forked child before exec; it only makes
    // the `sched_setaffinity` system call on a set built before the fork (no
    // allocation, no lock), which is async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            if libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) == 0 {
                Ok(())
            } else {
                Err(io::Error::last_os_error())
            }
        });
    }
}

/// User + system CPU time of process `pid` so far, in seconds, from
/// `/proc/PID/stat` (fields 14 and 15, in clock ticks).
pub fn cpu_seconds(pid: u32) -> io::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The command name (field 2) may hold spaces: count fields after its ')'.
    let rest = &stat[stat
        .rfind(')')
        .ok_or_else(|| io::Error::other("bad stat"))?
        + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| -> io::Result<f64> {
        f.get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .map(|v| v as f64)
            .ok_or_else(|| io::Error::other("bad stat"))
    };
    // Fields 14 (utime) and 15 (stime) are the 12th and 13th after the name.
    Ok((ticks(11)? + ticks(12)?) / clock_ticks())
}

/// Voluntary context switches of process `pid`'s main thread so far (from
/// `/proc/PID/status`): how often its loop slept waiting for events.
pub fn sleeps(pid: u32) -> io::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| io::Error::other("no voluntary_ctxt_switches"))
}

fn clock_ticks() -> f64 {
    // SAFETY: `sysconf` only reads a configuration value.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}
