//! `tunefleet watch`: a live progress bar over the whole fleet, Lorien style.
//!
//! ```text
//! 3 workers  37%|██████████░░░░░░░░░░░░| 37/100 [00:12:03<00:20:31, 0.05/s] 1 failed
//! ```
//!
//! The bar moves on the master's pushed events (subscription), never by
//! polling: position = jobs done + failed + cancelled, length = all jobs. When
//! stdout is not a terminal (CI logs, `| tee`), a plain line such as
//! `3 workers  37%  37/100 done, 1 failed` is printed instead whenever that
//! count changes, at most once a second, plus a final one.
//!
//! # Ending
//! By default `watch` returns once there is at least one job and every job is
//! done, failed or cancelled; `--follow` keeps watching. It then prints
//! `done: N, failed: M` and exits with status **0 when no job failed, 2 when
//! some failed** (1 stays "watch itself failed": connection, token...), so a
//! script can `tunefleet watch && tunefleet export ...`.
//!
//! # Connection trouble
//! The first connection must succeed (a wrong URL or token should fail fast).
//! After that a dropped connection is retried with exponential backoff
//! (0.25 s doubling to 5 s) for up to `--reconnect-timeout` seconds, and each
//! new connection resubscribes, which brings a fresh snapshot. A gap in the
//! event sequence numbers (see [`crate::client::FleetView`]) also leads to a
//! resubscription on a new connection.

use super::{emit, ConnectArgs, Exit};
use crate::client::{Client, ClientError, EventOutcome, FleetView, Update};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::time::Duration;
use tokio::time::Instant;

/// Lorien's tqdm-like layout.
pub const BAR_TEMPLATE: &str = "{prefix} {percent:>3}%|{wide_bar}| {pos}/{len} [{elapsed_precise}<{eta_precise}, {per_sec}] {msg}";

/// Plain-line mode prints at most this often.
const PLAIN_INTERVAL: Duration = Duration::from_secs(1);
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

#[derive(clap::Args, Debug)]
pub struct WatchArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Keep watching after every job has finished.
    #[arg(long)]
    pub follow: bool,
    /// Return once every job has finished (the default; the opposite of --follow).
    #[arg(long, conflicts_with = "follow")]
    pub exit_when_done: bool,
    /// Give up after the master has been unreachable this long (seconds).
    #[arg(long, value_name = "SECS", default_value_t = 60)]
    pub reconnect_timeout: u64,
}

pub async fn run(args: WatchArgs) -> anyhow::Result<()> {
    let exit_when_done = !args.follow;
    let mut display = Display::new(std::io::stdout().is_terminal());
    let bar = display.bar.clone();
    let interrupted = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    let result = tokio::select! {
        r = watch(&args, &mut display, exit_when_done) => r,
        () = interrupted => {
            if let Some(bar) = bar {
                bar.abandon();
            }
            return Err(Exit { code: 130, message: "interrupted".into() }.into());
        }
    };
    let view = result?;
    display.finish(&view);
    let counts = view.counts();
    let mut summary = format!("done: {}, failed: {}", counts.done, counts.failed);
    if counts.cancelled > 0 {
        summary.push_str(&format!(", cancelled: {}", counts.cancelled));
    }
    emit(&format!("{summary}\n"))?;
    if counts.failed > 0 {
        return Err(Exit::silent(2).into());
    }
    Ok(())
}

/// Why one connection's watch ended.
enum Ended {
    /// Every job finished (only with exit-when-done).
    AllDone,
    /// Missed events: start over with a fresh snapshot.
    Resync(String),
    /// The connection went away.
    Lost(ClientError),
}

/// Watches until done; returns the final view.
async fn watch(
    args: &WatchArgs,
    display: &mut Display,
    exit_when_done: bool,
) -> anyhow::Result<FleetView> {
    let mut view = FleetView::new();
    let mut client = args.connect.connect().await?;
    loop {
        let ended = follow(&mut client, &mut view, display, exit_when_done).await;
        let why = match ended {
            Ended::AllDone => {
                let _ = client.close().await;
                return Ok(view);
            }
            Ended::Resync(why) => why,
            Ended::Lost(err) if err.is_retryable() => err.to_string(),
            Ended::Lost(err) => return Err(args.connect.explain(err)),
        };
        display.note(&format!("{why}; reconnecting"));
        client = reconnect(args, display).await?;
    }
}

