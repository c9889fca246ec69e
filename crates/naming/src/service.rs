//! The server's resolver: UDP requests answered from a store, and the server's own record
//! kept fresh in it.
//!
//! Role: every server with a `[naming]` section runs one, on threads of its own (so a slow
//! store never stalls the tunnel's loop). Two of them: the socket's ([`serve_io`]) answers
//! lookups and server lists at once from the store's reader (a snapshot of the file, or
//! etcd's watched copy), and the store's stores publishes, concurrently, at most
//! [`MAX_CONCURRENT`] at a time, because an etcd round trip would otherwise cap the service
//! at one publish per round trip; more wait, as many at most and none longer than
//! [`MAX_WAIT`], the rest are dropped (the client retries). So a lookup
//! never queues behind publishes: under 1 000 publishes/s to etcd on a loaded machine, one
//! thread doing both answered lookups in hundreds of milliseconds. The server's
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
use crate::store::{RecordReader, RecordStore, StoreError, StoreStats};
use multihome_proto::crypto::{SessionId, StaticSecret};
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::net::UdpSocket;

/// Publishes being stored at once at most, and as many waiting (more are dropped: the
/// client retries). Enough to keep a store busy (at 10 ms a write, 12 800 publishes/s),
/// few enough that a saturated store's queue stays short.
pub const MAX_CONCURRENT: usize = 128;
/// A publish that waited this long for its turn is dropped (and counted): its sender has
/// retried by then (the client resends after 500 ms), and storing it would only delay the
/// publishes behind it.
pub const MAX_WAIT: Duration = Duration::from_millis(500);

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
    /// Publishes dropped because [`MAX_CONCURRENT`] were being stored and as many waited,
    /// or because one waited longer than [`MAX_WAIT`].
    pub dropped_busy: u64,
    /// The store's counters, as of the last request.
    pub store: StoreStats,
}

/// The counters as the service's two threads keep them: each request's outcome in atomics
/// (the socket's thread never waits for a lock the store's thread may hold while it is off
/// the CPU), the store's own counters behind a lock only the store's thread and status
/// readers take.
#[derive(Debug, Default)]
pub struct Counters {
    lookups: AtomicU64,
    server_lists: AtomicU64,
    publishes: AtomicU64,
    not_found: AtomicU64,
    unavailable: AtomicU64,
    dropped_busy: AtomicU64,
    store: Mutex<StoreStats>,
}

impl Counters {
    /// Counts one answer.
    pub fn count(&self, resp: &Response) {
        let c = match resp.op {
            1 => &self.lookups,
            2 => &self.server_lists,
            _ => &self.publishes,
        };
        c.fetch_add(1, Ordering::Relaxed);
        match resp.status {
            Status::NotFound => self.not_found.fetch_add(1, Ordering::Relaxed),
            Status::Unavailable => self.unavailable.fetch_add(1, Ordering::Relaxed),
            _ => 0,
        };
    }

    /// Counts a dropped publish.
    pub fn dropped(&self) {
        self.dropped_busy.fetch_add(1, Ordering::Relaxed);
    }

    /// Records the store's counters (taken before, outside the lock).
    pub fn set_store(&self, s: StoreStats) {
        *self.store.lock().expect("never poisoned") = s;
    }

    /// Everything, now.
    pub fn snapshot(&self) -> ServiceStats {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ServiceStats {
            lookups: l(&self.lookups),
            server_lists: l(&self.server_lists),
            publishes: l(&self.publishes),
            not_found: l(&self.not_found),
            unavailable: l(&self.unavailable),
            dropped_busy: l(&self.dropped_busy),
            store: *self.store.lock().expect("never poisoned"),
        }
    }
}

/// The counters, shared between the service's threads and the daemon's.
pub type SharedStats = Arc<Counters>;

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

