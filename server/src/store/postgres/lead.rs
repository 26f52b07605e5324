//! The lead between masters on one PostgreSQL database, and the deadlines
//! that keep it honest when the network fails in silence.
//!
//! **The lock.** A master leads while its writing session holds a
//! session-level advisory lock ([`LEAD_LOCK`]). PostgreSQL releases it only
//! when that session ends, and no other session can hold it meanwhile, so
//! the lock is also the fence: a commit can only come from the session that
//! holds it, and a master that lost its session can write only after a new
//! session took the lock again ([`take_lead_again`]). Two masters never
//! commit to the same database.
//!
//! **Silence.** A partition sends no FIN and no RST. Left to TCP's
//! defaults, the server would keep the leader's orphaned session, and with
//! it the lock, for about two hours (`tcp_keepalives_idle` 7200 s), while
//! the standby waits; and the leader's own calls would wait a quarter of an
//! hour for TCP to give up. So both ends of every session get deadlines:
//! the server side, set by the session itself (`session_settings`: the
//! server's keepalives and `tcp_user_timeout` apply per session), ends a
//! silent session within about 5 s (keepalive probes while it waits for
//! the client, a user timeout while its data is unacknowledged);
//! the client side fails a call whose data goes unacknowledged for
//! [`TCP_USER_TIMEOUT`], or whose answer stops coming while keepalives go
//! unanswered. `statement_timeout` bounds a statement the server itself
//! cannot finish (a lock wait, a stuck disk).
//!
//! **Coming back.** A leader whose session failed opens a new one off the
//! core thread (`PgStore::probe`) and must take the lock at once. If the
//! holder is its own previous session, which the partition left behind on
//! the server, it ends that session (`pg_terminate_backend`) and takes the
//! lock; if another master holds it, the answer is `LeadLost`, naming that
//! master (its `application_name` says where it listens), and this master
//! steps down to a standby instead of exiting: the farm is never left
//! without a master by a leader that came back.

use std::time::Duration;

use postgres::{Client, NoTls};

use super::super::{redact, Durability, Standby, StoreError};

/// The advisory lock key masters contend for ("tunefleet" in ASCII, cut to 8
/// bytes). One farm per database.
const LEAD_LOCK: i64 = 0x7475_6e65_666c_6565;

/// How long data this master sent may go unacknowledged before the
/// connection counts as dead (TCP_USER_TIMEOUT, client side).
pub(super) const TCP_USER_TIMEOUT: Duration = Duration::from_secs(5);
/// Keepalives, on both sides of the socket: after this much idle time, a
/// probe every interval; the connection is dead after `COUNT` unanswered.
/// With the user timeout, a silent peer is given up within about 5 s
/// (idle 2 s + 3 probes, or 5 s of unacknowledged data).
const KEEPALIVE_IDLE: Duration = Duration::from_secs(2);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(1);
const KEEPALIVE_COUNT: u32 = 3;
/// The most one statement may run on the server (a lock wait, a stuck
/// disk); a commit of thousands of jobs takes well under a second.
const STATEMENT_TIMEOUT: Duration = Duration::from_secs(60);

/// What a session asks of the server for itself: the client's deadlines on
/// the server's side of the socket too (PostgreSQL takes keepalives in
/// seconds, the user timeout in ms), so that a leader's session that went
/// silent ends, and frees the lead, within seconds; and the statement bound.
fn session_settings() -> String {
    format!(
        "SET tcp_keepalives_idle = {}; SET tcp_keepalives_interval = {}; \
         SET tcp_keepalives_count = {KEEPALIVE_COUNT}; SET tcp_user_timeout = {}; \
         SET statement_timeout = {}",
        KEEPALIVE_IDLE.as_secs(),
        KEEPALIVE_INTERVAL.as_secs(),
        TCP_USER_TIMEOUT.as_millis(),
        STATEMENT_TIMEOUT.as_millis(),
    )
}

/// How long a connection may take to open: at start-up, and off the core
/// thread when a probe replaces a lost session.
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
pub(super) const RECONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// A session that holds the lead, and the server process behind it (which
/// may outlive the connection after a partition).
pub(super) struct Lead {
    pub(super) client: Client,
    pub(super) pid: i32,
}

/// Connects with the client-side deadlines; `name` is the session's
/// `application_name`.
pub(super) fn connect(
    url: &str,
    timeout: Duration,
    name: &str,
) -> Result<(Client, String), StoreError> {
    let path = redact(url);
    let err = |cause| StoreError::Postgres {
        path: path.clone(),
        cause,
    };
    let mut config: postgres::Config = url.parse().map_err(err)?;
    if config.get_password().is_none() {
        if let Ok(password) = std::env::var("PGPASSWORD") {
            config.password(password);
        }
    }
    config
        .application_name(name)
        .connect_timeout(timeout)
        .tcp_user_timeout(TCP_USER_TIMEOUT)
        .keepalives(true)
        .keepalives_idle(KEEPALIVE_IDLE)
        .keepalives_interval(KEEPALIVE_INTERVAL)
        .keepalives_retries(KEEPALIVE_COUNT);
    let mut client = config.connect(NoTls).map_err(err)?;
    client.batch_execute(&session_settings()).map_err(err)?;
    Ok((client, path))
}

