//! `earliest`: send each packet on the path where it is expected to *arrive* first — the
//! out-of-order striping of the MobilityFirst multihoming thesis §3.5 (ECF / OSIA in the literature) — among the paths
//! that may send now. Because arrival order then follows send order across paths, the
//! receiver sees packets nearly in order.
//!
//! A path may send now when it has window and its pacer lets a datagram go (`ready_at`):
//! the pacing rate is the path's estimated bandwidth times its probing gain, so a path
//! takes new packets only as fast as it delivers them — MobilityFirst's backpressure (a
//! link takes packets while fewer than H are pending; here H is one pacing interval's
//! worth, far below MobilityFirst's H_min = ⌈T_up_max / T_d_min⌉, because the pacer already
//! knows the rate the threshold stands for). Expected arrival on path p for `len` bytes:
//! `min_rtt_p / 2 + fwd_queue_p + len / rate_p + loss_p · 1 s` (one-way delay with the
//! path's current forward queue — not srtt/2, which carries the reverse direction's queue
//! too — serialisation, and the expected cost of a loss to the inner TCP). When no path may send yet the packet waits; the session wakes up when
//! the first pacer opens.

use super::{one, preferred, Scheduler, Selection};
use crate::path::PathView;
use crate::Instant;

/// The earliest-arrival scheduler.
#[derive(Debug, Clone, Default)]
pub struct EarliestArrival;

impl EarliestArrival {
    /// A new scheduler (stateless).
    pub fn new() -> Self {
        EarliestArrival
    }
}

/// Expected one-way arrival delay in seconds of `len` more bytes on `p`. Serialisation
/// is at the delivery-rate estimate, or at the packet-pair capacity if that is higher:
/// a path that was given little has a small estimate only because it was given little,
/// and charging each packet at that estimate (112 ms per datagram at 0.1 Mbit/s) kept it
/// from ever being given more (a 10 Mbit/s path unused for 11 s in simult-flows). Until
/// a sample was taken while the path was busy (`bw_valid`) the estimate is only a lower
/// bound and its pacing rate stands in (a path whose one app-limited sample read 7.5
/// kbit/s, with no packet pair yet, was charged 1.6 s per datagram and never used). Its
/// queue, if it has one, is in the forward delay.
pub fn expected_arrival(p: &PathView, len: usize) -> f64 {
    expected_delivery(p, len) + p.error_loss * LOSS_COST_S
}

/// Expected one-way delay in seconds of `len` more bytes on `p` if they arrive: forward
/// delay (with the path's queue) plus serialisation at the rate `expected_arrival`
/// explains — without the charge for loss, which `realtime` covers with FEC instead.
pub fn expected_delivery(p: &PathView, len: usize) -> f64 {
    let measured = p.bandwidth_bps.max(p.capacity_bps);
    let rate = if p.bandwidth_bps > 0.0 && p.bw_valid {
        measured
    } else {
        measured.max(p.pacing_bps).max(1.0)
    };
    p.forward_delay_s() + len as f64 / rate
}

/// What a lost packet costs, in seconds of delay: the inner TCP needs about a round
/// trip to repair it and halves its window. Charged at the path's rate of transmission
/// errors, so a path losing 1 % of its packets to noise looks 10 ms further away (seed
/// 004: a clean slow link beats a lossy fast one for TCP). Such loss never lowers the
/// path's *rate*; it only makes the path less preferred. Congestion losses are not
/// charged here: the rate controller lowers the rate for them (`path/control.rs`), and
/// charged as delay too they kept a path that had overshot once unused long after its
/// queue had drained (`path/loss.rs`).
const LOSS_COST_S: f64 = 1.0;

