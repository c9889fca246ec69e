//! Targets of the racing gateway's parsers (`multihome race`): the nfnetlink_queue messages
//! the kernel sends the daemon (`multihome_race::daemon::nfqueue::parse`) and the IP packet held
//! in the queue (`multihome_race::core::classify`). Both read bytes the kernel hands over, so a
//! panic would take the gateway, and every held SYN with it, down.
//!
//! The `nfqueue` oracle builds its messages from linux/netfilter/nfnetlink_queue.h and
//! linux/netlink.h itself (not with the daemon's builder), so a layout mistake shared by the
//! daemon's encoder and parser would still show.

use multihome_race::core::{classify, Transport};
use multihome_race::daemon::nfqueue::{parse, Packet};
use std::net::IpAddr;

const NLMSG_HDRLEN: usize = 16;
const AF_INET: u8 = 2;
const NLMSG_NOOP: u16 = 1;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
/// `NFNL_SUBSYS_QUEUE << 8 | NFQNL_MSG_PACKET`.
const NFQ_PACKET: u16 = 3 << 8;
/// `NFNL_SUBSYS_QUEUE << 8 | NFQNL_MSG_CONFIG`: never sent by the kernel, must be ignored.
const NFQ_CONFIG: u16 = (3 << 8) | 2;
const NFQA_PACKET_HDR: u16 = 1;
const NFQA_MARK: u16 = 3;
const NFQA_IFINDEX_INDEV: u16 = 5;
const NFQA_PAYLOAD: u16 = 10;
/// Largest attribute value (the attribute length is a u16 that counts its 4-byte header).
const MAX_VALUE: usize = u16::MAX as usize - 4;

/// Fuzz body: `data` parsed as one datagram from the queue socket, then `data` read as
/// records, each turned into a well-formed message (a queued packet with or without mark,
/// attributes in either order, an unknown attribute, padded or not; an ack or error; a
/// message of another type) and parsed as one datagram.
///
/// Checks: no panic, termination; from raw bytes, at most one packet or ack per 16 bytes
/// and every payload a byte range of the input; from well-formed messages, exactly the
/// packets (id, mark, payload) and acks (seq, errno) that were encoded, in order, and
/// nothing from the other messages. Returns the number of packets of the second datagram.
pub fn nfqueue(data: &[u8]) -> usize {
    let mut out = Vec::new();
    let mut acks = 0usize;
    parse(data, &mut out, &mut |_, _| acks += 1);
    assert!(
        out.len() + acks <= data.len() / NLMSG_HDRLEN,
        "{} packets and {acks} acks from {} bytes",
        out.len(),
        data.len()
    );
    for p in &out {
        assert!(
            p.payload.is_empty() || data.windows(p.payload.len()).any(|w| w == p.payload),
            "payload of packet {} is not from the input",
            p.id
        );
    }

    let mut dgram = Vec::new();
    let (mut want, mut want_acks) = (Vec::new(), Vec::new());
    for (i, (tag, body)) in crate::records(data).enumerate() {
        match tag & 3 {
            0 | 1 => want.push(packet_msg(&mut dgram, tag, body)),
            2 => want_acks.push(error_msg(&mut dgram, body)),
            _ => other_msg(&mut dgram, i, body),
        }
    }
    let (mut got, mut got_acks) = (Vec::new(), Vec::new());
    parse(&dgram, &mut got, &mut |seq, errno| {
        got_acks.push((seq, errno))
    });
    assert_eq!(got, want, "queued packets misread");
    assert_eq!(got_acks, want_acks, "acks misread");
    got.len()
}

/// Fuzz body: `classify` on the raw bytes as a queued packet.
///
/// Checks: no panic; what it classifies is an IPv4 or IPv6 packet, not a fragment, and the
/// addresses, DSCP, ports and SYN flag it returns are the bytes at their places in the
/// headers (checked where the transport header follows the IP header directly). Returns
/// whether the packet was classified.
pub fn race_packet(data: &[u8]) -> bool {
    let Some(c) = classify(data) else {
        return false;
    };
    assert!(c.dscp < 64);
    let (src, dst, dscp, proto, l4): (IpAddr, IpAddr, u8, u8, usize) = match data[0] >> 4 {
        4 => {
            let frag = u16::from_be_bytes([data[6], data[7]]);
            assert_eq!(frag & 0x3fff, 0, "a fragment classified");
            let src: [u8; 4] = data[12..16].try_into().unwrap();
            let dst: [u8; 4] = data[16..20].try_into().unwrap();
            let ihl = usize::from(data[0] & 0x0f) * 4;
            (src.into(), dst.into(), data[1] >> 2, data[9], ihl)
        }
        6 => {
            let src: [u8; 16] = data[8..24].try_into().unwrap();
            let dst: [u8; 16] = data[24..40].try_into().unwrap();
            let class = ((data[0] & 0x0f) << 4) | (data[1] >> 4);
            (src.into(), dst.into(), class >> 2, data[6], 40)
        }
        v => panic!("IP version {v} classified"),
    };
    assert_eq!((c.src.ip(), c.dst.ip(), c.dscp), (src, dst, dscp));
    // Otherwise extension headers (IPv6, or IPv4's authentication header) come first.
    if proto == 6 || proto == 17 {
        let l4 = &data[l4..];
        assert_eq!(c.src.port(), u16::from_be_bytes([l4[0], l4[1]]));
        assert_eq!(c.dst.port(), u16::from_be_bytes([l4[2], l4[3]]));
        let want = if proto == 6 {
            Transport::Tcp {
                syn: l4[13] & 0x17 == 0x02,
            }
        } else {
            Transport::Udp
        };
        assert_eq!(c.transport, want);
    }
    true
}

