//! A worker's copy of the deployed functions it runs: `DIR/<sha256>/`, fetched from Postgres on
//! first use of a hash, checked against it, and run from there after.
//!
//! `DIR` (`--function-cache`, else `$XDG_CACHE_HOME/workdo/functions`, else
//! `~/.cache/workdo/functions`) is the runtime user's alone (mode 0700), and what is unpacked is
//! read-only. A hash is fetched whole into a temporary folder and renamed into place, so a crash
//! or another process fetching the same hash never leaves half a function. The first use of a
//! hash in a process reads every file back against the stored bytes; later calls check that the
//! file run is the same file (size, modification time, inode) and read it back again when not.
//! A copy that no longer matches is logged, removed and fetched again.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use tracing::{info, warn};

use crate::artifact;
use crate::store::Store;
use crate::store::functions::FunctionPin;

/// The cache's size past which hashes nothing unfinished pins are removed, oldest first.
pub const DEFAULT_LIMIT_BYTES: u64 = 1 << 30;

/// What identifies the exact file last checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    len: u64,
    modified: Option<std::time::SystemTime>,
    inode: u64,
}

fn stamp(path: &Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some(Stamp {
        len: m.len(),
        modified: m.modified().ok(),
        inode: m.ino(),
    })
}

/// A worker host's function cache.
#[derive(Debug)]
pub struct FunctionCache {
    dir: PathBuf,
    limit: u64,
    /// Hashes checked whole in this process, with the stamp of the file they run.
    checked: Mutex<HashMap<String, Stamp>>,
    /// One fetch of a hash at a time in this process.
    fetching: tokio::sync::Mutex<()>,
}

/// The default cache folder.
pub fn default_dir() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("workdo").join("functions")
}

/// Make `path` and what is under it writable by its owner again, so it can be removed.
fn make_removable(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return;
    };
    if meta.is_dir() {
        let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700));
        if let Ok(entries) = std::fs::read_dir(path) {
            for e in entries.flatten() {
                make_removable(&e.path());
            }
        }
    }
}

fn remove(path: &Path) {
    make_removable(path);
    let _ = std::fs::remove_dir_all(path);
}

impl FunctionCache {
    /// The cache in `dir`, created private to this user.
    ///
    /// # Errors
    /// When the folder cannot be made or made private.
    pub fn new(dir: PathBuf, limit: u64) -> std::io::Result<FunctionCache> {
        use std::os::unix::fs::PermissionsExt;
        std::fs::create_dir_all(&dir)?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
        Ok(FunctionCache {
            dir,
            limit,
            checked: Mutex::new(HashMap::new()),
            fetching: tokio::sync::Mutex::new(()),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The path of the file that runs `pin`, fetched and checked as the module says.
    ///
    /// # Errors
    /// Saying why it cannot be had: not stored any more, stored bytes that do not match their
    /// hash, or a cache that cannot be written.
    pub async fn path(&self, store: &Store, pin: &FunctionPin) -> Result<PathBuf, String> {
        let root = self.dir.join(&pin.sha256);
        let run = run_path(&root, pin);
        if self.still_checked(&pin.sha256, &run) {
            return Ok(run);
        }
        let _one = self.fetching.lock().await;
        if self.still_checked(&pin.sha256, &run) {
            return Ok(run);
        }
        if root.exists() {
            let (verdict, how) = {
                let root = root.clone();
                let pin = pin.clone();
                tokio::task::spawn_blocking(move || check_copy(&root, &pin))
                    .await
                    .unwrap_or_else(|e| (false, e.to_string()))
            };
            if verdict {
                self.remember(&pin.sha256, &run);
                return Ok(run);
            }
            warn!(function = %pin.name, version = pin.version, sha256 = %pin.sha256, why = %how,
                  "a cached function no longer matches its hash; removing it and fetching it again");
            remove(&root);
        }
        let (archive, bytes) = store
            .function_artifact(&pin.sha256)
            .await
            .map_err(|e| {
                format!(
                    "fetching function {} version {}: {e}",
                    pin.name, pin.version
                )
            })?
            .ok_or_else(|| {
                format!(
                    "function {} version {} (sha256 {}) is no longer stored (deleted?)",
                    pin.name, pin.version, pin.sha256
                )
            })?;
        let dir = self.dir.clone();
        let pin2 = pin.clone();
        tokio::task::spawn_blocking(move || install(&dir, &pin2, archive, &bytes))
            .await
            .map_err(|e| e.to_string())??;
        info!(function = %pin.name, version = pin.version, sha256 = %pin.sha256, "function fetched into the cache");
        self.remember(&pin.sha256, &run);
        Ok(run)
    }

    fn still_checked(&self, sha: &str, run: &Path) -> bool {
        let Ok(map) = self.checked.lock() else {
            return false;
        };
        map.get(sha).is_some_and(|s| stamp(run) == Some(*s))
    }

    fn remember(&self, sha: &str, run: &Path) {
        if let (Ok(mut map), Some(s)) = (self.checked.lock(), stamp(run)) {
            map.insert(sha.to_string(), s);
        }
    }

    /// Remove hashes not in `keep`, oldest first, while the cache is over its limit. Returns
    /// how many went.
    pub fn trim(&self, keep: &HashSet<String>) -> usize {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return 0;
        };
        let mut all: Vec<(std::time::SystemTime, u64, PathBuf, String)> = entries
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_str()?.to_string();
                if name.len() != 64 || !name.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return None;
                }
                let at = e.metadata().ok()?.modified().ok()?;
                Some((at, size_of(&e.path()), e.path(), name))
            })
            .collect();
        let mut total: u64 = all.iter().map(|a| a.1).sum();
        all.sort();
        let mut gone = 0;
        for (_, size, path, sha) in all {
            if total <= self.limit {
                break;
            }
            if keep.contains(&sha) {
                continue;
            }
            remove(&path);
            if let Ok(mut map) = self.checked.lock() {
                map.remove(&sha);
            }
            total = total.saturating_sub(size);
            gone += 1;
        }
        gone
    }
}

