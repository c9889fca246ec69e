//! The sealed part of a data datagram: an inner header followed by frames.
//!
//! ```text
//! inner header: path_seq u32 | send_time_us u32
//! DATA  (0x01): data_seq u64 | flags u8 | [pred_gap u16] | [deadline_ms u16] | len u16 |
//!               len bytes (one IP packet); `deadline_ms` only for realtime (policy code 3)
//! ACK   (0x02): path u8 | largest_path_seq u32 | ack_delay_us u32 | recv_count u64 | recv_bytes u64
//! PING  (0x03): (empty) — asks the peer to acknowledge this path now
//! CLOSE (0x04): (empty) — the sender is ending the session
//! PAIR  (0x05): path u8 | capacity_kbps u32 — packet-pair capacity measured on that path
//! DEFINE(0x06): ctx u8 | data_seq u64 | flags u8 | [pred_gap u16] | IP packet, to the end of
//!               the datagram —
//!               DATA that also (re)defines header-compression context `ctx`
//!               (`header_compress.rs`); one byte shorter than DATA, so it fits wherever
//!               DATA does
//! TCP   (0x07): ctx u8 | data_seq u64 | flags u8 | [pred_gap u16] | changing header fields +
//!               payload, to the end of the datagram — one TCP/IPv4 packet compressed
//!               against `ctx`
//! NACK  (0x08): path u8 | first_path_seq u32 | count u16 — datagrams `first ..
//!               first + count` never arrived on that path (the receiver saw a later one):
//!               the sender repairs the ordered data they carried (`session/reinject.rs`)
//! FEC   (0x09): first_seq u64 | k u8 | m u8 | index u8 | deadline_ms u16 |
//!               k × (seq_delta u16 | ago_ms u16) | len u16 | len bytes — parity shard
//!               `index` (0..m) of a Reed-Solomon block over the k realtime packets
//!               `first_seq + seq_delta` (`fec/`), each sent `ago_ms` before this datagram
//! POLICY (0x0A), POLICY_ACK (0x0B): the client's stated policy (`stated.rs`)
//! RELAYS (0x0C), RELAYS_ACK (0x0D): the relays the server hands the client (`relays.rs`)
//! ```
//! `path_seq` numbers datagrams per path and direction (for RTT, loss and delivery-rate
//! feedback); `data_seq` numbers IP packets per session and direction, shared by all
//! paths, and is what de-duplicates redundant copies and orders striped packets.
//! `pred_gap` is present only when the flags' order mode is `FlowGap` (`OrderMode`): the
//! packet's flow sent its previous packet as `data_seq − pred_gap`, and the receiver need
//! not hold it for anything else.
//! Invariant: `FrameReader` never panics and never reads past the buffer.

use super::flags::{DataFlags, OrderMode, DEADLINE_LEN, PRED_GAP_LEN};
use super::WireError;

/// Per-datagram header at the start of the plaintext.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InnerHeader {
    /// Per-path, per-direction datagram number.
    pub path_seq: u32,
    /// Sender's clock, low 32 bits of microseconds (for one-way delay variation).
    pub send_time_us: u32,
}

impl InnerHeader {
    /// Encoded length.
    pub const LEN: usize = 8;

    /// Parses the header and returns the remaining frames.
    pub fn parse(b: &[u8]) -> Result<(InnerHeader, &[u8]), WireError> {
        if b.len() < Self::LEN {
            return Err(WireError::Truncated {
                need: Self::LEN,
                have: b.len(),
            });
        }
        let h = InnerHeader {
            path_seq: u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
            send_time_us: u32::from_be_bytes([b[4], b[5], b[6], b[7]]),
        };
        Ok((h, &b[Self::LEN..]))
    }

    /// Writes the header into the first 8 bytes of `out`.
    pub fn emit(&self, out: &mut [u8]) -> Result<(), WireError> {
        let o = out.get_mut(..Self::LEN).ok_or(WireError::BufferTooSmall)?;
        o[..4].copy_from_slice(&self.path_seq.to_be_bytes());
        o[4..].copy_from_slice(&self.send_time_us.to_be_bytes());
        Ok(())
    }
}

