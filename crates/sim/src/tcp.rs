//! A TCP-like inner transport: NewReno or CUBIC congestion control over real TCP/IPv4
//! packets.
//!
//! It reacts to loss and reordering as a real TCP does, which is what makes a tunnel's
//! reordering and loss visible in goodput: slow start and congestion avoidance (RFC
//! 5681, byte counting), three duplicate ACKs = loss → fast retransmit and NewReno fast
//! recovery with partial ACKs (RFC 6582, the "impatient" variant: only the first partial
//! ACK restarts the timer, so a window with many holes — a tail-dropped burst — ends in
//! a timeout and slow start instead of one hole per RTT), retransmission timeout with exponential
//! backoff and go-back-N (RFC 6298, Karn's rule for RTT samples). The receiver ACKs every
//! segment with its cumulative in-order point (no delayed ACKs, no SACK) and keeps
//! out-of-order data. With `CcSpec::Cubic` the window after a loss, its growth in
//! congestion avoidance and HyStart's early end of slow start are Linux CUBIC's
//! (`cubic.rs`); loss detection and recovery stay NewReno's. Not modelled: the
//! handshake, SACK, ECN, pacing.
//!
//! Invariants: `snd_una <= snd_nxt <= snd_max <= total`; the flight never exceeds
//! min(cwnd, rwnd) when new data is sent; the receiver's in-order point only grows.

use crate::cubic::{Cubic, HyStart};
use crate::packet::{self, Addrs};
use crate::scenario::CcSpec;
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

/// Parameters of one connection.
#[derive(Debug, Clone, Copy)]
pub struct TcpConfig {
    /// Maximum segment size (payload bytes).
    pub mss: u32,
    /// Receive window (the 4 MB socket buffer limit of this machine, DESIGN §4).
    pub rwnd_bytes: u64,
    /// Initial window in segments (RFC 6928).
    pub init_cwnd: u32,
    /// Lower bound of the RTO (Linux: 200 ms).
    pub min_rto: Duration,
    /// Congestion control.
    pub cc: CcSpec,
}

impl TcpConfig {
    /// Defaults with the given MSS.
    pub fn with_mss(mss: u32) -> Self {
        TcpConfig {
            mss,
            rwnd_bytes: 4 << 20,
            init_cwnd: 10,
            min_rto: Duration::from_millis(200),
            cc: CcSpec::Newreno,
        }
    }
}

const MAX_RTO: Duration = Duration::from_secs(60);
const INITIAL_RTO: Duration = Duration::from_secs(1);

/// Counters of one connection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct TcpStats {
    /// Segments retransmitted (fast, partial-ACK and timeout).
    pub retransmits: u64,
    /// Fast retransmits (3 duplicate ACKs).
    pub fast_retransmits: u64,
    /// Retransmission timeouts.
    pub timeouts: u64,
    /// Segments sent in all.
    pub segments: u64,
}

/// Maps a 32-bit wire value to the 64-bit value nearest `base`.
fn unwrap(base: u64, wire: u32) -> u64 {
    let d = wire.wrapping_sub(base as u32) as i32;
    base.wrapping_add_signed(i64::from(d))
}

/// The sending half.
#[derive(Debug)]
pub struct TcpSender {
    cfg: TcpConfig,
    addrs: Addrs,
    total: u64,
    snd_una: u64,
    snd_nxt: u64,
    snd_max: u64,
    cwnd: f64,
    ssthresh: f64,
    dupacks: u32,
    recover: u64,
    in_recovery: bool,
    partial_acks: u32,
    srtt: Option<f64>,
    rttvar: f64,
    rto: Duration,
    backoff: u32,
    deadline: Option<Duration>,
    /// (end seq, send time) of fresh segments, oldest first.
    timing: VecDeque<(u64, Duration)>,
    no_sample_below: u64,
    /// CUBIC's state and HyStart's, when the flow runs CUBIC.
    cubic: Option<(Cubic, HyStart)>,
    /// Counters.
    pub stats: TcpStats,
}

