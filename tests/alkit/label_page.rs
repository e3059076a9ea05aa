//! `alkit label`: the labeling page, tested as a person and as an attacker would use it.
//!
//! The server runs as the real binary, or through the library where a test shortens its
//! bounds (`serve::Limits`). Requests go over loopback through `ureq`, or as raw bytes where a
//! client would tidy them (a foreign `Host`, `..` in the path) or stall. The browser
//! test drives Debian's headless Chromium through ChromeDriver's WebDriver protocol; it runs
//! wherever `chromedriver` is on the PATH and must run where `ALKIT_REQUIRE_BROWSER=1`
//! (`.ci/run` installs both and sets it).

use super::{alkit_cmd, data_dir, kind, shipped, tmp, Scratch};
use alkit::data::image::write_image_folder;
use alkit::serve::{LabelServer, Limits, ServeSettings, Stopper};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A running labeling page: `alkit label` (killed when dropped) or a `LabelServer` run by
/// this process (stopped when dropped).
struct Server {
    child: Option<Child>,
    library: Option<(Stopper, JoinHandle<alkit::Result<()>>)>,
    port: u16,
    token: String,
    url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Some((stopper, run)) = self.library.take() {
            stopper.stop();
            let _ = run.join();
        }
    }
}

fn start(state: &Path, extra: &[&str]) -> Server {
    let mut child = alkit_cmd()
        .args(["label", "--state"])
        .arg(state)
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no URL in {line:?}"))
        .to_string();
    let token = url.rsplit_once("token=").unwrap().1.to_string();
    let port = url
        .trim_start_matches("http://127.0.0.1:")
        .split('/')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    Server {
        child: Some(child),
        library: None,
        port,
        token,
        url,
    }
}

/// The page of the session in `state` run through the library with `limits`, batches of 5
/// at random.
fn start_library(state: &Path, limits: Limits) -> Server {
    let hub = alkit::hub::Hub::from_env();
    let (lock, learner) =
        alkit::session::open(state, false, &hub, &mut alkit::observe::Silent).unwrap();
    let strategy = kind("random")
        .strategy(&alkit::strategies::ScorerSettings::default())
        .unwrap();
    let settings = ServeSettings {
        host: [127, 0, 0, 1].into(),
        port: 0,
        request: alkit::session::QueryRequest {
            strategy,
            n: 5,
            include_pending: false,
            subsample: None,
        },
        device: candle_core::Device::Cpu,
        limits,
    };
    let server =
        LabelServer::bind(state, lock, learner, settings, std::sync::Arc::new(|_| {})).unwrap();
    let url = server.url().to_string();
    let token = url.rsplit_once("token=").unwrap().1.to_string();
    let (port, stopper) = (server.addr().port(), server.stopper());
    let run = std::thread::spawn(move || server.run());
    Server {
        child: None,
        library: Some((stopper, run)),
        port,
        token,
        url,
    }
}