/// One IP packet and its session sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataFrame<'a> {
    /// Session-wide sequence number of this IP packet in this direction.
    pub data_seq: u64,
    /// Policy and ordering flags.
    pub flags: DataFlags,
    /// How far back the flow's previous packet is (`DataFlags::with_pred_gap`); 1 for
    /// `FlowPrev`, 0 when the order mode names no predecessor.
    pub pred_gap: u16,
    /// A realtime packet's deadline, ms after it was sent (`DataFlags::realtime`); 0 and
    /// not on the wire otherwise.
    pub deadline_ms: u16,
    /// The IP packet.
    pub payload: &'a [u8],
}

impl DataFrame<'_> {
    /// Bytes before the payload, including the frame type byte, without `pred_gap`.
    pub const HEADER_LEN: usize = 1 + 8 + 1 + 2;

    /// Bytes before the payload with these flags.
    pub fn header_len(flags: DataFlags) -> usize {
        Self::HEADER_LEN + flags.extra_len()
    }
}

/// A TCP/IPv4 packet with compressed headers (`header_compress.rs`); always the last frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompressedFrame<'a> {
    /// Session-wide sequence number of this IP packet in this direction.
    pub data_seq: u64,
    /// Policy and ordering flags.
    pub flags: DataFlags,
    /// As in `DataFrame`.
    pub pred_gap: u16,
    /// As in `DataFrame`.
    pub deadline_ms: u16,
    /// Header-compression context.
    pub ctx: u8,
    /// Changing header fields, then the TCP payload.
    pub body: &'a [u8],
}

impl CompressedFrame<'_> {
    /// Bytes before the body, including the frame type byte, without `pred_gap`.
    pub const HEADER_LEN: usize = 1 + 1 + 8 + 1;

    /// Bytes before the body with these flags.
    pub fn header_len(flags: DataFlags) -> usize {
        Self::HEADER_LEN + flags.extra_len()
    }
}

/// Per-path feedback: what the receiver has seen of one path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AckFrame {
    /// The path this feedback is about.
    pub path: u8,
    /// Highest `path_seq` received on that path.
    pub largest: u32,
    /// Time between receiving `largest` and sending this ACK.
    pub ack_delay_us: u32,
    /// Datagrams received on that path since the session began (cumulative).
    pub recv_count: u64,
    /// Bytes received on that path since the session began (cumulative).
    pub recv_bytes: u64,
}

impl AckFrame {
    /// Encoded length including the type byte.
    pub const LEN: usize = 1 + 1 + 4 + 4 + 8 + 8;
}

/// Packet-pair report: the bottleneck capacity the receiver measured on a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PairFrame {
    /// Path the measurement is about.
    pub path: u8,
    /// Smoothed capacity, kbit/s.
    pub capacity_kbps: u32,
}

impl PairFrame {
    /// Encoded length including the type byte.
    pub const LEN: usize = 1 + 1 + 4;
}

/// Negative acknowledgement: datagrams a path lost (seen as a gap in its `path_seq`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NackFrame {
    /// Path the datagrams were sent on.
    pub path: u8,
    /// First missing `path_seq`.
    pub first: u32,
    /// How many in a row are missing.
    pub count: u16,
}

impl NackFrame {
    /// Encoded length including the type byte.
    pub const LEN: usize = 1 + 1 + 4 + 2;
}

/// One parity shard of a realtime FEC block (`fec/`): the block's k data packets are
/// named by `data_seq`, with how long before this datagram each was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FecFrame<'a> {
    /// `data_seq` of the block's first packet.
    pub first_seq: u64,
    /// Data packets in the block (1..=255 on the wire; the decoder bounds it further).
    pub k: u8,
    /// Parity shards of the block.
    pub m: u8,
    /// Which parity shard this is (0..m).
    pub index: u8,
    /// The block's deadline (ms after each packet was sent).
    pub deadline_ms: u16,
    /// k entries of 4 bytes: `seq_delta u16 | ago_ms u16` (`entry`).
    pub entries: &'a [u8],
    /// The parity bytes.
    pub shard: &'a [u8],
}

