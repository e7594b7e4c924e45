//! The embedded default record source: EdgeReachability manifests in a directory.
//!
//! Every `*.yaml`, `*.yml` and `*.json` file directly in the directory is read; a file may hold
//! several documents, or a `List`/`EdgeReachabilityList`. The directory is watched (inotify, with a
//! one-second rescan as a backstop), so an edit takes effect at once. A file that fails to parse
//! keeps the last good state of what it held: a half-written or mistyped file never empties a
//! record. A file removed removes its records. Names starting with `.` are skipped, which also
//! skips the `..data` bookkeeping of a mounted ConfigMap while following its file links.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;

use crate::core::crd::{EdgeReachability, EdgeReachabilitySpec};
use crate::core::record::Record;
use crate::index::fs_watch::FileStamp;
use crate::index::store::{RecordSource, RecordStore};

const API_VERSION: &str = "networking.datumapis.com/v1alpha";
const BACKSTOP_RESCAN: Duration = Duration::from_secs(1);

/// Why a record file was not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}:{line}: {message}")]
pub struct FileError {
    pub path: PathBuf,
    /// 1-based line of the problem, or of the start of the document it is in.
    pub line: usize,
    pub message: String,
}

/// The records one file holds.
#[derive(Debug, Clone)]
pub struct FileRecord {
    pub namespace: String,
    pub name: String,
    pub record: Arc<Record>,
}

/// Parse a record file's text. `path` decides the format and is quoted in errors.
pub fn parse_file(path: &Path, text: &str) -> Result<Vec<EdgeReachability>, FileError> {
    let is_json = path.extension().is_some_and(|e| e == "json");
    let documents = if is_json { parse_json(path, text)? } else { parse_yaml(path, text)? };
    let mut resources = Vec::new();
    for (line, doc) in documents {
        let err = |message: String| FileError { path: path.to_owned(), line, message };
        doc.flatten(&mut resources).map_err(err)?;
    }
    Ok(resources)
}

/// One manifest as found in a file: a record or a list of them.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Document {
    api_version: Option<String>,
    kind: Option<String>,
    #[serde(default)]
    metadata: ObjectMeta,
    spec: Option<EdgeReachabilitySpec>,
    items: Option<Vec<Document>>,
}

impl Document {
    fn flatten(self, out: &mut Vec<EdgeReachability>) -> Result<(), String> {
        match self.kind.as_deref() {
            Some("EdgeReachabilityList" | "List") => {
                for item in self.items.unwrap_or_default() {
                    item.flatten(out)?;
                }
                Ok(())
            }
            Some("EdgeReachability") => {
                let api_version = self.api_version.unwrap_or_default();
                if api_version != API_VERSION {
                    return Err(format!(
                        "EdgeReachability has apiVersion {api_version:?}; only {API_VERSION} is known"
                    ));
                }
                if self.metadata.name.as_deref().unwrap_or_default().is_empty() {
                    return Err("EdgeReachability has no metadata.name".to_owned());
                }
                if self.metadata.namespace.as_deref().unwrap_or_default().is_empty() {
                    return Err(format!(
                        "EdgeReachability {:?} has no metadata.namespace",
                        self.metadata.name.unwrap_or_default()
                    ));
                }
                let spec = self.spec.unwrap_or_default();
                if spec.addresses.as_ref().is_some_and(|a| a.len() > crate::core::crd::MAX_RECORD_ADDRESSES) {
                    return Err(format!(
                        "EdgeReachability names more than {} addresses",
                        crate::core::crd::MAX_RECORD_ADDRESSES
                    ));
                }
                out.push(EdgeReachability::new(self.metadata, spec));
                Ok(())
            }
            Some(other) => Err(format!("kind {other:?} is not EdgeReachability")),
            None => Err("document has no kind".to_owned()),
        }
    }
}

fn parse_yaml(path: &Path, text: &str) -> Result<Vec<(usize, Document)>, FileError> {
    let docs: Vec<Document> = serde_saphyr::from_multiple(text).map_err(|e| FileError {
        path: path.to_owned(),
        line: e.location().map_or(1, |l| usize::try_from(l.line()).unwrap_or(usize::MAX).max(1)),
        message: e.to_string(),
    })?;
    // Empty documents are skipped by the parser and by `document_start_lines` alike.
    let starts = document_start_lines(text);
    Ok(docs.into_iter().enumerate().map(|(i, doc)| (starts.get(i).copied().unwrap_or(1), doc)).collect())
}

