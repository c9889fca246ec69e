//! Kernel MPTCP's userspace path manager over generic netlink (family `mptcp_pm`).
//!
//! Role: [`PmEvents`] reads the path-manager events of the calling thread's network
//! namespace (multicast group `mptcp_pm_events`: connection created / established / closed,
//! subflow established / closed); [`Pm`] sends commands: create a subflow from a chosen
//! local address *and port* to any remote (`MPTCP_PM_CMD_SUBFLOW_CREATE`), destroy one
//! (`MPTCP_PM_CMD_SUBFLOW_DESTROY`), tell the peer a local address is gone
//! (`MPTCP_PM_CMD_REMOVE`, REMOVE_ADDR). With `net.mptcp.pm_type = 1` (`path_manager =
//! userspace`) the kernel creates no subflow by itself; [`set_userspace_pm`] switches it.
//!
//! Invariants:
//! - Commands wait for the kernel's acknowledgement; a refusal is a
//!   [`NetlinkError::Kernel`] with the errno and the operation (the kernel's extended ack
//!   text is not decoded; `EINVAL` usually means "not a userspace-PM connection" or "local
//!   id already used for another address").
//! - The events socket is non-blocking and only ever read; an overflow (`ENOBUFS`) loses
//!   events, counted in [`PmEvents::overruns`] (connections whose events were lost get no
//!   detours; nothing else goes wrong).
//!
//! Messages are built and parsed with `netlink-packet-generic`; the sockets are
//! `netlink-sys`. Layout and byte orders: `msg.rs`.

mod msg;
mod sockopt;

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};

use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_REQUEST,
};
use netlink_packet_generic::ctrl::nlas::{GenlCtrlAttrs, McastGrpAttrs};
use netlink_packet_generic::ctrl::{GenlCtrl, GenlCtrlCmd};
use netlink_packet_generic::GenlMessage;
use netlink_sys::{protocols::NETLINK_GENERIC, Socket, SocketAddr as NlAddr};

pub use msg::{
    decode_event, MptcpEvent, PmAddr, PmMessage, CMD_GET_LIMITS, CMD_REMOVE, CMD_SET_LIMITS,
    CMD_SUBFLOW_CREATE, CMD_SUBFLOW_DESTROY,
};
pub use sockopt::{mptcp_info, subflow_addrs, MptcpInfo};

use crate::netlink::NetlinkError;
use crate::sysctl::{self, SysctlError};
use crate::udp::LinkSocket;

const RECV_BUF: usize = 64 * 1024;
/// Room for bursts of events (many connections opening at once) before the kernel drops.
const EVENTS_RCVBUF: usize = 1 << 20;

fn sock_err(op: &str) -> impl Fn(io::Error) -> NetlinkError + '_ {
    move |source| NetlinkError::Socket {
        op: op.to_owned(),
        source,
    }
}

fn open_socket(op: &str) -> Result<Socket, NetlinkError> {
    let mut sock = Socket::new(NETLINK_GENERIC).map_err(sock_err(op))?;
    sock.bind_auto().map_err(sock_err(op))?;
    sock.connect(&NlAddr::new(0, 0)).map_err(sock_err(op))?;
    Ok(sock)
}

