//! The showcase's claim, bounded: a seed search finds a seed where the naive
//! primary/backup store loses an acknowledged write, replaying that seed
//! fails again the same way, and the corrected store passes every seed the
//! search tried (the example runs 1,000).

#[path = "../examples/sim_kv/kv.rs"]
#[allow(dead_code)]
mod kv;

#[test]
fn the_search_finds_the_naive_stores_lost_write_and_the_fix_holds() {
    let seeds = 0..60u64;
    let failing = seeds
        .clone()
        .find(|&s| kv::run(s, true).failed())
        .expect("a seed in 0..60 loses an acknowledged write in the naive store");
    let first = kv::run(failing, true);
    let again = kv::run(failing, true);
    assert!(!first.outcome.lost.is_empty(), "{:?}", first.outcome);
    assert_eq!(first.outcome.lost, again.outcome.lost);
    assert_eq!(first.trace, again.trace, "a replay is the same run");
    for s in seeds {
        let run = kv::run(s, false);
        assert!(
            !run.failed(),
            "seed {s}: the corrected store {:?}",
            run.outcome
        );
        assert_eq!(run.outcome.acked.len(), kv::KEYS);
    }
}
