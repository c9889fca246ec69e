//! What the dashboard plots and lists: a bounded ring of per-second samples of every link
//! (throughput each way, RTT, loss, state) and a bounded list of events (link down/up,
//! failover, handshakes, refusals, sessions), both derived from successive snapshots of
//! the daemon's status document ([`Snapshot`], which each role extracts from its own).
//!
//! The daemon calls [`History::sample`] once a second with the time and a snapshot; the
//! history turns byte counters into rates and compares the snapshot with the previous one
//! for events. It reads no clock itself, so it is tested with made-up times.
//!
//! Invariants: at most [`CAPACITY`] samples of at most [`MAX_SERIES`] links and
//! [`MAX_EVENTS`] events are kept (the oldest go first); a sample costs time in proportion to
//! the links (maps, no scans), so a server with thousands of sessions can take one a second; every series has one value (or null) per kept sample time, so the columns of
//! [`History::to_json`] line up; a counter that goes backwards (a new session) gives no
//! rate and no event, never a negative one.

use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt::Write;

/// Samples kept: ten minutes at one a second.
pub const CAPACITY: usize = 600;
/// Events kept.
pub const MAX_EVENTS: usize = 100;
/// Links charted: a server with thousands of sessions keeps series for the first ones
/// only (600 points each would cost it tens of kilobytes per session, and no chart shows
/// thousands of lines); every link's events are still recorded.
pub const MAX_SERIES: usize = 512;

/// One link as a role's status document shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkSample {
    /// The session (peer) or group the link belongs to.
    pub session: String,
    /// The link's name.
    pub link: String,
    /// `up`, `suspect` or `down`.
    pub state: String,
    /// Bytes sent on the link so far, if the role counts them.
    pub tx_bytes: Option<u64>,
    /// Bytes received on the link so far, if the role counts them.
    pub rx_bytes: Option<u64>,
    /// Smoothed round-trip time, if measured.
    pub rtt_ms: Option<f64>,
    /// Loss rate (0..1), if measured.
    pub loss: Option<f64>,
}

impl LinkSample {
    /// Its session's and its own name, borrowed (a map key that costs no allocation).
    fn names(&self) -> (&str, &str) {
        (&self.session, &self.link)
    }

    fn key(&self) -> String {
        format!("{}/{}", self.session, self.link)
    }
}

/// What kind of thing happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// A link changed state, appeared or went.
    Link,
    /// A link went down while another of its session carried on.
    Failover,
    /// A session came or went.
    Session,
    /// A handshake completed (new keys).
    Rekey,
    /// Something was refused (unknown peer, failed authentication, a full table, …).
    Refusal,
    /// The daemon itself (started).
    Daemon,
}

impl EventKind {
    /// Lower-case name, as the JSON API shows it.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Link => "link",
            EventKind::Failover => "failover",
            EventKind::Session => "session",
            EventKind::Rekey => "rekey",
            EventKind::Refusal => "refusal",
            EventKind::Daemon => "daemon",
        }
    }
}

/// A counter whose increase is an event (e.g. `rx_unknown_peer` as a refusal).
#[derive(Debug, Clone, PartialEq)]
pub struct Mark {
    /// The event's kind.
    pub kind: EventKind,
    /// What it counts, as the event says it (`unknown peer`).
    pub label: String,
    /// Its value now.
    pub count: u64,
}

/// One look at the status document.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// Every link.
    pub links: Vec<LinkSample>,
    /// Every session (peer) and whether it is established.
    pub sessions: Vec<(String, bool)>,
    /// Counters whose increases are events.
    pub marks: Vec<Mark>,
}

/// One sample of one link.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Point {
    tx_bps: Option<f64>,
    rx_bps: Option<f64>,
    rtt_ms: Option<f64>,
    loss: Option<f64>,
    /// 2 up, 1 suspect, 0 down.
    state: u8,
}

