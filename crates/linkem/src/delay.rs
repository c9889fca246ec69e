//! The delay line: fixed propagation delay plus random jitter, after the rate stage.
//!
//! A frame released by the rate stage at `t` is due at `t + delay + jitter`, jitter drawn per
//! frame (uniform in ±`jitter`, or normal with standard deviation `jitter`), and never before
//! `t`. Without `reorder` a frame is also never due before the frame ahead of it (a frame that
//! drew a short delay waits, as on a real FIFO path; at high packet rates this skews the
//! delay distribution upwards, which netem avoids only by reordering). With `reorder` each
//! frame keeps its own due time and may overtake.
//! Frames whose due time is no earlier than the last queued one's (all of them without
//! `reorder`) wait in a FIFO; only overtaking frames go to a heap, and the earliest of
//! the two fronts leaves first. A heap alone cost a sift of the whole entry, payload
//! included, per push and pop on the simulator's hottest path.
//! Invariant: `pop_due` yields frames in due-time order, ties in release order.

use rand::Rng;
use rand_distr::{Distribution, Normal};
use serde::{Deserialize, Serialize};
use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, VecDeque};
use std::str::FromStr;
use std::time::Duration;

/// Errors from parsing a jitter distribution.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DelayError {
    /// Not `uniform` or `normal`.
    #[error("unknown jitter distribution {0:?} (expected uniform or normal)")]
    UnknownDistribution(String),
}

/// Shape of the jitter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum JitterDist {
    /// Uniform in [−jitter, +jitter].
    #[default]
    Uniform,
    /// Normal with standard deviation `jitter`.
    Normal,
}

impl FromStr for JitterDist {
    type Err = DelayError;
    fn from_str(s: &str) -> Result<Self, DelayError> {
        match s {
            "uniform" => Ok(JitterDist::Uniform),
            "normal" => Ok(JitterDist::Normal),
            _ => Err(DelayError::UnknownDistribution(s.to_owned())),
        }
    }
}

/// Delay parameters of one direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DelaySpec {
    /// Fixed one-way delay.
    pub delay: Duration,
    /// Jitter amount (half-range for uniform, σ for normal).
    pub jitter: Duration,
    /// Jitter shape.
    pub dist: JitterDist,
    /// Whether frames may overtake each other.
    pub reorder: bool,
}

/// `d.as_nanos() as f64`, through u64 when it fits (any delay below 584 years): the same
/// correctly rounded value, without the u128 conversion's library call per frame.
fn nanos_f64(d: Duration) -> f64 {
    let ns = d.as_nanos();
    u64::try_from(ns).map_or_else(|_| ns as f64, |n| n as f64)
}

struct Entry<P> {
    due: Duration,
    seq: u64,
    bytes: u64,
    payload: P,
}

impl<P> PartialEq for Entry<P> {
    fn eq(&self, o: &Self) -> bool {
        (self.due, self.seq) == (o.due, o.seq)
    }
}
impl<P> Eq for Entry<P> {}
impl<P> PartialOrd for Entry<P> {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl<P> Ord for Entry<P> {
    fn cmp(&self, o: &Self) -> Ordering {
        (self.due, self.seq).cmp(&(o.due, o.seq))
    }
}

/// Frames in propagation.
pub struct DelayLine<P> {
    spec: DelaySpec,
    /// Frames in push order, due times non-decreasing.
    fifo: VecDeque<Entry<P>>,
    /// Frames due before the back of `fifo` when they were pushed (only with `reorder`).
    heap: BinaryHeap<Reverse<Entry<P>>>,
    seq: u64,
    last_due: Duration,
    bytes: u64,
}

impl<P> DelayLine<P> {
    /// An empty line.
    pub fn new(spec: DelaySpec) -> Self {
        DelayLine {
            spec,
            fifo: VecDeque::new(),
            heap: BinaryHeap::new(),
            seq: 0,
            last_due: Duration::ZERO,
            bytes: 0,
        }
    }

    /// The parameters.
    pub fn spec(&self) -> DelaySpec {
        self.spec
    }

    /// Changes the parameters; frames already in the line keep their due times.
    pub fn set_spec(&mut self, spec: DelaySpec) {
        self.spec = spec;
    }

    /// Puts a frame released at `released` on the line.
    pub fn push<R: Rng>(&mut self, released: Duration, payload: P, bytes: u64, rng: &mut R) {
        let base = nanos_f64(self.spec.delay);
        let j = nanos_f64(self.spec.jitter);
        let offset = if j == 0.0 {
            0.0
        } else {
            match self.spec.dist {
                JitterDist::Uniform => rng.gen_range(-j..=j),
                JitterDist::Normal => Normal::new(0.0, j).expect("finite σ").sample(rng),
            }
        };
        let mut due = released + Duration::from_nanos((base + offset).max(0.0) as u64);
        if !self.spec.reorder {
            due = due.max(self.last_due);
        }
        self.last_due = self.last_due.max(due);
        self.seq += 1;
        self.bytes += bytes;
        let e = Entry {
            due,
            seq: self.seq,
            bytes,
            payload,
        };
        // Sequence numbers grow, so a due time not before the back keeps `fifo` sorted.
        if self.fifo.back().is_none_or(|b| due >= b.due) {
            self.fifo.push_back(e);
        } else {
            self.heap.push(Reverse(e));
        }
    }

