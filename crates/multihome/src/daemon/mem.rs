//! In-memory implementations of the driver's I/O traits, so a real client and server run
//! through [`super::driver::Driver`] in one process, without root, namespaces or fds: the
//! test in `tests/driver.rs`.
//!
//! - [`MemNet`] is a lossless network of UDP addresses: a [`MemBind`] sends to an address,
//!   the bind that owns it receives, tagged with the sender's address. Each address holds
//!   at most [`MAILBOX_DATAGRAMS`] datagrams (drop-tail, like a socket buffer), so a
//!   sender faster than its receiver cannot grow memory without bound.
//! - [`device`] gives a [`MemDevice`] for the driver and a [`DeviceHandle`] for the host
//!   side: packets sent on the handle are read by the driver, packets the driver writes
//!   are collected on the handle.
//!
//! Everything is single-threaded (`Rc<RefCell<_>>`): the drivers run as tasks of one
//! current-thread runtime, like the daemons. A waiting driver is woken by whoever fills
//! its mailbox or device; datagram buffers are recycled, so a steady flow does not
//! allocate per datagram.

use super::io::{DatagramBind, PacketDevice, RECV_BATCH};
use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

/// Datagrams one address holds before new ones are dropped.
pub const MAILBOX_DATAGRAMS: usize = 4096;

#[derive(Default)]
struct Mailbox {
    queue: VecDeque<(SocketAddr, Vec<u8>)>,
    waker: Option<Waker>,
}

#[derive(Default)]
struct NetInner {
    boxes: HashMap<SocketAddr, Mailbox>,
    /// Emptied datagram buffers, reused by the next sends.
    spare: Vec<Vec<u8>>,
    /// Datagrams dropped: no such address, or its mailbox full.
    dropped: u64,
    /// `send` calls (a real bind's `sendmmsg`s) per sending address.
    sends: HashMap<SocketAddr, u64>,
}

/// A network of in-memory UDP addresses. Clones share it.
#[derive(Clone, Default)]
pub struct MemNet {
    inner: Rc<RefCell<NetInner>>,
}

impl MemNet {
    /// An empty network.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sockets at `locals` (socket `i` is `locals[i]`), receiving from now on.
    pub fn bind(&self, locals: Vec<SocketAddr>) -> MemBind {
        let mut net = self.inner.borrow_mut();
        for a in &locals {
            net.boxes.entry(*a).or_default();
        }
        MemBind {
            net: self.clone(),
            locals,
        }
    }

    /// Datagrams dropped so far.
    pub fn dropped(&self) -> u64 {
        self.inner.borrow().dropped
    }

    /// `send` calls made so far by the socket at `local` (a real bind makes one `sendmmsg`
    /// per call).
    pub fn sends_from(&self, local: SocketAddr) -> u64 {
        self.inner.borrow().sends.get(&local).copied().unwrap_or(0)
    }
}

/// Sockets on a [`MemNet`].
pub struct MemBind {
    net: MemNet,
    locals: Vec<SocketAddr>,
}

impl DatagramBind for MemBind {
    fn poll_readable(&mut self, cx: &mut Context<'_>) -> Poll<usize> {
        let mut net = self.net.inner.borrow_mut();
        for (i, a) in self.locals.iter().enumerate() {
            if let Some(b) = net.boxes.get_mut(a) {
                if !b.queue.is_empty() {
                    return Poll::Ready(i);
                }
                b.waker = Some(cx.waker().clone());
            }
        }
        Poll::Pending
    }

