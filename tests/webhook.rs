//! The real `edgegate-webhook` binary over real TLS, driven by `curl` with AdmissionReview
//! fixtures. One webhook per test, each on its own loopback port and temporary records directory.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::*;

fn copy_create() -> Value {
    fixture_json("copy-create.json")
}

fn empty_record() -> Vec<(&'static str, String)> {
    vec![("records.yaml", record(NS, "default", &[]))]
}

#[test]
fn no_record_allows_a_copy() {
    let webhook = Webhook::with_records(&[]);
    assert_allowed(&webhook.validate(&copy_create()));
}

#[test]
fn record_naming_the_address_allows_it_in_any_spelling() {
    for spelling in [ADDRESS, "fd20:0000:0002:0000:0000:0001:0000:0000", "FD20:0:2:0::1:0:0"] {
        let webhook = Webhook::with_records(&[("r.yaml", record(NS, "default", &["fd00::1", spelling]))]);
        assert_allowed(&webhook.validate(&copy_create()));
    }
}

#[test]
fn record_naming_none_denies_with_namespace_and_addresses() {
    let webhook = Webhook::with_records(&[("r.yaml", record(NS, "default", &["fd20:0:2::1:0:9"]))]);
    let message = assert_denied(&webhook.validate(&fixture_json("copy-two-endpoints-create.json")), 403);
    assert_eq!(
        message,
        format!(
            "EndpointSlice {NS}/vpc-lab-1-web-6d5f9c7b8d-x2k4q is not carried: EdgeReachability in {NS} names none of its addresses (fd20:0:2::1:0:0, fd20:0:2::1:0:1)"
        )
    );
    let response = webhook.validate(&copy_create());
    assert_eq!(response["status"]["reason"], "Forbidden");
    assert!(webhook.log().contains("copy not carried"), "a denial is logged at info");
    assert!(!webhook.log().contains('\u{1b}'), "no colour codes in a log that is no terminal");
}

#[test]
fn empty_record_denies_a_copy() {
    let webhook = Webhook::with_records(&empty_record());
    assert_denied(&webhook.validate(&copy_create()), 403);
}

#[test]
fn record_with_another_name_is_ignored() {
    let webhook = Webhook::with_records(&[("r.yaml", record(NS, "not-default", &[]))]);
    assert_allowed(&webhook.validate(&copy_create()));
    let (_, metrics) = webhook.get("/metrics");
    assert!(metrics.contains("edgegate_records_ignored 1"), "{metrics}");
}

#[test]
fn non_copy_under_empty_record_is_allowed() {
    let webhook = Webhook::with_records(&empty_record());
    assert_allowed(&webhook.validate(&fixture_json("not-copy-create.json")));
}

#[test]
fn copy_without_endpoints_is_allowed() {
    let webhook = Webhook::with_records(&empty_record());
    assert_allowed(&webhook.validate(&fixture_json("copy-no-endpoints-create.json")));
}

/// copy-update.json with `edit` applied to its request's object and old object.
fn copy_update(edit: impl Fn(&mut Value, &mut Value)) -> Value {
    let mut review = fixture_json("copy-update.json");
    let request = &mut review["request"];
    let (mut object, mut old) = (request["object"].take(), request["oldObject"].take());
    edit(&mut object, &mut old);
    (request["object"], request["oldObject"]) = (object, old);
    review
}

#[test]
fn update_of_a_terminating_copy_is_allowed() {
    // The UPDATE that removes a terminating copy's last finalizer: refusing it would keep the copy
    // published for ever.
    let webhook = Webhook::with_records(&empty_record());
    let review = copy_update(|object, old| {
        for o in [&mut *object, &mut *old] {
            o["metadata"]["deletionTimestamp"] = json!("2026-12-03T09:00:00Z");
        }
        old["metadata"]["finalizers"] = json!(["example.com/propagation"]);
    });
    assert_allowed(&webhook.validate(&review));
}

#[test]
fn a_terminating_copy_gaining_an_unnamed_address_is_refused() {
    // Held by a finalizer, the copy is still carried: what it gains is published like a CREATE.
    let webhook = Webhook::with_records(&empty_record());
    let review = copy_update(|object, old| {
        for o in [&mut *object, &mut *old] {
            o["metadata"]["deletionTimestamp"] = json!("2026-12-03T09:00:00Z");
            o["metadata"]["finalizers"] = json!(["example.com/propagation"]);
        }
        object["endpoints"][0]["addresses"] = json!(["fd20:0:2::1:0:9"]);
    });
    let message = assert_denied(&webhook.validate(&review), 403);
    assert!(message.contains("fd20:0:2::1:0:9"), "{message}");
}

