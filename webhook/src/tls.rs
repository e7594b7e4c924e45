//! Serving credentials: loaded from PEM files and re-read when they change (cert-manager renews
//! them in place), or a dev CA and leaf made on first start.
//!
//! The certificate is chosen per TLS handshake from an atomically swapped [`CertifiedKey`], so a
//! connection keeps the certificate it shook hands with and every new one gets the newest.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result};
use arc_swap::ArcSwap;
use rustls::client::danger::ServerCertVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

use edgegate::index::fs_watch::FileStamp;

use crate::ca_bundle::CaBundleKeeper;
use crate::metrics::Metrics;

/// Hands out whichever certificate was loaded last.
#[derive(Debug)]
pub struct CertResolver {
    current: ArcSwap<CertifiedKey>,
}

impl ResolvesServerCert for CertResolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current.load_full())
    }
}

/// A certificate and key read from PEM files, checked to belong together.
/// Set the expiry gauge from the leaf's notAfter.
fn record_expiry(certified: &CertifiedKey, metrics: &Metrics) {
    let Some(leaf) = certified.cert.first() else { return };
    match x509_parser::parse_x509_certificate(leaf.as_ref()) {
        Ok((_, cert)) => metrics.certificate_expiry(cert.validity().not_after.timestamp()),
        Err(error) => tracing::warn!(%error, "cannot read the serving certificate's expiry"),
    }
}

pub fn load_certified_key(cert_path: &Path, key_path: &Path) -> Result<CertifiedKey> {
    let certs = read_certs(cert_path)?;
    let key_pem = std::fs::read(key_path).with_context(|| format!("reading {}", key_path.display()))?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => anyhow::anyhow!("{} holds no private key", key_path.display()),
        e => anyhow::anyhow!("parsing {}: {e}", key_path.display()),
    })?;
    let signer = rustls::crypto::ring::sign::any_supported_type(&key)
        .with_context(|| format!("{} is not a supported key", key_path.display()))?;
    let certified = CertifiedKey::new(certs, signer);
    certified
        .keys_match()
        .with_context(|| format!("{} does not belong to {}", key_path.display(), cert_path.display()))?;
    Ok(certified)
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>> {
    let pem = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("parsing {}", path.display()))?;
    anyhow::ensure!(!certs.is_empty(), "{} holds no certificate", path.display());
    Ok(certs)
}