    fn recv(&mut self, sock: usize, mut f: impl FnMut(SocketAddr, &mut [u8])) -> io::Result<usize> {
        let local = self.locals.get(sock).ok_or(io::ErrorKind::WouldBlock)?;
        let mut n = 0;
        while n < RECV_BATCH {
            // Borrowed only to take the datagram: `f` runs the core, which does not touch
            // the network, but keeping the borrow short costs nothing.
            let next = self
                .net
                .inner
                .borrow_mut()
                .boxes
                .get_mut(local)
                .and_then(|b| b.queue.pop_front());
            let Some((from, mut data)) = next else { break };
            f(from, &mut data);
            self.net.inner.borrow_mut().spare.push(data);
            n += 1;
        }
        if n == 0 {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(n)
    }

    fn send(&mut self, sock: usize, msgs: &[(SocketAddr, &[u8])]) -> io::Result<usize> {
        let Some(&from) = self.locals.get(sock) else {
            return Ok(msgs.len());
        };
        let net = &mut *self.net.inner.borrow_mut();
        *net.sends.entry(from).or_default() += 1;
        for (dst, data) in msgs {
            match net.boxes.get_mut(dst) {
                Some(b) if b.queue.len() < MAILBOX_DATAGRAMS => {
                    let mut buf = net.spare.pop().unwrap_or_default();
                    buf.clear();
                    buf.extend_from_slice(data);
                    b.queue.push_back((from, buf));
                    if let Some(w) = b.waker.take() {
                        w.wake();
                    }
                }
                _ => net.dropped += 1,
            }
        }
        Ok(msgs.len())
    }

    fn send_failed(&mut self, _sock: usize, _e: &io::Error) -> bool {
        false // `send` never fails
    }
}

impl Drop for MemBind {
    fn drop(&mut self) {
        let mut net = self.net.inner.borrow_mut();
        for a in &self.locals {
            net.boxes.remove(a);
        }
    }
}

/// How the host answers a packet written to it: the answer, if any.
type Answer = dyn Fn(&[u8]) -> Option<Vec<u8>>;

#[derive(Default)]
struct DeviceInner {
    /// From the host, to be read by the driver.
    to_tunnel: VecDeque<Vec<u8>>,
    reader: Option<Waker>,
    /// Written by the driver, for the host.
    from_tunnel: Vec<Vec<u8>>,
    /// The host's stack answering a written packet at once, as the kernel answers a ping
    /// to its own address while the TUN write is processed.
    answer: Option<Box<Answer>>,
}

/// The driver's side of an in-memory device.
pub struct MemDevice {
    inner: Rc<RefCell<DeviceInner>>,
}

/// The host's side of an in-memory device.
#[derive(Clone)]
pub struct DeviceHandle {
    inner: Rc<RefCell<DeviceInner>>,
}

/// A connected device and host handle.
pub fn device() -> (MemDevice, DeviceHandle) {
    let inner = Rc::new(RefCell::new(DeviceInner::default()));
    (
        MemDevice {
            inner: inner.clone(),
        },
        DeviceHandle { inner },
    )
}

impl DeviceHandle {
    /// An IP packet from the host into the tunnel (the driver reads it).
    pub fn send(&self, packet: Vec<u8>) {
        let mut d = self.inner.borrow_mut();
        d.to_tunnel.push_back(packet);
        if let Some(w) = d.reader.take() {
            w.wake();
        }
    }

    /// Makes the host answer each packet the driver writes with what `answer` returns,
    /// queued for the driver before the write returns (and its reader woken).
    pub fn answer_at_once(&self, answer: impl Fn(&[u8]) -> Option<Vec<u8>> + 'static) {
        self.inner.borrow_mut().answer = Some(Box::new(answer));
    }

    /// Takes the IP packets the tunnel delivered to the host so far.
    pub fn take_received(&self) -> Vec<Vec<u8>> {
        std::mem::take(&mut self.inner.borrow_mut().from_tunnel)
    }
}

impl PacketDevice for MemDevice {
    fn poll_readable(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut d = self.inner.borrow_mut();
        if d.to_tunnel.is_empty() {
            d.reader = Some(cx.waker().clone());
            return Poll::Pending;
        }
        Poll::Ready(Ok(()))
    }

    fn read_packets(&mut self, mut f: impl FnMut(&[u8])) -> io::Result<()> {
        // One packet per read, as a TUN device without offload.
        let p = self.inner.borrow_mut().to_tunnel.pop_front();
        match p {
            Some(p) => {
                f(&p);
                Ok(())
            }
            None => Err(io::ErrorKind::WouldBlock.into()),
        }
    }

    fn write_packet(&mut self, packet: &[u8]) {
        let mut d = self.inner.borrow_mut();
        d.from_tunnel.push(packet.to_vec());
        if let Some(reply) = d.answer.as_ref().and_then(|a| a(packet)) {
            d.to_tunnel.push_back(reply);
            if let Some(w) = d.reader.take() {
                w.wake();
            }
        }
    }

    fn flush(&mut self) {}
}
