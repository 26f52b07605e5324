//! Capped exponential backoff with equal jitter for reconnect attempts.
//!
//! When a master restarts, every worker of the fleet loses its socket at the
//! same instant. Without jitter they would all reconnect in lock-step and hit
//! the fresh master as one burst, again and again. "Equal jitter" keeps half of
//! the exponential delay fixed (so the delay still grows and a dead master is not
//! hammered) and randomises the other half (so the fleet spreads out).

use rand::Rng;
use std::time::Duration;

/// Backoff settings: the first delay and the cap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    pub initial: Duration,
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            initial: Duration::from_millis(200),
            max: Duration::from_secs(10),
        }
    }
}

impl Backoff {
    /// A fresh sequence of delays following these settings.
    pub fn start(self) -> BackoffState {
        BackoffState {
            settings: self,
            attempt: 0,
        }
    }
}

/// Where a worker is in its current run of failed attempts.
#[derive(Clone, Debug)]
pub struct BackoffState {
    settings: Backoff,
    attempt: u32,
}

impl BackoffState {
    /// The un-jittered delay of the next attempt: `initial * 2^attempt`, capped at `max`.
    pub fn ceiling(&self) -> Duration {
        let Backoff { initial, max } = self.settings;
        // A zero initial delay would never grow; treat it as 1 ms.
        let initial = initial.max(Duration::from_millis(1));
        let max = max.max(initial);
        // Any realistic cap is reached long before 2^20; the min keeps the shift in range.
        let factor = 1u32 << self.attempt.min(20);
        initial.saturating_mul(factor).min(max)
    }

    /// The delay to wait before the next attempt, in `[ceiling/2, ceiling]`.
    pub fn next_delay_with<R: Rng + ?Sized>(&mut self, rng: &mut R) -> Duration {
        let ceiling = self.ceiling();
        self.attempt = self.attempt.saturating_add(1);
        let half = ceiling / 2;
        let spread = u64::try_from((ceiling - half).as_micros()).unwrap_or(u64::MAX);
        half + Duration::from_micros(rng.random_range(0..=spread))
    }

    /// [`next_delay_with`](Self::next_delay_with) using the thread-local RNG.
    pub fn next_delay(&mut self) -> Duration {
        self.next_delay_with(&mut rand::rng())
    }

    /// Called after a successful registration: the next failure starts over.
    pub fn reset(&mut self) {
        self.attempt = 0;
    }

    /// Failed attempts since the last reset.
    pub fn attempts(&self) -> u32 {
        self.attempt
    }
}

#[cfg(test)]
mod tests;
