//! The handshake messages the server owes, between two drains by its caller
//! (`Server::poll_transmit`): responses to handshakes it completed, and cookie replies to
//! initiations it refused under load (docs/PROTOCOL.md §3.5, "Replies under load").
//!
//! Why two queues. Under a flood, the cookie replies owed between two drains can outnumber
//! what the server may hold (`MAX_COOKIE_REPLIES`). A response, though, answers an
//! initiation that proved its address, passed the rate limit and cost a Diffie-Hellman,
//! after which the server has installed the keys: dropping it wastes that work and leaves
//! the client waiting for its next retry. So responses have a queue of their own, sent
//! first, which a flood cannot fill (each entry needs a valid cookie and a configured key).
//!
//! Why a sample. Cookie replies beyond the bound are not the newest ones dropped: the
//! initiations refused since the queue was last empty are sampled uniformly (reservoir
//! sampling, Vitter's Algorithm R in *Random Sampling with a Reservoir*, ACM TOMS 1985), so
//! a flood that arrives as a burst ahead of a legitimate initiation does not take every
//! slot before it: each gets a reply with the same chance, `MAX_COOKIE_REPLIES` over the
//! number refused. A reply is sealed only when it is sent, so a sampled-out one cost no
//! AEAD.
//!
//! Invariants: at most `MAX_RESPONSES` responses and `MAX_COOKIE_REPLIES` cookie replies
//! are held; the draw comes from the server's RNG (deterministic for a seed, sans-IO).

use super::guard::Guard;
use crate::crypto::cookie::Mac16;
use crate::path::PathId;
use crate::session::Transmit;
use crate::wire::{outer, COOKIE_REPLY_LEN};
use crate::Instant;
use rand_core::RngCore;
use std::collections::VecDeque;
use std::net::SocketAddr;

/// Most handshake responses held for `poll_transmit`: a caller that stops draining them
/// cannot make the queue grow.
pub const MAX_RESPONSES: usize = 4096;
/// Most cookie replies held between two drains (the rest of the initiations refused
/// meanwhile get none: their clients retry, §3.3).
pub const MAX_COOKIE_REPLIES: usize = 4096;

/// A cookie reply owed: what sealing it at send time needs.
struct Owed {
    path: u8,
    index: u32,
    to: SocketAddr,
    mac1: Mac16,
}

/// Responses, then cookie replies.
#[derive(Default)]
pub struct Replies {
    responses: VecDeque<(PathId, SocketAddr, Vec<u8>)>,
    cookies: Vec<Owed>,
    /// Initiations owed a cookie reply since `cookies` was last empty (the sample's
    /// population).
    seen: u64,
}

impl Replies {
    /// Queues a handshake response to `to` on `path` (dropped only past `MAX_RESPONSES`).
    pub fn respond(&mut self, path: PathId, to: SocketAddr, msg: Vec<u8>) {
        if self.responses.len() < MAX_RESPONSES {
            self.responses.push_back((path, to, msg));
        }
    }

    /// Owes a cookie reply to the initiation from `to` (sender index `index`, path
    /// `path`, mac1 `mac1`): kept if there is room, else in place of a random one held
    /// with probability `MAX_COOKIE_REPLIES / seen`.
    pub fn owe_cookie(
        &mut self,
        rng: &mut impl RngCore,
        path: u8,
        index: u32,
        to: SocketAddr,
        mac1: Mac16,
    ) {
        self.seen += 1;
        let owed = Owed {
            path,
            index,
            to,
            mac1,
        };
        if self.cookies.len() < MAX_COOKIE_REPLIES {
            self.cookies.push(owed);
            return;
        }
        let slot = rng.next_u64() % self.seen;
        if let Some(s) = usize::try_from(slot)
            .ok()
            .and_then(|i| self.cookies.get_mut(i))
        {
            *s = owed;
        }
    }

    /// The next message into `buf`: a response if any, else a cookie reply, sealed now
    /// (counted in `sent_cookies`).
    pub fn pop(
        &mut self,
        now: Instant,
        rng: &mut impl RngCore,
        guard: &mut Guard,
        buf: &mut [u8],
        sent_cookies: &mut u64,
    ) -> Option<Transmit> {
        if let Some((path, dst, m)) = self.responses.pop_front() {
            let n = m.len().min(buf.len());
            buf[..n].copy_from_slice(&m[..n]);
            return Some(transmit(path, dst, n));
        }
        let o = self.cookies.pop()?;
        if self.cookies.is_empty() {
            self.seen = 0;
        }
        let (nonce, sealed) = guard.cookie_reply(now, rng, o.to, &o.mac1);
        let mut out = [0u8; COOKIE_REPLY_LEN];
        outer::emit_cookie_reply(&mut out, o.path, o.index, &nonce, &sealed);
        let n = out.len().min(buf.len());
        buf[..n].copy_from_slice(&out[..n]);
        *sent_cookies += 1;
        Some(transmit(PathId(o.path), o.to, n))
    }
}

fn transmit(path: PathId, dst: SocketAddr, len: usize) -> Transmit {
    Transmit {
        path,
        dst,
        len,
        kernel_copies: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::PublicKey;
    use rand_chacha::ChaCha20Rng;
    use rand_core::SeedableRng;

    fn addr(i: u32) -> SocketAddr {
        SocketAddr::from(((0xc612_0000 + i).to_be_bytes(), 9))
    }

    /// A burst of `4 x MAX_COOKIE_REPLIES` refusals ahead of one more: the last one keeps
    /// a reply about a quarter of the time (never, with the newest dropped); a response
    /// queued after all of them goes out first; what is held goes out sealed and counted.
    #[test]
    fn cookie_replies_sampled_responses_first() {
        let mut rng = ChaCha20Rng::seed_from_u64(3);
        let burst = 4 * MAX_COOKIE_REPLIES as u32;
        let (mut late_kept, rounds) = (0u32, 400);
        for _ in 0..rounds {
            let mut r = Replies::default();
            for i in 0..=burst {
                r.owe_cookie(&mut rng, 0, i, addr(i), [0; 16]);
            }
            assert_eq!(r.cookies.len(), MAX_COOKIE_REPLIES);
            late_kept += u32::from(r.cookies.iter().any(|o| o.index == burst));
        }
        // Expected 400 x 4096 / 16385 = 100, one standard deviation 8.7: 5 of them either
        // side.
        assert!((57..=143).contains(&late_kept), "{late_kept}");
        let mut guard = Guard::new(&PublicKey([1; 32]));
        let mut r = Replies::default();
        r.owe_cookie(&mut rng, 1, 7, addr(7), [0; 16]);
        r.respond(PathId(0), addr(0), vec![2; 92]);
        let (now, mut buf, mut sent) = (Instant::from_micros(1), [0u8; 2048], 0);
        let mut pop = || {
            r.pop(now, &mut rng, &mut guard, &mut buf, &mut sent)
                .map(|t| (t.path, t.len))
        };
        assert_eq!(pop(), Some((PathId(0), 92)), "the response first");
        assert_eq!(pop(), Some((PathId(1), COOKIE_REPLY_LEN)));
        assert_eq!(pop(), None);
        assert_eq!(sent, 1);
        assert_eq!(r.seen, 0, "a new sample after the drain");
    }
}
