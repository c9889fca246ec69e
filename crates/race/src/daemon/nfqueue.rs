//! A minimal NFQUEUE client (nfnetlink_queue): bind one queue, receive the packets iptables'
//! NFQUEUE target puts in it (id, mark, first bytes), give each one a verdict, optionally
//! with a new mark.
//!
//! Why not the `nfq` crate: its newest release (0.2.5) keeps its socket's file descriptor
//! private, so it can only be driven by a thread blocked in `recv`, which nothing can wake to
//! send a verdict decided elsewhere (a race ending); it also asserts on attribute lengths.
//! This speaks the same protocol (linux/netfilter/nfnetlink_queue.h) over `netlink-sys`, whose
//! socket has a file descriptor for tokio's `AsyncFd`, and parses received messages with
//! `netlink-packet-core`'s bounds-checked buffers.
//!
//! Invariants: parsing never panics (a malformed message is skipped); the queue is configured
//! (bound, copy range, length, fail-open) before the rule that feeds it is installed, and a
//! packet met while waiting for a configuration ack is accepted at once, never lost; when
//! the socket closes the kernel drops whatever is still queued (held SYNs are retransmitted
//! by their clients).

use netlink_packet_core::{NetlinkBuffer, NlasIterator};
use netlink_sys::{protocols::NETLINK_NETFILTER, Socket};
use std::io;
use std::os::fd::{AsRawFd, RawFd};

const NFNL_SUBSYS_QUEUE: u16 = 3;
const NFQNL_MSG_PACKET: u16 = 0;
const NFQNL_MSG_VERDICT: u16 = 1;
const NFQNL_MSG_CONFIG: u16 = 2;

const NFQA_CFG_CMD: u16 = 1;
const NFQA_CFG_PARAMS: u16 = 2;
const NFQA_CFG_QUEUE_MAXLEN: u16 = 3;
const NFQA_CFG_MASK: u16 = 4;
const NFQA_CFG_FLAGS: u16 = 5;
const NFQNL_CFG_CMD_BIND: u8 = 1;
const NFQNL_COPY_PACKET: u8 = 2;
/// Accept (instead of drop) what does not fit in the queue or the socket.
const NFQA_CFG_F_FAIL_OPEN: u32 = 1;

const NFQA_PACKET_HDR: u16 = 1;
const NFQA_VERDICT_HDR: u16 = 2;
const NFQA_MARK: u16 = 3;
const NFQA_PAYLOAD: u16 = 10;

const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_ACK: u16 = 4;
const NLMSG_HDRLEN: usize = 16;

/// A verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Discard the packet.
    Drop,
    /// Let it continue through the hooks that follow the queueing rule.
    Accept,
}

/// One queued packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet {
    /// The kernel's id, for the verdict.
    pub id: u32,
    /// The packet's mark when it was queued.
    pub mark: u32,
    /// The packet's first bytes (at most the copy range), from the IP header on.
    pub payload: Vec<u8>,
}

/// A bound queue. It owns its socket's fd for its whole life (registered with tokio's
/// `AsyncFd` by the daemon).
#[derive(Debug)]
pub struct NfQueue {
    sock: Socket,
    num: u16,
    seq: std::cell::Cell<u32>,
    copy_range: u16,
}

