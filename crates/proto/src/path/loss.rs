//! Loss rates of one path: every loss (`all`, what redundancy and `status` need) and
//! transmission errors only (`errors`, what the earliest-arrival scheduler charges as
//! expected delay). The losses are the datagrams the peer declared lost (its NACKs, after
//! RACK's reordering window, `gaps.rs`), over the datagrams the ACKs' `largest` says were
//! sent: not "sent minus received" between two ACKs, which counted every datagram still
//! on its way behind a later one as lost — on a link that reorders, a loss in nearly every
//! interval, each a loss episode for the rate controller to judge (on two 60-Mbit/s links
//! reordering within 5 ms, 150 a path in 6 s of a download that lost nothing).
//!
//! Why two: a congestion loss is a queue we overfilled; the rate controller answers it by
//! lowering the path's rate (`control.rs`), after which the path does not drop any more.
//! Charged as delay as well, a start-up overshoot that dropped a burst on a tbf (a loss
//! rate of ~10 %, so ~100 ms of "expected delay") kept an idle 50 Mbit/s link unused for
//! seconds: an unused path gets no data feedback to lower the rate again, only keepalives,
//! each weighing 1/256. A transmission error is a property of the link and stays a cost.
//!
//! A loss's kind is known only when the controller's verdict comes, a few feedback
//! intervals later. The intervals seen meanwhile are composed into one pending update
//! (`keep`, `add`: `rate ← rate · keep + add`), applied in full when the verdict is
//! "error", and with its losses taken out (`rate ← rate · keep`) when it is "congestion".
//!
//! Invariants: both rates stay within 0..=1; `errors` never moves on a congestion loss.

/// Weight of one feedback interval of `sent` datagrams in the EWMAs: a quarter for 64 or
/// more, less for fewer, so a keepalive-only interval barely moves them.
fn weight(sent: u64) -> f64 {
    (sent as f64 / 64.0).min(1.0) * 0.25
}

/// The loss rates of one path.
#[derive(Debug, Clone, Copy, Default)]
pub struct LossRates {
    /// Largest path sequence acknowledged + 1 at the previous feedback.
    last: Option<u64>,
    /// Declared losses not yet counted: an interval counts at most what it sent (a NACK
    /// can come with an ACK that acknowledges nothing new).
    carry: u64,
    all: f64,
    errors: f64,
    /// Composed update of the intervals seen while a verdict is pending: (keep, add).
    pending: Option<(f64, f64)>,
}

impl LossRates {
    /// Every loss, 0..=1.
    pub fn all(&self) -> f64 {
        self.all
    }

    /// Losses judged transmission errors, 0..=1 (losses with a verdict pending are not in
    /// it yet).
    pub fn errors(&self) -> f64 {
        self.errors
    }

    /// Feedback: datagrams up to path sequence `largest` sent, `lost` of them declared
    /// lost since the previous feedback. The interval joins the pending update until one of
    /// the `settle_as_*` calls. Returns whether any datagram was lost.
    pub fn on_feedback(&mut self, largest: u32, lost: u64) -> bool {
        let sent_upto = u64::from(largest) + 1;
        // A burst longer than any NACK reports is not carried for ever.
        self.carry = (self.carry + lost).min(1 << 16);
        let Some(prev_sent) = self.last.replace(sent_upto) else {
            return false;
        };
        let sent = sent_upto.saturating_sub(prev_sent);
        if sent == 0 {
            return false;
        }
        let lost = self.carry.min(sent);
        self.carry -= lost;
        let share = lost as f64 / sent as f64;
        let w = weight(sent);
        self.all = self.all * (1.0 - w) + share * w;
        self.pending = Some(match self.pending {
            Some((keep, add)) => (keep * (1.0 - w), add * (1.0 - w) + share * w),
            None => (1.0 - w, share * w),
        });
        lost > 0
    }

    /// Applies what was pending: no loss episode is being judged (the interval had no loss
    /// and none is pending, or a verdict just said "error"), so the losses count.
    pub fn settle_as_errors(&mut self) {
        if let Some((keep, add)) = self.pending.take() {
            self.errors = (self.errors * keep + add).clamp(0.0, 1.0);
        }
    }

    /// The pending losses were congestion: the intervals still age the error rate, their
    /// losses do not add to it.
    pub fn settle_as_congestion(&mut self) {
        if let Some((keep, _)) = self.pending.take() {
            self.errors *= keep;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `n` intervals of 64 datagrams with `lost` lost each, settling each as `error`
    /// or congestion right away.
    fn feed(r: &mut LossRates, seq: &mut u32, n: usize, lost: u64, error: bool) {
        for _ in 0..n {
            *seq += 64;
            r.on_feedback(*seq, lost);
            if error {
                r.settle_as_errors();
            } else {
                r.settle_as_congestion();
            }
        }
    }

    #[test]
    fn congestion_counts_in_all_but_not_in_errors() {
        let mut r = LossRates::default();
        let mut seq = 0;
        assert!(!r.on_feedback(seq, 0));
        feed(&mut r, &mut seq, 20, 8, false);
        assert!((r.all() - 0.125).abs() < 0.01, "{}", r.all());
        assert_eq!(r.errors(), 0.0);
        feed(&mut r, &mut seq, 20, 8, true);
        assert!((r.errors() - 0.125).abs() < 0.01, "{}", r.errors());
        // Clean intervals age both, whatever the verdict on earlier ones.
        feed(&mut r, &mut seq, 20, 0, true);
        assert!(r.all() < 0.01 && r.errors() < 0.01, "{r:?}");
    }

    #[test]
    fn losses_reported_without_new_datagrams_count_later() {
        let mut r = LossRates::default();
        r.on_feedback(0, 0);
        assert!(
            !r.on_feedback(0, 3),
            "nothing new sent: nothing to count against"
        );
        assert!(r.on_feedback(10, 0));
        let mut fresh = LossRates::default();
        fresh.on_feedback(0, 0);
        fresh.on_feedback(10, 3);
        assert!((r.all() - fresh.all()).abs() < 1e-12);
    }

    #[test]
    fn pending_intervals_compose_like_sequential_updates() {
        let mut seq_r = LossRates::default();
        let mut pend_r = LossRates::default();
        let mut s = 0;
        seq_r.on_feedback(s, 0);
        pend_r.on_feedback(s, 0);
        for (sent, lost) in [(64u32, 5u64), (10, 0), (128, 30), (1, 1)] {
            s += sent;
            seq_r.on_feedback(s, lost);
            seq_r.settle_as_errors();
            pend_r.on_feedback(s, lost);
        }
        pend_r.settle_as_errors();
        assert!((seq_r.errors() - pend_r.errors()).abs() < 1e-12);
        assert!((seq_r.all() - pend_r.all()).abs() < 1e-12);
    }

    proptest::proptest! {
        /// Whatever the feedback (reordered, duplicated, wrapped numbers, more declared
        /// lost than sent), both rates stay within 0..=1.
        #[test]
        fn rates_stay_in_range(steps in proptest::collection::vec((proptest::prelude::any::<u32>(), proptest::prelude::any::<u64>(), 0u8..3), 1..100)) {
            let mut r = LossRates::default();
            for (largest, recv, settle) in steps {
                r.on_feedback(largest, recv);
                match settle {
                    0 => r.settle_as_errors(),
                    1 => r.settle_as_congestion(),
                    _ => {}
                }
                proptest::prop_assert!((0.0..=1.0).contains(&r.all()));
                proptest::prop_assert!((0.0..=1.0).contains(&r.errors()));
            }
        }
    }
}
