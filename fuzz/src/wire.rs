//! Wire-format targets: the outer header view and the frames of the sealed payload.

use multihome_proto::crypto::TAG_LEN;
use multihome_proto::header_compress::Decompressor;
use multihome_proto::wire::relays::{self, RelaysFrame};
use multihome_proto::wire::stated::{self, PolicyFrame};
use multihome_proto::wire::{
    Frame, FrameReader, FrameWriter, InnerHeader, MessageType, OuterPacket, DATA_HEADER_LEN,
    HANDSHAKE_INIT_LEN, HANDSHAKE_RESP_LEN,
};

/// A TCP/IPv4 header (no options) that defines the context compressed frames are restored
/// against (its checksums do not matter: defining only reads the static fields).
const SEED_TCP: &[u8] = &[
    0x45, 0, 0, 40, 0, 1, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2, // IPv4
    0x1f, 0x90, 0, 80, 0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x10, 0x10, 0, 0, 0, 0, 0, // TCP
];

/// `OuterPacket::new_checked` and every accessor: no panic, and what was accepted has
/// the type, reserved bits and length its type requires, read back from the right bytes.
pub fn outer_header(data: &[u8]) {
    let Ok(p) = OuterPacket::new_checked(data) else {
        return;
    };
    assert_eq!(data[0], p.kind() as u8);
    assert_eq!(&data[2..4], &[0, 0], "reserved bytes accepted");
    assert_eq!(p.path(), data[1]);
    assert_eq!(p.index().to_be_bytes(), data[4..8]);
    let _ = p.counter();
    match p.kind() {
        MessageType::HandshakeInit => {
            assert_eq!(data.len(), HANDSHAKE_INIT_LEN);
            assert_eq!(p.noise(), &data[8..]);
        }
        MessageType::HandshakeResp => {
            assert_eq!(data.len(), HANDSHAKE_RESP_LEN);
            assert_eq!(p.resp_receiver_index().to_be_bytes(), data[8..12]);
            assert_eq!(p.noise(), &data[12..]);
        }
        MessageType::Data => {
            assert!(data.len() >= DATA_HEADER_LEN + TAG_LEN);
            assert_eq!(p.counter().to_be_bytes(), data[8..16]);
            let (aad, sealed) = p.split_data();
            assert_eq!((aad, sealed), data.split_at(DATA_HEADER_LEN));
            assert!(p.noise().is_empty());
        }
    }
}

/// A POLICY frame's statement (`wire::stated`): decoding never panics; what decodes has
/// at most `MAX_STATED_RULES` rules and encodes back to the frame's rules exactly.
fn stated_is_canonical(f: &PolicyFrame<'_>) {
    let Ok(c) = stated::decode(f) else {
        return;
    };
    assert!(c.rules.len() <= stated::MAX_STATED_RULES);
    assert_eq!(
        stated::policy_code(c.default),
        f.default,
        "default re-encoded"
    );
    let rules = stated::encode_rules(&c).expect("a decoded statement is statable");
    assert_eq!(rules, f.rules, "rules re-encoded");
}

/// A RELAYS frame's list (`wire::relays`): decoding never panics; what decodes has at
/// most `MAX_HANDED_RELAYS` relays, each one a server may hand out, and encodes back to the
/// frame's bytes exactly.
fn relays_are_canonical(f: &RelaysFrame<'_>) {
    let Ok(list) = relays::decode(f) else {
        return;
    };
    assert!(list.len() <= relays::MAX_HANDED_RELAYS);
    assert!(list.iter().all(relays::is_handable));
    let (count, bytes) = relays::encode(&list).expect("a decoded list is handable");
    assert_eq!((count, &bytes[..]), (f.count, f.relays), "relays re-encoded");
}

/// `InnerHeader::parse` then `FrameReader` to the end or the first error; re-encoding
/// what parsed with `FrameWriter` must give the input's bytes exactly (all of them if no
/// frame failed, else the prefix that parsed) — the encoding is canonical; a POLICY
/// frame's statement and a RELAYS frame's list decode canonically too
/// (`stated_is_canonical`, `relays_are_canonical`).
pub fn frames(data: &[u8]) {
    let Ok((hdr, rest)) = InnerHeader::parse(data) else {
        assert!(data.len() < InnerHeader::LEN, "valid header refused");
        return;
    };
    let mut out = vec![0u8; data.len()];
    let mut w = FrameWriter::new(&mut out);
    w.inner_header(hdr).expect("header fits where it came from");
    let mut complete = true;
    let mut count = 0usize;
    for f in FrameReader::new(rest) {
        count += 1;
        assert!(count <= rest.len(), "more frames than bytes");
        let written = match f {
            Ok(Frame::Data(d)) => w.data(&d),
            Ok(Frame::Ack(a)) => w.ack(&a),
            Ok(Frame::Ping) => w.ping(),
            Ok(Frame::Close) => w.close(),
            Ok(Frame::Pair(p)) => w.pair(&p),
            Ok(Frame::Nack(n)) => w.nack(&n),
            Ok(Frame::Fec(f)) => {
                // Feeding it to a decoder must not panic either.
                let _ = multihome_proto::fec::Decoder::default().on_parity(0, &f);
                w.fec(&f)
            }
            Ok(Frame::DataDefine(ctx, d)) => w.data_define(ctx, &d),
            Ok(Frame::Policy(f)) => {
                stated_is_canonical(&f);
                w.policy(&f)
            }
            Ok(Frame::PolicyAck(epoch)) => w.policy_ack(epoch),
            Ok(Frame::Relays(f)) => {
                relays_are_canonical(&f);
                w.relays(&f)
            }
            Ok(Frame::RelaysAck(epoch)) => w.relays_ack(epoch),
            Ok(Frame::DataCompressed(c)) => {
                // Whatever the body, restoring it must not panic; a restored packet is a
                // well-formed IPv4/TCP packet of the announced length.
                let mut d = Decompressor::default();
                d.define(c.ctx, SEED_TCP);
                if let Ok(p) = d.decompress(c.ctx, c.body) {
                    assert_eq!(usize::from(u16::from_be_bytes([p[2], p[3]])), p.len());
                }
                w.data_compressed(&c)
            }
            Err(_) => {
                complete = false;
                break;
            }
        };
        written.expect("a parsed frame re-encodes into the space it came from");
    }
    let n = w.len();
    if complete {
        assert_eq!(&out[..n], data, "round trip changed the bytes");
    } else {
        assert_eq!(
            &out[..n],
            &data[..n],
            "round trip changed the parsed prefix"
        );
    }
}
