//! A deployed function's bytes: one executable file as it is, or a folder packed as a tar
//! archive that runs one `entry` file inside it.
//!
//! A folder is packed deterministically (paths sorted, no owners, times or devices; modes kept
//! as executable or not), so the same folder deploys to the same SHA-256. Every archive is
//! checked entry by entry before it is stored and again before it is unpacked: only regular
//! files, folders and symbolic links that stay inside it, under relative paths with no `..`.

use std::io::Read;
use std::path::{Component, Path, PathBuf};

use sha2::{Digest, Sha256};

/// The largest artifact a deploy takes unless told otherwise (`--max-size`).
pub const DEFAULT_MAX_BYTES: u64 = 64 << 20;

/// What is wrong with an artifact, named.
#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Refused(String),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ArtifactError + '_ {
    move |source| ArtifactError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The SHA-256 of `bytes`, in lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// `dir` as a tar archive, its files in path order, with `entry` (a path relative to `dir`)
/// required to be a regular file in it. At most `max` bytes.
///
/// # Errors
/// A file that is not a regular file, folder or link inside `dir`, a missing entry, or an
/// archive over `max`.
pub fn pack_folder(dir: &Path, entry: &str, max: u64) -> Result<Vec<u8>, ArtifactError> {
    check_relative(entry)
        .map_err(|why| ArtifactError::Refused(format!("--entry {entry:?}: {why}")))?;
    let entry_path = dir.join(entry);
    let meta = std::fs::metadata(&entry_path).map_err(io(&entry_path))?;
    if !meta.is_file() {
        return Err(ArtifactError::Refused(format!(
            "--entry {entry:?} is not a file in {}",
            dir.display()
        )));
    }
    let mut paths = Vec::new();
    walk(dir, Path::new(""), &mut paths)?;
    paths.sort();
    let mut builder = tar::Builder::new(Vec::new());
    let mut total: u64 = 0;
    for rel in paths {
        let full = dir.join(&rel);
        let meta = std::fs::symlink_metadata(&full).map_err(io(&full))?;
        let mut header = tar::Header::new_gnu();
        header.set_mtime(0);
        header.set_uid(0);
        header.set_gid(0);
        let ft = meta.file_type();
        if ft.is_dir() {
            header.set_entry_type(tar::EntryType::Directory);
            header.set_mode(0o755);
            header.set_size(0);
            builder
                .append_data(&mut header, &rel, std::io::empty())
                .map_err(io(&full))?;
        } else if ft.is_symlink() {
            let target = std::fs::read_link(&full).map_err(io(&full))?;
            link_stays_inside(&rel, &target)
                .map_err(|why| ArtifactError::Refused(format!("{}: {why}", full.display())))?;
            header.set_entry_type(tar::EntryType::Symlink);
            header.set_mode(0o777);
            header.set_size(0);
            builder
                .append_link(&mut header, &rel, &target)
                .map_err(io(&full))?;
        } else if ft.is_file() {
            use std::os::unix::fs::PermissionsExt;
            total = total.saturating_add(meta.len());
            if total > max {
                return Err(too_big(total, max));
            }
            let executable = meta.permissions().mode() & 0o111 != 0;
            header.set_entry_type(tar::EntryType::Regular);
            header.set_mode(if executable { 0o755 } else { 0o644 });
            header.set_size(meta.len());
            let file = std::fs::File::open(&full).map_err(io(&full))?;
            builder
                .append_data(&mut header, &rel, file)
                .map_err(io(&full))?;
        } else {
            return Err(ArtifactError::Refused(format!(
                "{} is not a regular file, folder or link (a device, socket or pipe cannot be deployed)",
                full.display()
            )));
        }
    }
    let bytes = builder.into_inner().map_err(io(dir))?;
    if bytes.len() as u64 > max {
        return Err(too_big(bytes.len() as u64, max));
    }
    Ok(bytes)
}

fn too_big(size: u64, max: u64) -> ArtifactError {
    ArtifactError::Refused(format!(
        "the function is {size} bytes, over the limit of {max} bytes (--max-size, or \
         WORKDO_FUNCTION_MAX_BYTES on the server)"
    ))
}

fn walk(root: &Path, rel: &Path, out: &mut Vec<PathBuf>) -> Result<(), ArtifactError> {
    let dir = root.join(rel);
    for e in std::fs::read_dir(&dir).map_err(io(&dir))? {
        let e = e.map_err(io(&dir))?;
        let child = rel.join(e.file_name());
        let ft = e.file_type().map_err(io(&dir))?;
        out.push(child.clone());
        if ft.is_dir() {
            walk(root, &child, out)?;
        }
    }
    Ok(())
}

