//! A worker's copy of the deployed functions it runs: `DIR/<sha256>/`, fetched from Postgres on
//! first use of a hash, checked against it, and run from there after.
//!
//! `DIR` (`--function-cache`, else `$XDG_CACHE_HOME/workdo/functions`, else
//! `~/.cache/workdo/functions`) is made on first use, the runtime user's alone (mode 0700; one
//! another user owns or others can write into is refused), and what is unpacked is read-only,
//! folders included. A hash is fetched whole into a temporary folder and renamed into place, so
//! a crash or another process fetching the same hash never leaves half a function. The first use
//! of a file in a process reads the whole copy back against the stored bytes — every file, and
//! no file more; later calls check that the file run is the same file (size, inode, change
//! time) and read the copy back again when not. A copy that no longer matches is logged,
//! removed and fetched again.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use tracing::{info, warn};

use crate::artifact;
use crate::store::Store;
use crate::store::functions::FunctionPin;

/// The cache's size past which hashes nothing unfinished pins are removed, oldest first.
pub const DEFAULT_LIMIT_BYTES: u64 = 1 << 30;

/// What identifies the exact file last checked: its size, inode and change time (which no
/// write, `chmod` or `touch -d` leaves as it was).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    len: u64,
    inode: u64,
    ctime: (i64, i64),
}

fn stamp(path: &Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some(Stamp {
        len: m.len(),
        inode: m.ino(),
        ctime: (m.ctime(), m.ctime_nsec()),
    })
}

/// This process's effective user id.
fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// A worker host's function cache.
#[derive(Debug)]
pub struct FunctionCache {
    dir: PathBuf,
    limit: u64,
    /// Files run, each checked whole (with its hash's copy) in this process, and its stamp then.
    checked: Mutex<HashMap<PathBuf, Stamp>>,
    /// One fetch or check at a time in this process.
    fetching: tokio::sync::Mutex<()>,
}

/// The default cache folder.
pub fn default_dir() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".cache"))
        });
    match base {
        Some(b) => b.join("workdo").join("functions"),
        // No home: a folder named for this user under the temporary directory, which `ready`
        // refuses if another user made it first.
        None => std::env::temp_dir().join(format!("workdo-functions-{}", euid())),
    }
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
    /// The cache in `dir`, made on first use: a runtime with no deployed function to run never
    /// needs it, and starts without it.
    pub fn new(dir: PathBuf, limit: u64) -> FunctionCache {
        FunctionCache {
            dir,
            limit,
            checked: Mutex::new(HashMap::new()),
            fetching: tokio::sync::Mutex::new(()),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Make the cache folder (0700) when it is not there, and refuse one another user owns or
    /// others may write into: what runs from it must be what was fetched.
    fn ready(&self) -> Result<(), String> {
        use std::os::unix::fs::{DirBuilderExt, MetadataExt};
        let dir = &self.dir;
        let said = |e: std::io::Error| format!("the function cache {}: {e}", dir.display());
        if !dir.exists() {
            if let Some(parent) = dir.parent() {
                std::fs::create_dir_all(parent).map_err(said)?;
            }
            match std::fs::DirBuilder::new().mode(0o700).create(dir) {
                Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(said(e)),
                _ => {}
            }
        }
        let meta = std::fs::symlink_metadata(dir).map_err(said)?;
        if !meta.is_dir() || meta.uid() != euid() || meta.mode() & 0o022 != 0 {
            return Err(format!(
                "the function cache {} must be a folder of this user's that no one else can \
                 write into (--function-cache DIR to choose another)",
                dir.display()
            ));
        }
        Ok(())
    }

    /// The path of the file that runs `pin`, fetched and checked as the module says.
    ///
    /// # Errors
    /// Saying why it cannot be had: not stored any more, stored bytes that do not match their
    /// hash, or a cache that cannot be written.
    pub async fn path(&self, store: &Store, pin: &FunctionPin) -> Result<PathBuf, String> {
        let root = self.dir.join(&pin.sha256);
        let run = run_path(&root, pin);
        if self.still_checked(&run) {
            return Ok(run);
        }
        let _one = self.fetching.lock().await;
        if self.still_checked(&run) {
            return Ok(run);
        }
        self.ready()?;
        if root.exists() {
            let (verdict, how) = {
                let root = root.clone();
                let pin = pin.clone();
                tokio::task::spawn_blocking(move || check_copy(&root, &pin))
                    .await
                    .unwrap_or_else(|e| (false, e.to_string()))
            };
            if verdict {
                runnable(&run)?;
                self.remember(&run);
                return Ok(run);
            }
            warn!(function = %pin.name, version = pin.version, sha256 = %pin.sha256, why = %how,
                  "a cached function no longer matches its hash; removing it and fetching it again");
            self.forget(&root);
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
        runnable(&run)?;
        self.remember(&run);
        Ok(run)
    }

    fn still_checked(&self, run: &Path) -> bool {
        let Ok(map) = self.checked.lock() else {
            return false;
        };
        map.get(run).is_some_and(|s| stamp(run) == Some(*s))
    }

    fn remember(&self, run: &Path) {
        if let (Ok(mut map), Some(s)) = (self.checked.lock(), stamp(run)) {
            map.insert(run.to_path_buf(), s);
        }
    }

    /// Forget the files checked under `root` (removed, or to be read back again).
    fn forget(&self, root: &Path) {
        if let Ok(mut map) = self.checked.lock() {
            map.retain(|run, _| !run.starts_with(root));
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
            self.forget(&path);
            remove(&path);
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
        (Some(entry), true) => root.join("root").join(artifact::normal_path(entry)),
        _ => root.join("function"),
    }
}

/// Make sure the file run can be run: a folder's entry may be a file its archive gave no
/// executable bit (the same folder deployed with another entry shares its copy).
fn runnable(run: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(run).map_err(|e| format!("{}: {e}", run.display()))?;
    if meta.permissions().mode() & 0o111 == 0 {
        std::fs::set_permissions(run, std::fs::Permissions::from_mode(0o555))
            .map_err(|e| format!("{}: {e}", run.display()))?;
    }
    Ok(())
}

/// Whether the copy in `root` still holds `pin`'s bytes: the stored artifact hashes to its
/// name, and the unpacked files are the archive's, no more, no fewer, each the same.
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
    let (Ok(files), Ok(want)) = (artifact::manifest(&bytes), artifact::paths(&bytes)) else {
        return (false, "its archive cannot be read".into());
    };
    // A file added beside the entry (a module it would import) is as much a change as one
    // edited.
    let mut found = std::collections::BTreeSet::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(root.join("root").join(&rel)) else {
            return (false, "its folder cannot be read".into());
        };
        for e in entries.flatten() {
            let p = rel.join(e.file_name());
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(p.clone());
            }
            found.insert(p);
        }
    }
    if found != want {
        let odd: Vec<String> = found
            .symmetric_difference(&want)
            .take(3)
            .map(|p| p.display().to_string())
            .collect();
        return (
            false,
            format!(
                "its files differ from the stored copy's ({})",
                odd.join(", ")
            ),
        );
    }
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
            // Another process put the same hash there first: theirs does, once checked.
            if target.exists() && check_copy(&target, pin).0 {
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
        let cache = FunctionCache::new(dir.path().join("c"), 2_500);
        cache.ready().expect("cache");
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
