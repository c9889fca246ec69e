//! Linux I/O layer of multihome: everything that touches the kernel.
//!
//! Role: give the daemon (a tokio current-thread runtime that wraps raw file descriptors in
//! `tokio::io::unix::AsyncFd`) small, synchronous, nonblocking building blocks:
//!
//! - [`tun`]: the TUN device carrying the tunnelled IP packets (optionally with TSO offload
//!   and the [`tun::split_gso`] helper that cuts super-packets into MTU-sized packets, and
//!   [`tun::GroBatch`] that merges received TCP segments into super-packets);
//! - [`udp`]: one UDP socket per local link, pinned to its interface, with batched
//!   `recvmmsg`/`sendmmsg` I/O and UDP segmentation / receive offload (GSO, GRO);
//! - [`netlink`]: link/address change notifications and link, address and route changes;
//! - [`nat`]: the server's nftables masquerade;
//! - [`dup`], [`dup_server`]: the kernel fast path for redundant copies (client, server);
//! - [`detour`]: the relay's nftables DNAT + SNAT per detour (`multihome relay`);
//! - [`mptcp`]: kernel MPTCP's userspace path manager (events, subflow create/destroy);
//! - [`sysctl`]: reading and writing `/proc/sys` (IP forwarding);
//! - [`netns`]: throw-away network namespaces for tests, benchmarks and the lab.
//!
//! Invariants shared by every module: file descriptors are owned (closed on drop), opened
//! close-on-exec and nonblocking; no call here blocks on the network (netlink requests wait
//! only for the kernel's own reply); nothing here spawns threads except [`netns::NetNs::run`].
//! Linux only.

#![cfg(target_os = "linux")]

pub mod detour;
pub mod dup;
pub mod dup_server;
pub mod mptcp;
pub mod nat;
pub mod netlink;
pub mod netns;
pub mod sysctl;
pub mod tun;
pub mod udp;
