//! Cutting TUN offload super-packets into ordinary IP packets.
//!
//! With `IFF_VNET_HDR` and TSO enabled ([`super::Tun::create_with_offload`]) every read from
//! the TUN starts with a `virtio_net_hdr` and may carry a TCP "super-packet": one IP/TCP
//! header followed by up to 64 KiB of payload, which the kernel expects us to cut into
//! segments of `gso_size` payload bytes — exactly what a NIC with TSO would do. Packets
//! without GSO may still have a partial checksum (`NEEDS_CSUM`) that must be completed.
//!
//! Invariants of the output: every emitted packet is a complete IPv4/IPv6 packet with valid
//! IP and TCP checksums; segment `i` carries payload bytes `[i*mss, (i+1)*mss)`, sequence
//! number `seq + i*mss`, IPv4 ID `id + i`; FIN and PSH only on the last segment, CWR only on
//! the first (as Linux's own `tcp_gso_segment`). The virtio header is read in native byte
//! order, which is what a TUN uses unless `TUNSETVNETLE/BE` changed it.

/// Size of `struct virtio_net_hdr` preceding each packet on an offload TUN.
pub const VNET_HDR_LEN: usize = 10;

pub(crate) const F_NEEDS_CSUM: u8 = 1;
pub(crate) const GSO_NONE: u8 = 0;
pub(crate) const GSO_TCPV4: u8 = 1;
pub(crate) const GSO_TCPV6: u8 = 4;
const GSO_ECN: u8 = 0x80;

const TCP_FIN: u8 = 0x01;
pub(crate) const TCP_PSH: u8 = 0x08;
const TCP_CWR: u8 = 0x80;

/// Why a frame could not be split.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GsoError {
    /// The frame is shorter than the headers it announces; it was cut (buffer too small?).
    #[error(
        "offload frame truncated or malformed: {0}; read TUN frames into a 64 KiB + 10 byte buffer"
    )]
    Malformed(&'static str),
    /// A GSO type this crate did not ask the kernel for (e.g. UDP segmentation).
    #[error("unsupported GSO type {0:#x}; only TCP segmentation offload is enabled by Tun::create_with_offload")]
    Unsupported(u8),
}

/// Splits one frame read from an offload TUN into IP packets, calling `emit` for each, and
/// returns how many were emitted. `scratch` is reused between calls to avoid allocation.
pub fn split_gso(
    frame: &[u8],
    scratch: &mut Vec<u8>,
    mut emit: impl FnMut(&[u8]),
) -> Result<usize, GsoError> {
    if frame.len() < VNET_HDR_LEN {
        return Err(GsoError::Malformed("shorter than virtio_net_hdr"));
    }
    let h = &frame[..VNET_HDR_LEN];
    let flags = h[0];
    let gso_type = h[1] & !GSO_ECN;
    let gso_size = u16::from_ne_bytes([h[4], h[5]]) as usize;
    let csum_start = u16::from_ne_bytes([h[6], h[7]]) as usize;
    let csum_offset = u16::from_ne_bytes([h[8], h[9]]) as usize;
    let pkt = &frame[VNET_HDR_LEN..];

    match gso_type {
        GSO_NONE => {
            if flags & F_NEEDS_CSUM == 0 {
                emit(pkt);
                return Ok(1);
            }
            let at = csum_start + csum_offset;
            if at + 2 > pkt.len() {
                return Err(GsoError::Malformed("checksum offset beyond packet"));
            }
            scratch.clear();
            scratch.extend_from_slice(pkt);
            // The field already holds the pseudo-header sum; summing the rest completes it.
            let c = !fold(sum(0, &scratch[csum_start..]));
            scratch[at..at + 2].copy_from_slice(&c.to_be_bytes());
            emit(scratch);
            Ok(1)
        }
        GSO_TCPV4 | GSO_TCPV6 => split_tcp(
            pkt,
            gso_type == GSO_TCPV6,
            gso_size,
            csum_start,
            scratch,
            emit,
        ),
        other => Err(GsoError::Unsupported(other)),
    }
}

