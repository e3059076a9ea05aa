//! The HTTP edge of the labeling page: a request as read (its head whole, its body on the
//! connection under the request's deadline), who may ask (token, host), what a request names
//! (route, query parameters, a bounded JSON body) and how answers go out.
//!
//! Everything a request carries is hostile: the route is matched against a fixed list, the
//! only parameter read is an item id (looked up in the pool, never joined to a path), bodies
//! are read up to [`MAX_BODY`] bytes and parsed into closed structs, and the token is compared
//! in constant time. How long a client may take is bounded by the connection (`conn.rs`).

use serde::de::DeserializeOwned;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The largest request body read (an answer is an id, a class name and a note).
pub const MAX_BODY: usize = 64 << 10;

/// Name of the cookie that carries the token once the page has been opened with it.
pub const COOKIE: &str = "alkit_token";

/// Header that carries the token on every state-changing request: a page of another origin
/// cannot set it without a CORS preflight, which this server never grants.
pub const TOKEN_HEADER: &str = "X-Alkit-Token";

/// The security headers every reply carries.
const SECURITY_HEADERS: [(&str, &str); 4] = [
    ("Cache-Control", "no-store"),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    (
        "Content-Security-Policy",
        "default-src 'none'; img-src 'self'; style-src 'unsafe-inline'; \
         script-src 'unsafe-inline'; connect-src 'self'; form-action 'none'; \
         frame-ancestors 'none'",
    ),
];

/// One request as the server read it: its head whole, its body still on the connection,
/// read through [`Request::body`] no later than the request's deadline.
pub struct Request<'a> {
    method: String,
    url: String,
    headers: Vec<(String, String)>,
    body: Body<'a>,
}

impl<'a> Request<'a> {
    /// A request whose head has been read and checked (see `conn.rs`).
    pub(crate) fn new(
        method: String,
        url: String,
        headers: Vec<(String, String)>,
        body: Body<'a>,
    ) -> Request<'a> {
        Request {
            method,
            url,
            headers,
            body,
        }
    }

    /// The method as sent (`GET`, `HEAD`, `POST`, ...; methods are case-sensitive).
    pub fn method(&self) -> &str {
        &self.method
    }

    /// The request target as sent: the path and the query string.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The headers as sent, `(name, value)`, in order.
    pub fn headers(&self) -> &[(String, String)] {
        &self.headers
    }

    /// The body's declared length (0 when the request declares none).
    pub fn body_length(&self) -> u64 {
        self.body.declared
    }

    /// The body, read from the connection up to its declared length and no later than the
    /// request's deadline (past it, reads fail with [`ErrorKind::TimedOut`]).
    pub fn body(&mut self) -> &mut Body<'a> {
        &mut self.body
    }
}

/// A request's body on its connection: the bytes read with the head first, then the socket,
/// each read bounded by what is left of the request's deadline.
pub struct Body<'a> {
    stream: &'a TcpStream,
    /// Body bytes that arrived with the head.
    early: Vec<u8>,
    taken: usize,
    declared: u64,
    left: u64,
    deadline: Instant,
    /// The client asked for `100 Continue` before it sends the body.
    send_continue: bool,
}

impl<'a> Body<'a> {
    /// The body of `declared` bytes, `early` of them already read with the head.
    pub(crate) fn new(
        stream: &'a TcpStream,
        early: Vec<u8>,
        declared: u64,
        deadline: Instant,
        send_continue: bool,
    ) -> Body<'a> {
        Body {
            stream,
            early,
            taken: 0,
            declared,
            left: declared,
            deadline,
            send_continue,
        }
    }
}

impl Read for Body<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.left == 0 || buf.is_empty() {
            return Ok(0);
        }
        let want = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        if self.taken < self.early.len() {
            let n = want.min(self.early.len() - self.taken);
            buf[..n].copy_from_slice(&self.early[self.taken..self.taken + n]);
            self.taken += n;
            self.left -= n as u64;
            return Ok(n);
        }
        let mut stream = self.stream;
        if std::mem::take(&mut self.send_continue) {
            write_by(&mut stream, b"HTTP/1.1 100 Continue\r\n\r\n", self.deadline)?;
        }
        let n = read_by(&mut stream, &mut buf[..want], self.deadline)?;
        if n == 0 {
            return Err(std::io::Error::new(
                ErrorKind::UnexpectedEof,
                "the connection closed before the whole body arrived",
            ));
        }
        self.left -= n as u64;
        Ok(n)
    }
}

/// The time left until `deadline`, or a [`ErrorKind::TimedOut`] error once it has passed.
pub(crate) fn time_left(deadline: Instant) -> std::io::Result<Duration> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(std::io::Error::new(
            ErrorKind::TimedOut,
            "the request's time is up",
        ));
    }
    Ok(left)
}