impl TcpSender {
    /// A sender of `total` bytes (`u64::MAX`: unlimited) from `addrs.src`.
    pub fn new(cfg: TcpConfig, addrs: Addrs, total: u64) -> Self {
        TcpSender {
            cfg,
            addrs,
            total,
            snd_una: 0,
            snd_nxt: 0,
            snd_max: 0,
            cwnd: f64::from(cfg.init_cwnd * cfg.mss),
            ssthresh: f64::INFINITY,
            dupacks: 0,
            recover: 0,
            in_recovery: false,
            partial_acks: 0,
            srtt: None,
            rttvar: 0.0,
            rto: INITIAL_RTO,
            backoff: 0,
            deadline: None,
            timing: VecDeque::new(),
            no_sample_below: 0,
            cubic: (cfg.cc == CcSpec::Cubic).then(Default::default),
            stats: TcpStats::default(),
        }
    }

    /// Whether every byte was acknowledged.
    pub fn done(&self) -> bool {
        self.snd_una >= self.total
    }

    /// When the retransmission timer fires.
    pub fn deadline(&self) -> Option<Duration> {
        self.deadline
    }

    /// Bytes acknowledged so far.
    pub fn acked(&self) -> u64 {
        self.snd_una
    }

    /// Window (bytes), smoothed RTT (s) and bytes in flight, for traces.
    pub fn probe(&self) -> (f64, f64, u64) {
        (
            self.cwnd * self.mss(),
            self.srtt.unwrap_or(0.0),
            self.snd_nxt - self.snd_una,
        )
    }

    fn mss(&self) -> f64 {
        f64::from(self.cfg.mss)
    }

    /// Slow-start threshold after a congestion event with `flight` bytes outstanding:
    /// NewReno halves the flight (RFC 5681 eq. 4), CUBIC scales the window by β.
    fn reduced(&mut self, flight: f64) -> f64 {
        let mss = self.mss();
        match self.cubic.as_mut() {
            Some((c, _)) => c.on_congestion(self.cwnd / mss) * mss,
            None => (flight / 2.0).max(2.0 * mss),
        }
    }

    fn segment(&mut self, seq: u64, out: &mut Vec<Vec<u8>>) -> u64 {
        let len = (self.total - seq).min(u64::from(self.cfg.mss));
        out.push(packet::tcp(self.addrs, seq as u32, None, len as usize));
        self.stats.segments += 1;
        len
    }

    fn retransmit(&mut self, seq: u64, out: &mut Vec<Vec<u8>>) {
        self.segment(seq, out);
        self.stats.retransmits += 1;
        // Karn: ACKs up to what was sent so far are ambiguous from now on.
        self.no_sample_below = self.snd_max;
    }

    /// Sends what the window allows.
    pub fn send(&mut self, now: Duration, out: &mut Vec<Vec<u8>>) {
        let window = self.cwnd.min(self.cfg.rwnd_bytes as f64);
        while self.snd_nxt < self.total && ((self.snd_nxt - self.snd_una) as f64) < window {
            let seq = self.snd_nxt;
            let len = self.segment(seq, out);
            self.snd_nxt += len;
            if seq < self.snd_max {
                self.stats.retransmits += 1;
            } else {
                self.snd_max = self.snd_nxt;
                self.timing.push_back((self.snd_nxt, now));
            }
            if self.deadline.is_none() {
                self.deadline = Some(now + self.rto);
            }
        }
    }

    fn on_rtt_sample(&mut self, r: f64) {
        match self.srtt {
            None => {
                self.srtt = Some(r);
                self.rttvar = r / 2.0;
            }
            Some(s) => {
                self.rttvar = 0.75 * self.rttvar + 0.25 * (s - r).abs();
                self.srtt = Some(0.875 * s + 0.125 * r);
            }
        }
        let rto = self.srtt.unwrap_or(r) + (4.0 * self.rttvar).max(0.001);
        self.rto = Duration::from_secs_f64(rto).clamp(self.cfg.min_rto, MAX_RTO);
    }

