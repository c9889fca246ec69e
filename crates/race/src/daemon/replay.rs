//! Offline replay of a fetch dataset through the racing core, in virtual time (Rao's MultiNAT thesis
//! §4.1.1: predictors evaluated on recorded connection and download times).
//!
//! The dataset (JSON lines, written by `lab/race/fetch.py`) has one line per object fetched
//! over every uplink — `{"id", "t", "links": [{"status", "connect", "total"}, …]}`, times
//! in seconds, `status` one of ok / refused / timeout / error — and one line per probe,
//! `{"probe": i, "t", "rtt"}` (`rtt` null when lost). Lines are taken in order of `t`.
//!
//! Each object becomes one race started at `t`: uplink i's handshake completes at
//! `t + connect_i` (ok), is refused then (refused), or never (timeout / error: the race's
//! own connect timeout ends it). If the race uses uplink u at time `d`, the download takes
//! `(d − t) + (total_u − connect_u)`: the decision delay plus the rest of the transfer as
//! recorded over u. One JSON line per object goes to stdout: `{"id", "uplink", "seconds",
//! "outcome"}` (`uplink` and `seconds` null when the client would have been refused).

use super::config::RaceSettings;
use crate::core::{AttemptState, Gateway, Outcome, Race, UplinkId};
use anyhow::{bail, Context, Result};
use multihome_proto::Instant;
use serde::Deserialize;
use serde_json::json;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::{BufRead, Write};
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::time::Duration;

#[derive(Debug, Deserialize)]
struct Line {
    t: f64,
    id: Option<u64>,
    links: Option<Vec<Link>>,
    probe: Option<u8>,
    rtt: Option<f64>,
}

#[derive(Debug, Deserialize)]
struct Link {
    status: String,
    connect: Option<f64>,
    total: Option<f64>,
}

fn at(t: f64) -> Instant {
    Instant::from_micros((t.max(0.0) * 1e6) as u64)
}

/// One object's race in virtual time: (uplink, download seconds, outcome).
fn replay_object(
    gw: &mut Gateway,
    t: f64,
    links: &[Link],
) -> (Option<UplinkId>, Option<f64>, Outcome) {
    let dst = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
    let start = at(t);
    let Ok(mut race) = gw.begin(start, dst, None) else {
        unreachable!("replay releases every connection before the next");
    };
    let events: Vec<(Instant, UplinkId, bool)> = links
        .iter()
        .enumerate()
        .filter_map(|(i, l)| {
            let c = l.connect?;
            let ok = match l.status.as_str() {
                "ok" => true,
                "refused" => false,
                _ => return None,
            };
            Some((at(t + c), UplinkId(i as u8), ok))
        })
        .collect();
    // Earliest first; a timeout due at the same instant as a completion goes first.
    let mut events: BinaryHeap<Reverse<(Instant, UplinkId, bool)>> =
        events.into_iter().map(Reverse).collect();
    while race.outcome().is_none() {
        while race.poll_action().is_some() {}
        let next_ev = events.peek().map(|e| e.0 .0);
        match (next_ev, race.poll_timeout()) {
            (Some(e), Some(d)) if d <= e => race.handle_timeout(d),
            (Some(_), _) => {
                let Reverse((when, u, ok)) = events.pop().expect("peeked");
                match race.state(u) {
                    // A staggered attempt not started yet: the recorded handshake (made from
                    // the object's start) is moved to count from the attempt's own start.
                    // Dropping it instead left the backup never connecting in the replay.
                    Some(AttemptState::Planned(s)) => {
                        events.push(Reverse((s + when.saturating_since(start), u, ok)))
                    }
                    _ => deliver(&mut race, when, u, ok),
                }
            }
            (None, Some(d)) => race.handle_timeout(d),
            (None, None) => break,
        }
    }
    gw.end_race(race.outcome().map_or(start, |o| o.1), dst, &race);
    gw.release();
    match race.outcome() {
        Some((Outcome::Chosen(u), when)) => {
            let l = &links[u.index()];
            let rest = l.total.unwrap_or(f64::NAN) - l.connect.unwrap_or(0.0);
            let decided = when.saturating_since(start).as_secs_f64();
            (Some(u), Some(decided + rest), Outcome::Chosen(u))
        }
        Some((o, _)) => (None, None, o),
        None => (None, None, Outcome::Failed),
    }
}

fn deliver(race: &mut Race, when: Instant, u: UplinkId, ok: bool) {
    // Only attempts the plan started can complete (a single-uplink plan ignores the rest).
    if !matches!(race.state(u), Some(AttemptState::Pending(_))) {
        return;
    }
    if ok {
        race.handle_connected(when, u);
    } else {
        race.handle_refused(when, u);
    }
}

