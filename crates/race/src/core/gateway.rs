//! The gateway: many races, their predictor state, counters, bounds and probe schedule.
//!
//! [`Gateway::begin`] hands out a [`Race`] for a new connection (or refuses when
//! `max_connections` are open — the bound that keeps hundreds of simultaneous attempts from
//! exhausting file descriptors), [`Gateway::end_race`] tallies a decided race and lets the
//! predictor learn from it, [`Gateway::release`] frees the connection's slot when the driver
//! has closed it. Predictor state is global or per destination address (a bounded map: the
//! least recently used destination is forgotten first). A DSCP value can pin a connection to
//! one uplink (the MultiNAT thesis §3.2: the TOS byte selects the gateway).
//!
//! Probes (for the `probe` predictor) are scheduled here: [`Gateway::poll_probe`] names the
//! next uplink to probe, with ±10 % jitter from the seeded RNG so probes of different
//! uplinks do not stay in lock-step.

use super::conn::{AttemptState, Outcome, Race};
use super::predictor::{Plan, Predictor, PredictorConfig};
use super::{RaceError, UplinkId, MAX_UPLINKS};
use core::time::Duration;
use multihome_proto::Instant;
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};
use std::collections::HashMap;
use std::net::IpAddr;

/// Where predictor state lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// One predictor for every destination.
    Global,
    /// One predictor per destination address, at most `max_entries` remembered.
    Destination {
        /// Bound on remembered destinations.
        max_entries: usize,
    },
}

/// The gateway's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct GatewayConfig {
    /// Number of uplinks (1 ..= [`MAX_UPLINKS`]).
    pub n_uplinks: usize,
    /// The predictor.
    pub predictor: PredictorConfig,
    /// Global or per-destination state.
    pub scope: Scope,
    /// Each attempt gives up after this long without a handshake.
    pub connect_timeout: Duration,
    /// Most connections raced or relayed at once.
    pub max_connections: usize,
    /// Probe period per uplink (`None`: no probes).
    pub probe_interval: Option<Duration>,
    /// DSCP value → uplink pins.
    pub dscp_pins: Vec<(u8, UplinkId)>,
}

impl GatewayConfig {
    /// Checks the settings.
    pub fn validate(&self) -> Result<(), RaceError> {
        if self.n_uplinks == 0 || self.n_uplinks > MAX_UPLINKS {
            return Err(RaceError::Config(format!(
                "1 to {MAX_UPLINKS} uplinks are supported, not {}",
                self.n_uplinks
            )));
        }
        if self.max_connections == 0 {
            return Err(RaceError::Config(
                "max_connections must be at least 1".into(),
            ));
        }
        if let Some((d, u)) = self
            .dscp_pins
            .iter()
            .find(|(d, u)| *d > 63 || u.index() >= self.n_uplinks)
        {
            return Err(RaceError::Config(format!(
                "DSCP pin {d} -> uplink {}: DSCP is 0..=63 and the uplink must exist",
                u.0
            )));
        }
        self.predictor.validate(self.n_uplinks)
    }
}

/// Per-uplink counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct UplinkCounters {
    /// Attempts started.
    pub attempts: u64,
    /// Races in which this uplink completed its handshake first.
    pub wins: u64,
    /// Connections that used this uplink.
    pub chosen: u64,
    /// Attempts refused by the destination (RST).
    pub refusals: u64,
    /// Attempts that got no handshake within the connect timeout.
    pub timeouts: u64,
    /// Attempts that failed otherwise (unreachable, local error).
    pub failures: u64,
    /// Attempts closed because another uplink was used.
    pub abandoned: u64,
    /// Probes answered.
    pub probe_replies: u64,
    /// Probes lost.
    pub probe_losses: u64,
    /// UDP flows given this uplink.
    pub udp_flows: u64,
}