/// One `read` of `stream` that returns no later than `deadline` (a timeout is
/// [`ErrorKind::TimedOut`] on every platform).
pub(crate) fn read_by(
    stream: &mut &TcpStream,
    buf: &mut [u8],
    deadline: Instant,
) -> std::io::Result<usize> {
    loop {
        stream.set_read_timeout(Some(time_left(deadline)?))?;
        match stream.read(buf) {
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            // A socket timeout is `WouldBlock` on Unix and `TimedOut` on Windows.
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                return Err(std::io::Error::new(ErrorKind::TimedOut, e))
            }
            r => return r,
        }
    }
}

/// Writes all of `bytes` to `stream`, giving up at `deadline`.
pub(crate) fn write_by(
    stream: &mut &TcpStream,
    mut bytes: &[u8],
    deadline: Instant,
) -> std::io::Result<()> {
    while !bytes.is_empty() {
        stream.set_write_timeout(Some(time_left(deadline)?))?;
        match stream.write(&bytes[..bytes.len().min(64 << 10)]) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                return Err(std::io::Error::new(ErrorKind::TimedOut, e))
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// A response ready to send.
pub struct Reply {
    /// HTTP status.
    pub status: u16,
    /// `Content-Type`.
    pub content_type: &'static str,
    /// Body.
    pub body: Vec<u8>,
    /// Extra headers `(name, value)`.
    pub headers: Vec<(&'static str, String)>,
}

impl Reply {
    /// A JSON body with status `status`.
    pub fn json(status: u16, v: &serde_json::Value) -> Reply {
        Reply {
            status,
            content_type: "application/json",
            body: v.to_string().into_bytes(),
            headers: Vec::new(),
        }
    }

    /// `{"error": message}` with status `status`.
    pub fn error(status: u16, message: impl Into<String>) -> Reply {
        Reply::json(status, &serde_json::json!({ "error": message.into() }))
    }

    /// Raw bytes of `content_type`.
    pub fn bytes(content_type: &'static str, body: Vec<u8>) -> Reply {
        Reply {
            status: 200,
            content_type,
            body,
            headers: Vec::new(),
        }
    }

    /// The status line and headers, `Connection: close` among them: every connection
    /// carries one request (the server's bound on how long one client holds a connection).
    pub(crate) fn head(&self) -> Vec<u8> {
        let mut h = format!(
            "HTTP/1.1 {} {}\r\nDate: {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n\
             Connection: close\r\n",
            self.status,
            reason(self.status),
            http_date(SystemTime::now()),
            self.content_type,
            self.body.len()
        );
        let extra = self.headers.iter().map(|(k, v)| (*k, v.as_str()));
        for (k, v) in SECURITY_HEADERS.into_iter().chain(extra) {
            // A value is ours, but never one that could end the header early.
            if v.bytes().all(|b| b == b'\t' || (b' '..0x7f).contains(&b)) {
                h.push_str(&format!("{k}: {v}\r\n"));
            }
        }
        h.push_str("\r\n");
        h.into_bytes()
    }

    /// Sends the reply (only its head for `HEAD`), giving up at `deadline`; a client that
    /// went away or stopped reading is no error of ours.
    pub(crate) fn send(&self, stream: &TcpStream, head_only: bool, deadline: Instant) {
        let mut s = stream;
        let _ = write_by(&mut s, &self.head(), deadline).and_then(|()| {
            if head_only {
                Ok(())
            } else {
                write_by(&mut s, &self.body, deadline)
            }
        });
        let _ = s.flush();
    }
}

/// The reason phrase of the statuses this server sends.
fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        411 => "Length Required",
        413 => "Content Too Large",
        417 => "Expectation Failed",
        421 => "Misdirected Request",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        505 => "HTTP Version Not Supported",
        _ => "",
    }
}

/// `time` as an HTTP date (`Sun, 06 Nov 1994 08:49:37 GMT`).
fn http_date(time: SystemTime) -> String {
    let secs = time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Howard Hinnant's civil-from-days, for days since 1970-01-01 (never negative here).
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    const WEEKDAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    format!(
        "{}, {day:02} {} {year} {:02}:{:02}:{:02} GMT",
        WEEKDAYS[(days % 7) as usize],
        MONTHS[(month - 1) as usize],
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// A header's value, if the request has it (the first one; names compare without case).
pub fn header<'r>(request: &'r Request<'_>, name: &str) -> Option<&'r str> {
    request
        .headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

pub use crate::label_studio::image_path::{percent_decode, query_param, split_url};

/// The value of cookie `name` in the request's `Cookie` header.
pub fn cookie(request: &Request<'_>, name: &str) -> Option<String> {
    header(request, "Cookie")?.split(';').find_map(|kv| {
        let (k, v) = kv.trim().split_once('=')?;
        (k == name).then(|| v.to_string())
    })
}

/// Compares two tokens in time independent of where they differ.
pub fn same_token(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Reads a JSON body of at most [`MAX_BODY`] bytes into `T` (unknown fields are refused by
/// `T`'s own `deny_unknown_fields`).
pub fn json_body<T: DeserializeOwned>(request: &mut Request<'_>) -> Result<T, Reply> {
    json_body_of(request, MAX_BODY)
}

/// [`json_body`] with a body of at most `max` bytes.
pub fn json_body_of<T: DeserializeOwned>(
    request: &mut Request<'_>,
    max: usize,
) -> Result<T, Reply> {
    let buf = body_bytes(request, max)?;
    serde_json::from_slice(&buf).map_err(|e| Reply::error(400, format!("invalid JSON body: {e}")))
}

/// The request's body, at most `max` bytes (413 past it, 408 when it does not arrive in
/// time).
pub fn body_bytes(request: &mut Request<'_>, max: usize) -> Result<Vec<u8>, Reply> {
    let too_large = || Reply::error(413, format!("bodies are at most {max} bytes"));
    if request.body_length() > max as u64 {
        return Err(too_large());
    }
    let mut buf = Vec::with_capacity(request.body_length().min(max as u64) as usize);
    request
        .body()
        .take(max as u64 + 1)
        .read_to_end(&mut buf)
        .map_err(|e| match e.kind() {
            ErrorKind::TimedOut => Reply::error(408, "the body did not arrive in time"),
            _ => Reply::error(400, format!("reading the body: {e}")),
        })?;
    if buf.len() > max {
        return Err(too_large());
    }
    Ok(buf)
}

/// The password of an `Authorization: Basic` header (RFC 7617: base64 of `user:password`).
pub fn basic_password(request: &Request<'_>) -> Option<String> {
    use base64::Engine;
    let v = header(request, "Authorization")?;
    let (scheme, b64) = v.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let raw = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .ok()?;
    let text = String::from_utf8(raw).ok()?;
    text.split_once(':').map(|(_, p)| p.to_string())
}

/// A fresh 128-bit token from the operating system, as 32 hex digits.
pub fn new_token() -> crate::Result<String> {
    use rand::TryRngCore;
    let mut b = [0u8; 16];
    rand::rngs::OsRng.try_fill_bytes(&mut b).map_err(|e| {
        crate::Error::config("token", format!("the system's random source failed: {e}"))
    })?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// Whether a request's `Host` is one `hosts` accepts (`None`: any).
pub(crate) fn host_ok(
    hosts: &Option<Vec<String>>,
    req: &Request<'_>,
) -> std::result::Result<(), Reply> {
    if let Some(hosts) = hosts {
        let host = header(req, "Host").unwrap_or("");
        if !hosts.iter().any(|h| h.eq_ignore_ascii_case(host)) {
            return Err(Reply::error(421, format!("unexpected Host `{host}`")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_parameters_are_decoded_and_bad_escapes_refused() {
        assert_eq!(
            query_param("a=1&id=train%2F7+x&b", "id").as_deref(),
            Some("train/7 x")
        );
        assert_eq!(query_param("id=%zz", "id"), None);
        assert_eq!(query_param("id=%ff", "id"), None);
        assert_eq!(query_param("id=%4", "id"), None);
        assert_eq!(query_param("id=%+1", "id"), None);
        assert_eq!(query_param("x=1", "id"), None);
        assert_eq!(query_param("id", "id").as_deref(), Some(""));
        assert_eq!(query_param("id=a%2Bb+c", "id").as_deref(), Some("a+b c"));
        assert_eq!(query_param("id=%41%", "id"), None);
        assert_eq!(query_param("id=%%41", "id"), None);
        assert_eq!(query_param("id=%C3%A9", "id").as_deref(), Some("é"));
    }

    #[test]
    fn dates_are_http_dates() {
        let at = |secs| http_date(UNIX_EPOCH + Duration::from_secs(secs));
        assert_eq!(at(784_111_777), "Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(at(951_782_400), "Tue, 29 Feb 2000 00:00:00 GMT");
        assert_eq!(at(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(at(4_107_542_399), "Sun, 28 Feb 2100 23:59:59 GMT");
        assert_eq!(at(4_110_220_799), "Wed, 31 Mar 2100 23:59:59 GMT");
    }

    #[test]
    fn a_reply_head_carries_its_headers_and_never_a_split_one() {
        let mut r = Reply::error(403, "no");
        r.headers.push(("Set-Cookie", "a=b".into()));
        r.headers.push(("X-Evil", "a\r\nSet-Cookie: x=y".into()));
        let head = String::from_utf8(r.head()).unwrap();
        assert!(
            head.starts_with("HTTP/1.1 403 Forbidden\r\nDate: "),
            "{head}"
        );
        for line in [
            "Content-Type: application/json",
            "Content-Length: 14",
            "Connection: close",
            "X-Content-Type-Options: nosniff",
            "Set-Cookie: a=b",
        ] {
            assert!(head.contains(&format!("\r\n{line}\r\n")), "{line}: {head}");
        }
        assert!(!head.contains("X-Evil") && !head.contains("x=y"), "{head}");
        assert!(head.ends_with("\r\n\r\n"));
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(same_token("abc", "abc"));
        assert!(!same_token("abc", "abd"));
        assert!(!same_token("abc", "ab"));
        assert!(!same_token("", "a"));
        let t = new_token().unwrap();
        assert_eq!(t.len(), 32);
        assert_ne!(t, new_token().unwrap());
    }
}