/// `(status, body)` of a request through ureq.
pub(super) fn http(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> (u16, Vec<u8>) {
    let mut r = ureq::request(method, url).timeout(Duration::from_secs(120));
    for (k, v) in headers {
        r = r.set(k, v);
    }
    let res = match body {
        Some(b) => r.send_string(b),
        None => r.call(),
    };
    let resp = match res {
        Ok(r) => r,
        Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("{method} {url}: {e}"),
    };
    let status = resp.status();
    let mut bytes = Vec::new();
    resp.into_reader().read_to_end(&mut bytes).unwrap();
    (status, bytes)
}

/// The status line's code of a request written byte for byte.
fn raw(port: u16, request: &str) -> u16 {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut out = String::new();
    let _ = BufReader::new(s).read_line(&mut out);
    out.split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status in {out:?}"))
}

impl Server {
    fn at(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn state(&self) -> Value {
        let (s, b) = http(
            "GET",
            &self.at(&format!("/api/state?token={}", self.token)),
            &[],
            None,
        );
        assert_eq!(s, 200, "{}", String::from_utf8_lossy(&b));
        serde_json::from_slice(&b).unwrap()
    }

    /// Waits until no round is training and a batch is on offer.
    fn ready(&self) -> Value {
        let t0 = Instant::now();
        loop {
            let v = self.state();
            if v["busy"] == json!(false) && !v["batch"].as_array().unwrap().is_empty() {
                return v;
            }
            assert!(v["error"].is_null(), "{}", v["error"]);
            assert!(t0.elapsed() < Duration::from_secs(120), "never ready: {v}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let (s, b) = http(
            "POST",
            &self.at(path),
            &[
                ("X-Alkit-Token", &self.token),
                ("Content-Type", "application/json"),
            ],
            Some(&body.to_string()),
        );
        (s, serde_json::from_slice(&b).unwrap_or(Value::Null))
    }
}

fn on_disk(state: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(state.join("session.json")).unwrap()).unwrap()
}

fn ids(v: &Value, key: &str) -> Vec<String> {
    v[key]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["id"].as_str().unwrap().to_string())
        .collect()
}

pub(super) fn init(state: &Path, pool: &Path, extra: &[&str]) {
    let out = alkit_cmd()
        .args(["init", "--pool"])
        .arg(pool)
        .arg("--state")
        .arg(state)
        .args(extra)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A session on the shipped subset served with batches of 5 (the first drawn at random):
/// its folder, state folder, server and first batch.
fn fresh(name: &str) -> (Scratch, PathBuf, Server, Vec<String>) {
    let dir = tmp(name);
    let state = dir.join("s");
    init(&state, &data_dir(), &["--steps", "20"]);
    let srv = start(&state, &["--n", "5"]);
    let batch = ids(&srv.ready(), "batch");
    assert_eq!(batch.len(), 5);
    (dir, state, srv, batch)
}

#[test]
fn the_label_page_wants_its_token_and_only_a_header_may_change_things() {
    let (_dir, state, srv, batch) = fresh("label-token");
    let t = srv.token.clone();
    for path in ["/", "/api/state", &format!("/api/item?id={}", batch[0])] {
        assert_eq!(http("GET", &srv.at(path), &[], None).0, 403, "{path}");
        let sep = if path.contains('?') { "&" } else { "?" };
        let flip = if t.starts_with('0') { '1' } else { '0' };
        let wrong = format!("{path}{sep}token={flip}{}", &t[1..]);
        assert_eq!(http("GET", &srv.at(&wrong), &[], None).0, 403, "{wrong}");
        let cookie = format!("alkit_token={t}x");
        assert_eq!(
            http("GET", &srv.at(path), &[("Cookie", &cookie)], None).0,
            403
        );
    }
    let answer = json!({"id": batch[0], "label": "3"}).to_string();
    for headers in [vec![], vec![("X-Alkit-Token", "nope")]] {
        let (s, _) = http("POST", &srv.at("/api/answer"), &headers, Some(&answer));
        assert_eq!(s, 403);
    }
    // A token in the query string or a cookie does not authorise a change (CSRF).
    let (s, _) = http(
        "POST",
        &srv.at(&format!("/api/answer?token={t}")),
        &[("Cookie", &format!("alkit_token={t}"))],
        Some(&answer),
    );
    assert_eq!(s, 403);
    assert_eq!(on_disk(&state)["labeled"], json!([]));
    // The page sets the cookie the images are then fetched with.
    let (s, page) = http("GET", &srv.at(&format!("/?token={t}")), &[], None);
    assert_eq!(s, 200);
    assert!(String::from_utf8_lossy(&page).contains("alkit label"));
    let (s, png) = http(
        "GET",
        &srv.at(&format!("/api/item?id={}", batch[0])),
        &[("Cookie", &format!("alkit_token={t}"))],
        None,
    );
    assert_eq!(s, 200);
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    assert_eq!(&png[16..24], &[0, 0, 0, 28, 0, 0, 0, 28], "28x28");
    drop(srv);
}

#[test]
fn the_label_page_serves_nothing_outside_the_pool() {
    let (_dir, _state, srv, _batch) = fresh("label-paths");
    let t = srv.token.clone();
    // Ids are looked up in the pool, never joined to a path.
    for id in [
        "../../../../etc/passwd",
        "%2e%2e%2f%2e%2e%2fetc%2fpasswd",
        "/etc/passwd",
        "2000",
        "-1",
        "%ff",
    ] {
        let (s, _) = http(
            "GET",
            &srv.at(&format!("/api/item?token={t}&id={id}")),
            &[],
            None,
        );
        assert!(s == 404 || s == 400, "{id}: {s}");
    }
    // Routes are a fixed list; `..` in a path is just an unknown page.
    for path in [
        "/../../etc/passwd",
        "/api/../../etc/passwd",
        "/%2e%2e/etc/passwd",
        "/session.json",
        "/api/state/../../session.json",
    ] {
        let req = format!(
            "GET {path}?token={t} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\n\r\n",
            srv.port
        );
        assert_eq!(raw(srv.port, &req), 404, "{path}");
    }
    // A page on another name for this address (DNS rebinding) is refused.
    let rebound = format!(
        "GET /api/state?token={t} HTTP/1.1\r\nHost: evil.example:{}\r\nConnection: close\r\n\r\n",
        srv.port
    );
    assert_eq!(raw(srv.port, &rebound), 421);
    // A client stalling its head or its body delays nobody (the server's bounds are tested
    // with shorter deadlines through the library, below).
    let give_up = Duration::from_secs(30);
    let host = format!("Host: 127.0.0.1:{}\r\n", srv.port);
    let head = format!("GET /api/state?token={t} HTTP/1.1\r\n{host}X-Slow: ");
    let post = format!("POST /api/skip HTTP/1.1\r\n{host}X-Alkit-Token: {t}\r\n");
    let body = format!("{post}Content-Length: 2000\r\n\r\n{{");
    let chunked = format!("{post}Transfer-Encoding: chunked\r\n\r\n1\r\n{{\r\n");
    let stalled = [
        stall(srv.port, head, b"abc", give_up),
        stall(srv.port, body, b" ", give_up),
        stall(srv.port, chunked, b"1\r\n \r\n", give_up),
    ];
    std::thread::sleep(Duration::from_millis(300));
    let (s, secs) = timed(|| http("GET", &srv.at(&format!("/api/state?token={t}")), &[], None).0);
    assert_eq!(s, 200);
    assert!(
        secs < 2.0,
        "the state took {secs:.2} s beside stalled clients"
    );
    drop(srv);
    for c in stalled {
        let _ = c.join();
    }
}

#[test]
fn the_label_page_checks_answers_and_two_tabs_cannot_answer_one_item_twice() {
    let (dir, state, srv, batch) = fresh("label-answers");
    // Answers outside the classes, malformed or oversized bodies: refused, nothing saved.
    for (body, code) in [
        (json!({"id": batch[0], "label": "cat"}), 400),
        (json!({"id": batch[0], "label": "3", "extra": 1}), 400),
        (json!({"id": "no-such-item", "label": "3"}), 404),
        (
            json!({"id": batch[0], "label": "3", "note": "x".repeat(3000)}),
            400,
        ),
        (
            json!({"id": batch[0], "label": "3", "note": "a\u{7}b"}),
            400,
        ),
        (
            json!({"id": batch[0], "label": "3", "note": "y".repeat(70_000)}),
            413,
        ),
    ] {
        assert_eq!(srv.post("/api/answer", &body).0, code, "{body:.80}");
    }
    assert_eq!(on_disk(&state)["labeled"], json!([]));
    // Two tabs answer the same item: the first answer stands, the second is refused.
    let (s, v) = srv.post(
        "/api/answer",
        &json!({"id": batch[0], "label": "3", "note": "blurry"}),
    );
    assert_eq!(s, 200, "{v}");
    let (s, v) = srv.post("/api/answer", &json!({"id": batch[0], "label": "5"}));
    assert_eq!(s, 409, "{v}");
    assert_eq!(
        on_disk(&state)["labeled"],
        json!([{"id": batch[0], "label": "3", "round": 1, "note": "blurry"}])
    );
    // While the page runs, no other process changes the session.
    let other = alkit_cmd()
        .args(["label", "--state"])
        .arg(&state)
        .output()
        .unwrap();
    assert!(!other.status.success());
    assert!(String::from_utf8_lossy(&other.stderr).contains("another process"));
    std::fs::write(dir.join("a.csv"), format!("id,label\n{},1\n", batch[1])).unwrap();
    let teach = alkit_cmd()
        .args(["teach", "--state"])
        .arg(&state)
        .arg("--labels")
        .arg(dir.join("a.csv"))
        .output()
        .unwrap();
    assert!(!teach.status.success());
    assert!(String::from_utf8_lossy(&teach.stderr).contains("another process"));
    assert_eq!(on_disk(&state)["labeled"].as_array().unwrap().len(), 1);
    drop(srv);
}

#[test]
fn a_label_page_killed_mid_batch_loses_no_answer_and_resumes_the_batch() {
    let (_dir, state, srv, batch) = fresh("label-kill");
    assert_eq!(
        srv.post("/api/answer", &json!({"id": batch[0], "label": "3"}))
            .0,
        200
    );
    // Skip, undo of a skip, answer, undo of the answer: the item is back in its place.
    assert_eq!(srv.post("/api/skip", &json!({"id": batch[1]})).0, 200);
    assert_eq!(ids(&srv.state(), "batch")[0], batch[2]);
    assert_eq!(srv.post("/api/undo", &json!({})).0, 200);
    let (s, v) = srv.post("/api/answer", &json!({"id": batch[1], "label": "7"}));
    assert_eq!(s, 200, "{v}");
    assert_eq!(ids(&v, "batch"), batch[2..].to_vec());
    let (s, v) = srv.post("/api/undo", &json!({}));
    assert_eq!(s, 200, "{v}");
    assert_eq!(ids(&v, "batch"), batch[1..].to_vec());
    assert_eq!(on_disk(&state)["labeled"].as_array().unwrap().len(), 1);
    assert_eq!(
        srv.post("/api/answer", &json!({"id": batch[1], "label": "7"}))
            .0,
        200
    );

    // kill -9 mid-batch: what was answered is on disk, the rest is offered again.
    let before = on_disk(&state);
    drop(srv);
    assert_eq!(on_disk(&state), before);
    let srv = start(&state, &["--n", "5"]);
    let v = srv.ready();
    assert_eq!(ids(&v, "batch"), batch[2..].to_vec());
    assert_eq!(v["labeled"], json!(2));
    // Answering the rest retrains in the background and offers round 2.
    for id in &batch[2..] {
        assert_eq!(
            srv.post("/api/answer", &json!({"id": id, "label": "1"})).0,
            200
        );
    }
    let v = srv.ready();
    assert_eq!(v["rounds"].as_array().unwrap().len(), 2);
    assert_eq!(v["rounds"][1]["labeled"], json!(5));
    assert!(v["rounds"][1]["test_acc"].is_number());
    // The stopping rules' word after round 2's model predicted the stop set.
    assert_eq!(v["stopping"]["round"], json!(2));
    assert!(v["stopping"]["measure"]["uncertainty"].is_number());
    assert_eq!(v["stopping"]["since"].as_object().unwrap().len(), 4);
    assert_eq!(ids(&v, "batch").len(), 5);
    assert!(state.join("model/model.safetensors").is_file());
    drop(srv);
}

// ------------------------------------------------------------------ stalled clients

/// What a stalling client saw: the status it was answered, if any, and when the server
/// closed its connection (EOF or reset), counted from its connect.
struct Stalled {
    status: Option<u16>,
    closed_after: Duration,
}

/// A client that connects, sends `head`, then one byte of `drip` (round and round) every
/// 500 ms while reading what comes back, until the server closes the connection or
/// `give_up` passes.
fn stall(port: u16, head: String, drip: &'static [u8], give_up: Duration) -> JoinHandle<Stalled> {
    std::thread::spawn(move || {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let t0 = Instant::now();
        s.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        let mut got = Vec::new();
        let mut sent = s.write_all(head.as_bytes()).is_ok();
        let mut next = drip.iter().cycle();
        let mut buf = [0u8; 4096];
        while sent && t0.elapsed() < give_up {
            match s.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    if let Some(&b) = next.next() {
                        sent = s.write_all(&[b]).is_ok();
                    }
                }
                Err(_) => break,
            }
        }
        let status = String::from_utf8_lossy(&got)
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok());
        Stalled {
            status,
            closed_after: t0.elapsed(),
        }
    })
}

