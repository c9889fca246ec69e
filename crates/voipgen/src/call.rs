//! `voipgen call`: N streams from N sockets to one answerer, and the answers counted.

use crate::sys::{self, now_ns, Epoll};
use crate::tally::{self, Tally};
use crate::Stream;
use serde_json::{json, Value};
use std::io;
use std::net::{SocketAddr, UdpSocket};

/// Runs the calls; the result counts what this side sent and received.
pub fn run(to: SocketAddr, streams: u32, st: Stream, linger: f64) -> io::Result<Value> {
    if streams == 0 || st.size < tally::HEADER || st.pps <= 0.0 {
        return Err(io::Error::other("need streams > 0, pps > 0 and size >= 20"));
    }
    let local: SocketAddr = if to.is_ipv4() {
        "0.0.0.0:0".parse().expect("literal")
    } else {
        "[::]:0".parse().expect("literal")
    };
    let mut epoll = Epoll::new()?;
    let socks: Vec<UdpSocket> = (0..streams)
        .map(|i| {
            let s = sys::socket(local)?;
            epoll.add(&s, u64::from(i))?;
            Ok(s)
        })
        .collect::<io::Result<_>>()?;
    let mut tally = Tally::new(st.count);
    tally.add_stream(streams as usize - 1);
    let (mut out, mut inb) = (vec![0x5au8; st.size], vec![0u8; 2048]);
    let total = u64::from(streams) * u64::from(st.count);
    // Packet g is packet g / N of stream g % N, due at t0 + g / (N * pps).
    let step_ns = 1e9 / (st.pps * f64::from(streams));
    let t0 = now_ns();
    let due = |g: u64| t0 + (g as f64 * step_ns) as u64;
    let (mut g, mut lag_ns, mut send_errors) = (0u64, 0u64, 0u64);
    let mut last_sent = t0;
    loop {
        let now = now_ns();
        while g < total && due(g) <= now {
            let (i, seq) = (
                (g % u64::from(streams)) as usize,
                (g / u64::from(streams)) as u32,
            );
            let t = now_ns();
            lag_ns = lag_ns.max(t - due(g));
            tally::emit(&mut out, i as u32, seq, t);
            if socks[i].send_to(&out, to).is_err() {
                send_errors += 1;
            }
            g += 1;
            last_sent = t;
        }
        let done = g == total;
        if done && (tally.complete() || now > last_sent + (linger * 1e9) as u64) {
            break;
        }
        let wait = if done {
            sys::timeout_ms(last_sent + (linger * 1e9) as u64, now)
        } else {
            sys::timeout_ms(due(g), now)
        };
        epoll.wait(wait, |tok| {
            let s = &socks[tok as usize];
            while let Ok(n) = s.recv(&mut inb) {
                if let Some((_, seq, sent)) = tally::parse(&inb[..n]) {
                    tally.record(tok as usize, seq, sent, now_ns());
                }
            }
        })?;
    }
    let seconds = (last_sent - t0) as f64 / 1e9;
    let mut v = tally.summary(total);
    v["sent"] = json!(total - send_errors);
    v["send_errors"] = json!(send_errors);
    v["streams"] = json!(streams);
    v["send_seconds"] = json!(seconds);
    v["lag_ms"] = json!(lag_ns as f64 / 1e6);
    Ok(v)
}