/// One connection: subscribe, then apply updates until done or trouble.
async fn follow(
    client: &mut Client,
    view: &mut FleetView,
    display: &mut Display,
    exit_when_done: bool,
) -> Ended {
    match client.subscribe_with_deltas().await {
        Ok((seq, snapshot)) => {
            view.apply_snapshot(seq, snapshot);
            display.resync(view);
        }
        Err(e) => return Ended::Lost(e),
    }
    loop {
        display.update(view);
        if exit_when_done && view.all_terminal() {
            return Ended::AllDone;
        }
        // Wake up for a plain line held back by the rate limit. Only then:
        // waiting on `next_update` without a timeout lets its keepalive run.
        let update = match display.deferred_until() {
            Some(at) => match tokio::time::timeout_at(at, client.next_update()).await {
                Err(_) => continue,
                Ok(update) => update,
            },
            None => client.next_update().await,
        };
        match update {
            Ok(Some(Update::Snapshot(seq, snapshot))) => {
                view.apply_snapshot(seq, snapshot);
                display.resync(view);
            }
            Ok(Some(Update::Event(seq, event))) => match view.apply_event(seq, event) {
                EventOutcome::Applied | EventOutcome::Stale => {}
                EventOutcome::Gap { expected, got } => {
                    display.update(view);
                    return Ended::Resync(format!("missed events {expected}..{got}"));
                }
            },
            Ok(None) => {
                return Ended::Lost(ClientError::Transport(
                    "the master closed the connection".into(),
                ))
            }
            Err(e) => return Ended::Lost(e),
        }
    }
}

/// New connection with exponential backoff, until `--reconnect-timeout`.
async fn reconnect(args: &WatchArgs, display: &mut Display) -> anyhow::Result<Client> {
    let limit = Duration::from_secs(args.reconnect_timeout);
    let give_up = Instant::now() + limit;
    let mut delay = FIRST_BACKOFF;
    loop {
        match args.connect.try_connect().await {
            Ok(client) => {
                display.note("reconnected");
                return Ok(client);
            }
            Err(e) if !e.is_retryable() => return Err(args.connect.explain(e)),
            Err(e) => {
                if Instant::now() + delay > give_up {
                    anyhow::bail!(
                        "gave up after {} s without the master: {e}",
                        limit.as_secs()
                    );
                }
                tracing::debug!("reconnect failed: {e}");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(MAX_BACKOFF);
            }
        }
    }
}

/// The numbers shown, from the view.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    pub workers: usize,
    /// Done + failed + cancelled.
    pub finished: usize,
    pub total: usize,
    pub failed: usize,
}

impl Progress {
    pub fn of(view: &FleetView) -> Self {
        let c = view.counts();
        Progress {
            workers: view.workers().len(),
            finished: c.done + c.failed + c.cancelled,
            total: c.total,
            failed: c.failed,
        }
    }

    pub fn percent(&self) -> usize {
        (self.finished * 100).checked_div(self.total).unwrap_or(0)
    }

    /// The line printed when stdout is not a terminal.
    pub fn plain_line(&self) -> String {
        format!(
            "{} workers  {}%  {}/{} done, {} failed",
            self.workers,
            self.percent(),
            self.finished,
            self.total,
            self.failed
        )
    }
}

