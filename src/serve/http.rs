//! The HTTP edge of the labeling page: who may ask (token, host), what a request names (route,
//! query parameters, a bounded JSON body) and how answers go out.
//!
//! Everything a request carries is hostile: the route is matched against a fixed list, the
//! only parameter read is an item id (looked up in the pool, never joined to a path), bodies
//! are read up to [`MAX_BODY`] bytes and parsed into closed structs, and the token is compared
//! in constant time.

use serde::de::DeserializeOwned;
use std::io::Read;
use tiny_http::{Header, Request, Response};

/// The largest request body read (an answer is an id, a class name and a note).
pub const MAX_BODY: usize = 64 << 10;

/// Name of the cookie that carries the token once the page has been opened with it.
pub const COOKIE: &str = "alkit_token";

/// Header that carries the token on every state-changing request: a page of another origin
/// cannot set it without a CORS preflight, which this server never grants.
pub const TOKEN_HEADER: &str = "X-Alkit-Token";

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

    /// Sends the reply; a client that went away is no error of ours.
    pub fn send(self, request: Request) {
        let mut r = Response::from_data(self.body).with_status_code(self.status);
        let mut headers = vec![
            ("Content-Type", self.content_type.to_string()),
            ("Cache-Control", "no-store".to_string()),
            ("X-Content-Type-Options", "nosniff".to_string()),
            ("Referrer-Policy", "no-referrer".to_string()),
            (
                "Content-Security-Policy",
                "default-src 'none'; img-src 'self'; style-src 'unsafe-inline'; \
                 script-src 'unsafe-inline'; connect-src 'self'; form-action 'none'; \
                 frame-ancestors 'none'"
                    .to_string(),
            ),
        ];
        headers.extend(self.headers);
        for (k, v) in headers {
            if let Ok(h) = Header::from_bytes(k.as_bytes(), v.as_bytes()) {
                r.add_header(h);
            }
        }
        let _ = request.respond(r);
    }
}

/// A header's value, if the request has it (the first one).
pub fn header<'a>(request: &'a Request, name: &'static str) -> Option<&'a str> {
    request
        .headers()
        .iter()
        .find(|h| h.field.equiv(name))
        .map(|h| h.value.as_str())
}

/// The route (path without the query) and the raw query string.
pub fn split_url(url: &str) -> (&str, &str) {
    match url.split_once('?') {
        Some((p, q)) => (p, q),
        None => (url, ""),
    }
}

/// The value of query parameter `name`, percent-decoded; `None` when absent or not UTF-8.
pub fn query_param(query: &str, name: &str) -> Option<String> {
    query.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (k == name).then(|| percent_decode(v)).flatten()
    })
}

/// Decodes `%XX` escapes and `+` (a space in a query string); `None` on a bad escape or
/// bytes that are not UTF-8.
pub fn percent_decode(s: &str) -> Option<String> {
    // The crate passes a malformed escape through as it stands; refused here instead, so that
    // a query never means something other than what its sender encoded.
    let b = s.as_bytes();
    let malformed = b.iter().enumerate().any(|(i, &c)| {
        c == b'%'
            && !b
                .get(i + 1..i + 3)
                .is_some_and(|hex| hex.iter().all(u8::is_ascii_hexdigit))
    });
    if malformed {
        return None;
    }
    // `+` is replaced before decoding, so that an encoded `%2B` stays a plus sign.
    percent_encoding::percent_decode_str(&s.replace('+', " "))
        .decode_utf8()
        .ok()
        .map(std::borrow::Cow::into_owned)
}

/// The value of cookie `name` in the request's `Cookie` header.
pub fn cookie(request: &Request, name: &str) -> Option<String> {
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
pub fn json_body<T: DeserializeOwned>(request: &mut Request) -> Result<T, Reply> {
    if request.body_length().is_some_and(|n| n > MAX_BODY) {
        return Err(Reply::error(
            413,
            format!("bodies are at most {MAX_BODY} bytes"),
        ));
    }
    let mut buf = Vec::new();
    request
        .as_reader()
        .take(MAX_BODY as u64 + 1)
        .read_to_end(&mut buf)
        .map_err(|e| Reply::error(400, format!("reading the body: {e}")))?;
    if buf.len() > MAX_BODY {
        return Err(Reply::error(
            413,
            format!("bodies are at most {MAX_BODY} bytes"),
        ));
    }
    serde_json::from_slice(&buf).map_err(|e| Reply::error(400, format!("invalid JSON body: {e}")))
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
