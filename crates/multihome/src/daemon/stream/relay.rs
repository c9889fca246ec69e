//! Pumps one stream connection: the plain TCP connection (the LAN host's on the client,
//! the destination's on the server) on one side, the encrypted MPTCP connection on the
//! other, both directions at once.
//!
//! - Bytes read from the plain side go out as `Data` records; its end (read 0) as `Fin`,
//!   after which the far end half-closes; a reset (or any read error) as `Reset`.
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
            if end == End::Fin {
                // DATA_FIN: the far end's reader sees the stream end after our `Fin`.
                let _ = ew.shutdown().await;
            }
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