/// The `mptcp_pm` family id and the events group id of the running kernel.
fn resolve(sock: &mut Socket) -> Result<(u16, u32), NetlinkError> {
    let op = "look up the mptcp_pm generic-netlink family";
    let req = GenlMessage::from_payload(GenlCtrl {
        cmd: GenlCtrlCmd::GetFamily,
        nlas: vec![GenlCtrlAttrs::FamilyName(msg::FAMILY_NAME.to_owned())],
    });
    let replies = exchange(sock, 1, req, op)?;
    let mut family = None;
    let mut group = None;
    for r in replies {
        for nla in r.payload.nlas {
            match nla {
                GenlCtrlAttrs::FamilyId(id) => family = Some(id),
                GenlCtrlAttrs::McastGroups(groups) => {
                    for g in groups {
                        let named = g
                            .iter()
                            .any(|a| matches!(a, McastGrpAttrs::Name(n) if n == msg::EVENTS_GROUP));
                        let id = g.iter().find_map(|a| match a {
                            McastGrpAttrs::Id(id) => Some(*id),
                            _ => None,
                        });
                        if named {
                            group = id;
                        }
                    }
                }
                _ => {}
            }
        }
    }
    match (family, group) {
        (Some(f), Some(g)) => Ok((f, g)),
        _ => Err(NetlinkError::Decode {
            op: op.to_owned(),
            detail: "the reply names no family id or no mptcp_pm_events group".into(),
        }),
    }
}

/// Sends one request and collects its replies until the ack (or `Done`).
fn exchange<F>(
    sock: &mut Socket,
    seq: u32,
    msg: GenlMessage<F>,
    op: &str,
) -> Result<Vec<GenlMessage<F>>, NetlinkError>
where
    F: netlink_packet_generic::GenlFamily
        + netlink_packet_core::Emitable
        + netlink_packet_core::ParseableParametrized<[u8], netlink_packet_generic::GenlHeader>
        + std::fmt::Debug,
{
    let mut hdr = NetlinkHeader::default();
    hdr.flags = NLM_F_REQUEST | NLM_F_ACK;
    hdr.sequence_number = seq;
    let mut nl = NetlinkMessage::new(hdr, NetlinkPayload::from(msg));
    nl.finalize();
    let mut out = vec![0u8; nl.buffer_len()];
    nl.serialize(&mut out);
    retry_eintr(|| sock.send(&out, 0)).map_err(sock_err(op))?;
    let mut buf = vec![0u8; RECV_BUF];
    let mut replies = Vec::new();
    loop {
        let n = retry_eintr(|| sock.recv(&mut &mut buf[..], 0)).map_err(sock_err(op))?;
        let mut off = 0;
        while off < n {
            let m = NetlinkMessage::<GenlMessage<F>>::deserialize(&buf[off..n]).map_err(|e| {
                NetlinkError::Decode {
                    op: op.to_owned(),
                    detail: e.to_string(),
                }
            })?;
            let len = m.header.length as usize;
            if len == 0 {
                break;
            }
            off += (len + 3) & !3;
            if m.header.sequence_number != seq {
                continue;
            }
            match m.payload {
                NetlinkPayload::Error(e) if e.code.is_none() => return Ok(replies),
                NetlinkPayload::Error(e) => {
                    return Err(NetlinkError::Kernel {
                        op: op.to_owned(),
                        source: e.to_io(),
                    })
                }
                NetlinkPayload::Done(_) => return Ok(replies),
                NetlinkPayload::InnerMessage(inner) => replies.push(inner),
                _ => {}
            }
        }
    }
}

fn retry_eintr<T>(mut f: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    loop {
        match f() {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            r => return r,
        }
    }
}

/// Commands to the MPTCP path manager (one socket, requests answered in turn).
pub struct Pm {
    sock: Socket,
    family: u16,
    group: u32,
    seq: u32,
}

impl Pm {
    /// Opens a generic-netlink socket and resolves the `mptcp_pm` family. Fails with a
    /// `Decode`/`Kernel` error naming the family on a kernel without MPTCP.
    pub fn open() -> Result<Pm, NetlinkError> {
        let mut sock = open_socket("open a generic-netlink socket for MPTCP")?;
        let (family, group) = resolve(&mut sock)?;
        Ok(Pm {
            sock,
            family,
            group,
            seq: 1,
        })
    }

    fn command(&mut self, m: PmMessage, op: &str) -> Result<(), NetlinkError> {
        self.seq = self.seq.wrapping_add(1);
        let mut g = GenlMessage::from_payload(m);
        g.set_resolved_family_id(self.family);
        exchange(&mut self.sock, self.seq, g, op).map(|_| ())
    }

