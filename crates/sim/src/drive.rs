//! A vehicle driving past Wi-Fi access points: the coverage model and its seeded schedule
//! (Mukherjee, "Network-Assisted Multihoming", §4.2.1-4.2.2; issue 16).
//!
//! The same model as the lab's `lab/drive.py` (its module doc states the assumptions): APs on
//! a straight road at `x_0 = range_m`, `x_(i+1) = x_i + d_i` with `d_i` uniform in `gap_m`;
//! each serves `range_m` metres either side, overlapping coverages hand off at the midpoint;
//! the car moves at `speed` m/s from x = 0 with AP 0's address already configured; at every
//! later association the client gets a new address after a DHCP delay uniform in `dhcp_s`,
//! and the link carries nothing from the end of one association until then (an association
//! shorter than its DHCP delay carries nothing and is skipped). Optionally (`edge_m` > 0) the
//! loss rate rises in 1-s steps from `edge_loss / n` to `edge_loss` over the last `edge_m`
//! metres before coverage is lost, as the lab's drive does (the edge of coverage), and is 0
//! again from the next association.
//!
//! Invariants: a schedule is a pure function of (spec, horizon, rng); attachments are in
//! time order, `enter <= up < down`, and each `down` is at or before the next `enter`.

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use serde::Deserialize;
use std::time::Duration;

fn default_speed() -> f64 {
    10.0
}
fn default_range() -> f64 {
    100.0
}
fn default_dhcp() -> [f64; 2] {
    [1.0, 2.0]
}

/// The `[drive]` table of a scenario: the drive applied to one link of every client.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DriveSpec {
    /// Which link is the Wi-Fi link (default 0).
    #[serde(default)]
    pub link: usize,
    /// Speed, m/s.
    #[serde(default = "default_speed")]
    pub speed: f64,
    /// Effective range of an AP, m (it covers twice this much road).
    #[serde(default = "default_range")]
    pub range_m: f64,
    /// Inter-AP distance, uniform in [min, max] m.
    pub gap_m: [f64; 2],
    /// DHCP delay at each association, uniform in [min, max] s.
    #[serde(default = "default_dhcp")]
    pub dhcp_s: [f64; 2],
    /// Edge of coverage: metres before coverage is lost over which losses rise (0: none).
    #[serde(default)]
    pub edge_m: f64,
    /// Edge of coverage: the loss rate reached when coverage is lost (0-1).
    #[serde(default)]
    pub edge_loss: f64,
}

impl DriveSpec {
    /// Checks ranges; the text says what is wrong.
    pub fn validate(&self) -> Result<(), String> {
        let ordered = |r: [f64; 2]| r[0].is_finite() && r[1].is_finite() && r[0] <= r[1];
        if !(self.speed > 0.0 && self.speed.is_finite()) {
            return Err("drive.speed must be > 0".into());
        }
        if !(self.range_m > 0.0 && self.range_m.is_finite()) {
            return Err("drive.range_m must be > 0".into());
        }
        if !ordered(self.gap_m) || self.gap_m[0] <= 0.0 {
            return Err("drive.gap_m must be [min, max] with 0 < min <= max".into());
        }
        if !ordered(self.dhcp_s) || self.dhcp_s[0] < 0.0 {
            return Err("drive.dhcp_s must be [min, max] with 0 <= min <= max".into());
        }
        if !(self.edge_m >= 0.0 && self.edge_m.is_finite()) {
            return Err("drive.edge_m must be >= 0".into());
        }
        if !(0.0..=1.0).contains(&self.edge_loss) {
            return Err("drive.edge_loss must be in [0, 1]".into());
        }
        Ok(())
    }
}

/// One association that carried traffic: address `index` usable from `up` to `down`;
/// `enter` is the association (carrier back, DHCP running until `up`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Attachment {
    /// Address number (0: the address the client starts with).
    pub index: u32,
    /// Association.
    pub enter: Duration,
    /// Address configured.
    pub up: Duration,
    /// Coverage lost.
    pub down: Duration,
}

