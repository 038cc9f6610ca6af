//! The registry's file descriptor map against a model: after any sequence of
//! inserts, removals, claims and releases, `by_fd` says what a plain map
//! (removal by a scan of every fd, as the registry once did) says, and it
//! agrees with the fds each entry keeps for its O(1) removal.

use super::*;
use crate::EventLoop;
use proptest::prelude::*;

struct Quiet;

impl Source for Quiet {
    fn dispatch(self: Rc<Self>, _: &Loop, _: SourceKey, _: Ready) -> PostAction {
        PostAction::Continue
    }
    fn name(&self) -> &'static str {
        "quiet"
    }
}

#[derive(Debug, Clone)]
enum Op {
    Insert,
    /// Removes the nth key ever made (it may be gone already).
    Remove(usize),
    /// Gives an fd to the nth key ever made (as a source, or as `add_reader`).
    Claim(RawFd, usize, bool),
    Release(RawFd, usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => Just(Op::Insert),
        2 => any::<usize>().prop_map(Op::Remove),
        4 => (0..6, any::<usize>(), any::<bool>()).prop_map(|(f, k, u)| Op::Claim(f, k, u)),
        2 => (0..6, any::<usize>()).prop_map(|(f, k)| Op::Release(f, k)),
    ]
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000)
}

/// Every `fd → key` has that key's entry listing `fd`, and every fd an
/// entry lists maps back to it, once.
fn mirror_holds(reg: &Registry) -> Result<(), TestCaseError> {
    for (fd, (k, _)) in &reg.by_fd {
        let e = reg.entries.get(k.index as usize).filter(|e| e.gen == k.gen);
        prop_assert!(e.is_some(), "fd {} maps to a removed key", fd);
        prop_assert!(
            e.unwrap().fds.contains(fd),
            "fd {} missing in its entry",
            fd
        );
    }
    for (index, e) in &reg.entries {
        for (i, fd) in e.fds.iter().enumerate() {
            prop_assert!(!e.fds[..i].contains(fd), "fd {} listed twice", fd);
            let owner = reg.by_fd.get(fd).map(|(k, _)| (k.index as usize, k.gen));
            prop_assert_eq!(
                owner,
                Some((index, e.gen)),
                "fd {} listed by a non-owner",
                fd
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn fd_map_matches_a_model_and_the_entries(ops in proptest::collection::vec(op(), 1..80)) {
        let ev = EventLoop::new().unwrap();
        let mut made: Vec<SourceKey> = Vec::new();
        let mut live: Vec<SourceKey> = Vec::new();
        let mut model: HashMap<RawFd, (SourceKey, Owner)> = HashMap::new();
        for op in ops {
            match op {
                Op::Insert => {
                    let key = ev
                        .insert_source(Location::caller(), |_, _| Ok(Rc::new(Quiet) as Rc<dyn Source>))
                        .unwrap();
                    made.push(key);
                    live.push(key);
                }
                Op::Remove(n) if !made.is_empty() => {
                    let key = made[n % made.len()];
                    let was = live.contains(&key);
                    prop_assert_eq!(ev.remove_source(key).is_some(), was);
                    live.retain(|k| *k != key);
                    model.retain(|_, (k, _)| *k != key);
                }
                Op::Claim(fd, n, user) if !made.is_empty() => {
                    let key = made[n % made.len()];
                    let owner = if user { Owner::User } else { Owner::Source };
                    ev.inner.io.borrow_mut().set_owner(fd, key, owner);
                    if live.contains(&key) {
                        model.insert(fd, (key, owner));
                    }
                }
                Op::Release(fd, n) if !made.is_empty() => {
                    let key = made[n % made.len()];
                    ev.release_fd(fd, key);
                    if model.get(&fd).is_some_and(|(k, _)| *k == key) {
                        model.remove(&fd);
                    }
                }
                _ => {}
            }
            let reg = ev.inner.io.borrow();
            prop_assert_eq!(&reg.by_fd, &model);
            for fd in 0..6 {
                prop_assert_eq!(reg.by_fd(fd), model.get(&fd).copied());
            }
            mirror_holds(&reg)?;
        }
    }
}
