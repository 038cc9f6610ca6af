//! A short soak (the soak harness, soak/src/main.rs, compiled in here): a few seconds of echo
//! over loopback, TCP and Unix sockets, with resets, half-closes, protocol
//! panics, timers and threadsafe calls, then the audit — no byte, callback, Deferred, timer,
//! fd or heap memory may go missing or stay behind. CI also runs the
//! harness itself for a minute (RELIABILITY.md); `SOAK_SECS` lengthens this,
//! `SOAK_RSS_SLACK_MIB` changes the allowed RSS growth (16 MiB).

#[path = "../soak/src/main.rs"]
#[allow(dead_code)]
mod soak;

#[test]
fn a_short_soak_loses_nothing_and_leaves_nothing_behind() {
    let secs = std::env::var("SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0);
    let mut cfg = soak::Config {
        secs,
        conns: 50,
        threads: 3,
        ..soak::Config::default()
    };
    // Under AddressSanitizer (scripts/asan.sh) RSS is the sanitizer's: its
    // quarantine keeps freed memory. The heap count still applies.
    if let Some(mib) = std::env::var("SOAK_RSS_SLACK_MIB")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
    {
        cfg.rss_slack = mib << 20;
    }
    let report = soak::run(&cfg);
    println!("{report}");
    let v = report.violations();
    assert!(v.is_empty(), "{report}");
    assert!(report.client.made >= 50, "{report}");
    assert!(report.client.endings.iter().all(|&n| n > 0), "{report}");
}