/// A link's column of samples, aligned with [`History::times`].
#[derive(Debug, Clone)]
struct Series {
    session: String,
    link: String,
    points: VecDeque<Option<Point>>,
}

/// An event with its time (Unix milliseconds).
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// When it was seen.
    pub unix_ms: u64,
    /// Its kind.
    pub kind: EventKind,
    /// One line for people.
    pub text: String,
}

/// The ring of samples and the list of events.
#[derive(Debug, Default)]
pub struct History {
    /// Unix milliseconds of each kept sample.
    times: VecDeque<u64>,
    series: BTreeMap<String, Series>,
    events: VecDeque<Event>,
    /// The previous snapshot and its monotonic time (ms), for rates and events.
    last: Option<(u64, Snapshot)>,
}

fn state_level(s: &str) -> u8 {
    match s {
        "up" => 2,
        "suspect" => 1,
        _ => 0,
    }
}

/// Bits per second between two byte counts `dt_ms` apart (None if either is unknown or
/// the counter went backwards).
fn rate(now: Option<u64>, before: Option<u64>, dt_ms: u64) -> Option<f64> {
    let (n, b) = (now?, before?);
    (n >= b && dt_ms > 0).then(|| (n - b) as f64 * 8.0 * 1000.0 / dt_ms as f64)
}

impl History {
    /// An empty history whose first event says the daemon started at `unix_ms`.
    pub fn new(unix_ms: u64, role: &str) -> Self {
        let mut h = History::default();
        h.push_event(unix_ms, EventKind::Daemon, format!("{role} started"));
        h
    }

    fn push_event(&mut self, unix_ms: u64, kind: EventKind, text: String) {
        if self.events.len() == MAX_EVENTS {
            self.events.pop_front();
        }
        self.events.push_back(Event {
            unix_ms,
            kind,
            text,
        });
    }

    /// The events kept, oldest first.
    pub fn events(&self) -> impl Iterator<Item = &Event> {
        self.events.iter()
    }

    /// Samples kept.
    pub fn len(&self) -> usize {
        self.times.len()
    }

    /// Whether no sample was taken yet.
    pub fn is_empty(&self) -> bool {
        self.times.is_empty()
    }

    /// Records `snap`, taken at `unix_ms` (shown) and `mono_ms` (a monotonic clock, for
    /// rates): one point per link, and the events since the previous snapshot.
    pub fn sample(&mut self, unix_ms: u64, mono_ms: u64, snap: Snapshot) {
        if self.times.len() == CAPACITY {
            self.times.pop_front();
            for s in self.series.values_mut() {
                s.points.pop_front();
            }
        }
        self.series
            .retain(|_, s| s.points.iter().any(Option::is_some));
        self.times.push_back(unix_ms);
        // Keyed by borrowed names, and the series' key built in one reused buffer: at
        // thousands of sessions a string per link and second was most of the sample's heap.
        let before: HashMap<(&str, &str), &LinkSample> = self
            .last
            .as_ref()
            .map(|(_, s)| s.links.iter().map(|l| (l.names(), l)).collect())
            .unwrap_or_default();
        let dt = self
            .last
            .as_ref()
            .map_or(0, |(t, _)| mono_ms.saturating_sub(*t));
        let n = self.times.len();
        let mut key = String::new();
        for l in &snap.links {
            key.clear();
            let _ = write!(key, "{}/{}", l.session, l.link);
            let known = self.series.contains_key(&key);
            if !known && self.series.len() >= MAX_SERIES {
                continue;
            }
            let prev = before.get(&l.names());
            let point = Point {
                tx_bps: prev.and_then(|p| rate(l.tx_bytes, p.tx_bytes, dt)),
                rx_bps: prev.and_then(|p| rate(l.rx_bytes, p.rx_bytes, dt)),
                rtt_ms: l.rtt_ms,
                loss: l.loss,
                state: state_level(&l.state),
            };
            if !known {
                let series = Series {
                    session: l.session.clone(),
                    link: l.link.clone(),
                    points: VecDeque::new(),
                };
                self.series.insert(key.clone(), series);
            }
            let s = self.series.get_mut(&key).expect("inserted above");
            s.points.resize(n - 1, None);
            s.points.push_back(Some(point));
        }
        for s in self.series.values_mut() {
            s.points.resize(n, None);
        }
        if let Some((_, prev)) = self.last.take() {
            self.diff(unix_ms, &prev, &snap);
        }
        self.last = Some((mono_ms, snap));
    }

