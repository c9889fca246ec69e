//! Stream mode's parsers (`multihome_proto::stream`): message 1 as a server reads it, its
//! payload decoder, and records as an opener reads them.

use crate::records;
use multihome_proto::crypto::StaticSecret;
use multihome_proto::stream::handshake::{
    decode_init, encode_init, HANDSHAKE_MAX, INIT_PAYLOAD_MAX,
};
use multihome_proto::stream::{ConnectStatus, Record, StreamInitiator, StreamResponder};

/// Input records: tag bit 0 set = XORed into the valid message 1 and read by the server;
/// bit 1 set = XORed into the next valid record's frame body and opened; else the body is
/// given raw to the payload decoder, the server and the opener.
///
/// Checks: no panic; message 1 is accepted only when exactly the valid one; a payload that
/// decodes encodes back to the same bytes; a record opens only when exactly the valid one
/// (after which the opener expects the next), and then as what was sealed.
pub fn stream(data: &[u8]) {
    let client = StaticSecret::from_bytes([1; 32]);
    let server = StaticSecret::from_bytes([2; 32]);
    let target = "10.50.0.9:443".parse().expect("literal");
    let mut m1 = [0u8; HANDSHAKE_MAX];
    let (init, n1) =
        StreamInitiator::start(&client, &server.public_key(), [3; 32], 9, target, &mut m1)
            .expect("valid handshake");
    let valid_m1 = m1[..n1].to_vec();
    let resp = StreamResponder::read(&server, [4; 32], &valid_m1).expect("valid message 1");
    let mut m2 = [0u8; HANDSHAKE_MAX];
    let (n2, _, opener) = resp
        .answer(ConnectStatus::Connected, &mut m2)
        .expect("answer");
    // The client seals what the server opens.
    let (_, mut sealer, _) = init.finish(&m2[..n2]).expect("valid message 2");
    let mut frame = vec![0u8; 256];
    for (i, (tag, body)) in records(data).enumerate().take(2_000) {
        if tag & 1 == 1 {
            let mut m = valid_m1.clone();
            m.iter_mut().zip(body).for_each(|(d, x)| *d ^= x);
            let ok = StreamResponder::read(&server, [4; 32], &m).is_ok();
            assert!(!ok || m == valid_m1, "a changed message 1 was accepted");
        } else if tag & 2 == 2 {
            let payload = [i as u8; 40];
            let sealed = Record::Data(&payload[..1 + i % 40]);
            let n = sealer.seal(sealed, &mut frame).expect("seal");
            let valid = frame[2..n].to_vec();
            let mut b = valid.clone();
            b.iter_mut().zip(body).for_each(|(d, x)| *d ^= x);
            let changed = b != valid;
            match opener.open(&mut b) {
                Ok(r) => {
                    assert!(!changed, "a changed record opened");
                    assert_eq!(r, sealed, "a record opened as something else");
                }
                Err(_) => {
                    assert!(changed, "the valid record did not open");
                    return; // the opener now waits for a record that was never sent
                }
            }
        } else {
            if let Ok((ts, t)) = decode_init(body) {
                let mut again = [0u8; INIT_PAYLOAD_MAX];
                let n = encode_init(ts, t, &mut again);
                assert_eq!(&again[..n], body, "payload does not round-trip");
            }
            assert!(StreamResponder::read(&server, [4; 32], body).is_err() || body == valid_m1);
            // Raw bytes never authenticate as the next record (it is not sealed yet).
            assert!(
                opener.open(&mut body.to_vec()).is_err(),
                "a raw record opened"
            );
        }
    }
}
