//! Unit tests of `stream_state.rs`: what a read buffer keeps.

use super::*;

#[test]
fn room_lent_and_not_used_is_not_kept() {
    let ev = crate::EventLoop::new().unwrap();
    let mut st = StreamState::new(ev.to_loop().downgrade());
    st.last_read = (200 * 1024, false);
    // A read that brought nothing: the room goes.
    let buf = st.lend(256 * 1024);
    assert!(buf.capacity() >= MAX_LEND);
    st.put_back(buf, 0);
    assert_eq!(st.buf.capacity(), 0);
    // Half a line after a large read: room for a few more, not a read.
    let mut buf = st.lend(256 * 1024);
    buf.extend_from_slice(b"half a li");
    st.put_back(buf, 9);
    assert!(st.buf.capacity() <= KEEP, "{}", st.buf.capacity());
    assert_eq!(&st.buf[..], b"half a li");
    // A read that filled most of its room keeps it (to be handed over).
    st.last_read = (100 * 1024, false);
    let mut buf = st.lend(256 * 1024);
    let cap = buf.capacity();
    buf.resize(100 * 1024, 7);
    st.put_back(buf, 100 * 1024 - 9);
    assert_eq!(st.buf.capacity(), cap);
}

#[test]
fn a_burst_s_capacity_is_given_back_once_read() {
    let ev = crate::EventLoop::new().unwrap();
    let mut st = StreamState::new(ev.to_loop().downgrade());
    st.push(&vec![7; 300 * 1024]);
    // Read in pieces, as `read_exactly` and `read_line` consume.
    st.consume(200 * 1024);
    assert_eq!(st.available(), 100 * 1024);
    assert!(st.buf.capacity() <= 4 * 100 * 1024, "{}", st.buf.capacity());
    st.consume(100 * 1024 - 10);
    assert_eq!(st.available(), 10);
    assert!(st.buf.capacity() <= KEEP, "{}", st.buf.capacity());
    st.push(&[1; 100]);
    st.consume(110);
    assert_eq!(st.available(), 0);
    assert!(st.buf.capacity() <= KEEP);
    // A big buffer emptied in one go.
    st.push(&vec![7; 300 * 1024]);
    st.consume(300 * 1024);
    assert_eq!(st.buf.capacity(), 0);
    // A small one keeps its capacity, to be reused.
    st.push(&[1; 1000]);
    st.consume(1000);
    assert!(st.buf.capacity() >= 1000);
}
