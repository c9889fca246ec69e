//! Targets that drive endpoint state with hostile datagrams: the server's handshake path
//! and a keyed session's data path.

use crate::records;
use multihome_proto::crypto::cookie::MacKeys;
use multihome_proto::crypto::{
    CipherSet, DataCipher, Initiator, OpenKey, Responder, SealKey, SessionId, StaticSecret,
    TransportKeys, TAG_LEN,
};
use multihome_proto::endpoint::{Datagram, PeerConfig, Server, ServerConfig};
use multihome_proto::policy::Policy;
use multihome_proto::sched::MAX_PATHS;
use multihome_proto::session::{Keypair, Session, SessionConfig, Side};
use multihome_proto::wire::{DATA_HEADER_LEN, HANDSHAKE_INIT_LEN};
use multihome_proto::Instant;
use std::net::SocketAddr;
use std::sync::OnceLock;

const SERVER_KEY: [u8; 32] = [22; 32];
const PEER_KEY: [u8; 32] = [11; 32];
/// A key the server does not know: its initiations are well-formed but refused.
const STRANGER_KEY: [u8; 32] = [99; 32];

/// A valid initiation datagram from the stranger: XORing fuzzer bytes into it reaches the
/// Noise and peer-lookup code far more often than random bytes would.
fn stranger_init() -> &'static [u8] {
    static INIT: OnceLock<Vec<u8>> = OnceLock::new();
    INIT.get_or_init(|| {
        let server = StaticSecret::from_bytes(SERVER_KEY).public_key();
        let mut i = Initiator::new(&StaticSecret::from_bytes(STRANGER_KEY), &server, [3; 32])
            .expect("static keys are valid");
        let mut m = vec![0u8; HANDSHAKE_INIT_LEN];
        m[0] = 1;
        m[4..8].copy_from_slice(&7u32.to_be_bytes());
        i.write_init(1_700_000_000_000_000, 1, CipherSet::ALL, &mut m[8..])
            .expect("buffer is the message size");
        // A right mac1 (the stranger knows the server's public key), so mutations reach
        // the Noise code rather than stopping at the mac1 check.
        MacKeys::new(&server).seal(&mut m, None);
        m
    })
}

/// `Responder::read_init` on the raw input returns (Ok or Err) without panicking; then
/// the records of the input are given to a `Server` as datagrams (tag bit 0: XORed into a
/// stranger's valid initiation; tag bit 1 as well: mac1 written again afterwards, as an
/// attacker who knows the server's public key would, so the mutation reaches the Noise
/// code). The server must never create a session nor send anything: nothing here holds a
/// configured peer's private key.
pub fn handshake(data: &[u8]) {
    let server_key = StaticSecret::from_bytes(SERVER_KEY);
    let _ = Responder::read_init(&server_key, [5; 32], data);
    let mut server = Server::new(
        ServerConfig {
            local_key: server_key,
            peers: vec![PeerConfig {
                name: "peer".into(),
                public_key: StaticSecret::from_bytes(PEER_KEY).public_key(),
                allowed_ips: vec!["10.200.0.2/32".parse().expect("literal")],
            }],
            session: SessionConfig::default(),
            default_policy: Policy::Best,
            downstream_copies: None,
            ciphers: CipherSet::ALL,
        },
        1,
    );
    let from: SocketAddr = "192.0.2.1:4000".parse().expect("literal");
    let mut buf = vec![0u8; 2048];
    for (i, (tag, body)) in records(data).enumerate() {
        let now = Instant::from_micros(1_000_000 * (i as u64 + 1));
        let mut dgram = if tag & 1 == 1 {
            let mut m = stranger_init().to_vec();
            for (d, x) in m.iter_mut().zip(body) {
                *d ^= x;
            }
            if tag & 2 == 2 {
                MacKeys::new(&StaticSecret::from_bytes(SERVER_KEY).public_key()).seal(&mut m, None);
            }
            m
        } else {
            body.to_vec()
        };
        server.handle_datagram(now, from, &mut dgram);
        server.handle_timeout(now);
        assert!(
            server.peers().all(|p| p.session.is_none()),
            "session created"
        );
        assert!(
            server.poll_transmit(now, &mut buf).is_none(),
            "server answered"
        );
        assert_eq!(server.counters().handshakes, 0);
    }
}

/// Keys shared by the fuzzer (sealing) and the session under test (opening).
const K_IN: [u8; 32] = [7; 32];
const K_OUT: [u8; 32] = [8; 32];
const LOCAL_INDEX: u32 = 0x1234_5678;

