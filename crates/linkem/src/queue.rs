//! The drop-tail queue in front of the rate stage.
//!
//! Frames wait here until the rate stage has served them; the frame being serialised stays at
//! the head (and counts against the limits) until its last byte is out, as on a real NIC ring.
//! Invariants: `bytes` is the sum of the frames' sizes; a frame is admitted only if, with it,
//! neither the byte nor the packet limit is exceeded (drop-tail: the arriving frame is the one
//! that is dropped); a limit of `None` means unlimited.

use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::time::Duration;

/// Queue limits; a frame that would exceed either is dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct QueueLimits {
    /// Maximum queued bytes (frame sizes as seen on the wire).
    pub bytes: Option<u64>,
    /// Maximum queued frames.
    pub packets: Option<u64>,
}

/// A frame in the queue.
#[derive(Debug)]
pub struct Queued<P> {
    /// The frame itself (opaque to the model).
    pub payload: P,
    /// Its size on the wire.
    pub bytes: u64,
    /// When it entered the queue.
    pub arrival: Duration,
    /// Bytes not yet serialised (less than `bytes` only for a head frame caught by a rate
    /// change half-way).
    pub remaining: u64,
}

/// A FIFO bounded in bytes and/or frames.
#[derive(Debug)]
pub struct DropTailQueue<P> {
    items: VecDeque<Queued<P>>,
    bytes: u64,
    limits: QueueLimits,
}

impl<P> DropTailQueue<P> {
    /// An empty queue with these limits.
    pub fn new(limits: QueueLimits) -> Self {
        DropTailQueue {
            items: VecDeque::new(),
            bytes: 0,
            limits,
        }
    }

    /// Changes the limits; frames already queued stay (a shrinking limit only refuses new
    /// arrivals, as when tc changes a qdisc's limit).
    pub fn set_limits(&mut self, limits: QueueLimits) {
        self.limits = limits;
    }

    /// The limits.
    pub fn limits(&self) -> QueueLimits {
        self.limits
    }

    /// Whether a frame of `bytes` fits.
    pub fn admits(&self, bytes: u64) -> bool {
        let fits_bytes = self.limits.bytes.is_none_or(|l| self.bytes + bytes <= l);
        let fits_packets = self
            .limits
            .packets
            .is_none_or(|l| (self.items.len() as u64) < l);
        fits_bytes && fits_packets
    }

    /// Appends a frame; the caller checked [`Self::admits`].
    pub fn push(&mut self, payload: P, bytes: u64, arrival: Duration) {
        self.bytes += bytes;
        self.items.push_back(Queued {
            payload,
            bytes,
            arrival,
            remaining: bytes,
        });
    }

    /// The head frame.
    pub fn front(&self) -> Option<&Queued<P>> {
        self.items.front()
    }

    /// The head frame, mutably (to record partial service).
    pub fn front_mut(&mut self) -> Option<&mut Queued<P>> {
        self.items.front_mut()
    }

    /// Removes the head frame.
    pub fn pop(&mut self) -> Option<Queued<P>> {
        let q = self.items.pop_front()?;
        self.bytes -= q.bytes;
        Some(q)
    }

    /// Removes every frame, returning (frames, bytes) removed.
    pub fn flush(&mut self) -> (u64, u64) {
        let removed = (self.items.len() as u64, self.bytes);
        self.items.clear();
        self.bytes = 0;
        removed
    }

    /// Frames queued.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Bytes queued.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_and_packet_limits() {
        let mut q = DropTailQueue::new(QueueLimits {
            bytes: Some(3000),
            packets: Some(3),
        });
        assert!(q.admits(1500));
        q.push(1, 1500, Duration::ZERO);
        q.push(2, 1500, Duration::ZERO);
        assert!(!q.admits(1), "byte limit");
        q.set_limits(QueueLimits {
            bytes: None,
            packets: Some(3),
        });
        assert!(q.admits(9000));
        q.push(3, 100, Duration::ZERO);
        assert!(!q.admits(1), "packet limit");
        assert_eq!((q.len(), q.bytes()), (3, 3100));
        assert_eq!(q.pop().map(|f| f.payload), Some(1));
        assert_eq!(q.bytes(), 1600);
        assert_eq!(q.flush(), (2, 1600));
        assert!(q.is_empty() && q.admits(1_000_000));
    }
}
