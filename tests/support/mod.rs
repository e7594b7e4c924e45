//! Test harness: start the real `edgegate-webhook` binary on a free loopback port and talk to it
//! with the real `curl` over real TLS.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub const NS: &str = "ns-3f6c1a52-9e0b-4c1d-8a77-0b5e2d9c4f10";
pub const ADDRESS: &str = "fd20:0:2::1:0:0";

pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures").join(name)
}

pub fn fixture_json(name: &str) -> Value {
    let text = std::fs::read_to_string(fixture(name)).expect("fixture exists");
    serde_json::from_str(&text).expect("fixture is JSON")
}

/// An EdgeReachability manifest for `namespace` named `name` with these addresses.
pub fn record(namespace: &str, name: &str, addresses: &[&str]) -> String {
    let list = addresses.iter().map(|a| format!("\"{a}\"")).collect::<Vec<_>>().join(", ");
    format!(
        "apiVersion: networking.datumapis.com/v1alpha\nkind: EdgeReachability\nmetadata:\n  name: {name}\n  namespace: {namespace}\nspec:\n  addresses: [{list}]\n"
    )
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("free port")
}

/// A running webhook; killed when dropped.
pub struct Webhook {
    pub child: Child,
    pub port: u16,
    pub dir: tempfile::TempDir,
    pub ca: PathBuf,
}

pub struct Options {
    /// Records directory is created (with these files) before start; `None` leaves it missing.
    pub records: Option<Vec<(&'static str, String)>>,
    pub extra_args: Vec<String>,
    /// Use these (cert, key, ca) instead of --self-signed.
    pub tls: Option<(PathBuf, PathBuf, PathBuf)>,
    /// Set in the webhook's environment.
    pub env: Vec<(&'static str, String)>,
    /// Run this binary instead of this build's (scripts measure the release build).
    pub binary: Option<PathBuf>,
}

impl Default for Options {
    fn default() -> Self {
        Options { records: Some(Vec::new()), extra_args: Vec::new(), tls: None, env: Vec::new(), binary: None }
    }
}

impl Webhook {
    /// Start with a records directory holding these files.
    pub fn with_records(files: &[(&'static str, String)]) -> Webhook {
        Webhook::start(Options { records: Some(files.to_vec()), ..Options::default() })
    }

    pub fn start(options: Options) -> Webhook {
        let dir = tempfile::tempdir().expect("tempdir");
        if let Some(files) = &options.records {
            std::fs::create_dir_all(dir.path().join("records")).expect("records dir");
            for (name, text) in files {
                std::fs::write(dir.path().join("records").join(name), text).expect("record file");
            }
        }
        let port = free_port();
        let binary = options.binary.clone().unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_edgegate-webhook")));
        let mut cmd = Command::new(binary);
        cmd.arg("--listen").arg(format!("127.0.0.1:{port}"));
        cmd.arg("--records-dir").arg(dir.path().join("records"));
        let ca = match &options.tls {
            Some((cert, key, ca)) => {
                cmd.arg("--tls-cert").arg(cert).arg("--tls-key").arg(key);
                ca.clone()
            }
            None => {
                cmd.arg("--self-signed").arg(dir.path().join("tls"));
                dir.path().join("tls/ca.crt")
            }
        };
        cmd.args(&options.extra_args);
        cmd.env("RUST_LOG", "info,edgegate=debug,edgegate_webhook=debug");
        cmd.envs(options.env.iter().map(|(k, v)| (k, v)));
        cmd.stdout(Stdio::null())
            .stderr(Stdio::from(std::fs::File::create(dir.path().join("webhook.log")).expect("log file")));
        let child = cmd.spawn().expect("edgegate-webhook starts");
        let webhook = Webhook { child, port, dir, ca };
        webhook.wait_until(Duration::from_secs(20), || webhook.get("/healthz").0 == 200);
        webhook
    }

    pub fn records_dir(&self) -> PathBuf {
        self.dir.path().join("records")
    }

    pub fn url(&self, path: &str) -> String {
        format!("https://localhost:{}{path}", self.port)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("webhook.log")).unwrap_or_default()
    }

    /// `curl` with the CA; returns (HTTP status, body). Status 0 means curl could not connect.
    pub fn curl(&self, args: &[&str]) -> (u16, String) {
        let out = curl_output(&self.ca, args);
        parse_status(&out)
    }

    pub fn get(&self, path: &str) -> (u16, String) {
        self.curl(&[&self.url(path)])
    }

    /// POST a review body from a file.
    pub fn post_file(&self, path: &str, file: &Path) -> (u16, String) {
        let data = format!("@{}", file.display());
        self.curl(&["-H", "Content-Type: application/json", "--data-binary", &data, &self.url(path)])
    }

    /// POST a review given as JSON; returns (HTTP status, parsed body).
    pub fn post(&self, path: &str, review: &Value) -> (u16, Value) {
        let file = self.dir.path().join(format!("body-{}.json", std::process::id()));
        std::fs::write(&file, review.to_string()).expect("body file");
        let (status, body) = self.post_file(path, &file);
        (status, serde_json::from_str(&body).unwrap_or(Value::String(body)))
    }

    /// POST a review to /validate and return its `response`, asserting HTTP 200 and the uid.
    pub fn validate(&self, review: &Value) -> Value {
        self.answer("/validate", review)
    }

    pub fn answer(&self, path: &str, review: &Value) -> Value {
        let (status, body) = self.post(path, review);
        assert_eq!(status, 200, "HTTP status for a valid review; body {body}\nlog:\n{}", self.log());
        let response = body["response"].clone();
        assert_eq!(response["uid"], review["request"]["uid"], "response carries the request's uid");
        response
    }

    pub fn wait_until(&self, limit: Duration, mut ok: impl FnMut() -> bool) -> Duration {
        let start = Instant::now();
        while !ok() {
            assert!(start.elapsed() < limit, "condition not met within {limit:?}; log:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
        start.elapsed()
    }

    pub fn write_record_file(&self, name: &str, text: &str) {
        // Write then rename, as a careful operator (or a ConfigMap mount) would.
        let tmp = self.records_dir().join(format!(".{name}.tmp"));
        std::fs::write(&tmp, text).expect("write");
        std::fs::rename(&tmp, self.records_dir().join(name)).expect("rename");
    }

    pub fn sigterm(&self) {
        self.signal("TERM");
    }

    /// Send the webhook a signal by name: `TERM`, `STOP`, `CONT`.
    pub fn signal(&self, name: &str) {
        let status =
            Command::new("kill").arg(format!("-{name}")).arg(self.child.id().to_string()).status().expect("kill");
        assert!(status.success(), "kill -{name}");
    }
}

impl Drop for Webhook {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn curl_output(ca: &Path, args: &[&str]) -> Output {
    Command::new("curl")
        .args(["-sS", "--max-time", "10", "--cacert"])
        .arg(ca)
        .args(["-w", "\n%{http_code}"])
        .args(args)
        .output()
        .expect("curl runs")
}

fn parse_status(out: &Output) -> (u16, String) {
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (code.trim().parse().unwrap_or(0), body.to_owned())
}

/// Asserts on an AdmissionResponse.
pub fn assert_allowed(response: &Value) {
    assert_eq!(response["allowed"], true, "expected allowed: {response}");
}

pub fn assert_denied(response: &Value, code: u64) -> String {
    assert_eq!(response["allowed"], false, "expected denied: {response}");
    assert_eq!(response["status"]["code"], code, "status code: {response}");
    response["status"]["message"].as_str().unwrap_or_default().to_owned()
}
