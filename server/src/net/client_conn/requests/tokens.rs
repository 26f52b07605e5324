//! Named admin tokens: create (the reply carries the token's text, once),
//! revoke and list. `check_access` keeps them to the master's own admin
//! token.

use tunefleet_shared::protocol::{ErrorCode, ReplyBody, SecretText, ServerMessage};

use super::Asked;
use crate::core::{Change, Read};
use crate::tokens::TokenError;

pub(super) async fn create(name: String, asked: &Asked<'_>) -> Result<ReplyBody, ServerMessage> {
    let token_name = name.clone();
    let token = asked
        .ask(|reply| Change::CreateToken {
            name: token_name,
            reply,
        })
        .await?
        .map_err(|e| token_error(asked, e))?;
    Ok(ReplyBody::TokenCreated {
        name,
        token: SecretText(token),
    })
}

pub(super) async fn revoke(name: String, asked: &Asked<'_>) -> Result<ReplyBody, ServerMessage> {
    let token_name = name.clone();
    asked
        .ask(|reply| Change::RevokeToken {
            name: token_name,
            reply,
        })
        .await?
        .map_err(|e| token_error(asked, e))?;
    Ok(ReplyBody::TokenRevoked { name })
}

pub(super) async fn list(asked: &Asked<'_>) -> Result<ReplyBody, ServerMessage> {
    let tokens = asked
        .read(|reply| Read::ListTokens { reply }, |_| None)
        .await?;
    Ok(ReplyBody::Tokens { tokens })
}

fn token_error(asked: &Asked<'_>, e: TokenError) -> ServerMessage {
    let code = match e {
        TokenError::BadName(_) => ErrorCode::BadRequest,
        TokenError::Exists(_) => ErrorCode::InvalidState,
        TokenError::Unknown(_) => ErrorCode::NotFound,
    };
    asked.refuse(code, e.to_string())
}