/// A relative path with no `..`, no root and no prefix.
fn check_relative(path: &str) -> Result<(), &'static str> {
    if path.is_empty() {
        return Err("is empty");
    }
    for c in Path::new(path).components() {
        match c {
            Component::Normal(_) | Component::CurDir => {}
            Component::ParentDir => return Err("holds `..`"),
            Component::RootDir | Component::Prefix(_) => return Err("is an absolute path"),
        }
    }
    Ok(())
}

/// Whether a link at `at` (relative to the archive's root) pointing to `target` stays inside.
fn link_stays_inside(at: &Path, target: &Path) -> Result<(), String> {
    if target.is_absolute() {
        return Err(format!("links to the absolute path {}", target.display()));
    }
    let mut depth: i64 = at.components().count() as i64 - 1;
    for c in target.components() {
        match c {
            Component::ParentDir => depth -= 1,
            Component::Normal(_) => depth += 1,
            _ => {}
        }
        if depth < 0 {
            return Err(format!("links outside the folder ({})", target.display()));
        }
    }
    Ok(())
}

/// Check every entry of the tar archive `bytes` and that `entry` is a file in it.
///
/// # Errors
/// An absolute path, `..`, a hard link, device or FIFO, a link leaving the archive, a missing
/// entry, or bytes that are not a tar archive — each named.
pub fn check_archive(bytes: &[u8], entry: &str) -> Result<(), ArtifactError> {
    check_relative(entry)
        .map_err(|why| ArtifactError::Refused(format!("entry {entry:?} {why}")))?;
    let mut found = false;
    let wanted = normal_path(entry);
    for_each_entry(bytes, |path, kind, _| {
        if matches!(kind, Kind::File { .. }) && path == wanted {
            found = true;
        }
        Ok(())
    })?;
    if found {
        Ok(())
    } else {
        Err(ArtifactError::Refused(format!(
            "the archive has no file {entry:?} to run (entry)"
        )))
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    /// A regular file; executable when its mode says so.
    File {
        executable: bool,
    },
    Dir,
    Link(PathBuf),
}

/// Each entry of the archive, checked, with its contents for a file.
fn for_each_entry(
    bytes: &[u8],
    mut f: impl FnMut(&Path, Kind, Vec<u8>) -> Result<(), ArtifactError>,
) -> Result<(), ArtifactError> {
    let bad = |why: String| ArtifactError::Refused(format!("the archive is refused: {why}"));
    // Every path once, and none below a link: a link checked against its own place (`a` → `.`)
    // could otherwise carry later entries (`a/a/l` → `../..`, then `l/x`) out of the folder.
    let mut seen: std::collections::HashSet<PathBuf> = std::collections::HashSet::new();
    let mut links: Vec<PathBuf> = Vec::new();
    let mut archive = tar::Archive::new(bytes);
    let entries = archive
        .entries()
        .map_err(|e| bad(format!("not a tar archive ({e})")))?;
    for e in entries {
        let mut e = e.map_err(|e| bad(format!("not a tar archive ({e})")))?;
        let raw = e
            .path()
            .map_err(|err| bad(format!("an entry's path cannot be read ({err})")))?
            .into_owned();
        let shown = raw.display().to_string();
        check_relative(&shown).map_err(|why| bad(format!("{shown:?} {why}")))?;
        let path: PathBuf = raw
            .components()
            .filter(|c| matches!(c, Component::Normal(_)))
            .collect();
        if let Some(link) = links.iter().find(|l| path.starts_with(l) && path != **l) {
            return Err(bad(format!(
                "{shown:?} lies below the link {:?}: nothing may be written through a link",
                link.display().to_string()
            )));
        }
        let executable = e.header().mode().is_ok_and(|m| m & 0o111 != 0);
        let kind = match e.header().entry_type() {
            tar::EntryType::Regular | tar::EntryType::Continuous => Kind::File { executable },
            tar::EntryType::Directory => Kind::Dir,
            tar::EntryType::Symlink => {
                let target = e
                    .link_name()
                    .map_err(|err| bad(format!("{shown:?}: its link cannot be read ({err})")))?
                    .ok_or_else(|| bad(format!("{shown:?} is a link to nothing")))?
                    .into_owned();
                link_stays_inside(&path, &target).map_err(|why| bad(format!("{shown:?} {why}")))?;
                Kind::Link(target)
            }
            // Metadata entries (pax, GNU long names) are read by the tar crate itself.
            tar::EntryType::XGlobalHeader | tar::EntryType::XHeader => continue,
            other => {
                return Err(bad(format!(
                    "{shown:?} is a {other:?} entry; only files, folders and links inside it are taken"
                )));
            }
        };
        let mut data = Vec::new();
        if let Kind::File { .. } = kind {
            e.read_to_end(&mut data)
                .map_err(|err| bad(format!("{shown:?} cannot be read ({err})")))?;
        }
        if path.as_os_str().is_empty() {
            continue;
        }
        if !seen.insert(path.clone()) {
            return Err(bad(format!("{shown:?} is in it twice")));
        }
        if let Kind::Link(_) = kind {
            links.push(path.clone());
        }
        f(&path, kind, data)?;
    }
    Ok(())
}

/// Unpack the checked archive `bytes` into `into` (which must not exist yet): files read-only,
/// executable as their mode says (and the entry always), folders read-only once filled.
///
/// # Errors
/// What [`check_archive`] refuses, or a file that cannot be written.
pub fn unpack(bytes: &[u8], entry: &str, into: &Path) -> Result<(), ArtifactError> {
    use std::os::unix::fs::PermissionsExt;
    check_archive(bytes, entry)?;
    std::fs::create_dir_all(into).map_err(io(into))?;
    let entry_path = normal_path(entry);
    let mut dirs = vec![into.to_path_buf()];
    for_each_entry(bytes, |path, kind, data| {
        let target = into.join(path);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(io(parent))?;
        }
        match kind {
            Kind::Dir => {
                dirs.push(target.clone());
                std::fs::create_dir_all(&target).map_err(io(&target))
            }
            Kind::Link(to) => std::os::unix::fs::symlink(&to, &target).map_err(io(&target)),
            Kind::File { executable } => {
                std::fs::write(&target, &data).map_err(io(&target))?;
                let mode = if executable || path == entry_path {
                    0o555
                } else {
                    0o444
                };
                std::fs::set_permissions(&target, std::fs::Permissions::from_mode(mode))
                    .map_err(io(&target))
            }
        }
    })?;
    // Folders made for a file's parents count too: every folder under `into`, read-only.
    let mut stack = vec![into.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).map_err(io(&d))?.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(e.path());
            }
        }
        dirs.push(d);
    }
    for d in dirs {
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o555)).map_err(io(&d))?;
    }
    Ok(())
}

