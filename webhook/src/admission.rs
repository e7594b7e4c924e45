//! From an AdmissionReview's bytes to the AdmissionReview answered: decode, hand the slice to the
//! core's decision, encode. Nothing here decides; it only translates.

use std::sync::Arc;
use std::time::Instant;

use edgegate::core::decision::{Decision, decide, decide_update};
use edgegate::core::trim::{Trim, trim};
use edgegate::{CopySelector, RecordSource, RecordState, Slice};
use kube::core::DynamicObject;
use kube::core::Status;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};

use crate::args::Mode;
use crate::metrics::Metrics;

const REVIEW_API_VERSION: &str = "admission.k8s.io/v1";

/// Which endpoint a review came in on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    Validate,
    /// Opt-in trim mode: unnamed endpoints are patched away instead of the copy being refused.
    Mutate,
}

/// A body that is no AdmissionReview this server can answer: HTTP 400.
#[derive(Debug, thiserror::Error)]
pub enum BadReview {
    #[error("body is not an AdmissionReview: {0}")]
    Decode(#[from] serde_json::Error),
    #[error("AdmissionReview apiVersion {0:?} is not supported; send {REVIEW_API_VERSION}")]
    Version(String),
    #[error("AdmissionReview has kind {0:?}; expected AdmissionReview")]
    Kind(String),
    #[error("AdmissionReview has no request")]
    NoRequest,
    #[error("AdmissionReview request has no uid")]
    NoUid,
}

/// Everything a review needs, shared by all connections.
pub struct Admission {
    pub source: Arc<dyn RecordSource>,
    pub selector: CopySelector,
    pub mode: Mode,
    pub metrics: Arc<Metrics>,
}

impl edgegate::runtime::admin::Probes for Admission {
    fn ready(&self) -> Result<(), String> {
        if self.source.synced() { Ok(()) } else { Err("record source not synced".into()) }
    }

    fn metrics(&self) -> String {
        self.metrics.encode(&self.source)
    }
}

impl Admission {
    /// Answer one review. `Err` only for bodies that are no AdmissionReview (HTTP 400); every
    /// review that can be answered, however odd, gets an AdmissionReview back.
    pub fn review(&self, body: &[u8], endpoint: Endpoint) -> Result<AdmissionReview<DynamicObject>, BadReview> {
        let started = Instant::now();
        let (response, operation, dry_run, label) = match decode(body)? {
            Decoded::Slice(request) => {
                let (response, label) = self.judge(&request, endpoint);
                (response, request.operation, request.dry_run, label)
            }
            Decoded::Answered { response, operation, dry_run, label } => (response, operation, dry_run, label),
        };
        self.metrics.review(operation_label(&operation), label, dry_run, started.elapsed());
        Ok(response.into_review())
    }

    fn judge(&self, request: &AdmissionRequest<Slice>, endpoint: Endpoint) -> (AdmissionResponse, &'static str) {
        let allow = AdmissionResponse::from(request);
        if !matches!(request.operation, Operation::Create | Operation::Update) {
            // DELETE and CONNECT: withdrawing is the safe direction, the record only gates carrying.
            return (allow, "allow");
        }
        let Some(slice) = request.object.as_ref() else {
            return (invalid(request, "CREATE/UPDATE review without an object".into()), "invalid");
        };
        let namespace = slice.metadata.namespace.as_deref().or(request.namespace.as_deref()).unwrap_or_default();
        let name = slice.metadata.name.as_deref().unwrap_or(&request.name);
        let state = self.source.lookup(namespace);
        let decision = match (&request.operation, &request.old_object) {
            (Operation::Update, Some(old)) => decide_update(&state, old, slice, &self.selector),
            _ => decide(&state, slice, &self.selector),
        };
        tracing::debug!(namespace, name, operation = operation_label(&request.operation), dry_run = request.dry_run, decision = ?decision, "reviewed");
        let label = decision.label();
        let response = match (&decision, endpoint, &state) {
            (Decision::Allow(edgegate::Allowed::Named(_)), Endpoint::Mutate, RecordState::Present(record)) => {
                self.trimmed(allow, record, slice, namespace, name)
            }
            (Decision::Allow(_), _, _) => allow,
            (Decision::Deny(denial), _, _) => {
                let message = denial.message();
                tracing::info!(namespace, name, addresses = ?denial.addresses, dry_run = request.dry_run, mode = ?self.mode, "copy not carried: no address named by the record");
                self.refuse(allow, message, 403, "Forbidden")
            }
            (Decision::Unavailable(reason), _, _) => {
                let message =
                    format!("edgegate cannot judge EndpointSlice {namespace}/{name} now ({reason}); retry shortly");
                tracing::warn!(namespace, name, %reason, "record unavailable; refusing to judge");
                self.refuse(allow, message, 503, "ServiceUnavailable")
            }
        };
        (response, label)
    }

    fn trimmed(
        &self,
        allow: AdmissionResponse,
        record: &edgegate::Record,
        slice: &Slice,
        namespace: &str,
        name: &str,
    ) -> AdmissionResponse {
        match trim(record, slice) {
            Trim::Unchanged | Trim::Empty => allow,
            Trim::Patch { removed, .. } if self.mode == Mode::Warn => {
                warn(allow, format!("edgegate would trim {removed} unnamed endpoint(s) from {namespace}/{name}"))
            }
            Trim::Patch { removed, patch } => {
                tracing::info!(namespace, name, removed, "trimming endpoints the record does not name");
                allow.clone().with_patch(patch).unwrap_or_else(|e| {
                    tracing::warn!(error = %e, "patch did not serialise; admitting untrimmed");
                    allow
                })
            }
        }
    }