/// A store's answer as a response.
fn response(
    id: u32,
    op: u8,
    responder: SessionId,
    result: Result<Option<Vec<Vec<u8>>>, StoreError>,
) -> Response {
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

/// Answers a LOOKUP or SERVERS from the reader (at once); `None` for a PUBLISH.
pub fn answer_read(
    reader: &dyn RecordReader,
    id: u32,
    req: &Request,
    responder: SessionId,
    now_ms: u64,
) -> Option<Response> {
    Some(match req {
        Request::Lookup { kind, name } => {
            let r = reader.get(*kind, *name, now_ms);
            response(
                id,
                1,
                responder,
                r.map(|r| r.map(|r| vec![r.bytes().to_vec()])),
            )
        }
        Request::Servers => {
            let r = reader.list(Kind::Server, now_ms).map(|mut v| {
                // The responder's own record first, then least loaded: what fits is kept.
                v.sort_by_key(|s| (s.name() != responder, load_of(s)));
                Some(v.into_iter().map(|s| s.bytes().to_vec()).collect())
            });
            response(id, 2, responder, r)
        }
        Request::Publish(_) => return None,
    })
}

/// Answers a PUBLISH from the store.
pub async fn answer_publish<S: RecordStore>(
    store: &S,
    id: u32,
    bytes: &[u8],
    responder: SessionId,
    now_ms: u64,
) -> Response {
    let r = store.put(bytes, now_ms).await.map(|_| Some(vec![]));
    response(id, 3, responder, r)
}

/// Answers one request from the store (reads from its reader).
pub async fn answer<S: RecordStore>(
    store: &S,
    id: u32,
    req: Request,
    responder: SessionId,
    now_ms: u64,
) -> Response {
    match req {
        Request::Publish(bytes) => answer_publish(store, id, &bytes, responder, now_ms).await,
        r => answer_read(&*store.reader(), id, &r, responder, now_ms).expect("not a publish"),
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

/// A publish on its way to the store: request id, record bytes, sender.
type Publish = (u32, Vec<u8>, SocketAddr, std::time::Instant);

/// Runs the service on `sock` (non-blocking) for ever (drop the runtime to stop it): its
/// socket on a thread of its own ([`serve_io`]), publishes here. `load` is the number of
/// sessions, refreshed by the caller; `stats` is updated after every answer. Must run inside
/// a `tokio::task::LocalSet`.
pub async fn run<S: RecordStore + 'static>(
    store: Rc<S>,
    cfg: ServiceConfig,
    sock: std::net::UdpSocket,
    load: Arc<AtomicU32>,
    stats: SharedStats,
) {
    let responder = cfg.key.public_key().session_id();
    tokio::task::spawn_local(keep_server_record(store.clone(), cfg, load));
    let (pub_tx, mut pub_rx) = tokio::sync::mpsc::channel::<Publish>(MAX_CONCURRENT);
    let (ans_tx, ans_rx) = tokio::sync::mpsc::unbounded_channel();
    let (reader, st) = (store.reader(), stats.clone());
    let io = std::thread::Builder::new()
        .name("naming-io".into())
        .spawn(move || serve_io(sock, reader, responder, pub_tx, ans_rx, st));
    if let Err(e) = io {
        return tracing::error!("resolver I/O thread: {e}");
    }
    let permits = Arc::new(tokio::sync::Semaphore::new(MAX_CONCURRENT));
    while let Some((id, bytes, from, arrived)) = pub_rx.recv().await {
        let Ok(permit) = permits.clone().acquire_owned().await else {
            return;
        };
        if arrived.elapsed() > MAX_WAIT {
            stats.dropped();
            continue;
        }
        let (store, ans_tx, stats) = (store.clone(), ans_tx.clone(), stats.clone());
        tokio::task::spawn_local(async move {
            let resp = answer_publish(&*store, id, &bytes, responder, unix_ms()).await;
            let _ = ans_tx.send((resp.encode(), from));
            stats.count(&resp);
            stats.set_store(store.stats());
            drop(permit);
        });
    }
}

/// Re-signs and stores the server's own record every third of its lease.
async fn keep_server_record<S: RecordStore>(
    store: Rc<S>,
    cfg: ServiceConfig,
    load: Arc<AtomicU32>,
) {
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
}

/// The resolver's socket, on a thread of its own: lookups and server lists answered at
/// once from the store's reader, publishes handed to the store's thread (dropped and
/// counted when [`MAX_CONCURRENT`] wait), and the store's answers sent back. A lookup thus
/// never waits behind a publish's round trips to etcd, nor for the thread that makes them.
fn serve_io(
    sock: std::net::UdpSocket,
    reader: Arc<dyn RecordReader>,
    responder: SessionId,
    publishes: tokio::sync::mpsc::Sender<Publish>,
    mut answers: tokio::sync::mpsc::UnboundedReceiver<(Vec<u8>, SocketAddr)>,
    stats: SharedStats,
) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build();
    let Ok(rt) = rt else {
        return tracing::error!("resolver I/O runtime");
    };
    rt.block_on(async move {
        let Ok(sock) = UdpSocket::from_std(sock) else {
            return tracing::error!("resolver socket not usable");
        };
        let mut buf = vec![0u8; RESPONSE_MAX.max(2048)];
        loop {
            tokio::select! {
                r = sock.recv_from(&mut buf) => {
                    let Ok((n, from)) = r else { continue };
                    let Some((id, req)) = Request::parse(&buf[..n]) else { continue };
                    if let Some(resp) = answer_read(&*reader, id, &req, responder, unix_ms()) {
                        let _ = sock.send_to(&resp.encode(), from).await;
                        stats.count(&resp);
                    } else if let Request::Publish(bytes) = req {
                        let now = std::time::Instant::now();
                        if publishes.try_send((id, bytes, from, now)).is_err() {
                            stats.dropped();
                        }
                    }
                }
                Some((bytes, to)) = answers.recv() => {
                    let _ = sock.send_to(&bytes, to).await;
                }
            }
        }
    });
}
