//! How long the store call now running has lasted, readable from any thread.
//!
//! The core thread owns the store and waits for each call it makes. A call
//! on a database that went silent (a partition: no error, no answer) waits
//! until the connection's TCP timeouts give up, a few seconds; meanwhile the
//! core answers nothing, reads included. The network layer reads this clock
//! to tell such a wait from a busy core: a read that has waited on a store
//! call for longer than a moment is answered without the core (the last
//! status the core left, marked degraded) instead of waiting with it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// Shared between the store (which sets it around each call) and whoever
/// wants to know whether the core is waiting on the database.
#[derive(Debug, Default)]
pub struct CallClock {
    /// Microseconds since [`epoch`] when the running call began, plus one;
    /// 0 while no call runs.
    began: AtomicU64,
}

/// A fixed instant of this process, so that a start fits in an atomic.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

impl CallClock {
    /// How long the running call has lasted; `None` while none runs.
    pub fn running_for(&self) -> Option<Duration> {
        match self.began.load(Ordering::Relaxed) {
            0 => None,
            began => {
                let now = epoch().elapsed().as_micros() as u64 + 1;
                Some(Duration::from_micros(now.saturating_sub(began)))
            }
        }
    }

    /// Marks a call as running until the guard is dropped. An inner guard
    /// (a call inside a call) keeps the outer one's start.
    pub(crate) fn start_owned(self: Arc<Self>) -> InCall {
        let now = epoch().elapsed().as_micros() as u64 + 1;
        let outer = self
            .began
            .compare_exchange(0, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_err();
        InCall { clock: self, outer }
    }
}

/// See [`CallClock::start_owned`].
pub(crate) struct InCall {
    clock: Arc<CallClock>,
    /// Another guard is out: that one clears the clock.
    outer: bool,
}

impl Drop for InCall {
    fn drop(&mut self) {
        if !self.outer {
            self.clock.began.store(0, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests;
