//! The private cluster's password: made once, kept owner-only beside `pgdata/`, marked applied
//! once the role has it and `pg_hba.conf` asks for it.

use std::fs::{self, OpenOptions};
use std::path::Path;

use super::{APPLIED_FILE, PASSWORD_FILE, PgError, io_err};

/// Whether an `pg_hba.conf` lets any connection in without a password.
pub(super) fn trusts_anyone(hba: &str) -> bool {
    hba.lines()
        .map(|l| l.split('#').next().unwrap_or(""))
        .any(|l| l.split_whitespace().any(|w| w == "trust"))
}

/// The cluster's password from `dir`'s [`PASSWORD_FILE`], when there is one.
pub(super) fn read_password(dir: &Path) -> Result<Option<String>, PgError> {
    let path = dir.join(PASSWORD_FILE);
    match fs::read_to_string(&path) {
        Ok(pw) if !pw.trim().is_empty() => Ok(Some(pw.trim().to_string())),
        Ok(_) => Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_err(&path)(e)),
    }
}

/// A new password (256 random bits, hex) written owner-only to `dir`'s [`PASSWORD_FILE`].
pub(super) fn make_password(dir: &Path) -> Result<String, PgError> {
    let path = dir.join(PASSWORD_FILE);
    let pw = hex::encode(rand::random::<[u8; 32]>());
    // Written whole under another name, then renamed: a crash leaves no half a password.
    let tmp = dir.join(format!("{PASSWORD_FILE}.new"));
    write_private(&tmp, pw.as_bytes())?;
    fs::rename(&tmp, &path).map_err(io_err(&path))?;
    Ok(pw)
}

/// Mark the password applied (the role has it, `pg_hba.conf` asks for it, the server reloaded).
pub(super) fn mark_applied(dir: &Path) -> Result<(), PgError> {
    let path = dir.join(APPLIED_FILE);
    fs::write(
        &path,
        "the password in ./password is the postgres role's, and pg_hba.conf asks for it\n",
    )
    .map_err(io_err(&path))
}

/// Write `bytes` to a new file at `path` that only its owner may read (mode 0600 from birth).
pub(super) fn write_private(path: &Path, bytes: &[u8]) -> Result<(), PgError> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let _ = fs::remove_file(path);
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(io_err(path))?;
    f.write_all(bytes).map_err(io_err(path))
}
