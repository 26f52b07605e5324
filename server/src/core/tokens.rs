//! Named admin tokens on the core: the book (`crate::tokens`) changed, and
//! its `meta` rows written with the batch, so the registry the network
//! layer checks is never ahead of the store.

use tokio::sync::oneshot;
use tracing::info;
use tunefleet_shared::protocol::Millis;

use super::{Batch, Core};
use crate::tokens::TokenError;

impl Core {
    /// A new named token; the reply carries its text (never logged).
    pub(super) fn create_token(
        &mut self,
        name: &str,
        reply: oneshot::Sender<Result<String, TokenError>>,
        now: Millis,
        batch: &mut Batch,
    ) {
        let secret = crate::tokens::new_secret();
        let r = self.tokens.create(name, &secret, now).map(|meta| {
            info!(token = %name, "named admin token created");
            batch.meta.extend(meta);
            secret
        });
        batch.reply(reply, r);
    }

    pub(super) fn revoke_token(
        &mut self,
        name: &str,
        reply: oneshot::Sender<Result<(), TokenError>>,
        batch: &mut Batch,
    ) {
        let r = self.tokens.revoke(name).map(|meta| {
            info!(token = %name, "named admin token revoked");
            batch.meta.extend(meta);
        });
        batch.reply(reply, r);
    }
}
