//! A load generator for a resolver (`multihome naming-load`, used by `lab.bench naming`).
//!
//! Role: fills a resolver's store with `records` identity records (keys derived from their
//! index, so runs are repeatable), then for `seconds` publishes updates at `rate` per
//! second (each a new sequence number of a random record) and looks up random names at
//! `lookup_rate`, timing every request from send to answer. At the end it looks up every
//! record and compares its sequence number with the last one the resolver acknowledged:
//! a record missing or older is *lost*. Prints one JSON document.
//!
//! Timing: from just before the request's `sendto` to the kernel's arrival stamp of its
//! answer (`load_stamp.rs`), so the generator's own wait for a CPU is not counted.
//!
//! Open loop: requests go out on schedule whether or not earlier ones were answered, so a
//! slow store shows as latency and timeouts, not as a lower offered rate.
//!
//! With [`LoadConfig::etcd`], the timed lookups go to the etcd cluster itself (one range
//! read of the record's key, linearizable or serializable) instead of to the resolver: what
//! a lookup costs a resolver that reads etcd per request, measured beside the resolver's own
//! answers from its watched copy (the benchmark's comparison). Publishes and the final
//! check still go through the resolver.
//!
//! With [`LoadConfig::lookup_resolver`], lookups go to another server's resolver than
//! publishes; a lookup answered with a record older than one acknowledged before it was
//! sent counts as *behind* (how far another server's copy trails).

use crate::message::{Request, Response, Status};
use crate::record::{Body, IdentityBody, Kind, LinkAddr, Record};
use crate::service::unix_ms;
use crate::signed::SignedRecord;
use multihome_proto::crypto::{PublicKey, SessionId, StaticSecret};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};
use tokio::net::UdpSocket;

#[path = "load_stamp.rs"]
mod stamp;

/// What to run.
#[derive(Debug, Clone)]
pub struct LoadConfig {
    /// The resolver.
    pub resolver: SocketAddr,
    /// Records stored before timing starts.
    pub records: u32,
    /// Updates per second while timing.
    pub rate: u32,
    /// Lookups per second while timing.
    pub lookup_rate: u32,
    /// Length of the timed phase.
    pub seconds: u32,
    /// Lease of every record (ms).
    pub lease_ms: u64,
    /// A request unanswered this long is a timeout.
    pub timeout: Duration,
    /// Look up in etcd directly (see the module's doc).
    pub etcd: Option<EtcdLookups>,
    /// Send lookups to this resolver instead (another server sharing the store: records
    /// published through one, looked up through the other).
    pub lookup_resolver: Option<SocketAddr>,
}

/// Lookups read straight from etcd.
#[derive(Debug, Clone)]
pub struct EtcdLookups {
    /// Client URLs of the members.
    pub endpoints: Vec<String>,
    /// Serializable reads (answered by the member reached) instead of linearizable ones
    /// (confirmed by a quorum first).
    pub serializable: bool,
}

/// The outcome of one direct etcd lookup: its latency (µs), or `None` (failed or late).
type EtcdAnswer = Option<u64>;

/// Direct etcd lookups in flight: the client, and a channel their answers come back on.
struct Direct {
    client: etcd_client::Client,
    serializable: bool,
    answers: (
        tokio::sync::mpsc::UnboundedSender<EtcdAnswer>,
        tokio::sync::mpsc::UnboundedReceiver<EtcdAnswer>,
    ),
    inflight: usize,
}

impl Direct {
    async fn connect(e: &EtcdLookups) -> std::io::Result<Direct> {
        let client = etcd_client::Client::connect(&e.endpoints, None)
            .await
            .map_err(std::io::Error::other)?;
        Ok(Direct {
            client,
            serializable: e.serializable,
            answers: tokio::sync::mpsc::unbounded_channel(),
            inflight: 0,
        })
    }

    /// Starts one read of `name`'s key; its answer comes back on the channel.
    fn lookup(&mut self, name: SessionId, timeout: Duration) {
        let mut c = self.client.clone();
        let tx = self.answers.0.clone();
        let mut opts = etcd_client::GetOptions::new();
        if self.serializable {
            opts = opts.with_serializable();
        }
        let k = crate::store::key(Kind::Identity, name);
        self.inflight += 1;
        tokio::spawn(async move {
            let t = Instant::now();
            let r = tokio::time::timeout(timeout, c.get(k, Some(opts))).await;
            let us = t.elapsed().as_micros() as u64;
            let _ = tx.send(matches!(r, Ok(Ok(_))).then_some(us));
        });
    }

