//! Zero-copy relaying between the client's and the chosen uplink's TCP connections with
//! splice(2): socket → pipe → socket, so payload pages move between the two sockets without
//! ever being copied into the daemon.
//!
//! Each direction owns a pipe (1 MiB when the system allows, else the default 64 KiB) and
//! alternates: fill the pipe from the source (waiting for readability), drain it completely
//! into the destination (waiting for writability). A clean EOF is passed on as a half-close
//! (`shutdown(SHUT_WR)`), so protocols that half-close keep working; an error in either
//! direction aborts both connections with an RST, so neither end waits for data that will
//! never come.
//!
//! Invariant: bytes are relayed in order and exactly once; a direction never reads more
//! from its source than the pipe holds, so a slow destination throttles its source through
//! TCP flow control rather than through memory in the daemon.

use nix::fcntl::{fcntl, splice, FcntlArg, OFlag, SpliceFFlags};
use std::cell::Cell;
use std::io;
use std::net::Shutdown;
use std::os::fd::{AsFd, OwnedFd};
use tokio::io::Interest;
use tokio::net::TcpStream;

/// Pipe capacity asked for (the kernel's default `pipe-max-size` is 1 MiB).
const PIPE_BYTES: usize = 1 << 20;

/// Bytes relayed in each direction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Relayed {
    /// Client → origin.
    pub up: u64,
    /// Origin → client.
    pub down: u64,
}

struct Pipe {
    r: OwnedFd,
    w: OwnedFd,
    cap: usize,
}

impl Pipe {
    fn new() -> io::Result<Pipe> {
        let (r, w) = nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)?;
        // A larger pipe means fewer wake-ups per byte; fall back to the default silently
        // when the system's pipe-max-size is lower.
        let cap = fcntl(&w, FcntlArg::F_SETPIPE_SZ(PIPE_BYTES as i32))
            .map(|n| n as usize)
            .unwrap_or(64 << 10);
        Ok(Pipe { r, w, cap })
    }
}

fn flags() -> SpliceFFlags {
    SpliceFFlags::SPLICE_F_MOVE | SpliceFFlags::SPLICE_F_NONBLOCK
}

/// Moves bytes from `from` to `to` until EOF (then half-closes `to`) or an error; `total`
/// counts what was written to `to`, also when the direction ends in an error.
async fn pump(from: &TcpStream, to: &TcpStream, total: &Cell<u64>) -> io::Result<()> {
    let pipe = Pipe::new()?;
    loop {
        let n = loop {
            from.readable().await?;
            match from.try_io(Interest::READABLE, || {
                splice(from.as_fd(), None, &pipe.w, None, pipe.cap, flags())
                    .map_err(io::Error::from)
            }) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        };
        if n == 0 {
            // Half-close: the peer may still send the other way.
            let _ = socket2::SockRef::from(to).shutdown(Shutdown::Write);
            return Ok(());
        }
        let mut left = n;
        while left > 0 {
            to.writable().await?;
            match to.try_io(Interest::WRITABLE, || {
                splice(&pipe.r, None, to.as_fd(), None, left, flags()).map_err(io::Error::from)
            }) {
                Ok(m) => {
                    left -= m;
                    total.set(total.get() + m as u64);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

/// Relays both directions until both have ended; on an error, resets both connections.
/// The bytes relayed are returned either way (a connection reset at its end, as bulk
/// senders often do, still carried them).
pub async fn relay(client: TcpStream, origin: TcpStream) -> (Relayed, io::Result<()>) {
    let (up, down) = (Cell::new(0), Cell::new(0));
    let res = tokio::try_join!(pump(&client, &origin, &up), pump(&origin, &client, &down));
    let relayed = Relayed {
        up: up.get(),
        down: down.get(),
    };
    match res {
        Ok(_) => (relayed, Ok(())),
        Err(e) => {
            // An RST (SO_LINGER 0) tells both ends at once that the stream is broken.
            super::attempt::reset(client);
            super::attempt::reset(origin);
            (relayed, Err(e))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// A relay between two loopback connection pairs carries 8 MiB each way intact and
    /// passes half-closes through.
    #[test]
    fn relays_both_ways_with_half_close() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        // The daemon's runtime is one thread: the relay is not `Send`.
        tokio::task::LocalSet::new().block_on(&rt, async {
            let l1 = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let l2 = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let mut client = TcpStream::connect(l1.local_addr().unwrap()).await.unwrap();
            let (client_side, _) = l1.accept().await.unwrap();
            let origin_side = TcpStream::connect(l2.local_addr().unwrap()).await.unwrap();
            let (mut origin, _) = l2.accept().await.unwrap();
            let relay = tokio::task::spawn_local(relay(client_side, origin_side));
            let data: Vec<u8> = (0..8u32 << 20).map(|i| (i * 7 + i / 4099) as u8).collect();
            let d2 = data.clone();
            let writer = tokio::spawn(async move {
                client.write_all(&d2).await.unwrap();
                client.shutdown().await.unwrap();
                let mut back = Vec::new();
                client.read_to_end(&mut back).await.unwrap();
                back
            });
            let mut got = Vec::new();
            origin.read_to_end(&mut got).await.unwrap();
            assert!(got == data, "upstream bytes differ");
            origin.write_all(&data[..1 << 20]).await.unwrap();
            origin.shutdown().await.unwrap();
            let back = writer.await.unwrap();
            assert!(back == data[..1 << 20], "downstream bytes differ");
            let (r, res) = relay.await.unwrap();
            res.unwrap();
            assert_eq!(
                r,
                Relayed {
                    up: 8 << 20,
                    down: 1 << 20
                }
            );
        });
    }
}