/// One line per model run that is not finished (or finished since the last
/// look): `model squeezenet: tuning 24/40 trials, estimated 62.1 ms`.
pub fn model_lines(view: &FleetView) -> Vec<String> {
    let mut models: Vec<_> = view.models().iter().collect();
    models.sort_by(|a, b| (a.created_at, &a.name).cmp(&(b.created_at, &b.name)));
    models
        .into_iter()
        .map(|m| {
            let mut line = format!(
                "model {}: {} {}/{} trials",
                m.name, m.state, m.trials_done, m.trials_total
            );
            if let Some(e) = m.estimated_latency_s {
                line.push_str(&format!(", estimated {}", super::format_latency(e)));
            }
            if let (Some(t), Some(u)) = (m.latency_s.tuned, m.latency_s.untuned) {
                line.push_str(&format!(
                    ", measured {} ({:.1}x over untuned)",
                    super::format_latency(t),
                    u / t
                ));
            }
            if let Some(err) = &m.error {
                line.push_str(&format!(", error: {err}"));
            }
            line
        })
        .collect()
}

/// Progress bar on a terminal, rate-limited plain lines otherwise.
struct Display {
    bar: Option<ProgressBar>,
    /// Plain mode: what was printed last, and when.
    printed: Option<(Progress, Instant)>,
    /// Plain mode: the newest progress, possibly not printed yet.
    latest: Option<Progress>,
    /// Model lines last shown.
    models: Vec<String>,
}

impl Display {
    fn new(terminal: bool) -> Self {
        let bar = terminal.then(|| {
            let style = ProgressStyle::with_template(BAR_TEMPLATE)
                .unwrap_or_else(|_| ProgressStyle::default_bar());
            let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stdout())
                .with_style(style);
            bar.set_prefix("0 workers");
            bar.set_message("connecting");
            // Redraw each second so elapsed/ETA move between events.
            bar.enable_steady_tick(Duration::from_secs(1));
            bar
        });
        Display {
            bar,
            printed: None,
            latest: None,
            models: Vec::new(),
        }
    }

    fn update(&mut self, view: &FleetView) {
        let models = model_lines(view);
        if models != self.models {
            for line in models.iter().filter(|l| !self.models.contains(l)) {
                match &self.bar {
                    Some(bar) => bar.println(line),
                    None => {
                        let _ = emit(&format!("{line}\n"));
                    }
                }
            }
            self.models = models;
        }
        let p = Progress::of(view);
        if let Some(bar) = &self.bar {
            bar.set_length(p.total as u64);
            bar.set_position(p.finished as u64);
            bar.set_prefix(format!("{} workers", p.workers));
            bar.set_message(if p.total == 0 {
                "waiting for jobs".to_string()
            } else {
                format!("{} failed", p.failed)
            });
            return;
        }
        self.latest = Some(p);
        let due = match self.printed {
            None => true,
            Some((last, at)) => {
                (last.finished != p.finished || last.total != p.total)
                    && at.elapsed() >= PLAIN_INTERVAL
            }
        };
        if due {
            let _ = emit(&format!("{}\n", p.plain_line()));
            self.printed = Some((p, Instant::now()));
        }
    }

    /// After a snapshot: jobs that finished while we were not watching would
    /// read as a burst of speed, so the rate estimate starts over from here.
    fn resync(&mut self, view: &FleetView) {
        self.update(view);
        if let Some(bar) = &self.bar {
            bar.reset_eta();
        }
    }

    /// Plain mode: when the newest progress, held back by the rate limit,
    /// becomes due.
    fn deferred_until(&self) -> Option<Instant> {
        let (printed, at) = self.printed?;
        let latest = self.latest?;
        (self.bar.is_none() && latest != printed).then_some(at + PLAIN_INTERVAL)
    }

    /// A message above the bar (stderr), e.g. about reconnecting.
    fn note(&self, text: &str) {
        match &self.bar {
            Some(bar) => bar.suspend(|| eprintln!("{text}")),
            None => eprintln!("{text}"),
        }
    }

    fn finish(&mut self, view: &FleetView) {
        self.update(view);
        if let Some(bar) = &self.bar {
            bar.finish();
            return;
        }
        let p = Progress::of(view);
        if self.printed.map(|(last, _)| last) != Some(p) {
            let _ = emit(&format!("{}\n", p.plain_line()));
            self.printed = Some((p, Instant::now()));
        }
    }
}

#[cfg(test)]
mod tests;
