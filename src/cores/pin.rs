//! Pinning a loop's thread to one CPU (Linux); elsewhere nothing is pinned.

use std::io;

/// The CPUs this process may run on, in order (empty where unknown).
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(super) fn allowed_cpus() -> Vec<usize> {
    // SAFETY: `cpu_set_t` is a plain bit array; all zeroes is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: pid 0 is the calling thread; size and pointer describe `set`.
    let r = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) };
    if r != 0 {
        return Vec::new();
    }
    (0..libc::CPU_SETSIZE as usize)
        // SAFETY: `CPU_ISSET` reads one bit of `set`; it checks the index.
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect()
}

/// Pins the calling thread to `cpu`.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(super) fn pin_self(cpu: usize) -> io::Result<()> {
    // SAFETY: as in `allowed_cpus`.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `CPU_SET` writes one bit of `set`; it checks the index.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: pid 0 is the calling thread; size and pointer describe `set`.
    let r = unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub(super) fn allowed_cpus() -> Vec<usize> {
    Vec::new()
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub(super) fn pin_self(_cpu: usize) -> io::Result<()> {
    Ok(())
}
