//! The client's resolver against hand-made answers: picks by RTT among trusted records
//! only, fails over to another server, publishes with rising sequence numbers.

use super::*;
use crate::message::{Request, Response, Status};

const T0: u64 = 1_700_000_000_000_000; // Unix µs

fn sk(b: u8) -> StaticSecret {
    StaticSecret::from_bytes([b; 32])
}

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn server_record(key: u8, host: u8, seq: u64) -> Vec<u8> {
    let k = sk(key);
    let r = Record {
        key: k.public_key(),
        seq,
        expires_ms: T0 / 1000 + 10_000,
        body: Body::Server(ServerBody {
            tunnel: vec![addr(&format!("10.0.{host}.1:7000"))],
            resolver: addr(&format!("10.0.{host}.1:7001")),
            load: 0,
            capacity: 100,
        }),
    };
    SignedRecord::sign(r, &k).unwrap().bytes().to_vec()
}

fn cfg() -> ResolverConfig {
    ResolverConfig {
        key: sk(1),
        bootstrap: vec![addr("10.0.1.1:7001"), addr("10.0.2.1:7001")],
        trusted: vec![sk(11).public_key(), sk(12).public_key()],
        lease_ms: 30_000,
        collect_ms: 100,
        retry_ms: 500,
        exclude_ms: 30_000,
    }
}

/// Answers every pending SERVERS request after `delay_us(dst)` with `records`.
fn answer_servers(
    r: &mut Resolver,
    now: u64,
    records: &[Vec<u8>],
    delay_us: impl Fn(SocketAddr) -> u64,
) {
    let mut sent = Vec::new();
    while let Some((dst, bytes)) = r.poll_transmit() {
        sent.push((dst, bytes));
    }
    for (dst, bytes) in sent {
        let (id, req) = Request::parse(&bytes).unwrap();
        if req != Request::Servers {
            continue;
        }
        let host = dst
            .ip()
            .to_string()
            .split('.')
            .nth(2)
            .unwrap()
            .parse::<u8>()
            .unwrap();
        let resp = Response {
            id,
            op: 2,
            status: Status::Ok,
            responder: sk(10 + host).public_key().session_id(),
            records: records.to_vec(),
        };
        r.handle_datagram(now + delay_us(dst), dst, &resp.encode());
    }
}

fn use_event(r: &mut Resolver) -> Option<SessionId> {
    let mut found = None;
    while let Some(e) = r.poll_event() {
        if let Event::Use { name, .. } = e {
            found = Some(name);
        }
    }
    found
}

#[test]
fn picks_nearest_trusted_and_ignores_forgeries() {
    let mut r = Resolver::new(cfg(), T0);
    // An untrusted but well-signed server, and a forged copy of server 11 pointing
    // elsewhere (its bytes altered after signing): neither may be used.
    let mut forged = server_record(11, 9, 99);
    forged[60] ^= 1;
    let records = [
        server_record(11, 1, 1),
        server_record(12, 2, 1),
        server_record(13, 3, 1),
        forged,
    ];
    // Server 2 answers in 5 ms, server 1 in 20 ms.
    answer_servers(&mut r, T0, &records, |d| {
        if d.port() == 7001 && d.ip().to_string() == "10.0.2.1" {
            5_000
        } else {
            20_000
        }
    });
    r.handle_timeout(T0 + 20_000 + 100_000);
    assert_eq!(use_event(&mut r), Some(sk(12).public_key().session_id()));
    let st = r.status();
    assert_eq!(st.untrusted, 2, "server 13's record, once per answer");
    assert!(st.refusals.bad_signature + st.refusals.malformed >= 2);
    assert_eq!(st.servers_known, 2);
}

#[test]
fn fails_over_and_publishes_with_rising_seq() {
    let mut r = Resolver::new(cfg(), T0);
    let records = [server_record(11, 1, 1), server_record(12, 2, 1)];
    answer_servers(&mut r, T0, &records, |_| 1_000);
    r.handle_timeout(T0 + 200_000);
    let first = use_event(&mut r).unwrap();
    r.set_attachment(
        T0 + 200_000,
        2,
        vec![LinkAddr {
            name: "dsl".into(),
            addr: addr("192.0.2.2:0"),
        }],
    );
    // The publish request goes to the chosen server's resolver.
    let (dst, bytes) = r.poll_transmit().unwrap();
    let (id, Request::Publish(rec)) = Request::parse(&bytes).unwrap() else {
        panic!()
    };
    let seq1 = admit(&rec, T0 / 1000 + 200).unwrap().record().seq;
    let ok = Response {
        id,
        op: 3,
        status: Status::Ok,
        responder: first,
        records: vec![],
    };
    r.handle_datagram(T0 + 201_000, dst, &ok.encode());
    assert_eq!(r.status().published.map(|p| p.1), Some(seq1));
    // The server dies: the next round excludes it even though its record is still live.
    let t1 = T0 + 2_000_000;
    r.server_lost(t1);
    answer_servers(&mut r, t1, &records, |_| 1_000);
    r.handle_timeout(t1 + 200_000);
    let second = use_event(&mut r).unwrap();
    assert_ne!(first, second);
    assert_eq!(r.status().failovers, 1);
    // Attached elsewhere: a new record with a higher sequence number names the new server.
    let (_, bytes) = r.poll_transmit().unwrap();
    let (_, Request::Publish(rec)) = Request::parse(&bytes).unwrap() else {
        panic!()
    };
    let rec = admit(&rec, t1 / 1000 + 200).unwrap();
    assert!(rec.record().seq > seq1);
    let Body::Identity(b) = &rec.record().body else {
        panic!()
    };
    assert_eq!(b.server, Some(second));
}

#[test]
fn a_replayed_older_record_does_not_move_the_client() {
    let mut r = Resolver::new(cfg(), T0);
    answer_servers(&mut r, T0, &[server_record(11, 1, 5)], |_| 1_000);
    r.handle_timeout(T0 + 200_000);
    let name = use_event(&mut r).unwrap();
    // A later round returns server 11's older record (seq 4, another address): refused.
    r.server_lost(T0 + 300_000);
    r.excluded.clear();
    answer_servers(&mut r, T0 + 300_000, &[server_record(11, 7, 4)], |_| 1_000);
    r.handle_timeout(T0 + 500_000);
    while let Some(e) = r.poll_event() {
        if let Event::Use {
            name: n, tunnel, ..
        } = e
        {
            assert_eq!(n, name);
            assert_eq!(
                tunnel,
                addr("10.0.1.1:7000"),
                "the old address never comes back"
            );
        }
    }
    assert_eq!(
        r.status().refusals.stale,
        2,
        "one per resolver that relayed it"
    );
}
