//! The predictors, each turned into a [`Plan`] for one new connection.
//!
//! | predictor | tries | preferred | hold | source |
//! |---|---|---|---|---|
//! | `race` | every uplink at once | none: first to complete wins | 0 | MONET (the thesis §4.2) |
//! | `avmet` | every uplink at once | AvMet's best | `delay` | the thesis §4.4 |
//! | `static` | the configured uplink only | it | 0 | thesis's "static best gateway" |
//! | `probe` | the lowest-ETT uplink only | it | 0 | Roofnet's ETT (the thesis §4.3.2) |
//! | `stagger` | best and stale uplinks first, the next one `delay` later (or at once when one fails) | none | 0 | Happy Eyeballs, RFC 8305 §5 |
//!
//! `static` and `probe` try a single uplink, exactly as the thesis's baselines do (a manually
//! configured gateway; Roofnet routing by metric): they are what the racing predictors are
//! measured against. `stagger` ranks uplinks by their expected handshake time learned from
//! every attempt and re-measures stale ones ([`super::stagger`]); `probe` switches uplinks
//! with hysteresis ([`super::probe::Choice`]).
//!
//! The predictor learns from every finished race ([`Predictor::on_race`]: the uplink that
//! completed first, whether or not it was used), from each attempt of it
//! ([`Predictor::on_attempt`]: its handshake time from its own start, or its failure) and from
//! probes ([`Predictor::on_probe`]).

use super::avmet::{self, AvMet};
use super::conn::AttemptReport;
use super::probe::{Choice, EttEstimator};
use super::stagger::{self, HandshakeEstimate};
use super::{RaceError, UplinkId, MAX_UPLINKS};
use arrayvec::ArrayVec;
use core::time::Duration;
use multihome_proto::Instant;

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
    /// AvMet with the thesis's wired defaults (α 0.99, D 100 ms).
    pub fn avmet_wired() -> Self {
        PredictorConfig::AvMet {
            alpha: avmet::WIRED_ALPHA,
            delay: Duration::from_millis(avmet::WIRED_DELAY_MS),
        }
    }

    /// AvMet with the thesis's wireless defaults (α 0.999, D 4.5 s).
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
    /// The probe predictor's current uplink (hysteresis over `ett`).
    choice: Choice,
    /// Handshake estimates learned from every attempt (`stagger`'s ranking).
    handshake: ArrayVec<HandshakeEstimate, MAX_UPLINKS>,
    /// Races this predictor has learned from (`stagger`'s clock for staleness).
    races: u64,
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
            choice: Choice::default(),
            handshake: (0..n).map(|_| HandshakeEstimate::default()).collect(),
            races: 0,
        }
    }

    /// The plan for a new connection starting at `now`.
    pub fn plan(&self, now: Instant) -> Plan {
        match &self.config {
            PredictorConfig::Race => Plan::all(self.n, None, Duration::ZERO),
            PredictorConfig::AvMet { delay, .. } => {
                Plan::all(self.n, Some(self.wins.best()), *delay)
            }
            PredictorConfig::Static { uplink } => Plan::single(*uplink),
            PredictorConfig::Probe => Plan::single(self.choice.current()),
            PredictorConfig::Stagger { delay } => {
                stagger::plan(&self.handshake, self.races, now, *delay)
            }
        }
    }

    /// The uplink this predictor would use for a flow that cannot be raced (UDP).
    pub fn best(&self) -> UplinkId {
        match &self.config {
            PredictorConfig::Static { uplink } => *uplink,
            PredictorConfig::Probe => self.choice.current(),
            PredictorConfig::Stagger { .. } => stagger::ranking(&self.handshake)[0],
            _ => self.wins.best(),
        }
    }

    /// Learns from a finished race: `first` completed its handshake first (None: nothing
    /// completed, which teaches nothing about which uplink is better).
    pub fn on_race(&mut self, first: Option<UplinkId>) {
        if let Some(u) = first {
            self.wins.record(u);
        }
        self.races += 1;
    }

    /// Learns from one attempt of a race decided at `now` (call before [`Self::on_race`]
    /// for the same race, so the samples carry that race's number).
    pub fn on_attempt(&mut self, now: Instant, uplink: UplinkId, report: AttemptReport) {
        if let Some(e) = self.handshake.get_mut(uplink.index()) {
            e.on_attempt(self.races, now, report);
        }
    }

    /// Learns from a probe of `uplink`: its RTT, or `None` if it was lost.
    pub fn on_probe(&mut self, uplink: UplinkId, rtt: Option<Duration>) {
        let Some(e) = self.ett.get_mut(uplink.index()) else {
            return;
        };
        match rtt {
            Some(rtt) => e.on_reply(rtt),
            None => e.on_loss(),
        }
        self.choice.update(&self.ett);
    }

    /// Takes over `other`'s probe estimators (a new per-destination predictor).
    pub fn copy_probe_state(&mut self, other: &Predictor) {
        if other.ett.len() == self.ett.len() {
            self.ett = other.ett.clone();
            self.choice = other.choice;
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

    /// Handshake estimates (`stagger`), one per uplink.
    pub fn handshake(&self) -> &[HandshakeEstimate] {
        &self.handshake
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

    const T0: Instant = Instant::from_micros(0);

    #[test]
    fn plans_follow_the_table() {
        let race = Predictor::new(PredictorConfig::Race, 2).plan(T0);
        assert_eq!(race.attempts.len(), 2);
        assert_eq!((race.preferred, race.hold), (None, Duration::ZERO));

        let mut av = Predictor::new(PredictorConfig::avmet_wireless(), 2);
        assert_eq!(av.plan(T0).preferred, Some(UplinkId(0)));
        assert_eq!(av.plan(T0).hold, ms(4500));
        for _ in 0..10 {
            av.on_race(Some(UplinkId(1)));
        }
        av.on_race(None);
        assert_eq!(av.plan(T0).preferred, Some(UplinkId(1)));
        assert_eq!(av.wins().samples(), 10);

        let st = Predictor::new(
            PredictorConfig::Static {
                uplink: UplinkId(1),
            },
            3,
        );
        assert_eq!(st.plan(T0), Plan::single(UplinkId(1)));
        assert_eq!(st.best(), UplinkId(1));

        let mut pr = Predictor::new(PredictorConfig::Probe, 2);
        pr.on_probe(UplinkId(0), Some(ms(40)));
        pr.on_probe(UplinkId(1), Some(ms(10)));
        assert_eq!(pr.plan(T0), Plan::single(UplinkId(1)));
        for _ in 0..14 {
            pr.on_probe(UplinkId(1), None);
        }
        assert_eq!(pr.best(), UplinkId(0), "{:?}", pr.ett());

        let mut sg = Predictor::new(PredictorConfig::Stagger { delay: ms(250) }, 3);
        let order = |p: &Plan| -> Vec<(u8, u64)> {
            p.attempts
                .iter()
                .map(|a| (a.uplink.0, a.start_after.as_millis() as u64))
                .collect()
        };
        // Nothing measured: every uplink is stale and starts at once.
        assert_eq!(order(&sg.plan(T0)), vec![(0, 0), (1, 0), (2, 0)]);
        for (u, d) in [(0, 30), (1, 20), (2, 10)] {
            sg.on_attempt(T0, UplinkId(u), AttemptReport::Connected(ms(d)));
        }
        sg.on_race(Some(UplinkId(2)));
        let p = sg.plan(T0);
        assert_eq!(order(&p), vec![(2, 0), (1, 250), (0, 500)]);
        assert!(p.advance_on_failure);
        assert_eq!(sg.best(), UplinkId(2));
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
