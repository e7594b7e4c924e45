//! The alerts of deploy/components/monitoring that read the API server's own series (group
//! `edgegate-api-server`), checked against a real kube-apiserver's /metrics rather than only
//! promtool's synthetic series: the webhook registered as deploy/ registers it, pointed at a port
//! where nothing listens (enforcing and watching) and at one that accepts and never answers, a copy
//! created in each case, and the API server's metrics scraped. Every series and label value the
//! rules select on must be there, with the count the writes made.

use std::collections::BTreeMap;

use edgegate_system_tests::helpers::*;

/// The name of edgegate's webhooks, as the API server labels its series (`name`): the rules
/// select `name=~".+\\.edgegate\\.networking\\.datumapis\\.com"`.
const HOOK: &str = "copies.edgegate.networking.datumapis.com";

/// The API server's /metrics, as its admin reads it.
async fn scrape(client: &Client) -> String {
    let request = http::Request::get("/metrics").body(Vec::new()).expect("request");
    client.request_text(request).await.expect("GET /metrics")
}

/// Samples of `family` whose labels include every pair of `labels`: each sample's labels and value.
fn samples(scrape: &str, family: &str, labels: &[(&str, &str)]) -> Vec<(BTreeMap<String, String>, f64)> {
    let mut found = Vec::new();
    for line in scrape.lines() {
        let Some(rest) = line.strip_prefix(family).and_then(|r| r.strip_prefix('{')) else { continue };
        let Some((inside, value)) = rest.rsplit_once("} ") else { continue };
        let parsed: BTreeMap<String, String> = inside
            .split("\",")
            .filter_map(|pair| pair.split_once("=\""))
            .map(|(k, v)| (k.to_owned(), v.trim_end_matches('"').to_owned()))
            .collect();
        if labels.iter().all(|(k, v)| parsed.get(*k).map(String::as_str) == Some(*v)) {
            found.push((parsed, value.trim().parse().unwrap_or(f64::NAN)));
        }
    }
    found
}

fn sum(samples: &[(BTreeMap<String, String>, f64)]) -> f64 {
    samples.iter().map(|(_, v)| v).sum()
}

/// Every line of the scrape that names edgegate's webhook: what the failure message prints.
fn ours(scrape: &str) -> String {
    scrape.lines().filter(|l| l.contains(HOOK) && !l.contains("_bucket{")).collect::<Vec<_>>().join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_server_exports_what_the_api_server_side_alerts_read() {
    let cp = shared();
    let client = cp.client().await;

    // Nothing listens on `closed`; `hung` accepts connections and never answers.
    let closed = free_port();
    let hung = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let hung_port = hung.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in hung.incoming().flatten() {
            held.push(stream);
        }
    });
    let cases = [
        // scope, url, failurePolicy, timeoutSeconds, copies, refused?
        ("apisrv-down-enforcing", format!("https://127.0.0.1:{closed}/validate"), "Fail", 5, 3, true),
        ("apisrv-down-watching", format!("https://127.0.0.1:{closed}/validate"), "Ignore", 5, 4, false),
        ("apisrv-hung-enforcing", format!("https://127.0.0.1:{hung_port}/validate"), "Fail", 1, 2, true),
    ];
    for (scope, url, policy, timeout, _, _) in &cases {
        namespace(&client, scope, &[("edgegate-e2e", scope)]).await;
        register_webhook_at(&client, scope, url, policy, *timeout).await;
    }
    // The API server's webhook configuration cache follows the new configurations.
    tokio::time::sleep(Duration::from_secs(2)).await;
    for (scope, _, policy, _, copies, refused) in &cases {
        for i in 0..*copies {
            let started = Instant::now();
            let result = create(&client, scope, &slice(scope, &format!("c{i}"), true, &["fd00:ed9e::1"]), false).await;
            eprintln!(
                "{scope} ({policy}): copy c{i} {:?} in {:?}",
                result.as_ref().map_err(|e| e.as_str()),
                started.elapsed()
            );
            assert_eq!(result.is_err(), *refused, "{scope}: {result:?}");
            if let Err(message) = result {
                assert!(message.contains("failed calling webhook"), "{scope}: {message}");
            }
        }
    }

    let text = scrape(&client).await;
    eprintln!("the API server's series naming {HOOK}:\n{}", ours(&text));

    // EdgegateWebhookCallsFailing: copies refused because the webhook could not be called, unreachable
    // (3) or timing out (2), counted by the operation they were refused.
    let refused = samples(
        &text,
        "apiserver_admission_webhook_rejection_count",
        &[("name", HOOK), ("type", "validating"), ("error_type", "calling_webhook_error"), ("operation", "CREATE")],
    );
    assert_eq!(sum(&refused), 5.0, "refused calls: {refused:?}\n{}", ours(&text));
    // None counted as the webhook's own refusal: those are its decisions, not failures.
    let own =
        samples(&text, "apiserver_admission_webhook_rejection_count", &[("name", HOOK), ("error_type", "no_error")]);
    assert_eq!(sum(&own), 0.0, "{own:?}");

    // EdgegateWebhookFailingOpen: every watched copy admitted unjudged.
    let open = samples(&text, "apiserver_admission_webhook_fail_open_count", &[("name", HOOK), ("type", "validating")]);
    assert_eq!(sum(&open), 4.0, "failed open: {open:?}\n{}", ours(&text));

    // EdgegateWebhookCallsSlow: the API server's own timing of the calls, by webhook name; the
    // timed-out calls took about their 1 s timeout, so the histogram has counts above 0.5 s.
    let count = samples(
        &text,
        "apiserver_admission_webhook_admission_duration_seconds_count",
        &[("name", HOOK), ("type", "validating")],
    );
    assert_eq!(sum(&count), 9.0, "every call timed: {count:?}");
    let over_half_second = sum(&samples(
        &text,
        "apiserver_admission_webhook_admission_duration_seconds_bucket",
        &[("name", HOOK), ("type", "validating"), ("le", "0.5")],
    ));
    assert!(sum(&count) - over_half_second >= 2.0, "the two timed-out calls are over 0.5 s");

    // apiserver_admission_webhook_request_total: every call, with the answer's code and whether it
    // was rejected (the dashboard's view of the API server's calls).
    let requests =
        samples(&text, "apiserver_admission_webhook_request_total", &[("name", HOOK), ("type", "validating")]);
    assert_eq!(sum(&requests), 9.0, "{requests:?}");
    let rejected: f64 =
        requests.iter().filter(|(l, _)| l.get("rejected").map(String::as_str) == Some("true")).map(|(_, v)| v).sum();
    assert_eq!(rejected, 5.0, "{requests:?}");
}
