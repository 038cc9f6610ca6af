//! `DEFERLOOP_PS` is read when a loop is made: `1` turns the registry on,
//! `serve` also serves at the default path. (Its own test binary: the
//! variable is process-wide.)

use deferloop::{ps, Deferred, EventLoop};

#[test]
fn deferloop_ps_serve_turns_the_registry_on_and_serves() {
    let dir = std::env::temp_dir().join(format!("deferloop-ps-env-{}", std::process::id()));
    // SAFETY: this binary's only test, so no other thread reads the
    // environment while it is written.
    unsafe {
        std::env::set_var("XDG_RUNTIME_DIR", &dir);
        std::env::set_var("DEFERLOOP_PS", "serve");
    }
    std::fs::create_dir_all(&dir).unwrap();
    let d2 = dir.clone();
    // On a thread of its own: the server started from the environment lives
    // as long as its thread, and removes its socket when the thread ends.
    std::thread::spawn(move || on_a_loop_thread(&d2))
        .join()
        .unwrap();
    assert!(!ps::default_dir()
        .join(format!("{}.sock", std::process::id()))
        .exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

fn on_a_loop_thread(dir: &std::path::Path) {
    let ev = EventLoop::new().unwrap();
    assert!(ps::is_enabled());
    let line = line!() + 1;
    let (_d, _r) = Deferred::<u8>::new();
    let listed = ps::snapshot(&ev).ps();
    assert!(listed.contains(&format!("{}:{line}", file!())), "{listed}");
    let sock = ps::default_dir().join(format!("{}.sock", std::process::id()));
    assert_eq!(ps::default_dir(), dir.join("deferloop"));
    assert!(sock.exists(), "{} is served", sock.display());
}