/// A whole response to a request written byte for byte: `(status, head, body)`.
fn raw_whole(port: u16, request: &[u8]) -> (u16, String, Vec<u8>) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let _ = s.write_all(request);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    let end = out
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no head in {:?}", String::from_utf8_lossy(&out)));
    let head = String::from_utf8_lossy(&out[..end]).to_string();
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (status, head, out[end + 4..].to_vec())
}

/// `(status, seconds)` of a request through ureq.
fn timed(f: impl FnOnce() -> u16) -> (u16, f64) {
    let t0 = Instant::now();
    let s = f();
    (s, t0.elapsed().as_secs_f64())
}

#[test]
fn stalled_and_slowloris_clients_never_delay_the_page_and_are_closed_at_their_deadline() {
    let dir = tmp("label-stall");
    let state = dir.join("s");
    init(&state, &data_dir(), &["--steps", "20"]);
    let deadline = Duration::from_secs(3);
    let cap = 16;
    let srv = start_library(
        &state,
        Limits {
            request_timeout: deadline,
            max_connections: cap,
            ..Limits::default()
        },
    );
    let batch = ids(&srv.ready(), "batch");
    let (port, t) = (srv.port, srv.token.clone());
    let host = format!("Host: 127.0.0.1:{port}\r\n");
    let give_up = deadline + Duration::from_secs(8);
    // Four slowloris heads (a header a byte every 500 ms), three chunked bodies that never
    // end, one connection that sends nothing.
    let slow: Vec<_> = (0..4)
        .map(|_| {
            let head = format!("GET /api/state?token={t} HTTP/1.1\r\n{host}X-Slow: ");
            stall(port, head, b"abcdefgh", give_up)
        })
        .collect();
    let chunked: Vec<_> = (0..3)
        .map(|_| {
            let head = format!(
                "POST /api/answer HTTP/1.1\r\n{host}X-Alkit-Token: {t}\r\n\
                 Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n"
            );
            stall(port, head, b"1\r\nx\r\n", give_up)
        })
        .collect();
    let silent = stall(port, String::new(), b"", give_up);
    // A body that stops short of its Content-Length.
    let short = stall(
        port,
        format!(
            "POST /api/answer HTTP/1.1\r\n{host}X-Alkit-Token: {t}\r\n\
             Content-Length: 20\r\n\r\n{{}}"
        ),
        b"",
        give_up,
    );
    std::thread::sleep(Duration::from_millis(300));

    // Meanwhile the person's page reads and answers at once.
    let (s, secs) = timed(|| http("GET", &srv.at(&format!("/api/state?token={t}")), &[], None).0);
    assert_eq!(s, 200);
    assert!(
        secs < 2.0,
        "the state took {secs:.2} s beside stalled clients"
    );
    let (s, secs) = timed(|| {
        srv.post("/api/answer", &json!({"id": batch[0], "label": "3"}))
            .0
    });
    assert_eq!(s, 200);
    assert!(
        secs < 2.0,
        "an answer took {secs:.2} s beside stalled clients"
    );

    // Past the cap, connections are answered 503 at once, never queued: 20 idle ones on top
    // of the (at least 6) stalled ones still open.
    std::thread::sleep(Duration::from_millis(200));
    let idle: Vec<_> = (0..20)
        .map(|_| stall(port, String::new(), b"", give_up))
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let (s, head, _) = raw_whole(
        port,
        format!("GET /api/state?token={t} HTTP/1.1\r\n{host}\r\n").as_bytes(),
    );
    assert_eq!(s, 503, "{head}");
    assert!(head.contains("Retry-After: 1"), "{head}");

    // Every stalled connection is closed by the server at its deadline.
    let late = deadline + Duration::from_millis(2500);
    for c in slow {
        let c = c.join().unwrap();
        assert_eq!(c.status, Some(408), "a slowloris head is answered 408");
        assert!(
            c.closed_after >= deadline - Duration::from_millis(300) && c.closed_after < late,
            "a slowloris head was closed after {:?}",
            c.closed_after
        );
    }
    for c in chunked {
        let c = c.join().unwrap();
        assert_eq!(c.status, Some(411), "a chunked body is refused");
        assert!(c.closed_after < late, "closed after {:?}", c.closed_after);
    }
    let c = silent.join().unwrap();
    assert_eq!(c.status, None);
    assert!(
        c.closed_after >= deadline - Duration::from_millis(300) && c.closed_after < late,
        "a silent connection was closed after {:?}",
        c.closed_after
    );
    let c = short.join().unwrap();
    assert_eq!(
        c.status,
        Some(408),
        "a body that stops short is answered 408"
    );
    assert!(
        c.closed_after >= deadline - Duration::from_millis(300) && c.closed_after < late,
        "a short body was closed after {:?}",
        c.closed_after
    );
    let (mut refused, mut held) = (0, 0);
    for c in idle {
        let c = c.join().unwrap();
        match c.status {
            Some(503) => {
                refused += 1;
                assert!(
                    c.closed_after < Duration::from_secs(2),
                    "{:?}",
                    c.closed_after
                );
            }
            None => {
                held += 1;
                assert!(c.closed_after < late, "{:?}", c.closed_after);
            }
            other => panic!("an idle connection was answered {other:?}"),
        }
    }
    assert!(refused >= 20 - (cap - 6), "{refused} refused, {held} held");
    assert!(held > 0, "{refused} refused, {held} held");

    // The page serves on afterwards.
    let (s, secs) = timed(|| {
        srv.post("/api/answer", &json!({"id": batch[1], "label": "3"}))
            .0
    });
    assert_eq!(s, 200);
    assert!(secs < 2.0, "{secs:.2} s");
    assert_eq!(on_disk(&state)["labeled"].as_array().unwrap().len(), 2);

    // Heads and bodies the server cannot bound or does not speak are refused.
    let get = format!("GET /api/state?token={t} HTTP/1.1\r\n{host}");
    let many: String = (0..70).map(|i| format!("X-H{i}: 1\r\n")).collect();
    let long = format!("X-Long: {}\r\n", "a".repeat(20_000));
    let post = format!("POST /api/answer HTTP/1.1\r\n{host}X-Alkit-Token: {t}\r\n");
    for (request, code) in [
        (format!("{get}{many}\r\n"), 431),
        (format!("{get}{long}\r\n"), 431),
        (format!("{post}Content-Length: 12abc\r\n\r\n"), 400),
        (
            format!("{post}Content-Length: 2\r\nContent-Length: 3\r\n\r\n{{}}"),
            400,
        ),
        (
            format!("{post}Content-Length: 2\r\nExpect: a-pony\r\n\r\n{{}}"),
            417,
        ),
        (format!("{post}Transfer-Encoding: gzip\r\n\r\n"), 411),
        (
            format!("GET /api/state?token={t} HTTP/2.0\r\n{host}\r\n"),
            505,
        ),
        ("GET / HTTP/1.1\r\nHost\r\n\r\n".to_string(), 400),
        (format!("{post}Content-Length: 99999999999\r\n\r\n"), 413),
    ] {
        let (s, head, _) = raw_whole(port, request.as_bytes());
        assert_eq!(s, code, "{:.120}: {head}", request);
    }
    // HEAD has the GET's head and no body; every reply closes its connection.
    let (s, head, body) = raw_whole(
        port,
        format!("HEAD /api/state?token={t} HTTP/1.1\r\n{host}\r\n").as_bytes(),
    );
    assert_eq!(s, 200, "{head}");
    assert!(head.contains("Content-Type: application/json"), "{head}");
    assert!(head.contains("Connection: close"), "{head}");
    assert!(!head.contains("Content-Length: 0\r"), "{head}");
    assert!(body.is_empty());
    // A client that announces its body and waits for `100 Continue` gets it.
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let answer = json!({"id": batch[2], "label": "3"}).to_string();
    write!(
        s,
        "{post}Content-Length: {}\r\nExpect: 100-continue\r\n\r\n",
        answer.len()
    )
    .unwrap();
    let mut reader = BufReader::new(s.try_clone().unwrap());
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    assert_eq!(line, "HTTP/1.1 100 Continue\r\n");
    reader.read_line(&mut line).unwrap();
    s.write_all(answer.as_bytes()).unwrap();
    let mut rest = String::new();
    reader.read_to_string(&mut rest).unwrap();
    assert!(rest.starts_with("HTTP/1.1 200 OK\r\n"), "{rest:.200}");
    assert_eq!(on_disk(&state)["labeled"].as_array().unwrap().len(), 3);
    drop(srv);
}

