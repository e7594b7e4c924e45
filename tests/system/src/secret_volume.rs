//! A Secret's files as a kubelet projects them into a Pod: each key a symlink to `..data/<key>`,
//! `..data` a symlink to a timestamped directory, and an update written to a new directory and
//! swapped in by renaming a new `..data` over the old one — atomic, so a reader sees the old set
//! or the new one, never half of each. What the webhook watches when cert-manager renews.

use std::collections::BTreeMap;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Secret;

/// The directory a Secret is projected into.
pub struct SecretVolume {
    pub dir: PathBuf,
}

impl SecretVolume {
    pub fn new(dir: &Path) -> SecretVolume {
        std::fs::create_dir_all(dir).expect("volume dir");
        SecretVolume { dir: dir.to_owned() }
    }

    /// Project `secret`'s data, replacing what was there in one rename.
    pub fn project(&mut self, secret: &Secret) {
        let data: BTreeMap<String, Vec<u8>> =
            secret.data.clone().unwrap_or_default().into_iter().map(|(k, v)| (k, v.0)).collect();
        // A new name each time, also across volumes on one directory (a replica restarted).
        static GENERATION: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let generation = GENERATION.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let version = format!("..{}_{generation:04}", std::process::id());
        let target = self.dir.join(&version);
        std::fs::create_dir(&target).expect("version dir");
        for (key, bytes) in &data {
            std::fs::write(target.join(key), bytes).expect("projected file");
        }
        let old = std::fs::read_link(self.dir.join("..data")).ok();
        let staged = self.dir.join("..data_tmp");
        let _ = std::fs::remove_file(&staged);
        symlink(&version, &staged).expect("staged ..data");
        std::fs::rename(&staged, self.dir.join("..data")).expect("swap ..data");
        for key in data.keys() {
            let link = self.dir.join(key);
            if std::fs::symlink_metadata(&link).is_err() {
                symlink(Path::new("..data").join(key), &link).expect("key link");
            }
        }
        if let Some(old) = old {
            let _ = std::fs::remove_dir_all(self.dir.join(old));
        }
    }
}