/// `multihome race --replay DATASET --config FILE`.
pub fn run(settings: &RaceSettings, dataset: &Path) -> Result<()> {
    let file =
        std::fs::File::open(dataset).with_context(|| format!("opening {}", dataset.display()))?;
    let mut lines = Vec::new();
    for (n, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let l: Line = serde_json::from_str(&line)
            .with_context(|| format!("{}:{}: not a dataset line", dataset.display(), n + 1))?;
        lines.push(l);
    }
    lines.sort_by(|a, b| a.t.total_cmp(&b.t));
    let n = settings.uplinks.len();
    let mut gw = Gateway::new(
        settings.gateway.clone(),
        settings.seed.unwrap_or(1),
        Instant::ZERO,
    )?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for l in &lines {
        if let Some(p) = l.probe {
            gw.handle_probe(UplinkId(p), l.rtt.map(Duration::from_secs_f64));
            continue;
        }
        let (Some(id), Some(links)) = (l.id, l.links.as_ref()) else {
            bail!("a dataset line has neither `probe` nor `id` and `links`");
        };
        if links.len() != n {
            bail!(
                "object {id} has {} links but the config has {n} uplinks",
                links.len()
            );
        }
        let (uplink, seconds, outcome) = replay_object(&mut gw, l.t, links);
        let outcome = match outcome {
            Outcome::Chosen(_) => "chosen",
            Outcome::Refused => "refused",
            Outcome::Failed => "failed",
        };
        let row = json!({"id": id, "uplink": uplink.map(|u| u.0), "seconds": seconds, "outcome": outcome});
        writeln!(out, "{row}")?;
    }
    out.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::{GatewayConfig, PredictorConfig, Scope};

    fn gw(p: PredictorConfig) -> Gateway {
        let cfg = GatewayConfig {
            n_uplinks: 2,
            predictor: p,
            scope: Scope::Global,
            connect_timeout: Duration::from_secs(10),
            max_connections: 1,
            probe_interval: None,
            dscp_pins: vec![],
        };
        Gateway::new(cfg, 1, Instant::ZERO).unwrap()
    }

    fn link(status: &str, c: Option<f64>, total: Option<f64>) -> Link {
        Link {
            status: status.into(),
            connect: c,
            total,
        }
    }

    #[test]
    fn race_uses_the_first_and_adds_nothing() {
        let mut g = gw(PredictorConfig::Race);
        let links = [
            link("ok", Some(0.05), Some(0.5)),
            link("ok", Some(0.02), Some(0.9)),
        ];
        let (u, s, _) = replay_object(&mut g, 10.0, &links);
        assert_eq!(u, Some(UplinkId(1)));
        assert!((s.unwrap() - 0.9).abs() < 1e-6);
        // Refused on one, the other connects: used.
        let links = [
            link("refused", Some(0.01), None),
            link("ok", Some(0.03), Some(0.3)),
        ];
        assert_eq!(replay_object(&mut g, 11.0, &links).0, Some(UplinkId(1)));
        // Refused on all: refused.
        let links = [
            link("refused", Some(0.01), None),
            link("refused", Some(0.03), None),
        ];
        assert_eq!(replay_object(&mut g, 12.0, &links).2, Outcome::Refused);
    }

    #[test]
    fn a_staggered_attempt_connects_after_its_own_start() {
        // After a few objects where uplink 0 is the faster, stagger starts it first and
        // uplink 1 250 ms later. Then uplink 0 is blackholed; uplink 1's recorded handshake
        // took 30 ms from the object's start, so from its own start it completes at
        // 250 + 30 ms. (The replay had dropped that completion as arriving before the
        // attempt started: nothing connected.)
        let mut g = gw(PredictorConfig::Stagger {
            delay: Duration::from_millis(250),
        });
        for t in 1..4 {
            let links = [
                link("ok", Some(0.01), Some(0.1)),
                link("ok", Some(0.05), Some(0.1)),
            ];
            assert_eq!(replay_object(&mut g, t as f64, &links).0, Some(UplinkId(0)));
        }
        let links = [
            link("timeout", None, None),
            link("ok", Some(0.03), Some(0.5)),
        ];
        let (u, s, _) = replay_object(&mut g, 10.0, &links);
        assert_eq!(u, Some(UplinkId(1)));
        assert!((s.unwrap() - (0.25 + 0.5)).abs() < 1e-3, "{s:?}");
    }

    #[test]
    fn avmet_hold_costs_the_delay() {
        let mut g = gw(PredictorConfig::AvMet {
            alpha: 0.99,
            delay: Duration::from_millis(100),
        });
        // Uplink 0 (preferred at start) is blackholed: uplink 1 is used after the hold.
        let links = [
            link("timeout", None, None),
            link("ok", Some(0.02), Some(0.2)),
        ];
        let (u, s, _) = replay_object(&mut g, 0.0, &links);
        assert_eq!(u, Some(UplinkId(1)));
        assert!((s.unwrap() - 0.3).abs() < 1e-6, "{s:?}");
        // Static over the dead uplink: the client would be refused after the timeout.
        let mut g = gw(PredictorConfig::Static {
            uplink: UplinkId(0),
        });
        assert_eq!(replay_object(&mut g, 0.0, &links).2, Outcome::Failed);
    }
}