impl FecFrame<'_> {
    /// Bytes before the entries, including the type byte.
    pub const HEADER_LEN: usize = 1 + 8 + 1 + 1 + 1 + 2;
    /// Bytes per entry.
    pub const ENTRY_LEN: usize = 4;

    /// Encoded length for `k` packets and a shard of `shard_len` bytes.
    pub fn len(k: usize, shard_len: usize) -> usize {
        Self::HEADER_LEN + k * Self::ENTRY_LEN + 2 + shard_len
    }

    /// Entry `i`: the packet's distance from `first_seq` and how many ms before this
    /// datagram it was sent (`None` past the end).
    pub fn entry(&self, i: usize) -> Option<(u16, u16)> {
        let e = self
            .entries
            .get(i * Self::ENTRY_LEN..(i + 1) * Self::ENTRY_LEN)?;
        Some((
            u16::from_be_bytes([e[0], e[1]]),
            u16::from_be_bytes([e[2], e[3]]),
        ))
    }
}

/// A parsed frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame<'a> {
    /// An IP packet.
    Data(DataFrame<'a>),
    /// Feedback about a path.
    Ack(AckFrame),
    /// Request for immediate feedback (keepalive probe).
    Ping,
    /// The peer ends the session.
    Close,
    /// Packet-pair capacity report.
    Pair(PairFrame),
    /// An IP packet that also defines header-compression context `ctx`.
    DataDefine(u8, DataFrame<'a>),
    /// A TCP/IPv4 packet with compressed headers.
    DataCompressed(CompressedFrame<'a>),
    /// Datagrams lost on a path.
    Nack(NackFrame),
    /// A parity shard of realtime packets.
    Fec(FecFrame<'a>),
    /// The client's stated policy (`wire/stated.rs`).
    Policy(super::stated::PolicyFrame<'a>),
    /// The server applies the statement of this epoch.
    PolicyAck(u32),
    /// The relays the server hands the client (`wire/relays.rs`).
    Relays(super::relays::RelaysFrame<'a>),
    /// The client applies the relay list of this epoch.
    RelaysAck(u32),
}

/// Iterates over the frames of a decrypted payload.
pub struct FrameReader<'a> {
    rest: &'a [u8],
}

impl<'a> FrameReader<'a> {
    /// Reads frames from `b` (the bytes after the inner header).
    pub fn new(b: &'a [u8]) -> Self {
        FrameReader { rest: b }
    }

    /// A frame laid out as `ctx u8 | data_seq u64 | flags u8 | body` running to the end.
    fn tail_frame(&mut self) -> Result<CompressedFrame<'a>, WireError> {
        let h = self.take(CompressedFrame::HEADER_LEN - 1)?;
        let flags = DataFlags(h[9]);
        let (pred_gap, deadline_ms) = self.after_flags(flags)?;
        Ok(CompressedFrame {
            ctx: h[0],
            data_seq: u64::from_be_bytes(h[1..9].try_into().unwrap_or([0; 8])),
            flags,
            pred_gap,
            deadline_ms,
            body: core::mem::take(&mut self.rest),
        })
    }

    /// The fields of a DATA frame after its type byte.
    fn data(&mut self) -> Result<DataFrame<'a>, WireError> {
        let h = self.take(9)?;
        let data_seq = u64::from_be_bytes(h[..8].try_into().unwrap_or([0; 8]));
        let flags = DataFlags(h[8]);
        let (pred_gap, deadline_ms) = self.after_flags(flags)?;
        let l = self.take(2)?;
        let len = u16::from_be_bytes([l[0], l[1]]) as usize;
        let payload = self.take(len)?;
        Ok(DataFrame {
            data_seq,
            flags,
            pred_gap,
            deadline_ms,
            payload,
        })
    }

    /// What follows the flags: `pred_gap` (if the order mode carries one), then
    /// `deadline_ms` (if the packet is realtime).
    fn after_flags(&mut self, flags: DataFlags) -> Result<(u16, u16), WireError> {
        let pred_gap = self.pred_gap(flags)?;
        let deadline_ms = if flags.realtime() {
            let d = self.take(DEADLINE_LEN)?;
            u16::from_be_bytes([d[0], d[1]])
        } else {
            0
        };
        Ok((pred_gap, deadline_ms))
    }

    /// The `pred_gap` after the flags: read if the order mode carries one.
    fn pred_gap(&mut self, flags: DataFlags) -> Result<u16, WireError> {
        Ok(match flags.order_mode() {
            OrderMode::FlowGap => {
                let g = self.take(PRED_GAP_LEN)?;
                u16::from_be_bytes([g[0], g[1]])
            }
            OrderMode::FlowPrev => 1,
            OrderMode::Session | OrderMode::FlowFirst => 0,
        })
    }

    /// The fields of a FEC frame after its type byte.
    fn fec(&mut self) -> Result<FecFrame<'a>, WireError> {
        let h = self.take(FecFrame::HEADER_LEN - 1)?;
        let first_seq = u64::from_be_bytes(h[..8].try_into().unwrap_or([0; 8]));
        let k = h[8];
        let entries = self.take(usize::from(k) * FecFrame::ENTRY_LEN)?;
        let l = self.take(2)?;
        let shard = self.take(usize::from(u16::from_be_bytes([l[0], l[1]])))?;
        Ok(FecFrame {
            first_seq,
            k,
            m: h[9],
            index: h[10],
            deadline_ms: u16::from_be_bytes([h[11], h[12]]),
            entries,
            shard,
        })
    }

    /// The bytes not parsed yet.
    pub(super) fn rest(&self) -> &'a [u8] {
        self.rest
    }

    pub(super) fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if self.rest.len() < n {
            let have = self.rest.len();
            self.rest = &[];
            return Err(WireError::Truncated { need: n, have });
        }
        let (a, b) = self.rest.split_at(n);
        self.rest = b;
        Ok(a)
    }
}

