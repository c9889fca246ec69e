//! The web dashboard and JSON API every daemon serves on its opt-in `dashboard` address,
//! and the event list its status document carries (docs/API.md).
//!
//! Each daemon keeps a [`Live`]: the [`History`] (sampled once a second from the status
//! document, whatever the config: the control socket's document lists the events too),
//! the role's [`SnapshotFn`] that reads links, sessions and event counters out of its
//! document, and the optional listener. Routes, all GET:
//!
//! - `/` (and the page's scripts and styles): the dashboard, embedded in the binary —
//!   the page, its script and styles, and the charting library uPlot (MIT, vendored in
//!   `assets/vendor/uplot`, re-fetched by `scripts/fetch-uplot.sh`); no other origin is
//!   contacted, so it works offline;
//! - `/api/status`: the status document, the same the control socket answers;
//! - `/api/history`: the per-second series of every link and the links now;
//! - `/metrics`: Prometheus, where the role renders it.
//!
//! Invariants: nothing served changes state (there is no action to authorise, so no token);
//! every answer is built from the document taken when the connection was accepted and the
//! history, both owned by the daemon's one thread.

pub mod history;

pub use history::{Event, EventKind, History, LinkSample, Mark, Snapshot};

use crate::http::{HttpListener, Request, Response};
use anyhow::Result;
use serde_json::Value;
use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::net::TcpStream;

/// Reads a role's links, sessions and event counters from its status document.
pub type SnapshotFn = fn(&Value) -> Snapshot;
/// Renders a role's status document as Prometheus metrics.
pub type MetricsFn = fn(&Value) -> String;

/// Time between samples.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(1);

/// The page allows only its own origin: scripts, styles, fetches (and images as data URLs,
/// which uPlot does not need but a screenshot tool may).
const CSP: &str = "Content-Security-Policy: default-src 'self'; img-src 'self' data:; \
                   frame-ancestors 'none'\r\n";

/// The embedded files: (path, content type, body).
const ASSETS: [(&str, &str, &str); 5] = [
    (
        "/",
        "text/html; charset=utf-8",
        include_str!("../../assets/index.html"),
    ),
    (
        "/dashboard.js",
        "text/javascript; charset=utf-8",
        include_str!("../../assets/dashboard.js"),
    ),
    (
        "/dashboard.css",
        "text/css; charset=utf-8",
        include_str!("../../assets/dashboard.css"),
    ),
    (
        "/uPlot.iife.min.js",
        "text/javascript; charset=utf-8",
        include_str!("../../assets/vendor/uplot/uPlot.iife.min.js"),
    ),
    (
        "/uPlot.min.css",
        "text/css; charset=utf-8",
        include_str!("../../assets/vendor/uplot/uPlot.min.css"),
    ),
];

