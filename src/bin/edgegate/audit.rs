//! `edgegate audit`: the records and copies, listed once from the hub or read from files, through
//! the core's audit (the pruner's own plan).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use edgegate::core::audit::{AuditedRecord, Report, audit};
use edgegate::core::decision::is_copy;
use edgegate::core::propagation::{Policy, PolicyRef, propagation};
use edgegate::{CopySelector, EdgeReachability, Slice};

#[derive(clap::Args)]
pub struct AuditArgs {
    /// The hub's kubeconfig (live audit). Without it and without --records: in-cluster, then
    /// ~/.kube/config.
    #[arg(long, conflicts_with_all = ["records", "slices"])]
    kubeconfig: Option<PathBuf>,
    /// Kubeconfig context, for a live audit.
    #[arg(long)]
    context: Option<String>,
    /// Only this namespace (live audit).
    #[arg(long, short = 'n')]
    namespace: Option<String>,
    /// Records from a file or a directory of YAML/JSON files (offline audit; `kubectl get -o yaml`
    /// lists accepted).
    #[arg(long, requires = "slices")]
    records: Option<PathBuf>,
    /// EndpointSlices from a file or a directory of YAML/JSON files (offline audit).
    #[arg(long, requires = "records")]
    slices: Option<PathBuf>,
    /// Karmada (Cluster)PropagationPolicies from a file or a directory of YAML/JSON files
    /// (offline audit).
    #[arg(long, requires = "records")]
    policies: Option<PathBuf>,
    /// The Karmada policy that should send every copy to every edge:
    /// `ClusterPropagationPolicy/NAME` or `PropagationPolicy/NAMESPACE/NAME`. Any other policy
    /// that holds or would take a copy is a problem (exit 1). Without it, copies split between
    /// policies are.
    #[arg(long, env = "EDGEGATE_FLEET_POLICY")]
    fleet_policy: Option<PolicyRef>,
    /// Label selector that identifies copies.
    #[arg(long, env = "EDGEGATE_COPY_SELECTOR", default_value = edgegate::core::selector::DEFAULT_COPY_SELECTOR)]
    copy_selector: CopySelector,
    /// Only records with this name count.
    #[arg(long, env = "EDGEGATE_RECORD_NAME", default_value = edgegate::index::store::DEFAULT_RECORD_NAME)]
    record_name: String,
    /// text, or json (field names documented in docs/rolling-out.md).
    #[arg(long, short = 'o', value_enum, default_value_t = Output::Text)]
    output: Output,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Output {
    Text,
    Json,
}

pub fn run(args: &AuditArgs) -> ExitCode {
    let report = match (&args.records, &args.slices) {
        (Some(records), Some(slices)) => offline(records, slices, args),
        _ => live(args),
    };
    let report = match report {
        Ok(report) => report,
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::from(2);
        }
    };
    match args.output {
        Output::Text => print!("{}", report.text()),
        Output::Json => match serde_json::to_string_pretty(&report) {
            Ok(json) => println!("{json}"),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
        },
    }
    let misplaced = report.propagation.as_ref().is_some_and(|p| !p.findings.is_empty());
    if report.summary.would_delete > 0 || misplaced { ExitCode::from(1) } else { ExitCode::SUCCESS }
}

/// The audit of `records` and `copies`, with which policies take the copies when `policies` were
/// read (a Karmada hub, or `--policies`).
fn report(records: &[EdgeReachability], copies: &[Slice], policies: Option<Vec<Policy>>, args: &AuditArgs) -> Report {
    let mut report = audit(&by_namespace(records, &args.record_name), copies, &args.copy_selector);
    report.propagation = policies.map(|policies| {
        let copies: Vec<&Slice> = copies.iter().filter(|c| is_copy(c, &args.copy_selector)).collect();
        propagation(&policies, &copies, args.fleet_policy.as_ref())
    });
    report
}

/// Policies from their API objects, skipping those being deleted.
fn policies_of(objects: impl IntoIterator<Item = serde_json::Value>) -> anyhow::Result<Vec<Policy>> {
    let mut policies = Vec::new();
    for object in objects {
        policies.extend(Policy::from_object(object)?);
    }
    Ok(policies)
}

/// The namespaces' records (those named `record_name`), normalised and as written.
fn by_namespace(resources: &[EdgeReachability], record_name: &str) -> BTreeMap<String, AuditedRecord> {
    let audited = |r: &EdgeReachability| AuditedRecord {
        name: record_name.to_owned(),
        record: Arc::new(edgegate::index::source::record_of(r)),
        entries: r.entries().to_vec(),
    };
    resources
        .iter()
        .filter(|r| r.metadata.name.as_deref() == Some(record_name))
        .map(|r| (r.metadata.namespace.clone().unwrap_or_default(), audited(r)))
        .collect()
}