/// The 1-based line each non-empty YAML document starts on, for errors found after parsing.
fn document_start_lines(text: &str) -> Vec<usize> {
    let mut starts = Vec::new();
    let mut current: Option<usize> = None; // first content line of the document being read
    for (i, line) in text.lines().enumerate() {
        let line_no = i + 1;
        if let Some(rest) = line.strip_prefix("---") {
            starts.extend(current.take());
            let inline = rest.trim();
            if !inline.is_empty() && !inline.starts_with('#') {
                current = Some(line_no);
            }
        } else if current.is_none() && !line.trim().is_empty() && !line.trim_start().starts_with('#') {
            current = Some(line_no);
        }
    }
    starts.extend(current);
    starts
}

fn parse_json(path: &Path, text: &str) -> Result<Vec<(usize, Document)>, FileError> {
    serde_json::from_str::<Document>(text).map(|d| vec![(1, d)]).map_err(|e| FileError {
        path: path.to_owned(),
        line: e.line().max(1),
        message: e.to_string(),
    })
}

#[derive(Debug)]
struct LoadedFile {
    stamp: Option<FileStamp>,
    records: Vec<FileRecord>,
    /// The last error, so that a file that stays broken is logged once, not every rescan.
    error: Option<FileError>,
}

/// Outcome of one rescan.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Rescan {
    pub changed: bool,
    pub errors: Vec<FileError>,
}

/// Keeps a [`RecordStore`] equal to the records in a directory.
#[derive(Debug)]
pub struct FileSource {
    dir: PathBuf,
    store: Arc<RecordStore>,
    files: BTreeMap<PathBuf, LoadedFile>,
    /// Parse errors counted since start, for the metrics.
    pub parse_errors: Arc<std::sync::atomic::AtomicU64>,
}

impl FileSource {
    pub fn new(dir: impl Into<PathBuf>, store: Arc<RecordStore>) -> Self {
        FileSource { dir: dir.into(), store, files: BTreeMap::new(), parse_errors: Arc::default() }
    }

    /// Read what changed in the directory and publish the result to the store. Until the
    /// directory can be listed once, the store stays unsynced.
    pub fn rescan(&mut self) -> Rescan {
        let mut report = Rescan::default();
        let listing = match list_record_files(&self.dir) {
            Ok(listing) => listing,
            Err(e) => {
                tracing::warn!(dir = %self.dir.display(), error = %e, "cannot list the records directory; keeping the last state");
                return report;
            }
        };
        let before = self.files.len();
        self.files.retain(|path, _| listing.contains(path));
        report.changed |= self.files.len() != before;
        for path in listing {
            report.changed |= self.reload(&path, &mut report.errors);
        }
        if report.changed || !self.store_synced() {
            self.publish();
        }
        report
    }

    fn store_synced(&self) -> bool {
        use crate::index::store::RecordSource;
        self.store.synced()
    }

    /// Re-read one file if its stamp changed or its last read failed. True if its records changed.
    fn reload(&mut self, path: &Path, errors: &mut Vec<FileError>) -> bool {
        let stamp = FileStamp::of(path);
        let loaded =
            self.files.entry(path.to_owned()).or_insert(LoadedFile { stamp: None, records: Vec::new(), error: None });
        if loaded.error.is_none() && loaded.stamp.is_some() && loaded.stamp == stamp {
            return false;
        }
        let parsed = std::fs::read(path)
            .map_err(|e| FileError { path: path.to_owned(), line: 0, message: e.to_string() })
            .and_then(|bytes| {
                String::from_utf8(bytes).map_err(|e| FileError {
                    path: path.to_owned(),
                    line: 0,
                    message: format!("not UTF-8: {e}"),
                })
            })
            .and_then(|text| parse_file(path, &text));
        match parsed {
            Ok(resources) => {
                if loaded.error.take().is_some() {
                    tracing::info!(file = %path.display(), "record file parses again");
                }
                loaded.stamp = stamp;
                loaded.records = resources
                    .iter()
                    .map(|r| FileRecord {
                        namespace: r.metadata.namespace.clone().unwrap_or_default(),
                        name: r.metadata.name.clone().unwrap_or_default(),
                        record: Arc::new(super::record_of(r)),
                    })
                    .collect();
                true
            }
            Err(error) => {
                if loaded.error.as_ref() != Some(&error) {
                    self.parse_errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    tracing::warn!(
                        file = %error.path.display(),
                        line = error.line,
                        error = %error.message,
                        kept = loaded.records.len(),
                        "record file does not parse; keeping its last good records"
                    );
                }
                loaded.error = Some(error.clone());
                errors.push(error);
                false
            }
        }
    }

    fn publish(&self) {
        let mut snapshot = HashMap::new();
        let mut ignored = 0;
        for r in self.files.values().flat_map(|f| &f.records) {
            if r.name == self.store.record_name() {
                super::merge_into(&mut snapshot, &r.namespace, Arc::clone(&r.record));
            } else {
                ignored += 1;
                tracing::debug!(namespace = %r.namespace, name = %r.name, "record not named {}; ignored", self.store.record_name());
            }
        }
        tracing::info!(records = snapshot.len(), ignored, "records loaded from files");
        self.store.replace_all(snapshot, ignored);
    }