#[test]
fn update_adding_no_address_to_a_copy_is_allowed() {
    // copy-update.json refreshes conditions; a label added is the same: nothing new is carried.
    let webhook = Webhook::with_records(&empty_record());
    assert_allowed(&webhook.validate(&fixture_json("copy-update.json")));
    let relabelled = copy_update(|object, _| object["metadata"]["labels"]["karmada.io/managed"] = json!("true"));
    assert_allowed(&webhook.validate(&relabelled));
}

#[test]
fn update_adding_an_unnamed_address_is_judged_like_create() {
    let webhook = Webhook::with_records(&empty_record());
    let grown = copy_update(|object, _| object["endpoints"][0]["addresses"] = json!([ADDRESS, "fd20:0:2::1:0:9"]));
    let message = assert_denied(&webhook.validate(&grown), 403);
    assert!(message.contains("fd20:0:2::1:0:9"), "{message}");
    webhook.write_record_file("records.yaml", &record(NS, "default", &[ADDRESS]));
    webhook.wait_until(Duration::from_secs(5), || webhook.validate(&grown)["allowed"] == true);
}

#[test]
fn update_that_makes_a_slice_a_copy_is_judged_whole() {
    let webhook = Webhook::with_records(&empty_record());
    let becomes_copy = copy_update(|_, old| {
        if let Some(labels) = old["metadata"]["labels"].as_object_mut() {
            labels.remove("networking.datumapis.com/vpc-endpointslice-projection");
        }
    });
    assert_denied(&webhook.validate(&becomes_copy), 403);
}

#[test]
fn delete_is_always_allowed() {
    let webhook = Webhook::with_records(&empty_record());
    assert_allowed(&webhook.validate(&fixture_json("copy-delete.json")));
}

