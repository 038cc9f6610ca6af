//! examples/http_hello's request-head parser, two ways.
//!
//! Raw bytes: no panic, no allocation at all (a counting allocator), and
//! agreement with httparse on where the head ends: a head httparse finds
//! complete within the limit is served or refused with 400, 413 or 501
//! (never "incomplete", 431 or 505); a partial one under the limit waits.
//! A head's length and request do not change with what follows it, and
//! every strict prefix of it waits.
//!
//! Structured requests (a method, a version, up to 16 header fields drawn
//! from Host, Content-Length, Transfer-Encoding, Connection and others, with
//! good and bad values), serialised and parsed: the outcome equals a model
//! of RFC 9112's rules written from the RFC (the status, the body length,
//! keep-alive, HEAD).
#![no_main]

#[path = "../../examples/http_hello/request.rs"]
#[allow(dead_code)]
mod request;

use deferloop_fuzz::{peak_growth, Counting, Input};
use libfuzzer_sys::fuzz_target;
use request::{parse, MAX_BODY, MAX_HEAD};

#[global_allocator]
static ALLOC: Counting = Counting;

type Parsed = Result<Option<(usize, (u64, bool, bool))>, &'static str>;

/// `parse`, with the request as a plain tuple, and what it allocated.
fn parsed(input: &[u8]) -> (Parsed, usize) {
    let mut out = Ok(None);
    let grew = peak_growth(|| {
        out = parse(input).map(|o| o.map(|(n, r)| (n, (r.body, r.keep_alive, r.head))));
    });
    (out, grew)
}

fn raw(data: &[u8]) {
    let (got, grew) = parsed(data);
    assert_eq!(grew, 0, "the parser allocated {grew} bytes");
    let mut headers = [httparse::EMPTY_HEADER; request::MAX_HEADERS];
    let oracle = httparse::Request::new(&mut headers).parse(data);
    match oracle {
        Ok(httparse::Status::Complete(len)) if len <= MAX_HEAD => match got {
            Ok(Some((n, _))) => assert_eq!(n, len),
            Err(s) => assert!(
                [
                    "400 Bad Request",
                    "413 Content Too Large",
                    "501 Not Implemented"
                ]
                .contains(&s),
                "{s} for a complete head"
            ),
            Ok(None) => panic!("a complete head of {len} bytes waits"),
        },
        Ok(httparse::Status::Partial) if data.len() < MAX_HEAD => {
            assert_eq!(got, Ok(None), "a partial head")
        }
        _ => assert!(got.is_err(), "{got:?}"),
    }
    if let Ok(Some((len, req))) = got {
        // The head's end and meaning do not depend on what follows it.
        let (alone, _) = parsed(&data[..len]);
        assert_eq!(alone, Ok(Some((len, req))));
        let mut more = data[..len].to_vec();
        more.extend_from_slice(b"GET / HTTP/1.1\r\n\r\n\xff");
        assert_eq!(parsed(&more).0, Ok(Some((len, req))));
        // Its strict prefixes wait (a byte at a time is how it may come).
        for cut in [0, 1, len / 2, len - 1] {
            assert_eq!(parsed(&data[..cut]).0, Ok(None), "prefix of {cut}");
        }
    }
}

