//! Asks a running deferloop program what it waits on, through the socket
//! it serves with `deferloop::ps::serve` (or `DEFERLOOP_PS=serve`).
//!
//! ```text
//! cargo run --example ps -- <pid | socket path> [ps | pstree | ss | loop | all]
//! ```
//! A pid names `<pid>.sock` in `$XDG_RUNTIME_DIR/deferloop`, else in
//! `/tmp/deferloop-<uid>`. Only the program's own user is answered.

fn main() {
    let mut args = std::env::args().skip(1);
    let Some(target) = args.next() else {
        eprintln!("usage: ps <pid | socket path> [ps | pstree | ss | loop | all]");
        std::process::exit(2);
    };
    let view = args.next().unwrap_or_else(|| "all".into());
    match deferloop::ps::query(&target, &view) {
        Ok(text) => print!("{text}"),
        Err(e) => {
            eprintln!("ps: {target}: {e}");
            std::process::exit(1);
        }
    }
}
