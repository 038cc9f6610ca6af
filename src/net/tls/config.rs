//! What a TLS client or server is configured with: [`ClientConfig`] (roots,
//! ALPN, verification, handshake deadline) and [`ServerConfig`] (certificate
//! chain and key, ALPN, handshake deadline). Each wraps a shared
//! `rustls` configuration, built once: its session cache is shared by every
//! connection made with it (clones included).

use super::TlsError;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{ring, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};
use std::cell::OnceCell;
use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// How long a handshake may take by default, from the start of the connect
/// (or of [`start_tls`](crate::net::Transport::start_tls), or the accept)
/// until both sides are done; then the connection is dropped.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Where [`ClientConfig::with_system_roots`] looks for the system's CA
/// bundle, in order: Debian and Ubuntu, Fedora and RHEL, openSUSE, Alpine
/// and the BSDs and macOS, FreeBSD.
pub const SYSTEM_ROOT_FILES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/ssl/cert.pem",
    "/usr/local/share/certs/ca-root-nss.crt",
];

fn provider() -> Arc<CryptoProvider> {
    Arc::new(ring::default_provider())
}

/// A TLS client's configuration: which servers to trust, which application
/// protocols to offer (ALPN), how long the handshake may take.
///
/// Certificate verification is **on** and the host name given to
/// [`connect_tls`](crate::Loop::connect_tls) is checked against the
/// certificate. No roots are trusted until added: the system's with
/// [`with_system_roots`](Self::with_system_roots), a PEM file with
/// [`add_roots_from_pem_file`](Self::add_roots_from_pem_file), PEM or DER in
/// memory with [`add_root_pem`](Self::add_root_pem) and
/// [`add_root_der`](Self::add_root_der); for anything else, build a
/// `rustls::ClientConfig` and use [`from_rustls`](Self::from_rustls).
///
/// # Examples
/// ```no_run
/// use deferloop::net::tls::ClientConfig;
/// # let ca_pem = b"";
/// let config = ClientConfig::new()
///     .add_root_pem(ca_pem)?
///     .with_alpn(&[b"h2", b"http/1.1"]);
/// # Ok::<(), deferloop::net::tls::TlsError>(())
/// ```
#[derive(Clone)]
pub struct ClientConfig {
    roots: RootCertStore,
    alpn: Vec<Vec<u8>>,
    verify: bool,
    handshake_timeout: Duration,
    custom: Option<Arc<rustls::ClientConfig>>,
    built: OnceCell<Arc<rustls::ClientConfig>>,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig::new()
    }
}

impl ClientConfig {
    /// Verification on, no trusted roots yet, no ALPN, the default handshake
    /// deadline ([`DEFAULT_HANDSHAKE_TIMEOUT`]).
    pub fn new() -> ClientConfig {
        ClientConfig {
            roots: RootCertStore::empty(),
            alpn: Vec::new(),
            verify: true,
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
            custom: None,
            built: OnceCell::new(),
        }
    }