    /// Counts an answer into `series`.
    fn answered(&mut self, a: EtcdAnswer, series: &mut Series) {
        self.inflight -= 1;
        match a {
            Some(us) => series.us.push(us),
            None => series.timeouts += 1,
        }
    }
}

/// How long past the timeout a request is kept for its answer: the generator may read
/// answers late on a loaded machine, and they count by their arrival stamp.
pub const GRACE: Duration = Duration::from_secs(2);

/// The deterministic key of record `i`.
pub fn key_of(i: u32) -> StaticSecret {
    let mut b = [0x5au8; 32];
    b[1..5].copy_from_slice(&i.to_le_bytes());
    StaticSecret::from_bytes(b)
}

fn record(sk: &StaticSecret, pk: PublicKey, seq: u64, lease_ms: u64) -> Vec<u8> {
    let r = Record {
        key: pk,
        seq,
        expires_ms: unix_ms() + lease_ms,
        body: Body::Identity(IdentityBody {
            server: None,
            policy: 0,
            links: vec![LinkAddr {
                name: "wan".into(),
                addr: SocketAddr::from(([192, 0, 2, (seq % 250) as u8], 4000)),
            }],
        }),
    };
    SignedRecord::sign(r, sk)
        .expect("within limits")
        .bytes()
        .to_vec()
}

struct Pending {
    sent: Instant,
    op: u8,
    index: u32,
    /// Publish: the sequence number sent; lookup: the last one acknowledged when sent.
    seq: u64,
}

/// Latencies (µs) of one kind of request and what went wrong.
#[derive(Debug, Default)]
struct Series {
    us: Vec<u64>,
    timeouts: u64,
    refused: u64,
    /// Lookups answered with a record older than one acknowledged before they were sent.
    behind: u64,
    /// Answered "ok" (stored, for publishes), in time or not.
    ok: u64,
}

impl Series {
    fn json(&mut self) -> String {
        self.us.sort_unstable();
        let q = |p: f64| -> f64 {
            if self.us.is_empty() {
                return -1.0;
            }
            let i = ((self.us.len() as f64 - 1.0) * p).round() as usize;
            self.us[i] as f64 / 1000.0
        };
        format!(
            "{{\"n\": {}, \"p50_ms\": {:.3}, \"p95_ms\": {:.3}, \"p99_ms\": {:.3}, \"max_ms\": {:.3}, \"timeouts\": {}, \"refused\": {}, \"behind\": {}, \"ok\": {}}}",
            self.us.len(),
            q(0.5),
            q(0.95),
            q(0.99),
            q(1.0),
            self.timeouts,
            self.refused,
            self.behind,
            self.ok
        )
    }
}

/// The client side of the run: one socket, requests in flight by id.
struct Load {
    sock: Rc<UdpSocket>,
    cfg: LoadConfig,
    keys: Vec<(StaticSecret, PublicKey)>,
    /// Last sequence number per record sent, and last acknowledged.
    seq: Vec<u64>,
    acked: Vec<u64>,
    pending: HashMap<u32, Pending>,
    next_id: u32,
    publish: Series,
    lookup: Series,
}

impl Load {
    async fn send_publish(&mut self, i: u32) {
        let (sk, pk) = &self.keys[i as usize];
        let seq = self.seq[i as usize] + 1;
        self.seq[i as usize] = seq;
        let bytes = record(sk, *pk, seq, self.cfg.lease_ms);
        self.send(Request::Publish(bytes), 3, i, seq).await;
    }

    async fn send_lookup(&mut self, i: u32) {
        let name = self.keys[i as usize].1.session_id();
        let req = Request::Lookup {
            kind: Kind::Identity,
            name,
        };
        let acked = self.acked[i as usize];
        self.send(req, 1, i, acked).await;
    }

    async fn send(&mut self, req: Request, op: u8, index: u32, seq: u64) {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        let p = Pending {
            sent: Instant::now(),
            op,
            index,
            seq,
        };
        self.pending.insert(id, p);
        let dst = match (op, self.cfg.lookup_resolver) {
            (1, Some(a)) => a,
            _ => self.cfg.resolver,
        };
        let _ = self.sock.send_to(&req.encode(id), dst).await;
    }

