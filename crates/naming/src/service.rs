//! The server's resolver: UDP requests answered from a store, and the server's own record
//! kept fresh in it.
//!
//! Role: every server with a `[naming]` section runs one, on a thread of its own (so a slow
//! store never stalls the tunnel's loop). Requests are answered concurrently, at most
//! [`MAX_CONCURRENT`] at a time (more are dropped: the client retries), because an etcd
//! round trip would otherwise cap the service at one request per round trip. The server's
//! record (tunnel and resolver addresses, load, capacity) is re-signed with a higher
//! sequence number every third of its lease, so it lives exactly as long as the server
//! keeps renewing it: a dead server's record is gone one lease after it died, and its
//! clients, which notice much sooner, exclude it themselves (`resolver.rs`).
//!
//! What it did is counted in [`ServiceStats`], shared with the daemon (which shows it in
//! `multihome status` and its metrics): requests by kind and outcome, and the store's own
//! counters — records refused by reason, and for etcd the watched copy's state.
//!
//! Invariant: nothing is stored that the store did not admit; the service signs only its
//! own server record.

use crate::message::{Request, Response, Status, RESPONSE_MAX};
use crate::record::{Body, Kind, Record, ServerBody};
use crate::signed::{Refusal, SignedRecord};
use crate::store::{RecordStore, StoreError, StoreStats};
use multihome_proto::crypto::StaticSecret;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::net::UdpSocket;

/// Requests being answered at once at most.
pub const MAX_CONCURRENT: usize = 512;

/// What the service announces and how.
#[derive(Debug, Clone)]
pub struct ServiceConfig {
    /// The server's key (its record is named by and signed with it).
    pub key: StaticSecret,
    /// Where clients send tunnel datagrams.
    pub tunnel: Vec<SocketAddr>,
    /// Where clients send resolver requests (announced; the socket is given to `run`).
    pub resolver: SocketAddr,
    /// Sessions the server is meant to serve.
    pub capacity: u32,
    /// Lease of the server's record (ms).
    pub lease_ms: u64,
}

/// What the service counts (status and metrics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServiceStats {
    /// Lookups answered (found or not).
    pub lookups: u64,
    /// Server lists answered.
    pub server_lists: u64,
    /// Publishes answered (stored or refused).
    pub publishes: u64,
    /// Lookups of a name with no live record.
    pub not_found: u64,
    /// Requests answered "unavailable" (the store failed).
    pub unavailable: u64,
    /// Requests dropped because [`MAX_CONCURRENT`] were being answered.
    pub dropped_busy: u64,
    /// The store's counters, as of the last request.
    pub store: StoreStats,
}

impl ServiceStats {
    /// Counts one answer.
    pub fn count(&mut self, resp: &Response) {
        match resp.op {
            1 => self.lookups += 1,
            2 => self.server_lists += 1,
            _ => self.publishes += 1,
        }
        match resp.status {
            Status::NotFound => self.not_found += 1,
            Status::Unavailable => self.unavailable += 1,
            _ => {}
        }
    }
}

/// The counters, shared between the service's thread and the daemon's.
pub type SharedStats = Arc<Mutex<ServiceStats>>;

/// Unix time in ms (the service's only clock).
pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Refusal code on the wire (`message::Status::Refused`).
pub fn refusal_code(r: Refusal) -> u8 {
    match r {
        Refusal::Oversized => 1,
        Refusal::Unsigned => 2,
        Refusal::Malformed => 3,
        Refusal::BadSignature => 4,
        Refusal::Expired => 5,
        Refusal::LeaseTooLong => 6,
        Refusal::Stale => 7,
    }
}

