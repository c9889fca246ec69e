//! `multihome resolve`: one record as a resolver serves it, checked here (signature, name,
//! lease) before it is printed — what a client would accept.

use anyhow::{bail, Context, Result};
use multihome_naming::message::{Request, Response, Status};
use multihome_naming::{admit, Body, Kind};
use multihome_proto::crypto::{PublicKey, SessionId};
use serde_json::json;
use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

/// A name from a base64 public key or 32 hex digits.
pub fn parse_name(s: &str) -> Result<SessionId> {
    if let Ok(k) = PublicKey::from_base64(s) {
        return Ok(k.session_id());
    }
    let hex = s.trim();
    if hex.len() != 32 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
        bail!("`{s}` is neither a public key (base64) nor a name (32 hex digits)");
    }
    let mut n = [0u8; 16];
    for (i, b) in n.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).expect("hex checked");
    }
    Ok(SessionId(n))
}

fn hex(n: &SessionId) -> String {
    n.0.iter().map(|b| format!("{b:02x}")).collect()
}

/// Asks `resolver` (three tries, one second each) and prints the record.
pub fn query(identity: &str, resolver: SocketAddr, server: bool, as_json: bool) -> Result<()> {
    let name = parse_name(identity)?;
    let kind = if server { Kind::Server } else { Kind::Identity };
    let local: SocketAddr = if resolver.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    }
    .parse()?;
    let sock = UdpSocket::bind(local)?;
    sock.set_read_timeout(Some(Duration::from_secs(1)))?;
    let req = Request::Lookup { kind, name }.encode(1);
    let mut buf = [0u8; 2048];
    let resp = (0..3)
        .find_map(|_| {
            sock.send_to(&req, resolver).ok()?;
            let (n, from) = sock.recv_from(&mut buf).ok()?;
            Response::parse(&buf[..n]).filter(|r| from == resolver && r.id == 1)
        })
        .with_context(|| format!("no answer from the resolver at {resolver}"))?;
    let bytes = match (resp.status, resp.records.first()) {
        (Status::Ok, Some(b)) => b,
        (Status::NotFound, _) => bail!("no live record named {}", hex(&name)),
        (st, _) => bail!("the resolver answered {st:?}"),
    };
    let now_ms = multihome_naming::service::unix_ms();
    let rec = admit(bytes, now_ms).map_err(|e| anyhow::anyhow!("record refused: {e}"))?;
    if rec.name() != name || rec.kind() != kind {
        bail!("the resolver answered with another record: refused");
    }
    let r = rec.record();
    let mut v = json!({
        "name": hex(&name),
        "key": r.key.to_base64(),
        "seq": r.seq,
        "expires_in_s": (r.expires_ms - now_ms) as f64 / 1000.0,
    });
    match &r.body {
        Body::Identity(b) => {
            v["server"] = json!(b.server.as_ref().map(hex));
            let policy = ["best", "redundant", "aggregate", "realtime"][usize::from(b.policy)];
            v["policy"] = json!(policy);
            let links: Vec<_> = b
                .links
                .iter()
                .map(|l| json!({"name": l.name, "address": l.addr.ip().to_string()}))
                .collect();
            v["links"] = json!(links);
        }
        Body::Server(b) => {
            v["tunnel"] = json!(b.tunnel.iter().map(|a| a.to_string()).collect::<Vec<_>>());
            v["resolver"] = json!(b.resolver.to_string());
            v["load"] = json!(b.load);
            v["capacity"] = json!(b.capacity);
        }
    }
    if as_json {
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        for (k, val) in v.as_object().into_iter().flatten() {
            println!("{k}: {val}");
        }
    }
    Ok(())
}
