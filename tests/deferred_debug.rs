//! `Debug` of a Deferred says where it was created and, like Twisted's repr
//! ("waiting on Deferred at ..."), which Deferred it waits on.

use deferloop::deferred::Deferred;
use std::cell::RefCell;
use std::rc::Rc;

/// A Deferred paused on one a callback returned names that one's creation site.
#[test]
fn debug_names_the_deferred_waited_on() {
    let keep = Rc::new(RefCell::new(None));
    let k = keep.clone();
    let inner_line = Rc::new(RefCell::new(0));
    let il = inner_line.clone();
    let (d, r) = Deferred::<u8>::new();
    let outer_line = line!() - 1;
    let d = d.add_callback(move |_| {
        *il.borrow_mut() = line!() + 1;
        let (inner, ir) = Deferred::<u8>::new();
        *k.borrow_mut() = Some(ir);
        inner
    });
    assert!(!format!("{d:?}").contains("waiting_on"));
    r.callback(1).unwrap();
    let s = format!("{d:?}");
    assert!(s.contains(&format!("{}:{outer_line}", file!())), "{s}");
    let want = format!(
        "waiting_on: Deferred created at {}:{}",
        file!(),
        inner_line.borrow()
    );
    assert!(s.contains(&want), "{s}");
    keep.borrow().as_ref().unwrap().callback(2).unwrap();
    assert!(!format!("{d:?}").contains("waiting_on"));
}
