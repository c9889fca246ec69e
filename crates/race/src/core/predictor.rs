//! The predictors, each turned into a [`Plan`] for one new connection.
//!
//! | predictor | tries | preferred | hold | source |
//! |---|---|---|---|---|
//! | `race` | every uplink at once | none: first to complete wins | 0 | MONET (seed §4.2) |
//! | `avmet` | every uplink at once | AvMet's best | `delay` | seed §4.4 |
//! | `static` | the configured uplink only | it | 0 | seed's "static best gateway" |
//! | `probe` | the lowest-ETT uplink only | it | 0 | Roofnet's ETT (seed §4.3.2) |
//! | `stagger` | best first, the next one `delay` later (or at once when one fails) | none | 0 | Happy Eyeballs, RFC 8305 §5 |
//!
//! `static` and `probe` try a single uplink, exactly as the seed's baselines do (a manually
//! configured gateway; Roofnet routing by metric): they are what the racing predictors are
//! measured against. `stagger` ranks uplinks by the same EWMA of race wins as AvMet (RFC 8305
//! §4 lets history order the candidates).
//!
//! The predictor learns from every finished race ([`Predictor::on_race`]: the uplink that
//! completed first, whether or not it was used) and from probes ([`Predictor::on_probe`]).

use super::avmet::{self, AvMet};
use super::probe::{self, EttEstimator};
use super::{RaceError, UplinkId, MAX_UPLINKS};
use arrayvec::ArrayVec;
use core::time::Duration;

/// Which predictor, with its parameters (validated by [`PredictorConfig::validate`]).
#[derive(Debug, Clone, PartialEq)]
pub enum PredictorConfig {
    /// MONET: first handshake to complete wins.
    Race,
    /// AvMet: EWMA of race winners; a completion elsewhere than the best waits `delay`.
    AvMet {
        /// EWMA coefficient α.
        alpha: f64,
        /// The SYN-ACK delay D.
        delay: Duration,
    },
    /// A fixed uplink.
    Static {
        /// The uplink every connection uses.
        uplink: UplinkId,
    },
    /// Lowest ETT from periodic probes.
    Probe,
    /// Happy Eyeballs: attempts `delay` apart, best-ranked first.
    Stagger {
        /// Attempt delay (RFC 8305 recommends 250 ms).
        delay: Duration,
    },
}

impl PredictorConfig {
    /// AvMet with the seed's wired defaults (α 0.99, D 100 ms).
    pub fn avmet_wired() -> Self {
        PredictorConfig::AvMet {
            alpha: avmet::WIRED_ALPHA,
            delay: Duration::from_millis(avmet::WIRED_DELAY_MS),
        }
    }

    /// AvMet with the seed's wireless defaults (α 0.999, D 4.5 s).
    pub fn avmet_wireless() -> Self {
        PredictorConfig::AvMet {
            alpha: avmet::WIRELESS_ALPHA,
            delay: Duration::from_millis(avmet::WIRELESS_DELAY_MS),
        }
    }

    /// The predictor's name as in configuration files.
    pub fn name(&self) -> &'static str {
        match self {
            PredictorConfig::Race => "race",
            PredictorConfig::AvMet { .. } => "avmet",
            PredictorConfig::Static { .. } => "static",
            PredictorConfig::Probe => "probe",
            PredictorConfig::Stagger { .. } => "stagger",
        }
    }

    /// Checks the parameters against `n_uplinks`.
    pub fn validate(&self, n_uplinks: usize) -> Result<(), RaceError> {
        match self {
            PredictorConfig::AvMet { alpha, .. } if !(0.0..1.0).contains(alpha) => Err(
                RaceError::Config(format!("avmet alpha must be in [0, 1), not {alpha}")),
            ),
            PredictorConfig::Static { uplink } if uplink.index() >= n_uplinks => {
                Err(RaceError::Config(format!(
                    "static uplink {} does not exist ({n_uplinks} uplinks)",
                    uplink.0
                )))
            }
            _ => Ok(()),
        }
    }
}

/// One attempt of a plan: connect over `uplink` once `start_after` has passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlannedAttempt {
    /// The uplink.
    pub uplink: UplinkId,
    /// Delay from the start of the race.
    pub start_after: Duration,
}

/// What to do for one connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Attempts in start order (each uplink at most once).
    pub attempts: ArrayVec<PlannedAttempt, MAX_UPLINKS>,
    /// The uplink a completion elsewhere waits for, if any.
    pub preferred: Option<UplinkId>,
    /// How long a completion on a non-preferred uplink is held back.
    pub hold: Duration,
    /// Start the next not-yet-started attempt at once when one fails (RFC 8305 §5).
    pub advance_on_failure: bool,
}

impl Plan {
    /// A single attempt over `uplink` (static, probe, DSCP pin).
    pub fn single(uplink: UplinkId) -> Plan {
        Plan {
            attempts: [PlannedAttempt {
                uplink,
                start_after: Duration::ZERO,
            }]
            .into_iter()
            .collect(),
            preferred: Some(uplink),
            hold: Duration::ZERO,
            advance_on_failure: false,
        }
    }

    /// Every uplink at once, with an optional preference and hold.
    pub fn all(n: usize, preferred: Option<UplinkId>, hold: Duration) -> Plan {
        Plan {
            attempts: (0..n.min(MAX_UPLINKS))
                .map(|i| PlannedAttempt {
                    uplink: UplinkId(i as u8),
                    start_after: Duration::ZERO,
                })
                .collect(),
            preferred,
            hold,
            advance_on_failure: false,
        }
    }
}