    /// Uses a `rustls` configuration as it is (its roots, verifier, ALPN,
    /// client certificate); only the handshake deadline is deferloop's.
    pub fn from_rustls(config: Arc<rustls::ClientConfig>) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.custom = Some(config);
        c
    }

    /// Trusts the CA certificates in `pem` (one or more `CERTIFICATE` blocks).
    ///
    /// # Errors
    /// [`TlsError::Config`] if `pem` holds no certificate or a bad one.
    pub fn add_root_pem(mut self, pem: &[u8]) -> Result<ClientConfig, TlsError> {
        let mut n = 0;
        for cert in CertificateDer::pem_slice_iter(pem) {
            let cert = cert.map_err(|e| TlsError::Config(format!("root certificate: {e}")))?;
            self.add_root(cert)?;
            n += 1;
        }
        if n == 0 {
            return Err(TlsError::Config("no certificate in the PEM data".into()));
        }
        Ok(self)
    }

    /// Trusts the CA certificates in the PEM file at `path` — your own CA's
    /// file, or a system bundle such as `/etc/ssl/certs/ca-certificates.crt`.
    /// Every certificate in it must parse (as for
    /// [`add_root_pem`](Self::add_root_pem)); for the system's bundle,
    /// whatever it holds, see [`with_system_roots`](Self::with_system_roots).
    ///
    /// # Examples
    /// ```no_run
    /// use deferloop::net::tls::ClientConfig;
    /// let config = ClientConfig::new().add_roots_from_pem_file("ca.pem")?;
    /// # Ok::<(), deferloop::net::tls::TlsError>(())
    /// ```
    ///
    /// # Errors
    /// [`TlsError::Config`], naming the path, if the file cannot be read,
    /// holds no certificate, or holds a bad one.
    pub fn add_roots_from_pem_file(self, path: impl AsRef<Path>) -> Result<ClientConfig, TlsError> {
        let path = path.as_ref();
        let pem = std::fs::read(path)
            .map_err(|e| TlsError::Config(format!("{}: {e}", path.display())))?;
        self.add_root_pem(&pem).map_err(|e| match e {
            TlsError::Config(m) => TlsError::Config(format!("{}: {m}", path.display())),
            other => other,
        })
    }

    /// Trusts the system's CA bundle, read from a PEM file: the one named
    /// by the `SSL_CERT_FILE` environment variable if it is set (as OpenSSL
    /// reads it), else the first of [`SYSTEM_ROOT_FILES`] that exists.
    /// Certificates in the bundle that cannot be used are skipped (bundles
    /// carry a few old ones); at least one must be usable.
    ///
    /// # Examples
    /// ```no_run
    /// use deferloop::net::tls::ClientConfig;
    /// let config = ClientConfig::new().with_system_roots()?;
    /// # Ok::<(), deferloop::net::tls::TlsError>(())
    /// ```
    ///
    /// # Errors
    /// [`TlsError::Config`] naming the files tried, if none can be read or
    /// none holds a usable certificate.
    pub fn with_system_roots(mut self) -> Result<ClientConfig, TlsError> {
        let from_env = std::env::var_os("SSL_CERT_FILE").map(std::path::PathBuf::from);
        let candidates: Vec<std::path::PathBuf> = match from_env {
            Some(p) => vec![p],
            None => SYSTEM_ROOT_FILES.iter().map(Into::into).collect(),
        };
        let mut tried = Vec::new();
        for path in &candidates {
            let pem = match std::fs::read(path) {
                Ok(pem) => pem,
                Err(e) => {
                    tried.push(format!("{}: {e}", path.display()));
                    continue;
                }
            };
            let certs = CertificateDer::pem_slice_iter(&pem).filter_map(Result::ok);
            self.built = OnceCell::new();
            let (added, _skipped) = self.roots.add_parsable_certificates(certs);
            if added > 0 {
                return Ok(self);
            }
            tried.push(format!("{}: no usable certificate", path.display()));
        }
        Err(TlsError::Config(format!(
            "no system CA bundle: {}",
            tried.join("; ")
        )))
    }

    /// Trusts one CA certificate, DER-encoded.
    ///
    /// # Errors
    /// [`TlsError::Config`] if it is not a usable certificate.
    pub fn add_root_der(mut self, der: &[u8]) -> Result<ClientConfig, TlsError> {
        self.add_root(CertificateDer::from(der.to_vec()))?;
        Ok(self)
    }

    fn add_root(&mut self, cert: CertificateDer<'static>) -> Result<(), TlsError> {
        self.built = OnceCell::new();
        self.roots
            .add(cert)
            .map_err(|e| TlsError::Config(format!("root certificate: {e}")))
    }

    /// Offers these application protocols, most preferred first (ALPN); the
    /// one chosen is [`Transport::tls_alpn_protocol`](crate::net::Transport::tls_alpn_protocol).
    pub fn with_alpn(mut self, protocols: &[&[u8]]) -> ClientConfig {
        self.built = OnceCell::new();
        self.alpn = protocols.iter().map(|p| p.to_vec()).collect();
        self
    }

    /// Sets how long the handshake may take (default
    /// [`DEFAULT_HANDSHAKE_TIMEOUT`]); past it the connect fails with a
    /// `TimedOut` error.
    pub fn with_handshake_timeout(mut self, timeout: Duration) -> ClientConfig {
        self.handshake_timeout = timeout;
        self
    }

    /// **Turns certificate verification off**: any certificate, for any
    /// name, signed by anyone, is accepted. The connection is encrypted but
    /// the peer is not authenticated: a man in the middle reads everything.
    /// For tests only.
    pub fn dangerous_skip_verification_for_tests(mut self) -> ClientConfig {
        self.built = OnceCell::new();
        self.verify = false;
        self
    }

    pub(crate) fn handshake_timeout(&self) -> Duration {
        self.handshake_timeout
    }

    /// The `rustls` configuration, built on first use.
    pub(crate) fn rustls(&self) -> Result<Arc<rustls::ClientConfig>, TlsError> {
        if let Some(c) = &self.custom {
            return Ok(c.clone());
        }
        if let Some(c) = self.built.get() {
            return Ok(c.clone());
        }
        let provider = provider();
        let mut config = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(TlsError::Rustls)?
            .with_root_certificates(self.roots.clone())
            .with_no_client_auth();
        if !self.verify {
            config
                .dangerous()
                .set_certificate_verifier(Arc::new(NoVerification(provider)));
        }
        config.alpn_protocols = self.alpn.clone();
        let config = Arc::new(config);
        let _ = self.built.set(config.clone());
        Ok(config)
    }
}

