//! `tunefleet token create|revoke|list`: named admin tokens, so that the
//! trace and the dashboard say who submitted, cancelled or retried a job.
//! Needs the master's own admin token (`--token`/`TUNEFLEET_TOKEN`).
//!
//! `create NAME` prints the new token on stdout, once (the master keeps only
//! its SHA-256); give it to that person or script as their `TUNEFLEET_TOKEN`.
//! `revoke NAME` ends it: open sessions lose admin rights at their next
//! request. `list` prints names and creation times (`--json` for scripts).

use super::{emit, ConnectArgs};

#[derive(clap::Args, Debug)]
pub struct TokenArgs {
    #[command(subcommand)]
    pub action: TokenAction,
}

#[derive(clap::Subcommand, Debug)]
pub enum TokenAction {
    /// Create a named admin token and print it (shown once).
    Create {
        #[command(flatten)]
        connect: ConnectArgs,
        /// 1 to 64 of letters, digits, `.`, `_`, `-`.
        name: String,
    },
    /// Revoke a named admin token.
    Revoke {
        #[command(flatten)]
        connect: ConnectArgs,
        name: String,
    },
    /// List the named admin tokens (never the tokens themselves).
    List {
        #[command(flatten)]
        connect: ConnectArgs,
        /// As a JSON array of {name, created_at}.
        #[arg(long)]
        json: bool,
    },
}

pub async fn run(args: TokenArgs) -> anyhow::Result<()> {
    match args.action {
        TokenAction::Create { connect, name } => {
            let mut client = connect.connect().await?;
            let token = client
                .create_token(&name)
                .await
                .map_err(|e| connect.explain(e))?;
            let _ = client.close().await;
            eprintln!("created the admin token `{name}`; it is shown once, keep it:");
            emit(&format!("{token}\n"))
        }
        TokenAction::Revoke { connect, name } => {
            let mut client = connect.connect().await?;
            client
                .revoke_token(&name)
                .await
                .map_err(|e| connect.explain(e))?;
            let _ = client.close().await;
            eprintln!("revoked the admin token `{name}`");
            Ok(())
        }
        TokenAction::List { connect, json } => {
            let mut client = connect.connect().await?;
            let tokens = client.list_tokens().await.map_err(|e| connect.explain(e))?;
            let _ = client.close().await;
            if json {
                return emit(&format!("{}\n", serde_json::to_string_pretty(&tokens)?));
            }
            if tokens.is_empty() {
                return emit("no named tokens\n");
            }
            let mut text = String::new();
            for t in tokens {
                text.push_str(&format!(
                    "{}  created {}\n",
                    t.name,
                    utc_text(t.created_at.0)
                ));
            }
            emit(&text)
        }
    }
}

/// `2026-11-24 00:31 UTC` for milliseconds since the epoch.
fn utc_text(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60
    )
}

#[cfg(test)]
mod tests;