/// Answers one request from the store.
pub async fn answer<S: RecordStore>(
    store: &S,
    id: u32,
    req: Request,
    responder: multihome_proto::crypto::SessionId,
    now_ms: u64,
) -> Response {
    let (op, result) = match req {
        Request::Lookup { kind, name } => (
            1,
            store
                .get(kind, name, now_ms)
                .await
                .map(|r| r.map(|r| vec![r.bytes().to_vec()])),
        ),
        Request::Servers => (
            2,
            store.list(Kind::Server, now_ms).await.map(|mut v| {
                // The responder's own record first, then least loaded: what fits is kept.
                v.sort_by_key(|s| (s.name() != responder, load_of(s)));
                Some(v.into_iter().map(|s| s.bytes().to_vec()).collect())
            }),
        ),
        Request::Publish(bytes) => (3, store.put(&bytes, now_ms).await.map(|_| Some(vec![]))),
    };
    let (status, records) = match result {
        Ok(Some(r)) => (Status::Ok, r),
        Ok(None) => (Status::NotFound, vec![]),
        Err(StoreError::Refused(r)) => (Status::Refused(refusal_code(r)), vec![]),
        Err(StoreError::Backend(e)) => {
            tracing::warn!("naming store: {e}");
            (Status::Unavailable, vec![])
        }
    };
    Response {
        id,
        op,
        status,
        responder,
        records,
    }
}

fn load_of(s: &SignedRecord) -> u32 {
    match &s.record().body {
        Body::Server(b) => b.load,
        Body::Identity(_) => u32::MAX,
    }
}

/// The server's own record, signed now with sequence `seq`.
pub fn server_record(cfg: &ServiceConfig, seq: u64, load: u32, now_ms: u64) -> SignedRecord {
    let r = Record {
        key: cfg.key.public_key(),
        seq,
        expires_ms: now_ms + cfg.lease_ms,
        body: Body::Server(ServerBody {
            tunnel: cfg.tunnel.clone(),
            resolver: cfg.resolver,
            load,
            capacity: cfg.capacity,
        }),
    };
    SignedRecord::sign(r, &cfg.key).expect("a server record is within the limits")
}

/// Runs the service on `sock` for ever (drop the runtime to stop it). `load` is the number of
/// sessions, refreshed by the caller; `stats` is updated after every answer. Must run inside
/// a `tokio::task::LocalSet`.
pub async fn run<S: RecordStore + 'static>(
    store: Rc<S>,
    cfg: ServiceConfig,
    sock: UdpSocket,
    load: Arc<AtomicU32>,
    stats: SharedStats,
) {
    let sock = Rc::new(sock);
    let responder = cfg.key.public_key().session_id();
    {
        let (store, cfg) = (store.clone(), cfg.clone());
        tokio::task::spawn_local(async move {
            let mut seq = 0u64;
            loop {
                let now = unix_ms();
                seq = (seq + 1).max(now);
                let rec = server_record(&cfg, seq, load.load(Ordering::Relaxed), now);
                if let Err(e) = store.put(rec.bytes(), now).await {
                    tracing::warn!("publishing the server record: {e}");
                }
                tokio::time::sleep(Duration::from_millis(cfg.lease_ms / 3)).await;
            }
        });
    }
    let busy = Rc::new(std::cell::Cell::new(0usize));
    let mut buf = vec![0u8; RESPONSE_MAX.max(2048)];
    loop {
        let Ok((n, from)) = sock.recv_from(&mut buf).await else {
            continue;
        };
        let Some((id, req)) = Request::parse(&buf[..n]) else {
            continue;
        };
        if busy.get() >= MAX_CONCURRENT {
            stats.lock().expect("never poisoned").dropped_busy += 1;
            continue;
        }
        busy.set(busy.get() + 1);
        let (store, sock, busy, stats) = (store.clone(), sock.clone(), busy.clone(), stats.clone());
        tokio::task::spawn_local(async move {
            let resp = answer(&*store, id, req, responder, unix_ms()).await;
            let _ = sock.send_to(&resp.encode(), from).await;
            busy.set(busy.get() - 1);
            let mut st = stats.lock().expect("never poisoned");
            st.count(&resp);
            st.store = store.stats();
        });
    }
}
