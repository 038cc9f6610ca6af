//! Request heads, framed as RFC 9112 says: which requests are served, and
//! with which status the others are refused. Pure: no I/O.

/// The largest request head (request line and header lines) accepted.
pub const MAX_HEAD: usize = 8 * 1024;
/// The most header lines accepted.
pub const MAX_HEADERS: usize = 64;
/// The largest request body accepted (it is read and thrown away).
pub const MAX_BODY: u64 = 8 * 1024;

/// What a parsed head asks for.
pub struct Request {
    /// Body bytes that follow the head.
    pub body: u64,
    /// Whether the connection stays open after the answer.
    pub keep_alive: bool,
    /// A HEAD request: the answer has no body.
    pub head: bool,
}

/// Parses the head at the start of `input`: `Ok(None)` while it is incomplete,
/// else its length and the request, or the status to refuse it with.
pub fn parse(input: &[u8]) -> Result<Option<(usize, Request)>, &'static str> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let len = match req.parse(input) {
        Ok(httparse::Status::Complete(len)) if len <= MAX_HEAD => len,
        Ok(httparse::Status::Partial) if input.len() < MAX_HEAD => return Ok(None),
        Ok(_) | Err(httparse::Error::TooManyHeaders) => {
            return Err("431 Request Header Fields Too Large")
        }
        Err(httparse::Error::Version) => return Err(version_error(input)),
        Err(_) => return Err("400 Bad Request"),
    };
    let http11 = req.version == Some(1);
    let (mut hosts, mut length, mut coding, mut keep_alive) = (0, None, None, http11);
    for h in req.headers.iter() {
        let v = h.value.trim_ascii();
        // httparse refuses these too; said again here, since it is the rule.
        if v.iter().any(|&b| (b < b' ' && b != b'\t') || b == 0x7f) {
            return Err("400 Bad Request");
        }
        let is = |name: &str| h.name.eq_ignore_ascii_case(name);
        if is("host") {
            hosts += 1;
            if !v
                .iter()
                .all(|b| b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:%[]".contains(b))
            {
                return Err("400 Bad Request");
            }
        } else if is("content-length") {
            if length.is_some() || v.is_empty() || !v.iter().all(u8::is_ascii_digit) {
                return Err("400 Bad Request");
            }
            // Plain digits: too many of them is a body too large.
            let n = std::str::from_utf8(v).ok().and_then(|s| s.parse().ok());
            length = Some(n.unwrap_or(u64::MAX));
        } else if is("transfer-encoding") {
            coding = Some(v); // the last field holds the final coding
        } else if is("connection") {
            for option in v.split(|&b| b == b',').map(<[u8]>::trim_ascii) {
                if option.eq_ignore_ascii_case(b"close") {
                    keep_alive = false;
                } else if option.eq_ignore_ascii_case(b"keep-alive") && !http11 {
                    keep_alive = true;
                }
            }
        }
    }
    if hosts > 1 || (http11 && hosts == 0) {
        return Err("400 Bad Request");
    }
    if let Some(coding) = coding {
        // §6.1: with a Content-Length, in HTTP/1.0, or not ending in chunked,
        // the body's length is unreliable: 400. Chunked is framed, just not read here.
        let last = coding.rsplit(|&b| b == b',').next().unwrap_or_default();
        return Err(
            match length.is_none() && http11 && last.trim_ascii() == b"chunked" {
                true => "501 Not Implemented",
                false => "400 Bad Request",
            },
        );
    }
    let body = length.unwrap_or(0);
    if body > MAX_BODY {
        return Err("413 Content Too Large");
    }
    let head = req.method == Some("HEAD");
    Ok(Some((
        len,
        Request {
            body,
            keep_alive,
            head,
        },
    )))
}

/// 505 for a well-formed version this server does not speak, 400 for garbage.
fn version_error(input: &[u8]) -> &'static str {
    let line = input.split(|&b| b == b'\n').next().unwrap_or_default();
    match line.trim_ascii_end().rsplit(|&b| b == b' ').next() {
        Some([b'H', b'T', b'T', b'P', b'/', major, b'.', minor])
            if major.is_ascii_digit() && minor.is_ascii_digit() =>
        {
            "505 HTTP Version Not Supported"
        }
        _ => "400 Bad Request",
    }
}