impl fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientConfig")
            .field("roots", &self.roots.len())
            .field("verify", &self.verify)
            .field("custom", &self.custom.is_some())
            .field("handshake_timeout", &self.handshake_timeout)
            .finish_non_exhaustive()
    }
}

/// A TLS server's configuration: its certificate chain and private key, the
/// application protocols it accepts (ALPN), how long a handshake may take.
///
/// # Examples
/// ```no_run
/// use deferloop::net::tls::ServerConfig;
/// let cert = std::fs::read("cert.pem")?;
/// let key = std::fs::read("key.pem")?;
/// let config = ServerConfig::from_pem(&cert, &key)?.with_alpn(&[b"http/1.1"]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct ServerConfig {
    config: Arc<rustls::ServerConfig>,
    handshake_timeout: Duration,
}

impl ServerConfig {
    /// From a certificate chain (leaf first) and its private key, PEM.
    ///
    /// # Errors
    /// [`TlsError::Config`] for missing or bad PEM data; [`TlsError::Rustls`]
    /// if the key does not fit the certificate or is of an unsupported kind.
    pub fn from_pem(chain: &[u8], key: &[u8]) -> Result<ServerConfig, TlsError> {
        let certs = CertificateDer::pem_slice_iter(chain)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| TlsError::Config(format!("certificate chain: {e}")))?;
        if certs.is_empty() {
            return Err(TlsError::Config("no certificate in the chain".into()));
        }
        let key = PrivateKeyDer::from_pem_slice(key)
            .map_err(|e| TlsError::Config(format!("private key: {e}")))?;
        ServerConfig::build(certs, key)
    }

    /// From a certificate chain (leaf first) and its private key (PKCS #8),
    /// DER-encoded.
    ///
    /// # Errors
    /// As for [`from_pem`](Self::from_pem).
    pub fn from_der(chain: Vec<Vec<u8>>, key: Vec<u8>) -> Result<ServerConfig, TlsError> {
        let certs = chain.into_iter().map(CertificateDer::from).collect();
        let key = PrivateKeyDer::try_from(key).map_err(|e| TlsError::Config(e.into()))?;
        ServerConfig::build(certs, key)
    }

    fn build(
        certs: Vec<CertificateDer<'static>>,
        key: PrivateKeyDer<'static>,
    ) -> Result<ServerConfig, TlsError> {
        let config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(TlsError::Rustls)?
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .map_err(TlsError::Rustls)?;
        Ok(ServerConfig::from_rustls(Arc::new(config)))
    }

    /// Uses a `rustls` configuration as it is (client authentication, SNI
    /// resolution, session storage); only the handshake deadline is deferloop's.
    pub fn from_rustls(config: Arc<rustls::ServerConfig>) -> ServerConfig {
        ServerConfig {
            config,
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
        }
    }

    /// Accepts these application protocols, most preferred first (ALPN). A
    /// client that offers ALPN but none of these fails its handshake.
    pub fn with_alpn(mut self, protocols: &[&[u8]]) -> ServerConfig {
        Arc::make_mut(&mut self.config).alpn_protocols =
            protocols.iter().map(|p| p.to_vec()).collect();
        self
    }

    /// Sets how long a handshake may take (default
    /// [`DEFAULT_HANDSHAKE_TIMEOUT`]): a client that does not finish its
    /// handshake in time is disconnected.
    pub fn with_handshake_timeout(mut self, timeout: Duration) -> ServerConfig {
        self.handshake_timeout = timeout;
        self
    }

    pub(crate) fn handshake_timeout(&self) -> Duration {
        self.handshake_timeout
    }

    pub(crate) fn rustls(&self) -> Arc<rustls::ServerConfig> {
        self.config.clone()
    }
}

impl fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerConfig")
            .field("handshake_timeout", &self.handshake_timeout)
            .finish_non_exhaustive()
    }
}

/// The verifier of [`ClientConfig::dangerous_skip_verification_for_tests`]:
/// any certificate is taken; signatures are still checked, so the handshake
/// itself is sound.
#[derive(Debug)]
struct NoVerification(Arc<CryptoProvider>);

impl ServerCertVerifier for NoVerification {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