/// A daemon's history, its role's readers and its optional dashboard listener.
pub struct Live {
    history: Rc<RefCell<History>>,
    snapshot: SnapshotFn,
    metrics: Option<MetricsFn>,
    http: Option<HttpListener>,
    started: std::time::Instant,
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Live {
    /// Binds the dashboard on `addr` if given (`dashboard` in the config).
    pub async fn new(
        role: &str,
        addr: Option<SocketAddr>,
        snapshot: SnapshotFn,
        metrics: Option<MetricsFn>,
    ) -> Result<Self> {
        let http = match addr {
            Some(a) => Some(HttpListener::bind(a, "dashboard").await?),
            None => None,
        };
        if let Some(h) = &http {
            tracing::info!(address = %h.local_addr()?, "dashboard");
        }
        Ok(Live {
            history: Rc::new(RefCell::new(History::new(unix_ms(), role))),
            snapshot,
            metrics,
            http,
            started: std::time::Instant::now(),
        })
    }

    /// A sampling interval for the daemon's loop (a late tick is not made up).
    pub fn tick() -> tokio::time::Interval {
        let mut t = tokio::time::interval(SAMPLE_EVERY);
        t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        t
    }

    /// Takes a sample of `doc` (the role's status document) now.
    pub fn sample(&self, doc: &Value) {
        self.sample_snapshot((self.snapshot)(doc));
    }

    /// Records a snapshot the role built without a status document.
    pub fn sample_snapshot(&self, snap: Snapshot) {
        let mono = self.started.elapsed().as_millis() as u64;
        self.history.borrow_mut().sample(unix_ms(), mono, snap);
    }

    /// The status document with the events added (`events`, oldest first): what the
    /// control socket and `/api/status` answer.
    pub fn document(&self, mut doc: Value) -> Value {
        if let Some(o) = doc.as_object_mut() {
            o.insert("events".into(), self.history.borrow().events_json());
        }
        doc
    }

    /// The next dashboard connection; never ready without a dashboard.
    pub async fn accept(&self) -> std::io::Result<TcpStream> {
        match &self.http {
            Some(h) => h.accept().await,
            None => std::future::pending().await,
        }
    }

    /// Answers a dashboard connection from `doc` (from [`Live::document`]).
    pub fn serve(&self, stream: TcpStream, doc: Value) {
        let Some(h) = &self.http else { return };
        let (history, snapshot, metrics) = (self.history.clone(), self.snapshot, self.metrics);
        h.serve(stream, move |req| {
            route(req, &doc, &history.borrow(), snapshot, metrics)
        });
    }
}

/// The answer to `req`.
pub fn route(
    req: &Request<'_>,
    doc: &Value,
    history: &History,
    snapshot: SnapshotFn,
    metrics: Option<MetricsFn>,
) -> Response {
    let path = if req.path == "/index.html" {
        "/"
    } else {
        req.path
    };
    if let Some((_, ctype, body)) = ASSETS.iter().find(|(p, _, _)| *p == path) {
        let mut r = Response::ok(ctype, body.as_bytes());
        r.headers = CSP;
        return r;
    }
    let json = |v: Value| Response::ok("application/json", v.to_string().into_bytes());
    match (path, metrics) {
        ("/api/status", _) => json(doc.clone()),
        ("/api/history", _) => json(history.to_json(&snapshot(doc))),
        ("/metrics", Some(m)) => Response::ok("text/plain; version=0.0.4", m(doc).into_bytes()),
        _ => Response::error(404, "not found\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::parse_request;
    use serde_json::json;

    fn snapshot(doc: &Value) -> Snapshot {
        Snapshot {
            links: vec![LinkSample {
                session: "s".into(),
                link: doc["link"].as_str().unwrap_or("?").into(),
                state: "up".into(),
                tx_bytes: Some(1),
                rx_bytes: None,
                rtt_ms: None,
                loss: None,
            }],
            ..Snapshot::default()
        }
    }

    fn get(path: &str, doc: &Value, metrics: Option<MetricsFn>) -> Response {
        let head = format!("GET {path} HTTP/1.1\r\n\r\n");
        let req = parse_request(head.as_bytes()).unwrap();
        route(&req, doc, &History::new(0, "test"), snapshot, metrics)
    }

    #[test]
    fn routes() {
        let doc = json!({"role": "client", "link": "dsl"});
        let page = get("/", &doc, None);
        assert_eq!(page.status, 200);
        let html = String::from_utf8(page.body.to_vec()).unwrap();
        // Every script and style the page loads is embedded: the page needs no network.
        for (p, _, _) in &ASSETS[1..] {
            assert!(html.contains(&format!("\"{}\"", &p[1..])), "{p} not loaded");
            assert_eq!(get(p, &doc, None).status, 200);
        }
        assert!(!html.contains("http://") && !html.contains("https://"));
        assert!(page.headers.contains("default-src 'self'"));
        assert_eq!(
            get("/api/status?x=1", &doc, None).body.as_ref(),
            doc.to_string().as_bytes()
        );
        let hist: Value = serde_json::from_slice(&get("/api/history", &doc, None).body).unwrap();
        assert_eq!(hist["links"][0]["link"], "dsl");
        assert_eq!(get("/metrics", &doc, None).status, 404);
        let m = get("/metrics", &doc, Some(|d| format!("x {}\n", d["role"])));
        assert_eq!(m.body.as_ref(), b"x \"client\"\n");
        assert_eq!(get("/nothing", &doc, None).status, 404);
    }
}