    /// Takes an answer that arrived at `at`; returns the looked-up sequence number for
    /// verification.
    fn on_answer(&mut self, bytes: &[u8], at: Instant, timed: bool) -> Option<(u32, Option<u64>)> {
        let r = Response::parse(bytes)?;
        let p = self.pending.remove(&r.id)?;
        let took = at.saturating_duration_since(p.sent);
        let us = took.as_micros() as u64;
        let series = if p.op == 3 {
            &mut self.publish
        } else {
            &mut self.lookup
        };
        if timed && r.status == Status::Ok {
            series.ok += 1;
        }
        match r.status {
            _ if timed && took > self.cfg.timeout => series.timeouts += 1,
            Status::Ok | Status::NotFound if timed => series.us.push(us),
            Status::Refused(_) => series.refused += 1,
            _ => {}
        }
        if p.op == 3 && r.status == Status::Ok {
            let a = &mut self.acked[p.index as usize];
            *a = (*a).max(p.seq);
        }
        let seq = r
            .records
            .first()
            .and_then(|b| crate::signed::verify(b).ok())
            .map(|rec| rec.seq);
        if timed
            && p.op == 1
            && matches!(r.status, Status::Ok | Status::NotFound)
            && seq.unwrap_or(0) < p.seq
        {
            self.lookup.behind += 1;
        }
        // Only a definite answer counts (an unavailable store is asked again).
        let definite = matches!(r.status, Status::Ok | Status::NotFound);
        (p.op == 1 && definite).then_some((p.index, seq))
    }

    /// Forgets requests unanswered for the timeout plus [`GRACE`] (counted as timeouts in
    /// the timed phase): an answer that arrived in time but was read late still counts by
    /// its arrival.
    fn expire(&mut self, timed: bool) {
        let limit = self.cfg.timeout + GRACE;
        let (publish, lookup) = (&mut self.publish, &mut self.lookup);
        self.pending.retain(|_, p| {
            let keep = p.sent.elapsed() < limit;
            if !keep && timed {
                if p.op == 3 {
                    publish.timeouts += 1;
                } else {
                    lookup.timeouts += 1;
                }
            }
            keep
        });
    }
}

/// Runs the whole load and returns the JSON document.
pub async fn run(cfg: LoadConfig) -> std::io::Result<String> {
    let local: SocketAddr = if cfg.resolver.is_ipv4() {
        "0.0.0.0:0".parse().expect("literal")
    } else {
        "[::]:0".parse().expect("literal")
    };
    let sock = Rc::new(UdpSocket::bind(local).await?);
    stamp::setup(&sock)?;
    let keys: Vec<_> = (0..cfg.records)
        .map(|i| {
            let sk = key_of(i);
            let pk = sk.public_key();
            (sk, pk)
        })
        .collect();
    let base = unix_ms();
    let n = cfg.records as usize;
    let mut l = Load {
        sock: sock.clone(),
        cfg: cfg.clone(),
        keys,
        seq: vec![base; n],
        acked: vec![0; n],
        pending: HashMap::new(),
        next_id: 1,
        publish: Series::default(),
        lookup: Series::default(),
    };
    let mut direct = match &cfg.etcd {
        Some(e) => Some(Direct::connect(e).await?),
        None => None,
    };
    let mut buf = vec![0u8; 2048];
    let fill_start = Instant::now();
    fill(&mut l, &sock, &mut buf).await;
    let fill_s = fill_start.elapsed().as_secs_f64();
    // The benchmark waits for this line to time events within the timed phase.
    eprintln!(
        "naming-load: filled {} records in {fill_s:.1} s",
        cfg.records
    );
    timed(&mut l, &sock, &mut buf, direct.as_mut()).await;
    let (missing, stale, unanswered) = verify_all(&mut l, &sock, &mut buf).await;
    Ok(format!(
        "{{\"records\": {}, \"rate\": {}, \"lookup_rate\": {}, \"seconds\": {}, \"fill_s\": {:.2}, \"publish\": {}, \"lookup\": {}, \"verify\": {{\"missing\": {}, \"stale\": {}, \"unanswered\": {}}}}}",
        cfg.records, cfg.rate, cfg.lookup_rate, cfg.seconds, fill_s,
        l.publish.json(), l.lookup.json(), missing, stale, unanswered
    ))
}

/// Publishes every record once, at most 64 in flight.
async fn fill(l: &mut Load, sock: &UdpSocket, buf: &mut [u8]) {
    let mut i = 0;
    while i < l.cfg.records || !l.pending.is_empty() {
        while i < l.cfg.records && l.pending.len() < 64 {
            l.send_publish(i).await;
            i += 1;
        }
        match tokio::time::timeout(Duration::from_millis(50), stamp::recv(sock, buf)).await {
            Ok(Ok((len, at))) => {
                let b = buf[..len].to_vec();
                l.on_answer(&b, at, false);
            }
            _ => l.expire(false),
        }
    }
}

