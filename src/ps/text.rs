//! The text views of a [`Report`]: `ps` (a table), `pstree` (the waits-on
//! forest, cycles printed as cycles), `loop` (queues and current callback).

use super::{PendingDeferred, PendingState, Report, WaitsOn};
use crate::deferred::registry::{describe_wait, short as dur};
use std::collections::{HashMap, HashSet};
use std::fmt::Write;

impl Report {
    /// The table of pending Deferreds: id, age, state, creation site, what
    /// each waits on.
    pub fn ps(&self) -> String {
        let mut out = String::new();
        if !self.registry_on {
            out.push_str(
                "the Deferred registry is off (deferloop::ps::enable, or DEFERLOOP_PS=1)\n",
            );
            return out;
        }
        let _ = writeln!(out, "{} pending Deferreds", self.deferreds.len());
        let rows: Vec<[String; 5]> = self
            .deferreds
            .iter()
            .map(|p| {
                [
                    format!("#{}", p.id),
                    dur(p.age),
                    state(p.state).to_string(),
                    p.created_at.to_string(),
                    self.waits(p),
                ]
            })
            .collect();
        let head = ["ID", "AGE", "STATE", "CREATED AT", "WAITS ON"].map(String::from);
        let mut width = [0usize; 4];
        for row in std::iter::once(&head).chain(&rows) {
            for (w, cell) in width.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        for row in std::iter::once(&head).chain(&rows) {
            let line = format!(
                "{:>w0$}  {:>w1$}  {:<w2$}  {:<w3$}  {}",
                row[0],
                row[1],
                row[2],
                row[3],
                row[4],
                w0 = width[0],
                w1 = width[1],
                w2 = width[2],
                w3 = width[3],
            );
            let _ = writeln!(out, "{}", line.trim_end());
        }
        out
    }

    /// The waits-on graph as trees, one from each root (a pending Deferred
    /// nothing pending waits on); then each cycle, as `cycle: #a → #b → #a`.
    /// A Deferred reached twice is printed in full once, then as `(above)`.
    pub fn pstree(&self) -> String {
        let mut out = String::new();
        if !self.registry_on {
            return self.ps();
        }
        let by_id: HashMap<u64, &PendingDeferred> =
            self.deferreds.iter().map(|p| (p.id, p)).collect();
        let mut waited_on = HashSet::new();
        for p in &self.deferreds {
            for w in &p.waits_on {
                if let WaitsOn::Deferred(id) = w {
                    waited_on.insert(*id);
                }
            }
        }
        let mut shown = HashSet::new();
        let roots: Vec<&PendingDeferred> = self
            .deferreds
            .iter()
            .filter(|p| !waited_on.contains(&p.id))
            .collect();
        for root in &roots {
            self.tree(
                &mut out,
                &by_id,
                root,
                "",
                None,
                &mut shown,
                &mut Vec::new(),
            );
        }
        let cycles = find_cycles(&self.deferreds, &by_id);
        // What only cycles reach: a tree from the first of each cycle.
        for c in &cycles {
            if let Some(p) = by_id.get(&c[0]).filter(|p| !shown.contains(&p.id)) {
                self.tree(&mut out, &by_id, p, "", None, &mut shown, &mut Vec::new());
            }
        }
        for c in &cycles {
            let ids: Vec<String> = c.iter().chain(c.first()).map(|i| format!("#{i}")).collect();
            let _ = writeln!(out, "cycle: {}", ids.join(" → "));
        }
        if self.deferreds.is_empty() {
            out.push_str("no pending Deferreds\n");
        }
        out
    }

    #[allow(clippy::too_many_arguments)]
    fn tree(
        &self,
        out: &mut String,
        by_id: &HashMap<u64, &PendingDeferred>,
        p: &PendingDeferred,
        prefix: &str,
        last: Option<bool>,
        shown: &mut HashSet<u64>,
        path: &mut Vec<u64>,
    ) {
        let (branch, child_prefix) = match last {
            None => ("", String::new()),
            Some(true) => ("└── ", format!("{prefix}    ")),
            Some(false) => ("├── ", format!("{prefix}│   ")),
        };
        let head = format!(
            "#{} {} {}, created at {}",
            p.id,
            state(p.state),
            dur(p.age),
            p.created_at
        );
        if path.contains(&p.id) {
            let _ = writeln!(out, "{prefix}{branch}#{} (cycle)", p.id);
            return;
        }
        if !shown.insert(p.id) {
            let _ = writeln!(out, "{prefix}{branch}#{} (above)", p.id);
            return;
        }
        let _ = writeln!(out, "{prefix}{branch}{head}{}", self.timeout(p));
        path.push(p.id);
        let n = p.waits_on.len();
        for (i, w) in p.waits_on.iter().enumerate() {
            let is_last = i + 1 == n;
            match w {
                WaitsOn::Deferred(id) => match by_id.get(id) {
                    Some(child) => {
                        self.tree(out, by_id, child, &child_prefix, Some(is_last), shown, path)
                    }
                    None => leaf(out, &child_prefix, is_last, &format!("#{id}")),
                },
                other => leaf(out, &child_prefix, is_last, &self.wait(other)),
            }
        }
        path.pop();
    }

    /// The loop: the callback it is running (and since when), its ready
    /// queue and timers.
    pub fn loop_summary(&self) -> String {
        let mut out = String::new();
        let m = &self.monitor;
        match &m.current {
            Some(c) => {
                let _ = writeln!(
                    out,
                    "running a callback scheduled at {} for {}",
                    c.scheduled_at,
                    dur(c.running_for)
                );
            }
            None => out.push_str("not inside a callback\n"),
        }
        let _ = writeln!(
            out,
            "after {} turns: {} ready, {} timers, {} I/O sources",
            m.turns,
            m.ready,
            m.timer_count,
            m.io_sources.len()
        );
        for site in &m.ready_sites {
            let _ = writeln!(out, "  ready: scheduled at {site}");
        }
        for t in &m.timers {
            let due = t.deadline.saturating_duration_since(self.now);
            let _ = writeln!(
                out,
                "  timer: due in {}, scheduled at {}",
                dur(due),
                t.scheduled_at
            );
        }
        for io in &m.io_sources {
            let _ = writeln!(
                out,
                "  {}: read={} write={}, registered at {}",
                io.kind, io.interest.0, io.interest.1, io.registered_at
            );
        }
        out
    }

    /// `loop`, `ps`, `pstree` and `ss`, one after the other.
    pub fn all(&self) -> String {
        format!(
            "== loop\n{}\n== ps\n{}\n== pstree\n{}\n== ss\n{}",
            self.loop_summary(),
            self.ps(),
            self.pstree(),
            self.ss()
        )
    }

    /// The stream connections opened while the registry was on: peer,
    /// state, bytes waiting to be written, paused directions, idle time
    /// (where an idle timeout is set), where each was opened. Bytes in and
    /// out are not counted (nothing is added to the read and write paths).
    pub fn ss(&self) -> String {
        let mut out = String::new();
        if !self.registry_on {
            out.push_str(
                "the Deferred registry is off (deferloop::ps::enable, or DEFERLOOP_PS=1)\n",
            );
            return out;
        }
        let _ = writeln!(out, "{} connections", self.connections.len());
        for c in &self.connections {
            let paused = match (c.reading_paused, c.writing_paused) {
                (true, true) => ", reading and writing paused",
                (true, false) => ", reading paused",
                (false, true) => ", writing paused",
                (false, false) => "",
            };
            let idle = c.idle.map_or(String::new(), |(idle, limit)| {
                format!(", idle {} of {}", dur(idle), dur(limit))
            });
            let _ = writeln!(
                out,
                "{} {}: {} bytes to write{paused}{idle}, {} bytes in, {} out, opened at {}",
                c.state, c.peer, c.write_buffered, c.bytes_in, c.bytes_out, c.opened_at
            );
        }
        out
    }

    fn waits(&self, p: &PendingDeferred) -> String {
        let parts: Vec<String> = p.waits_on.iter().map(|w| self.wait(w)).collect();
        let mut s = if parts.is_empty() {
            "-".to_string()
        } else {
            parts.join(", ")
        };
        s.push_str(&self.timeout(p));
        s
    }

    fn wait(&self, w: &WaitsOn) -> String {
        match w {
            WaitsOn::Deferred(id) => format!("#{id}"),
            WaitsOn::Unlisted(at) => format!("Deferred created at {at} (made before ps was on)"),
            WaitsOn::Leaf(w) => describe_wait(w, self.now),
        }
    }

    fn timeout(&self, p: &PendingDeferred) -> String {
        match p.timeout_at {
            Some(at) => format!(
                " (times out in {})",
                dur(at.saturating_duration_since(self.now))
            ),
            None => String::new(),
        }
    }
}

fn leaf(out: &mut String, prefix: &str, last: bool, text: &str) {
    let branch = if last { "└── " } else { "├── " };
    let _ = writeln!(out, "{prefix}{branch}{text}");
}

fn state(s: PendingState) -> &'static str {
    match s {
        PendingState::Unfired => "unfired",
        PendingState::Waiting => "waiting",
        PendingState::Paused => "paused",
        PendingState::Running => "running",
    }
}