    /// Creates a subflow of connection `token` from `local` (address and port; port 0 lets
    /// the kernel choose) with local address id `local_id` to `remote`. The id must be
    /// unused in that connection for any other local address and port.
    pub fn subflow_create(
        &mut self,
        token: u32,
        local_id: u8,
        local: SocketAddr,
        remote: SocketAddr,
    ) -> Result<(), NetlinkError> {
        self.subflow_create_on(token, local_id, local, None, remote)
    }

    /// As [`Pm::subflow_create`], the subflow bound to interface `ifindex` (if given), so
    /// it leaves by that link whatever the routing tables say.
    pub fn subflow_create_on(
        &mut self,
        token: u32,
        local_id: u8,
        local: SocketAddr,
        ifindex: Option<u32>,
        remote: SocketAddr,
    ) -> Result<(), NetlinkError> {
        let l = PmAddr {
            addr: local,
            id: Some(local_id),
            flags: Some(msg::FLAG_SUBFLOW),
            ifindex,
        };
        self.command(
            PmMessage::subflow(CMD_SUBFLOW_CREATE, token, l, remote),
            &format!("create an MPTCP subflow {local} -> {remote} (token {token})"),
        )
    }

    /// Closes the subflow `local` → `remote` of connection `token` (ESRCH if none).
    pub fn subflow_destroy(
        &mut self,
        token: u32,
        local: SocketAddr,
        remote: SocketAddr,
    ) -> Result<(), NetlinkError> {
        let l = PmAddr {
            addr: local,
            id: None,
            flags: None,
            ifindex: None,
        };
        self.command(
            PmMessage::subflow(CMD_SUBFLOW_DESTROY, token, l, remote),
            &format!("destroy the MPTCP subflow {local} -> {remote} (token {token})"),
        )
    }

    /// Sends REMOVE_ADDR for local address `id` of connection `token` (userspace path
    /// manager): the peer closes its subflows to that address and resends what they had in
    /// flight over the others. Our own subflows from that address stay (close them with
    /// [`Pm::subflow_destroy`], after this: the kernel forgets the id when its subflow is
    /// destroyed). Id 0 is the initial subflow's address; another id must be one a
    /// subflow was created with and still has a subflow, or the kernel answers `EINVAL`.
    /// The kernel sends the option once, on a pure ACK (no retransmission), on an active
    /// subflow; since Linux 7.0 (and its stable backports) not on one of the removed id.
    pub fn remove_addr(&mut self, token: u32, id: u8) -> Result<(), NetlinkError> {
        self.command(
            PmMessage::remove(token, id),
            &format!("remove local address id {id} of MPTCP connection {token}"),
        )
    }

    /// Raises the in-kernel path manager's per-connection subflow limit of this namespace
    /// to at least `subflows` (the passive side accepts no more joins than that); returns
    /// the limit in force. Never lowers it.
    pub fn raise_subflow_limit(&mut self, subflows: u32) -> Result<u32, NetlinkError> {
        self.seq = self.seq.wrapping_add(1);
        let mut g = GenlMessage::from_payload(PmMessage::limits(CMD_GET_LIMITS, None));
        g.set_resolved_family_id(self.family);
        let replies = exchange(&mut self.sock, self.seq, g, "read the MPTCP limits")?;
        let (now, add_addrs) = replies
            .iter()
            .find_map(|r| r.payload.decode_limits())
            .unwrap_or((0, 0));
        if now >= subflows {
            return Ok(now);
        }
        self.command(
            PmMessage::limits(CMD_SET_LIMITS, Some((subflows, add_addrs))),
            &format!("raise the MPTCP subflow limit to {subflows}"),
        )?;
        Ok(subflows)
    }