/// The timed phase: updates and lookups on schedule (open loop); lookups to etcd itself
/// when `direct` is given.
async fn timed(l: &mut Load, sock: &UdpSocket, buf: &mut [u8], mut direct: Option<&mut Direct>) {
    let start = tokio::time::Instant::now();
    let end = start + Duration::from_secs(u64::from(l.cfg.seconds));
    let every = |r: u32| Duration::from_secs_f64(1.0 / f64::from(r.max(1)));
    let (mut next_pub, mut next_look, mut next_expire) = (start, start, start);
    // A small deterministic generator picks which record (xorshift).
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut pick = move |n: u32| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % u64::from(n)) as u32
    };
    while tokio::time::Instant::now() < end {
        let wake = next_pub.min(next_look);
        tokio::select! {
            _ = tokio::time::sleep_until(wake) => {
                let now = tokio::time::Instant::now();
                while next_pub <= now && l.cfg.rate > 0 {
                    l.send_publish(pick(l.cfg.records)).await;
                    next_pub += every(l.cfg.rate);
                }
                while next_look <= now && l.cfg.lookup_rate > 0 {
                    let i = pick(l.cfg.records);
                    match direct.as_deref_mut() {
                        Some(d) => d.lookup(l.keys[i as usize].1.session_id(), l.cfg.timeout),
                        None => l.send_lookup(i).await,
                    }
                    next_look += every(l.cfg.lookup_rate);
                }
                if l.cfg.rate == 0 { next_pub = end; }
                if l.cfg.lookup_rate == 0 { next_look = end; }
                if now >= next_expire {
                    l.expire(true);
                    next_expire = now + Duration::from_millis(50);
                }
            }
            r = stamp::recv(sock, buf) => {
                if let Ok((len, at)) = r {
                    let b = buf[..len].to_vec();
                    l.on_answer(&b, at, true);
                }
            }
            Some(a) = recv_direct(direct.as_deref_mut()) => {
                let d = direct.as_deref_mut().expect("answers come from it");
                d.answered(a, &mut l.lookup);
            }
        }
    }
    // Direct lookups still on their way (each ends by its own timeout).
    if let Some(d) = direct {
        while d.inflight > 0 {
            let Some(a) = d.answers.1.recv().await else {
                break;
            };
            d.answered(a, &mut l.lookup);
        }
    }
    // Answers still on their way.
    let drain = tokio::time::Instant::now() + l.cfg.timeout + GRACE;
    while !l.pending.is_empty() {
        match tokio::time::timeout_at(drain, stamp::recv(sock, buf)).await {
            Ok(Ok((len, at))) => {
                let b = buf[..len].to_vec();
                l.on_answer(&b, at, true);
            }
            _ => break,
        }
    }
    l.expire(true);
    l.pending.clear();
}

/// The next direct etcd answer (never, without direct lookups).
async fn recv_direct(d: Option<&mut Direct>) -> Option<EtcdAnswer> {
    match d {
        Some(d) => d.answers.1.recv().await,
        None => std::future::pending().await,
    }
}

/// Looks every record up (64 in flight, three tries each): records acknowledged but not
/// found, found older than acknowledged, and never answered (store unreachable).
async fn verify_all(l: &mut Load, sock: &UdpSocket, buf: &mut [u8]) -> (u64, u64, u64) {
    let n = l.cfg.records;
    let mut result: Vec<Option<Option<u64>>> = vec![None; n as usize];
    for _try in 0..3 {
        let todo: Vec<u32> = (0..n).filter(|&i| result[i as usize].is_none()).collect();
        let mut it = todo.into_iter().peekable();
        while it.peek().is_some() || !l.pending.is_empty() {
            while l.pending.len() < 64 {
                let Some(i) = it.next() else { break };
                l.send_lookup(i).await;
            }
            match tokio::time::timeout(Duration::from_millis(200), stamp::recv(sock, buf)).await {
                Ok(Ok((len, at))) => {
                    let b = buf[..len].to_vec();
                    if let Some((i, seq)) = l.on_answer(&b, at, false) {
                        result[i as usize] = Some(seq);
                    }
                }
                _ => l.expire(false),
            }
        }
    }
    // Only records the resolver acknowledged count: one whose every publish timed out
    // was never promised to be stored.
    let (mut missing, mut stale, mut unanswered) = (0, 0, 0);
    for (i, r) in result.iter().enumerate() {
        match r {
            _ if l.acked[i] == 0 => {}
            None => unanswered += 1,
            Some(None) => missing += 1,
            Some(Some(seq)) if *seq < l.acked[i] => stale += 1,
            _ => {}
        }
    }
    (missing, stale, unanswered)
}

/// The name of record `i` (for `multihome resolve` against a loaded store).
pub fn name_of(i: u32) -> SessionId {
    key_of(i).public_key().session_id()
}
