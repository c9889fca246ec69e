//! The packet format and what a receiver counts.
//!
//! A packet: magic (4 bytes), stream number (4), sequence number (4), send time in
//! CLOCK_MONOTONIC nanoseconds (8), then padding to the configured size. A receiver keeps
//! a bitmap of sequence numbers per stream (duplicates are counted, not delivered twice)
//! and the one-way latency of every first copy.

use serde_json::{json, Value};

/// Marks our packets (anything else arriving is ignored).
pub const MAGIC: u32 = 0x766f_6970; // "voip"
/// Bytes of the header.
pub const HEADER: usize = 20;

/// Writes packet `seq` of `stream` into `buf` (the padding was written once).
pub fn emit(buf: &mut [u8], stream: u32, seq: u32, now_ns: u64) {
    buf[0..4].copy_from_slice(&MAGIC.to_be_bytes());
    buf[4..8].copy_from_slice(&stream.to_be_bytes());
    buf[8..12].copy_from_slice(&seq.to_be_bytes());
    buf[12..20].copy_from_slice(&now_ns.to_be_bytes());
}

/// (stream, seq, send time) of one of our packets.
pub fn parse(buf: &[u8]) -> Option<(u32, u32, u64)> {
    if buf.len() < HEADER || u32::from_be_bytes(buf[0..4].try_into().ok()?) != MAGIC {
        return None;
    }
    let word = |i: usize| u32::from_be_bytes(buf[i..i + 4].try_into().expect("4 bytes"));
    let sent = u64::from_be_bytes(buf[12..20].try_into().ok()?);
    Some((word(4), word(8), sent))
}

/// What one receiver saw, over all its streams.
pub struct Tally {
    count: u32,
    /// One bitmap of `count` bits per stream.
    seen: Vec<Vec<u64>>,
    received: u64,
    duplicates: u64,
    latency_us: Vec<u32>,
}

impl Tally {
    /// A tally of streams of `count` packets.
    pub fn new(count: u32) -> Tally {
        Tally {
            count,
            seen: Vec::new(),
            received: 0,
            duplicates: 0,
            latency_us: Vec::new(),
        }
    }

    /// Makes room for stream `stream` (numbered from 0).
    pub fn add_stream(&mut self, stream: usize) {
        while self.seen.len() <= stream {
            self.seen.push(vec![0; (self.count as usize).div_ceil(64)]);
        }
    }

    /// Counts packet `seq` of `stream` sent at `sent_ns`, received at `now_ns`.
    pub fn record(&mut self, stream: usize, seq: u32, sent_ns: u64, now_ns: u64) {
        if seq >= self.count {
            return;
        }
        let Some(bits) = self.seen.get_mut(stream) else {
            return;
        };
        let (w, b) = (seq as usize / 64, 1u64 << (seq % 64));
        if bits[w] & b != 0 {
            self.duplicates += 1;
            return;
        }
        bits[w] |= b;
        self.received += 1;
        self.latency_us
            .push((now_ns.saturating_sub(sent_ns) / 1000).min(u32::MAX as u64) as u32);
    }

    /// Whether every packet of every stream arrived.
    pub fn complete(&self) -> bool {
        self.received == self.seen.len() as u64 * self.count as u64
    }

    /// The JSON summary; `expected` = packets the far end was to send.
    pub fn summary(&mut self, expected: u64) -> Value {
        self.latency_us.sort_unstable();
        let pct = |q: f64| -> Value {
            let v = &self.latency_us;
            if v.is_empty() {
                return Value::Null;
            }
            let i = ((v.len() - 1) as f64 * q).round() as usize;
            json!(v[i] as f64 / 1000.0)
        };
        json!({
            "expected": expected,
            "received": self.received,
            "lost": expected.saturating_sub(self.received),
            "duplicates": self.duplicates,
            "latency_ms": {"p50": pct(0.5), "p99": pct(0.99), "max": pct(1.0)},
        })
    }
}
