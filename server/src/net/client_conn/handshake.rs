//! A client's first message: `hello`, with the protocol version and the
//! token that decides its role (admin, a named token, or read-only).

use std::time::Duration;

use tracing::{debug, warn};
use tunefleet_shared::protocol::{
    close_code, ClientCommand, ClientRequest, ErrorCode, ReplyBody, Role, ServerMessage,
    PROTOCOL_VERSION,
};
use tunefleet_shared::secrets_equal;

use super::error;
use crate::net::{AppState, Connection};
use crate::tokens::MASTER_ADMIN;

const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The role, the client's self-chosen name (for the log) and who it acts as:
/// `admin` for the master's admin token, a named token's name, or empty for
/// a read-only client.
pub(super) async fn handshake(
    conn: &mut Connection,
    state: &AppState,
) -> Option<(Role, String, String)> {
    let text = conn.first_text(HANDSHAKE_TIMEOUT, "hello request").await?;
    let request = match serde_json::from_str::<ClientRequest>(&text) {
        Ok(request) => request,
        Err(e) => {
            let version = serde_json::from_str::<serde_json::Value>(&text)
                .ok()
                .and_then(|v| v.get("protocol").and_then(|p| p.as_u64()));
            if let Some(v) = version.filter(|v| *v != u64::from(PROTOCOL_VERSION)) {
                let reason = format!(
                    "protocol version mismatch: master speaks {PROTOCOL_VERSION}, client sent {v}"
                );
                conn.close(close_code::PROTOCOL_MISMATCH, &reason).await;
            } else {
                conn.close(close_code::HANDSHAKE, &format!("invalid hello: {e}"))
                    .await;
            }
            return None;
        }
    };
    let ClientCommand::Hello {
        protocol,
        token,
        client,
    } = request.command
    else {
        let reason = "the first request must be hello";
        refuse(
            conn,
            request.id,
            ErrorCode::BadRequest,
            close_code::HANDSHAKE,
            reason,
        )
        .await;
        return None;
    };
    if protocol != PROTOCOL_VERSION {
        let reason = format!(
            "protocol version mismatch: master speaks {PROTOCOL_VERSION}, client sent {protocol}"
        );
        let (code, close) = (ErrorCode::ProtocolMismatch, close_code::PROTOCOL_MISMATCH);
        refuse(conn, request.id, code, close, &reason).await;
        return None;
    }
    let named = token.as_deref().and_then(|t| state.tokens.name_of(t));
    let (role, who) = match token {
        Some(t) if secrets_equal(&t, &state.config.admin_token) => {
            (Role::Admin, MASTER_ADMIN.to_string())
        }
        Some(_) if named.is_some() => (Role::Admin, named.unwrap_or_default()),
        Some(_) => {
            warn!(
                client = %client_name(client.as_deref()),
                "client refused: wrong token"
            );
            let reason = "unauthorized: wrong token";
            let (code, close) = (ErrorCode::Unauthorized, close_code::UNAUTHORIZED);
            refuse(conn, request.id, code, close, reason).await;
            return None;
        }
        None if state.config.public_read => (Role::Read, String::new()),
        None => {
            let reason = "unauthorized: this master needs a token (--token or TUNEFLEET_TOKEN)";
            let (code, close) = (ErrorCode::Unauthorized, close_code::UNAUTHORIZED);
            refuse(conn, request.id, code, close, reason).await;
            return None;
        }
    };
    debug!(
        client = %client_name(client.as_deref()),
        ?role,
        %who,
        "client connected"
    );
    let welcome = ServerMessage::Reply {
        id: request.id,
        body: ReplyBody::Welcome {
            server_version: env!("CARGO_PKG_VERSION").into(),
            protocol: PROTOCOL_VERSION,
            role,
        },
    };
    conn.send(&welcome).await.ok()?;
    Some((role, client_name(client.as_deref()), who))
}

/// Tells the client why in an error reply to its request, then closes the
/// socket with `close` and the same reason.
async fn refuse(conn: &mut Connection, id: u64, code: ErrorCode, close: u16, reason: &str) {
    let _ = conn.send(&error(Some(id), code, reason.into())).await;
    conn.close(close, reason).await;
}

/// The client's self-chosen name for the log: printable, at most 64 chars.
pub(super) fn client_name(name: Option<&str>) -> String {
    let name: String = name
        .unwrap_or("?")
        .chars()
        .filter(|c| !c.is_control())
        .take(64)
        .collect();
    if name.is_empty() {
        "?".into()
    } else {
        name
    }
}
