//! TCP echo, closed loop, every contender in its own server process — the
//! uvloop benchmark's shape (vmbench): 10 connections, one `x…\n` message in
//! flight on each, 1 KiB / 10 KiB / 100 KiB.
//!
//! - `cargo bench --bench echo [-- --python PY | --no-python WHY] [--chart SVG]`:
//!   the full comparison, interleaved, as markdown on stdout (progress on stderr).
//! - `cargo test` (no `--bench`): a smoke — the harness's self-checks, then
//!   each Rust server echoes a few hundred messages. No Python, bounded time.
//! - `echo server NAME`: one server, used by both (see `servers.rs`).
//! - `echo load ADDR SIZE SECONDS [CONNECTIONS]`: the load client alone, against
//!   any echo server (for profiling a server under load, say); with
//!   `ECHO_LOAD_REQUEST=1`, the request/response workload (`rr.rs`; SIZE unused).
//!
//! Also a request/response workload over lines (`rr.rs`): the raw protocol
//! beside `Stream::read_line`.
//!
//! Files: `servers.rs` (the Rust contenders), `sizes.rs` (the read size
//! they share), `client.rs` (the load client), `run.rs` (processes,
//! schedule, report), `tls.rs` (the TLS rows, with `--features tls`),
//! `sys.rs` (affinity, /proc, the counting allocator), `../common/coro.rs`
//! (coroutines on deferloop), `scripts/echo_server.py` (the Python peers).

#[path = "../common/mod.rs"]
mod common;
#[path = "../../examples/echo_server.rs"]
mod echo_example;
#[path = "../../examples/embed_tokio.rs"]
#[allow(dead_code)]
mod embed_tokio;

mod client;
mod contenders;
mod report;
mod rr;
mod run;
mod servers;
mod sizes;
mod sys;
mod tls;

#[global_allocator]
static ALLOC: sys::Counting = sys::Counting;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("server") => run::serve(args.get(1).map_or("", String::as_str)),
        Some("load") => run::load(&args[1..]),
        _ if common::full_run() => run::full(&args),
        _ => run::smoke(),
    }
}