    /// Deny, or in warn mode admit with the message as a warning.
    fn refuse(&self, allow: AdmissionResponse, message: String, code: u16, reason: &str) -> AdmissionResponse {
        match self.mode {
            Mode::Warn => warn(allow, message),
            Mode::Deny => denied(allow, message, code, reason),
        }
    }
}

fn warn(mut response: AdmissionResponse, message: String) -> AdmissionResponse {
    response.warnings.get_or_insert_with(Vec::new).push(message);
    response
}

/// The request is an AdmissionReview, but its object cannot be judged: refused with 400.
fn invalid<T: kube::Resource>(request: &AdmissionRequest<T>, message: String) -> AdmissionResponse {
    denied(AdmissionResponse::from(request), message, 400, "BadRequest")
}

/// `response` refused with `message` and this HTTP-style status code and reason.
fn denied(response: AdmissionResponse, message: String, code: u16, reason: &str) -> AdmissionResponse {
    let mut denied = response.deny(message);
    denied.result = Status { code, reason: reason.to_owned(), ..denied.result };
    denied
}

/// A decoded review: an EndpointSlice request to judge, or one answered without judging.
#[allow(clippy::large_enum_variant)] // one per request, moved once: boxing would only add an allocation
enum Decoded {
    Slice(AdmissionRequest<Slice>),
    Answered { response: AdmissionResponse, operation: Operation, dry_run: bool, label: &'static str },
}

/// kube's [`AdmissionReview`] with its `TypeMeta` spelled out. kube's type flattens it, and a
/// flattened field makes serde buffer the whole body into an intermediate tree before decoding:
/// five times the cost of decoding the review itself. Responses still go out as kube's type.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Envelope<T: kube::Resource> {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    request: Option<AdmissionRequest<T>>,
}

impl<T: kube::Resource> Envelope<T> {
    /// The request, once the envelope is one this server answers.
    fn into_request(self) -> Result<AdmissionRequest<T>, BadReview> {
        if self.api_version != REVIEW_API_VERSION {
            return Err(BadReview::Version(self.api_version));
        }
        if self.kind != "AdmissionReview" {
            return Err(BadReview::Kind(self.kind));
        }
        let mut request = self.request.ok_or(BadReview::NoRequest)?;
        if request.uid.is_empty() {
            return Err(BadReview::NoUid);
        }
        request.types = kube::core::TypeMeta { api_version: self.api_version, kind: self.kind };
        Ok(request)
    }
}

/// Decode a review. An EndpointSlice review decodes directly (the fast path); anything else is
/// decoded loosely to tell a review of another kind (admitted with a warning) from a bad body.
fn decode(body: &[u8]) -> Result<Decoded, BadReview> {
    if let Ok(envelope) = serde_json::from_slice::<Envelope<Slice>>(body) {
        let request = envelope.into_request()?;
        if is_endpoint_slice(&request.kind) {
            return Ok(Decoded::Slice(request));
        }
    }
    let request = serde_json::from_slice::<Envelope<DynamicObject>>(body)?.into_request()?;
    let (response, label) = if is_endpoint_slice(&request.kind) {
        let why = match &request.object {
            None => "no object".to_owned(),
            Some(object) => serde_json::to_value(object)
                .and_then(serde_json::from_value::<Slice>)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default(),
        };
        (invalid(&request, format!("object is not a valid discovery.k8s.io/v1 EndpointSlice: {why}")), "invalid")
    } else {
        let k = &request.kind;
        let group_version = if k.group.is_empty() { k.version.clone() } else { format!("{}/{}", k.group, k.version) };
        let message = format!(
            "edgegate judges only discovery.k8s.io/v1 EndpointSlices; {group_version} {} passed unjudged",
            k.kind
        );
        (warn(AdmissionResponse::from(&request), message), "allow")
    };
    Ok(Decoded::Answered { response, operation: request.operation, dry_run: request.dry_run, label })
}

fn is_endpoint_slice(kind: &kube::core::GroupVersionKind) -> bool {
    kind.group == "discovery.k8s.io" && kind.kind == "EndpointSlice"
}

fn operation_label(operation: &Operation) -> &'static str {
    match operation {
        Operation::Create => "CREATE",
        Operation::Update => "UPDATE",
        Operation::Delete => "DELETE",
        Operation::Connect => "CONNECT",
    }
}

/// Fuzz entry: any bytes to /validate and /mutate under an empty record for every namespace. Must
/// not panic; every answer must encode.
#[doc(hidden)]
pub fn fuzz_review(data: &[u8]) {
    use std::sync::{Arc, OnceLock};
    static ADMISSION: OnceLock<Admission> = OnceLock::new();
    let admission = ADMISSION.get_or_init(|| {
        let store = Arc::new(edgegate::RecordStore::new("default"));
        store.replace_all(Default::default(), 0);
        store.upsert("ns-3f6c1a52-9e0b-4c1d-8a77-0b5e2d9c4f10", edgegate::Record::from_entries(["fd20:0:2::1:0:1"]));
        Admission {
            source: store,
            selector: CopySelector::default(),
            mode: Mode::Deny,
            metrics: Arc::new(Metrics::new()),
        }
    });
    for endpoint in [Endpoint::Validate, Endpoint::Mutate] {
        if let Ok(review) = admission.review(data, endpoint) {
            assert!(serde_json::to_vec(&review).is_ok());
        }
    }
}