/// A snapshot for status displays.
#[derive(Debug, Clone, PartialEq)]
pub struct GatewayStatus {
    /// Predictor name.
    pub predictor: &'static str,
    /// Counters, one per uplink.
    pub uplinks: Vec<UplinkCounters>,
    /// The global predictor's state.
    pub global: Predictor,
    /// The uplink the global predictor currently prefers.
    pub best: UplinkId,
    /// Connections raced or relayed now.
    pub active: usize,
    /// The bound on `active`.
    pub max_connections: usize,
    /// Connections refused because the bound was reached.
    pub busy_refusals: u64,
    /// Races decided: (chosen, all refused, failed).
    pub races: (u64, u64, u64),
    /// Destinations with their own predictor.
    pub destinations: usize,
}

/// The racing gateway's state.
#[derive(Debug, Clone)]
pub struct Gateway {
    cfg: GatewayConfig,
    counters: Vec<UplinkCounters>,
    global: Predictor,
    per_dst: HashMap<IpAddr, (Predictor, Instant)>,
    active: usize,
    busy_refusals: u64,
    races: (u64, u64, u64),
    next_probe: Vec<Instant>,
    rng: ChaCha8Rng,
}

impl Gateway {
    /// A gateway with fresh predictor state; probes (if any) start at `now`.
    pub fn new(cfg: GatewayConfig, seed: u64, now: Instant) -> Result<Gateway, RaceError> {
        cfg.validate()?;
        let n = cfg.n_uplinks;
        Ok(Gateway {
            global: Predictor::new(cfg.predictor.clone(), n),
            counters: vec![UplinkCounters::default(); n],
            per_dst: HashMap::new(),
            active: 0,
            busy_refusals: 0,
            races: (0, 0, 0),
            next_probe: vec![now; n],
            rng: ChaCha8Rng::seed_from_u64(seed),
            cfg,
        })
    }

    /// A race for a new connection to `dst` whose SYN carried `dscp`, or `Busy` when
    /// `max_connections` are open (the caller refuses the client and logs).
    pub fn begin(
        &mut self,
        now: Instant,
        dst: IpAddr,
        dscp: Option<u8>,
    ) -> Result<Race, RaceError> {
        if self.active >= self.cfg.max_connections {
            self.busy_refusals += 1;
            return Err(RaceError::Busy {
                limit: self.cfg.max_connections,
            });
        }
        self.active += 1;
        let pin = dscp.and_then(|d| self.cfg.dscp_pins.iter().find(|(p, _)| *p == d));
        let plan = match pin {
            Some((_, uplink)) => Plan::single(*uplink),
            None => self.predictor_mut(now, dst).plan(now),
        };
        Ok(Race::new(now, &plan, self.cfg.connect_timeout))
    }

    /// Tallies a decided race and teaches the predictor of `dst` what each attempt showed
    /// (its handshake time from its own start, or its failure) and which uplink was first.
    pub fn end_race(&mut self, now: Instant, dst: IpAddr, race: &Race) {
        let Some((outcome, _)) = race.outcome() else {
            return;
        };
        match outcome {
            Outcome::Chosen(_) => self.races.0 += 1,
            Outcome::Refused => self.races.1 += 1,
            Outcome::Failed => self.races.2 += 1,
        }
        for (u, st) in race.attempts() {
            let Some(c) = self.counters.get_mut(u.index()) else {
                continue;
            };
            if st.started() {
                c.attempts += 1;
            }
            match st {
                AttemptState::Chosen => c.chosen += 1,
                AttemptState::Refused => c.refusals += 1,
                AttemptState::TimedOut => c.timeouts += 1,
                AttemptState::Failed => c.failures += 1,
                AttemptState::Abandoned => c.abandoned += 1,
                _ => {}
            }
        }
        let first = race.first_connected().map(|(u, _)| u);
        if let Some(c) = first.and_then(|u| self.counters.get_mut(u.index())) {
            c.wins += 1;
        }
        let p = self.predictor_mut(now, dst);
        for (u, report) in race.reports() {
            p.on_attempt(now, u, report);
        }
        p.on_race(first);
    }

