//! `--ca-bundle-for NAME`: keep the caBundle of the ValidatingWebhookConfiguration NAME (and of the
//! MutatingWebhookConfiguration NAME, when there is one) equal to the CA of the certificate this
//! webhook serves. For API servers no CA injector watches (a Karmada hub's karmada-apiserver:
//! cert-manager's injector only watches the cluster it runs in), and for CA rotations, which an
//! injector that copies the issuing CA alone cannot make without refusing admissions.
//!
//! A rotation must never break admissions, so the bundle changes in two steps around the swap:
//! first the new CA is *added* and given time to reach the API server (`--ca-bundle-settle`), then
//! the server starts presenting the new leaf, and only `--ca-bundle-keep-old` later (time for the
//! other replicas to pick the new certificate up too) is the bundle narrowed to the new CA.

use std::time::Duration;

use anyhow::Context;
use k8s_openapi::ByteString;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

/// One certificate of a bundle: its PEM block as it will be written, and its DER, by which it
/// compares (two spellings of one certificate are one certificate).
#[derive(Clone, Debug)]
pub struct BundleCert {
    pem: String,
    der: CertificateDer<'static>,
}

impl PartialEq for BundleCert {
    fn eq(&self, other: &Self) -> bool {
        self.der == other.der
    }
}

impl BundleCert {
    pub fn der(&self) -> &[u8] {
        &self.der
    }
}

/// The certificates in a PEM bundle, in order; blocks that do not decode are left out.
pub fn pem_blocks(pem: &[u8]) -> Vec<BundleCert> {
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    const END: &str = "-----END CERTIFICATE-----";
    let text = String::from_utf8_lossy(pem);
    let mut blocks = Vec::new();
    let mut rest = text.as_ref();
    while let Some(start) = rest.find(BEGIN) {
        let Some(end) = rest[start..].find(END) else { break };
        let end = start + end + END.len();
        let block: String =
            rest[start..end].lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join("\n") + "\n";
        if let Ok(der) = CertificateDer::from_pem_slice(block.as_bytes()) {
            blocks.push(BundleCert { pem: block, der });
        }
        rest = &rest[end..];
    }
    blocks
}

/// The bundle as written.
fn pem_text(blocks: &[BundleCert]) -> Vec<u8> {
    blocks.iter().map(|b| b.pem.as_str()).collect::<String>().into_bytes()
}

/// When a certificate became valid, in seconds since the epoch.
fn not_before(cert: &BundleCert) -> Option<i64> {
    x509_parser::parse_x509_certificate(cert.der()).ok().map(|(_, c)| c.validity().not_before.timestamp())
}

/// `ours`, and every CA in `current` newer than all of ours: a newer CA is another replica's
/// rotation in progress (it added it before serving a leaf from it, and narrows the bundle
/// itself once its own keep-old has passed), which a replica still on the old CA must not undo.
pub fn narrowed(current: &[BundleCert], ours: &[BundleCert]) -> Vec<BundleCert> {
    let newest = ours.iter().filter_map(not_before).max();
    let mut bundle = ours.to_vec();
    for cert in current {
        let newer = newest.is_some_and(|n| not_before(cert).is_some_and(|b| b > n));
        if newer && !bundle.contains(cert) {
            bundle.push(cert.clone());
        }
    }
    bundle
}

fn is_forbidden(error: &anyhow::Error) -> bool {
    error.chain().any(|e| matches!(e.downcast_ref::<kube::Error>(), Some(kube::Error::Api(s)) if s.code == 403))
}