    /// Events between two snapshots.
    fn diff(&mut self, unix_ms: u64, prev: &Snapshot, now: &Snapshot) {
        let mut out = Vec::new();
        link_events(prev, now, &mut out);
        session_events(prev, now, &mut out);
        // Looked up in a map: a server has marks per session, and a scan per mark made
        // this quadratic (0.6 core at 10 000 sessions).
        let before: HashMap<(EventKind, &str), &Mark> = prev
            .marks
            .iter()
            .map(|p| ((p.kind, p.label.as_str()), p))
            .collect();
        for m in &now.marks {
            let was = before.get(&(m.kind, m.label.as_str()));
            if let Some(p) = was.filter(|p| m.count > p.count) {
                let text = match m.kind {
                    EventKind::Rekey => format!("{} (new keys; {} so far)", m.label, m.count),
                    _ => format!(
                        "{}: {} more ({} so far)",
                        m.label,
                        m.count - p.count,
                        m.count
                    ),
                };
                out.push((m.kind, text));
            }
        }
        for (kind, text) in out {
            self.push_event(unix_ms, kind, text);
        }
    }

    /// The series as columns (times in Unix seconds; null where a link had no sample)
    /// and `links`, the links as they are now (`live`, taken when asked).
    pub fn to_json(&self, live: &Snapshot) -> Value {
        let t: Vec<f64> = self.times.iter().map(|&ms| ms as f64 / 1e3).collect();
        let col = |s: &Series, f: &dyn Fn(&Point) -> Option<f64>| -> Vec<Option<f64>> {
            s.points.iter().map(|p| p.as_ref().and_then(f)).collect()
        };
        let series: Vec<Value> = self
            .series
            .iter()
            .map(|(key, s)| {
                json!({
                    "key": key, "session": s.session, "link": s.link,
                    "tx_bps": col(s, &|p| p.tx_bps),
                    "rx_bps": col(s, &|p| p.rx_bps),
                    "rtt_ms": col(s, &|p| p.rtt_ms),
                    "loss": col(s, &|p| p.loss),
                    "state": col(s, &|p| Some(f64::from(p.state))),
                })
            })
            .collect();
        let links: Vec<Value> = live
            .links
            .iter()
            .map(|l| {
                let last = self
                    .series
                    .get(&l.key())
                    .and_then(|s| s.points.back().copied().flatten());
                json!({
                    "key": l.key(), "session": l.session, "link": l.link, "state": l.state,
                    "rtt_ms": l.rtt_ms, "loss": l.loss,
                    "tx_bytes": l.tx_bytes, "rx_bytes": l.rx_bytes,
                    "tx_bps": last.and_then(|p| p.tx_bps), "rx_bps": last.and_then(|p| p.rx_bps),
                })
            })
            .collect();
        json!({"interval_s": 1, "capacity": CAPACITY, "t": t, "series": series, "links": links})
    }

    /// The events as a JSON list, oldest first.
    pub fn events_json(&self) -> Value {
        self.events
            .iter()
            .map(|e| json!({"unix_ms": e.unix_ms, "kind": e.kind.as_str(), "text": e.text}))
            .collect()
    }
}

