//! The rate stage: when does the head of the queue finish serialising?
//!
//! Three models. `Unlimited` releases a frame the instant it reaches the head. `Constant`
//! serialises back to back at a fixed bit rate (a frame starts when both it has arrived and
//! the previous one is out). `Trace` follows Mahimahi's `mm-link`: each trace opportunity
//! carries up to 1500 bytes of whichever frames are queued at that instant; a frame larger
//! than what is left of an opportunity continues into the next ones; an opportunity with
//! nothing queued is wasted (capacity is never banked).
//! Invariants: the stage is pure arithmetic on the (arrival, remaining bytes) of the head plus
//! its own state, so `completion` can be asked any number of times and only `complete`
//! commits; completion times are never before arrival, and for `Constant` never sooner than
//! the bytes need at the configured rate (times round up to the nanosecond).

use crate::trace::{Trace, OPPORTUNITY_BYTES};
use crate::units::Bandwidth;
use std::sync::Arc;
use std::time::Duration;

/// How fast a direction delivers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RateModel {
    /// No rate limit.
    Unlimited,
    /// A constant bit rate.
    Constant(Bandwidth),
    /// A looping Mahimahi trace whose time zero is when it was installed.
    Trace(Arc<Trace>),
}

/// The rate stage's running state.
#[derive(Debug, Clone)]
pub enum Server {
    /// Releases instantly.
    Unlimited,
    /// Back-to-back serialisation.
    Constant {
        /// The rate.
        rate: Bandwidth,
        /// When the link finished its previous frame (it may start the next from then on).
        free_at: Duration,
    },
    /// Trace-driven opportunities.
    Trace {
        /// The trace.
        trace: Arc<Trace>,
        /// Absolute time of the trace's time zero.
        origin: Duration,
        /// Index of the next opportunity that still has budget.
        next: u64,
        /// Bytes left in opportunity `next` (1..=1500).
        budget: u64,
    },
}

impl Server {
    /// A fresh stage for `model`, starting at `now`.
    pub fn new(model: &RateModel, now: Duration) -> Server {
        match model {
            RateModel::Unlimited => Server::Unlimited,
            RateModel::Constant(rate) => Server::Constant {
                rate: *rate,
                free_at: now,
            },
            RateModel::Trace(trace) => Server::Trace {
                trace: Arc::clone(trace),
                origin: now,
                next: 0,
                budget: OPPORTUNITY_BYTES,
            },
        }
    }

    /// The model this stage runs.
    pub fn model(&self) -> RateModel {
        match self {
            Server::Unlimited => RateModel::Unlimited,
            Server::Constant { rate, .. } => RateModel::Constant(*rate),
            Server::Trace { trace, .. } => RateModel::Trace(Arc::clone(trace)),
        }
    }

    /// First opportunity usable by a frame that arrived at `arrival`, with its budget.
    fn trace_start(
        trace: &Trace,
        origin: Duration,
        next: u64,
        budget: u64,
        arrival: Duration,
    ) -> (u64, u64) {
        let rel = arrival.saturating_sub(origin);
        if trace.opportunity_time(next) < rel {
            (trace.first_at_or_after(rel), OPPORTUNITY_BYTES)
        } else {
            (next, budget)
        }
    }

    /// When the head frame (arrived at `arrival`, `remaining` bytes left) would be fully out.
    pub fn completion(&self, arrival: Duration, remaining: u64) -> Duration {
        match self {
            Server::Unlimited => arrival,
            Server::Constant { rate, free_at } => {
                (*free_at).max(arrival) + rate.transmit_time(remaining)
            }
            Server::Trace {
                trace,
                origin,
                next,
                budget,
            } => {
                let (k, b) = Self::trace_start(trace, *origin, *next, *budget, arrival);
                let k_done = if remaining <= b {
                    k
                } else {
                    k + (remaining - b).div_ceil(OPPORTUNITY_BYTES)
                };
                *origin + trace.opportunity_time(k_done)
            }
        }
    }