    /// Processes a (cumulative) acknowledgment number from the wire.
    pub fn on_ack(&mut self, now: Duration, wire_ack: u32, out: &mut Vec<Vec<u8>>) {
        let ack = unwrap(self.snd_una, wire_ack);
        if ack > self.snd_max {
            return;
        }
        if ack > self.snd_una {
            let acked = (ack - self.snd_una) as f64;
            self.snd_una = ack;
            self.snd_nxt = self.snd_nxt.max(ack);
            let mut sample = None;
            while self.timing.front().is_some_and(|&(end, _)| end <= ack) {
                let (end, sent) = self.timing.pop_front().expect("checked");
                if end > self.no_sample_below {
                    sample = Some(now.saturating_sub(sent).as_secs_f64());
                }
            }
            if let Some(r) = sample {
                self.backoff = 0;
                self.on_rtt_sample(r);
            }
            let mut restart = true;
            if self.in_recovery {
                if ack >= self.recover {
                    self.in_recovery = false;
                    let flight = (self.snd_max - self.snd_una) as f64;
                    self.cwnd = self.ssthresh.min(flight.max(self.mss()) + self.mss());
                } else {
                    // Partial ACK: the next hole is lost too (RFC 6582 §3.2 step 5).
                    self.retransmit(self.snd_una, out);
                    self.cwnd = (self.cwnd - acked + self.mss()).max(self.mss());
                    restart = self.partial_acks == 0;
                    self.partial_acks += 1;
                }
            } else if self.cwnd < self.ssthresh {
                self.cwnd += acked.min(self.mss());
                let (rtt, mss) = (sample.map(Duration::from_secs_f64), self.mss());
                if let Some((_, h)) = self.cubic.as_mut() {
                    if h.on_ack(ack, self.snd_max, rtt, self.cwnd / mss) {
                        self.ssthresh = self.cwnd;
                    }
                }
            } else if let Some((c, _)) = self.cubic.as_mut() {
                let (mss, rtt) = (f64::from(self.cfg.mss), self.srtt.unwrap_or(0.0));
                let rtt = Duration::from_secs_f64(rtt);
                self.cwnd = c.on_ack(now, self.cwnd / mss, acked / mss, rtt) * mss;
            } else {
                self.cwnd += self.mss() * acked / self.cwnd;
            }
            if !self.in_recovery {
                self.dupacks = 0;
            }
            if self.snd_una >= self.snd_max {
                self.deadline = None;
            } else if restart || self.deadline.is_none() {
                self.deadline = Some(now + self.rto);
            }
        } else if ack == self.snd_una && self.snd_max > self.snd_una {
            self.dupacks += 1;
            if !self.in_recovery && self.dupacks == 3 && self.snd_una >= self.recover {
                let flight = (self.snd_max - self.snd_una) as f64;
                self.ssthresh = self.reduced(flight);
                self.cwnd = self.ssthresh + 3.0 * self.mss();
                self.recover = self.snd_max;
                self.in_recovery = true;
                self.partial_acks = 0;
                self.stats.fast_retransmits += 1;
                self.retransmit(self.snd_una, out);
            } else if self.in_recovery {
                self.cwnd += self.mss();
            }
        }
        self.send(now, out);
    }

    /// The retransmission timer fired: back off and go back to the first hole.
    pub fn on_timeout(&mut self, now: Duration, out: &mut Vec<Vec<u8>>) {
        if self.deadline.is_none_or(|d| d > now) {
            return;
        }
        self.deadline = None;
        if self.snd_una >= self.snd_max {
            return;
        }
        self.stats.timeouts += 1;
        let flight = (self.snd_max - self.snd_una) as f64;
        self.ssthresh = self.reduced(flight);
        if let Some((c, h)) = self.cubic.as_mut() {
            c.on_timeout();
            *h = HyStart::default();
        }
        self.cwnd = self.mss();
        self.recover = self.snd_max;
        self.in_recovery = false;
        self.dupacks = 0;
        self.snd_nxt = self.snd_una;
        self.no_sample_below = self.snd_max;
        self.backoff += 1;
        self.rto = (self.rto * 2).min(MAX_RTO);
        self.send(now, out);
    }
}

/// The receiving half.
#[derive(Debug)]
pub struct TcpReceiver {
    addrs: Addrs,
    rcv_nxt: u64,
    ooo: BTreeMap<u64, u64>,
    total: u64,
    /// When the last byte arrived in order.
    pub done_at: Option<Duration>,
}

impl TcpReceiver {
    /// A receiver of `total` bytes that sends ACKs from `addrs.src`.
    pub fn new(addrs: Addrs, total: u64) -> Self {
        TcpReceiver {
            addrs,
            rcv_nxt: 0,
            ooo: BTreeMap::new(),
            total,
            done_at: None,
        }
    }