impl Scheduler for EarliestArrival {
    fn name(&self) -> &'static str {
        "earliest"
    }

    fn select(&mut self, now: Instant, paths: &[PathView], len: usize) -> Selection {
        let mut any = false;
        let best = preferred(paths)
            .inspect(|_| any = true)
            .filter(|p| p.may_send(now, len))
            .min_by(|a, b| {
                expected_arrival(a, len)
                    .total_cmp(&expected_arrival(b, len))
                    .then(a.id.cmp(&b.id))
            });
        match best {
            Some(p) => one(p.id),
            None if any => Selection::Wait,
            None => Selection::AllPaths,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::path::PathState;
    use crate::sched::testutil::view;

    #[test]
    fn prefers_the_earliest_arrival_among_paths_that_may_send() {
        let mut s = EarliestArrival::new();
        let mut fast = view(0, PathState::Up, 20, 50.0);
        let slow = view(1, PathState::Up, 80, 20.0);
        assert_eq!(s.select(Instant::ZERO, &[fast, slow], 1500), one(fast.id));
        // The fast path's pacer is closed for another millisecond: the slow path takes it.
        fast.ready_at = Instant::from_micros(1_000);
        assert_eq!(s.select(Instant::ZERO, &[fast, slow], 1500), one(slow.id));
        // A high RTT from the reverse direction's queue (srtt 90 ms over a 20 ms minimum,
        // no forward queue) does not delay our data: the fast path still wins.
        fast.ready_at = Instant::ZERO;
        fast.srtt = core::time::Duration::from_millis(90);
        assert_eq!(s.select(Instant::ZERO, &[fast, slow], 1500), one(fast.id));
        // A forward queue of 35 ms does.
        fast.fwd_queue = core::time::Duration::from_millis(35);
        assert_eq!(s.select(Instant::ZERO, &[fast, slow], 1500), one(slow.id));
    }

    /// A path whose only samples were application-limited is judged by its pacing rate,
    /// not by a lower bound that would keep it unused.
    #[test]
    fn an_unproven_estimate_does_not_exclude_a_path() {
        let mut s = EarliestArrival::new();
        let slow = view(1, PathState::Up, 60, 40.0);
        let mut fresh = view(0, PathState::Up, 20, 0.001);
        fresh.bw_valid = false;
        fresh.pacing_bps = 6.5e6;
        assert_eq!(s.select(Instant::ZERO, &[fresh, slow], 1500), one(fresh.id));
        fresh.bw_valid = true;
        assert_eq!(s.select(Instant::ZERO, &[fresh, slow], 1500), one(slow.id));
    }

    /// Losses the rate controller judged congestion (an overshoot that overflowed the
    /// link's queue) do not push a path away; transmission errors do (the R-MTP thesis: a clean
    /// slow link beats a lossy fast one for TCP).
    #[test]
    fn only_transmission_errors_are_charged_as_delay() {
        let mut s = EarliestArrival::new();
        let mut fast = view(0, PathState::Up, 20, 50.0);
        let slow = view(1, PathState::Up, 40, 20.0);
        fast.loss = 0.10;
        assert_eq!(s.select(Instant::ZERO, &[fast, slow], 1500), one(fast.id));
        fast.error_loss = 0.02;
        assert_eq!(s.select(Instant::ZERO, &[fast, slow], 1500), one(slow.id));
    }

    /// A path on standby carries data only while no other path is `Up`, however early
    /// it would deliver.
    #[test]
    fn a_standby_path_only_when_no_other_is_up() {
        let mut s = EarliestArrival::new();
        let mut direct = view(0, PathState::Up, 20, 50.0);
        direct.standby = true;
        let mut detour = view(1, PathState::Up, 60, 10.0);
        assert_eq!(
            s.select(Instant::ZERO, &[direct, detour], 1500),
            one(detour.id)
        );
        detour.state = PathState::Suspect;
        assert_eq!(
            s.select(Instant::ZERO, &[direct, detour], 1500),
            one(direct.id)
        );
        direct.state = PathState::Down;
        assert_eq!(
            s.select(Instant::ZERO, &[direct, detour], 1500),
            one(detour.id)
        );
    }

    #[test]
    fn waits_when_every_path_is_paced_or_full() {
        let mut s = EarliestArrival::new();
        let mut a = view(0, PathState::Up, 20, 50.0);
        let mut b = view(1, PathState::Up, 80, 20.0);
        a.ready_at = Instant::from_micros(500);
        b.inflight_bytes = b.cwnd_bytes;
        assert_eq!(s.select(Instant::ZERO, &[a, b], 1500), Selection::Wait);
        let down = view(2, PathState::Down, 20, 50.0);
        assert_eq!(s.select(Instant::ZERO, &[down], 1500), Selection::AllPaths);
    }
}