/// Appends one netlink message of `kind` around `payload`: its length field counts the
/// payload unpadded (as the kernel's `nlmsg_len` may), the next message starts aligned.
fn nlmsg(dgram: &mut Vec<u8>, kind: u16, seq: u32, payload: &[u8]) {
    let len = (NLMSG_HDRLEN + payload.len()) as u32;
    dgram.extend(len.to_ne_bytes());
    dgram.extend(kind.to_ne_bytes());
    dgram.extend(0u16.to_ne_bytes()); // flags
    dgram.extend(seq.to_ne_bytes());
    dgram.extend(0u32.to_ne_bytes()); // port id: the kernel
    dgram.extend(payload);
    dgram.resize(dgram.len().next_multiple_of(4), 0);
}

/// Appends one attribute (`struct nlattr`, host byte order, value padded to 4 bytes).
fn nla(b: &mut Vec<u8>, kind: u16, value: &[u8]) {
    b.extend(((4 + value.len()) as u16).to_ne_bytes());
    b.extend(kind.to_ne_bytes());
    b.extend(value);
    b.resize(b.len().next_multiple_of(4), 0);
}

fn be32(b: &[u8]) -> u32 {
    let mut a = [0u8; 4];
    for (x, y) in a.iter_mut().zip(b) {
        *x = *y;
    }
    u32::from_be_bytes(a)
}

/// A queued packet as the kernel sends it (`nfgenmsg`, then `NFQA_PACKET_HDR` = id,
/// hw_protocol, hook; `NFQA_MARK` when the packet has one; `NFQA_PAYLOAD`): id from the
/// body's first 4 bytes, mark from the next 4 if `tag & 4`, payload the rest. `tag & 8`
/// puts the payload first, `tag & 16` adds an attribute the parser does not read.
fn packet_msg(dgram: &mut Vec<u8>, tag: u8, body: &[u8]) -> Packet {
    let id = be32(body);
    let (mark, rest) = if tag & 4 != 0 {
        (Some(be32(body.get(4..).unwrap_or_default())), 8)
    } else {
        (None, 4)
    };
    let payload = body.get(rest..).unwrap_or_default();
    let payload = &payload[..payload.len().min(MAX_VALUE)];
    let mut b = vec![AF_INET, 0]; // nfgenmsg: family, version
    b.extend(7u16.to_be_bytes()); // queue number
    let mut hdr = Vec::from(id.to_be_bytes());
    hdr.extend([0x08, 0x00, 1]); // ETH_P_IP, NF_INET_PRE_ROUTING
    if tag & 8 != 0 {
        nla(&mut b, NFQA_PAYLOAD, payload);
    }
    nla(&mut b, NFQA_PACKET_HDR, &hdr);
    if let Some(m) = mark {
        nla(&mut b, NFQA_MARK, &m.to_be_bytes());
    }
    if tag & 16 != 0 {
        nla(&mut b, NFQA_IFINDEX_INDEV, &3u32.to_be_bytes());
    }
    if tag & 8 == 0 {
        nla(&mut b, NFQA_PAYLOAD, payload);
    }
    // The last attribute's padding is left out of the message length, as it may be.
    if tag & 8 == 0 && tag & 32 != 0 {
        b.truncate(b.len() - (4 - payload.len() % 4) % 4);
    }
    nlmsg(dgram, NFQ_PACKET, 0, &b);
    Packet {
        id,
        mark: mark.unwrap_or(0),
        payload: payload.to_vec(),
    }
}

/// `NLMSG_ERROR` (an ack when the error is 0): `int error`, then the request's header;
/// errno from the body's first byte, the request's seq from the next four.
fn error_msg(dgram: &mut Vec<u8>, body: &[u8]) -> (u32, i32) {
    let errno = i32::from(body.first().copied().unwrap_or(0));
    let seq = be32(body.get(1..).unwrap_or_default());
    let mut b = Vec::from((-errno).to_ne_bytes());
    b.extend(36u32.to_ne_bytes());
    b.extend(NFQ_CONFIG.to_ne_bytes());
    b.extend(5u16.to_ne_bytes()); // NLM_F_REQUEST | NLM_F_ACK
    b.extend(seq.to_ne_bytes());
    b.extend(0u32.to_ne_bytes());
    nlmsg(dgram, NLMSG_ERROR, seq, &b);
    (seq, errno)
}

/// A message of a type the daemon does not handle, the body as its payload.
fn other_msg(dgram: &mut Vec<u8>, i: usize, body: &[u8]) {
    let kind = [NLMSG_NOOP, NLMSG_DONE, NFQ_CONFIG, 0x0101][i % 4];
    nlmsg(dgram, kind, 0, &body[..body.len().min(MAX_VALUE)]);
}
