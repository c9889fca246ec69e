//! Units used in configs and control commands: bandwidths and durations.
//!
//! Bandwidths follow tc's spelling (`bit`, `kbit`, `mbit`, `gbit`, decimal multipliers) so a
//! lab script reads the same for tbf and for linkem; `bps`-style suffixes are rejected on
//! purpose because tc reads them as *bytes* per second and the ambiguity has bitten people.
//! Durations use humantime's grammar (`20ms`, `1s 500ms`, `250us`) plus a bare `0`.
//! Invariant: a parsed [`Bandwidth`] is never zero (a zero-rate link is an outage, say so).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// Errors from parsing a unit string.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum UnitError {
    /// The bandwidth string is not `<number><bit|kbit|mbit|gbit>`.
    #[error("bad rate {0:?}: expected e.g. 20mbit, 500kbit, 1.5gbit")]
    BadRate(String),
    /// The bandwidth parsed to zero or to more than u64 bits per second.
    #[error("rate {0:?} out of range (must be > 0)")]
    RateOutOfRange(String),
    /// The duration string is not humantime-parsable.
    #[error("bad duration {0:?}: expected e.g. 20ms, 1s, 250us")]
    BadDuration(String),
}

/// A link rate in bits per second (> 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Bandwidth(u64);

impl Bandwidth {
    /// Builds a bandwidth from bits per second; `None` for zero.
    pub fn from_bits_per_sec(bps: u64) -> Option<Bandwidth> {
        (bps > 0).then_some(Bandwidth(bps))
    }

    /// Bits per second.
    pub fn bits_per_sec(self) -> u64 {
        self.0
    }

    /// Time to serialise `bytes` at this rate, rounded up to the nanosecond so a link is
    /// never faster than configured.
    pub fn transmit_time(self, bytes: u64) -> Duration {
        // In u64 whenever bytes·8·10⁹ fits (frames up to 2.3 GB, i.e. always): a u128
        // division is a library call, and this runs several times per frame and hop.
        if let Some(bit_ns) = bytes.checked_mul(8 * 1_000_000_000) {
            return Duration::from_nanos(bit_ns.div_ceil(self.0));
        }
        let ns = (u128::from(bytes) * 8 * 1_000_000_000).div_ceil(u128::from(self.0));
        Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
    }

    /// Bytes fully serialised in `elapsed` at this rate (rounded down).
    pub fn bytes_in(self, elapsed: Duration) -> u64 {
        let b = elapsed.as_nanos() * u128::from(self.0) / (8 * 1_000_000_000);
        u64::try_from(b).unwrap_or(u64::MAX)
    }
}

impl FromStr for Bandwidth {
    type Err = UnitError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim().to_ascii_lowercase();
        let split = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| UnitError::BadRate(s.to_owned()))?;
        let (num, unit) = t.split_at(split);
        let mult: f64 = match unit {
            "bit" => 1.0,
            "kbit" => 1e3,
            "mbit" => 1e6,
            "gbit" => 1e9,
            _ => return Err(UnitError::BadRate(s.to_owned())),
        };
        let n: f64 = num.parse().map_err(|_| UnitError::BadRate(s.to_owned()))?;
        let bps = (n * mult).round();
        if !(bps >= 1.0 && bps < u64::MAX as f64) {
            return Err(UnitError::RateOutOfRange(s.to_owned()));
        }
        Ok(Bandwidth(bps as u64))
    }
}

impl fmt::Display for Bandwidth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        if b % 1_000_000_000 == 0 {
            write!(f, "{}gbit", b / 1_000_000_000)
        } else if b % 1_000_000 == 0 {
            write!(f, "{}mbit", b / 1_000_000)
        } else if b % 1_000 == 0 {
            write!(f, "{}kbit", b / 1_000)
        } else {
            write!(f, "{b}bit")
        }
    }
}

/// Parses a duration such as `20ms`, `1s 500ms` or `0`.
pub fn parse_duration(s: &str) -> Result<Duration, UnitError> {
    let t = s.trim();
    if t == "0" {
        return Ok(Duration::ZERO);
    }
    humantime::parse_duration(t).map_err(|_| UnitError::BadDuration(s.to_owned()))
}

/// Serde helpers so config structs can hold `Duration`s written as strings.
pub mod serde_duration {
    use super::parse_duration;
    use serde::{Deserialize, Deserializer};
    use std::time::Duration;

    /// Deserialises an optional humantime duration string.
    pub fn option<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        let s: Option<String> = Option::deserialize(d)?;
        s.map(|s| parse_duration(&s).map_err(serde::de::Error::custom))
            .transpose()
    }

    /// Deserialises a required humantime duration string.
    pub fn required<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let s = String::deserialize(d)?;
        parse_duration(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_in_tc_spelling() {
        assert_eq!(
            "20mbit".parse::<Bandwidth>().unwrap().bits_per_sec(),
            20_000_000
        );
        assert_eq!(
            "1.5gbit".parse::<Bandwidth>().unwrap().bits_per_sec(),
            1_500_000_000
        );
        assert_eq!(
            "500KBIT".parse::<Bandwidth>().unwrap().bits_per_sec(),
            500_000
        );
        assert_eq!("9600bit".parse::<Bandwidth>().unwrap().bits_per_sec(), 9600);
        assert!("20mbps".parse::<Bandwidth>().is_err());
        assert!("mbit".parse::<Bandwidth>().is_err());
        assert!("0mbit".parse::<Bandwidth>().is_err());
        assert!("20".parse::<Bandwidth>().is_err());
    }

    #[test]
    fn rate_display_round_trips() {
        for s in ["20mbit", "1gbit", "512kbit", "1234bit"] {
            assert_eq!(s.parse::<Bandwidth>().unwrap().to_string(), s);
        }
    }

    #[test]
    fn transmit_time_rounds_up() {
        let r = Bandwidth::from_bits_per_sec(3).unwrap();
        // 1 byte = 8 bits at 3 bit/s = 2.666… s, rounded up to the nanosecond.
        assert_eq!(r.transmit_time(1), Duration::from_nanos(2_666_666_667));
        let g = "1gbit".parse::<Bandwidth>().unwrap();
        assert_eq!(g.transmit_time(1500), Duration::from_micros(12));
        assert_eq!(g.bytes_in(Duration::from_micros(12)), 1500);
    }

    #[test]
    fn transmit_time_is_the_same_either_side_of_the_u64_fast_path() {
        let exact = |r: Bandwidth, bytes: u64| {
            let ns = (u128::from(bytes) * 8_000_000_000).div_ceil(u128::from(r.0));
            Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
        };
        let edge = u64::MAX / 8_000_000_000;
        for bps in [1, 3, 7_999, 10_000_000, u64::MAX] {
            let r = Bandwidth::from_bits_per_sec(bps).unwrap();
            for bytes in [0, 1, 1514, 65_535, edge, edge + 1, u64::MAX] {
                assert_eq!(
                    r.transmit_time(bytes),
                    exact(r, bytes),
                    "{bps} bit/s, {bytes} B"
                );
            }
        }
    }

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("20ms").unwrap(), Duration::from_millis(20));
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
        assert_eq!(
            parse_duration("1s 500ms").unwrap(),
            Duration::from_millis(1500)
        );
        assert!(parse_duration("twenty").is_err());
    }
}
