//! Certificates made at test time (rcgen): a CA, and a server certificate
//! it signed, for the names given, valid now or expired.
#![allow(dead_code)]

use deferloop::net::tls::{ClientConfig, ServerConfig};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};

pub struct Pki {
    pub ca_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
}

/// A CA and a leaf for `names` (DNS names or IP addresses).
pub fn pki(names: &[&str], expired: bool) -> Pki {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "deferloop test CA");
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
    let mut leaf = CertificateParams::new(names).unwrap();
    leaf.distinguished_name
        .push(DnType::CommonName, "deferloop test server");
    if expired {
        leaf.not_before = rcgen::date_time_ymd(2000, 1, 1);
        leaf.not_after = rcgen::date_time_ymd(2001, 1, 1);
    }
    let cert = leaf.signed_by(&key, &ca_cert, &ca_key).unwrap();
    Pki {
        ca_pem: ca_cert.pem(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    }
}

/// The usual one: `localhost`, 127.0.0.1 and ::1, valid now.
pub fn localhost() -> Pki {
    pki(&["localhost", "127.0.0.1", "::1"], false)
}

pub fn server(p: &Pki) -> ServerConfig {
    ServerConfig::from_pem(p.cert_pem.as_bytes(), p.key_pem.as_bytes()).unwrap()
}

pub fn client(p: &Pki) -> ClientConfig {
    ClientConfig::new()
        .add_root_pem(p.ca_pem.as_bytes())
        .unwrap()
}

/// A rustls client config of our own (not deferloop's), trusting `p`'s CA:
/// for a peer driven by hand, byte by byte or on a blocking socket.
pub fn raw_client(p: &Pki) -> std::sync::Arc<deferloop::net::tls::rustls::ClientConfig> {
    use deferloop::net::tls::rustls;
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::pem::PemObject::pem_slice_iter(p.ca_pem.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    std::sync::Arc::new(config)
}

/// A blocking rustls client (trusting `p`'s CA) connected to `addr` as
/// `localhost`, its handshake done: a peer the test drives by hand.
pub fn raw_connect(
    p: &Pki,
    addr: std::net::SocketAddr,
) -> (
    std::net::TcpStream,
    deferloop::net::tls::rustls::ClientConnection,
) {
    let mut sock = std::net::TcpStream::connect(addr).unwrap();
    let name = "localhost".try_into().unwrap();
    let mut c = deferloop::net::tls::rustls::ClientConnection::new(raw_client(p), name).unwrap();
    while c.is_handshaking() {
        c.complete_io(&mut sock).unwrap();
    }
    (sock, c)
}

/// One round between a hand-driven rustls client and a server connection in
/// memory: the client's records to `peer`, `turn()`, then what the server
/// wrote back into the client, processed.
pub fn exchange(
    client: &mut deferloop::net::tls::rustls::ClientConnection,
    peer: &deferloop::net::memory::Peer,
    turn: impl FnOnce(),
) {
    let mut out = Vec::new();
    while client.wants_write() {
        client.write_tls(&mut out).unwrap();
    }
    if !out.is_empty() {
        peer.send(&out);
    }
    turn();
    let got = peer.take_written();
    let mut records = &got[..];
    while !records.is_empty() {
        client.read_tls(&mut records).unwrap();
        client.process_new_packets().unwrap();
    }
}