fn split_tcp(
    pkt: &[u8],
    v6: bool,
    mss: usize,
    l4: usize,
    scratch: &mut Vec<u8>,
    mut emit: impl FnMut(&[u8]),
) -> Result<usize, GsoError> {
    let version = pkt.first().map(|b| b >> 4);
    if version != Some(if v6 { 6 } else { 4 }) {
        return Err(GsoError::Malformed(
            "IP version does not match the GSO type",
        ));
    }
    let ip_min = if v6 { 40 } else { 20 };
    if mss == 0 || l4 < ip_min || l4 + 20 > pkt.len() {
        return Err(GsoError::Malformed("bad gso_size or transport offset"));
    }
    if !v6 && (pkt[0] & 0x0f) as usize * 4 != l4 {
        return Err(GsoError::Malformed(
            "IPv4 header length disagrees with csum_start",
        ));
    }
    let tcp_len = (pkt[l4 + 12] >> 4) as usize * 4;
    let hdr_len = l4 + tcp_len;
    if tcp_len < 20 || hdr_len > pkt.len() {
        return Err(GsoError::Malformed("TCP header beyond packet"));
    }
    let payload = &pkt[hdr_len..];
    let seq0 = u32::from_be_bytes(pkt[l4 + 4..l4 + 8].try_into().unwrap());
    let id0 = u16::from_be_bytes([pkt[4], pkt[5]]);
    let flags0 = pkt[l4 + 13];
    let (src, dst) = if v6 {
        (&pkt[8..24], &pkt[24..40])
    } else {
        (&pkt[12..16], &pkt[16..20])
    };
    let pseudo = sum(sum(0, src), dst) + 6; // + protocol number of TCP

    let chunks = payload.chunks(mss);
    let count = chunks.len().max(1); // a bare header (no payload) is one packet
    let empty: [&[u8]; 1] = [&[]];
    let parts: Box<dyn Iterator<Item = &[u8]>> = if payload.is_empty() {
        Box::new(empty.into_iter())
    } else {
        Box::new(chunks)
    };
    for (i, data) in parts.enumerate() {
        scratch.clear();
        scratch.extend_from_slice(&pkt[..hdr_len]);
        scratch.extend_from_slice(data);
        let total = scratch.len();
        if v6 {
            let plen = (total - 40) as u16;
            scratch[4..6].copy_from_slice(&plen.to_be_bytes());
        } else {
            scratch[2..4].copy_from_slice(&(total as u16).to_be_bytes());
            scratch[4..6].copy_from_slice(&id0.wrapping_add(i as u16).to_be_bytes());
            scratch[10..12].copy_from_slice(&[0, 0]);
            let c = !fold(sum(0, &scratch[..l4]));
            scratch[10..12].copy_from_slice(&c.to_be_bytes());
        }
        let seq = seq0.wrapping_add((i * mss) as u32);
        scratch[l4 + 4..l4 + 8].copy_from_slice(&seq.to_be_bytes());
        let mut f = flags0;
        if i + 1 < count {
            f &= !(TCP_FIN | TCP_PSH);
        }
        if i > 0 {
            f &= !TCP_CWR;
        }
        scratch[l4 + 13] = f;
        scratch[l4 + 16..l4 + 18].copy_from_slice(&[0, 0]);
        let seg_len = (total - l4) as u64;
        let c = !fold(sum(pseudo + seg_len, &scratch[l4..]));
        scratch[l4 + 16..l4 + 18].copy_from_slice(&c.to_be_bytes());
        emit(scratch);
    }
    Ok(count)
}

