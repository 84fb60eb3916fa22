//! `--idempotency-key` for commands that change things (`start`, `signal`): the same keys as
//! the API's `Idempotency-Key`, kept in `workdo.idempotency` under the scope `cli`.

use std::io::Write;

use anyhow::{Result, bail};
use serde_json::Value;

use crate::store::Store;

/// With an idempotency key: claim it for `request`. Returns true when the request was applied
/// before under this key (its first answer is printed, and nothing is to be done).
///
/// # Errors
/// The key is in use for another request or by a command still running, or the database
/// refuses.
pub(crate) async fn once_begin(
    store: &Store,
    key: Option<&str>,
    request: &Value,
    json: bool,
    out: &mut impl Write,
) -> Result<bool> {
    let Some(key) = key else { return Ok(false) };
    if !(1..=255).contains(&key.len()) || !key.bytes().all(|b| b.is_ascii_graphic()) {
        bail!("--idempotency-key must be 1 to 255 visible ASCII characters");
    }
    use sha2::Digest;
    let fingerprint = hex::encode(sha2::Sha256::digest(request.to_string().as_bytes()));
    match store.idempotency_claim("cli", key, &fingerprint).await? {
        crate::store::Claim::New => Ok(false),
        crate::store::Claim::Answered { body, .. } => {
            let answer = String::from_utf8_lossy(&body);
            if json {
                writeln!(out, "{answer}")?;
            } else {
                writeln!(
                    out,
                    "already applied under idempotency key {key}; nothing done again. The first answer: {answer}"
                )?;
            }
            Ok(true)
        }
        crate::store::Claim::Running => bail!(
            "idempotency key {key} is held by a command still running (or one that stopped before it finished); try again later"
        ),
        crate::store::Claim::OtherRequest => {
            bail!("idempotency key {key} was used for a different command; use a new key")
        }
    }
}

/// With an idempotency key: keep `done`'s answer for repeats, or give the key back when the
/// command failed (nothing was applied).
///
/// # Errors
/// The database refuses.
pub(crate) async fn once_end<T: serde::Serialize>(
    store: &Store,
    key: Option<&str>,
    done: &Result<T>,
) -> Result<()> {
    let Some(key) = key else { return Ok(()) };
    match done {
        Ok(answer) => {
            let body = serde_json::to_vec(answer)?;
            store
                .idempotency_finish("cli", key, 0, Some("application/json"), &body)
                .await?;
        }
        Err(_) => store.idempotency_release("cli", key).await?,
    }
    Ok(())
}
