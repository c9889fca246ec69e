//! The client's cookie-reply path (docs/PROTOCOL.md §2.4, §3.5): what a server under load,
//! or anyone who can send to the client, may put in a type-4 datagram.

use crate::records;
use multihome_proto::crypto::{CipherSet, StaticSecret};
use multihome_proto::endpoint::{Client, ClientConfig, PeerConfig, Server, ServerConfig};
use multihome_proto::path::PathId;
use multihome_proto::policy::{Classifier, Policy};
use multihome_proto::session::SessionConfig;
use multihome_proto::wire::{COOKIE_REPLY_LEN, HANDSHAKE_INIT_LEN};
use multihome_proto::Instant;
use std::net::SocketAddr;

const SERVER_KEY: [u8; 32] = [22; 32];
const CLIENT_KEY: [u8; 32] = [11; 32];
/// `MAX_COOKIE_RESENDS` of `endpoint/client.rs` (§3.5): resends of one copy.
const MAX_RESENDS: usize = 2;
/// Bytes of an initiation before mac2 (which a resend rewrites).
const BEFORE_MAC2: usize = HANDSHAKE_INIT_LEN - 16;

fn link_addr(i: u8) -> SocketAddr {
    SocketAddr::from(([10, 0, i, 2], 5000))
}

/// A client with a pending handshake on two links, its initiation copies, and a valid
/// cookie reply to the copy of link 0 (from a real server under load).
fn setup() -> (Client, Vec<Vec<u8>>, Vec<u8>) {
    let server_key = StaticSecret::from_bytes(SERVER_KEY);
    let client_key = StaticSecret::from_bytes(CLIENT_KEY);
    let server_addr: SocketAddr = "192.0.2.1:7000".parse().expect("literal");
    let mut client = Client::new(
        ClientConfig {
            local_key: client_key.clone(),
            server_key: server_key.public_key(),
            session: SessionConfig::default(),
            classifier: Classifier::uniform(Policy::Best),
            epoch_us: 1_700_000_000_000_000,
            ciphers: CipherSet::ALL,
        },
        1,
    );
    for i in 0..2 {
        client.add_link(Instant::ZERO, PathId(i), server_addr);
    }
    client.handle_timeout(Instant::ZERO);
    let mut buf = vec![0u8; 2048];
    let mut copies = Vec::new();
    while let Some(t) = client.poll_transmit(Instant::ZERO, &mut buf) {
        copies.push(buf[..t.len].to_vec());
    }
    let mut server = Server::new(
        ServerConfig {
            local_key: server_key,
            peers: vec![PeerConfig {
                name: "peer".into(),
                public_key: client_key.public_key(),
                allowed_ips: vec!["10.200.0.2/32".parse().expect("literal")],
            }],
            session: SessionConfig::default(),
            default_policy: Policy::Best,
            downstream_copies: None,
            ciphers: CipherSet::ALL,
        },
        2,
    );
    server.set_load_threshold(0);
    server.handle_datagram(Instant::ZERO, link_addr(0), &mut copies[0].clone());
    let t = server
        .poll_transmit(Instant::ZERO, &mut buf)
        .expect("a server under load answers with a cookie reply");
    (client, copies, buf[..t.len].to_vec())
}

/// Records of the input go to a client with a pending handshake as datagrams on link 0
/// (tag bit 0: XORed into a valid cookie reply for its link-0 copy, else raw). Checks: no
/// panic; the client never gets keys from this; the only datagrams it sends are its own
/// initiation copies again (unchanged up to mac2), at most `MAX_RESENDS` per link; a
/// cookie reply is accepted only when its 64 bytes are exactly the valid reply's.
pub fn cookie_reply(data: &[u8]) {
    let (mut client, copies, valid) = setup();
    assert_eq!(valid.len(), COOKIE_REPLY_LEN);
    let from: SocketAddr = "192.0.2.1:7000".parse().expect("literal");
    let mut buf = vec![0u8; 2048];
    let mut resent = [0usize; 2];
    for (i, (tag, body)) in records(data).enumerate().take(10_000) {
        let now = Instant::from_micros(1_000 + i as u64);
        let mut d = if tag & 1 == 1 {
            let mut m = valid.clone();
            for (d, x) in m.iter_mut().zip(body) {
                *d ^= x;
            }
            m
        } else {
            body.to_vec()
        };
        let exact = d == valid;
        let before = client.counters().rx_cookie_replies;
        client.handle_datagram(now, PathId(0), from, &mut d);
        let accepted = client.counters().rx_cookie_replies - before;
        assert!(accepted <= 1);
        assert!(
            accepted == 0 || exact,
            "a changed cookie reply was accepted"
        );
        assert!(!client.is_established(), "keys from a cookie reply");
        while let Some(t) = client.poll_transmit(now, &mut buf) {
            let link = usize::from(t.path.0);
            assert!(
                link < 2 && t.len == HANDSHAKE_INIT_LEN,
                "sent something else"
            );
            assert_eq!(&buf[..BEFORE_MAC2], &copies[link][..BEFORE_MAC2]);
            resent[link] += 1;
            assert!(resent[link] <= MAX_RESENDS, "resends unbounded");
        }
    }
}