#[derive(Debug)]
enum Field {
    Host(&'static str),
    Length(String),
    Coding(&'static str),
    Connection(&'static str),
    Other(&'static str),
}

const HOSTS: &[&str] = &["example.com", "a:80", "[::1]:8080", "", "a b", "a/b", "é"];
const CODINGS: &[&str] = &[
    "chunked",
    "gzip",
    "gzip, chunked",
    "chunked, gzip",
    " chunked ",
];
const CONNECTIONS: &[&str] = &[
    "close",
    "keep-alive",
    "Keep-Alive, foo",
    "upgrade",
    "x, CLOSE",
];
const OTHERS: &[&str] = &["x-a: 1", "accept: */*", "x-b:", "x-c: \t v \t"];

fn field(input: &mut Input<'_>) -> Field {
    let (k, v) = (input.byte(), input.byte() as usize);
    match k % 5 {
        0 => Field::Host(HOSTS[v % HOSTS.len()]),
        1 => Field::Length(match v % 8 {
            0 => String::new(),
            1 => "12a".into(),
            2 => "+5".into(),
            3 => " 7 ".into(),
            4 => "99999999999999999999999".into(),
            _ => (u64::from(input.u16()) * (v as u64 % 3)).to_string(),
        }),
        2 => Field::Coding(CODINGS[v % CODINGS.len()]),
        3 => Field::Connection(CONNECTIONS[v % CONNECTIONS.len()]),
        _ => Field::Other(OTHERS[v % OTHERS.len()]),
    }
}

/// RFC 9112, read independently of the parser: the status a head is refused
/// with, or its (body, keep-alive, HEAD).
fn model(method: &str, http11: bool, fields: &[Field]) -> Result<(u64, bool, bool), &'static str> {
    let bad = Err("400 Bad Request");
    let host_char = |c: char| c.is_ascii_alphanumeric() || "-._~!$&'()*+,;=:%[]".contains(c);
    let mut hosts = 0;
    let mut length: Option<u64> = None;
    let mut coding = None;
    let mut keep_alive = http11;
    for f in fields {
        match f {
            Field::Host(h) => {
                hosts += 1;
                if !h.chars().all(host_char) {
                    return bad;
                }
            }
            Field::Length(v) => {
                let v = v.trim();
                if length.is_some() || v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
                    return bad;
                }
                length = Some(v.parse().unwrap_or(u64::MAX));
            }
            Field::Coding(c) => coding = Some(*c),
            Field::Connection(c) => {
                for option in c.split(',').map(str::trim) {
                    if option.eq_ignore_ascii_case("close") {
                        keep_alive = false;
                    } else if option.eq_ignore_ascii_case("keep-alive") && !http11 {
                        keep_alive = true;
                    }
                }
            }
            Field::Other(_) => {}
        }
    }
    if hosts > 1 || (http11 && hosts == 0) {
        return bad;
    }
    if let Some(c) = coding {
        let chunked_last = c.rsplit(',').next().unwrap().trim() == "chunked";
        return Err(if length.is_none() && http11 && chunked_last {
            "501 Not Implemented"
        } else {
            "400 Bad Request"
        });
    }
    let body = length.unwrap_or(0);
    if body > MAX_BODY {
        return Err("413 Content Too Large");
    }
    Ok((body, keep_alive, method == "HEAD"))
}

fn structured(input: &mut Input<'_>) {
    let b = input.byte();
    let method = ["GET", "HEAD", "POST", "PUT"][b as usize % 4];
    let http11 = b & 4 == 0;
    let n = input.byte() as usize % 17;
    let fields: Vec<Field> = (0..n).map(|_| field(input)).collect();
    let mut head = format!("{method} /p?q=1 HTTP/1.{}\r\n", u8::from(http11));
    for f in &fields {
        let line = match f {
            Field::Host(h) => format!("Host: {h}"),
            Field::Length(v) => format!("Content-Length: {v}"),
            Field::Coding(c) => format!("Transfer-Encoding: {c}"),
            Field::Connection(c) => format!("Connection: {c}"),
            Field::Other(o) => o.to_string(),
        };
        head.push_str(&line);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    let (got, grew) = parsed(head.as_bytes());
    assert_eq!(grew, 0);
    let want = model(method, http11, &fields).map(|r| Some((head.len(), r)));
    assert_eq!(got, want, "{head:?}");
    raw(head.as_bytes());
}

fuzz_target!(|bytes: &[u8]| {
    let mut input = Input(bytes);
    if input.byte() & 1 == 0 {
        raw(input.0);
    } else {
        structured(&mut input);
    }
});