    /// Whether the earliest frame is the front of `fifo` (else the top of `heap`); `None`
    /// when the line is empty.
    fn earliest_in_fifo(&self) -> Option<bool> {
        match (self.fifo.front(), self.heap.peek()) {
            (Some(f), Some(Reverse(h))) => Some(f < h),
            (Some(_), None) => Some(true),
            (None, Some(_)) => Some(false),
            (None, None) => None,
        }
    }

    /// Due time of the earliest frame.
    pub fn next_due(&self) -> Option<Duration> {
        if self.earliest_in_fifo()? {
            self.fifo.front().map(|e| e.due)
        } else {
            self.heap.peek().map(|e| e.0.due)
        }
    }

    /// Removes the earliest frame if it is due at `now`, with its size.
    pub fn pop_due(&mut self, now: Duration) -> Option<(P, u64)> {
        if self.next_due()? > now {
            return None;
        }
        let e = if self.earliest_in_fifo()? {
            self.fifo.pop_front()?
        } else {
            self.heap.pop()?.0
        };
        self.bytes -= e.bytes;
        Some((e.payload, e.bytes))
    }

    /// Bytes in the line.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Frames in the line.
    pub fn len(&self) -> usize {
        self.fifo.len() + self.heap.len()
    }

    /// Whether the line is empty.
    pub fn is_empty(&self) -> bool {
        self.fifo.is_empty() && self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    fn drain(line: &mut DelayLine<u64>) -> Vec<(u64, Duration)> {
        let mut out = Vec::new();
        while let Some(t) = line.next_due() {
            let (p, _) = line.pop_due(t).unwrap();
            out.push((p, t));
        }
        out
    }

    #[test]
    fn nanos_convert_as_from_u128() {
        for d in [
            Duration::ZERO,
            Duration::from_nanos((1 << 53) + 1),
            Duration::from_nanos(u64::MAX),
            Duration::new(u64::MAX / 1_000_000_000 + 1, 1),
            Duration::MAX,
        ] {
            assert_eq!(nanos_f64(d).to_bits(), (d.as_nanos() as f64).to_bits());
        }
    }

    #[test]
    fn fixed_delay_is_exact() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let mut line = DelayLine::new(DelaySpec {
            delay: Duration::from_millis(20),
            ..Default::default()
        });
        line.push(Duration::from_millis(3), 7, 100, &mut rng);
        assert_eq!(line.pop_due(Duration::from_millis(22)), None);
        assert_eq!(line.pop_due(Duration::from_millis(23)), Some((7, 100)));
        assert!(line.is_empty());
    }

    #[test]
    fn jitter_without_reorder_keeps_order() {
        let mut rng = ChaCha8Rng::seed_from_u64(2);
        let spec = DelaySpec {
            delay: Duration::from_millis(20),
            jitter: Duration::from_millis(10),
            dist: JitterDist::Uniform,
            reorder: false,
        };
        let mut line = DelayLine::new(spec);
        for i in 0..1000u64 {
            line.push(Duration::from_micros(i * 100), i, 1, &mut rng);
        }
        let out = drain(&mut line);
        assert!(out.windows(2).all(|w| w[0].0 < w[1].0), "FIFO order kept");
        let delays: Vec<_> = out
            .iter()
            .map(|(i, t)| *t - Duration::from_micros(i * 100))
            .collect();
        assert!(delays
            .iter()
            .all(|d| *d >= Duration::from_millis(10) && *d <= Duration::from_millis(40)));
    }

    #[test]
    fn jitter_with_reorder_overtakes_and_is_centred() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let spec = DelaySpec {
            delay: Duration::from_millis(20),
            jitter: Duration::from_millis(5),
            dist: JitterDist::Normal,
            reorder: true,
        };
        let mut line = DelayLine::new(spec);
        for i in 0..10_000u64 {
            line.push(Duration::from_micros(i * 100), i, 1, &mut rng);
        }
        let out = drain(&mut line);
        assert!(out.windows(2).any(|w| w[0].0 > w[1].0), "some overtaking");
        let mut d: Vec<_> = out
            .iter()
            .map(|(i, t)| t.as_micros() as i64 - (i * 100) as i64)
            .collect();
        d.sort_unstable();
        let median = d[d.len() / 2];
        assert!((median - 20_000).abs() < 200, "median {median} µs");
        // σ = 5 ms: the 16th–84th percentile spread is about 10 ms.
        let spread = d[d.len() * 84 / 100] - d[d.len() * 16 / 100];
        assert!((9_000..11_000).contains(&spread), "spread {spread} µs");
    }

    #[test]
    fn overtaking_frames_leave_in_due_order_ties_in_release_order() {
        let mut rng = ChaCha8Rng::seed_from_u64(4);
        let mut line = DelayLine::new(DelaySpec {
            delay: Duration::from_millis(2),
            jitter: Duration::from_millis(3),
            dist: JitterDist::Uniform,
            reorder: true,
        });
        // Releases in bursts at the same instant, some frames clamped to zero delay:
        // overtaking and equal due times both occur.
        for i in 0..5_000u64 {
            line.push(Duration::from_micros(i / 4 * 300), i, 1, &mut rng);
            if i % 7 == 0 {
                let t = line.next_due().unwrap();
                let (p, _) = line.pop_due(t).unwrap();
                assert!(p <= i);
            }
        }
        let out = drain(&mut line);
        assert!(out
            .windows(2)
            .all(|w| w[0].1 < w[1].1 || (w[0].1 == w[1].1 && w[0].0 < w[1].0)));
        assert!(line.is_empty() && line.bytes() == 0);
    }
}