impl NfQueue {
    /// Binds queue `num`, copying the first `copy_range` bytes of each packet, holding at
    /// most `max_len` packets in the kernel (past that, and when our socket is full,
    /// packets are accepted unqueued: fail-open). The socket is non-blocking afterwards.
    pub fn bind(num: u16, copy_range: u16, max_len: u32) -> io::Result<NfQueue> {
        let mut sock = Socket::new(NETLINK_NETFILTER)?;
        sock.bind_auto()?;
        // The kernel drops a packet it cannot deliver (or accepts it, fail-open); an ENOBUFS
        // error on our side would tell nothing more.
        sock.set_no_enobufs(true)?;
        // Room for a burst of SYNs: each message is about copy_range + 100 bytes.
        let _ = sock.set_rx_buf_sz(4usize << 20);
        let q = NfQueue {
            sock,
            num,
            seq: std::cell::Cell::new(0),
            copy_range,
        };
        let cmd = [NFQNL_CFG_CMD_BIND, 0, 0, 0];
        q.configure(&[(NFQA_CFG_CMD, &cmd)]).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("binding netfilter queue {num}: {e} (is another process bound to it?)"),
            )
        })?;
        let mut params = Vec::from(u32::from(copy_range).to_be_bytes());
        params.push(NFQNL_COPY_PACKET);
        q.configure(&[(NFQA_CFG_PARAMS, &params)])?;
        q.configure(&[(NFQA_CFG_QUEUE_MAXLEN, &max_len.to_be_bytes())])?;
        q.configure(&[
            (NFQA_CFG_FLAGS, &NFQA_CFG_F_FAIL_OPEN.to_be_bytes()),
            (NFQA_CFG_MASK, &NFQA_CFG_F_FAIL_OPEN.to_be_bytes()),
        ])?;
        q.sock.set_non_blocking(true)?;
        Ok(q)
    }

    /// Reads one datagram of queued packets into `out`; `WouldBlock` when there is none.
    pub fn recv(&self, out: &mut Vec<Packet>) -> io::Result<()> {
        let mut buf = Vec::with_capacity(self.buf_len());
        self.sock.recv(&mut buf, 0)?;
        parse(&buf, out, &mut |_, _| {});
        Ok(())
    }

    /// Gives packet `id` its verdict; `mark` replaces the packet's mark.
    pub fn verdict(&self, id: u32, verdict: Verdict, mark: Option<u32>) -> io::Result<()> {
        self.verdict_with(id, verdict, mark, None)
    }

    /// As [`Self::verdict`], and `payload` (from the IP header on) replaces the packet's
    /// bytes: NAT mode readdresses a SYN-ACK this way and lets the kernel forward it.
    pub fn verdict_with(
        &self,
        id: u32,
        verdict: Verdict,
        mark: Option<u32>,
        payload: Option<&[u8]>,
    ) -> io::Result<()> {
        let mut hdr = Vec::from(
            match verdict {
                Verdict::Drop => 0u32,
                Verdict::Accept => 1,
            }
            .to_be_bytes(),
        );
        hdr.extend(id.to_be_bytes());
        let mark = mark.map(u32::to_be_bytes);
        let mut attrs: Vec<(u16, &[u8])> = vec![(NFQA_VERDICT_HDR, &hdr)];
        if let Some(m) = &mark {
            attrs.push((NFQA_MARK, m));
        }
        if let Some(p) = payload {
            attrs.push((NFQA_PAYLOAD, p));
        }
        let msg = message(NFQNL_MSG_VERDICT, self.num, 0, false, &attrs);
        self.sock.send(&msg, 0).map(|_| ())
    }

    fn buf_len(&self) -> usize {
        usize::from(self.copy_range) + 4096
    }

    /// Sends a configuration message and waits for its ack (the socket is still blocking).
    fn configure(&self, attrs: &[(u16, &[u8])]) -> io::Result<()> {
        let seq = self.seq.get().wrapping_add(1);
        self.seq.set(seq);
        let msg = message(NFQNL_MSG_CONFIG, self.num, seq, true, attrs);
        self.sock.send(&msg, 0)?;
        loop {
            let mut buf = Vec::with_capacity(self.buf_len());
            self.sock.recv(&mut buf, 0)?;
            let mut acked = None;
            let mut early = Vec::new();
            parse(&buf, &mut early, &mut |s, errno| {
                if s == seq {
                    acked = Some(errno);
                }
            });
            // A rule left by a crashed daemon may already feed the queue: let those through.
            for p in early {
                self.verdict(p.id, Verdict::Accept, None)?;
            }
            match acked {
                Some(0) => return Ok(()),
                Some(errno) => return Err(io::Error::from_raw_os_error(errno)),
                None => {}
            }
        }
    }
}

