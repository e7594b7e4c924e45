//! A flood the webhook must survive: anyone who reaches its port can send reviews of up to
//! `--max-body-bytes` (8 MiB), as many at once as they like. Three floods of ~7.5 MiB reviews by
//! the real `curl` (many HTTP/1.1 connections; one HTTP/2 connection of many streams; chunked
//! bodies of unknown length), each while a second client sends the small fixture every 50 ms:
//! the process stays alive, its peak RSS under the Deployment's memory limit, and every small
//! review is answered, with p99 ≤ 1 s.
//!
//! `cargo test` floods the debug binary for 8 s per case; `scripts/flood.sh` runs the same cases on
//! the release build for 20 s each (`EDGEGATE_WEBHOOK_BIN`, `EDGEGATE_FLOOD_SECONDS`), the figures
//! docs/webhook.md quotes.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::*;

/// deploy/base/workloads/webhook.yaml's memory limit.
const MEMORY_LIMIT_MIB: u64 = 384;

/// A review of about `bytes`: the fixture's copy with endpoints enough (what costs most to decode).
fn large_review(dir: &Path, bytes: usize) -> PathBuf {
    let mut review = fixture_json("copy-create.json");
    let per_endpoint = 90;
    let endpoints: Vec<Value> = (0..bytes / per_endpoint)
        .map(|i| json!({"addresses": [format!("fd20:0:2::{:x}:{:x}", i >> 16, i & 0xffff)], "conditions": {"ready": true}}))
        .collect();
    review["request"]["object"]["endpoints"] = Value::Array(endpoints);
    let path = dir.join("large-review.json");
    std::fs::write(&path, review.to_string()).expect("write review");
    path
}

/// `curl` sending `file` to /validate over and over, `parallel` at once, in the manner `how` says.
fn flood(webhook: &Webhook, file: &Path, parallel: usize, how: &[&str]) -> Child {
    Command::new("curl")
        .args(["-sS", "--cacert"])
        .arg(&webhook.ca)
        .args(["--parallel", "--parallel-max", &parallel.to_string(), "-H", "Content-Type: application/json"])
        .args(how)
        .arg("--data-binary")
        .arg(format!("@{}", file.display()))
        .arg(webhook.url("/validate?n=[1-1000000]"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("curl runs")
}

/// The small fixture every 50 ms for `duration`: (HTTP status, allowed, seconds) of each.
fn small_reviews(webhook: &Webhook, duration: Duration) -> Vec<(u16, bool, f64)> {
    let started = Instant::now();
    let file = fixture("copy-create.json");
    let mut answers = Vec::new();
    while started.elapsed() < duration {
        let out = curl_output(
            &webhook.ca,
            &[
                "-H",
                "Content-Type: application/json",
                "--data-binary",
                &format!("@{}", file.display()),
                "-w",
                "\n%{http_code} %{time_total}",
                &webhook.url("/validate"),
            ],
        );
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        // Ours replaces curl_output's own -w: the status and the time on the last line.
        let (body, tail) = text.rsplit_once('\n').unwrap_or(("", &text));
        let mut tail = tail.split_whitespace();
        let status = tail.next().and_then(|s| s.parse().ok()).unwrap_or(0);
        let seconds = tail.next().and_then(|s| s.parse().ok()).unwrap_or(f64::MAX);
        let allowed = serde_json::from_str::<Value>(body).is_ok_and(|v| v["response"]["allowed"] == true);
        answers.push((status, allowed, seconds));
        std::thread::sleep(Duration::from_millis(50));
    }
    answers
}

/// The process's peak resident memory (VmHWM), MiB.
fn peak_rss_mib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0, |kib| kib / 1024)
}

fn flood_seconds() -> Duration {
    let seconds = std::env::var("EDGEGATE_FLOOD_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(8);
    Duration::from_secs(seconds)
}

/// One case at a time: each measures a webhook alone under its own flood. parking_lot: a case
/// that failed (panicked holding it) does not poison the next.
fn one_at_a_time() -> parking_lot::MutexGuard<'static, ()> {
    static ONE_AT_A_TIME: parking_lot::Mutex<()> = parking_lot::Mutex::new(());
    ONE_AT_A_TIME.lock()
}