// ------------------------------------------------------------------ the browser test

/// A WebDriver session on headless Chromium through a local ChromeDriver.
struct Browser {
    driver: Child,
    base: String,
    _profile: PathBuf,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = ureq::delete(&self.base).call();
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn wd(method: &str, url: &str, body: Option<Value>) -> Value {
    let body = body.map(|b| b.to_string());
    let (s, b) = http(
        method,
        url,
        &[("Content-Type", "application/json")],
        body.as_deref(),
    );
    let v: Value = serde_json::from_slice(&b).unwrap_or(Value::Null);
    assert_eq!(s, 200, "{method} {url}: {v}");
    v["value"].clone()
}

impl Browser {
    fn open(dir: &Path) -> Browser {
        let port = free_port();
        // Chromium puts its singleton socket under TMPDIR, and a Unix socket's path must fit
        // in 108 bytes: under CI's long awkward TMPDIR the browser exits at start.
        let driver = Command::new("chromedriver")
            .env("TMPDIR", short_tmp())
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let root = format!("http://127.0.0.1:{port}");
        let t0 = Instant::now();
        while ureq::get(&format!("{root}/status")).call().is_err() {
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "chromedriver did not start"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let profile = dir.join("chromium-profile");
        let args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--window-size=1280,800",
        ];
        let mut args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        args.push(format!("--user-data-dir={}", profile.display()));
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": chromium(), "args": args},
        }}});
        let mut driver = Some(driver);
        let v = std::panic::catch_unwind(|| wd("POST", &format!("{root}/session"), Some(caps)));
        let v = v.unwrap_or_else(|e| {
            let _ = driver.take().map(|mut d| d.kill());
            std::panic::resume_unwind(e)
        });
        Browser {
            driver: driver.take().unwrap(),
            base: format!("{root}/session/{}", v["sessionId"].as_str().unwrap()),
            _profile: profile,
        }
    }

    fn go(&self, url: &str) {
        wd(
            "POST",
            &format!("{}/url", self.base),
            Some(json!({"url": url})),
        );
    }

    fn js(&self, script: &str) -> Value {
        wd(
            "POST",
            &format!("{}/execute/sync", self.base),
            Some(json!({"script": script, "args": []})),
        )
    }

    /// Waits until `script` returns something other than `null`/`false`, and returns it.
    fn until(&self, what: &str, script: &str) -> Value {
        let t0 = Instant::now();
        loop {
            let v = self.js(script);
            if !(v.is_null() || v == json!(false)) {
                return v;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(120),
                "timed out waiting for {what}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Presses keys as a person does (keydown + keyup each), on whatever has the focus.
    fn keys(&self, keys: &str) {
        let actions: Vec<Value> = keys
            .chars()
            .flat_map(|k| {
                [
                    json!({"type": "keyDown", "value": k.to_string()}),
                    json!({"type": "keyUp", "value": k.to_string()}),
                ]
            })
            .collect();
        wd(
            "POST",
            &format!("{}/actions", self.base),
            Some(json!({"actions": [{"type": "key", "id": "keyboard", "actions": actions}]})),
        );
    }

    fn click(&self, css: &str) {
        let e = wd(
            "POST",
            &format!("{}/element", self.base),
            Some(json!({"using": "css selector", "value": css})),
        );
        let id = e
            .as_object()
            .unwrap()
            .values()
            .next()
            .unwrap()
            .as_str()
            .unwrap()
            .to_string();
        wd(
            "POST",
            &format!("{}/element/{id}/click", self.base),
            Some(json!({})),
        );
    }

    fn screenshot(&self) -> Vec<u8> {
        use base64::Engine;
        let v = wd("GET", &format!("{}/screenshot", self.base), None);
        base64::engine::general_purpose::STANDARD
            .decode(v.as_str().unwrap())
            .unwrap()
    }
}

/// `/tmp` where there is one (short enough for Chromium's socket), else the usual folder.
fn short_tmp() -> std::path::PathBuf {
    let tmp = std::path::PathBuf::from("/tmp");
    if tmp.is_dir() {
        tmp
    } else {
        std::env::temp_dir()
    }
}

fn chromium() -> String {
    std::env::var("ALKIT_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".to_string())
}

/// The item currently shown, once the page shows one and no round is training.
const SHOWN: &str = "const e = document.getElementById('itemid'); \
    return (document.body.dataset.busy === '0' && e) ? e.textContent : null;";

/// A script true once the page shows item `id`.
fn showing(id: &str) -> String {
    format!("return document.getElementById('itemid')?.textContent === {id:?};")
}

#[test]
fn a_person_labels_in_headless_chromium_and_the_session_equals_teach() {
    let have = Command::new("chromedriver")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
        && Path::new(&chromium()).exists();
    if !have {
        assert!(
            std::env::var("ALKIT_REQUIRE_BROWSER").as_deref() != Ok("1"),
            "ALKIT_REQUIRE_BROWSER=1 but chromedriver or {} is missing",
            chromium()
        );
        // Tests report a skip on stderr, where `cargo test` shows it.
        #[allow(clippy::print_stderr)]
        {
            eprintln!(
                "skipped: the browser test needs Debian's chromium and chromium-driver \
             (`.ci/run` installs them)"
            );
        }
        return;
    }
    let dir = tmp("label-browser");
    // A folder of photos as a person has it: 20 sorted into class folders, 100 not.
    let (train, _) = shipped();
    let items: Vec<(usize, Option<String>)> = (0..120)
        .map(|i| (i, (i < 20).then(|| train.labels()[i].to_string())))
        .collect();
    let pool = dir.join("my_photos");
    let item_ids = write_image_folder(&pool, &train, &items).unwrap();
    let truth = |id: &str| -> String {
        let i = item_ids.iter().position(|x| x == id).unwrap();
        train.labels()[i].to_string()
    };
    let (page_state, cli_state) = (dir.join("page"), dir.join("cli"));
    let flags = ["--steps", "40", "--classes", "0,1,2,3,4,5,6,7,8,9"];
    init(&page_state, &pool, &flags);
    init(&cli_state, &pool, &flags);

    let srv = start(&page_state, &["--n", "4"]);
    let browser = Browser::open(&dir);
    browser.go(&srv.url);
    let first = srv.ready();
    let batch = ids(&first, "batch");
    assert_eq!(batch.len(), 4);
    // The page shows the batch best first, and the URL no longer carries the token.
    let shown = browser.until("the first item", SHOWN);
    assert_eq!(shown, json!(batch[0]));
    assert_eq!(browser.js("return location.search;"), json!(""));
    let width = browser.until(
        "the image",
        "const i = document.getElementById('item'); return i && i.complete && i.naturalWidth;",
    );
    assert_eq!(width, json!(28));

    // Answer the batch with keys: a note on the first, a wrong key on the third taken back
    // with Backspace and answered again.
    let mut answers: Vec<(String, String, String)> = Vec::new();
    for (k, id) in batch.iter().enumerate() {
        browser.until(&format!("item {k}"), &showing(id));
        let label = truth(id);
        let mut note = String::new();
        if k == 0 {
            browser.click("#note");
            browser.keys("thin stroke\u{E007}");
            note = "thin stroke".into();
        }
        if k == 2 {
            let wrong = ((label.parse::<u32>().unwrap() + 1) % 10).to_string();
            browser.keys(&wrong);
            browser.until("the next item", &showing(&batch[3]));
            let t0 = Instant::now();
            while srv.state()["last"]["id"] != json!(id) {
                assert!(
                    t0.elapsed() < Duration::from_secs(30),
                    "the wrong answer never saved"
                );
                std::thread::sleep(Duration::from_millis(50));
            }
            let disk = on_disk(&page_state);
            assert_eq!(
                disk["labeled"].as_array().unwrap().last().unwrap()["label"],
                json!(wrong)
            );
            browser.keys("\u{E003}");
            browser.until("the undone item back", &showing(id));
        }
        browser.keys(&label);
        answers.push((id.clone(), label, note));
    }
    // The batch is done: the page retrains in the background and shows round 2's batch.
    browser.until(
        "round 2",
        "return document.body.dataset.round === '2' && document.body.dataset.busy === '0' \
         && document.getElementById('itemid') !== null;",
    );
    let second = srv.ready();
    let shown = browser.js("return document.getElementById('itemid').textContent;");
    assert_eq!(shown, json!(ids(&second, "batch")[0]));
    // No test split: the curve is how often round 1's model guessed the person's answer.
    let curve = browser.js("return document.querySelectorAll('#curve circle').length;");
    assert_eq!(curve, json!(1), "round 1's guesses on the learning curve");
    let legend = browser.js("return document.getElementById('curve').textContent;");
    assert!(legend.as_str().unwrap().contains("guess"), "{legend}");
    // The stopping card reads round 2's measures and lists every rule.
    let stop = browser.js("return document.getElementById('stopping').textContent;");
    let stop = stop.as_str().unwrap();
    assert!(
        stop.contains("round 2") && stop.contains("kappa-average") && stop.contains("delta-f"),
        "{stop}"
    );
    if let Ok(path) = std::env::var("ALKIT_SCREENSHOT") {
        std::fs::write(path, browser.screenshot()).unwrap();
    }
    drop(browser);
    drop(srv);

    // The same session driven by the CLI: query, teach the same answers, query.
    let q = |out: &str| {
        let o = alkit_cmd()
            .args(["query", "--state"])
            .arg(&cli_state)
            .args(["--n", "4", "--out"])
            .arg(dir.join(out))
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    q("b1.csv");
    let mut csv = String::from("id,label,note\n");
    for (id, label, note) in &answers {
        csv.push_str(&format!("{id},{label},{note}\n"));
    }
    std::fs::write(dir.join("answers.csv"), csv).unwrap();
    let o = alkit_cmd()
        .args(["teach", "--state"])
        .arg(&cli_state)
        .arg("--labels")
        .arg(dir.join("answers.csv"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    q("b2.csv");
    // The page also records round 1's guess on each answer; otherwise the two are equal.
    let (mut a, b) = (on_disk(&page_state), on_disk(&cli_state));
    for l in a["labeled"].as_array_mut().unwrap().iter_mut().skip(20) {
        let g = l.as_object_mut().unwrap().remove("guess").unwrap();
        assert!(g.as_str().unwrap().parse::<u8>().is_ok(), "{g}");
    }
    assert_eq!(a, b);
    assert_eq!(a["labeled"].as_array().unwrap().len(), 24);
    assert_eq!(a["labeled"][20]["note"], json!("thin stroke"));
    assert_eq!(
        std::fs::read(page_state.join("model/model.safetensors")).unwrap(),
        std::fs::read(cli_state.join("model/model.safetensors")).unwrap()
    );
}

#[test]
fn the_label_page_shows_a_tabular_item_as_its_values_and_retrains_on_the_button() {
    let dir = tmp("label-table");
    let pool = dir.join("pool.csv");
    let mut csv = String::from("id,label,a,b\n");
    for i in 0..40 {
        let (a, b) = (i as f32 / 40.0, 1.0 - i as f32 / 40.0);
        let label = match i {
            0 => "low",
            39 => "high",
            _ => "",
        };
        csv.push_str(&format!("r{i},{label},{a},{b}\n"));
    }
    std::fs::write(&pool, csv).unwrap();
    let state = dir.join("s");
    init(&state, &pool, &["--steps", "30"]);
    let srv = start(&state, &["--n", "3"]);
    let v = srv.ready();
    assert_eq!(v["kind"], json!("table"));
    let batch = ids(&v, "batch");
    let (s, body) = http(
        "GET",
        &srv.at(&format!("/api/item?token={}&id={}", srv.token, batch[0])),
        &[],
        None,
    );
    assert_eq!(s, 200);
    let values: Value = serde_json::from_slice(&body).unwrap();
    let i: f32 = batch[0][1..].parse().unwrap();
    assert_eq!(values, json!({"values": [i / 40.0, 1.0 - i / 40.0]}));
    // One answer, then "retrain now": round 2 trains on 3 labels with the rest of round 1
    // still pending.
    let label = if i < 20.0 { "low" } else { "high" };
    assert_eq!(
        srv.post("/api/answer", &json!({"id": batch[0], "label": label}))
            .0,
        200
    );
    let (s, v) = srv.post("/api/retrain", &json!({}));
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["busy"], json!(true));
    // While it trains the rest of the batch is still answered (it waits to be taught); a
    // second retrain is refused.
    let (s, v) = srv.post("/api/answer", &json!({"id": batch[1], "label": "low"}));
    assert!(s == 200 || s == 409, "{s} {v}");
    let waited = s == 200;
    assert_eq!(srv.post("/api/retrain", &json!({})).0, 409);
    let t0 = Instant::now();
    while srv.state()["rounds"].as_array().unwrap().len() < 2 {
        assert!(t0.elapsed() < Duration::from_secs(60), "no second round");
        std::thread::sleep(Duration::from_millis(50));
    }
    let v = srv.ready();
    assert_eq!(v["rounds"][1]["labeled"], json!(3));
    if waited {
        // Taught in round 1, after which it was given: out of the pending batch.
        assert_eq!(v["pending"], json!(4));
        let l = &on_disk(&state)["labeled"];
        assert_eq!(l[3]["id"], json!(batch[1]));
        assert_eq!(l[3]["round"], json!(1));
    } else {
        assert_eq!(v["pending"], json!(5));
    }
    drop(srv);
}

#[test]
fn the_label_page_serves_the_last_ranking_while_the_next_model_trains() {
    let dir = tmp("label-spares");
    let pool = dir.join("pool.csv");
    let mut csv = String::from("id,label,a,b\n");
    for i in 0..60 {
        let (a, b) = (i as f32 / 60.0, 1.0 - i as f32 / 60.0);
        let label = match i {
            0 | 1 => "low",
            58 | 59 => "high",
            _ => "",
        };
        csv.push_str(&format!("r{i},{label},{a},{b}\n"));
    }
    std::fs::write(&pool, csv).unwrap();
    let truth = |id: &str| {
        let i: usize = id[1..].parse().unwrap();
        if i < 30 {
            "low"
        } else {
            "high"
        }
    };
    let state = dir.join("s");
    // Enough steps that a round outlasts these requests.
    init(&state, &pool, &["--steps", "4000"]);
    let srv = start(&state, &["--n", "3", "--scorer", "entropy"]);
    let v = srv.ready();
    let batch = ids(&v, "batch");
    let guessed: Vec<Value> = v["batch"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["predicted"]["class"].clone())
        .collect();
    let last_score = v["batch"][2]["score"].as_f64().unwrap();
    let mut v = Value::Null;
    for id in &batch {
        let (s, r) = srv.post("/api/answer", &json!({"id": id, "label": truth(id)}));
        assert_eq!(s, 200, "{r}");
        v = r;
    }
    // The batch is answered: round 2 trains, and the page offers round 1's ranking on from
    // rank 4, best first, each with round 1's guess.
    assert_eq!(v["busy"], json!(true), "{v}");
    let spares = v["batch"].as_array().unwrap().clone();
    assert!(spares.len() >= 20, "{v}");
    for (k, b) in spares.iter().enumerate() {
        assert_eq!(b["spare"], json!(true));
        assert_eq!(b["rank"], json!(k + 4));
        assert!(b["predicted"]["class"].is_string());
        let s = b["score"].as_f64().unwrap();
        assert!(s <= last_score + 1e-6, "{b}");
        if k > 0 {
            assert!(s <= spares[k - 1]["score"].as_f64().unwrap() + 1e-6);
        }
    }
    let spare: Vec<String> = spares
        .iter()
        .map(|b| b["id"].as_str().unwrap().to_string())
        .collect();
    // Two answers wait in the journal, the second taken back; a skip; then the kill test's
    // promise: the answer waiting is on disk before the page hears back.
    for id in &spare[..2] {
        let (s, r) = srv.post("/api/answer", &json!({"id": id, "label": truth(id)}));
        assert_eq!(s, 200, "{r}");
    }
    let (s, r) = srv.post("/api/answer", &json!({"id": spare[0], "label": "low"}));
    assert_eq!(s, 409, "{r}");
    assert!(
        r["error"].as_str().unwrap().contains("waits to be taught"),
        "{r}"
    );
    let (s, r) = srv.post("/api/undo", &json!({}));
    assert_eq!(s, 200, "{r}");
    assert_eq!(r["waiting"], json!(1));
    assert_eq!(ids(&r, "batch")[0], spare[1]);
    assert_eq!(srv.post("/api/skip", &json!({"id": spare[1]})).0, 200);
    let journal: Value =
        serde_json::from_slice(&std::fs::read(state.join("label-studio-queue.json")).unwrap())
            .unwrap();
    assert_eq!(
        journal,
        json!([{"id": spare[0], "label": truth(&spare[0]), "round": 1,
                "guess": spares[0]["predicted"]["class"]}])
    );
    // The model is ready: the waiting answer is taught in round 1, the new batch swaps in.
    let v = srv.ready();
    assert_eq!(v["rounds"].as_array().unwrap().len(), 2);
    assert_eq!(v["rounds"][1]["labeled"], json!(7));
    assert_eq!(v["waiting"], json!(0));
    // The spare skipped while it trained is forgotten: the new batch may hold it.
    assert_eq!(v["skipped"], json!(0));
    assert!(!state.join("label-studio-queue.json").exists());
    assert!(v["batch"]
        .as_array()
        .unwrap()
        .iter()
        .all(|b| b["spare"] == json!(false)));
    let disk = on_disk(&state);
    let labeled = disk["labeled"].as_array().unwrap();
    assert_eq!(labeled.len(), 8);
    assert_eq!(labeled[7]["id"], json!(spare[0]));
    assert_eq!(labeled[7]["round"], json!(1));
    for (k, id) in batch.iter().enumerate() {
        assert_eq!(labeled[4 + k]["id"], json!(id));
        assert_eq!(labeled[4 + k]["guess"], guessed[k]);
    }
    assert!(!ids(&v, "batch").contains(&spare[0]));
    // How often round 1's model guessed right, for the page's curve without a test split.
    let matched = batch
        .iter()
        .zip(&guessed)
        .chain([(&spare[0], &spares[0]["predicted"]["class"])])
        .filter(|(id, g)| json!(truth(id)) == **g)
        .count();
    assert_eq!(
        v["guesses"],
        json!([{"round": 1, "labeled": 4, "answered": 4, "matched": matched}])
    );

    // An answer waiting when the server is killed is taught when the session opens next.
    let fresh: Vec<String> = ids(&v, "batch");
    for id in &fresh {
        assert_eq!(
            srv.post("/api/answer", &json!({"id": id, "label": truth(id)}))
                .0,
            200
        );
    }
    let v = srv.state();
    assert_eq!(v["busy"], json!(true), "{v}");
    let next = ids(&v, "batch")[0].clone();
    assert_eq!(
        srv.post("/api/answer", &json!({"id": next, "label": truth(&next)}))
            .0,
        200
    );
    drop(srv);
    let o = alkit_cmd()
        .args(["status", "--state"])
        .arg(&state)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let said = String::from_utf8_lossy(&o.stdout).to_string();
    let journal = state.join("label-studio-queue.json");
    assert_eq!(
        said.contains("waiting   1 answers"),
        journal.exists(),
        "{said}"
    );
    let o = alkit_cmd()
        .args(["query", "--n", "1", "--state"])
        .arg(&state)
        .arg("--out")
        .arg(dir.join("q.csv"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let disk = on_disk(&state);
    let last = disk["labeled"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["id"], json!(next));
    assert_eq!(last["round"], json!(2));
    assert!(!state.join("label-studio-queue.json").exists());
}

/// The issue's "done when", run by hand (`cargo test --release --test alkit -- --ignored
/// hundred --nocapture`): a person labels 100 images of the shipped subset in the browser with
/// the keyboard, 20 per round, and the model's test accuracy rises.
#[test]
#[ignore = "about a minute; a demonstration, run by hand"]
fn a_person_labels_a_hundred_images_in_the_browser_and_the_model_improves() {
    let dir = tmp("label-hundred");
    let state = dir.join("s");
    init(&state, &data_dir(), &["--steps", "300"]);
    let (train, _) = shipped();
    let t0 = Instant::now();
    let srv = start(&state, &["--n", "20"]);
    let browser = Browser::open(&dir);
    browser.go(&srv.url);
    for _ in 0..100 {
        let id = browser.until("an item", SHOWN);
        let id = id.as_str().unwrap().to_string();
        let truth = train.labels()[id.parse::<usize>().unwrap()].to_string();
        browser.keys(&truth);
        browser.until(
            "the next item",
            &format!(
            "const e = document.getElementById('itemid'); return !e || e.textContent !== {id:?};"
        ),
        );
    }
    let v = loop {
        let v = srv.state();
        if v["rounds"].as_array().unwrap().len() == 6 && v["busy"] == json!(false) {
            break v;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let acc: Vec<(u64, f64)> = v["rounds"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| Some((r["labeled"].as_u64()?, r["test_acc"].as_f64()?)))
        .collect();
    #[allow(clippy::print_stderr)]
    {
        eprintln!(
            "test accuracy by labels: {acc:?}; {:.0} s",
            t0.elapsed().as_secs_f64()
        );
    }
    assert_eq!(v["labeled"], json!(100));
    assert_eq!(acc.len(), 5);
    assert!(acc[4].1 > acc[0].1 + 0.15, "{acc:?}");
}

#[test]
fn a_label_page_over_a_streamed_pool_shows_and_retrains_as_one_in_memory() {
    // The page of a session whose pool is read from its IDX files (`label --stream`): the
    // batch's images are the ones the in-memory page shows, and a batch answered on it
    // retrains and offers the next batch, whose images are served too.
    let (_dir, state, srv, batch) = fresh("label-stream");
    let png = |srv: &Server, id: &str| {
        let cookie = format!("alkit_token={}", srv.token);
        let (s, b) = http(
            "GET",
            &srv.at(&format!("/api/item?id={id}")),
            &[("Cookie", &cookie)],
            None,
        );
        assert_eq!(s, 200, "{id}");
        b
    };
    let shown: Vec<Vec<u8>> = batch.iter().map(|id| png(&srv, id)).collect();
    drop(srv);
    let srv = start(&state, &["--n", "5", "--stream"]);
    assert_eq!(ids(&srv.ready(), "batch"), batch);
    for (id, want) in batch.iter().zip(&shown) {
        assert_eq!(&png(&srv, id), want, "{id}");
    }
    for id in &batch {
        let (s, v) = srv.post("/api/answer", &json!({"id": id, "label": "3"}));
        assert_eq!(s, 200, "{v}");
    }
    let next = ids(&srv.ready(), "batch");
    assert_eq!(next.len(), 5);
    assert!(next.iter().all(|id| !batch.contains(id)));
    for id in &next {
        assert_eq!(&png(&srv, id)[..8], b"\x89PNG\r\n\x1a\n");
    }
    assert_eq!(on_disk(&state)["rounds"].as_array().unwrap().len(), 2);
}

#[test]
fn an_embedding_pool_shows_its_texts_and_images_on_the_page_and_in_label_studio_tasks() {
    let Some(py) = super::feature_methods::python() else {
        return;
    };
    let dir = tmp("label-display");
    std::fs::create_dir_all(dir.join("img")).unwrap();
    let mut pngs = Vec::new();
    for i in 0..12 {
        let px: Vec<f32> = (0..3 * 6 * 5)
            .map(|k| ((k * 7 + i * 13) % 256) as f32 / 255.0)
            .collect();
        let png = alkit::data::image::encode_png(&px, &[3, 6, 5]).unwrap();
        std::fs::write(dir.join(format!("img/{i}.png")), &png).unwrap();
        pngs.push(png);
    }
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/reference/display_embeddings.py");
    let o = Command::new(&py).arg(&script).arg(&*dir).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let texts: Vec<String> = serde_json::from_slice(&o.stdout).unwrap();

    // Label Studio tasks carry each item's text, and the configuration shows it as text:
    // from the safetensors file's metadata, the .npz's `display` array and the Parquet
    // table's `display` column alike.
    let mut files = vec!["texts.npz"];
    if dir.join("texts.parquet").exists() {
        files.push("texts.parquet");
    } else {
        assert!(
            std::env::var("ALKIT_REQUIRE_NUMPY").as_deref() != Ok("1"),
            "pyarrow is required (ALKIT_REQUIRE_NUMPY=1) to write the Parquet table"
        );
    }
    for f in files {
        let s = dir.join(format!("s-{f}"));
        init(&s, &dir.join(f), &["--steps", "20"]);
        let out = dir.join(format!("b-{f}.json"));
        let o = alkit_cmd()
            .args(["query", "--n", "4", "--format", "label-studio", "--state"])
            .arg(&s)
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{f}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let tasks: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
        for t in tasks.as_array().unwrap() {
            let i: usize = t["data"]["alkit_id"].as_str().unwrap()[1..]
                .parse()
                .unwrap();
            assert_eq!(t["data"]["text"], json!(texts[i]), "{f}: {t}");
        }
    }
    let s2 = dir.join("s2");
    init(&s2, &dir.join("texts.safetensors"), &["--steps", "20"]);
    let batch = dir.join("b.json");
    let o = alkit_cmd()
        .args(["query", "--n", "4", "--format", "label-studio", "--state"])
        .arg(&s2)
        .arg("--out")
        .arg(&batch)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let tasks: Value = serde_json::from_slice(&std::fs::read(&batch).unwrap()).unwrap();
    let tasks = tasks.as_array().unwrap();
    assert_eq!(tasks.len(), 4);
    for t in tasks {
        let i: usize = t["data"]["alkit_id"].as_str().unwrap()[1..]
            .parse()
            .unwrap();
        assert_eq!(t["data"]["text"], json!(texts[i]), "{t}");
    }
    let xml = std::fs::read_to_string(dir.join("b.xml")).unwrap();
    assert!(
        xml.contains(r#"<Text name="text" value="$text"/>"#),
        "{xml}"
    );

    // The page shows a text pool's items as their texts.
    let state = dir.join("s");
    init(&state, &dir.join("texts.safetensors"), &["--steps", "20"]);
    let srv = start(&state, &["--n", "3"]);
    let v = srv.ready();
    assert_eq!(v["kind"], json!("text"));
    for id in ids(&v, "batch") {
        let (s, body) = http(
            "GET",
            &srv.at(&format!("/api/item?token={}&id={id}", srv.token)),
            &[],
            None,
        );
        assert_eq!(s, 200);
        let i: usize = id[1..].parse().unwrap();
        assert_eq!(
            serde_json::from_slice::<Value>(&body).unwrap(),
            json!({"text": texts[i]})
        );
    }
    drop(srv);

    // An image display: the files themselves, on the page and inlined in the tasks.
    let s3 = dir.join("s3");
    init(&s3, &dir.join("images.safetensors"), &["--steps", "20"]);
    let o = alkit_cmd()
        .args(["query", "--n", "3", "--format", "label-studio", "--state"])
        .arg(&s3)
        .arg("--out")
        .arg(dir.join("i.json"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let tasks: Value = serde_json::from_slice(&std::fs::read(dir.join("i.json")).unwrap()).unwrap();
    for t in tasks.as_array().unwrap() {
        let i: usize = t["data"]["alkit_id"].as_str().unwrap().parse().unwrap();
        let uri = t["data"]["image"].as_str().unwrap();
        let b64 = uri.strip_prefix("data:image/png;base64,").unwrap();
        use base64::Engine;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .unwrap();
        assert_eq!(bytes, pngs[i]);
    }
    let srv = start(&s3, &["--n", "2"]);
    let v = srv.ready();
    assert_eq!(v["kind"], json!("image"));
    let id = ids(&v, "batch")[0].clone();
    let (s, body) = http(
        "GET",
        &srv.at(&format!("/api/item?token={}&id={id}", srv.token)),
        &[],
        None,
    );
    assert_eq!(s, 200);
    assert_eq!(body, pngs[id.parse::<usize>().unwrap()]);
    drop(srv);

    // One display entry too few: refused by name, no session written.
    let o = alkit_cmd()
        .args(["init", "--pool"])
        .arg(dir.join("miscount.safetensors"))
        .arg("--state")
        .arg(dir.join("s4"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("`display`") && err.contains("miscount.safetensors"),
        "{err}"
    );
    assert!(!dir.join("s4/session.json").exists());
}

#[test]
fn a_session_on_a_frozen_backbone_trains_heads_on_its_cached_features_and_shows_the_photos() {
    let dir = tmp("label-backbone");
    // A folder of photos as a person has it: 30 sorted into class folders, 90 not.
    let (train, _) = shipped();
    let items: Vec<(usize, Option<String>)> = (0..120)
        .map(|i| (i, (i < 30).then(|| train.labels()[i].to_string())))
        .collect();
    let pool = dir.join("photos");
    let item_ids = write_image_folder(&pool, &train, &items).unwrap();
    let ck = dir.join("cnn");
    let o = alkit_cmd()
        .args(["-q", "train", "--steps", "30", "--data"])
        .arg(data_dir())
        .arg("--out")
        .arg(&ck)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let cache = dir.join("cache");
    let flags = [
        "--backbone",
        ck.to_str().unwrap(),
        "--embed-cache",
        cache.to_str().unwrap(),
        "--steps",
        "50",
        "--classes",
        "0,1,2,3,4,5,6,7,8,9",
    ];
    let state = dir.join("s");
    init(&state, &pool, &flags);
    let st = on_disk(&state);
    let source = st["source"].as_str().unwrap();
    assert!(
        source.ends_with(".safetensors")
            && Path::new(source).starts_with(std::fs::canonicalize(&cache).unwrap()),
        "{source}"
    );
    // The class subfolders seeded it, as they seed a session on the folder itself; each
    // round trains a linear head.
    assert_eq!(st["labeled"].as_array().unwrap().len(), 30, "{st}");
    assert_eq!(st["config"]["arch"]["hidden"], json!([]), "{st}");
    let q = dir.join("q.csv");
    let o = alkit_cmd()
        .args(["query", "--n", "5", "--state"])
        .arg(&state)
        .arg("--out")
        .arg(&q)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let asked = std::fs::read_to_string(&q).unwrap();
    assert_eq!(asked.lines().count(), 6, "{asked}");
    for line in asked.lines().skip(1) {
        let id = line.split(',').next().unwrap();
        assert!(
            item_ids.iter().any(|x| x == id) && !id.contains('/'),
            "{line}"
        );
    }
    // The page shows the photo itself, from the folder.
    let srv = start(&state, &["--n", "3"]);
    let v = srv.ready();
    assert_eq!(v["kind"], json!("image"));
    let id = ids(&v, "batch")[0].clone();
    let (s, body) = http(
        "GET",
        &srv.at(&format!("/api/item?token={}&id={id}", srv.token)),
        &[],
        None,
    );
    assert_eq!(s, 200);
    assert_eq!(body, std::fs::read(pool.join(&id)).unwrap());
    drop(srv);
    // A second session on the same photos and backbone reuses the cached embeddings.
    init(&dir.join("s2"), &pool, &flags);
    assert_eq!(std::fs::read_dir(&cache).unwrap().count(), 1);
    assert_eq!(on_disk(&dir.join("s2"))["source"], st["source"]);
    // A CSV pool keeps its seed labels in its label cells, beside the values the backbone
    // embeds: they seed the session on its embeddings as they would the CSV itself.
    let csv = dir.join("pool.csv");
    let mut text = String::from("id,label,a,b,c\n");
    for i in 0..40u32 {
        let label = match i {
            0..6 => ["cat", "dog"][i as usize % 2],
            _ => "",
        };
        let v = f64::from(i);
        text += &format!(
            "r{i},{label},{},{},{}\n",
            (v * 0.37).sin(),
            (v * 0.11).cos(),
            v / 40.0
        );
    }
    std::fs::write(&csv, text).unwrap();
    // A backbone over its three values: an MLP saved with its random initialisation.
    let mlp = dir.join("mlp");
    {
        use alkit::train::ModelBuilder;
        let arch = alkit::models::Arch::Mlp(alkit::nn::MlpConfig {
            inputs: 3,
            hidden: vec![8],
            classes: 2,
            dropout: 0.0,
        });
        let (vb, params) = alkit::nn::init::seeded(
            alkit::rng::stream(0, alkit::rng::Purpose::Tool, 0),
            candle_core::DType::F32,
            &candle_core::Device::Cpu,
        );
        arch.build(vb).unwrap();
        let normalizer = alkit::data::Normalizer {
            mean: vec![0.0; 3],
            std: vec![1.0; 3],
        };
        let classes = vec!["cat".to_string(), "dog".to_string()];
        alkit::checkpoint::save(&mlp, &arch, &params, &normalizer, &[3], classes).unwrap();
    }
    let state = dir.join("s-csv");
    init(
        &state,
        &csv,
        &[
            "--backbone",
            mlp.to_str().unwrap(),
            "--embed-cache",
            cache.to_str().unwrap(),
            "--steps",
            "5",
        ],
    );
    let st = on_disk(&state);
    let mut seeded: Vec<String> = st["labeled"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.to_string())
        .collect();
    seeded.sort();
    assert_eq!(seeded.len(), 6, "{st}");
    assert_eq!(st["classes"], json!(["cat", "dog"]), "{st}");
}