/// `path` without `.` components: `./main.py` is `main.py`.
pub fn normal_path(path: &str) -> PathBuf {
    Path::new(path)
        .components()
        .filter(|c| matches!(c, Component::Normal(_)))
        .collect()
}

/// Every file, folder and link an archive holds, by path: what an unpacked copy must hold,
/// no more and no less.
///
/// # Errors
/// As [`check_archive`].
pub fn paths(bytes: &[u8]) -> Result<std::collections::BTreeSet<PathBuf>, ArtifactError> {
    let mut out = std::collections::BTreeSet::new();
    for_each_entry(bytes, |path, _, _| {
        let mut p = path.to_path_buf();
        out.insert(p.clone());
        // The folders a file is in, even when the archive names no entry for them.
        while p.pop() && !p.as_os_str().is_empty() {
            out.insert(p.clone());
        }
        Ok(())
    })?;
    Ok(out)
}

/// The SHA-256 of each file unpacked from `bytes`, by path: what a cached copy must still hold.
///
/// # Errors
/// As [`check_archive`].
pub fn manifest(bytes: &[u8]) -> Result<Vec<(PathBuf, String)>, ArtifactError> {
    let mut out = Vec::new();
    for_each_entry(bytes, |path, kind, data| {
        if let Kind::File { .. } = kind {
            out.push((path.to_path_buf(), sha256_hex(&data)));
        }
        Ok(())
    })?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tar_with(path: &str, kind: tar::EntryType, link: Option<&str>) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        let mut ok = tar::Header::new_gnu();
        ok.set_size(3);
        ok.set_mode(0o755);
        ok.set_entry_type(tar::EntryType::Regular);
        b.append_data(&mut ok, "main.py", &b"abc"[..])
            .expect("append");
        let mut h = tar::Header::new_old();
        h.set_entry_type(kind);
        h.set_size(if kind == tar::EntryType::Regular {
            1
        } else {
            0
        });
        h.set_mode(0o644);
        // Written raw: the builder itself refuses `..` and absolute paths.
        let name = h.as_old_mut();
        name.name[..path.len()].copy_from_slice(path.as_bytes());
        if let Some(l) = link {
            name.linkname[..l.len()].copy_from_slice(l.as_bytes());
        }
        h.set_cksum();
        let data: &[u8] = if kind == tar::EntryType::Regular {
            b"x"
        } else {
            b""
        };
        b.append(&h, data).expect("append raw");
        b.into_inner().expect("tar")
    }

    #[test]
    fn archives_leaving_their_folder_are_refused() {
        for (path, kind, link, says) in [
            ("../x", tar::EntryType::Regular, None, "`..`"),
            ("/etc/x", tar::EntryType::Regular, None, "absolute"),
            ("a/../../x", tar::EntryType::Regular, None, "`..`"),
            (
                "l",
                tar::EntryType::Symlink,
                Some("/etc/passwd"),
                "absolute",
            ),
            ("d/l", tar::EntryType::Symlink, Some("../../x"), "outside"),
            ("dev", tar::EntryType::Char, None, "Char"),
            ("fifo", tar::EntryType::Fifo, None, "Fifo"),
            ("hard", tar::EntryType::Link, Some("main.py"), "Link"),
        ] {
            let bytes = tar_with(path, kind, link);
            let err = check_archive(&bytes, "main.py")
                .expect_err(path)
                .to_string();
            assert!(err.contains(says), "{path}: {err}");
            let dir = tempfile::tempdir().expect("tempdir");
            assert!(unpack(&bytes, "main.py", &dir.path().join("u")).is_err());
            assert!(!dir.path().join("x").exists() && !dir.path().join("u/dev").exists());
        }
        // A link through a link: each checked alone stays inside; together they leave.
        let mut b = tar::Builder::new(Vec::new());
        for (path, target) in [("a", "."), ("a/a/a/l", "../../..")] {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(tar::EntryType::Symlink);
            h.set_size(0);
            b.append_link(&mut h, path, target).expect("link");
        }
        let mut h = tar::Header::new_gnu();
        h.set_size(1);
        h.set_entry_type(tar::EntryType::Regular);
        b.append_data(&mut h, "main.py", &b"x"[..]).expect("file");
        let chained = b.into_inner().expect("tar");
        let err = check_archive(&chained, "main.py")
            .expect_err("chained links")
            .to_string();
        assert!(err.contains("below the link"), "{err}");
        let twice = {
            let mut b = tar::Builder::new(Vec::new());
            for _ in 0..2 {
                let mut h = tar::Header::new_gnu();
                h.set_size(1);
                h.set_entry_type(tar::EntryType::Regular);
                b.append_data(&mut h, "main.py", &b"x"[..]).expect("file");
            }
            b.into_inner().expect("tar")
        };
        let err = check_archive(&twice, "main.py")
            .expect_err("twice")
            .to_string();
        assert!(err.contains("twice"), "{err}");
        let fine = tar_with("d/l", tar::EntryType::Symlink, Some("../main.py"));
        check_archive(&fine, "main.py").expect("a link inside is fine");
        let err = check_archive(&fine, "other.py")
            .expect_err("no such entry")
            .to_string();
        assert!(err.contains("no file \"other.py\""), "{err}");
        let err = check_archive(b"not a tar at all, just some bytes", "main.py")
            .expect_err("garbage")
            .to_string();
        assert!(err.contains("refused"), "{err}");
    }

    #[test]
    fn a_folder_packs_the_same_twice_and_unpacks_whole() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join("lib")).expect("mkdir");
        std::fs::write(dir.path().join("lib/helper.py"), "X = 1\n").expect("write");
        std::fs::write(dir.path().join("main.py"), "#!/usr/bin/env python3\n").expect("write");
        let one = pack_folder(dir.path(), "main.py", DEFAULT_MAX_BYTES).expect("pack");
        let two = pack_folder(dir.path(), "./main.py", DEFAULT_MAX_BYTES).expect("pack");
        assert_eq!(sha256_hex(&one), sha256_hex(&two));
        let out = tempfile::tempdir().expect("tempdir");
        let root = out.path().join("root");
        unpack(&one, "main.py", &root).expect("unpack");
        assert_eq!(
            std::fs::read_to_string(root.join("lib/helper.py")).expect("read"),
            "X = 1\n"
        );
        let mode = std::fs::metadata(root.join("main.py"))
            .expect("stat")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o555, "the entry runs, and is not writable");
        assert_eq!(manifest(&one).expect("manifest").len(), 2);
        let err = pack_folder(dir.path(), "main.py", 10)
            .expect_err("too big")
            .to_string();
        assert!(err.contains("over the limit of 10 bytes"), "{err}");
        let err = pack_folder(dir.path(), "../main.py", DEFAULT_MAX_BYTES)
            .expect_err("..")
            .to_string();
        assert!(err.contains("`..`"), "{err}");
    }
}
