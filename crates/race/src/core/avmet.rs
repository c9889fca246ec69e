//! AvMet (the MultiNAT thesis §4.4): an EWMA over which uplink completed the handshake first.
//!
//! The thesis keeps one float for two links, `curbest = α·curbest + (1−α)·link` with `link`
//! 0 or 1, and believes link 1 is better when `curbest > 0.5`. For N uplinks we keep one
//! weight per uplink, `w_i = α·w_i + (1−α)·[i won]`; the weights always sum to 1 and for
//! N = 2, `w_1` is exactly the thesis's `curbest`. The best uplink is the largest weight, ties
//! going to the lower index (the seed: `curbest = 0.5` means link 0).
//!
//! Why history and not the last race: a single handshake time is a poor predictor of a
//! download over a bursty wireless link (the thesis §4.3.1); averaged over many connections it
//! does identify the better uplink. α sets the memory (α = 0.99 ≈ 100 connections, the
//! thesis's wired setting; 0.999 ≈ 1000, its wireless setting).

use super::{UplinkId, MAX_UPLINKS};
use arrayvec::ArrayVec;

/// The thesis's wired defaults: α = 0.99 (100 samples), delay 100 ms (§4.4.3).
pub const WIRED_ALPHA: f64 = 0.99;
/// The thesis's wired delay before a non-best completion is used.
pub const WIRED_DELAY_MS: u64 = 100;
/// The thesis's wireless defaults: α = 0.999 (1000 samples), delay 4.5 s (§4.4.1).
pub const WIRELESS_ALPHA: f64 = 0.999;
/// The thesis's wireless delay: two lost SYNs on the best link before switching.
pub const WIRELESS_DELAY_MS: u64 = 4500;

/// AvMet's state: one weight per uplink.
#[derive(Debug, Clone, PartialEq)]
pub struct AvMet {
    alpha: f64,
    weights: ArrayVec<f64, MAX_UPLINKS>,
    samples: u64,
}

impl AvMet {
    /// Equal weights over `n` uplinks (1 ≤ n ≤ [`MAX_UPLINKS`]); `alpha` in [0, 1).
    pub fn new(n: usize, alpha: f64) -> AvMet {
        let n = n.clamp(1, MAX_UPLINKS);
        AvMet {
            alpha: alpha.clamp(0.0, 0.999_999),
            weights: (0..n).map(|_| 1.0 / n as f64).collect(),
            samples: 0,
        }
    }

    /// Records that `winner` completed its handshake first in one race.
    pub fn record(&mut self, winner: UplinkId) {
        if winner.index() >= self.weights.len() {
            return;
        }
        for (i, w) in self.weights.iter_mut().enumerate() {
            let hit = if i == winner.index() { 1.0 } else { 0.0 };
            *w = self.alpha * *w + (1.0 - self.alpha) * hit;
        }
        self.samples += 1;
    }

    /// The uplink AvMet believes is best (largest weight, lowest index on ties).
    pub fn best(&self) -> UplinkId {
        let mut best = 0;
        for (i, w) in self.weights.iter().enumerate() {
            if *w > self.weights[best] {
                best = i;
            }
        }
        UplinkId(best as u8)
    }

    /// Uplinks ordered best first (weight descending, index ascending on ties).
    pub fn ranking(&self) -> ArrayVec<UplinkId, MAX_UPLINKS> {
        let mut ids: ArrayVec<UplinkId, MAX_UPLINKS> =
            (0..self.weights.len()).map(|i| UplinkId(i as u8)).collect();
        ids.sort_by(|a, b| {
            self.weights[b.index()]
                .total_cmp(&self.weights[a.index()])
                .then(a.cmp(b))
        });
        ids
    }

    /// The weights, one per uplink (they sum to 1).
    pub fn weights(&self) -> &[f64] {
        &self.weights
    }

    /// The thesis's `curbest` (the weight of uplink 1) when there are exactly two uplinks.
    pub fn curbest(&self) -> Option<f64> {
        (self.weights.len() == 2).then(|| self.weights[1])
    }

    /// Races recorded so far.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// The EWMA coefficient.
    pub fn alpha(&self) -> f64 {
        self.alpha
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn two_links_match_the_thesis_formula() {
        let mut a = AvMet::new(2, 0.9);
        let mut curbest = 0.5;
        for link in [1u8, 1, 0, 1, 1, 1, 0, 0, 1] {
            a.record(UplinkId(link));
            curbest = 0.9 * curbest + 0.1 * f64::from(link);
            assert!((a.curbest().unwrap() - curbest).abs() < 1e-12);
            let thesis_best = if curbest > 0.5 { 1 } else { 0 };
            assert_eq!(a.best(), UplinkId(thesis_best));
        }
    }

    /// A scripted sequence: uplink 1 wins 70 % of races (with bursts of losses, as a
    /// wireless link would); AvMet must settle on it and stay there.
    #[test]
    fn converges_to_the_better_uplink() {
        let mut a = AvMet::new(2, 0.99);
        assert_eq!(a.best(), UplinkId(0), "ties go to the first uplink");
        let script = [1, 1, 0, 1, 1, 0, 1, 0, 1, 1]; // 7 of 10 for uplink 1
        let mut switched_at = None;
        for round in 0..100 {
            for &w in &script {
                a.record(UplinkId(w));
            }
            // A burst: uplink 1 loses 5 races in a row every 10th round.
            if round % 10 == 9 {
                for _ in 0..5 {
                    a.record(UplinkId(0));
                }
            }
            if a.best() == UplinkId(1) && switched_at.is_none() {
                switched_at = Some(round);
            }
            if round >= 20 {
                assert_eq!(a.best(), UplinkId(1), "round {round}: {:?}", a.weights());
            }
        }
        assert!(switched_at.unwrap() <= 5, "{switched_at:?}");
        let w = a.weights()[1];
        assert!(w > 0.6 && w < 0.75, "{w}");
    }

    #[test]
    fn n_uplinks_rank_by_wins() {
        let mut a = AvMet::new(3, 0.9);
        for _ in 0..30 {
            a.record(UplinkId(2));
            a.record(UplinkId(2));
            a.record(UplinkId(1));
        }
        assert_eq!(a.best(), UplinkId(2));
        assert_eq!(
            a.ranking().as_slice(),
            &[UplinkId(2), UplinkId(1), UplinkId(0)]
        );
        a.record(UplinkId(7)); // unknown uplink: ignored
        assert_eq!(a.samples(), 90);
    }

    proptest! {
        #[test]
        fn weights_stay_a_distribution(n in 1usize..=8, alpha in 0.0f64..0.9999,
                                       wins in proptest::collection::vec(0u8..8, 0..300)) {
            let mut a = AvMet::new(n, alpha);
            for w in wins {
                a.record(UplinkId(w));
            }
            let sum: f64 = a.weights().iter().sum();
            prop_assert!((sum - 1.0).abs() < 1e-9);
            prop_assert!(a.weights().iter().all(|w| (0.0..=1.0).contains(w)));
            prop_assert_eq!(a.ranking()[0], a.best());
        }
    }
}
