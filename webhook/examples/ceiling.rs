//! The webhook as shipped, plus two routes that measure the server around the review path, for
//! scripts/load.sh and scripts/cpu-split.sh (not in the shipped binary):
//!
//! - `POST /ceiling`: a fixed allow, the body read but not parsed: TLS, HTTP and reading the body,
//!   the most any handler can reach;
//! - `POST /ceiling/tokenised`: the same after running the body through the JSON tokeniser,
//!   building nothing: the least any review of it can cost.
//!
//! Takes the webhook's own flags.
#![forbid(unsafe_code)]

use axum::Router;
use axum::body::Bytes;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use clap::Parser;
use edgegate_webhook::{args, run};

const ALLOW: &str = r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"ceiling","allowed":true,"status":{}}}"#;

async fn ceiling(_body: Bytes) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], ALLOW).into_response()
}

async fn tokenised(body: Bytes) -> Response {
    match serde_json::from_slice::<serde::de::IgnoredAny>(&body) {
        Ok(_) => ceiling(body).await,
        Err(e) => (StatusCode::BAD_REQUEST, format!("body is not JSON: {e}")).into_response(),
    }
}

fn main() -> std::process::ExitCode {
    let args = args::Args::parse();
    let extra = Router::new().route("/ceiling", post(ceiling)).route("/ceiling/tokenised", post(tokenised));
    edgegate::runtime::process::main("ceiling", args.log_format, run::serve(args, extra))
}