/// Links that changed state, appeared or went. A link going down while another of its
/// session is up is a failover (traffic moves there).
fn link_events(prev: &Snapshot, now: &Snapshot, out: &mut Vec<(EventKind, String)>) {
    // Looked up in maps, not by scanning: once a second over a server's thousands of links.
    let before: HashMap<_, &LinkSample> = prev.links.iter().map(|p| (p.names(), p)).collect();
    let current: std::collections::HashSet<_> = now.links.iter().map(LinkSample::names).collect();
    // Each session's links that are up, for naming where traffic went (a scan of every
    // link per change would be quadratic when thousands go down at once).
    let mut up: HashMap<&str, Vec<&str>> = HashMap::new();
    for o in now.links.iter().filter(|o| o.state == "up") {
        up.entry(o.session.as_str())
            .or_default()
            .push(o.link.as_str());
    }
    for l in &now.links {
        let name = || format!("{} link {}", l.session, l.link);
        let Some(p) = before.get(&l.names()) else {
            out.push((EventKind::Link, format!("{} added ({})", name(), l.state)));
            continue;
        };
        if p.state == l.state {
            continue;
        }
        let name = name();
        let others: Vec<&str> = up
            .get(l.session.as_str())
            .into_iter()
            .flatten()
            .copied()
            .filter(|o| *o != l.link)
            .collect();
        if l.state == "down" && !others.is_empty() {
            let to = others.join(", ");
            out.push((EventKind::Failover, format!("{name} down: traffic on {to}")));
        } else if l.state == "down" {
            out.push((EventKind::Link, format!("{name} down: no link left")));
        } else {
            out.push((
                EventKind::Link,
                format!("{name} {} (was {})", l.state, p.state),
            ));
        }
    }
    for p in &prev.links {
        if !current.contains(&p.names()) {
            out.push((
                EventKind::Link,
                format!("{} link {} removed", p.session, p.link),
            ));
        }
    }
}