    /// Bytes received in order.
    pub fn delivered(&self) -> u64 {
        self.rcv_nxt
    }

    /// Takes a segment; returns the ACK to send.
    pub fn on_segment(&mut self, now: Duration, wire_seq: u32, len: usize) -> Option<Vec<u8>> {
        if len == 0 {
            return None;
        }
        let seq = unwrap(self.rcv_nxt, wire_seq);
        let end = seq + len as u64;
        if seq <= self.rcv_nxt {
            self.rcv_nxt = self.rcv_nxt.max(end);
        } else {
            let e = self.ooo.entry(seq).or_insert(end);
            *e = (*e).max(end);
        }
        // Pull in every stored range the in-order point now reaches.
        while let Some((&s, &e)) = self.ooo.first_key_value() {
            if s > self.rcv_nxt {
                break;
            }
            self.ooo.pop_first();
            self.rcv_nxt = self.rcv_nxt.max(e);
        }
        if self.rcv_nxt >= self.total && self.done_at.is_none() {
            self.done_at = Some(now);
        }
        Some(packet::tcp(self.addrs, 0, Some(self.rcv_nxt as u32), 0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Addrs = Addrs {
        src: [1, 1, 1, 1],
        dst: [2, 2, 2, 2],
        sport: 1,
        dport: 2,
    };

    fn seqs(out: &[Vec<u8>]) -> Vec<u32> {
        out.iter()
            .map(|p| match packet::parse(p).unwrap().body {
                packet::Body::Tcp { seq, .. } => seq,
                packet::Body::Udp(_) => unreachable!(),
            })
            .collect()
    }

    #[test]
    fn three_dupacks_retransmit_the_hole_and_halve() {
        let ms = Duration::from_millis;
        let mut s = TcpSender::new(TcpConfig::with_mss(1000), A, 100_000);
        let mut out = vec![];
        s.send(ms(0), &mut out);
        assert_eq!(out.len(), 10, "initial window of 10 segments");
        out.clear();
        s.on_ack(ms(50), 1000, &mut out);
        assert_eq!(out.len(), 2, "slow start: one ack of one MSS opens two");
        out.clear();
        for _ in 0..3 {
            s.on_ack(ms(51), 1000, &mut out);
        }
        assert_eq!(seqs(&out)[0], 1000, "fast retransmit of the hole");
        assert_eq!(s.stats.fast_retransmits, 1);
        assert!(
            (s.ssthresh - 5500.0).abs() < 1.0,
            "half of 11 segments in flight"
        );
    }

    #[test]
    fn timeout_goes_back_n_with_one_segment() {
        let mut s = TcpSender::new(TcpConfig::with_mss(1000), A, 5_000);
        let mut out = vec![];
        s.send(Duration::ZERO, &mut out);
        out.clear();
        s.on_timeout(Duration::from_secs(1), &mut out);
        assert_eq!(seqs(&out), vec![0]);
        assert_eq!(s.stats.timeouts, 1);
        assert_eq!(s.deadline(), Some(Duration::from_secs(3)), "RTO doubled");
    }

    #[test]
    fn receiver_reassembles_out_of_order() {
        let mut r = TcpReceiver::new(A.reversed(), 3000);
        r.on_segment(Duration::ZERO, 1000, 1000);
        r.on_segment(Duration::ZERO, 2000, 1000);
        assert_eq!(r.delivered(), 0);
        let ack = r.on_segment(Duration::from_millis(5), 0, 1000).unwrap();
        assert_eq!(r.delivered(), 3000);
        assert_eq!(r.done_at, Some(Duration::from_millis(5)));
        match packet::parse(&ack).unwrap().body {
            packet::Body::Tcp { ack, .. } => assert_eq!(ack, Some(3000)),
            packet::Body::Udp(_) => unreachable!(),
        }
    }

    #[test]
    fn unwrap_follows_the_base_across_the_wrap() {
        assert_eq!(unwrap((1 << 32) - 10, 5), (1 << 32) + 5);
        assert_eq!(unwrap(1 << 32, u32::MAX), (1 << 32) - 1);
    }
}