/// One case: the webhook (the binary `EDGEGATE_WEBHOOK_BIN` names, else this build's) flooded as
/// `how` says while the small client runs; the bounds asserted, the figures printed.
fn survives(case: &str, parallel: usize, how: &[&str]) {
    let _turn = one_at_a_time();
    let mut options = Options::default();
    if let Ok(binary) = std::env::var("EDGEGATE_WEBHOOK_BIN") {
        options.binary = Some(PathBuf::from(binary));
    }
    let mut webhook = Webhook::start(options);
    webhook.wait_until(Duration::from_secs(20), || webhook.get("/readyz").0 == 200);
    let file = large_review(webhook.dir.path(), 7_500_000);
    let mut flood = flood(&webhook, &file, parallel, how);
    let duration = flood_seconds();
    let answers = small_reviews(&webhook, duration);
    let peak = peak_rss_mib(webhook.child.id());
    let alive = webhook.child.try_wait().expect("wait").is_none();
    let flooding = flood.try_wait().expect("wait").is_none();
    let _ = flood.kill();
    let _ = flood.wait();
    let scrape = webhook.get("/metrics").1;

    let mut times: Vec<f64> = answers.iter().map(|a| a.2).collect();
    times.sort_by(f64::total_cmp);
    let at = |q: f64| times.get(((times.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or(f64::MAX);
    let (p50, p99) = (at(0.5), at(0.99));
    let failed: Vec<&(u16, bool, f64)> = answers.iter().filter(|a| a.0 != 200 || !a.1).collect();
    let large = scrape
        .lines()
        .filter(|l| l.starts_with("edgegate_admission_reviews_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>();
    println!(
        "flood {case} ({parallel} at once, {duration:?}): peak RSS {peak} MiB, {} small reviews p50 {:.0} ms p99 {:.0} ms, {} failed; reviews answered in all {large}",
        answers.len(),
        p50 * 1000.0,
        p99 * 1000.0,
        failed.len()
    );
    assert!(flooding, "curl's flood stopped before the end");
    assert!(peak > 0, "peak RSS read from /proc");
    assert!(alive, "the webhook died under the flood: {}", webhook.log());
    assert!(peak < MEMORY_LIMIT_MIB, "peak RSS {peak} MiB over the {MEMORY_LIMIT_MIB} MiB limit");
    assert!(failed.is_empty(), "small reviews not answered: {failed:?}");
    assert!(p99 <= 1.0, "small reviews' p99 {p99:.3} s over 1 s");
    assert!(answers.len() >= 10, "the small client ran: {}", answers.len());
}

#[test]
fn many_http1_connections_of_large_reviews() {
    // Without Expect: 100-continue, as a flood would: every body is sent whatever the answer.
    survives("HTTP/1.1", 96, &["--http1.1", "-H", "Expect:"]);
}

#[test]
fn one_http2_connection_of_many_large_streams() {
    survives("HTTP/2", 50, &["--http2"]);
}

#[test]
fn chunked_large_bodies_without_a_length() {
    survives("chunked", 96, &["--http1.1", "-H", "Expect:", "-H", "Transfer-Encoding: chunked"]);
}

/// A body the budget cannot spare is answered 429 with `Retry-After: 1`, and the client reads
/// that answer (the API server retries it) rather than a connection reset while it still uploads
/// (the API server does not retry a POST after a transport error). A stalled upload holds the
/// budget for large bodies; curl then sends a whole 1 MiB body, five times over HTTP/1.1 and five
/// over HTTP/2. Once the stalled upload finishes it is answered, and the budget is whole again.
#[test]
fn a_refused_upload_reads_its_429() {
    let _turn = one_at_a_time();
    const MIB: usize = 1024 * 1024;
    // 8 MiB in flight: 4 MiB for small bodies, 4 MiB for large ones, the most one may send.
    let mut webhook = Webhook::start(Options {
        extra_args: ["--max-body-bytes", &(4 * MIB).to_string(), "--max-inflight-bytes", &(8 * MIB).to_string()]
            .map(str::to_owned)
            .to_vec(),
        ..Options::default()
    });
    // The stalled upload: a 4 MiB review (the fixture padded with spaces) sent all but its last
    // 100 bytes, then held until told to go on; its answer's status line printed at the end.
    let stalled = r#"
import socket, ssl, sys
port, ca, path = int(sys.argv[1]), sys.argv[2], sys.argv[3]
body = open(path, "rb").read()
ctx = ssl.create_default_context(cafile=ca)
ctx.set_alpn_protocols(["http/1.1"])
s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port)), server_hostname="localhost")
s.sendall(b"POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body))
s.sendall(body[:-100])
print("held", flush=True)
sys.stdin.readline()
s.sendall(body[-100:])
got = b""
while b"\r\n" not in got:
    chunk = s.recv(65536)
    if not chunk:
        break
    got += chunk
print(got.split(b"\r\n")[0].decode(errors="replace"), flush=True)
"#;
    let dir = webhook.dir.path().to_owned();
    let padded = |bytes: usize| {
        let mut text = fixture_json("copy-create.json").to_string();
        text.push_str(&" ".repeat(bytes - text.len()));
        text
    };
    let held_file = dir.join("held.json");
    std::fs::write(&held_file, padded(4 * MIB)).expect("write");
    let refused_file = dir.join("refused.json");
    std::fs::write(&refused_file, padded(MIB)).expect("write");

    let mut held = Command::new("python3")
        .args(["-c", stalled, &webhook.port.to_string()])
        .arg(&webhook.ca)
        .arg(&held_file)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3");
    let mut said = std::io::BufReader::new(held.stdout.take().expect("stdout"));
    let mut line = String::new();
    std::io::BufRead::read_line(&mut said, &mut line).expect("read");
    assert_eq!(line.trim(), "held", "the stalled upload started");
    // Its bytes are taken as the server reads them: wait until they are.
    std::thread::sleep(Duration::from_millis(500));

    let mut answers = Vec::new();
    // Five of each: whether a reset comes before the 429 is a race.
    for how in ["--http1.1", "--http2"].repeat(5) {
        let out = Command::new("curl")
            .args(["-sS", "--max-time", "10", "--cacert"])
            .arg(&webhook.ca)
            .args([how, "-H", "Expect:", "-H", "Content-Type: application/json", "-D", "-", "-o", "/dev/null"])
            .arg("--data-binary")
            .arg(format!("@{}", refused_file.display()))
            .arg(webhook.url("/validate"))
            .output()
            .expect("curl runs");
        let head = String::from_utf8_lossy(&out.stdout).to_ascii_lowercase();
        let status = head.split_whitespace().nth(1).unwrap_or("none").to_owned();
        println!(
            "a 1 MiB review while the budget is held, {how}: status {status}, curl exit {:?} {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
        answers.push((how, out, status, head));
    }
    for (how, out, status, head) in answers {
        assert!(out.status.success(), "{how}: curl failed: {}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(status, "429", "{how}: {head}");
        assert!(head.contains("retry-after: 1\r\n"), "{how}: {head}");
    }
    // Small reviews keep their own reserve meanwhile.
    assert_eq!(webhook.post("/validate", &fixture_json("copy-create.json")).0, 200, "a small review");

    let stdin = held.stdin.as_mut().expect("stdin");
    std::io::Write::write_all(stdin, b"go\n").expect("write");
    line.clear();
    std::io::BufRead::read_line(&mut said, &mut line).expect("read");
    let _ = held.wait();
    assert!(line.contains(" 200 "), "the stalled upload, finished, is answered: {line}");
    // The budget is whole again: the refused body passes now.
    assert_eq!(webhook.post_file("/validate", &refused_file).0, 200, "the 1 MiB review, retried");
    let scrape = webhook.get("/metrics").1;
    let refusals = scrape.lines().find(|l| l.starts_with("edgegate_admission_refused_busy_total")).unwrap_or("none");
    println!("{refusals}");
    assert_eq!(refusals, "edgegate_admission_refused_busy_total 10", "{scrape}");
    assert!(webhook.child.try_wait().expect("wait").is_none(), "the webhook is alive");
}