    /// Commits the head frame's completion and returns its release time.
    pub fn complete(&mut self, arrival: Duration, remaining: u64) -> Duration {
        let done = self.completion(arrival, remaining);
        match self {
            Server::Unlimited => {}
            Server::Constant { free_at, .. } => *free_at = done,
            Server::Trace {
                trace,
                origin,
                next,
                budget,
            } => {
                let (k, b) = Self::trace_start(trace, *origin, *next, *budget, arrival);
                let (k_done, left) = if remaining <= b {
                    (k, b - remaining)
                } else {
                    let over = remaining - b;
                    let n = over.div_ceil(OPPORTUNITY_BYTES);
                    (k + n, n * OPPORTUNITY_BYTES - over)
                };
                // An exhausted opportunity is done: move to the next with a full budget.
                (*next, *budget) = if left == 0 {
                    (k_done + 1, OPPORTUNITY_BYTES)
                } else {
                    (k_done, left)
                };
            }
        }
        done
    }

    /// Bytes of the head frame already serialised by `now`; always `< remaining` when its
    /// completion is after `now` (the only case the caller asks about).
    pub fn served_by(&self, now: Duration, arrival: Duration, remaining: u64) -> u64 {
        let served = match self {
            Server::Unlimited => 0,
            Server::Constant { rate, free_at } => {
                let start = (*free_at).max(arrival);
                now.checked_sub(start).map_or(0, |e| rate.bytes_in(e))
            }
            Server::Trace {
                trace,
                origin,
                next,
                budget,
            } => {
                let (k, b) = Self::trace_start(trace, *origin, *next, *budget, arrival);
                if *origin + trace.opportunity_time(k) > now {
                    0
                } else {
                    let past = trace.first_after(now.saturating_sub(*origin));
                    b + (past - k - 1) * OPPORTUNITY_BYTES
                }
            }
        };
        served.min(remaining.saturating_sub(1))
    }

    /// The link went down at `at` with its queue flushed: nothing is in service any more.
    pub fn reset_idle(&mut self, at: Duration) {
        if let Server::Constant { free_at, .. } = self {
            *free_at = (*free_at).min(at);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn constant_serialises_back_to_back() {
        let mut s = Server::new(&RateModel::Constant("12mbit".parse().unwrap()), ms(0));
        // 1500 B at 12 Mbit/s = 1 ms each.
        assert_eq!(s.complete(ms(0), 1500), ms(1));
        assert_eq!(s.complete(ms(0), 1500), ms(2));
        // An idle gap is not banked.
        assert_eq!(s.complete(ms(10), 1500), ms(11));
        assert_eq!(
            s.served_by(Duration::from_micros(11_500), ms(11), 1500),
            750
        );
    }

    #[test]
    fn trace_shares_and_spans_opportunities() {
        let trace = Arc::new(Trace::from_millis(vec![1, 2, 3, 10]).unwrap());
        let mut s = Server::new(&RateModel::Trace(trace), ms(0));
        // Two 700 B frames share opportunity 0 at 1 ms.
        assert_eq!(s.complete(ms(0), 700), ms(1));
        assert_eq!(s.complete(ms(0), 700), ms(1));
        // 100 B left in opp 0; a 1000 B frame takes it plus 900 B of opp 1 (2 ms).
        assert_eq!(s.complete(ms(0), 1000), ms(2));
        // A 4000 B frame: 600 B of opp 1, then 1500 (3 ms), 1500 (10 ms), 400 of 11 ms.
        assert_eq!(s.completion(ms(0), 4000), ms(11));
        assert_eq!(s.served_by(ms(3), ms(0), 4000), 2100);
        assert_eq!(s.complete(ms(0), 4000), ms(11));
        // A frame arriving late cannot use opportunities that passed while idle.
        assert_eq!(s.complete(ms(15), 100), ms(20));
    }

    #[test]
    fn trace_origin_is_install_time() {
        let trace = Arc::new(Trace::from_millis(vec![5]).unwrap());
        let s = Server::new(&RateModel::Trace(trace), ms(100));
        assert_eq!(s.completion(ms(100), 1500), ms(105));
        assert_eq!(s.completion(ms(106), 1), ms(110));
    }
}