/// A keyed `Session` fed the records of the input, by tag (low 2 bits): 0 raw bytes as a
/// datagram (must be refused), 1 the bytes sealed as a valid datagram's plaintext on path
/// `tag >> 2` (must be accepted; its content is then as hostile as the peer can make
/// it), 2 a replay of the last sealed datagram (must be refused), 3 time passes and
/// timers, transmissions and events run. Delivered packets must be byte ranges of what
/// was sealed: the session never invents or corrupts a packet, whatever the frames say.
/// Returns how many packets were delivered (for the smoke tests).
pub fn session_data(data: &[u8]) -> usize {
    // The first byte picks the side: the server creates paths and follows addresses.
    let side = if data.first().is_some_and(|b| b & 0x80 != 0) {
        Side::Server
    } else {
        Side::Client
    };
    let mut s = Session::new(SessionId([0; 16]), SessionConfig::default(), side);
    let keys = TransportKeys {
        seal: SealKey::new(DataCipher::ChaCha20Poly1305, K_OUT),
        open: OpenKey::new(DataCipher::ChaCha20Poly1305, K_IN),
    };
    let mut now = Instant::from_micros(1_000_000);
    s.keys
        .install_current(Keypair::new(LOCAL_INDEX, 1, keys, now));
    let mut peer = SealKey::new(DataCipher::ChaCha20Poly1305, K_IN);
    let from: SocketAddr = "192.0.2.1:4000".parse().expect("literal");
    let mut sealed: Vec<Vec<u8>> = Vec::new();
    let mut last: Option<Vec<u8>> = None;
    let mut buf = vec![0u8; 2048];
    let mut delivered = 0;
    let mut out = vec![0u8; 65_536];
    for (tag, body) in records(data) {
        match tag & 3 {
            0 => {
                let mut d = body.to_vec();
                if let Ok(Datagram::Data(sd)) = Datagram::parse(&mut d) {
                    assert!(!s.handle_datagram(now, from, sd), "forgery accepted");
                }
            }
            1 => {
                let counter = peer.next_counter().expect("far from exhaustion");
                let mut d = vec![0u8; DATA_HEADER_LEN + body.len() + TAG_LEN];
                d[0] = 3;
                d[1] = (tag >> 2) & 0x1f;
                d[4..8].copy_from_slice(&LOCAL_INDEX.to_be_bytes());
                d[8..16].copy_from_slice(&counter.to_be_bytes());
                d[DATA_HEADER_LEN..DATA_HEADER_LEN + body.len()].copy_from_slice(body);
                let (aad, rest) = d.split_at_mut(DATA_HEADER_LEN);
                peer.seal(counter, aad, rest, body.len())
                    .expect("room for the tag");
                last = Some(d.clone());
                sealed.push(body.to_vec());
                let Ok(Datagram::Data(sd)) = Datagram::parse(&mut d) else {
                    panic!("a sealed datagram's header does not parse");
                };
                assert!(s.handle_datagram(now, from, sd), "valid datagram refused");
            }
            2 => {
                if let Some(mut d) = last.clone() {
                    if let Ok(Datagram::Data(sd)) = Datagram::parse(&mut d) {
                        assert!(!s.handle_datagram(now, from, sd), "replay accepted");
                    }
                }
            }
            _ => {
                let ms = body.iter().map(|&b| u64::from(b)).sum::<u64>();
                now = now + core::time::Duration::from_millis(ms);
                s.handle_timeout(now);
                while s.poll_transmit(now, &mut buf).is_some() {}
                while s.poll_event().is_some() {}
            }
        }
        delivered += deliver_genuine(&mut s, &mut out, &sealed);
        assert!(s.paths().count() <= MAX_PATHS);
    }
    // Time passes after the input: what the reorder buffer still holds for a gap (RACK's
    // window) is released, and must be genuine too.
    now = now + core::time::Duration::from_secs(2);
    s.handle_timeout(now);
    delivered += deliver_genuine(&mut s, &mut out, &sealed);
    delivered
}

/// Drains the session's delivered packets, each of which must be a byte range of a sealed
/// plaintext; returns how many there were.
fn deliver_genuine(s: &mut Session, out: &mut [u8], sealed: &[Vec<u8>]) -> usize {
    let mut delivered = 0;
    while let Some(n) = s.poll_deliver(out) {
        let p = &out[..n];
        let genuine = sealed
            .iter()
            .any(|pt| p.is_empty() || pt.windows(p.len()).any(|w| w == p));
        assert!(genuine, "delivered a packet that was never sent");
        delivered += 1;
    }
    delivered
}