/// Every cycle of Deferred edges, each once, as the ids around it starting
/// from its smallest (iterative depth-first search with colours).
fn find_cycles(all: &[PendingDeferred], by_id: &HashMap<u64, &PendingDeferred>) -> Vec<Vec<u64>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Colour {
        Grey,
        Black,
    }
    let mut colour: HashMap<u64, Colour> = HashMap::new();
    let mut cycles: Vec<Vec<u64>> = Vec::new();
    let edges = |id: u64| -> Vec<u64> {
        by_id.get(&id).map_or_else(Vec::new, |p| {
            p.waits_on
                .iter()
                .filter_map(|w| match w {
                    WaitsOn::Deferred(c) if by_id.contains_key(c) => Some(*c),
                    _ => None,
                })
                .collect()
        })
    };
    for start in all.iter().map(|p| p.id) {
        if colour.contains_key(&start) {
            continue;
        }
        // (node, its edges, next edge index); `path` mirrors the stack.
        let mut stack = vec![(start, edges(start), 0usize)];
        let mut path = vec![start];
        colour.insert(start, Colour::Grey);
        while let Some((_, next, i)) = stack.last_mut() {
            if let Some(&c) = next.get(*i) {
                *i += 1;
                match colour.get(&c) {
                    None => {
                        colour.insert(c, Colour::Grey);
                        path.push(c);
                        stack.push((c, edges(c), 0));
                    }
                    Some(Colour::Grey) => {
                        let from = path.iter().position(|&x| x == c).unwrap_or(0);
                        let mut cyc = path[from..].to_vec();
                        let min = cyc
                            .iter()
                            .enumerate()
                            .min_by_key(|(_, v)| **v)
                            .map_or(0, |m| m.0);
                        cyc.rotate_left(min);
                        if !cycles.contains(&cyc) {
                            cycles.push(cyc);
                        }
                    }
                    Some(Colour::Black) => {}
                }
            } else {
                let (id, _, _) = stack.pop().expect("the loop saw an entry");
                colour.insert(id, Colour::Black);
                path.pop();
            }
        }
    }
    cycles
}