impl<'a> Iterator for FrameReader<'a> {
    type Item = Result<Frame<'a>, WireError>;

    fn next(&mut self) -> Option<Self::Item> {
        let (&t, rest) = self.rest.split_first()?;
        self.rest = rest;
        Some(match t {
            0x01 => self.data().map(Frame::Data),
            0x06 => self.tail_frame().map(|f| {
                Frame::DataDefine(
                    f.ctx,
                    DataFrame {
                        data_seq: f.data_seq,
                        flags: f.flags,
                        pred_gap: f.pred_gap,
                        deadline_ms: f.deadline_ms,
                        payload: f.body,
                    },
                )
            }),
            0x07 => self.tail_frame().map(Frame::DataCompressed),
            0x02 => self.take(AckFrame::LEN - 1).map(|h| {
                Frame::Ack(AckFrame {
                    path: h[0],
                    largest: u32::from_be_bytes([h[1], h[2], h[3], h[4]]),
                    ack_delay_us: u32::from_be_bytes([h[5], h[6], h[7], h[8]]),
                    recv_count: u64::from_be_bytes(h[9..17].try_into().unwrap_or([0; 8])),
                    recv_bytes: u64::from_be_bytes(h[17..25].try_into().unwrap_or([0; 8])),
                })
            }),
            0x03 => Ok(Frame::Ping),
            0x04 => Ok(Frame::Close),
            0x05 => self.take(PairFrame::LEN - 1).map(|h| {
                Frame::Pair(PairFrame {
                    path: h[0],
                    capacity_kbps: u32::from_be_bytes([h[1], h[2], h[3], h[4]]),
                })
            }),
            0x08 => self.take(NackFrame::LEN - 1).map(|h| {
                Frame::Nack(NackFrame {
                    path: h[0],
                    first: u32::from_be_bytes([h[1], h[2], h[3], h[4]]),
                    count: u16::from_be_bytes([h[5], h[6]]),
                })
            }),
            0x09 => self.fec().map(Frame::Fec),
            0x0A => self.policy().map(Frame::Policy),
            0x0B => self
                .take(4)
                .map(|e| Frame::PolicyAck(u32::from_be_bytes([e[0], e[1], e[2], e[3]]))),
            0x0C => self.relays().map(Frame::Relays),
            0x0D => self
                .take(4)
                .map(|e| Frame::RelaysAck(u32::from_be_bytes([e[0], e[1], e[2], e[3]]))),
            other => {
                self.rest = &[];
                Err(WireError::UnknownFrame(other))
            }
        })
    }
}