    /// Rescan on every change in the directory (and once a second regardless) until `shutdown`.
    pub async fn watch(mut self, shutdown: impl std::future::Future<Output = ()>) {
        let mut changes = crate::index::fs_watch::DirChanges::new();
        let mut watching = false;
        tokio::pin!(shutdown);
        loop {
            watching = watching || changes.watch(&self.dir);
            self.rescan();
            tokio::select! {
                () = &mut shutdown => return,
                _ = changes.changed.recv() => tokio::time::sleep(Duration::from_millis(20)).await, // let a burst settle
                () = tokio::time::sleep(BACKSTOP_RESCAN) => {}
            }
        }
    }
}

/// Record files directly in `dir`, sorted.
fn list_record_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        let is_record_file = !name.starts_with('.')
            && path.extension().and_then(|e| e.to_str()).is_some_and(|e| matches!(e, "yaml" | "yml" | "json"))
            && path.is_file();
        if is_record_file {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::record::RecordState;
    use crate::index::store::{DEFAULT_RECORD_NAME, RecordSource};

    const TWO_DOCS: &str = "\
apiVersion: networking.datumapis.com/v1alpha
kind: EdgeReachability
metadata: {name: default, namespace: ns-a}
spec: {addresses: [fd00::1]}
---
apiVersion: networking.datumapis.com/v1alpha
kind: EdgeReachability
metadata: {name: default, namespace: ns-b}
";

    #[test]
    fn parses_several_documents_and_lists() {
        let got = parse_file(Path::new("r.yaml"), TWO_DOCS).expect("parses");
        assert_eq!(got.len(), 2);
        assert!(got[1].entries().is_empty());
        let list = r#"{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"networking.datumapis.com/v1alpha","kind":"EdgeReachability","metadata":{"name":"default","namespace":"ns-c"},"spec":{"addresses":[]}}]}"#;
        assert_eq!(parse_file(Path::new("r.json"), list).expect("parses").len(), 1);
    }

    #[test]
    fn errors_name_file_and_line() {
        let broken = format!("{TWO_DOCS}---\nkind: EdgeReachability\nmetadata: {{name: [\n");
        let err = parse_file(Path::new("r.yaml"), &broken).expect_err("broken");
        assert_eq!(err.path, Path::new("r.yaml"));
        assert!(err.line >= 10, "line {} should point into the third document", err.line);
        let wrong_version = TWO_DOCS.replace("v1alpha", "v1");
        let err = parse_file(Path::new("r.yaml"), &wrong_version).expect_err("unknown version");
        assert!(err.message.contains("apiVersion"), "{err}");
        let err = parse_file(Path::new("r.json"), "{\"kind\": \n\n 7").expect_err("bad json");
        assert_eq!(err.line, 3);
        let no_ns = "apiVersion: networking.datumapis.com/v1alpha\nkind: EdgeReachability\nmetadata: {name: default}\n";
        assert!(parse_file(Path::new("r.yaml"), no_ns).is_err());
    }

    #[test]
    fn broken_file_keeps_last_good_state_and_removed_file_removes_records() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Arc::new(RecordStore::new(DEFAULT_RECORD_NAME));
        let mut source = FileSource::new(dir.path(), Arc::clone(&store));
        let file = dir.path().join("records.yaml");
        std::fs::write(&file, TWO_DOCS).expect("write");
        assert!(source.rescan().errors.is_empty());
        assert!(matches!(store.lookup("ns-a"), RecordState::Present(r) if r.len() == 1));

        std::fs::write(&file, "apiVersion: [").expect("write");
        assert_eq!(source.rescan().errors.len(), 1);
        assert!(matches!(store.lookup("ns-a"), RecordState::Present(r) if r.len() == 1));
        assert!(matches!(store.lookup("ns-b"), RecordState::Present(r) if r.is_empty()));

        std::fs::remove_file(&file).expect("remove");
        assert!(source.rescan().changed);
        assert!(matches!(store.lookup("ns-a"), RecordState::Absent));
    }

    #[test]
    fn missing_directory_leaves_store_unsynced() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Arc::new(RecordStore::new(DEFAULT_RECORD_NAME));
        let mut source = FileSource::new(dir.path().join("not-yet"), Arc::clone(&store));
        source.rescan();
        assert!(!store.synced());
        std::fs::create_dir(dir.path().join("not-yet")).expect("mkdir");
        source.rescan();
        assert!(store.synced());
    }
}
