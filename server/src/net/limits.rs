//! Per-connection request rate limits (token buckets).
//!
//! Clients: every frame after `hello` takes a token; a frame that finds the
//! bucket empty is not executed and is answered with `error` `rate_limited`.
//! Refusals with less than [`CALM`] between them are counted, and a client that
//! piles up more than a bucket's worth of them (sustained abuse, not a burst) is
//! closed with 1008.
//!
//! Workers: their messages are never refused (a refused `result` would leave
//! the worker waiting for an `ack`). Instead a worker over its rate is simply
//! not read until a token is available (backpressure), and `progress`, which
//! only ever replaces the previous report, is forwarded at most once per
//! [`PROGRESS_INTERVAL`]: extra reports are coalesced, the latest one wins and
//! is forwarded when the interval is over (or just before the worker's next
//! other message, so the order is kept).

use std::time::{Duration, Instant};

/// Refusals closer together than this count as one episode of abuse.
pub const CALM: Duration = Duration::from_secs(1);

/// Least time between two `progress` reports of one worker that reach the core.
pub const PROGRESS_INTERVAL: Duration = Duration::from_millis(50);

/// A token bucket: `burst` tokens, refilled at `rate` per second. A rate of 0
/// means unlimited.
#[derive(Clone, Debug)]
pub struct TokenBucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket allowing `rate` per second with bursts of `2 * rate`.
    pub fn per_second(rate: u32, now: Instant) -> Self {
        let rate = f64::from(rate);
        let burst = (2.0 * rate).max(1.0);
        TokenBucket {
            rate,
            burst,
            tokens: burst,
            last: now,
        }
    }

    pub fn is_unlimited(&self) -> bool {
        self.rate == 0.0
    }

    /// The bucket's capacity.
    pub fn burst(&self) -> u32 {
        self.burst as u32
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate).min(self.burst);
        self.last = now;
    }

    /// Takes one token if there is one.
    pub fn try_take(&mut self, now: Instant) -> bool {
        if self.is_unlimited() {
            return true;
        }
        self.refill(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// How long until a token is available (zero when one is).
    pub fn wait(&mut self, now: Instant) -> Duration {
        if self.is_unlimited() {
            return Duration::ZERO;
        }
        self.refill(now);
        if self.tokens >= 1.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64((1.0 - self.tokens) / self.rate)
        }
    }
}

/// A client's rate limit: the bucket plus the count of recent refusals.
#[derive(Debug)]
pub struct RequestLimiter {
    bucket: TokenBucket,
    strikes: u32,
    last_refusal: Option<Instant>,
}

/// What to do with a client's frame.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    /// Refuse this request with `rate_limited`.
    Refuse,
    /// Refuse it and close the connection with 1008.
    Close,
}

impl RequestLimiter {
    pub fn new(rate: u32, now: Instant) -> Self {
        RequestLimiter {
            bucket: TokenBucket::per_second(rate, now),
            strikes: 0,
            last_refusal: None,
        }
    }

    pub fn check(&mut self, now: Instant) -> Verdict {
        if self.bucket.try_take(now) {
            return Verdict::Allow;
        }
        if self
            .last_refusal
            .is_some_and(|at| now.saturating_duration_since(at) > CALM)
        {
            self.strikes = 0;
        }
        self.last_refusal = Some(now);
        self.strikes += 1;
        if self.strikes > self.bucket.burst() {
            Verdict::Close
        } else {
            Verdict::Refuse
        }
    }
}

#[cfg(test)]
mod tests;