fn size_of(path: &Path) -> u64 {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    if !meta.is_dir() {
        return meta.len();
    }
    std::fs::read_dir(path)
        .map(|es| es.flatten().map(|e| size_of(&e.path())).sum())
        .unwrap_or(0)
}

/// The file that runs: `ROOT/function` for one file, `ROOT/root/ENTRY` for a folder.
fn run_path(root: &Path, pin: &FunctionPin) -> PathBuf {
    match (&pin.entry, pin.archive) {
        (Some(entry), true) => root.join("root").join(entry),
        _ => root.join("function"),
    }
}

/// Whether the copy in `root` still holds `pin`'s bytes: the stored artifact hashes to its
/// name, and every unpacked file matches it.
fn check_copy(root: &Path, pin: &FunctionPin) -> (bool, String) {
    let Ok(bytes) = std::fs::read(root.join("artifact")) else {
        return (false, "its stored copy cannot be read".into());
    };
    if artifact::sha256_hex(&bytes) != pin.sha256 {
        return (false, "its stored copy hashes to something else".into());
    }
    if !pin.archive {
        return match std::fs::read(root.join("function")) {
            Ok(f) if f == bytes => (true, String::new()),
            _ => (false, "the file run differs from the stored copy".into()),
        };
    }
    let Ok(files) = artifact::manifest(&bytes) else {
        return (false, "its archive cannot be read".into());
    };
    for (path, sha) in files {
        match std::fs::read(root.join("root").join(&path)) {
            Ok(b) if artifact::sha256_hex(&b) == sha => {}
            _ => {
                return (
                    false,
                    format!("{} differs from the stored copy", path.display()),
                );
            }
        }
    }
    (true, String::new())
}

/// Write `bytes` (checked against `pin.sha256`) into `dir/<sha256>/` through a temporary
/// folder renamed into place.
fn install(dir: &Path, pin: &FunctionPin, archive: bool, bytes: &[u8]) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    if artifact::sha256_hex(bytes) != pin.sha256 {
        return Err(format!(
            "function {} version {}: the stored bytes do not hash to {}; refusing to run them",
            pin.name, pin.version, pin.sha256
        ));
    }
    let fail = |e: std::io::Error| format!("writing the function cache in {}: {e}", dir.display());
    let tmp = dir.join(format!(
        ".tmp-{}-{}",
        pin.sha256,
        hex::encode(rand::random::<[u8; 6]>())
    ));
    std::fs::create_dir_all(&tmp).map_err(fail)?;
    let result = (|| -> Result<(), String> {
        std::fs::write(tmp.join("artifact"), bytes).map_err(fail)?;
        std::fs::set_permissions(tmp.join("artifact"), std::fs::Permissions::from_mode(0o400))
            .map_err(fail)?;
        if archive {
            let entry = pin.entry.as_deref().unwrap_or_default();
            artifact::unpack(bytes, entry, &tmp.join("root")).map_err(|e| e.to_string())?;
        } else {
            std::fs::write(tmp.join("function"), bytes).map_err(fail)?;
            std::fs::set_permissions(tmp.join("function"), std::fs::Permissions::from_mode(0o555))
                .map_err(fail)?;
        }
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o500)).map_err(fail)?;
        let target = dir.join(&pin.sha256);
        if std::fs::rename(&tmp, &target).is_err() {
            // Another process put the same hash there first: theirs is as good.
            if target.exists() {
                remove(&tmp);
                return Ok(());
            }
            return Err(format!(
                "cannot move the fetched function to {}",
                target.display()
            ));
        }
        Ok(())
    })();
    if result.is_err() {
        remove(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Past its limit the cache removes the oldest hashes nothing pins, and keeps pinned ones
    /// whatever their age.
    #[test]
    fn trim_keeps_what_is_pinned_and_removes_the_oldest_rest() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cache = FunctionCache::new(dir.path().join("c"), 2_500).expect("cache");
        let mut shas = Vec::new();
        for i in 0..4u8 {
            let sha = hex::encode([i; 32]);
            let root = cache.dir().join(&sha);
            std::fs::create_dir_all(&root).expect("mkdir");
            std::fs::write(root.join("function"), vec![0u8; 1_000]).expect("write");
            // Oldest first, a second apart.
            let at = std::time::SystemTime::UNIX_EPOCH
                + std::time::Duration::from_secs(1_000 + u64::from(i));
            std::fs::File::open(&root)
                .and_then(|f| f.set_modified(at))
                .expect("mtime");
            shas.push(sha);
        }
        let keep: HashSet<String> = [shas[0].clone()].into_iter().collect();
        assert_eq!(cache.trim(&keep), 2, "4,000 bytes down to at most 2,500");
        let left: Vec<bool> = shas.iter().map(|s| cache.dir().join(s).exists()).collect();
        assert_eq!(left, [true, false, false, true]);
    }
}
