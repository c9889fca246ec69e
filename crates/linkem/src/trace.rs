//! Mahimahi-format delivery traces: parsing, writing, and opportunity arithmetic.
//!
//! A trace is a text file with one integer per line: a millisecond timestamp at which the link
//! may deliver one 1500-byte opportunity (several lines may repeat a timestamp for rates above
//! 12 Mbit/s). The trace loops with period equal to its last timestamp, exactly as Mahimahi's
//! `mm-link` does. Opportunity `k` (counted from 0 across loops) happens at
//! `ms[k mod n] + (k div n) · period`.
//! Invariants: timestamps are non-decreasing, there is at least one, and the last is > 0 (a
//! zero period would loop forever at one instant).

use std::fmt::Write as _;
use std::time::Duration;

/// Bytes one opportunity may deliver (Mahimahi's PACKET_SIZE).
pub const OPPORTUNITY_BYTES: u64 = 1500;

/// Errors from parsing a trace.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TraceError {
    /// A line is not a non-negative integer.
    #[error("trace line {line}: {text:?} is not a millisecond timestamp")]
    NotANumber {
        /// 1-based line number.
        line: usize,
        /// The text of the line.
        text: String,
    },
    /// A timestamp is smaller than the one before it.
    #[error("trace line {line}: timestamp {ms} is before the previous one")]
    Decreasing {
        /// 1-based line number.
        line: usize,
        /// The offending timestamp.
        ms: u64,
    },
    /// The trace has no timestamps, or its last is 0 so it has no period.
    #[error("trace must have at least one timestamp and end after 0 ms")]
    Empty,
}

/// A parsed, validated trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trace {
    ms: Vec<u64>,
}

impl Trace {
    /// Builds a trace from millisecond timestamps, checking the invariants.
    pub fn from_millis(ms: Vec<u64>) -> Result<Trace, TraceError> {
        if let Some(i) = ms.windows(2).position(|w| w[1] < w[0]) {
            return Err(TraceError::Decreasing {
                line: i + 2,
                ms: ms[i + 1],
            });
        }
        match ms.last() {
            Some(&last) if last > 0 => Ok(Trace { ms }),
            _ => Err(TraceError::Empty),
        }
    }

    /// Parses the text of a Mahimahi trace (blank lines are ignored).
    pub fn parse(text: &str) -> Result<Trace, TraceError> {
        let mut ms = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let t = line.trim();
            if t.is_empty() {
                continue;
            }
            let v = t.parse::<u64>().map_err(|_| TraceError::NotANumber {
                line: i + 1,
                text: t.to_owned(),
            })?;
            ms.push(v);
        }
        Trace::from_millis(ms)
    }

    /// The trace as Mahimahi text, one timestamp per line.
    pub fn to_text(&self) -> String {
        let mut s = String::with_capacity(self.ms.len() * 6);
        for m in &self.ms {
            let _ = writeln!(s, "{m}");
        }
        s
    }

    /// The timestamps.
    pub fn millis(&self) -> &[u64] {
        &self.ms
    }

    /// Loop period.
    pub fn period(&self) -> Duration {
        Duration::from_millis(self.period_ms())
    }

    fn period_ms(&self) -> u64 {
        *self.ms.last().expect("validated non-empty")
    }

    /// Mean rate over one period, in bits per second.
    pub fn mean_bits_per_sec(&self) -> f64 {
        (self.ms.len() as f64 * OPPORTUNITY_BYTES as f64 * 8.0) / self.period().as_secs_f64()
    }

    /// Time of opportunity `k` (counted across loops) after the trace's origin.
    pub fn opportunity_time(&self, k: u64) -> Duration {
        let n = self.ms.len() as u64;
        let ms = self.ms[(k % n) as usize] + (k / n) * self.period_ms();
        Duration::from_millis(ms)
    }

    /// Index of the first opportunity at or after `t` (time since the trace's origin).
    pub fn first_at_or_after(&self, t: Duration) -> u64 {
        let n = self.ms.len() as u64;
        let period_ns = u128::from(self.period_ms()) * 1_000_000;
        let t_ns = t.as_nanos();
        let lap = u64::try_from(t_ns / period_ns).unwrap_or(u64::MAX / (2 * n));
        let rem = t_ns % period_ns;
        if rem == 0 && lap > 0 {
            // The previous lap's last entry sits exactly at lap·period, which is `t` itself.
            // Step back over equal timestamps so none is skipped.
            let last = self.period_ms();
            let equal = self.ms.iter().rev().take_while(|&&m| m == last).count() as u64;
            return lap * n - equal;
        }
        let i = self
            .ms
            .partition_point(|&m| u128::from(m) * 1_000_000 < rem) as u64;
        // `rem < period` and the last entry equals the period, so `i < n` always.
        lap * n + i
    }

    /// Index of the first opportunity strictly after `t`.
    pub fn first_after(&self, t: Duration) -> u64 {
        let mut k = self.first_at_or_after(t);
        while self.opportunity_time(k) <= t {
            k += 1;
        }
        k
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_and_rejects() {
        let t = Trace::parse("1\n1\n5\n\n10\n").unwrap();
        assert_eq!(t.millis(), &[1, 1, 5, 10]);
        assert_eq!(t.period(), Duration::from_millis(10));
        assert_eq!(Trace::parse(t.to_text().as_str()).unwrap(), t);
        assert!(matches!(
            Trace::parse("3\n2\n"),
            Err(TraceError::Decreasing { line: 2, ms: 2 })
        ));
        assert!(matches!(
            Trace::parse("x"),
            Err(TraceError::NotANumber { line: 1, .. })
        ));
        assert_eq!(Trace::parse("0\n0\n"), Err(TraceError::Empty));
        assert_eq!(Trace::parse(""), Err(TraceError::Empty));
    }

    #[test]
    fn loops_with_last_timestamp_as_period() {
        let t = Trace::from_millis(vec![0, 4, 10]).unwrap();
        let times: Vec<u64> = (0..7)
            .map(|k| t.opportunity_time(k).as_millis() as u64)
            .collect();
        assert_eq!(times, vec![0, 4, 10, 10, 14, 20, 20]);
        assert_eq!(t.first_at_or_after(Duration::from_millis(10)), 2);
        assert_eq!(t.first_at_or_after(Duration::from_micros(10_001)), 4);
        assert_eq!(t.first_after(Duration::from_millis(10)), 4);
        // 12 Mbit/s: 1000 opportunities of 1500 B per second.
        let one_per_ms = Trace::from_millis((1..=1000).collect()).unwrap();
        assert!((one_per_ms.mean_bits_per_sec() - 12e6).abs() < 1.0);
    }

    proptest! {
        #[test]
        fn first_at_or_after_is_the_first(
            mut ms in proptest::collection::vec(0u64..50, 1..20),
            t_us in 0u64..500_000,
        ) {
            ms.sort_unstable();
            let last = ms.len() - 1;
            ms[last] += 1;
            let tr = Trace::from_millis(ms).unwrap();
            let t = Duration::from_micros(t_us);
            let k = tr.first_at_or_after(t);
            prop_assert!(tr.opportunity_time(k) >= t);
            prop_assert!(k == 0 || tr.opportunity_time(k - 1) < t);
            let j = tr.first_after(t);
            prop_assert!(tr.opportunity_time(j) > t);
            prop_assert!(j == 0 || tr.opportunity_time(j - 1) <= t);
        }
    }
}
