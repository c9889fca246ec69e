//! `voipgen answer`: one socket; each new caller address gets a stream of answers.

use crate::sys::{self, now_ns, Epoll};
use crate::tally::{self, Tally};
use crate::Stream;
use serde_json::{json, Value};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::io;
use std::net::SocketAddr;

/// Answers until every stream is answered and `idle` seconds passed without a packet,
/// or `deadline` seconds passed.
pub fn run(bind: SocketAddr, st: Stream, idle: f64, deadline: f64) -> io::Result<Value> {
    if st.size < tally::HEADER || st.pps <= 0.0 {
        return Err(io::Error::other("need pps > 0 and size >= 20"));
    }
    let sock = sys::socket(bind)?;
    let mut epoll = Epoll::new()?;
    epoll.add(&sock, 0)?;
    println!("LISTENING");
    let mut tally = Tally::new(st.count);
    let mut peers: HashMap<SocketAddr, usize> = HashMap::new();
    let mut addrs: Vec<SocketAddr> = Vec::new();
    // (due time, stream, next seq): the next answer of each stream.
    let mut heap: BinaryHeap<Reverse<(u64, usize, u32)>> = BinaryHeap::new();
    let (mut out, mut inb) = (vec![0x5au8; st.size], vec![0u8; 2048]);
    let interval_ns = (1e9 / st.pps) as u64;
    let (start, mut last_rx) = (now_ns(), None::<u64>);
    let (mut sent, mut send_errors, mut lag_ns) = (0u64, 0u64, 0u64);
    let mut firsts: Vec<u64> = Vec::new();
    loop {
        let now = now_ns();
        while let Some(&Reverse((due, i, seq))) = heap.peek() {
            if due > now {
                break;
            }
            heap.pop();
            let t = now_ns();
            lag_ns = lag_ns.max(t - due);
            tally::emit(&mut out, i as u32, seq, t);
            match sock.send_to(&out, addrs[i]) {
                Ok(_) => sent += 1,
                Err(_) => send_errors += 1,
            }
            if seq + 1 < st.count {
                heap.push(Reverse((
                    firsts[i] + u64::from(seq + 1) * interval_ns,
                    i,
                    seq + 1,
                )));
            }
        }
        let quiet = last_rx.is_some_and(|t| now > t + (idle * 1e9) as u64);
        if (heap.is_empty() && quiet) || now > start + (deadline * 1e9) as u64 {
            break;
        }
        let wait = heap
            .peek()
            .map_or(200, |Reverse((due, _, _))| sys::timeout_ms(*due, now));
        epoll.wait(wait, |_| {
            while let Ok((n, from)) = sock.recv_from(&mut inb) {
                let Some((_, seq, sent_ns)) = tally::parse(&inb[..n]) else {
                    continue;
                };
                let t = now_ns();
                last_rx = Some(t);
                let i = *peers.entry(from).or_insert_with(|| {
                    addrs.push(from);
                    firsts.push(t);
                    tally.add_stream(addrs.len() - 1);
                    heap.push(Reverse((t, addrs.len() - 1, 0)));
                    addrs.len() - 1
                });
                tally.record(i, seq, sent_ns, t);
            }
        })?;
    }
    let mut v = tally.summary(addrs.len() as u64 * u64::from(st.count));
    v["sent"] = json!(sent);
    v["send_errors"] = json!(send_errors);
    v["streams"] = json!(addrs.len());
    v["lag_ms"] = json!(lag_ns as f64 / 1e6);
    Ok(v)
}