impl AsRawFd for NfQueue {
    fn as_raw_fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }
}

/// One nfnetlink message: netlink header, nfgenmsg (family, version, queue number), attributes.
fn message(kind: u16, queue: u16, seq: u32, ack: bool, attrs: &[(u16, &[u8])]) -> Vec<u8> {
    let mut b = vec![0u8; NLMSG_HDRLEN];
    b.extend([libc::AF_UNSPEC as u8, 0]);
    b.extend(queue.to_be_bytes());
    for (kind, value) in attrs {
        let len = 4 + value.len();
        b.extend((len as u16).to_ne_bytes());
        b.extend(kind.to_ne_bytes());
        b.extend(*value);
        b.resize(b.len().next_multiple_of(4), 0);
    }
    let len = b.len() as u32;
    let flags = NLM_F_REQUEST | if ack { NLM_F_ACK } else { 0 };
    b[0..4].copy_from_slice(&len.to_ne_bytes());
    b[4..6].copy_from_slice(&((NFNL_SUBSYS_QUEUE << 8) | kind).to_ne_bytes());
    b[6..8].copy_from_slice(&flags.to_ne_bytes());
    b[8..12].copy_from_slice(&seq.to_ne_bytes());
    b
}

/// Parses a datagram: queued packets go to `out`, acks and errors to `on_ack(seq, errno)`.
/// A malformed message header ends the datagram's parsing, a malformed packet message is
/// skipped; nothing panics. Public (and hidden) only for the `nfqueue` fuzz target
/// (`fuzz/src/race.rs`); the daemon reads through [`NfQueue::recv`].
#[doc(hidden)]
pub fn parse(buf: &[u8], out: &mut Vec<Packet>, on_ack: &mut dyn FnMut(u32, i32)) {
    let mut off = 0;
    while off < buf.len() {
        let Ok(msg) = NetlinkBuffer::new_checked(&buf[off..]) else {
            return;
        };
        let len = msg.length() as usize;
        let body = msg.payload();
        if msg.message_type() == NLMSG_ERROR {
            // struct nlmsgerr: int error; struct nlmsghdr msg (the request; seq at +8).
            if let (Some(e), Some(s)) = (body.get(0..4), body.get(12..16)) {
                let errno = i32::from_ne_bytes(e.try_into().unwrap_or_default());
                // wrapping: i32::MIN from a hostile peer must not panic.
                on_ack(
                    u32::from_ne_bytes(s.try_into().unwrap_or_default()),
                    errno.wrapping_neg(),
                );
            }
        } else if msg.message_type() == (NFNL_SUBSYS_QUEUE << 8) | NFQNL_MSG_PACKET {
            if let Some(p) = body.get(4..).and_then(packet) {
                out.push(p);
            }
        }
        off += len.next_multiple_of(4).max(NLMSG_HDRLEN);
    }
}

