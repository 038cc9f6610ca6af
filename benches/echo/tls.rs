//! The TLS rows: deferloop's echo protocol under `listen_tls`, and tokio
//! with tokio-rustls, both on rustls with the ring provider, TLS 1.3, the
//! same certificate. The harness makes the certificate (rcgen) and hands it
//! to the server processes in `ECHO_TLS_CERT` / `ECHO_TLS_KEY`; the load
//! client trusts it. The handshake happens before the measured phase (each
//! load connection is made once), so the figures are per echoed request.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, OnceLock};
use tokio_rustls::rustls;

/// What the load client reads and writes: a plain or a TLS stream.
pub trait Io: Read + Write {}
impl<T: Read + Write> Io for T {}

/// The certificate and key (PEM), made once per harness process.
pub fn material() -> &'static (String, String) {
    static M: OnceLock<(String, String)> = OnceLock::new();
    M.get_or_init(|| {
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_string()])
            .expect("params")
            .self_signed(&key)
            .expect("certificate");
        (cert.pem(), key.serialize_pem())
    })
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// In a server process: the certificate the harness passed.
fn from_env() -> io::Result<(String, String)> {
    let get = |k: &str| std::env::var(k).map_err(|_| io::Error::other(format!("no {k}")));
    Ok((get("ECHO_TLS_CERT")?, get("ECHO_TLS_KEY")?))
}

/// Wraps a connected load-client socket in TLS (handshake included).
pub fn client(sock: TcpStream) -> io::Result<Box<dyn Io + Send>> {
    static CONFIG: OnceLock<Arc<rustls::ClientConfig>> = OnceLock::new();
    let config = CONFIG.get_or_init(|| {
        use rustls::pki_types::pem::PemObject;
        let mut roots = rustls::RootCertStore::empty();
        for c in rustls::pki_types::CertificateDer::pem_slice_iter(material().0.as_bytes()) {
            roots.add(c.expect("PEM")).expect("root");
        }
        let c = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        Arc::new(c)
    });
    let name = "localhost".try_into().expect("name");
    let conn = rustls::ClientConnection::new(config.clone(), name).map_err(io::Error::other)?;
    let mut s = rustls::StreamOwned::new(conn, sock);
    while s.conn.is_handshaking() {
        s.conn.complete_io(&mut s.sock)?;
    }
    Ok(Box::new(s))
}

/// `deferloop-tls`: examples/echo_server.rs's `Echo`, under `listen_tls`.
#[cfg(feature = "tls")]
pub fn deferloop(addr: SocketAddr, bound: impl FnOnce(SocketAddr)) -> io::Result<()> {
    use deferloop::net::tls::ServerConfig;
    let (cert, key) = from_env()?;
    let config =
        ServerConfig::from_pem(cert.as_bytes(), key.as_bytes()).map_err(io::Error::other)?;
    let ev = deferloop::EventLoop::new()?;
    let l = ev
        .listen_tls(addr, &config, || crate::echo_example::Echo)
        .map_err(io::Error::other)?;
    bound(l.local_addr().as_inet().unwrap());
    ev.run().map_err(io::Error::other)
}

/// `tokio-tls`: idiomatic tokio-rustls, a current-thread runtime, a task per
/// connection, `read` / `write_all` (which encrypts and writes) on a buffer of
/// the same size as the plain servers'.
pub fn tokio(addr: SocketAddr, bound: impl FnOnce(SocketAddr)) -> io::Result<()> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (cert, key) = from_env()?;
    let certs = CertificateDer::pem_slice_iter(cert.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(io::Error::other)?;
    let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).map_err(io::Error::other)?;
    let config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(io::Error::other)?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(io::Error::other)?;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        bound(listener.local_addr()?);
        loop {
            let (s, _) = listener.accept().await?;
            s.set_nodelay(true)?;
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut s) = acceptor.accept(s).await else {
                    return;
                };
                let mut buf = vec![0u8; crate::sizes::READ_SIZE];
                loop {
                    let n = match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    if s.write_all(&buf[..n]).await.is_err() || s.flush().await.is_err() {
                        return;
                    }
                }
            });
        }
    })
}
