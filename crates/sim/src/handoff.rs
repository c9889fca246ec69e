//! A constant-rate stream around each handoff of a drive: packets lost and the one-way delay
//! distribution in a window around every Wi-Fi outage, against the rest of the run (the
//! handoff case of Amir et al., "On Redundant Multipath Operating System Support for
//! Wireless Mesh Networks": 64 kbit/s voice, on the drive of issue 16).
//!
//! A handoff here is one outage of the drive's link: from coverage lost (`down`) to the next
//! address configured (`up`; `crate::drive::events`). Its window runs from `PRE` before
//! `down` to `POST` after `up`: the edge of coverage (losses rising over the last 3 s in
//! the scenarios that model it) and what a sender that has not yet noticed the loss sends
//! into it, the outage itself, and the return (a `best` failback waits `failback_hold`,
//! 3 s, after the link is Up again). A packet belongs to the first window holding its
//! send time; every other packet is "steady".
//!
//! Invariants: pure functions of the trace (no clock, no RNG); a packet is lost when it
//! never arrived, late when it arrived after the deadline (late packets are in the delay
//! histogram too); delays are bucketed by whole milliseconds up to 1 s, then by 100 ms.

use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Duration;

/// Window before coverage is lost.
pub const PRE: Duration = Duration::from_secs(3);
/// Window after the new address.
pub const POST: Duration = Duration::from_secs(4);
/// A traced packet not (yet) received.
pub const NOT_RECEIVED: u32 = u32::MAX;
/// What counts as late for a stream without a `deadline` (voice: ITU-T G.114's 150 ms).
pub const DEFAULT_DEADLINE: Duration = Duration::from_millis(150);

/// Packets of one class (in handoff windows, or steady).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct StreamStats {
    /// Packets sent.
    pub sent: u64,
    /// Never received.
    pub lost: u64,
    /// Received after the deadline.
    pub late: u64,
    /// One-way delay of the received packets: (bucket's lower edge in ms, packets).
    pub delay_ms: Vec<(u32, u64)>,
}

/// The stream around the handoffs of one run.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct HandoffReport {
    /// Handoffs whose window holds at least one packet sent.
    pub handoffs: u32,
    /// Outage length of each (coverage lost to the new address), s.
    pub outage_s: Vec<f64>,
    /// Packets lost in each window.
    pub lost_each: Vec<u32>,
    /// Packets late (after the deadline) in each window.
    pub late_each: Vec<u32>,
    /// Everything sent in a window.
    pub window: StreamStats,
    /// Everything else.
    pub steady: StreamStats,
}

fn bucket(delay_us: u32) -> u32 {
    let ms = delay_us / 1000;
    if ms < 1000 {
        ms
    } else {
        ms / 100 * 100
    }
}

fn add(s: &mut StreamStats, hist: &mut BTreeMap<u32, u64>, delay_us: u32, deadline_us: u64) {
    s.sent += 1;
    if delay_us == NOT_RECEIVED {
        s.lost += 1;
        return;
    }
    s.late += u64::from(u64::from(delay_us) > deadline_us);
    *hist.entry(bucket(delay_us)).or_default() += 1;
}

/// The report of a trace of (send time, delay) in µs per packet — `NOT_RECEIVED` for one
/// that never arrived — against the drive's `outages` [down, up).
pub fn report(
    trace: &[(u32, u32)],
    outages: &[(Duration, Duration)],
    deadline: Duration,
) -> HandoffReport {
    let windows: Vec<(u64, u64)> = outages
        .iter()
        .map(|&(down, up)| {
            let lo = down.saturating_sub(PRE).as_micros() as u64;
            (lo, (up + POST).as_micros() as u64)
        })
        .collect();
    let deadline_us = deadline.as_micros() as u64;
    let mut r = HandoffReport::default();
    let (mut win_hist, mut steady_hist) = (BTreeMap::new(), BTreeMap::new());
    let mut per = vec![(0u32, 0u32, 0u32); windows.len()];
    for &(sent, delay) in trace {
        let t = u64::from(sent);
        match windows.iter().position(|&(lo, hi)| lo <= t && t < hi) {
            Some(w) => {
                add(&mut r.window, &mut win_hist, delay, deadline_us);
                per[w].0 += 1;
                per[w].1 += u32::from(delay == NOT_RECEIVED);
                per[w].2 += u32::from(delay != NOT_RECEIVED && u64::from(delay) > deadline_us);
            }
            None => add(&mut r.steady, &mut steady_hist, delay, deadline_us),
        }
    }
    for (w, &(sent, lost, late)) in per.iter().enumerate() {
        if sent == 0 {
            continue;
        }
        r.handoffs += 1;
        let (down, up) = outages[w];
        r.outage_s.push((up - down).as_secs_f64());
        r.lost_each.push(lost);
        r.late_each.push(late);
    }
    r.window.delay_ms = win_hist.into_iter().collect();
    r.steady.delay_ms = steady_hist.into_iter().collect();
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u32 = 1000;

    /// 50 packets/s for 20 s, an outage [8 s, 10 s): its window [5 s, 14 s) holds 450
    /// packets; the 100 sent during the outage are lost, 10 just after it arrive late.
    #[test]
    fn windows_count_their_losses_and_delays() {
        let outage = (Duration::from_secs(8), Duration::from_secs(10));
        let trace: Vec<(u32, u32)> = (0..1000u32)
            .map(|i| {
                let t = i * 20 * MS;
                let d = match t {
                    t if (8_000 * MS..10_000 * MS).contains(&t) => NOT_RECEIVED,
                    t if (10_000 * MS..10_200 * MS).contains(&t) => 400 * MS,
                    _ => 12 * MS + 500,
                };
                (t, d)
            })
            .collect();
        let r = report(&trace, &[outage], Duration::from_millis(150));
        assert_eq!(r.handoffs, 1);
        assert_eq!(
            (r.window.sent, r.window.lost, r.window.late),
            (450, 100, 10)
        );
        assert_eq!(
            (r.lost_each.clone(), r.late_each.clone()),
            (vec![100], vec![10])
        );
        assert_eq!(r.outage_s, vec![2.0]);
        assert_eq!(r.window.delay_ms, vec![(12, 340), (400, 10)]);
        assert_eq!((r.steady.sent, r.steady.lost), (550, 0));
        assert_eq!(r.steady.delay_ms, vec![(12, 550)]);
    }

    /// A window without a packet sent (before the stream started, or every packet taken
    /// by an earlier window it overlaps) is not a handoff of the stream: a packet in two
    /// overlapping windows counts once, in the first.
    #[test]
    fn empty_and_overlapping_windows() {
        let outages = [
            (Duration::from_secs(1), Duration::from_secs(2)),
            (Duration::from_secs(10), Duration::from_secs(11)),
            (Duration::from_secs(12), Duration::from_secs(13)),
        ];
        let trace = [(10_500 * MS, NOT_RECEIVED), (14_000 * MS, 1500 * MS)];
        let r = report(&trace, &outages, Duration::from_millis(150));
        assert_eq!(r.handoffs, 1);
        assert_eq!(r.outage_s, vec![1.0]);
        assert_eq!(r.lost_each, vec![1]);
        assert_eq!(r.late_each, vec![1]);
        assert_eq!(r.window.delay_ms, vec![(1500, 1)]);
        assert_eq!(r.steady.sent, 0);
    }
}