    /// Subscribes a new, non-blocking socket to the path-manager events.
    pub fn events(&self) -> Result<PmEvents, NetlinkError> {
        let op = "subscribe to MPTCP path-manager events";
        let sock = open_socket(op)?;
        sock.add_membership(self.group).map_err(sock_err(op))?;
        // Best effort: a smaller buffer only makes overruns likelier.
        let _ = sock.set_rx_buf_sz(EVENTS_RCVBUF);
        sock.set_non_blocking(true).map_err(sock_err(op))?;
        Ok(PmEvents {
            sock,
            buf: vec![0; RECV_BUF],
            overruns: 0,
        })
    }
}

/// The path-manager event stream (read when its fd is readable).
pub struct PmEvents {
    sock: Socket,
    buf: Vec<u8>,
    overruns: u64,
}

impl PmEvents {
    /// Appends every queued event to `out`; returns how many. Undecodable messages are
    /// skipped.
    pub fn poll_events(&mut self, out: &mut Vec<MptcpEvent>) -> Result<usize, NetlinkError> {
        let start = out.len();
        loop {
            match self.sock.recv(&mut &mut self.buf[..], 0) {
                Ok(n) => self.datagram(n, out),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => self.overruns += 1,
                Err(e) => return Err(sock_err("read MPTCP events")(e)),
            }
        }
        Ok(out.len() - start)
    }

    fn datagram(&mut self, n: usize, out: &mut Vec<MptcpEvent>) {
        let mut off = 0;
        while off < n {
            let Ok(m) = NetlinkMessage::<GenlMessage<PmMessage>>::deserialize(&self.buf[off..n])
            else {
                return; // without a header the next message's start is unknown
            };
            let len = m.header.length as usize;
            if len == 0 {
                return;
            }
            off += (len + 3) & !3;
            if let NetlinkPayload::InnerMessage(g) = m.payload {
                out.push(decode_event(&g.payload));
            }
        }
    }

    /// Times the kernel dropped events for lack of buffer.
    pub fn overruns(&self) -> u64 {
        self.overruns
    }
}

impl AsRawFd for PmEvents {
    fn as_raw_fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }
}

impl AsFd for PmEvents {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }
}

/// Binds a UDP socket to (`ip`, a port the kernel picks) whose port number is also free
/// for TCP on `ip` right now (checked by binding a TCP socket there, without
/// `SO_REUSEADDR`, and closing it): the relay request goes out from this socket and the
/// MPTCP subflow is then created from the same address and port. Tries 16 ports.
pub fn bind_detour_socket(ip: IpAddr) -> io::Result<LinkSocket> {
    let mut last = io::Error::from(io::ErrorKind::AddrInUse);
    for _ in 0..16 {
        let udp = LinkSocket::bind(None, SocketAddr::new(ip, 0)).map_err(io::Error::other)?;
        let local = udp.local_addr()?;
        let tcp = socket2::Socket::new(
            socket2::Domain::for_address(local),
            socket2::Type::STREAM,
            Some(socket2::Protocol::TCP),
        )?;
        match tcp.bind(&local.into()) {
            Ok(()) => return Ok(udp),
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// Reads `net.mptcp.pm_type` (0 in-kernel, 1 userspace) of the calling thread's namespace.
pub fn pm_type() -> Result<u8, SysctlError> {
    Ok(sysctl::read("net.mptcp.pm_type")?
        .trim()
        .parse()
        .unwrap_or(0))
}

/// Sets `net.mptcp.pm_type` (1: the userspace path manager; connections created from then
/// on get no subflow from the in-kernel path manager).
pub fn set_pm_type(v: u8) -> Result<(), SysctlError> {
    sysctl::write("net.mptcp.pm_type", &v.to_string())
}

/// Switches the namespace to the userspace path manager; returns the previous type.
pub fn set_userspace_pm() -> Result<u8, SysctlError> {
    let old = pm_type()?;
    if old != 1 {
        set_pm_type(1)?;
    }
    Ok(old)
}