/// Appends frames into a plaintext buffer.
pub struct FrameWriter<'a> {
    buf: &'a mut [u8],
    len: usize,
}

impl<'a> FrameWriter<'a> {
    /// Writes into `buf` starting at offset 0.
    pub fn new(buf: &'a mut [u8]) -> Self {
        FrameWriter { buf, len: 0 }
    }

    /// Bytes written so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing was written.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes still free.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.len
    }

    pub(super) fn put(&mut self, bytes: &[u8]) -> Result<(), WireError> {
        let end = self.len + bytes.len();
        self.buf
            .get_mut(self.len..end)
            .ok_or(WireError::BufferTooSmall)?
            .copy_from_slice(bytes);
        self.len = end;
        Ok(())
    }

    /// Writes the inner header.
    pub fn inner_header(&mut self, h: InnerHeader) -> Result<(), WireError> {
        h.emit(
            self.buf
                .get_mut(self.len..)
                .ok_or(WireError::BufferTooSmall)?,
        )?;
        self.len += InnerHeader::LEN;
        Ok(())
    }

    /// Writes a DATA frame.
    pub fn data(&mut self, f: &DataFrame<'_>) -> Result<(), WireError> {
        let len = u16::try_from(f.payload.len()).map_err(|_| WireError::BufferTooSmall)?;
        if self.remaining() < DataFrame::header_len(f.flags) + f.payload.len() {
            return Err(WireError::BufferTooSmall);
        }
        self.put(&[0x01])?;
        self.put(&f.data_seq.to_be_bytes())?;
        self.put_flags(f.flags, f.pred_gap, f.deadline_ms)?;
        self.put(&len.to_be_bytes())?;
        self.put(f.payload)
    }

    /// Writes a DATA_DEFINE frame (DATA that also defines header-compression context
    /// `ctx`); it runs to the end of the datagram, so it must be the last frame.
    pub fn data_define(&mut self, ctx: u8, f: &DataFrame<'_>) -> Result<(), WireError> {
        self.put_tail_frame(
            0x06,
            &CompressedFrame {
                data_seq: f.data_seq,
                flags: f.flags,
                pred_gap: f.pred_gap,
                deadline_ms: f.deadline_ms,
                ctx,
                body: f.payload,
            },
        )
    }

    /// Writes a compressed TCP frame whose body is already encoded (the last frame).
    pub fn data_compressed(&mut self, f: &CompressedFrame<'_>) -> Result<(), WireError> {
        self.put_tail_frame(0x07, f)
    }

    fn put_tail_frame(&mut self, t: u8, f: &CompressedFrame<'_>) -> Result<(), WireError> {
        if self.remaining() < CompressedFrame::header_len(f.flags) + f.body.len() {
            return Err(WireError::BufferTooSmall);
        }
        self.put(&[t, f.ctx])?;
        self.put(&f.data_seq.to_be_bytes())?;
        self.put_flags(f.flags, f.pred_gap, f.deadline_ms)?;
        self.put(f.body)
    }

    /// The flags byte, `pred_gap` if the order mode carries one, `deadline_ms` if the
    /// packet is realtime.
    fn put_flags(
        &mut self,
        flags: DataFlags,
        pred_gap: u16,
        deadline_ms: u16,
    ) -> Result<(), WireError> {
        self.put(&[flags.0])?;
        if flags.order_mode() == OrderMode::FlowGap {
            self.put(&pred_gap.to_be_bytes())?;
        }
        if flags.realtime() {
            self.put(&deadline_ms.to_be_bytes())?;
        }
        Ok(())
    }

    /// Writes a compressed TCP frame whose body `write_body` encodes straight into the
    /// datagram (no copy through a scratch buffer): it gets the room left and returns the
    /// bytes it wrote, or `None` if they did not fit. The wire layer knows only the frame's
    /// layout; what the body holds is the header compressor's business.
    pub fn data_compressed_with(
        &mut self,
        (data_seq, flags, pred_gap, deadline_ms): (u64, DataFlags, u16, u16),
        ctx: u8,
        write_body: impl FnOnce(&mut [u8]) -> Option<usize>,
    ) -> Result<(), WireError> {
        let start = self.len;
        let written = self
            .put(&[0x07, ctx])
            .and_then(|()| self.put(&data_seq.to_be_bytes()))
            .and_then(|()| self.put_flags(flags, pred_gap, deadline_ms));
        if written.is_err() {
            self.len = start;
            return written;
        }
        let rest = self
            .buf
            .get_mut(self.len..)
            .ok_or(WireError::BufferTooSmall)?;
        match write_body(rest) {
            Some(n) => {
                self.len += n;
                Ok(())
            }
            None => {
                self.len = start;
                Err(WireError::BufferTooSmall)
            }
        }
    }

    /// Writes an ACK frame.
    pub fn ack(&mut self, a: &AckFrame) -> Result<(), WireError> {
        if self.remaining() < AckFrame::LEN {
            return Err(WireError::BufferTooSmall);
        }
        self.put(&[0x02, a.path])?;
        self.put(&a.largest.to_be_bytes())?;
        self.put(&a.ack_delay_us.to_be_bytes())?;
        self.put(&a.recv_count.to_be_bytes())?;
        self.put(&a.recv_bytes.to_be_bytes())
    }

    /// Writes a PING frame.
    pub fn ping(&mut self) -> Result<(), WireError> {
        self.put(&[0x03])
    }

    /// Writes a CLOSE frame.
    pub fn close(&mut self) -> Result<(), WireError> {
        self.put(&[0x04])
    }

    /// Writes a PAIR frame.
    pub fn pair(&mut self, p: &PairFrame) -> Result<(), WireError> {
        if self.remaining() < PairFrame::LEN {
            return Err(WireError::BufferTooSmall);
        }
        self.put(&[0x05, p.path])?;
        self.put(&p.capacity_kbps.to_be_bytes())
    }

    /// Writes a FEC frame; `entries` must hold k entries (`FecFrame::entry`).
    pub fn fec(&mut self, f: &FecFrame<'_>) -> Result<(), WireError> {
        let len = u16::try_from(f.shard.len()).map_err(|_| WireError::BufferTooSmall)?;
        if f.entries.len() != usize::from(f.k) * FecFrame::ENTRY_LEN
            || self.remaining() < FecFrame::len(usize::from(f.k), f.shard.len())
        {
            return Err(WireError::BufferTooSmall);
        }
        self.put(&[0x09])?;
        self.put(&f.first_seq.to_be_bytes())?;
        self.put(&[f.k, f.m, f.index])?;
        self.put(&f.deadline_ms.to_be_bytes())?;
        self.put(f.entries)?;
        self.put(&len.to_be_bytes())?;
        self.put(f.shard)
    }

    /// Writes a NACK frame.
    pub fn nack(&mut self, n: &NackFrame) -> Result<(), WireError> {
        if self.remaining() < NackFrame::LEN {
            return Err(WireError::BufferTooSmall);
        }
        self.put(&[0x08, n.path])?;
        self.put(&n.first.to_be_bytes())?;
        self.put(&n.count.to_be_bytes())
    }
}

#[cfg(test)]
#[path = "frame_tests.rs"]
mod tests;
