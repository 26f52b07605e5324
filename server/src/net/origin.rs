//! The `Origin` check on WebSocket upgrades, against cross-site WebSocket
//! hijacking: a page on another site must not be able to open a socket to the
//! master from a visitor's browser (browsers send `Origin` on every WebSocket
//! upgrade and do not let pages forge it).
//!
//! Rule: no `Origin` header → allowed (CLI, workers, scripts are not
//! browsers); an `Origin` whose host and port equal the request's `Host` →
//! allowed (same origin: the dashboard served by this master); an `Origin` on
//! the `--allowed-origin` list → allowed (`*` allows every origin); anything
//! else, `Origin: null` included → refused.

use axum::http::header::{HOST, ORIGIN};
use axum::http::HeaderMap;

/// The origins allowed besides the master's own.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OriginPolicy {
    /// Normalised origins (`scheme://host[:port]`, lowercase, default port left out).
    pub allowed: Vec<String>,
    /// `--allowed-origin '*'`: no check at all.
    pub any: bool,
}

impl OriginPolicy {
    /// Builds the policy from `--allowed-origin` values; an error names the
    /// value that is not an origin.
    pub fn new(values: &[String]) -> Result<Self, String> {
        let mut policy = OriginPolicy::default();
        for value in values {
            if value.trim() == "*" {
                policy.any = true;
                continue;
            }
            let normalised = normalise_origin(value).ok_or_else(|| {
                format!(
                    "--allowed-origin `{value}` is not an origin (expected SCHEME://HOST[:PORT], \
                     e.g. https://dash.example.com:8443, or *)"
                )
            })?;
            policy.allowed.push(normalised);
        }
        Ok(policy)
    }

    /// `Ok` when the upgrade may proceed, else the reason to log and answer.
    pub fn check(&self, headers: &HeaderMap) -> Result<(), String> {
        let Some(origin) = headers.get(ORIGIN) else {
            return Ok(());
        };
        if self.any {
            return Ok(());
        }
        let origin_text = String::from_utf8_lossy(origin.as_bytes()).into_owned();
        let refuse = || {
            Err(format!(
                "cross-origin WebSocket refused: Origin `{origin_text}` is not this master's \
                 origin and not allowed by --allowed-origin"
            ))
        };
        let Some(normalised) = normalise_origin(&origin_text) else {
            return refuse();
        };
        if self.allowed.contains(&normalised) {
            return Ok(());
        }
        let host = headers
            .get(HOST)
            .and_then(|h| h.to_str().ok())
            .map(str::to_ascii_lowercase);
        let Some(host) = host else {
            return refuse();
        };
        let (scheme, authority) = normalised
            .split_once("://")
            .expect("normalised origins have a scheme");
        // `Host` leaves the port out when it is the scheme's default one.
        let same = normalise_authority(&host, default_port(scheme)).as_deref() == Some(authority);
        if same {
            Ok(())
        } else {
            refuse()
        }
    }
}

fn default_port(scheme: &str) -> Option<u16> {
    match scheme {
        "http" | "ws" => Some(80),
        "https" | "wss" => Some(443),
        _ => None,
    }
}

/// `HTTPS://Dash.Example.com:443/` → `https://dash.example.com`; `None` for
/// anything that is not `scheme://host[:port]` (an opaque `null` origin, a
/// path, user info).
pub fn normalise_origin(text: &str) -> Option<String> {
    let text = text.trim().trim_end_matches('/');
    let (scheme, authority) = text.split_once("://")?;
    let scheme = scheme.to_ascii_lowercase();
    if scheme.is_empty()
        || !scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
    {
        return None;
    }
    let authority = normalise_authority(authority, default_port(&scheme))?;
    Some(format!("{scheme}://{authority}"))
}

/// `Host:443` → `host` when 443 is the default port; `None` when it is not a
/// `host[:port]`.
fn normalise_authority(authority: &str, default: Option<u16>) -> Option<String> {
    let authority = authority.to_ascii_lowercase();
    if authority.is_empty() || authority.contains(['/', '@', '?', '#', ' ', '\\']) {
        return None;
    }
    // `[v6]:port` or `host:port`; a bare IPv6 address must be bracketed.
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (v6, after) = rest.split_once(']')?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':')?),
        };
        (format!("[{v6}]"), port)
    } else {
        match authority.split_once(':') {
            Some((h, p)) => (h.to_string(), Some(p)),
            None => (authority.clone(), None),
        }
    };
    if host.is_empty() || host == "[]" {
        return None;
    }
    match port {
        None => Some(host),
        Some(p) => {
            let port: u16 = p.parse().ok()?;
            if Some(port) == default {
                Some(host)
            } else {
                Some(format!("{host}:{port}"))
            }
        }
    }
}

#[cfg(test)]
mod tests;
