//! Many idle connections: as many loopback connections as the fd
//! limit allows, each with an idle timeout that every read pushes back;
//! deferloop beside tokio, each server in its own process.
//!
//! - `cargo bench --bench idle`: the comparison, interleaved, as markdown on
//!   stdout (progress on stderr). `IDLE_ROUNDS` (default 7) and
//!   `IDLE_CONNECTIONS` (default: from the fd limit) shorten it while developing.
//! - `cargo test` (no `--bench`): a smoke — 200 connections per server, one
//!   sample each, every reply checked. Bounded time.
//! - `idle server NAME`: one server (see `servers.rs`), used by both.
//!
//! Files: `servers.rs` (the contenders), `run.rs` (processes, the sample, the
//! schedule, the report), `../echo/sys.rs` (affinity, /proc, the counting
//! allocator).

#[path = "../common/mod.rs"]
mod common;
#[path = "../echo/sys.rs"]
#[allow(dead_code)]
mod sys;

mod run;
mod servers;

#[global_allocator]
static ALLOC: sys::Counting = sys::Counting;

fn main() {
    run::raise_fd_limit();
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("server") => run::serve(args.get(1).map_or("", String::as_str)),
        _ if common::full_run() => run::full(),
        _ => run::smoke(),
    }
}
