//! The server's handshake flood defence (docs/PROTOCOL.md §3.5), in WireGuard's manner:
//! what an initiation with a valid mac1 must also show before the server spends a
//! Diffie-Hellman on it.
//!
//! - **Load** is the number of initiations with a valid mac1 per second of the caller's
//!   clock (fixed one-second windows). The server is under load while the current or the
//!   previous window counted more than `LOAD_THRESHOLD`.
//! - **Under load** an initiation needs a valid mac2 (a cookie for its source address,
//!   `crypto::cookie`); without one it is answered with a cookie reply and nothing else.
//!   With one, its source IP must pass a token bucket (`RATE_PER_SEC`, burst `RATE_BURST`,
//!   WireGuard's figures): a source that proved its address still cannot make the server
//!   do more than 20 handshakes a second for it.
//! - Not under load, every initiation with a valid mac1 is processed (mac2 is not looked
//!   at), so a quiet server costs its clients no extra round trip.
//!
//! Invariants: state is bounded (`MAX_SOURCES` buckets, pruned of idle ones every
//! second; when full of busy ones a new source is refused rather than the table grown);
//! nothing here does a Diffie-Hellman or allocates per datagram beyond a table entry.

use crate::crypto::cookie::{CookieChecker, Mac16, MacKeys};
use crate::crypto::PublicKey;
use crate::Instant;
use core::time::Duration;
use rand_core::RngCore;
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};

/// Initiations with a valid mac1 per second above which the server is under load. At
/// about 0.2 ms of Diffie-Hellman each (one core), 100 a second is 2 % of a core; a
/// thousand clients rekeying every 120 s on two links make about 17.
pub const LOAD_THRESHOLD: u32 = 100;
/// Handshakes per second and source IP allowed under load (WireGuard's
/// `packetsPerSecond`).
pub const RATE_PER_SEC: u64 = 20;
/// Handshakes a source IP may send at once under load (WireGuard's `packetsBurstable`).
pub const RATE_BURST: u64 = 5;
/// Most source IPs tracked by the rate limit.
pub const MAX_SOURCES: usize = 4096;

const WINDOW: Duration = Duration::from_secs(1);
/// Cost of one handshake in token-microseconds: a bucket refills one per 1/RATE s.
const COST_US: u64 = 1_000_000 / RATE_PER_SEC;
const MAX_TOKENS_US: u64 = COST_US * RATE_BURST;

/// What to do with an initiation whose mac1 verified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Do the handshake.
    Process,
    /// Under load without a valid mac2: answer with a cookie reply only.
    Cookie,
    /// Under load, valid mac2, but its source IP is over its rate.
    RateLimited,
}

struct Bucket {
    tokens_us: u64,
    last: Instant,
}

/// The load meter, the cookie checker and the per-source rate limit.
pub struct Guard {
    checker: CookieChecker,
    threshold: u32,
    window_start: Instant,
    this_window: u32,
    last_window: u32,
    buckets: HashMap<IpAddr, Bucket>,
}

impl Guard {
    /// The guard of the server whose static public key is `key`.
    pub fn new(key: &PublicKey) -> Self {
        Guard {
            checker: CookieChecker::new(key),
            threshold: LOAD_THRESHOLD,
            window_start: Instant::ZERO,
            this_window: 0,
            last_window: 0,
            buckets: HashMap::new(),
        }
    }

    /// The MAC keys of messages to this server (mac1 check).
    pub fn keys(&self) -> &MacKeys {
        self.checker.keys()
    }

    /// Replaces the load threshold (initiations with a valid mac1 per second).
    pub fn set_threshold(&mut self, per_sec: u32) {
        self.threshold = per_sec;
    }

    /// Whether the server is under load at `now` (without counting anything).
    pub fn under_load(&self, now: Instant) -> bool {
        let since = now.saturating_since(self.window_start);
        let (this, last) = if since < WINDOW {
            (self.this_window, self.last_window)
        } else if since < WINDOW * 2 {
            (0, self.this_window)
        } else {
            (0, 0)
        };
        this > self.threshold || last > self.threshold
    }

    /// Counts an initiation whose mac1 verified, and decides what it gets.
    pub fn admit(
        &mut self,
        now: Instant,
        rng: &mut impl RngCore,
        from: SocketAddr,
        msg: &[u8],
    ) -> Admit {
        self.roll(now);
        self.this_window = self.this_window.saturating_add(1);
        if !self.under_load(now) {
            return Admit::Process;
        }
        if !self.checker.mac2_ok(now, rng, from, msg) {
            return Admit::Cookie;
        }
        if self.allow(now, from.ip()) {
            Admit::Process
        } else {
            Admit::RateLimited
        }
    }

    /// The nonce and sealed cookie of a reply to the initiation from `from` whose mac1
    /// is `mac1`.
    pub fn cookie_reply(
        &mut self,
        now: Instant,
        rng: &mut impl RngCore,
        from: SocketAddr,
        mac1: &Mac16,
    ) -> ([u8; 24], [u8; 32]) {
        self.checker.seal_reply(now, rng, from, mac1)
    }

    /// Source IPs in the rate-limit table.
    #[cfg(test)]
    pub fn sources(&self) -> usize {
        self.buckets.len()
    }

    /// Starts a new window once the current one is a second old, and drops the buckets
    /// that are full again (idle long enough: forgetting them changes nothing).
    fn roll(&mut self, now: Instant) {
        let since = now.saturating_since(self.window_start);
        if since < WINDOW {
            return;
        }
        self.last_window = if since < WINDOW * 2 {
            self.this_window
        } else {
            0
        };
        self.this_window = 0;
        self.window_start = now;
        self.buckets.retain(|_, b| !is_full(b, now));
    }

