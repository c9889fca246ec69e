//! A server's listening port shared by one socket per thread (`SO_REUSEPORT`), with a
//! classic BPF program on the group (`SO_ATTACH_REUSEPORT_CBPF`) that sends each data
//! datagram to the socket of the thread owning its session.
//!
//! The program reads the UDP payload: for a data datagram (first byte 3) it returns the
//! receiver index (bytes 4..8, big-endian, docs/PROTOCOL.md §2) modulo the number of
//! sockets — the socket's position in the group, which is the order of binding; for
//! anything else it returns an index past the group, and the kernel falls back to its hash
//! of the source address and port, which spreads handshake initiations (and floods of
//! them) over all threads. A data datagram too short to hold an index aborts the program,
//! which returns 0: the first socket gets it, and its core counts it as garbage.
//!
//! Invariants: the sockets are bound in order and none is closed while the others run (a
//! closed socket would renumber the group); all are bound by the same user (the kernel
//! lets only the same effective UID join a group).

use super::{LinkSocket, UdpError};
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;

/// Binds `n` sockets on `local` as one group and attaches the steering program (with one
/// socket: a plain socket, no program). A port of 0 is chosen by the kernel for the first
/// and shared by the others.
pub fn bind_group(local: SocketAddr, n: u16) -> Result<Vec<LinkSocket>, UdpError> {
    if n <= 1 {
        return Ok(vec![LinkSocket::bind(None, local)?]);
    }
    let first = LinkSocket::bind_with(None, local, true)?;
    let at = first
        .local_addr()
        .map_err(|source| UdpError::Bind { local, source })?;
    attach(&first, n).map_err(|source| UdpError::Socket { local, source })?;
    let mut group = vec![first];
    for _ in 1..n {
        group.push(LinkSocket::bind_with(None, at, true)?);
    }
    Ok(group)
}

/// The program: `ldb [0]; jeq #3, +0, +3; ld [4]; mod #n; ret a; ret #u32::MAX`.
pub fn program(n: u16) -> [libc::sock_filter; 6] {
    let op = |code: u32, jt: u8, jf: u8, k: u32| libc::sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    };
    [
        op(libc::BPF_LD | libc::BPF_B | libc::BPF_ABS, 0, 0, 0),
        op(libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K, 0, 3, 3),
        op(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 0, 0, 4),
        op(
            libc::BPF_ALU | libc::BPF_MOD | libc::BPF_K,
            0,
            0,
            u32::from(n),
        ),
        op(libc::BPF_RET | libc::BPF_A, 0, 0, 0),
        op(libc::BPF_RET | libc::BPF_K, 0, 0, u32::MAX),
    ]
}

fn attach(sock: &LinkSocket, n: u16) -> io::Result<()> {
    let mut prog = program(n);
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_mut_ptr(),
    };
    // SAFETY: the kernel copies the program out of `prog`, which outlives the call.
    let r = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_REUSEPORT_CBPF,
            (&fprog as *const libc::sock_fprog).cast(),
            std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    match r {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;

    fn data(index: u32) -> Vec<u8> {
        let mut d = vec![3u8, 0, 0, 0];
        d.extend_from_slice(&index.to_be_bytes());
        d.extend_from_slice(&[0u8; 24]);
        d
    }

    /// Reads what socket `s` holds now (nonblocking).
    fn drain(s: &LinkSocket) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut buf = [0u8; 256];
        while let Ok((n, _)) = s.recv_from(&mut buf) {
            out.push(buf[..n].to_vec());
        }
        out
    }

    #[test]
    fn a_data_datagram_reaches_the_socket_its_index_names() {
        let group = bind_group("127.0.0.1:0".parse().unwrap(), 3).unwrap();
        let at = group[0].local_addr().unwrap();
        assert!(group.iter().all(|s| s.local_addr().unwrap() == at));
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        for index in 0..30u32 {
            tx.send_to(&data(index.wrapping_mul(0x9e37_79b9)), at)
                .unwrap();
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        let mut total = 0;
        for (i, s) in group.iter().enumerate() {
            for d in drain(s) {
                let index = u32::from_be_bytes([d[4], d[5], d[6], d[7]]);
                assert_eq!(index as usize % 3, i, "index {index} on socket {i}");
                total += 1;
            }
        }
        assert_eq!(total, 30);
    }

    #[test]
    fn other_datagrams_are_spread_by_source() {
        let group = bind_group("127.0.0.1:0".parse().unwrap(), 2).unwrap();
        let at = group[0].local_addr().unwrap();
        // Many sources: the kernel's hash puts some on each socket.
        let senders: Vec<UdpSocket> = (0..32)
            .map(|_| UdpSocket::bind("127.0.0.1:0").unwrap())
            .collect();
        for s in &senders {
            s.send_to(&[1u8; 148], at).unwrap();
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        let got: Vec<usize> = group.iter().map(|s| drain(s).len()).collect();
        assert_eq!(got.iter().sum::<usize>(), 32);
        assert!(got.iter().all(|&n| n > 0), "spread {got:?}");
    }
}
