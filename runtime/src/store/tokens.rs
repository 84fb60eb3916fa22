//! API tokens: random secrets shown once, stored as SHA-256, with a role and an expiry.

use base64::Engine;
use chrono::{DateTime, Utc};
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::{Result, Store, StoreError};

/// What a token may do; each role includes the ones below it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Reads.
    Viewer,
    /// Reads, updates steps, starts workflows, registers objects.
    Robot,
    /// Everything: loads templates, deletes workflows, injects priority.
    Admin,
}

impl Role {
    pub fn parse(text: &str) -> Option<Role> {
        match text {
            "viewer" => Some(Role::Viewer),
            "robot" => Some(Role::Robot),
            "admin" => Some(Role::Admin),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Robot => "robot",
            Role::Admin => "admin",
        }
    }
}

#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct TokenRow {
    pub id: i64,
    pub name: String,
    pub role: String,
    pub created_at: DateTime<Utc>,
    pub expires_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
}

fn digest(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

impl Store {
    /// Create a token; returns its id and the secret, which is not stored and cannot be shown
    /// again.
    pub async fn token_create(
        &self,
        role: Role,
        name: &str,
        expires_at: Option<DateTime<Utc>>,
    ) -> Result<(i64, String)> {
        // A name is printed in lists and logs, one line each: no control characters (a newline
        // in it forged a second row of `tokens list`), and short.
        if name.chars().any(char::is_control) || name.chars().count() > 200 {
            return Err(StoreError::Invalid {
                field: "name",
                value: name.chars().take(40).collect(),
                reason: "a token's name is at most 200 characters, none of them a control character such as a newline",
            });
        }
        let secret: [u8; 32] = rand::random();
        let token = format!(
            "wdo_{}",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(secret)
        );
        let id: i64 = sqlx::query_scalar(
            "insert into workdo.tokens (name, role, sha256, expires_at) values ($1, $2, $3, $4) returning id",
        )
        .bind(name)
        .bind(role.as_str())
        .bind(digest(&token))
        .bind(expires_at)
        .fetch_one(&self.pool)
        .await?;
        Ok((id, token))
    }

    /// The role of a valid (known, unexpired, unrevoked) token.
    /// A token scoped to job `workflow` and `signals` (of role viewer: it may do nothing else):
    /// a reviewer's mail can carry a link that can do exactly that.
    pub async fn token_create_scoped(
        &self,
        workflow: i64,
        signals: &[String],
        name: &str,
        expires_at: Option<DateTime<Utc>>,
    ) -> Result<(i64, String)> {
        let (id, token) = self.token_create(Role::Viewer, name, expires_at).await?;
        sqlx::query("update workdo.tokens set workflow_id = $2, signals = $3 where id = $1")
            .bind(id)
            .bind(workflow)
            .bind(signals)
            .execute(&self.pool)
            .await?;
        Ok((id, token))
    }

    /// A live token's role, and its scope (job, signals) when it has one.
    pub async fn token_auth(
        &self,
        token: &str,
    ) -> Result<Option<(Role, Option<(i64, Vec<String>)>)>> {
        let row: Option<(String, Option<i64>, Option<Vec<String>>)> = sqlx::query_as(
            "select role, workflow_id, signals from workdo.tokens
              where sha256 = $1 and revoked_at is null and (expires_at is null or expires_at > now())",
        )
        .bind(digest(token))
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.and_then(|(role, workflow, signals)| {
            Role::parse(&role).map(|r| (r, workflow.map(|w| (w, signals.unwrap_or_default()))))
        }))
    }

    pub async fn token_role(&self, token: &str) -> Result<Option<Role>> {
        let role: Option<String> = sqlx::query_scalar(
            "select role from workdo.tokens
              where sha256 = $1 and revoked_at is null and (expires_at is null or expires_at > now())",
        )
        .bind(digest(token))
        .fetch_optional(&self.pool)
        .await?;
        Ok(role.as_deref().and_then(Role::parse))
    }

    pub async fn token_list(&self) -> Result<Vec<TokenRow>> {
        Ok(sqlx::query_as(
            "select id, name, role, created_at, expires_at, revoked_at from workdo.tokens order by id",
        )
        .fetch_all(&self.pool)
        .await?)
    }

    pub async fn token_revoke(&self, id: i64) -> Result<()> {
        let n = sqlx::query(
            "update workdo.tokens set revoked_at = coalesce(revoked_at, now()) where id = $1",
        )
        .bind(id)
        .execute(&self.pool)
        .await?
        .rows_affected();
        if n == 0 {
            return Err(StoreError::Invalid {
                field: "token id",
                value: id.to_string(),
                reason: "no such token",
            });
        }
        Ok(())
    }
}
