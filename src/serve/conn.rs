//! The labeling page's connections: accepting them, reading each request's head within its
//! bounds, and closing them, so that a stalled client holds one connection for a bounded
//! time and never anybody else's answer.
//!
//! Each accepted connection gets its own thread, from a bounded number ([`Limits`]): past
//! the cap a connection is answered `503` at once on the accepting thread and closed, never
//! queued. A connection carries one request. Its head (request line and headers, parsed by
//! `httparse`) and its body share one deadline counted from the accept, every socket read is
//! bounded by what is left of it, and the head by a size and a header count; the reply is
//! sent within its own deadline. Chunked bodies are refused (`411`: the page never sends
//! them). After the reply the connection is closed gracefully: the server's side is shut,
//! and what the client still sends is read and dropped for at most [`LINGER`], so that the
//! client reads the reply before the socket goes away.

use super::http::{read_by, Body, Reply, Request};
use crate::error::{Error, Result};
use std::io::{ErrorKind, Read};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a closed connection's late bytes are read and dropped, so that a client still
/// sending sees the reply rather than a reset.
const LINGER: Duration = Duration::from_secs(2);

/// The bounds every connection to the labeling page is held to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The time a client has from its connection's accept to the last byte of its request,
    /// head and body together; a connection idle or stalled that long is closed.
    pub request_timeout: Duration,
    /// The time a client has from the accept to the end of its request's head (the lesser
    /// of this and `request_timeout` holds): a connection that says nothing, or too slowly,
    /// gives its slot back this soon, whatever time a large body may take after it.
    pub head_timeout: Duration,
    /// The time a reply may take to send (a client that stops reading is dropped).
    pub send_timeout: Duration,
    /// Connections served at once; one more is answered `503` and closed.
    pub max_connections: usize,
    /// The largest request head (request line and headers), in bytes.
    pub max_head_bytes: usize,
    /// The most headers one request may carry.
    pub max_headers: usize,
}

impl Default for Limits {
    /// 10 s per request and its head, 60 s per reply, 64 connections, heads of at most 16
    /// KiB and 64 headers: a page's own request is a few hundred bytes and about 20 headers,
    /// answered in milliseconds, and a browser opens at most 6 connections to one server.
    fn default() -> Limits {
        Limits {
            request_timeout: Duration::from_secs(10),
            head_timeout: Duration::from_secs(10),
            send_timeout: Duration::from_secs(60),
            max_connections: 64,
            max_head_bytes: 16 << 10,
            max_headers: 64,
        }
    }
}

impl Limits {
    /// Checks that every bound lets a request through and keeps it bounded.
    pub fn check(&self) -> Result<()> {
        let day = Duration::from_secs(86_400);
        for (name, t) in [
            ("request_timeout", self.request_timeout),
            ("head_timeout", self.head_timeout),
            ("send_timeout", self.send_timeout),
        ] {
            if t < Duration::from_millis(1) || t > day {
                return Err(Error::config(
                    name,
                    format!("{t:?} is not between 1 ms and a day"),
                ));
            }
        }
        for (name, n, lo, hi) in [
            ("max_connections", self.max_connections, 1, 4096),
            ("max_head_bytes", self.max_head_bytes, 1024, 1 << 20),
            ("max_headers", self.max_headers, 8, 1024),
        ] {
            if !(lo..=hi).contains(&n) {
                return Err(Error::config(name, format!("{n} is not in {lo}..={hi}")));
            }
        }
        Ok(())
    }
}

