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
