//! Thin, safe wrappers over the Linux calls linkem needs and no crate wraps for us:
//! AF_PACKET with virtio-net headers, recvmmsg/sendmmsg, ppoll with nanosecond timeouts,
//! eventfd, and the per-thread timer slack.

pub mod packet;
pub mod wait;