/// One's-complement sum of big-endian 16-bit words (odd tail padded with zero), partly folded:
/// the result is at most 2^32, so callers may add small terms (lengths, protocol) to it.
///
/// How: one's-complement addition is addition modulo 0xffff, so the data is summed as
/// native-endian 32-bit words into 64-bit lanes (no carries to fold: 2^32 words could not
/// overflow them), a loop the compiler turns into SIMD; the result is folded to 16 bits and
/// byte-swapped into big-endian terms (the sum of byte-swapped words is the byte-swapped
/// sum, RFC 1071 §2(B)). This runs over every payload byte on both ends (`gso`, `gro`).
/// The sum is zero only for all-zero data, as with 16-bit words.
pub(crate) fn sum(acc: u64, data: &[u8]) -> u64 {
    let mut words = data.chunks_exact(4);
    let native: u64 = words
        .by_ref()
        .map(|w| u64::from(u32::from_ne_bytes(w.try_into().expect("4-byte chunk"))))
        .sum();
    let mut acc = acc + u64::from(u16::from_be(fold(native)));
    let mut pairs = words.remainder().chunks_exact(2);
    for w in &mut pairs {
        acc += u64::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [last] = pairs.remainder() {
        acc += u64::from(*last) << 8;
    }
    // 2^32 - 1 is a multiple of 0xffff too: reduce to 33 bits without changing the result.
    let acc = (acc & 0xffff_ffff) + (acc >> 32);
    (acc & 0xffff_ffff) + (acc >> 32)
}

/// Folds a sum into 16 bits with end-around carry.
pub(crate) fn fold(mut acc: u64) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

#[cfg(test)]
mod tests {
    /// The textbook sum (RFC 1071): big-endian 16-bit words, end-around carry.
    fn sum16(acc: u64, data: &[u8]) -> u16 {
        let mut acc = fold(acc);
        for w in data.chunks(2) {
            let v = u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)]);
            let (s, carry) = acc.overflowing_add(v);
            acc = s + u16::from(carry);
        }
        acc
    }

    proptest::proptest! {
        #[test]
        fn sum_is_the_textbook_sum(
            acc in 0u64..(1 << 33),
            data in proptest::collection::vec(proptest::num::u8::ANY, 0..3000),
        ) {
            let fast = fold(sum(acc, &data));
            let slow = sum16(acc, &data);
            // 0 and 0xffff are both zero in one's complement.
            proptest::prop_assert_eq!(fast % 0xffff, slow % 0xffff);
        }
    }

    use super::*;

    /// Independent checker: a correct checksum makes the folded sum 0xffff.
    fn valid(acc: u64) -> bool {
        fold(acc) == 0xffff
    }

    fn vnet(gso_type: u8, gso_size: u16, csum_start: u16, csum_offset: u16, flags: u8) -> Vec<u8> {
        let mut h = vec![flags, gso_type];
        h.extend_from_slice(&0u16.to_ne_bytes()); // hdr_len: not trusted, recomputed
        h.extend_from_slice(&gso_size.to_ne_bytes());
        h.extend_from_slice(&csum_start.to_ne_bytes());
        h.extend_from_slice(&csum_offset.to_ne_bytes());
        h
    }

    fn tcp_header(seq: u32, flags: u8) -> Vec<u8> {
        let mut t = vec![0u8; 20];
        t[0..2].copy_from_slice(&40000u16.to_be_bytes());
        t[2..4].copy_from_slice(&443u16.to_be_bytes());
        t[4..8].copy_from_slice(&seq.to_be_bytes());
        t[12] = 5 << 4;
        t[13] = flags;
        t
    }

    fn super_v4(payload: &[u8], seq: u32, flags: u8) -> Vec<u8> {
        let mut ip = vec![0x45, 0, 0, 0, 0x12, 0x34, 0x40, 0, 64, 6, 0, 0];
        ip.extend_from_slice(&[192, 0, 2, 1, 198, 51, 100, 7]);
        ip.extend(tcp_header(seq, flags));
        ip.extend_from_slice(payload);
        ip
    }

    fn check_segments(segs: &[Vec<u8>], v6: bool, payload: &[u8], mss: usize, seq0: u32) {
        let l4 = if v6 { 40 } else { 20 };
        let mut joined = Vec::new();
        for (i, s) in segs.iter().enumerate() {
            let (src, dst) = if v6 {
                (&s[8..24], &s[24..40])
            } else {
                (&s[12..16], &s[16..20])
            };
            if v6 {
                assert_eq!(u16::from_be_bytes([s[4], s[5]]) as usize, s.len() - 40);
            } else {
                assert_eq!(u16::from_be_bytes([s[2], s[3]]) as usize, s.len());
                assert_eq!(u16::from_be_bytes([s[4], s[5]]), 0x1234 + i as u16);
                assert!(
                    valid(sum(0, &s[..20])),
                    "IPv4 header checksum of segment {i}"
                );
            }
            let tcp_len = (s.len() - l4) as u64;
            assert!(
                valid(sum(sum(sum(6 + tcp_len, src), dst), &s[l4..])),
                "TCP checksum {i}"
            );
            let seq = u32::from_be_bytes(s[l4 + 4..l4 + 8].try_into().unwrap());
            assert_eq!(seq, seq0.wrapping_add((i * mss) as u32));
            let f = s[l4 + 13];
            let last = i + 1 == segs.len();
            assert_eq!(f & TCP_FIN != 0, last, "FIN only on the last");
            assert_eq!(f & TCP_PSH != 0, last, "PSH only on the last");
            assert_eq!(f & TCP_CWR != 0, i == 0, "CWR only on the first");
            assert!(s.len() - l4 - 20 <= mss);
            joined.extend_from_slice(&s[l4 + 20..]);
        }
        assert_eq!(joined, payload);
    }

    #[test]
    fn tcpv4_super_packet_is_cut_into_valid_segments() {
        let payload: Vec<u8> = (0..3500u32).map(|i| (i * 7) as u8).collect();
        let flags = TCP_FIN | TCP_PSH | TCP_CWR | 0x10;
        let seq0 = u32::MAX - 1000; // wraps inside the super-packet
        let mut frame = vnet(GSO_TCPV4, 1000, 20, 16, F_NEEDS_CSUM);
        frame.extend(super_v4(&payload, seq0, flags));
        let mut segs = Vec::new();
        let n = split_gso(&frame, &mut Vec::new(), |p| segs.push(p.to_vec())).unwrap();
        assert_eq!(n, 4);
        assert_eq!(segs.len(), 4);
        check_segments(&segs, false, &payload, 1000, seq0);
    }

    #[test]
    fn tcpv6_super_packet_is_cut_into_valid_segments() {
        let payload: Vec<u8> = (0..2801u32).map(|i| (i ^ 0x5a) as u8).collect();
        let mut ip = vec![0x60, 0, 0, 0, 0, 0, 6, 64];
        ip.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        ip.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        ip.extend(tcp_header(1, TCP_FIN | TCP_PSH | TCP_CWR | 0x10));
        ip.extend_from_slice(&payload);
        let mut frame = vnet(GSO_TCPV6 | GSO_ECN, 1400, 40, 16, F_NEEDS_CSUM);
        frame.extend(ip);
        let mut segs = Vec::new();
        assert_eq!(
            split_gso(&frame, &mut Vec::new(), |p| segs.push(p.to_vec())),
            Ok(3)
        );
        check_segments(&segs, true, &payload, 1400, 1);
    }

    #[test]
    fn partial_checksum_is_completed() {
        // A UDP/IPv4 packet whose checksum field holds the pseudo-header sum only.
        let mut pkt = vec![
            0x45, 0, 0, 32, 0, 0, 0, 0, 64, 17, 0, 0, 192, 0, 2, 1, 192, 0, 2, 2,
        ];
        let mut udp = vec![0x10, 0x00, 0x20, 0x00, 0, 12, 0, 0, b'h', b'e', b'l', b'o'];
        let pseudo = fold(sum(sum(17 + 12, &pkt[12..16]), &pkt[16..20]));
        udp[6..8].copy_from_slice(&pseudo.to_be_bytes());
        pkt.extend(udp);
        let mut frame = vnet(GSO_NONE, 0, 20, 6, F_NEEDS_CSUM);
        frame.extend_from_slice(&pkt);
        let mut out = Vec::new();
        split_gso(&frame, &mut Vec::new(), |p| out = p.to_vec()).unwrap();
        assert!(valid(sum(
            sum(sum(17 + 12, &out[12..16]), &out[16..20]),
            &out[20..]
        )));
        assert_eq!(&out[..6], &pkt[..6]);
    }

    #[test]
    fn plain_packet_passes_unchanged() {
        let mut frame = vnet(GSO_NONE, 0, 0, 0, 0);
        frame.extend_from_slice(&[0x45, 1, 2, 3]);
        let mut out = Vec::new();
        assert_eq!(
            split_gso(&frame, &mut Vec::new(), |p| out = p.to_vec()),
            Ok(1)
        );
        assert_eq!(out, [0x45, 1, 2, 3]);
    }

    #[test]
    fn malformed_and_unsupported_frames_are_refused() {
        let mut sink = |_: &[u8]| panic!("nothing may be emitted");
        assert!(matches!(
            split_gso(&[0; 4], &mut Vec::new(), &mut sink),
            Err(GsoError::Malformed(_))
        ));
        let mut f = vnet(GSO_TCPV4, 1000, 20, 16, 1);
        f.extend_from_slice(&super_v4(&[1, 2, 3], 0, 0)[..30]); // cut inside the TCP header
        assert!(matches!(
            split_gso(&f, &mut Vec::new(), &mut sink),
            Err(GsoError::Malformed(_))
        ));
        let mut f = vnet(GSO_TCPV6, 1000, 40, 16, 1);
        f.extend(super_v4(&[1, 2, 3], 0, 0)); // IPv4 packet announced as TCPv6
        assert!(matches!(
            split_gso(&f, &mut Vec::new(), &mut sink),
            Err(GsoError::Malformed(_))
        ));
        let mut f = vnet(3, 1000, 20, 6, 1); // UDP fragmentation offload
        f.extend(super_v4(&[1, 2, 3], 0, 0));
        assert_eq!(
            split_gso(&f, &mut Vec::new(), &mut sink),
            Err(GsoError::Unsupported(3))
        );
    }
}
