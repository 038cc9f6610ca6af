//! Trusted roots from PEM files: a CA file on disk verifies a server it
//! signed; a missing file, a file without a certificate and a bad one are
//! clear configuration errors naming the file; the system bundle is found
//! where the platform keeps it.
#![cfg(feature = "tls")]

#[path = "util/tls.rs"]
mod tls;
mod util;

use deferloop::net::tls::{ClientConfig, TlsError, SYSTEM_ROOT_FILES};
use deferloop::net::{Protocol, Transport};
use deferloop::EventLoop;
use std::path::PathBuf;
use std::time::Duration;

const T: Duration = Duration::from_secs(20);

/// A file of this test's own under the temporary directory.
fn temp_file(name: &str, contents: &[u8]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("deferloop-roots-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, contents).unwrap();
    path
}

fn config_error(r: Result<ClientConfig, TlsError>) -> String {
    match r {
        Err(TlsError::Config(m)) => m,
        Err(e) => panic!("expected a configuration error, got {e}"),
        Ok(_) => panic!("expected a configuration error, got a config"),
    }
}

struct Quiet;
impl Protocol for Quiet {
    fn data_received(&mut self, _: &Transport, _: &[u8]) {}
}

#[test]
fn a_ca_file_on_disk_verifies_the_server_it_signed() {
    let pki = tls::localhost();
    let path = temp_file("ca.pem", pki.ca_pem.as_bytes());
    let config = ClientConfig::new().add_roots_from_pem_file(&path).unwrap();

    let ev = EventLoop::new().unwrap();
    let l = ev
        .listen_tls("127.0.0.1:0".parse().unwrap(), &tls::server(&pki), || Quiet)
        .unwrap();
    let addr = l.local_addr().as_inet().unwrap();
    let c = ev.connect_tls(addr, "localhost", &config, Quiet);
    let t = ev
        .run_until(c.connected().add_timeout(T, &ev.to_loop()))
        .unwrap();
    assert!(t.is_tls_handshake_done());
    t.close();

    // Without the file's root the same server is refused.
    let other = tls::localhost();
    let wrong = ClientConfig::new()
        .add_roots_from_pem_file(temp_file("other.pem", other.ca_pem.as_bytes()))
        .unwrap();
    let c = ev.connect_tls(addr, "localhost", &wrong, Quiet);
    assert!(ev
        .run_until(c.connected().add_timeout(T, &ev.to_loop()))
        .is_err());
}

#[test]
fn a_missing_an_empty_or_a_bad_file_is_a_config_error_naming_it() {
    let missing = std::env::temp_dir().join("deferloop-no-such-dir/ca.pem");
    let m = config_error(ClientConfig::new().add_roots_from_pem_file(&missing));
    assert!(m.contains("deferloop-no-such-dir/ca.pem"), "{m}");

    let empty = temp_file("empty.pem", b"just text, no PEM block\n");
    let m = config_error(ClientConfig::new().add_roots_from_pem_file(&empty));
    assert!(
        m.contains("empty.pem") && m.contains("no certificate"),
        "{m}"
    );

    let bad = temp_file(
        "bad.pem",
        b"-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n",
    );
    let m = config_error(ClientConfig::new().add_roots_from_pem_file(&bad));
    assert!(m.contains("bad.pem"), "{m}");
}

#[test]
fn the_system_bundle_is_found_where_the_platform_keeps_it() {
    if std::env::var_os("SSL_CERT_FILE").is_some() {
        return; // the environment chooses the file; the paths below are not looked at
    }
    let present = SYSTEM_ROOT_FILES
        .iter()
        .any(|p| std::path::Path::new(p).is_file());
    match ClientConfig::new().with_system_roots() {
        Ok(_) => assert!(present, "no bundle on this machine, yet roots were found"),
        Err(TlsError::Config(m)) => {
            assert!(!present, "a bundle exists, yet: {m}");
            for p in SYSTEM_ROOT_FILES {
                assert!(m.contains(p), "{m} does not name {p}");
            }
        }
        Err(e) => panic!("{e}"),
    }
}
