//! A TLS echo server and client. The protocols are the plain-TCP ones: TLS
//! is a layer under them, chosen by `listen_tls` / `connect_tls`.
//!
//! Run (needs the `tls` feature):
//! - `cargo run --features tls --example tls_echo`: both on one loop, with a
//!   certificate made on the spot (rcgen); prints the echo and exits.
//! - `cargo run --features tls --example tls_echo -- server CERT.pem KEY.pem [ADDR]`:
//!   serves until killed; prints the bound address first.
//! - `cargo run --features tls --example tls_echo -- client ADDR NAME CA.pem [MESSAGE]`:
//!   verifies the server as NAME against CA.pem (or `system`: the system's
//!   CA bundle), sends MESSAGE, prints the echo.

use deferloop::net::tls::{ClientConfig, ServerConfig};
use deferloop::net::{Protocol, Transport};
use deferloop::{EventLoop, Failure};
use std::cell::RefCell;
use std::error::Error;
use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::rc::Rc;

/// Echoes, and stops reading while the peer is not reading its echo.
struct Echo;

impl Protocol for Echo {
    fn data_received(&mut self, t: &Transport, data: &[u8]) {
        t.write(data);
    }
    fn pause_writing(&mut self, t: &Transport) {
        t.pause_reading();
    }
    fn resume_writing(&mut self, t: &Transport) {
        t.resume_reading();
    }
}

/// Sends a message, closes once all of it came back (with close_notify).
struct Ask {
    msg: Vec<u8>,
    got: Rc<RefCell<Vec<u8>>>,
}

impl Protocol for Ask {
    fn connection_made(&mut self, t: &Transport) {
        t.write(&self.msg);
    }
    fn data_received(&mut self, t: &Transport, data: &[u8]) {
        self.got.borrow_mut().extend_from_slice(data);
        if self.got.borrow().len() >= self.msg.len() {
            t.close();
        }
    }
    fn connection_lost(&mut self, t: &Transport, reason: Option<Failure>) {
        if let Some(r) = reason {
            eprintln!("tls_echo: connection lost: {r}");
        }
        if let Some(lp) = t.event_loop() {
            lp.stop();
        }
    }
}

fn serve(ev: &EventLoop, cert: &[u8], key: &[u8], addr: SocketAddr) -> Result<(), Box<dyn Error>> {
    let config = ServerConfig::from_pem(cert, key)?;
    let listener = ev.listen_tls(addr, &config, || Echo)?;
    println!("{}", listener.local_addr());
    std::io::stdout().flush()?;
    Ok(())
}

fn ask(
    ev: &EventLoop,
    addr: SocketAddr,
    name: &str,
    config: &ClientConfig,
    msg: &str,
) -> Result<String, Box<dyn Error>> {
    let got = Rc::new(RefCell::new(Vec::new()));
    let ask = Ask {
        msg: msg.as_bytes().to_vec(),
        got: got.clone(),
    };
    let t = ev.run_until(ev.connect_tls(addr, name, config, ask).connected())?;
    let version = t.tls_protocol_version();
    ev.run()?; // until the client's connection_lost stops it
    let echo = String::from_utf8_lossy(&got.borrow()).into_owned();
    Ok(format!("{echo} ({version:?})"))
}

fn run(args: Vec<String>) -> Result<(), Box<dyn Error>> {
    let ev = EventLoop::new()?;
    match args.first().map(String::as_str) {
        None => {
            let key = rcgen::KeyPair::generate()?;
            let cert =
                rcgen::CertificateParams::new(vec!["localhost".to_string()])?.self_signed(&key)?;
            let config =
                ServerConfig::from_pem(cert.pem().as_bytes(), key.serialize_pem().as_bytes())?;
            let listener = ev.listen_tls("127.0.0.1:0".parse()?, &config, || Echo)?;
            let addr = listener
                .local_addr()
                .as_inet()
                .ok_or("not an inet address")?;
            println!(
                "{}",
                ask(
                    &ev,
                    addr,
                    "localhost",
                    &ClientConfig::new().add_root_pem(cert.pem().as_bytes())?,
                    "hello over TLS"
                )?
            );
            Ok(())
        }
        Some("server") if args.len() >= 3 => {
            let addr = args.get(3).map_or("127.0.0.1:0", String::as_str).parse()?;
            serve(
                &ev,
                &std::fs::read(&args[1])?,
                &std::fs::read(&args[2])?,
                addr,
            )?;
            Ok(ev.run()?)
        }
        Some("client") if args.len() >= 4 => {
            let msg = args.get(4).map_or("hello over TLS", String::as_str);
            // CA.pem, or `system` for the system's bundle.
            let config = match args[3].as_str() {
                "system" => ClientConfig::new().with_system_roots()?,
                path => ClientConfig::new().add_roots_from_pem_file(path)?,
            };
            println!("{}", ask(&ev, args[1].parse()?, &args[2], &config, msg)?);
            Ok(())
        }
        _ => Err("usage: tls_echo [server CERT KEY [ADDR] | client ADDR NAME CA [MESSAGE]]".into()),
    }
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    match run(std::env::args().skip(1).collect()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tls_echo: {e:#}"); // `:#`: with the failure's causes
            ExitCode::FAILURE
        }
    }
}
