//! Bad input, table by table: each gets a clear status and message, nothing panics, the server
//! stays up and its memory stays bounded. The real binary over real TLS, driven by `curl` (and
//! `openssl s_client` for the stalling clients).

mod support;

use serde_json::{Value, json};
use support::*;

/// How a case is sent.
enum Send {
    /// POST these bytes to /validate as JSON.
    Body(Vec<u8>),
    /// POST these bytes with these extra curl arguments.
    With(Vec<u8>, Vec<&'static str>),
    /// Raw curl arguments for the URL path given.
    Curl(Vec<&'static str>, &'static str),
}

/// What must come back: an HTTP status, and for 200 the AdmissionResponse's `allowed` and code.
enum Expect {
    Http(u16, &'static str),
    Review { allowed: bool, code: u64, says: &'static str },
}

fn review() -> Value {
    fixture_json("copy-create.json")
}

fn with(f: impl FnOnce(&mut Value)) -> Vec<u8> {
    let mut r = review();
    f(&mut r);
    r.to_string().into_bytes()
}

fn cases() -> Vec<(&'static str, Send, Expect)> {
    use Expect::*;
    use Send::*;
    let hundred_k: Vec<Value> = (0..100_000u32)
        .map(|i| json!({"addresses": [format!("fd20:1:{:x}::{:x}", i >> 16, (i & 0xffff) + 1)]}))
        .collect();
    let over_limit = vec![b' '; 9 * 1024 * 1024];
    vec![
        ("empty body", Body(vec![]), Http(400, "not an AdmissionReview")),
        ("truncated JSON", Body(b"{\"apiVersion\": \"admission.k8s.io/v1\", \"kind\": \"Admissi".to_vec()), Http(400, "EOF")),
        ("plain text", Body(b"hello".to_vec()), Http(400, "not an AdmissionReview")),
        ("JSON null", Body(b"null".to_vec()), Http(400, "")),
        ("JSON array", Body(b"[1,2,3]".to_vec()), Http(400, "")),
        ("JSON string", Body(b"\"review\"".to_vec()), Http(400, "")),
        ("apiVersion v1beta1", Body(with(|r| r["apiVersion"] = json!("admission.k8s.io/v1beta1"))), Http(400, "v1beta1")),
        ("no apiVersion", Body(with(|r| { r.as_object_mut().map(|o| o.remove("apiVersion")); })), Http(400, "apiVersion")),
        ("kind Pod", Body(with(|r| r["kind"] = json!("Pod"))), Http(400, "Pod")),
        ("request null", Body(with(|r| r["request"] = Value::Null)), Http(400, "no request")),
        ("no request", Body(with(|r| { r.as_object_mut().map(|o| o.remove("request")); })), Http(400, "no request")),
        ("no uid", Body(with(|r| { r["request"].as_object_mut().map(|o| o.remove("uid")); })), Http(400, "uid")),
        ("empty uid", Body(with(|r| r["request"]["uid"] = json!(""))), Http(400, "uid")),
        ("request a number", Body(with(|r| r["request"] = json!(5))), Http(400, "")),
        ("unknown operation", Body(with(|r| r["request"]["operation"] = json!("FROB"))), Http(400, "")),
        ("dryRun a string", Body(with(|r| r["request"]["dryRun"] = json!("yes"))), Http(400, "")),
        ("duplicate key", Body(br#"{"apiVersion":"admission.k8s.io/v1","apiVersion":"x","kind":"AdmissionReview"}"#.to_vec()), Http(400, "duplicate")),
        (
            "a Pod under the EndpointSlice kind",
            Body(with(|r| r["request"]["object"] = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {}}))),
            Review { allowed: false, code: 400, says: "not a valid discovery.k8s.io/v1 EndpointSlice" },
        ),
        (
            "endpoints not a list",
            Body(with(|r| r["request"]["object"]["endpoints"] = json!("fd00::1"))),
            Review { allowed: false, code: 400, says: "not a valid" },
        ),
        (
            "addresses of numbers",
            Body(with(|r| r["request"]["object"]["endpoints"] = json!([{"addresses": [1, 2]}]))),
            Review { allowed: false, code: 400, says: "not a valid" },
        ),
        (
            "CREATE without object",
            Body(with(|r| r["request"]["object"] = Value::Null)),
            Review { allowed: false, code: 400, says: "without an object" },
        ),
        (
            "100k endpoints under an empty record",
            Body(with(|r| r["request"]["object"]["endpoints"] = Value::Array(hundred_k))),
            Review { allowed: false, code: 403, says: "and 99990 more" },
        ),
        (
            "deeply nested JSON",
            Body(
                format!(
                    "{{\"apiVersion\":\"admission.k8s.io/v1\",\"kind\":\"AdmissionReview\",\"request\":{{\"uid\":\"u\",\"options\":{}{}}}}}",
                    "[".repeat(100_000),
                    "]".repeat(100_000)
                )
                .into_bytes(),
            ),
            Http(400, "recursion"),
        ),
        ("invalid UTF-8", Body(vec![0xff, 0xfe, b'{', 0x80]), Http(400, "")),
        ("invalid UTF-8 in a string", Body([b"{\"apiVersion\": \"".as_slice(), &[0xc3, 0x28], b"\"}"].concat()), Http(400, "")),
        ("Content-Type text/plain", With(review().to_string().into_bytes(), vec!["-H", "Content-Type: text/plain"]), Http(415, "application/json")),
        ("form encoded (curl -d)", With(review().to_string().into_bytes(), vec!["-H", "Content-Type: application/x-www-form-urlencoded"]), Http(415, "")),
        ("gzip body", With(review().to_string().into_bytes(), vec!["-H", "Content-Encoding: gzip"]), Http(415, "Content-Encoding")),
        ("body over the limit", Body(over_limit.clone()), Http(413, "--max-body-bytes")),
        ("body over the limit, HTTP/1.1", With(over_limit.clone(), vec!["--http1.1"]), Http(413, "--max-body-bytes")),
        ("chunked body over the limit", With(over_limit, vec!["-H", "Transfer-Encoding: chunked"]), Http(413, "--max-body-bytes")),
        ("GET /validate", Curl(vec![], "/validate"), Http(405, "")),
        ("POST to an unknown path", Curl(vec!["-X", "POST", "-d", "{}"], "/nope"), Http(404, "no such endpoint")),
    ]
}

#[test]
fn thirty_bad_inputs_each_get_a_clear_answer() {
    let webhook = Webhook::with_records(&[("r.yaml", record(NS, "default", &[]))]);
    let body_file = webhook.dir.path().join("case.body");
    let cases = cases();
    assert!(cases.len() >= 30, "{} cases", cases.len());
    for (name, send, expect) in cases {
        let (status, body) = match send {
            Send::Body(bytes) => {
                std::fs::write(&body_file, bytes).expect("write");
                webhook.post_file("/validate", &body_file)
            }
            Send::With(bytes, args) => {
                std::fs::write(&body_file, bytes).expect("write");
                let data = format!("@{}", body_file.display());
                let url = webhook.url("/validate");
                let mut all: Vec<&str> = vec!["--data-binary", &data];
                if !args.iter().any(|a| a.starts_with("Content-Type")) {
                    all.extend(["-H", "Content-Type: application/json"]);
                }
                all.extend(args.iter().copied());
                all.push(&url);
                webhook.curl(&all)
            }
            Send::Curl(args, path) => {
                let url = webhook.url(path);
                let mut all = args.clone();
                all.push(&url);
                webhook.curl(&all)
            }
        };
        match expect {
            Expect::Http(code, says) => {
                assert_eq!(status, code, "{name}: {}", truncate(&body));
                if code != 405 {
                    let error: Value = serde_json::from_str(&body)
                        .unwrap_or_else(|_| panic!("{name}: JSON error body, got {}", truncate(&body)));
                    let message = error["error"].as_str().unwrap_or_default();
                    assert!(!message.is_empty() && message.contains(says), "{name}: {message}");
                }
            }
            Expect::Review { allowed, code, says } => {
                assert_eq!(status, 200, "{name}: {}", truncate(&body));
                let response: Value = serde_json::from_str(&body).expect("review");
                let response = &response["response"];
                assert_eq!(response["uid"], review()["request"]["uid"], "{name}");
                assert_eq!(response["allowed"], allowed, "{name}");
                assert_eq!(response["status"]["code"], code, "{name}");
                let message = response["status"]["message"].as_str().unwrap_or_default();
                assert!(message.contains(says), "{name}: {}", truncate(message));
            }
        }
        assert_eq!(webhook.get("/healthz").0, 200, "server up after {name}");
    }
    let rss_kib: u64 = std::fs::read_to_string(format!("/proc/{}/status", webhook.child.id()))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:").and_then(|v| v.trim().trim_end_matches(" kB").parse().ok()))
        .unwrap_or(0);
    assert!(rss_kib > 0 && rss_kib < 256 * 1024, "RSS {rss_kib} KiB after all bad inputs");
    assert!(!webhook.log().contains("panicked"), "no panic");
}

fn truncate(s: &str) -> &str {
    &s[..s.len().min(300)]
}

/// A client that sends part of its headers, or part of its body, and stalls: the server drops it
/// after its header or body timeout (10 s) instead of holding the connection forever.
#[test]
fn stalled_clients_are_dropped() {
    let webhook = Webhook::with_records(&[]);
    // Python's ssl module as the stalling client: send `first`, then wait for the server to answer
    // or close; print what came back and how long it took.
    let client = r#"
import socket, ssl, sys, time
ctx = ssl.create_default_context(cafile=sys.argv[2])
s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", int(sys.argv[1]))), server_hostname="localhost")
s.sendall(sys.argv[3].encode().decode("unicode_escape").encode())
start, got = time.time(), b""
s.settimeout(30)
try:
    while True:
        chunk = s.recv(4096)
        if not chunk:
            break
        got += chunk
except Exception as e:
    got += ("<%s>" % e).encode()
print("%.1f" % (time.time() - start), got[:40])
"#;
    let run = |first: &str| {
        let out = std::process::Command::new("python3")
            .args(["-c", client, &webhook.port.to_string()])
            .arg(&webhook.ca)
            .arg(first)
            .output()
            .expect("python3");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let secs: f64 = text.split_whitespace().next().and_then(|s| s.parse().ok()).unwrap_or(f64::MAX);
        (secs, text)
    };
    let (secs, text) = run("POST /validate HTTP/1.1\\r\\nHost: localhost\\r\\n");
    assert!(secs < 15.0, "half-sent headers held the connection: {text}");
    let (secs, text) = run(
        "POST /validate HTTP/1.1\\r\\nHost: localhost\\r\\nContent-Type: application/json\\r\\nContent-Length: 100\\r\\n\\r\\n{\\\"a\\\":",
    );
    assert!(secs < 15.0, "a stalled body held the connection: {text}");
    assert!(text.contains("408"), "a stalled body gets 408: {text}");
    assert_eq!(webhook.get("/healthz").0, 200);
}

/// Connections that complete the TLS handshake and then send nothing, or only the HTTP/2
/// preface, or one request and then nothing more: the server closes every one within its bound
/// (the first request's headers within 10 s of the handshake; an idle one after its idle period,
/// shortened here to 3 s by a debug-only variable) instead of holding it, its file descriptor and
/// its buffers forever. Then a review still passes.
#[test]
fn idle_connections_are_closed() {
    const IDLE_SECONDS: f64 = 3.0;
    let webhook = Webhook::start(Options {
        env: vec![("EDGEGATE_TEST_IDLE_SECONDS", IDLE_SECONDS.to_string())],
        ..Options::default()
    });
    // Python's ssl module again: `n` connections of each kind, a thread each waiting for the
    // server to close it; one JSON line per kind: how many closed, and after how long (seconds
    // since the handshake, or since the answer for the kinds that send a request first).
    let client = r#"
import json, socket, ssl, sys, threading, time
port, ca, n, wait = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
def frame(kind, flags, stream, payload):
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload
def literal(index, value):  # HPACK: literal without indexing, indexed name, raw value
    return bytes([index, len(value)]) + value
SETTINGS = frame(4, 0, 0, b"")
GET = frame(1, 0x5, 1, b"\x82\x87" + literal(4, b"/healthz") + literal(1, b"localhost"))
def connect(alpn):
    ctx = ssl.create_default_context(cafile=ca)
    if alpn:
        ctx.set_alpn_protocols(alpn)
    return ctx.wrap_socket(socket.create_connection(("127.0.0.1", port)), server_hostname="localhost")
def h2_answered(s):
    buf = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            raise Exception("closed before the answer")
        buf += chunk
        while len(buf) >= 9:
            length, kind, flags, stream = int.from_bytes(buf[:3], "big"), buf[3], buf[4], int.from_bytes(buf[5:9], "big")
            if len(buf) < 9 + length:
                break
            buf = buf[9 + length:]
            if stream == 1 and kind in (0, 1) and flags & 1:
                return
def h1_answered(s):
    buf = b""
    while b"\r\n\r\n" not in buf or b"ok" not in buf.split(b"\r\n\r\n", 1)[1]:
        chunk = s.recv(65536)
        if not chunk:
            raise Exception("closed before the answer")
        buf += chunk
    if b" 200 " not in buf.split(b"\r\n", 1)[0]:
        raise Exception("not 200: %r" % buf[:60])
def open_one(kind):
    if kind == "silent":
        return connect(None)
    if kind == "silent, ALPN h2":
        return connect(["h2"])
    if kind == "half the HTTP/2 preface":
        s = connect(["h2"]); s.sendall(PREFACE[:5]); return s
    if kind == "HTTP/2 preface and SETTINGS":
        s = connect(["h2"]); s.sendall(PREFACE + SETTINGS); return s
    if kind == "HTTP/2, idle after a request":
        s = connect(["h2"]); s.sendall(PREFACE + SETTINGS + GET); h2_answered(s); return s
    if kind == "HTTP/1.1, idle after a request":
        s = connect(["http/1.1"]); s.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n"); h1_answered(s); return s
closed = {}
def watch(kind, s, since):
    s.settimeout(wait)
    try:
        while s.recv(65536):
            pass
        closed.setdefault(kind, []).append(time.time() - since)
    except socket.timeout:
        pass
    except Exception:
        closed.setdefault(kind, []).append(time.time() - since)
kinds = ["silent", "silent, ALPN h2", "half the HTTP/2 preface", "HTTP/2 preface and SETTINGS",
         "HTTP/2, idle after a request", "HTTP/1.1, idle after a request"]
threads = []
for kind in kinds:
    for _ in range(n):
        s = open_one(kind)
        t = threading.Thread(target=watch, args=(kind, s, time.time()))
        t.start()
        threads.append(t)
for t in threads:
    t.join()
for kind in kinds:
    times = sorted(closed.get(kind, []))
    print(json.dumps({"kind": kind, "opened": n, "closed": len(times), "first": times[0] if times else None, "last": times[-1] if times else None}))
"#;
    let per_kind = 50;
    let started = std::time::Instant::now();
    let out = std::process::Command::new("python3")
        .args(["-c", client, &webhook.port.to_string()])
        .arg(&webhook.ca)
        .args([&per_kind.to_string(), "40"])
        .output()
        .expect("python3");
    assert!(out.status.success(), "client failed: {}", String::from_utf8_lossy(&out.stderr));
    println!(
        "{} idle connections of each kind; closed after (seconds), in {:.1?} in all:",
        per_kind,
        started.elapsed()
    );
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    for line in stdout.lines() {
        println!("  {line}");
    }
    for line in stdout.lines() {
        let kind: Value = serde_json::from_str(line).expect("a JSON line");
        let name = kind["kind"].as_str().unwrap_or_default();
        assert_eq!(kind["closed"], kind["opened"], "{name}: still open after 40 s: {line}");
        let (first, last) = (kind["first"].as_f64().unwrap_or(0.0), kind["last"].as_f64().unwrap_or(f64::MAX));
        // The first request's headers are due 10 s after the handshake; an idle HTTP/2
        // connection gets a GOAWAY after IDLE_SECONDS and 5 s to close; idle HTTP/1.1 is
        // closed at once. A second of slack for this busy machine.
        let bound = if name.contains("after a request") { IDLE_SECONDS + 5.0 + 1.0 } else { 10.0 + 1.0 };
        assert!(last <= bound, "{name}: the last closed after {last:.1} s, over {bound} s: {line}");
        let early = if name.contains("after a request") { IDLE_SECONDS - 0.5 } else { 9.0 };
        assert!(first >= early, "{name}: closed after {first:.1} s, before its deadline: {line}");
    }
    let (status, body) = webhook.post("/validate", &review());
    assert_eq!(status, 200, "a review after the idle connections: {body}");
}

/// The API server calls a webhook named by a Service over HTTP/1.1 and keeps an idle connection
/// for 90 s; a connection it comes back to after a pause must still be open, or every pause costs
/// it a TLS handshake (and a POST caught in the close fails). Before, hyper's header timeout
/// closed a kept-alive connection 10 s after its last answer: the second request, 15 s later,
/// found it closed.
#[test]
fn a_kept_alive_connection_outlives_a_pause_of_the_api_server() {
    let webhook = Webhook::with_records(&[]);
    let client = r#"
import socket, ssl, sys, time
ctx = ssl.create_default_context(cafile=sys.argv[2])
ctx.set_alpn_protocols(["http/1.1"])
s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", int(sys.argv[1]))), server_hostname="localhost")
def get():
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
    buf = b""
    while b"\r\n\r\n" not in buf or b"ok" not in buf.split(b"\r\n\r\n", 1)[1]:
        chunk = s.recv(4096)
        if not chunk:
            return "closed"
        buf += chunk
    return buf.split(b"\r\n", 1)[0].decode()
print(get())
time.sleep(float(sys.argv[3]))
try:
    print(get())
except Exception as e:
    print("error: %s" % e)
"#;
    let out = std::process::Command::new("python3")
        .args(["-c", client, &webhook.port.to_string()])
        .arg(&webhook.ca)
        .arg("15")
        .output()
        .expect("python3");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    println!("one connection, two requests 15 s apart: {text:?}");
    let answers: Vec<&str> = text.lines().collect();
    assert_eq!(answers.len(), 2, "{text} {}", String::from_utf8_lossy(&out.stderr));
    assert!(answers.iter().all(|a| a.contains(" 200 ")), "the kept-alive connection answered both: {text}");
}
