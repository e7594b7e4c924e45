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

/// One case: the webhook (the binary `EDGEGATE_WEBHOOK_BIN` names, else this build's) flooded as
/// `how` says while the small client runs; the bounds asserted, the figures printed.
fn survives(case: &str, parallel: usize, how: &[&str]) {
    // One case at a time: each measures a webhook alone under its own flood.
    // parking_lot: a case that failed (panicked holding it) does not poison the next.
    static ONE_AT_A_TIME: parking_lot::Mutex<()> = parking_lot::Mutex::new(());
    let _turn = ONE_AT_A_TIME.lock();
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