/// Keeps the caBundles of edgegate's webhook configurations in step with the served certificate's CA.
#[derive(Clone)]
pub struct CaBundleKeeper {
    /// The validating configuration (which must exist), then the mutating one (kept if it exists:
    /// only hubs that trim copies have it).
    configs: [(Api<DynamicObject>, &'static str); 2],
    name: String,
    pub settle: Duration,
    pub keep_old: Duration,
}

/// How often the caBundles are read again (two GETs each time).
pub const KEEP_EVERY: Duration = Duration::from_secs(5);

fn webhook_configurations(client: &kube::Client, kind: &'static str) -> (Api<DynamicObject>, &'static str) {
    let gvk = GroupVersionKind::gvk("admissionregistration.k8s.io", "v1", kind);
    let plural = format!("{}s", kind.to_lowercase());
    (Api::all_with(client.clone(), &ApiResource::from_gvk_with_plural(&gvk, &plural)), kind)
}

impl CaBundleKeeper {
    pub fn new(client: kube::Client, name: String, settle: Duration, keep_old: Duration) -> Self {
        let configs = [
            webhook_configurations(&client, "ValidatingWebhookConfiguration"),
            webhook_configurations(&client, "MutatingWebhookConfiguration"),
        ];
        CaBundleKeeper { configs, name, settle, keep_old }
    }

    /// Make every webhook's bundle hold `ca` (adding it to what is there). True if anything changed.
    pub async fn include(&self, ca: &[u8]) -> anyhow::Result<bool> {
        self.include_saying(ca, true).await
    }

    /// [`include`](Self::include), saying a missing configuration only if `say_missing` (the
    /// steady re-check must not say it every few seconds while a hub has none).
    async fn include_saying(&self, ca: &[u8], say_missing: bool) -> anyhow::Result<bool> {
        let wanted = pem_blocks(ca);
        anyhow::ensure!(!wanted.is_empty(), "the CA file holds no certificate");
        self.rewrite(say_missing, |current| {
            let mut blocks = pem_blocks(current);
            for block in &wanted {
                if !blocks.contains(block) {
                    blocks.push(block.clone());
                }
            }
            blocks
        })
        .await
    }

    /// Narrow every webhook's bundle to `ca` (see [`narrowed`]). True if anything changed.
    pub async fn only(&self, ca: &[u8]) -> anyhow::Result<bool> {
        let wanted = pem_blocks(ca);
        anyhow::ensure!(!wanted.is_empty(), "the CA file holds no certificate");
        self.rewrite(true, |current| narrowed(&pem_blocks(current), &wanted)).await
    }

    /// Rewrite both configurations' bundles; true if either changed. One that does not exist is
    /// skipped (components/policy has no validating configuration, only components/trim a
    /// mutating one), and so is a mutating one this identity may not read (a hub whose role
    /// predates it): neither must keep a renewed certificate from being served.
    async fn rewrite(&self, say_missing: bool, bundle: impl Fn(&[u8]) -> Vec<BundleCert>) -> anyhow::Result<bool> {
        let [(validating, validating_kind), (mutating, mutating_kind)] = &self.configs;
        let validating = self.rewrite_one(validating, validating_kind, &bundle).await?;
        if validating.is_none() && say_missing {
            tracing::warn!(name = self.name, "no {validating_kind} of this name; its caBundle is not kept");
        }
        let mutating = match self.rewrite_one(mutating, mutating_kind, &bundle).await {
            Err(error) if is_forbidden(&error) => {
                if say_missing {
                    tracing::warn!(name = self.name, "may not read the {mutating_kind}; its caBundle is not kept");
                }
                None
            }
            other => other?,
        };
        Ok(validating.unwrap_or(false) | mutating.unwrap_or(false))
    }

    /// Read one configuration, compute each webhook's new bundle, and patch what differs, guarded
    /// by the resourceVersion read (a concurrent writer makes the patch fail; the caller retries).
    /// None if the configuration does not exist.
    async fn rewrite_one(
        &self,
        api: &Api<DynamicObject>,
        kind: &str,
        bundle: &impl Fn(&[u8]) -> Vec<BundleCert>,
    ) -> anyhow::Result<Option<bool>> {
        let Some(config) = api.get_opt(&self.name).await.with_context(|| format!("reading {kind} {}", self.name))?
        else {
            return Ok(None);
        };
        let mut ops = vec![serde_json::json!({
            "op": "test", "path": "/metadata/resourceVersion", "value": config.metadata.resource_version,
        })];
        let webhooks = config.data.get("webhooks").and_then(|w| w.as_array()).cloned().unwrap_or_default();
        for (i, webhook) in webhooks.iter().enumerate() {
            let current: Option<ByteString> =
                serde_json::from_value(webhook["clientConfig"]["caBundle"].clone()).unwrap_or_default();
            let current = current.map(|b| b.0).unwrap_or_default();
            let next = bundle(&current);
            if pem_blocks(&current) != next {
                ops.push(serde_json::json!({
                    "op": "add", "path": format!("/webhooks/{i}/clientConfig/caBundle"), "value": ByteString(pem_text(&next)),
                }));
            }
        }
        if ops.len() == 1 {
            return Ok(Some(false));
        }
        let patch: json_patch::Patch = serde_json::from_value(serde_json::Value::Array(ops))?;
        api.patch(&self.name, &PatchParams::default(), &Patch::<()>::Json(patch))
            .await
            .with_context(|| format!("patching the caBundle of {kind} {}", self.name))?;
        Ok(Some(true))
    }

    /// Every [`KEEP_EVERY`], for as long as the process runs: a configuration created or replaced
    /// without the CA in `ca_file` (emergency off and the kustomization applied again, a Karmada
    /// host applied before its hub, someone's edit) gets it within seconds, instead of at the
    /// next rotation or `keep_old` after start. The CA is read each time: during a rotation the
    /// new one is added early, which is what a rotation's first step does anyway; nothing is
    /// ever removed here.
    pub async fn keep_including(self, ca_file: std::path::PathBuf) {
        loop {
            tokio::time::sleep(KEEP_EVERY).await;
            let Ok(ca) = std::fs::read(&ca_file) else { continue };
            match self.include_saying(&ca, false).await {
                Ok(true) => tracing::info!(name = self.name, "a webhook configuration lacked the served CA; added"),
                Ok(false) => {}
                Err(error) => {
                    tracing::debug!(error = format!("{error:#}"), "re-checking the caBundle failed; next time")
                }
            }
        }
    }

    /// Retry `include` until it succeeds (the hub may be briefly unreachable).
    pub async fn include_until_done(&self, ca: &[u8]) -> bool {
        let mut backoff = Duration::from_millis(200);
        loop {
            match self.include(ca).await {
                Ok(changed) => return changed,
                Err(error) => {
                    tracing::warn!(
                        error = format!("{error:#}"),
                        "could not add the CA to the webhook configuration; retrying"
                    );
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(10));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A self-signed CA valid from 1 January of `year`.
    fn ca(year: i32) -> BundleCert {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.not_before = rcgen::date_time_ymd(year, 1, 1);
        let key = rcgen::KeyPair::generate().expect("key");
        let pem = params.self_signed(&key).expect("ca").pem();
        pem_blocks(pem.as_bytes()).remove(0)
    }

    #[test]
    fn narrowing_keeps_a_newer_ca_another_replica_rotates_to() {
        let (stale, old, new) = (ca(2020), ca(2024), ca(2026));
        // The replica on the new CA, after its keep-old: the old and the stale go.
        let all = [stale, old.clone(), new.clone()];
        assert_eq!(narrowed(&all, std::slice::from_ref(&new)), std::slice::from_ref(&new));
        // A replica still on the old CA (its kubelet late) keeps the new one another replica serves.
        assert_eq!(narrowed(&all, std::slice::from_ref(&old)), [old, new]);
    }

    #[test]
    fn certificates_compare_as_der() {
        let a = "-----BEGIN CERTIFICATE-----\nAAAA\nBBBB\n-----END CERTIFICATE-----\n";
        // The same bytes, base64 wrapped at another width, indented, with CRLF line ends.
        let b = "  -----BEGIN CERTIFICATE-----\r\nAAAABB\r\nBB\r\n-----END CERTIFICATE-----";
        assert_eq!(pem_blocks(a.as_bytes()), pem_blocks(b.as_bytes()));
        assert_eq!(pem_blocks(a.as_bytes())[0].der(), [0, 0, 0, 4, 16, 65]);
        let both = format!("{a}{}", a.replace("AAAA", "CCCC"));
        assert_eq!(pem_blocks(both.as_bytes()).len(), 2);
        assert_ne!(pem_blocks(both.as_bytes())[0], pem_blocks(both.as_bytes())[1]);
        assert!(pem_blocks(b"garbage").is_empty());
        assert_eq!(pem_text(&pem_blocks(a.as_bytes())), a.as_bytes());
    }
}