    /// A connection handed out by `begin` is closed; its slot is free again.
    pub fn release(&mut self) {
        self.active = self.active.saturating_sub(1);
    }

    /// The uplink for a flow that is not raced (a UDP flow) to `dst`: a DSCP pin, else the
    /// predictor's best uplink (AvMet's `curbest`, the probe metric's best, the static one),
    /// the same one a race would prefer. Counted in [`UplinkCounters::udp_flows`].
    pub fn flow_uplink(&mut self, now: Instant, dst: IpAddr, dscp: Option<u8>) -> UplinkId {
        let pin = dscp.and_then(|d| self.cfg.dscp_pins.iter().find(|(p, _)| *p == d));
        let u = match pin {
            Some((_, u)) => *u,
            None => self.predictor_mut(now, dst).best(),
        };
        if let Some(c) = self.counters.get_mut(u.index()) {
            c.udp_flows += 1;
        }
        u
    }

    /// The next uplink due for a probe at `now`, rescheduling it; `None` if none is due.
    pub fn poll_probe(&mut self, now: Instant) -> Option<UplinkId> {
        let interval = self.cfg.probe_interval?;
        let i = (0..self.next_probe.len()).find(|&i| self.next_probe[i] <= now)?;
        // ±10 % jitter: uniform in [0.9, 1.1) × interval.
        let frac = (self.rng.next_u32() as f64) / (u32::MAX as f64 + 1.0);
        self.next_probe[i] = now + interval.mul_f64(0.9 + 0.2 * frac);
        Some(UplinkId(i as u8))
    }

    /// When the next probe is due (`None` without probes).
    pub fn probe_timeout(&self) -> Option<Instant> {
        self.cfg.probe_interval?;
        self.next_probe.iter().min().copied()
    }

    /// A probe of `uplink` came back after `rtt` (`None`: lost).
    pub fn handle_probe(&mut self, uplink: UplinkId, rtt: Option<Duration>) {
        let Some(c) = self.counters.get_mut(uplink.index()) else {
            return;
        };
        if rtt.is_some() {
            c.probe_replies += 1;
        } else {
            c.probe_losses += 1;
        }
        // Probes measure the uplink, not a destination: every predictor hears them.
        self.global.on_probe(uplink, rtt);
        for (p, _) in self.per_dst.values_mut() {
            p.on_probe(uplink, rtt);
        }
    }

    /// A snapshot of counters and predictor state.
    pub fn status(&self) -> GatewayStatus {
        GatewayStatus {
            predictor: self.cfg.predictor.name(),
            uplinks: self.counters.clone(),
            global: self.global.clone(),
            best: self.global.best(),
            active: self.active,
            max_connections: self.cfg.max_connections,
            busy_refusals: self.busy_refusals,
            races: self.races,
            destinations: self.per_dst.len(),
        }
    }

    /// The settings.
    pub fn config(&self) -> &GatewayConfig {
        &self.cfg
    }

    fn predictor_mut(&mut self, now: Instant, dst: IpAddr) -> &mut Predictor {
        let Scope::Destination { max_entries } = self.cfg.scope else {
            return &mut self.global;
        };
        if !self.per_dst.contains_key(&dst) && self.per_dst.len() >= max_entries.max(1) {
            let oldest = self
                .per_dst
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| *k);
            if let Some(k) = oldest {
                self.per_dst.remove(&k);
            }
        }
        if !self.per_dst.contains_key(&dst) {
            // A new destination starts with its own race history but the uplinks' probe
            // state so far (probes measure uplinks, not destinations).
            let mut fresh = Predictor::new(self.cfg.predictor.clone(), self.cfg.n_uplinks);
            fresh.copy_probe_state(&self.global);
            self.per_dst.insert(dst, (fresh, now));
        }
        let entry = self.per_dst.get_mut(&dst).expect("inserted above");
        entry.1 = now;
        &mut entry.0
    }
}

#[cfg(test)]
#[path = "gateway_tests.rs"]
mod tests;