fn live(args: &AuditArgs) -> anyhow::Result<Report> {
    use kube::Api;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client =
            edgegate::runtime::client::kube_client(args.kubeconfig.as_deref(), args.context.as_deref()).await?;
        let (records, copies): (Api<EdgeReachability>, Api<Slice>) = match &args.namespace {
            Some(ns) => (Api::namespaced(client.clone(), ns), Api::namespaced(client.clone(), ns)),
            None => (Api::all(client.clone()), Api::all(client.clone())),
        };
        let records = records.list(&Default::default()).await.context("listing EdgeReachability records")?.items;
        let copies = copies
            .list(&kube::api::ListParams::default().labels(args.copy_selector.as_str()))
            .await
            .context("listing copies")?
            .items;
        let policies = karmada_policies(&client, args).await?;
        Ok(report(&records, &copies, policies, args))
    })
}

/// The hub's (Cluster)PropagationPolicies; `None` where `policy.karmada.io` is not served (not a
/// Karmada hub), an error there if `--fleet-policy` was given.
async fn karmada_policies(client: &kube::Client, args: &AuditArgs) -> anyhow::Result<Option<Vec<Policy>>> {
    use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
    let mut objects = Vec::new();
    for (kind, plural, namespaced) in [
        ("PropagationPolicy", "propagationpolicies", true),
        ("ClusterPropagationPolicy", "clusterpropagationpolicies", false),
    ] {
        let gvk = GroupVersionKind::gvk("policy.karmada.io", "v1alpha1", kind);
        let resource = ApiResource::from_gvk_with_plural(&gvk, plural);
        let api: Api<DynamicObject> = match (&args.namespace, namespaced) {
            (Some(ns), true) => Api::namespaced_with(client.clone(), ns, &resource),
            _ => Api::all_with(client.clone(), &resource),
        };
        match api.list(&ListParams::default()).await {
            Ok(list) => objects.extend(list.items.into_iter().map(|mut o| {
                o.types = Some(kube::api::TypeMeta { api_version: resource.api_version.clone(), kind: kind.into() });
                serde_json::to_value(o).unwrap_or_default()
            })),
            // Not served (404: not a Karmada hub), or not readable by this user (403, which a
            // plain hub also answers to a non-admin): the check is skipped, unless a fleet-wide
            // policy was named.
            Err(kube::Error::Api(e)) if e.code == 404 && args.fleet_policy.is_none() => return Ok(None),
            Err(kube::Error::Api(e)) if e.code == 403 && args.fleet_policy.is_none() => {
                eprintln!("note: {kind}s not readable here ({}); the propagation check is skipped", e.message);
                return Ok(None);
            }
            Err(e) => return Err(e).with_context(|| format!("listing {plural}.policy.karmada.io")),
        }
    }
    Ok(Some(policies_of(objects)?))
}

fn offline(records: &Path, slices: &Path, args: &AuditArgs) -> anyhow::Result<Report> {
    let mut resources = Vec::new();
    for file in files(records)? {
        let text = std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
        resources.extend(edgegate::index::source::files::parse_file(&file, &text)?);
    }
    let mut copies = Vec::new();
    for file in files(slices)? {
        let text = std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
        copies.extend(
            documents(&file, &text)?
                .into_iter()
                .map(|(kind, item)| {
                    serde_json::from_value(item).with_context(|| {
                        format!("{}: a document of kind {kind:?} is not an EndpointSlice", file.display())
                    })
                })
                .collect::<anyhow::Result<Vec<Slice>>>()?,
        );
    }
    anyhow::ensure!(
        args.fleet_policy.is_none() || args.policies.is_some(),
        "--fleet-policy needs --policies offline (the (Cluster)PropagationPolicies to check)"
    );
    let policies = match &args.policies {
        Some(path) => {
            let mut objects = Vec::new();
            for file in files(path)? {
                let text = std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
                objects.extend(documents(&file, &text)?.into_iter().map(|(_, item)| item));
            }
            Some(policies_of(objects).with_context(|| format!("reading policies from {}", path.display()))?)
        }
        None => None,
    };
    Ok(report(&resources, &copies, policies, args))
}

/// `path` itself, or the YAML and JSON files in it.
fn files(path: &Path) -> anyhow::Result<Vec<PathBuf>> {
    if !path.is_dir() {
        anyhow::ensure!(path.exists(), "{} does not exist", path.display());
        return Ok(vec![path.to_owned()]);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(path)
        .with_context(|| format!("reading {}", path.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml" || e == "json"))
        .collect();
    files.sort();
    Ok(files)
}

/// The objects of one file, each with the kind of the document it came in: documents, each an
/// object or a List of them.
fn documents(path: &Path, text: &str) -> anyhow::Result<Vec<(String, serde_json::Value)>> {
    let docs: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(text).with_context(|| format!("{} is not YAML or JSON", path.display()))?;
    let mut objects = Vec::new();
    for doc in docs {
        let kind = doc["kind"].as_str().unwrap_or_default().to_owned();
        let items =
            if kind.ends_with("List") { doc["items"].as_array().cloned().unwrap_or_default() } else { vec![doc] };
        objects.extend(items.into_iter().map(|item| (kind.clone(), item)));
    }
    Ok(objects)
}