/// Sessions that were established, appeared or went.
fn session_events(prev: &Snapshot, now: &Snapshot, out: &mut Vec<(EventKind, String)>) {
    let before: HashMap<&str, bool> = prev
        .sessions
        .iter()
        .map(|(n, u)| (n.as_str(), *u))
        .collect();
    let current: std::collections::HashSet<&str> =
        now.sessions.iter().map(|(n, _)| n.as_str()).collect();
    for (name, up) in &now.sessions {
        let was = before.get(name.as_str()).copied();
        match (was, *up) {
            (Some(true), true) | (Some(false), false) => {}
            (_, true) => out.push((EventKind::Session, format!("session {name} established"))),
            (Some(true), false) => out.push((EventKind::Session, format!("session {name} lost"))),
            (None, false) => out.push((EventKind::Session, format!("session {name} starting"))),
        }
    }
    for (name, _) in &prev.sessions {
        if !current.contains(name.as_str()) {
            out.push((EventKind::Session, format!("session {name} closed")));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(name: &str, state: &str, tx: u64, rx: u64) -> LinkSample {
        LinkSample {
            session: "server".into(),
            link: name.into(),
            state: state.into(),
            tx_bytes: Some(tx),
            rx_bytes: Some(rx),
            rtt_ms: Some(20.0),
            loss: Some(0.0),
        }
    }

    fn snap(links: Vec<LinkSample>, handshakes: u64) -> Snapshot {
        Snapshot {
            links,
            sessions: vec![("server".into(), true)],
            marks: vec![Mark {
                kind: EventKind::Rekey,
                label: "handshake".into(),
                count: handshakes,
            }],
        }
    }

    #[test]
    fn rates_and_failover() {
        let mut h = History::new(1_000, "client");
        h.sample(
            1_000,
            0,
            snap(vec![link("a", "up", 0, 0), link("b", "up", 0, 0)], 1),
        );
        // 1.5 s later: a sent 1500 bytes (8000 bit/s), b received 3000 (16000 bit/s).
        h.sample(
            2_500,
            1_500,
            snap(vec![link("a", "up", 1500, 0), link("b", "up", 0, 3000)], 1),
        );
        h.sample(
            3_500,
            2_500,
            snap(
                vec![link("a", "down", 1500, 0), link("b", "up", 0, 3000)],
                2,
            ),
        );
        let j = h.to_json(&Snapshot::default());
        assert_eq!(j["t"], json!([1.0, 2.5, 3.5]));
        let a = &j["series"][0];
        assert_eq!(a["key"], "server/a");
        assert_eq!(a["tx_bps"], json!([null, 8000.0, 0.0]));
        assert_eq!(a["state"], json!([2.0, 2.0, 0.0]));
        assert_eq!(j["series"][1]["rx_bps"], json!([null, 16000.0, 0.0]));
        let texts: Vec<(EventKind, &str)> = h.events().map(|e| (e.kind, e.text.as_str())).collect();
        assert_eq!(
            texts,
            [
                (EventKind::Daemon, "client started"),
                (EventKind::Failover, "server link a down: traffic on b"),
                (EventKind::Rekey, "handshake (new keys; 2 so far)"),
            ]
        );
        assert_eq!(h.events().last().unwrap().unix_ms, 3_500);
    }

    #[test]
    fn bounded_and_aligned() {
        let mut h = History::new(0, "server");
        for i in 0..(CAPACITY as u64 + 50) {
            // Link b exists only in the first 40 samples; link c appears late.
            let mut links = vec![link("a", "up", i * 100, 0)];
            if i < 40 {
                links.push(link("b", if i % 2 == 0 { "up" } else { "down" }, 0, 0));
            }
            if i > CAPACITY as u64 {
                links.push(link("c", "up", 0, 0));
            }
            let mut s = snap(links, 1);
            s.marks[0].kind = EventKind::Refusal;
            s.marks[0].count = i; // one refusal a second
            h.sample(i * 1000, i * 1000, s);
        }
        assert_eq!(h.len(), CAPACITY);
        assert_eq!(h.events().count(), MAX_EVENTS);
        let j = h.to_json(&Snapshot::default());
        let keys: Vec<&str> = j["series"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["key"].as_str().unwrap())
            .collect();
        // b's samples all left the ring, so its series went with them.
        assert_eq!(keys, ["server/a", "server/c"]);
        for s in j["series"].as_array().unwrap() {
            assert_eq!(s["tx_bps"].as_array().unwrap().len(), CAPACITY);
        }
        assert_eq!(j["series"][0]["tx_bps"][CAPACITY - 1], json!(800.0));
        assert_eq!(j["series"][1]["state"][CAPACITY - 50], json!(null));
    }

    #[test]
    fn thousands_of_links_chart_the_first_and_keep_every_event() {
        let mut h = History::new(0, "server");
        let many = |down: usize| {
            (0..2000)
                .map(|i| {
                    link(
                        &format!("l{i}"),
                        if i == down { "down" } else { "up" },
                        0,
                        0,
                    )
                })
                .collect::<Vec<_>>()
        };
        h.sample(0, 0, snap(many(usize::MAX), 1));
        h.sample(1000, 1000, snap(many(1999), 1));
        let j = h.to_json(&Snapshot::default());
        assert_eq!(j["series"].as_array().unwrap().len(), MAX_SERIES);
        // The last link is not charted, but its going down is an event.
        assert!(h.events().any(|e| e.text.contains("link l1999 down")));
    }

    #[test]
    fn counters_going_back_give_no_rate_or_event() {
        let mut h = History::new(0, "server");
        let mut s = snap(vec![link("a", "up", 5000, 0)], 7);
        h.sample(0, 0, s.clone());
        s.links[0].tx_bytes = Some(10);
        s.marks[0].count = 1;
        s.sessions[0].1 = false;
        h.sample(1000, 1000, s);
        assert_eq!(
            h.to_json(&Snapshot::default())["series"][0]["tx_bps"],
            json!([null, null])
        );
        let last: Vec<&str> = h.events().map(|e| e.text.as_str()).collect();
        assert_eq!(last, ["server started", "session server lost"]);
    }
}
