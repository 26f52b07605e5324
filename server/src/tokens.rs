//! Named admin tokens: several people or scripts, each with a token of its
//! own, so that the trace and the dashboard say who submitted, cancelled or
//! retried a job.
//!
//! The master's own `--admin-token` is `admin`; it alone creates, lists and
//! revokes named tokens. A named token has the admin role for jobs and model
//! runs. Only its SHA-256 is kept: in the state database's `meta` table
//! (`token:NAME` → `{"sha256":..,"created_at":..}`, no schema change, so it
//! lives in SQLite or PostgreSQL alike and follows a failover), and in the
//! [`TokenRegistry`] the network layer checks a client's `hello` against.
//! The core owns the [`TokenBook`] and updates both, so the registry never
//! knows a token the store does not.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tunefleet_shared::protocol::{check_token_name, Millis, TokenInfo};

/// The name the master's own admin token acts under.
pub const MASTER_ADMIN: &str = "admin";

/// `meta` keys of named tokens start with this.
pub const META_PREFIX: &str = "token:";

/// Hex SHA-256 of a token's text: what is stored and compared.
pub fn digest(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// Digest → name, read by every client handshake and admin request.
#[derive(Clone, Debug, Default)]
pub struct TokenRegistry(Arc<RwLock<HashMap<String, String>>>);

impl TokenRegistry {
    /// The name of the named token whose text is `token`, if any.
    pub fn name_of(&self, token: &str) -> Option<String> {
        let digest = digest(token);
        self.0.read().ok()?.get(&digest).cloned()
    }

    /// Whether the token `name` is still valid (not revoked since the
    /// session began).
    pub fn has_name(&self, name: &str) -> bool {
        self.0
            .read()
            .map(|map| map.values().any(|n| n == name))
            .unwrap_or(false)
    }

    fn set(&self, entries: impl Iterator<Item = (String, String)>) {
        if let Ok(mut map) = self.0.write() {
            *map = entries.collect();
        }
    }
}

/// A stored named token.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TokenRecord {
    pub sha256: String,
    pub created_at: Millis,
}

/// What a token command changed: `meta` rows to write (`None`: delete).
pub type MetaChanges = Vec<(String, Option<String>)>;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum TokenError {
    #[error("{0}")]
    BadName(String),
    #[error("a token named `{0}` exists; revoke it first")]
    Exists(String),
    #[error("no token named `{0}`")]
    Unknown(String),
}

/// The core's copy of the named tokens.
#[derive(Debug, Default)]
pub struct TokenBook {
    tokens: BTreeMap<String, TokenRecord>,
    registry: TokenRegistry,
}

impl TokenBook {
    /// From the stored `meta` rows (`token:NAME`, JSON); unreadable rows are
    /// skipped with a warning (the token then stops working, nothing else).
    pub fn load(rows: Vec<(String, String)>, registry: TokenRegistry) -> TokenBook {
        let mut tokens = BTreeMap::new();
        for (key, value) in rows {
            let Some(name) = key.strip_prefix(META_PREFIX) else {
                continue;
            };
            match serde_json::from_str::<TokenRecord>(&value) {
                Ok(record) => {
                    tokens.insert(name.to_string(), record);
                }
                Err(e) => tracing::warn!(token = name, "unreadable stored token, ignored: {e}"),
            }
        }
        let book = TokenBook { tokens, registry };
        book.publish();
        book
    }

    fn publish(&self) {
        self.registry.set(
            self.tokens
                .iter()
                .map(|(name, r)| (r.sha256.clone(), name.clone())),
        );
    }

    /// A new token `name` with the text `secret`.
    pub fn create(
        &mut self,
        name: &str,
        secret: &str,
        now: Millis,
    ) -> Result<MetaChanges, TokenError> {
        check_token_name(name).map_err(TokenError::BadName)?;
        if self.tokens.contains_key(name) {
            return Err(TokenError::Exists(name.to_string()));
        }
        let record = TokenRecord {
            sha256: digest(secret),
            created_at: now,
        };
        let row = serde_json::to_string(&record).unwrap_or_default();
        self.tokens.insert(name.to_string(), record);
        self.publish();
        Ok(vec![(format!("{META_PREFIX}{name}"), Some(row))])
    }

    pub fn revoke(&mut self, name: &str) -> Result<MetaChanges, TokenError> {
        if self.tokens.remove(name).is_none() {
            return Err(TokenError::Unknown(name.to_string()));
        }
        self.publish();
        Ok(vec![(format!("{META_PREFIX}{name}"), None)])
    }

    pub fn registry(&self) -> TokenRegistry {
        self.registry.clone()
    }

    pub fn list(&self) -> Vec<TokenInfo> {
        self.tokens
            .iter()
            .map(|(name, r)| TokenInfo {
                name: name.clone(),
                created_at: r.created_at,
            })
            .collect()
    }
}

/// A fresh token's text: 256 random bits, hex, with a prefix that says what
/// it is when found in a file.
pub fn new_secret() -> String {
    use rand::RngCore;
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    format!("tft_{}", hex::encode(bytes))
}

#[cfg(test)]
mod tests;
