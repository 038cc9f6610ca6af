//! Datagrams: a UDP socket as a loop source (`socket.rs`: its state, dispatch
//! and send queue) and [`DatagramTransport`](transport::DatagramTransport), the
//! handle a `DatagramProtocol` is given (`transport.rs`, with the `Loop`
//! methods that open a socket). Shares the connection core's phases, protocol
//! calls and flow control (`net/core`). Exposes `DatagramTransport`,
//! re-exported by `net`.

pub(super) mod socket;
pub(super) mod transport;