fn try_lock(client: &mut Client) -> Result<bool, postgres::Error> {
    Ok(client
        .query_one("SELECT pg_try_advisory_lock($1)", &[&LEAD_LOCK])?
        .get(0))
}

fn backend_pid(client: &mut Client) -> Result<i32, postgres::Error> {
    Ok(client.query_one("SELECT pg_backend_pid()", &[])?.get(0))
}

pub(super) fn set_durability(
    client: &mut Client,
    durability: Durability,
) -> Result<(), postgres::Error> {
    if durability == Durability::Full {
        client.batch_execute("SET synchronous_commit = on")?;
    }
    Ok(())
}

/// The session holding the lead in this database, if any.
struct Holder {
    pid: i32,
    /// Who it is, for the log: its name, address, server process and age.
    who: String,
}

fn lock_holder(client: &mut Client) -> Result<Option<Holder>, postgres::Error> {
    // A bigint advisory key is split over classid (high half) and objid.
    let (high, low) = (LEAD_LOCK >> 32, LEAD_LOCK & 0xffff_ffff);
    let row = client.query_opt(
        "SELECT l.pid, coalesce(a.application_name, ''),
                coalesce(host(a.client_addr), 'a local socket'),
                coalesce(to_char(a.backend_start, 'YYYY-MM-DD HH24:MI:SS TZ'), 'unknown')
         FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
         WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
           AND l.classid::int8 = $1 AND l.objid::int8 = $2
           AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())",
        &[&high, &low],
    )?;
    Ok(row.map(|row| {
        let (pid, name, from, since): (i32, String, String, String) =
            (row.get(0), row.get(1), row.get(2), row.get(3));
        let name = if name.is_empty() { "a session" } else { &name };
        Holder {
            pid,
            who: format!("`{name}` connected from {from}, server process {pid}, since {since}"),
        }
    }))
}

/// Takes the lead on a new connection, waiting as a standby while another
/// master holds it (`on_wait` once, with who leads). A standby outlives the
/// server's restart, or its own session's end: it connects again.
pub(super) fn wait_for_lead(
    url: &str,
    standby: &Standby,
    on_wait: &mut dyn FnMut(&str),
) -> Result<(Lead, String), StoreError> {
    let (mut client, path) = connect(url, CONNECT_TIMEOUT, &standby.name)?;
    let err = |cause| StoreError::Postgres {
        path: path.clone(),
        cause,
    };
    let mut waiting = false;
    loop {
        match try_lock(&mut client) {
            Ok(true) => break,
            Ok(false) if !waiting => {
                waiting = true;
                let who = lock_holder(&mut client).ok().flatten();
                on_wait(who.as_ref().map_or("a session that just ended", |h| &h.who));
            }
            Ok(false) => {}
            Err(e) if waiting => {
                tracing::warn!(state = %path, "lost the database while waiting as standby ({e}); connecting again");
                std::thread::sleep(standby.poll.max(Duration::from_millis(500)));
                if let Ok((again, _)) = connect(url, RECONNECT_TIMEOUT, &standby.name) {
                    client = again;
                }
                continue;
            }
            Err(e) => return Err(err(e)),
        }
        std::thread::sleep(standby.poll);
    }
    let pid = backend_pid(&mut client).map_err(err)?;
    Ok((Lead { client, pid }, path))
}

/// How long a new session waits for the previous one, once ended, to let
/// go of the lock.
const ORPHAN_WAIT: Duration = Duration::from_secs(2);

/// A new session for a leader whose session failed (see the module docs):
/// the lead at once, or `LeadLost` when another master holds it. Runs off
/// the core thread.
pub(super) fn take_lead_again(
    url: &str,
    durability: Durability,
    name: &str,
    previous: Option<i32>,
) -> Result<Lead, StoreError> {
    let (mut client, path) = connect(url, RECONNECT_TIMEOUT, name)?;
    let err = |cause| StoreError::Postgres {
        path: path.clone(),
        cause,
    };
    let deadline = std::time::Instant::now() + ORPHAN_WAIT;
    let mut ended = false;
    while !try_lock(&mut client).map_err(err)? {
        match lock_holder(&mut client).map_err(err)? {
            Some(holder) if Some(holder.pid) == previous && !ended => {
                tracing::warn!(
                    state = %path, pid = holder.pid,
                    "the lead is still held by this master's own previous session, which the lost \
                     connection left on the server; ending it (nothing of it was acknowledged)"
                );
                client
                    .query_one("SELECT pg_terminate_backend($1)", &[&holder.pid])
                    .map_err(err)?;
                ended = true;
            }
            // Ended, and about to let go.
            Some(holder) if Some(holder.pid) == previous => {}
            Some(holder) => {
                return Err(StoreError::LeadLost {
                    path,
                    holder: holder.who,
                })
            }
            // Released in between: try again.
            None => {}
        }
        if std::time::Instant::now() > deadline {
            return Err(StoreError::Disconnected { path });
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    set_durability(&mut client, durability).map_err(err)?;
    let pid = backend_pid(&mut client).map_err(err)?;
    Ok(Lead { client, pid })
}