/// A predictor's state.
#[derive(Debug, Clone, PartialEq)]
pub struct Predictor {
    config: PredictorConfig,
    n: usize,
    /// Race winners (AvMet's state; also `stagger`'s ranking and shown for every predictor).
    wins: AvMet,
    ett: ArrayVec<EttEstimator, MAX_UPLINKS>,
}

impl Predictor {
    /// A fresh predictor over `n` uplinks.
    pub fn new(config: PredictorConfig, n: usize) -> Predictor {
        let n = n.clamp(1, MAX_UPLINKS);
        let alpha = match config {
            PredictorConfig::AvMet { alpha, .. } => alpha,
            _ => avmet::WIRED_ALPHA,
        };
        Predictor {
            config,
            n,
            wins: AvMet::new(n, alpha),
            ett: (0..n).map(|_| EttEstimator::default()).collect(),
        }
    }

    /// The plan for a new connection.
    pub fn plan(&self) -> Plan {
        match &self.config {
            PredictorConfig::Race => Plan::all(self.n, None, Duration::ZERO),
            PredictorConfig::AvMet { delay, .. } => {
                Plan::all(self.n, Some(self.wins.best()), *delay)
            }
            PredictorConfig::Static { uplink } => Plan::single(*uplink),
            PredictorConfig::Probe => Plan::single(UplinkId(probe::best(&self.ett) as u8)),
            PredictorConfig::Stagger { delay } => Plan {
                attempts: self
                    .wins
                    .ranking()
                    .into_iter()
                    .enumerate()
                    .map(|(k, uplink)| PlannedAttempt {
                        uplink,
                        start_after: *delay * k as u32,
                    })
                    .collect(),
                preferred: None,
                hold: Duration::ZERO,
                advance_on_failure: true,
            },
        }
    }

    /// The uplink this predictor would use for a flow that cannot be raced (UDP).
    pub fn best(&self) -> UplinkId {
        match &self.config {
            PredictorConfig::Static { uplink } => *uplink,
            PredictorConfig::Probe => UplinkId(probe::best(&self.ett) as u8),
            _ => self.wins.best(),
        }
    }

    /// Learns from a finished race: `first` completed its handshake first (None: nothing
    /// completed, which teaches nothing about which uplink is better).
    pub fn on_race(&mut self, first: Option<UplinkId>) {
        if let Some(u) = first {
            self.wins.record(u);
        }
    }

    /// Learns from a probe of `uplink`: its RTT, or `None` if it was lost.
    pub fn on_probe(&mut self, uplink: UplinkId, rtt: Option<Duration>) {
        if let Some(e) = self.ett.get_mut(uplink.index()) {
            match rtt {
                Some(rtt) => e.on_reply(rtt),
                None => e.on_loss(),
            }
        }
    }

    /// Takes over `other`'s probe estimators (a new per-destination predictor).
    pub fn copy_probe_state(&mut self, other: &Predictor) {
        if other.ett.len() == self.ett.len() {
            self.ett = other.ett.clone();
        }
    }

    /// The configuration.
    pub fn config(&self) -> &PredictorConfig {
        &self.config
    }

    /// The EWMA of race winners (AvMet's weights).
    pub fn wins(&self) -> &AvMet {
        &self.wins
    }

    /// Probe estimators, one per uplink.
    pub fn ett(&self) -> &[EttEstimator] {
        &self.ett
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn plans_follow_the_table() {
        let race = Predictor::new(PredictorConfig::Race, 2).plan();
        assert_eq!(race.attempts.len(), 2);
        assert_eq!((race.preferred, race.hold), (None, Duration::ZERO));

        let mut av = Predictor::new(PredictorConfig::avmet_wireless(), 2);
        assert_eq!(av.plan().preferred, Some(UplinkId(0)));
        assert_eq!(av.plan().hold, ms(4500));
        for _ in 0..10 {
            av.on_race(Some(UplinkId(1)));
        }
        av.on_race(None);
        assert_eq!(av.plan().preferred, Some(UplinkId(1)));
        assert_eq!(av.wins().samples(), 10);

        let st = Predictor::new(
            PredictorConfig::Static {
                uplink: UplinkId(1),
            },
            3,
        );
        assert_eq!(st.plan(), Plan::single(UplinkId(1)));
        assert_eq!(st.best(), UplinkId(1));

        let mut pr = Predictor::new(PredictorConfig::Probe, 2);
        pr.on_probe(UplinkId(0), Some(ms(40)));
        pr.on_probe(UplinkId(1), Some(ms(10)));
        assert_eq!(pr.plan(), Plan::single(UplinkId(1)));
        for _ in 0..14 {
            pr.on_probe(UplinkId(1), None);
        }
        assert_eq!(pr.best(), UplinkId(0), "{:?}", pr.ett());

        let mut sg = Predictor::new(PredictorConfig::Stagger { delay: ms(250) }, 3);
        sg.on_race(Some(UplinkId(2)));
        let p = sg.plan();
        let order: Vec<(u8, u64)> = p
            .attempts
            .iter()
            .map(|a| (a.uplink.0, a.start_after.as_millis() as u64))
            .collect();
        assert_eq!(order, vec![(2, 0), (0, 250), (1, 500)]);
        assert!(p.advance_on_failure);
    }

    #[test]
    fn validation() {
        assert!(PredictorConfig::avmet_wired().validate(2).is_ok());
        let bad = PredictorConfig::AvMet {
            alpha: 1.0,
            delay: ms(1),
        };
        assert!(bad.validate(2).is_err());
        let st = PredictorConfig::Static {
            uplink: UplinkId(2),
        };
        assert!(st.validate(2).is_err());
        assert!(st.validate(3).is_ok());
    }
}
