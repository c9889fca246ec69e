//! Asks a relay for a detour from a given local socket and prints the answer as JSON.
//! For the lab and manual tests until the client's path manager does it:
//!
//! `detour_request BIND RELAY RELAY_PUBLIC_KEY CLIENT_KEY_FILE SERVER nat|tunnel|nat-tcp [release]`
//!
//! BIND is the local address:port whose datagrams the detour is for (the same port must
//! then send the traffic; the socket is closed when this program exits).

use anyhow::{bail, Context, Result};
use multihome_io::udp::LinkSocket;
use multihome_proto::crypto::{PublicKey, StaticSecret};
use multihome_proto::detour::{ClientConfig, ClientEvent, DetourClient, Mode, Request};
use multihome_proto::Instant;
use std::net::SocketAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

fn main() -> Result<()> {
    let a: Vec<String> = std::env::args().collect();
    if a.len() < 7 {
        bail!("usage: detour_request BIND RELAY RELAY_PUBLIC_KEY CLIENT_KEY_FILE SERVER nat|tunnel|nat-tcp [release]");
    }
    let bind: SocketAddr = a[1].parse().context("BIND")?;
    let relay: SocketAddr = a[2].parse().context("RELAY")?;
    let relay_key = PublicKey::from_base64(&a[3])?;
    let key = StaticSecret::from_base64(&std::fs::read_to_string(&a[4])?)?;
    let server: SocketAddr = a[5].parse().context("SERVER")?;
    let mode = match a[6].as_str() {
        "nat" => Mode::Nat,
        "tunnel" => Mode::Tunnel,
        "nat-tcp" => Mode::NatTcp,
        m => bail!("unknown mode {m}"),
    };
    let release = a.get(7).is_some_and(|x| x == "release");
    let wall = SystemTime::now().duration_since(UNIX_EPOCH)?.as_micros() as u64;
    let mut dc = DetourClient::new(ClientConfig::new(key, relay_key, wall), {
        let mut s = [0u8; 32];
        s[..8].copy_from_slice(&wall.to_le_bytes());
        s
    });
    let sock = LinkSocket::bind(None, bind)?;
    let start = std::time::Instant::now();
    let now = || Instant::from_micros(start.elapsed().as_micros() as u64);
    dc.request(
        now(),
        Request {
            server,
            mode,
            release,
        },
    )?;
    let mut buf = [0u8; 512];
    loop {
        while let Some(m) = dc.poll_transmit() {
            sock.send_to(&m, relay)?;
        }
        if let Some(ev) = dc.poll_event() {
            match ev {
                ClientEvent::Answered { answer, .. } => {
                    println!(
                        "{{\"status\": \"{:?}\", \"relay_port\": {}, \"lifetime_s\": {}, \"observed\": \"{}\"}}",
                        answer.status, answer.relay_port, answer.lifetime_s, answer.observed
                    );
                    return Ok(());
                }
                ClientEvent::TimedOut { .. } => bail!("no answer from {relay}"),
            }
        }
        match sock.recv_from(&mut buf) {
            Ok((n, from)) if from == relay => {
                dc.handle_datagram(now(), &buf[..n]);
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(5))
            }
            Err(e) => return Err(e.into()),
        }
        if dc.poll_timeout().is_some_and(|t| t <= now()) {
            dc.handle_timeout(now());
        }
    }
}
