//! Which server a client uses: the lowest round-trip time, inflated by load.
//!
//! Role: rank the trusted servers whose records are live by
//! `score = rtt × (1 + 4 · load / capacity)` and pick the lowest, so a nearby server is
//! preferred until it is loaded: a server at full capacity must be 5× closer to win. A
//! server whose resolver never answered has no RTT and ranks after every measured one
//! (its record may be relayed by another resolver, but it may be unreachable). Excluded
//! servers (the one just lost) are never picked.
//!
//! Invariant: deterministic — ties go to the lower name.

use crate::record::ServerBody;
use multihome_proto::crypto::SessionId;

/// One server as the client knows it.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// Its name.
    pub name: SessionId,
    /// Its record's body.
    pub body: ServerBody,
    /// Round-trip time to its resolver (µs), if it answered.
    pub rtt_us: Option<u64>,
}

/// The score (lower is better); `u64::MAX` for unmeasured.
pub fn score(c: &Candidate) -> u64 {
    let Some(rtt) = c.rtt_us else {
        return u64::MAX;
    };
    let cap = u64::from(c.body.capacity.max(1));
    let load = u64::from(c.body.load).min(cap * 4);
    // rtt × (1 + 4·load/cap) in integers; at least 1 µs so load still ranks at rtt 0.
    let rtt = rtt.max(1);
    rtt.saturating_add(rtt.saturating_mul(4 * load) / cap)
}

/// The best candidate not in `exclude`.
pub fn pick<'a>(cands: &'a [Candidate], exclude: &[SessionId]) -> Option<&'a Candidate> {
    cands
        .iter()
        .filter(|c| !exclude.contains(&c.name))
        .min_by_key(|c| (score(c), c.name))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cand(n: u8, rtt: Option<u64>, load: u32) -> Candidate {
        Candidate {
            name: SessionId([n; 16]),
            body: ServerBody {
                tunnel: vec!["192.0.2.1:7000".parse().unwrap()],
                resolver: "192.0.2.1:7001".parse().unwrap(),
                load,
                capacity: 100,
            },
            rtt_us: rtt,
        }
    }

    #[test]
    fn nearest_unless_loaded() {
        let c = [cand(1, Some(10_000), 0), cand(2, Some(20_000), 0)];
        assert_eq!(pick(&c, &[]).unwrap().name, SessionId([1; 16]));
        // Server 1 at 50 % load: 10 ms × 3 = 30 ms > 20 ms.
        let c = [cand(1, Some(10_000), 50), cand(2, Some(20_000), 0)];
        assert_eq!(pick(&c, &[]).unwrap().name, SessionId([2; 16]));
        // Excluded and unmeasured.
        let c = [cand(1, Some(10_000), 0), cand(2, None, 0)];
        assert_eq!(
            pick(&c, &[SessionId([1; 16])]).unwrap().name,
            SessionId([2; 16])
        );
        assert!(pick(&c[..1], &[SessionId([1; 16])]).is_none());
    }
}
