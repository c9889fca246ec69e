//! The keypairs of a session: the one in use, the one being replaced, and (server side) a
//! freshly negotiated one not yet confirmed by the client.
//!
//! Rekeying never interrupts traffic: datagrams sealed under the previous keypair that are
//! still in flight open fine, and the server starts sealing with a new keypair only once
//! the client has proved it holds it (its first datagram under it), as in WireGuard.
//! Invariant: each keypair has its own nonce counter and replay window; a keypair is
//! dropped before its counter could wrap.

use crate::crypto::{OpenKey, SealKey, TransportKeys};
use crate::replay::ReplayWindow;
use crate::Instant;

/// One negotiated keypair.
pub struct Keypair {
    /// Index the peer puts in datagrams to us.
    pub local_index: u32,
    /// Index we put in datagrams to the peer.
    pub remote_index: u32,
    /// Sealing key and counter.
    pub seal: SealKey,
    /// Opening key.
    pub open: OpenKey,
    /// Replay window over the peer's counters.
    pub replay: ReplayWindow,
    /// When it was negotiated.
    pub created: Instant,
}

impl Keypair {
    /// A keypair from a finished handshake.
    pub fn new(local_index: u32, remote_index: u32, keys: TransportKeys, now: Instant) -> Self {
        Keypair {
            local_index,
            remote_index,
            seal: keys.seal,
            open: keys.open,
            replay: ReplayWindow::new(),
            created: now,
        }
    }

    /// Whether either direction has sealed enough messages under it that the client
    /// should negotiate a new one (`DataCipher::rekey_after_messages`; it matters for
    /// AES-GCM). Our own counter and the highest counter the peer used both count, so
    /// the client also rekeys for a server that sends far more than it does.
    pub fn worn(&self) -> bool {
        let limit = self.seal.suite().rekey_after_messages();
        self.seal.counter() >= limit || self.replay.highest().is_some_and(|h| h >= limit)
    }
}

/// Which slot a received datagram's index matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    /// The keypair in use.
    Current,
    /// The one being replaced.
    Previous,
    /// Negotiated but not yet confirmed.
    Next,
}

/// Up to three keypairs, each boxed: a keypair is about 1.1 KB (two AEAD key schedules)
/// and a session usually holds one, so the two empty slots cost a pointer each rather
/// than a keypair's size (an idle session's memory, issue 20).
#[derive(Default)]
pub struct Keyring {
    /// In use for sending.
    pub current: Option<Box<Keypair>>,
    /// Still accepted for receiving.
    pub previous: Option<Box<Keypair>>,
    /// Server side: negotiated, promoted on the first datagram received under it.
    pub next: Option<Box<Keypair>>,
}

impl Keyring {
    /// Finds the keypair for a receiver index.
    pub fn find(&mut self, index: u32) -> Option<(Slot, &mut Keypair)> {
        if let Some(k) = self
            .current
            .as_deref_mut()
            .filter(|k| k.local_index == index)
        {
            return Some((Slot::Current, k));
        }
        if let Some(k) = self.next.as_deref_mut().filter(|k| k.local_index == index) {
            return Some((Slot::Next, k));
        }
        self.previous
            .as_deref_mut()
            .filter(|k| k.local_index == index)
            .map(|k| (Slot::Previous, k))
    }

    /// Installs a keypair for immediate use (client, on the handshake response).
    pub fn install_current(&mut self, k: Keypair) {
        self.previous = self.current.replace(Box::new(k));
    }

    /// Installs a keypair awaiting confirmation (server, after answering a rekey).
    pub fn install_next(&mut self, k: Keypair) {
        self.next = Some(Box::new(k));
    }

    /// Promotes `next` to `current` (the peer used it).
    pub fn promote_next(&mut self) {
        if let Some(n) = self.next.take() {
            self.previous = self.current.replace(n);
        }
    }

    /// Drops the previous keypair once the current one has been in use for `grace`
    /// (no datagram sealed under the old one can still be in flight by then).
    pub fn expire_previous(&mut self, now: Instant, grace: core::time::Duration) {
        if self
            .current
            .as_ref()
            .is_some_and(|k| now.saturating_since(k.created) > grace)
        {
            self.previous = None;
        }
    }

    /// All local indices in use (for the server's index map).
    pub fn indices(&self) -> impl Iterator<Item = u32> + '_ {
        [&self.current, &self.previous, &self.next]
            .into_iter()
            .flatten()
            .map(|k| k.local_index)
    }
}