    /// Token bucket of `ip`: true if it may have a handshake now.
    fn allow(&mut self, now: Instant, ip: IpAddr) -> bool {
        if let Some(b) = self.buckets.get_mut(&ip) {
            let refill = micros(now.saturating_since(b.last));
            b.tokens_us = b.tokens_us.saturating_add(refill).min(MAX_TOKENS_US);
            b.last = now;
            if b.tokens_us < COST_US {
                return false;
            }
            b.tokens_us -= COST_US;
            return true;
        }
        if self.buckets.len() >= MAX_SOURCES {
            self.buckets.retain(|_, b| !is_full(b, now));
            if self.buckets.len() >= MAX_SOURCES {
                // Every tracked source is busy: a new one waits for a slot rather than
                // grow the table (its client retries within a second).
                return false;
            }
        }
        self.buckets.insert(
            ip,
            Bucket {
                tokens_us: MAX_TOKENS_US - COST_US,
                last: now,
            },
        );
        true
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

fn is_full(b: &Bucket, now: Instant) -> bool {
    b.tokens_us
        .saturating_add(micros(now.saturating_since(b.last)))
        >= MAX_TOKENS_US
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::cookie::MACS_LEN;
    use rand_chacha::ChaCha20Rng;
    use rand_core::SeedableRng;

    fn at_ms(ms: u64) -> Instant {
        Instant::from_micros(ms * 1000)
    }

    #[test]
    fn load_comes_and_goes_with_the_rate() {
        let mut g = Guard::new(&PublicKey([1; 32]));
        g.set_threshold(10);
        let mut rng = ChaCha20Rng::seed_from_u64(1);
        let from: SocketAddr = "192.0.2.1:1".parse().unwrap();
        let msg = [0u8; 148];
        let t0 = at_ms(10_000);
        for _ in 0..10 {
            assert_eq!(g.admit(t0, &mut rng, from, &msg), Admit::Process);
        }
        assert_eq!(g.admit(t0, &mut rng, from, &msg), Admit::Cookie, "11th");
        // The next window still remembers the busy one...
        assert!(g.under_load(at_ms(10_900)));
        assert!(g.under_load(at_ms(11_500)));
        // ...and a quiet second after it, the load is gone.
        assert!(!g.under_load(at_ms(12_100)));
        assert_eq!(g.admit(at_ms(12_100), &mut rng, from, &msg), Admit::Process);
    }

    #[test]
    fn token_bucket_per_source_ip() {
        let key = PublicKey([1; 32]);
        let mut g = Guard::new(&key);
        g.set_threshold(0);
        let mut rng = ChaCha20Rng::seed_from_u64(1);
        let now = at_ms(5_000);
        let from: SocketAddr = "192.0.2.1:1".parse().unwrap();
        let cookie = g.checker.cookie(now, &mut rng, from);
        let mut msg = [7u8; 148];
        MacKeys::new(&key).seal(&mut msg, Some(&cookie));
        assert_eq!(msg.len() - MACS_LEN, 116);
        let verdicts: Vec<Admit> = (0..7).map(|_| g.admit(now, &mut rng, from, &msg)).collect();
        assert_eq!(verdicts.iter().filter(|v| **v == Admit::Process).count(), 5);
        assert_eq!(verdicts[5..], [Admit::RateLimited, Admit::RateLimited]);
        // 50 ms later one more token.
        let later = now + Duration::from_millis(50);
        assert_eq!(g.admit(later, &mut rng, from, &msg), Admit::Process);
        assert_eq!(g.admit(later, &mut rng, from, &msg), Admit::RateLimited);
        // Another source IP has its own bucket (its own cookie too).
        let other: SocketAddr = "192.0.2.2:1".parse().unwrap();
        let c2 = g.checker.cookie(later, &mut rng, other);
        MacKeys::new(&key).seal(&mut msg, Some(&c2));
        assert_eq!(g.admit(later, &mut rng, other, &msg), Admit::Process);
    }

    #[test]
    fn table_stays_bounded() {
        let key = PublicKey([1; 32]);
        let mut g = Guard::new(&key);
        g.set_threshold(0);
        let mut rng = ChaCha20Rng::seed_from_u64(1);
        let now = at_ms(5_000);
        let mut refused = 0;
        for i in 0..(MAX_SOURCES as u32 + 100) {
            let from = SocketAddr::from((i.wrapping_add(0x0a00_0000).to_be_bytes(), 9));
            let cookie = g.checker.cookie(now, &mut rng, from);
            let mut msg = [7u8; 148];
            MacKeys::new(&key).seal(&mut msg, Some(&cookie));
            if g.admit(now, &mut rng, from, &msg) == Admit::RateLimited {
                refused += 1;
            }
        }
        assert_eq!(g.sources(), MAX_SOURCES);
        assert_eq!(refused, 100);
        // A second later the idle buckets are full again and pruned.
        let from: SocketAddr = "198.51.100.1:9".parse().unwrap();
        let later = now + Duration::from_secs(1);
        let cookie = g.checker.cookie(later, &mut rng, from);
        let mut msg = [7u8; 148];
        MacKeys::new(&key).seal(&mut msg, Some(&cookie));
        assert_eq!(g.admit(later, &mut rng, from, &msg), Admit::Process);
        assert_eq!(g.sources(), 1);
    }
}