fn uniform(rng: &mut ChaCha8Rng, r: [f64; 2]) -> f64 {
    if r[1] > r[0] {
        rng.gen_range(r[0]..r[1])
    } else {
        r[0]
    }
}

/// (enter, leave) of each AP's service along the road until `horizon`, in seconds.
fn service(spec: &DriveSpec, horizon: f64, rng: &mut ChaCha8Rng) -> Vec<(f64, f64)> {
    let (v, r) = (spec.speed, spec.range_m);
    let mut aps = vec![r];
    while aps[aps.len() - 1] - r < v * horizon + spec.gap_m[1] {
        let next = aps[aps.len() - 1] + uniform(rng, spec.gap_m);
        aps.push(next);
    }
    let mut out = Vec::new();
    for i in 0..aps.len() - 1 {
        let x = aps[i];
        let lo = if i == 0 {
            x - r
        } else {
            (x - r).max((aps[i - 1] + x) / 2.0)
        };
        let hi = (x + r).min((x + aps[i + 1]) / 2.0);
        if lo / v < horizon {
            out.push((lo / v, hi / v));
        }
    }
    out
}

/// The attachments of a drive lasting `horizon`.
pub fn schedule(spec: &DriveSpec, horizon: Duration, rng: &mut ChaCha8Rng) -> Vec<Attachment> {
    let mut out = Vec::new();
    for (k, (enter, leave)) in service(spec, horizon.as_secs_f64(), rng)
        .into_iter()
        .enumerate()
    {
        let dhcp = if k == 0 {
            0.0
        } else {
            uniform(rng, spec.dhcp_s)
        };
        let up = enter + dhcp;
        if up >= leave {
            continue;
        }
        out.push(Attachment {
            index: out.len() as u32,
            enter: Duration::from_secs_f64(enter),
            up: Duration::from_secs_f64(up),
            down: Duration::from_secs_f64(leave),
        });
    }
    out
}

/// What happens to the link at one instant of the drive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DriveEvent {
    /// Coverage lost: carrier down.
    CarrierDown,
    /// Associated: carrier up (no address yet).
    CarrierUp,
    /// DHCP done: address number `n` is configured.
    Address(u32),
    /// Edge of coverage: the link's loss rate becomes this many parts per million.
    Loss(u32),
}

/// Timed drive events, in time order.
pub type Events = Vec<(Duration, DriveEvent)>;
/// Windows [start, end) during which the link carries nothing.
pub type Outages = Vec<(Duration, Duration)>;

/// The loss steps of the edge of coverage (`edge_m`, `edge_loss`), as the lab's
/// `lab/drive.py::edge_steps` makes them: 1-s steps over the last `edge_m` metres of each
/// attachment that fall after its address, and loss 0 again at each later association.
pub fn edge_events(spec: &DriveSpec, atts: &[Attachment]) -> Events {
    let mut ev = Vec::new();
    if spec.edge_m <= 0.0 || spec.edge_loss <= 0.0 {
        return ev;
    }
    let span = spec.edge_m / spec.speed;
    let n = (span.round() as u32).max(1);
    for (i, a) in atts.iter().enumerate() {
        if i > 0 {
            ev.push((a.enter, DriveEvent::Loss(0)));
        }
        for k in 0..n {
            let t = a.down.as_secs_f64() - span + f64::from(k) * span / f64::from(n);
            let p = spec.edge_loss * f64::from(k + 1) / f64::from(n);
            if t > a.up.as_secs_f64() {
                ev.push((
                    Duration::from_secs_f64(t),
                    DriveEvent::Loss((p * 1e6) as u32),
                ));
            }
        }
    }
    ev
}