#[test]
fn dry_run_is_judged_the_same() {
    let webhook = Webhook::with_records(&empty_record());
    assert_denied(&webhook.validate(&fixture_json("copy-create-dry-run.json")), 403);
    let (_, metrics) = webhook.get("/metrics");
    assert!(
        metrics.contains(r#"edgegate_admission_reviews_total{operation="CREATE",decision="deny",dry_run="true"} 1"#),
        "{metrics}"
    );
}

#[test]
fn other_kinds_pass_with_a_warning() {
    let webhook = Webhook::with_records(&empty_record());
    let response = webhook.validate(&fixture_json("pod-create.json"));
    assert_allowed(&response);
    assert!(response["warnings"][0].as_str().unwrap_or_default().contains("v1 Pod passed unjudged"), "{response}");
}

#[test]
fn malformed_bodies_get_400_with_a_json_error() {
    let webhook = Webhook::with_records(&empty_record());
    let mut wrong_version = copy_create();
    wrong_version["apiVersion"] = json!("admission.k8s.io/v1beta1");
    let mut no_request = copy_create();
    no_request["request"] = Value::Null;
    let mut no_uid = copy_create();
    no_uid["request"]["uid"] = json!("");
    let cases: Vec<(&str, Value)> = vec![
        ("truncated", json!("{\"apiVersion\": \"admission.k8s.io/v1\", \"kind\"")),
        ("unknown version", wrong_version),
        ("no request", no_request),
        ("no uid", no_uid),
        ("not an object", json!([1, 2, 3])),
    ];
    for (case, body) in cases {
        // A JSON string is sent as its raw text, anything else as JSON.
        let text = body.as_str().map_or_else(|| body.to_string(), str::to_owned);
        let file = webhook.dir.path().join("bad.json");
        std::fs::write(&file, text).expect("write");
        let (status, body) = webhook.post_file("/validate", &file);
        assert_eq!(status, 400, "{case}: {body}");
        let error: Value = serde_json::from_str(&body).expect("JSON error body");
        assert!(error["error"].as_str().is_some_and(|e| !e.is_empty()), "{case}: {body}");
    }
    assert_eq!(webhook.get("/healthz").0, 200, "the server is still up");
}

#[test]
fn oversized_body_gets_413() {
    let webhook = Webhook::start(Options {
        records: Some(empty_record()),
        extra_args: vec!["--max-body-bytes".into(), "4096".into()],
        ..Options::default()
    });
    let mut big = copy_create();
    big["request"]["object"]["metadata"]["annotations"]["padding"] = json!("x".repeat(8192));
    let (status, body) = webhook.post("/validate", &big);
    assert_eq!(status, 413, "{body}");
    assert!(body["error"].is_string(), "{body}");
    assert_allowed(&webhook.validate(&fixture_json("copy-delete.json")));
}

#[test]
fn readyz_waits_for_records_and_reviews_error_until_then() {
    let webhook = Webhook::start(Options { records: None, ..Options::default() });
    assert_eq!(webhook.get("/readyz").0, 503);
    let response = webhook.validate(&copy_create());
    let message = assert_denied(&response, 503);
    assert!(message.contains("retry"), "{message}");
    assert_allowed(&webhook.validate(&fixture_json("not-copy-create.json")));

    std::fs::create_dir_all(webhook.records_dir()).expect("mkdir");
    webhook.write_record_file("r.yaml", &record(NS, "default", &[ADDRESS]));
    webhook.wait_until(Duration::from_secs(5), || webhook.get("/readyz").0 == 200);
    assert_allowed(&webhook.validate(&copy_create()));
}

#[test]
fn record_edit_flips_allow_to_deny_within_a_second() {
    let webhook = Webhook::with_records(&[("r.yaml", record(NS, "default", &[ADDRESS]))]);
    assert_allowed(&webhook.validate(&copy_create()));
    webhook.write_record_file("r.yaml", &record(NS, "default", &["fd20:0:2::1:0:9"]));
    let took = webhook.wait_until(Duration::from_secs(5), || webhook.validate(&copy_create())["allowed"] == false);
    eprintln!("allow → deny: {took:?}");
    assert!(
        took < Duration::from_secs(5),
        "allow → deny took {took:?} (sub-second expected; 5 s allows a loaded 2-core machine)"
    );
    // And back, editing the file in place this time.
    std::fs::write(webhook.records_dir().join("r.yaml"), record(NS, "default", &[ADDRESS])).expect("write");
    let took = webhook.wait_until(Duration::from_secs(5), || webhook.validate(&copy_create())["allowed"] == true);
    eprintln!("deny → allow: {took:?}");
    assert!(
        took < Duration::from_secs(5),
        "deny → allow took {took:?} (sub-second expected; 5 s allows a loaded 2-core machine)"
    );
}

#[test]
fn broken_record_file_keeps_last_good_state() {
    let webhook = Webhook::with_records(&empty_record());
    assert_denied(&webhook.validate(&copy_create()), 403);
    webhook.write_record_file(
        "records.yaml",
        "apiVersion: networking.datumapis.com/v1alpha\nkind: EdgeReachability\nmetadata: {name: [\n",
    );
    webhook.wait_until(Duration::from_secs(5), || webhook.log().contains("does not parse"));
    assert!(webhook.log().contains("records.yaml"), "the log names the file");
    assert_denied(&webhook.validate(&copy_create()), 403);
    let (_, metrics) = webhook.get("/metrics");
    assert!(
        metrics.contains("edgegate_record_file_errors_total 1")
            || metrics.contains("edgegate_record_file_errors_total 0"),
        "{metrics}"
    );
    // Removing the file removes its record: no record, so the copy passes.
    std::fs::remove_file(webhook.records_dir().join("records.yaml")).expect("rm");
    webhook.wait_until(Duration::from_secs(5), || webhook.validate(&copy_create())["allowed"] == true);
}

#[test]
fn warn_mode_admits_with_the_denial_as_warning() {
    let webhook = Webhook::start(Options {
        records: Some(empty_record()),
        extra_args: vec!["--mode".into(), "warn".into()],
        ..Options::default()
    });
    let response = webhook.validate(&copy_create());
    assert_allowed(&response);
    assert!(response["warnings"][0].as_str().unwrap_or_default().contains("is not carried"), "{response}");
}

#[test]
fn mutate_trims_unnamed_endpoints() {
    let webhook = Webhook::with_records(&[("r.yaml", record(NS, "default", &["fd20:0:2::1:0:1"]))]);
    let response = webhook.answer("/mutate", &fixture_json("copy-two-endpoints-create.json"));
    assert_allowed(&response);
    assert_eq!(response["patchType"], "JSONPatch");
    let patch = patch_bytes(&response["patch"]);
    let patch: Value = serde_json::from_slice(&patch).expect("patch is JSON");
    assert_eq!(patch[0], json!({"op": "remove", "path": "/endpoints/0"}));
    assert_eq!(
        patch[1],
        json!({"op": "add", "path": "/metadata/annotations/networking.datumapis.com~1edgegate-trimmed-endpoints", "value": "1"})
    );
    // Nothing named at all: refused as in /validate.
    let webhook = Webhook::with_records(&empty_record());
    assert_denied(&webhook.answer("/mutate", &copy_create()), 403);
}

#[test]
fn metrics_and_probes_are_served() {
    let webhook = Webhook::with_records(&[("r.yaml", record(NS, "default", &[ADDRESS, "not an address"]))]);
    assert_eq!(webhook.get("/healthz").0, 200);
    assert_eq!(webhook.get("/readyz").0, 200);
    webhook.validate(&copy_create());
    let (status, metrics) = webhook.get("/metrics");
    assert_eq!(status, 200);
    for line in [
        r#"edgegate_admission_reviews_total{operation="CREATE",decision="allow",dry_run="false"} 1"#,
        "edgegate_admission_duration_seconds_count 1",
        "edgegate_records 1",
        "edgegate_record_addresses 1",
        "edgegate_record_invalid_entries 1",
        "edgegate_record_source_synced 1",
    ] {
        assert!(metrics.contains(line), "missing {line:?} in\n{metrics}");
    }
    // The served leaf's notAfter: in the future (the dev certificate lives for years).
    let expiry: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("edgegate_tls_certificate_expiry_timestamp_seconds "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no certificate expiry gauge in\n{metrics}"));
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
    assert!(expiry > now + 86_400.0, "expiry {expiry} is not in the future (now {now})");
    assert_eq!(webhook.get("/nope").0, 404);
    // prometheus-client writes OpenMetrics (it ends in `# EOF`): said so in the content type.
    assert!(metrics.trim_end().ends_with("# EOF"), "{metrics}");
    let head = curl_output(&webhook.ca, &["-sS", "-o", "/dev/null", "-D", "-", &webhook.url("/metrics")]);
    let head = String::from_utf8_lossy(&head.stdout).to_ascii_lowercase();
    assert!(head.contains("content-type: application/openmetrics-text; version=1.0.0"), "{head}");
}

#[test]
fn http2_and_tls12_are_spoken() {
    let webhook = Webhook::with_records(&[]);
    let (status, _) = webhook.curl(&["--http2", "-o", "/dev/null", &webhook.url("/healthz")]);
    assert_eq!(status, 200);
    let (status, _) = webhook.curl(&["--tls-max", "1.2", "--http1.1", &webhook.url("/healthz")]);
    assert_eq!(status, 200);
    let (status, _) = webhook.curl(&["--http1.1", "http://localhost:1/"]);
    assert_eq!(status, 0, "nothing is plain HTTP on the TLS port");
}

/// Certificate files replaced while running: the next new connection presents the new
/// certificate, and not one request fails meanwhile.
#[test]
fn certificate_rotation_needs_no_restart() {
    let scratch = tempfile::tempdir().expect("tempdir");
    let (old, new) = (scratch.path().join("old"), scratch.path().join("new"));
    for dir in [&old, &new] {
        let status = std::process::Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../certs/dev-certs.sh"))
            .arg(dir)
            .stdout(std::process::Stdio::null())
            .status()
            .expect("dev-certs.sh runs");
        assert!(status.success());
    }
    let bundle = scratch.path().join("both-cas.crt");
    let cas = [
        std::fs::read_to_string(old.join("ca.crt")).expect("ca"),
        std::fs::read_to_string(new.join("ca.crt")).expect("ca"),
    ];
    std::fs::write(&bundle, cas.concat()).expect("bundle");
    let serving = scratch.path().join("serving");
    std::fs::create_dir(&serving).expect("mkdir");
    for f in ["tls.crt", "tls.key"] {
        std::fs::copy(old.join(f), serving.join(f)).expect("copy");
    }
    let webhook = Webhook::start(Options {
        records: Some(Vec::new()),
        tls: Some((serving.join("tls.crt"), serving.join("tls.key"), bundle)),
        ..Options::default()
    });
    let issuer_of_served = || {
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "openssl s_client -connect 127.0.0.1:{} -servername localhost </dev/null 2>/dev/null | openssl x509 -noout -issuer",
                webhook.port
            ))
            .output()
            .expect("openssl");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let issuer = |dir: &std::path::Path| {
        let out = std::process::Command::new("openssl")
            .args(["x509", "-noout", "-issuer", "-in"])
            .arg(dir.join("tls.crt"))
            .output()
            .expect("openssl");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert_eq!(issuer_of_served(), issuer(&old));

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = {
        let stop = std::sync::Arc::clone(&stop);
        let (ca, url) = (webhook.ca.clone(), webhook.url("/validate"));
        let review = fixture("copy-create.json");
        std::thread::spawn(move || {
            let (mut ok, mut failed) = (0, Vec::new());
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let data = format!("@{}", review.display());
                let out = curl_output(&ca, &["-H", "Content-Type: application/json", "--data-binary", &data, &url]);
                let text = String::from_utf8_lossy(&out.stdout).into_owned();
                if out.status.success() && text.ends_with("\n200") {
                    ok += 1;
                } else {
                    failed.push(format!("{text} {}", String::from_utf8_lossy(&out.stderr)));
                }
            }
            (ok, failed)
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    // Replace the pair as cert-manager's volume update would: key and certificate swapped in.
    for f in ["tls.key", "tls.crt"] {
        std::fs::copy(new.join(f), serving.join(format!("{f}.new"))).expect("copy");
        std::fs::rename(serving.join(format!("{f}.new")), serving.join(f)).expect("rename");
    }
    let took = webhook.wait_until(Duration::from_secs(5), || issuer_of_served() == issuer(&new));
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (ok, failed) = load.join().expect("load thread");
    assert!(failed.is_empty(), "{} of {} requests failed: {failed:?}", failed.len(), ok + failed.len());
    assert!(ok > 5, "load ran ({ok} requests)");
    assert!(took < Duration::from_secs(2), "new certificate served after {took:?}");
    let (_, metrics) = webhook.get("/metrics");
    assert!(metrics.contains(r#"edgegate_tls_reloads_total{result="success"}"#), "{metrics}");
}

#[test]
fn sigterm_drains_and_exits() {
    let mut webhook = Webhook::with_records(&[]);
    assert_eq!(webhook.get("/healthz").0, 200);
    webhook.sigterm();
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(status) = webhook.child.try_wait().expect("wait") {
            break status;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "exits within the grace period");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "clean exit: {status:?}");
}

/// A watch handler that panics takes the process down: a dead watch would leave the records frozen
/// as last seen, still synced, and the webhook judging from them. Ended, the process answers no
/// probe, and Kubernetes restarts it. (Before supervision the panic ended only the watch task: the
/// process stayed up and ready for good.)
#[test]
fn a_panicking_watch_handler_ends_the_process() {
    let mut webhook =
        Webhook::start(Options { env: vec![("EDGEGATE_TEST_PANIC_ON_RECORD", NS.to_owned())], ..Options::default() });
    webhook.wait_until(Duration::from_secs(10), || webhook.get("/readyz").0 == 200);
    webhook.write_record_file("records.yaml", &record(NS, "default", &[ADDRESS]));
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(status) = webhook.child.try_wait().expect("wait") {
            break status;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "still running 10 s after the panic; /readyz answers {:?}; log:\n{}",
            webhook.get("/readyz"),
            webhook.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    println!("exited {:?} after the record file was written: {status:?}", start.elapsed());
    assert_eq!(status.code(), Some(70), "a crash exits EX_SOFTWARE, no clean exit: {status:?}");
    assert_eq!(webhook.get("/readyz").0, 0, "nothing answers /readyz any more");
    assert_eq!(webhook.post("/validate", &copy_create()).0, 0, "nor judges a review from the frozen records");
    let log = webhook.log();
    let logged = ["panicked; exiting", r#"task="records directory watch""#, "EDGEGATE_TEST_PANIC_ON_RECORD"];
    assert!(logged.iter().all(|part| log.contains(part)), "the panic and its task are logged:\n{log}");
}

/// The patch bytes of an AdmissionResponse. kube's `AdmissionResponse` writes them as a JSON array
/// of bytes, which the API server's decoder takes as readily as the base64 string Go would write.
fn patch_bytes(patch: &Value) -> Vec<u8> {
    match patch {
        Value::Array(bytes) => bytes.iter().map(|b| u8::try_from(b.as_u64().unwrap_or(0)).unwrap_or(0)).collect(),
        other => panic!("patch is not a byte array: {other}"),
    }
}

/// SIGTERM while requests are in flight: the listener closes at once, every request whose bytes
/// reached the server before the signal still gets its answer, and the process exits within the
/// grace period.
///
/// The webhook is stopped (SIGSTOP) while the clients send the first half of their reviews and
/// gets SIGTERM before it resumes, so when it runs again the signal and the unread requests are
/// there together: the race a busy server meets, set up on every run. A server that tells hyper
/// to shut down before it has read those bytes closes the connections unanswered (the old one
/// did so in 5 of 10 runs of this test).
#[test]
fn sigterm_mid_request_answers_what_was_accepted() {
    use std::io::{BufRead, BufReader, Write};
    const CLIENTS: usize = 16;
    let mut webhook = Webhook::start(Options {
        records: Some(vec![("r.yaml", record(NS, "default", &[ADDRESS]))]),
        extra_args: vec!["--shutdown-grace".into(), "5s".into()],
        ..Options::default()
    });
    // Clients that connect, then on each line from stdin send half a review ("half"), the rest
    // ("rest"), and print each answer's status line and whether it allowed.
    let client = r#"
import socket, ssl, sys
port, ca, body, n = int(sys.argv[1]), sys.argv[2], open(sys.argv[3], "rb").read(), int(sys.argv[4])
ctx = ssl.create_default_context(cafile=ca)
conns = [ctx.wrap_socket(socket.create_connection(("127.0.0.1", port)), server_hostname="localhost") for _ in range(n)]
print("connected", flush=True)
head = b"POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
sys.stdin.readline()
for s in conns:
    s.sendall(head + body[: len(body) // 2])
print("sent half", flush=True)
sys.stdin.readline()
def answer(s):
    # A connection the server closed raises here; it is reported as "no answer", not a crash.
    got = b""
    try:
        s.sendall(body[len(body) // 2 :])
        while b"\r\n\r\n" not in got or not got.rstrip().endswith(b"}"):
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
    except OSError:
        pass
    return got
for got in [answer(s) for s in conns]:
    status = got.split(b"\r\n")[0].decode() or "no answer"
    print(status, "allowed" if b'"allowed":true' in got else "not allowed", flush=True)
"#;
    let mut python = std::process::Command::new("python3")
        .args(["-c", client, &webhook.port.to_string()])
        .arg(&webhook.ca)
        .arg(fixture("copy-create.json"))
        .arg(CLIENTS.to_string())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    let mut stdin = python.stdin.take().expect("stdin");
    let mut lines = BufReader::new(python.stdout.take().expect("stdout")).lines();
    let mut next_line = || lines.next().and_then(Result::ok).unwrap_or_default();
    assert_eq!(next_line(), "connected");
    webhook.signal("STOP");
    stdin.write_all(b"half\n").expect("half");
    assert_eq!(next_line(), "sent half");
    webhook.signal("TERM");
    webhook.signal("CONT");
    let started = std::time::Instant::now();
    // The listener closes at once: a new connection is refused while the old requests are open.
    webhook.wait_until(Duration::from_secs(2), || webhook.get("/healthz").0 == 0);
    stdin.write_all(b"rest\n").expect("rest");
    let answers: Vec<String> = (0..CLIENTS).map(|_| next_line()).collect();
    let _ = python.wait();
    assert_eq!(answers, vec!["HTTP/1.1 200 OK allowed"; CLIENTS], "{}", webhook.log());
    let status = loop {
        if let Some(status) = webhook.child.try_wait().expect("wait") {
            break status;
        }
        assert!(started.elapsed() < Duration::from_secs(6), "exits within --shutdown-grace");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status:?}");
}

#[test]
fn the_shipped_webhook_serves_no_measurement_routes() {
    let webhook = Webhook::with_records(&empty_record());
    assert_eq!(webhook.post("/ceiling", &copy_create()).0, 404, "only webhook/examples/ceiling.rs serves it");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_edgegate-webhook"))
        .arg("--serve-ceiling")
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "--serve-ceiling is no flag of the shipped binary: {stderr}");
}
