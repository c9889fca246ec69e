//! Pumps one stream connection: the plain TCP connection (the LAN host's on the client,
//! the destination's on the server) on one side, the encrypted MPTCP connection on the
//! other, both directions at once.
//!
//! - Bytes read from the plain side go out as `Data` records; its end (read 0) as `Fin`,
//!   after which the far end half-closes; a reset (or any read error) as `Reset`. The
//!   MPTCP connection itself stays open both ways until both directions ended (no
//!   DATA_FIN before: the kernel accepts no new subflow after one).
//! - Records read from the encrypted side are written to the plain side; `Fin`
//!   half-closes it (shutdown of writing); `Reset`, a record that fails to open, or the
//!   MPTCP connection ending without `Fin` resets it (SO_LINGER 0).
//!
//! Invariants: a direction holds at most one record (16 KiB + 19 bytes) of user-space
//! buffer, so memory per connection is bounded and backpressure is TCP's own; the
//! connection ends when both directions ended cleanly, or at the first reset either way.

use super::StreamStats;
use multihome_proto::stream::record::OVERHEAD;
use multihome_proto::stream::{Record, RecordOpener, RecordSealer, MAX_DATA};
use std::io;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

/// How a direction ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// Cleanly: the sender is done.
    Fin,
    /// Aborted: reset the plain side.
    Reset,
}

/// How a whole relayed connection ended (for the counters and the log).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Both directions ended cleanly.
    Closed,
    /// One side reset the connection (or the MPTCP connection broke).
    Reset,
}

/// Which way bytes flow for the counters: `up` is plain → encrypted.
pub struct Relay<'a> {
    /// The connection's counters.
    pub stats: &'a StreamStats,
    /// Whether the plain side is the LAN host (client) — counts bytes as up/down.
    pub plain_is_lan: bool,
}

impl Relay<'_> {
    /// Runs until the connection ends; resets the plain side on an abort.
    pub async fn run(
        &self,
        plain: TcpStream,
        enc: TcpStream,
        sealer: RecordSealer,
        opener: RecordOpener,
    ) -> Outcome {
        let (mut pr, mut pw) = plain.into_split();
        let (mut er, mut ew) = enc.into_split();
        let (to_enc, to_plain) = if self.plain_is_lan {
            (&self.stats.bytes_up, &self.stats.bytes_down)
        } else {
            (&self.stats.bytes_down, &self.stats.bytes_up)
        };
        let end = {
            let up = plain_to_enc(&mut pr, &mut ew, sealer, to_enc);
            let down = enc_to_plain(&mut er, &mut pw, opener, to_plain);
            tokio::pin!(up, down);
            tokio::select! {
                e = &mut up => if e == End::Fin { down.await } else { End::Reset },
                e = &mut down => if e == End::Fin { up.await } else { End::Reset },
            }
        };
        if end == End::Reset {
            if let Ok(plain) = pr.reunite(pw) {
                // Linger 0: the close is an RST, as the far end's was.
                let _ = socket2::SockRef::from(&plain).set_linger(Some(Duration::ZERO));
            }
            return Outcome::Reset;
        }
        Outcome::Closed
    }
}

/// Plain side → records. Ends with `Fin` after sending `Fin`, `Reset` after a read error
/// (having sent `Reset`) or a failed write to the encrypted side.
async fn plain_to_enc(
    pr: &mut OwnedReadHalf,
    ew: &mut OwnedWriteHalf,
    mut sealer: RecordSealer,
    bytes: &std::sync::atomic::AtomicU64,
) -> End {
    let mut data = vec![0u8; MAX_DATA];
    let mut frame = vec![0u8; MAX_DATA + OVERHEAD];
    loop {
        let (record, end) = match pr.read(&mut data).await {
            Ok(0) => (Record::Fin, Some(End::Fin)),
            Ok(n) => {
                bytes.fetch_add(n as u64, Relaxed);
                (Record::Data(&data[..n]), None)
            }
            Err(_) => (Record::Reset, Some(End::Reset)),
        };
        let Ok(n) = sealer.seal(record, &mut frame) else {
            return End::Reset;
        };
        if ew.write_all(&frame[..n]).await.is_err() {
            return End::Reset;
        }
        if let Some(end) = end {
            // No shutdown of the MPTCP side after `Fin`: the record tells the far end, and
            // the connection closes once both directions ended. Kernel MPTCP refuses new
            // subflows (MP_JOIN) after a DATA_FIN, so a half-closed connection — a
            // download whose client shut its sending side at once — could never replace a
            // subflow steering had closed, and lived on one link through its outages (on
            // cellular driving traces: no data for 30 s, the transfer given up).
            return end;
        }
    }
}