/// The TLS server configuration: TLS 1.2 and 1.3, HTTP/2 and HTTP/1.1 by ALPN.
pub fn server_config(resolver: Arc<CertResolver>) -> Result<rustls::ServerConfig> {
    let mut config =
        rustls::ServerConfig::builder_with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
            .with_no_client_auth()
            .with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// Watches a certificate/key pair on disk and swaps it into the resolver when both parse and
/// match. A half-written pair (the cert renewed, the key not yet) keeps the old one until whole.
pub struct CertReloader {
    cert: PathBuf,
    key: PathBuf,
    resolver: Arc<CertResolver>,
    stamp: Option<(Stamp, Stamp, Stamp)>,
    metrics: Arc<Metrics>,
    bundle: Option<BundleSync>,
}

/// With `--ca-bundle-for`: the CA file beside the certificate and the keeper of the bundle.
struct BundleSync {
    ca_file: PathBuf,
    keeper: CaBundleKeeper,
    /// Bumped by every rotation, so that a narrowing scheduled before it does not undo it.
    generation: Arc<std::sync::atomic::AtomicU64>,
    /// The CA of the leaf being served: a renewal under the same CA leaves the bundle alone.
    served_ca: Vec<crate::ca_bundle::BundleCert>,
}

impl BundleSync {
    /// After `keep_old`, narrow the bundle to `ca`, unless another rotation began meanwhile.
    fn narrow_later(&self, ca: Vec<u8>) {
        use std::sync::atomic::Ordering;
        let (keeper, generation) = (self.keeper.clone(), Arc::clone(&self.generation));
        let scheduled = generation.load(Ordering::SeqCst);
        tokio::spawn(async move {
            tokio::time::sleep(keeper.keep_old).await;
            if generation.load(Ordering::SeqCst) != scheduled {
                return;
            }
            match keeper.only(&ca).await {
                Ok(true) => tracing::info!("caBundle narrowed to the served certificate's CA"),
                Ok(false) => {}
                Err(error) => tracing::warn!(
                    error = format!("{error:#}"),
                    "could not narrow the caBundle; it keeps the old CA too"
                ),
            }
        });
    }
}

type Stamp = Option<FileStamp>;

impl CertReloader {
    /// Load the pair once (failing if it does not load) and return the reloader and its resolver.
    pub fn new(cert: PathBuf, key: PathBuf, metrics: Arc<Metrics>) -> Result<Self> {
        let stamp = Some((FileStamp::of(&cert), FileStamp::of(&key), None));
        let loaded = load_certified_key(&cert, &key)?;
        record_expiry(&loaded, &metrics);
        let resolver = Arc::new(CertResolver { current: ArcSwap::from_pointee(loaded) });
        Ok(CertReloader { cert, key, resolver, stamp, metrics, bundle: None })
    }

    /// Keep `keeper`'s caBundle holding the CA in `ca_file` (the CA of the served certificate):
    /// now, and around every rotation.
    pub fn with_ca_bundle(mut self, ca_file: PathBuf, keeper: CaBundleKeeper) -> Result<Self> {
        let ca = std::fs::read(&ca_file).with_context(|| format!("reading {}", ca_file.display()))?;
        anyhow::ensure!(!crate::ca_bundle::pem_blocks(&ca).is_empty(), "{} holds no certificate", ca_file.display());
        if let Some(stamp) = self.stamp.as_mut() {
            stamp.2 = FileStamp::of(&ca_file);
        }
        let served_ca = crate::ca_bundle::pem_blocks(&ca);
        // It never returns; a panic in it stops the process (the panic hook).
        tokio::spawn(keeper.clone().keep_including(ca_file.clone()));
        let sync = BundleSync { ca_file, keeper, generation: Arc::default(), served_ca };
        let keeper = sync.keeper.clone();
        let narrow = ca.clone();
        tokio::spawn(async move {
            if keeper.include_until_done(&narrow).await {
                tracing::info!("caBundle now holds the served certificate's CA");
            }
        });
        sync.narrow_later(ca);
        self.bundle = Some(sync);
        Ok(self)
    }

    pub fn resolver(&self) -> Arc<CertResolver> {
        Arc::clone(&self.resolver)
    }

    /// Reload if any file changed since the last successful load.
    pub async fn reload_if_changed(&mut self) {
        let ca_stamp = self.bundle.as_ref().and_then(|b| FileStamp::of(&b.ca_file));
        let now = Some((FileStamp::of(&self.cert), FileStamp::of(&self.key), ca_stamp));
        if now == self.stamp {
            return;
        }
        match load_certified_key(&self.cert, &self.key) {
            Ok(loaded) => {
                if let Some(sync) = &mut self.bundle {
                    let ca = match std::fs::read(&sync.ca_file) {
                        Ok(ca) if !crate::ca_bundle::pem_blocks(&ca).is_empty() => ca,
                        _ => {
                            tracing::warn!(ca = %sync.ca_file.display(), "certificate changed but its CA file is not readable yet; keeping the current one");
                            return;
                        }
                    };
                    // A renewal under the same CA needs nothing of the bundle. A new CA goes
                    // into it, and reaches the API server, before any client is shown a leaf
                    // from it; until then the old leaf keeps serving.
                    let blocks = crate::ca_bundle::pem_blocks(&ca);
                    if blocks != sync.served_ca {
                        sync.generation.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        if sync.keeper.include_until_done(&ca).await {
                            tracing::info!(settle = ?sync.keeper.settle, "new CA added to the caBundle; waiting for the API server to take it");
                            tokio::time::sleep(sync.keeper.settle).await;
                        }
                        sync.narrow_later(ca);
                        sync.served_ca = blocks;
                    }
                }
                record_expiry(&loaded, &self.metrics);
                self.resolver.current.store(Arc::new(loaded));
                self.stamp = now;
                self.metrics.tls_reload("success");
                tracing::info!(cert = %self.cert.display(), "serving certificate reloaded");
            }
            Err(error) => {
                self.metrics.tls_reload("failure");
                tracing::warn!(
                    error = format!("{error:#}"),
                    "serving certificate changed but does not load; keeping the current one"
                );
                self.stamp = now; // retry when the files change again
            }
        }
    }

    /// Reload on every change in the certificate's directory, and check every second regardless
    /// (a mounted Secret is updated by swapping a symlink, which not every watcher reports).
    pub async fn watch(mut self, shutdown: tokio_util::sync::CancellationToken) {
        let mut changes = edgegate::index::fs_watch::DirChanges::new();
        for dir in [self.cert.parent(), self.key.parent()].into_iter().flatten() {
            changes.watch(dir);
        }
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = changes.changed.recv() => tokio::time::sleep(Duration::from_millis(50)).await,
                () = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
            self.reload_if_changed().await;
        }
    }
}