/// What answers a request: the page's router.
pub type Handler = dyn Fn(&mut Request<'_>) -> Reply + Send + Sync;

/// Accepts connections on `listener` until `stop` is set (and the listener woken by a
/// connection), each served on its own thread within `limits` by `handler`.
pub fn serve(
    listener: &TcpListener,
    limits: &Limits,
    stop: &AtomicBool,
    handler: &Arc<Handler>,
) -> std::io::Result<()> {
    let active = Arc::new(AtomicUsize::new(0));
    let (refused, closing) = sync_channel(REFUSED_CLOSING);
    std::thread::Builder::new()
        .name("alkit-label-refused".into())
        .spawn(move || close_refused(&closing))?;
    let mut failing_since: Option<Instant> = None;
    loop {
        let accepted = listener.accept();
        if stop.load(Ordering::SeqCst) {
            return Ok(());
        }
        let stream = match accepted {
            Ok((s, _)) => {
                failing_since = None;
                s
            }
            Err(e) => {
                // A client that gave up before the accept, or a signal: nothing to do. Other
                // failures (out of file descriptors, say) pass when connections close; a
                // listener failing for 30 s without pause is broken.
                if matches!(
                    e.kind(),
                    ErrorKind::ConnectionAborted
                        | ErrorKind::ConnectionReset
                        | ErrorKind::Interrupted
                        | ErrorKind::WouldBlock
                ) {
                    continue;
                }
                let since = *failing_since.get_or_insert_with(Instant::now);
                if since.elapsed() > Duration::from_secs(30) {
                    return Err(e);
                }
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        if active.load(Ordering::SeqCst) >= limits.max_connections {
            refuse(stream, &refused);
            continue;
        }
        let slot = Slot::take(&active);
        let (limits, handler) = (limits.clone(), Arc::clone(handler));
        let spawned = std::thread::Builder::new()
            .name("alkit-label-conn".into())
            .spawn(move || {
                let _slot = slot;
                connection(&stream, &limits, &*handler);
            });
        // No thread to be had: the connection (moved into the closure) is dropped, closed.
        drop(spawned);
    }
}

/// One of the bounded connection slots, given back when its connection's thread ends (a
/// panic included).
struct Slot(Arc<AtomicUsize>);

impl Slot {
    fn take(active: &Arc<AtomicUsize>) -> Slot {
        active.fetch_add(1, Ordering::SeqCst);
        Slot(Arc::clone(active))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Refused connections waiting to be closed at most (more are closed at once).
const REFUSED_CLOSING: usize = 256;

/// How long a refused connection's late bytes are dropped before it is closed.
const REFUSED_LINGER: Duration = Duration::from_secs(1);

/// Answers a connection past the cap `503` on the accepting thread without ever waiting (a
/// reply that does not fit the socket's buffer at once is not sent), and hands it to the one
/// thread that closes refused connections gracefully.
fn refuse(stream: TcpStream, closing: &SyncSender<(TcpStream, Instant)>) {
    if stream.set_nonblocking(true).is_err() {
        return;
    }
    let mut reply = Reply::error(503, "the labeling page has too many connections; try again");
    reply.headers.push(("Retry-After", "1".to_string()));
    reply.send(&stream, false, Instant::now() + Duration::from_secs(1));
    if stream.shutdown(Shutdown::Write).is_ok() {
        // Full: closed now, at worst a reset.
        let _ = closing.try_send((stream, Instant::now() + REFUSED_LINGER));
    }
}

/// Drops what refused clients still send until each closes or its linger passes, polling
/// them all on one thread (their sockets are non-blocking); ends with the server.
fn close_refused(incoming: &Receiver<(TcpStream, Instant)>) {
    let mut open: Vec<(TcpStream, Instant)> = Vec::new();
    let mut sink = [0u8; 16 << 10];
    loop {
        if open.is_empty() {
            match incoming.recv() {
                Ok(c) => open.push(c),
                Err(_) => return,
            }
        }
        while let Ok(c) = incoming.try_recv() {
            open.push(c);
        }
        let now = Instant::now();
        open.retain(|(stream, until)| {
            let mut s = stream;
            // A few reads per round: a client sending without pause does not hold the thread.
            let finished = (0..16)
                .find_map(|_| match s.read(&mut sink) {
                    Ok(0) => Some(true),
                    Ok(_) => None,
                    Err(e) if e.kind() == ErrorKind::Interrupted => None,
                    Err(e) => Some(e.kind() != ErrorKind::WouldBlock),
                })
                .unwrap_or(false);
            !finished && now < *until
        });
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Why a request's head was not read.
enum HeadError {
    /// The client closed or sent nothing before the deadline: close without a word.
    Silent,
    /// Answer this, then close.
    Reply(Reply),
}

/// Serves the one request of a connection, then closes it.
fn connection(stream: &TcpStream, limits: &Limits, handler: &Handler) {
    let accepted = Instant::now();
    let deadline = accepted + limits.request_timeout;
    let head_deadline = accepted + limits.head_timeout.min(limits.request_timeout);
    let _ = stream.set_nodelay(true);
    let (reply, head_only) = match read_head(stream, limits, head_deadline, deadline) {
        Err(HeadError::Silent) => {
            let _ = stream.shutdown(Shutdown::Both);
            return;
        }
        Err(HeadError::Reply(r)) => (r, false),
        Ok(mut request) => (handler(&mut request), request.method() == "HEAD"),
    };
    reply.send(stream, head_only, Instant::now() + limits.send_timeout);
    close(stream);
}

/// Shuts the server's side, then reads and drops what the client still sends (a body not
/// read, say) until it closes too or [`LINGER`] passes: closing a socket with unread bytes
/// resets the connection, and a reset can reach the client before it has read the reply.
fn close(stream: &TcpStream) {
    if stream.shutdown(Shutdown::Write).is_err() {
        return;
    }
    let until = Instant::now() + LINGER;
    let mut s = stream;
    let mut sink = [0u8; 16 << 10];
    while matches!(read_by(&mut s, &mut sink, until), Ok(n) if n > 0) {}
}

/// Reads and checks a request's head by `head_deadline`; the body stays on the connection,
/// to be read by `deadline`.
fn read_head<'s>(
    stream: &'s TcpStream,
    limits: &Limits,
    head_deadline: Instant,
    deadline: Instant,
) -> std::result::Result<Request<'s>, HeadError> {
    let bad = |status: u16, message: &str| HeadError::Reply(Reply::error(status, message));
    let mut buf: Vec<u8> = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    let mut s = stream;
    loop {
        let room = limits.max_head_bytes - buf.len();
        let n = match read_by(&mut s, &mut chunk[..room.min(4096)], head_deadline) {
            Ok(0) => return Err(HeadError::Silent),
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::TimedOut && !buf.is_empty() => {
                return Err(bad(408, "the request's head did not arrive in time"))
            }
            Err(_) => return Err(HeadError::Silent),
        };
        buf.extend_from_slice(&chunk[..n]);
        // A head ends with a line feed: parse only when one arrived (a head sent a byte at a
        // time is not parsed once per byte).
        if !chunk[..n].contains(&b'\n') && buf.len() < limits.max_head_bytes {
            continue;
        }
        let mut headers = vec![httparse::EMPTY_HEADER; limits.max_headers];
        let mut req = httparse::Request::new(&mut headers);
        match req.parse(&buf) {
            Ok(httparse::Status::Complete(len)) => {
                let method = req.method.unwrap_or_default().to_string();
                let url = req.path.unwrap_or_default().to_string();
                let mut named = Vec::with_capacity(req.headers.len());
                for h in req.headers.iter() {
                    let Ok(value) = std::str::from_utf8(h.value) else {
                        return Err(bad(400, "a header's value is not text"));
                    };
                    named.push((h.name.to_string(), value.trim().to_string()));
                }
                let early = buf[len..].to_vec();
                return body_of(stream, method, url, named, early, deadline)
                    .map_err(HeadError::Reply);
            }
            Ok(httparse::Status::Partial) if buf.len() >= limits.max_head_bytes => {
                return Err(bad(
                    431,
                    &format!("request heads are at most {} bytes", limits.max_head_bytes),
                ))
            }
            Ok(httparse::Status::Partial) => {}
            Err(httparse::Error::TooManyHeaders) => {
                return Err(bad(
                    431,
                    &format!("requests carry at most {} headers", limits.max_headers),
                ))
            }
            Err(httparse::Error::Version) => {
                return Err(bad(505, "this server speaks HTTP/1.0 and HTTP/1.1"))
            }
            Err(e) => return Err(bad(400, &format!("a malformed request: {e}"))),
        }
    }
}

/// The request with its body's framing checked: a `Content-Length` (one value, a number),
/// no transfer coding, `Expect` only as `100-continue`.
fn body_of<'s>(
    stream: &'s TcpStream,
    method: String,
    url: String,
    headers: Vec<(String, String)>,
    early: Vec<u8>,
    deadline: Instant,
) -> std::result::Result<Request<'s>, Reply> {
    let all = |name: &'static str| {
        headers
            .iter()
            .filter(move |(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    };
    if all("Transfer-Encoding").next().is_some() {
        return Err(Reply::error(
            411,
            "send the body with a Content-Length (transfer codings are not accepted)",
        ));
    }
    let mut lengths = all("Content-Length").flat_map(|v| v.split(','));
    let declared = match lengths.next() {
        None => 0,
        Some(first) => {
            let parse = |v: &str| {
                let v = v.trim();
                (!v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
                    .then(|| v.parse::<u64>().ok())
                    .flatten()
            };
            let n = parse(first).ok_or_else(|| Reply::error(400, "a malformed Content-Length"))?;
            if !lengths.all(|v| parse(v) == Some(n)) {
                return Err(Reply::error(400, "Content-Length values that disagree"));
            }
            n
        }
    };
    let send_continue = match all("Expect").next() {
        None => false,
        Some(v) if v.eq_ignore_ascii_case("100-continue") => declared > 0,
        Some(_) => {
            return Err(Reply::error(
                417,
                "the only expectation met is 100-continue",
            ))
        }
    };
    // Bytes past the declared body would be a second request on this connection: ignored.
    let early = early[..early
        .len()
        .min(usize::try_from(declared).unwrap_or(usize::MAX))]
        .to_vec();
    let body = Body::new(stream, early, declared, deadline, send_continue);
    Ok(Request::new(method, url, headers, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_refuse_zero_and_unbounded_settings() {
        assert!(Limits::default().check().is_ok());
        let bad = [
            Limits {
                request_timeout: Duration::ZERO,
                ..Limits::default()
            },
            Limits {
                send_timeout: Duration::from_secs(1 << 40),
                ..Limits::default()
            },
            Limits {
                head_timeout: Duration::ZERO,
                ..Limits::default()
            },
            Limits {
                max_connections: 0,
                ..Limits::default()
            },
            Limits {
                max_head_bytes: 10,
                ..Limits::default()
            },
            Limits {
                max_headers: 1 << 20,
                ..Limits::default()
            },
        ];
        let names: Vec<String> = bad
            .iter()
            .map(|l| l.check().unwrap_err().to_string())
            .collect();
        for (m, name) in names.iter().zip([
            "request_timeout",
            "send_timeout",
            "head_timeout",
            "max_connections",
            "max_head_bytes",
            "max_headers",
        ]) {
            assert!(m.contains(&format!("setting `{name}`")), "{m}");
        }
    }
}
