//! Filesystem change notifications for the file record source and the certificate reloader.

use std::path::Path;
use std::time::SystemTime;

use notify::{EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::mpsc;

/// Watches directories and sends `()` when something in them changes. Reads are not changes:
/// inotify reports every open, and counting our own reads would make each rescan cause the next.
/// Messages coalesce: one waiting message means "look again".
pub struct DirChanges {
    watcher: Option<RecommendedWatcher>,
    pub changed: mpsc::Receiver<()>,
}

impl DirChanges {
    pub fn new() -> Self {
        let (tx, changed) = mpsc::channel(1);
        let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
            if event.is_ok_and(|e| !matches!(e.kind, EventKind::Access(_))) {
                let _ = tx.try_send(()); // full: a look is already queued
            }
        })
        .map_err(|e| tracing::warn!(error = %e, "no filesystem notifications; relying on periodic checks"))
        .ok();
        DirChanges { watcher, changed }
    }

    /// Start watching `dir`; false if it cannot be watched (yet), for example while it is missing.
    pub fn watch(&mut self, dir: &Path) -> bool {
        let dir = if dir.as_os_str().is_empty() { Path::new(".") } else { dir };
        self.watcher.as_mut().is_some_and(|w| w.watch(dir, RecursiveMode::NonRecursive).is_ok())
    }
}

impl Default for DirChanges {
    fn default() -> Self {
        Self::new()
    }
}

/// What a file looked like when last read (length and modification time), to tell whether it
/// changed since without reading it again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileStamp {
    len: u64,
    modified: Option<SystemTime>,
}

impl FileStamp {
    /// The stamp of `path` now, following links; `None` if it cannot be read.
    pub fn of(path: &Path) -> Option<FileStamp> {
        std::fs::metadata(path).ok().map(|m| FileStamp { len: m.len(), modified: m.modified().ok() })
    }
}