/// The timed events of a schedule, in time order; and the outage windows [down, up) during
/// which the link carries nothing.
pub fn events(atts: &[Attachment]) -> (Events, Outages) {
    let mut ev = Vec::new();
    let mut outages = Vec::new();
    for (i, a) in atts.iter().enumerate() {
        if i > 0 {
            outages.push((atts[i - 1].down, a.up));
            ev.push((a.enter, DriveEvent::CarrierUp));
            ev.push((a.up, DriveEvent::Address(a.index)));
        }
        ev.push((a.down, DriveEvent::CarrierDown));
    }
    // A handoff without a gap has CarrierDown and CarrierUp at one instant: down first.
    ev.sort_by_key(|&(t, e)| (t, e != DriveEvent::CarrierDown));
    (ev, outages)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn spec(gap: [f64; 2]) -> DriveSpec {
        DriveSpec {
            link: 0,
            speed: 10.0,
            range_m: 100.0,
            gap_m: gap,
            dhcp_s: [1.0, 2.0],
            edge_m: 0.0,
            edge_loss: 0.0,
        }
    }

    /// Edge losses: 20 m at 10 m/s = two 1-s steps (15 %, 30 %) before each coverage loss,
    /// none before an address, back to 0 at the next association.
    #[test]
    fn edge_losses_rise_before_coverage_is_lost() {
        let mut s = spec([400.0, 400.0]);
        s.dhcp_s = [1.5, 1.5];
        (s.edge_m, s.edge_loss) = (20.0, 0.3);
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let a = schedule(&s, Duration::from_secs(70), &mut rng);
        let ev = edge_events(&s, &a);
        let secs = Duration::from_secs;
        assert_eq!(
            &ev[..5],
            &[
                (secs(18), DriveEvent::Loss(150_000)),
                (secs(19), DriveEvent::Loss(300_000)),
                (secs(40), DriveEvent::Loss(0)),
                (secs(58), DriveEvent::Loss(150_000)),
                (secs(59), DriveEvent::Loss(300_000)),
            ]
        );
        s.edge_m = 0.0;
        assert!(
            edge_events(&s, &a).is_empty(),
            "no edge, no events (the draws unchanged)"
        );
    }

    /// Degenerate ranges make the schedule exact: d = 400 m, R = 100 m, 10 m/s: AP 0 serves
    /// [0, 20) s, AP 1 at 500 m serves [40, 60) s, address after 1.5 s: up at 41.5 s.
    #[test]
    fn fixed_gaps_give_the_arithmetic() {
        let mut s = spec([400.0, 400.0]);
        s.dhcp_s = [1.5, 1.5];
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let a = schedule(&s, Duration::from_secs(100), &mut rng);
        assert_eq!(a[0].up, Duration::ZERO);
        assert_eq!(a[0].down, Duration::from_secs(20));
        assert_eq!(a[1].enter, Duration::from_secs(40));
        assert_eq!(a[1].up, Duration::from_millis(41_500));
        assert_eq!(a[1].down, Duration::from_secs(60));
        let (ev, out) = events(&a);
        assert_eq!(
            out[0],
            (Duration::from_secs(20), Duration::from_millis(41_500))
        );
        assert_eq!(ev[0], (Duration::from_secs(20), DriveEvent::CarrierDown));
    }

    /// Overlapping coverage (d = 150 m < 2R) hands off at the midpoint: no gap, 7.5 s apart.
    #[test]
    fn overlap_hands_off_at_the_midpoint() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let a = schedule(&spec([150.0, 150.0]), Duration::from_secs(60), &mut rng);
        assert_eq!(a[0].down, Duration::from_millis(17_500));
        assert_eq!(a[1].enter, a[0].down);
        assert!(a[1].up > a[1].enter && a[1].up < a[1].down);
    }

    /// Connected share: with [300, 500] m, 200 m of 400 m on average are covered, less the
    /// DHCP delay per AP (1.5 s of 40 s): about 46 % over a long drive.
    #[test]
    fn connected_share_matches_the_model() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let h = Duration::from_secs(20_000);
        let a = schedule(&spec([300.0, 500.0]), h, &mut rng);
        let busy: f64 = a.iter().map(|a| (a.down - a.up).as_secs_f64()).sum();
        let share = busy / h.as_secs_f64();
        assert!((0.44..0.49).contains(&share), "{share}");
    }
}