fn packet(attrs: &[u8]) -> Option<Packet> {
    let (mut id, mut mark, mut payload) = (None, 0, Vec::new());
    for nla in NlasIterator::new(attrs) {
        let nla = nla.ok()?;
        let v = nla.value();
        match nla.kind() {
            NFQA_PACKET_HDR => id = Some(u32::from_be_bytes(v.get(0..4)?.try_into().ok()?)),
            NFQA_MARK => mark = u32::from_be_bytes(v.get(0..4)?.try_into().ok()?),
            NFQA_PAYLOAD => payload = v.to_vec(),
            _ => {}
        }
    }
    Some(Packet {
        id: id?,
        mark,
        payload,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(kind: u16, v: &[u8]) -> Vec<u8> {
        let mut b = Vec::from(((4 + v.len()) as u16).to_ne_bytes());
        b.extend(kind.to_ne_bytes());
        b.extend(v);
        b.resize(b.len().next_multiple_of(4), 0);
        b
    }

    fn packet_msg(id: u32, mark: u32, payload: &[u8]) -> Vec<u8> {
        let mut hdr = Vec::from(id.to_be_bytes());
        hdr.extend([0x08, 0x00, 1]); // hw_protocol, hook
        let mut body = attr(NFQA_PACKET_HDR, &hdr);
        body.extend(attr(NFQA_MARK, &mark.to_be_bytes()));
        body.extend(attr(NFQA_PAYLOAD, payload));
        let mut m = message(NFQNL_MSG_PACKET, 7, 0, false, &[]);
        m.extend(body);
        let len = m.len() as u32;
        m[0..4].copy_from_slice(&len.to_ne_bytes());
        m
    }

    #[test]
    fn builds_and_parses() {
        let v = message(NFQNL_MSG_VERDICT, 7070, 3, true, &[(NFQA_MARK, &[1, 2, 3])]);
        assert_eq!(v.len(), 16 + 4 + 8);
        assert_eq!(u32::from_ne_bytes(v[0..4].try_into().unwrap()), 28);
        assert_eq!(&v[18..20], &7070u16.to_be_bytes());
        assert_eq!(u16::from_ne_bytes([v[4], v[5]]), 0x0301);

        let mut dgram = packet_msg(42, 0x10, &[0x45, 0, 0, 40]);
        dgram.extend(packet_msg(43, 0, &[0x60; 5]));
        let mut out = Vec::new();
        parse(&dgram, &mut out, &mut |_, _| panic!("no ack here"));
        assert_eq!(out.len(), 2);
        assert_eq!(
            out[0],
            Packet {
                id: 42,
                mark: 0x10,
                payload: vec![0x45, 0, 0, 40]
            }
        );
        assert_eq!(out[1].payload, vec![0x60; 5]);
    }

    #[test]
    fn malformed_input_is_skipped_not_a_panic() {
        let good = packet_msg(1, 0, &[1, 2, 3, 4]);
        let mut out = Vec::new();
        for cut in 0..good.len() {
            parse(&good[..cut], &mut out, &mut |_, _| {});
        }
        assert!(
            out.is_empty(),
            "no cut of a message yields a packet: {out:?}"
        );
        let mut bad = good.clone();
        bad[20..22].copy_from_slice(&900u16.to_ne_bytes()); // attribute longer than message
        parse(&bad, &mut out, &mut |_, _| {});
        assert!(out.is_empty());
        // Pseudo-random garbage.
        let mut x = 0x1234_5678u32;
        for n in 0..2000 {
            let junk: Vec<u8> = (0..n % 97)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    x as u8
                })
                .collect();
            parse(&junk, &mut out, &mut |_, _| {});
        }
    }

    #[test]
    fn ack_carries_seq_and_errno() {
        let mut m = vec![0u8; 16];
        m[0..4].copy_from_slice(&36u32.to_ne_bytes());
        m[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
        m.extend((-16i32).to_ne_bytes()); // EBUSY
        let mut req = vec![0u8; 16];
        req[8..12].copy_from_slice(&9u32.to_ne_bytes());
        m.extend(req);
        let mut got = None;
        parse(&m, &mut Vec::new(), &mut |s, e| got = Some((s, e)));
        assert_eq!(got, Some((9, 16)));
    }

    #[test]
    fn errno_of_int_min_does_not_overflow() {
        // Found by the nfqueue fuzz target: error = i32::MIN used to panic on negation.
        let mut m = vec![0u8; 16];
        m[0..4].copy_from_slice(&36u32.to_ne_bytes());
        m[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
        m.extend(i32::MIN.to_ne_bytes());
        m.extend([0u8; 16]);
        let mut got = None;
        parse(&m, &mut Vec::new(), &mut |s, e| got = Some((s, e)));
        assert_eq!(got, Some((0, i32::MIN)));
    }
}