/// Make or reuse a dev CA and serving certificate in `dir`; returns the (cert, key) paths.
/// Reused when the leaf chains to `ca.crt`, names localhost and is valid for another day.
pub fn ensure_self_signed(dir: &Path) -> Result<(PathBuf, PathBuf)> {
    let (ca, cert, key) = (dir.join("ca.crt"), dir.join("tls.crt"), dir.join("tls.key"));
    match self_signed_is_valid(&ca, &cert, &key) {
        Ok(()) => {
            tracing::info!(dir = %dir.display(), "reusing the self-signed certificate");
        }
        Err(why) => {
            tracing::info!(dir = %dir.display(), reason = format!("{why:#}"), "making a self-signed CA and serving certificate");
            write_self_signed(dir, &ca, &cert, &key)?;
        }
    }
    Ok((cert, key))
}

fn self_signed_is_valid(ca: &Path, cert: &Path, key: &Path) -> Result<()> {
    let certified = load_certified_key(cert, key)?;
    let mut roots = rustls::RootCertStore::empty();
    for ca_cert in read_certs(ca)? {
        roots.add(ca_cert)?;
    }
    let verifier = rustls::client::WebPkiServerVerifier::builder(Arc::new(roots)).build()?;
    let tomorrow = UnixTime::since_unix_epoch(
        SystemTime::now().duration_since(SystemTime::UNIX_EPOCH)?.saturating_add(Duration::from_secs(86_400)),
    );
    let (leaf, intermediates) = certified.cert.split_first().context("no certificate")?;
    for name in ["localhost", "127.0.0.1", "::1"] {
        let server_name = ServerName::try_from(name)?;
        verifier.verify_server_cert(leaf, intermediates, &server_name, &[], tomorrow)?;
    }
    Ok(())
}

fn write_self_signed(dir: &Path, ca_path: &Path, cert_path: &Path, key_path: &Path) -> Result<()> {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
    let year = 1970 + i32::try_from(SystemTime::now().duration_since(SystemTime::UNIX_EPOCH)?.as_secs() / 31_556_952)?;

    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.distinguished_name.push(DnType::CommonName, "edgegate dev CA");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    ca_params.not_before = rcgen::date_time_ymd(year - 1, 1, 1);
    ca_params.not_after = rcgen::date_time_ymd(year + 10, 1, 1);
    let ca_cert = ca_params.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca_params, ca_key);

    let leaf_key = KeyPair::generate()?;
    let mut leaf_params =
        CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned(), "::1".to_owned()])?;
    leaf_params.distinguished_name.push(DnType::CommonName, "edgegate-webhook");
    leaf_params.not_before = rcgen::date_time_ymd(year - 1, 1, 1);
    leaf_params.not_after = rcgen::date_time_ymd(year + 2, 1, 1);
    let leaf = leaf_params.signed_by(&leaf_key, &issuer)?;

    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    write_file(ca_path, &ca_cert.pem())?;
    write_file(key_path, &leaf_key.serialize_pem())?;
    write_file(cert_path, &leaf.pem())?;
    Ok(())
}

/// Write through a temporary file and rename, so a reader never sees half a file.
fn write_file(path: &Path, contents: &str) -> Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, contents).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn self_signed_is_made_once_and_reused() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let dir = tempfile::tempdir().expect("tempdir");
        let (cert, key) = ensure_self_signed(dir.path()).expect("made");
        let first = std::fs::read(&cert).expect("cert");
        assert!(load_certified_key(&cert, &key).is_ok());
        ensure_self_signed(dir.path()).expect("reused");
        assert_eq!(std::fs::read(&cert).expect("cert"), first, "a valid certificate is reused");
        std::fs::write(&key, "garbage").expect("spoil key");
        ensure_self_signed(dir.path()).expect("remade");
        assert_ne!(std::fs::read(&cert).expect("cert"), first, "an invalid pair is replaced");
    }
}