/// Records → plain side. Ends with `Fin` after half-closing the plain side, `Reset` on a
/// `Reset` record, a record that does not open, or the encrypted side ending early.
async fn enc_to_plain(
    er: &mut OwnedReadHalf,
    pw: &mut OwnedWriteHalf,
    opener: RecordOpener,
    bytes: &std::sync::atomic::AtomicU64,
) -> End {
    let mut body = vec![0u8; MAX_DATA + OVERHEAD];
    loop {
        let Ok(len) = read_frame(er, &mut body).await else {
            return End::Reset;
        };
        match opener.open(&mut body[..len]) {
            Ok(Record::Data(d)) => {
                if pw.write_all(d).await.is_err() {
                    return End::Reset;
                }
                bytes.fetch_add(d.len() as u64, Relaxed);
            }
            Ok(Record::Fin) => {
                let _ = pw.shutdown().await;
                return End::Fin;
            }
            Ok(Record::Reset) | Err(_) => return End::Reset,
        }
    }
}

/// Reads one frame's body (after its 2-byte length) into `buf`; returns its length. A
/// length beyond `buf` is an error: no peer of ours sends one.
pub async fn read_frame(r: &mut (impl AsyncReadExt + Unpin), buf: &mut [u8]) -> io::Result<usize> {
    let mut len = [0u8; 2];
    r.read_exact(&mut len).await?;
    let len = usize::from(u16::from_be_bytes(len));
    if len > buf.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "stream frame too long",
        ));
    }
    r.read_exact(&mut buf[..len]).await?;
    Ok(len)
}

/// Writes one handshake frame (2-byte length, then `msg`).
pub async fn write_frame(w: &mut (impl AsyncWriteExt + Unpin), msg: &[u8]) -> io::Result<()> {
    let mut frame = Vec::with_capacity(2 + msg.len());
    frame.extend_from_slice(&(msg.len() as u16).to_be_bytes());
    frame.extend_from_slice(msg);
    w.write_all(&frame).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use multihome_proto::crypto::StaticSecret;
    use multihome_proto::stream::handshake::HANDSHAKE_MAX;
    use multihome_proto::stream::{ConnectStatus, StreamInitiator, StreamResponder};
    use tokio::net::TcpListener;

    /// A connected loopback pair.
    async fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (b, _) = l.accept().await.unwrap();
        (a, b)
    }

    /// app ⇄ [client relay] ⇄ encrypted ⇄ [server relay] ⇄ dest, on loopback sockets; the
    /// relays run until the connection ends. Returns (app, dest, both relays' outcomes).
    async fn chain() -> (
        TcpStream,
        TcpStream,
        tokio::task::JoinHandle<(Outcome, Outcome)>,
    ) {
        let c = StaticSecret::from_bytes([1; 32]);
        let s = StaticSecret::from_bytes([2; 32]);
        let mut m1 = [0u8; HANDSHAKE_MAX];
        let t = "127.0.0.1:9".parse().unwrap();
        let (init, n1) =
            StreamInitiator::start(&c, &s.public_key(), [3; 32], 1, t, &mut m1).unwrap();
        let resp = StreamResponder::read(&s, [4; 32], &m1[..n1]).unwrap();
        let mut m2 = [0u8; HANDSHAKE_MAX];
        let (n2, ss, so) = resp.answer(ConnectStatus::Connected, &mut m2).unwrap();
        let (_, cs, co) = init.finish(&m2[..n2]).unwrap();
        let (app, lan) = pair().await;
        let (enc_c, enc_s) = pair().await;
        let (out, dest) = pair().await;
        let relays = tokio::task::spawn_local(async move {
            let stats = StreamStats::default();
            let client = Relay {
                stats: &stats,
                plain_is_lan: true,
            };
            let server = Relay {
                stats: &stats,
                plain_is_lan: false,
            };
            tokio::join!(
                client.run(lan, enc_c, cs, co),
                server.run(out, enc_s, ss, so)
            )
        });
        (app, dest, relays)
    }

    fn local(f: impl std::future::Future<Output = ()>) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        tokio::task::LocalSet::new().block_on(&rt, f);
    }

    #[test]
    fn half_closes_carry_both_directions_intact() {
        local(async {
            let (mut app, mut dest, relays) = chain().await;
            let request: Vec<u8> = (0..300_000u32).map(|i| (i * 7) as u8).collect();
            app.write_all(&request).await.unwrap();
            app.shutdown().await.unwrap();
            let mut got = Vec::new();
            dest.read_to_end(&mut got).await.unwrap();
            assert!(
                got == request,
                "request corrupted: {} of {} bytes",
                got.len(),
                request.len()
            );
            // The answer after the request's end: half-close kept the other way open.
            dest.write_all(b"answer").await.unwrap();
            dest.shutdown().await.unwrap();
            let mut answer = Vec::new();
            app.read_to_end(&mut answer).await.unwrap();
            assert_eq!(answer, b"answer");
            assert_eq!(relays.await.unwrap(), (Outcome::Closed, Outcome::Closed));
        });
    }

    #[test]
    fn a_reset_at_one_end_resets_the_other() {
        local(async {
            let (mut app, dest, relays) = chain().await;
            socket2::SockRef::from(&dest)
                .set_linger(Some(Duration::ZERO))
                .unwrap();
            drop(dest);
            let mut buf = [0u8; 16];
            let err = app.read(&mut buf).await.unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::ConnectionReset);
            assert_eq!(relays.await.unwrap(), (Outcome::Reset, Outcome::Reset));
        });
    }
}
