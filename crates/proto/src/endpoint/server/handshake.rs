//! The server's handshakes: an initiation screened by the flood defence (`guard.rs`),
//! then the Diffie-Hellman, the peer found by its key, its timestamp checked, the session
//! installed or its next keypair, and the response queued (`replies.rs`). An initiation
//! for a peer another shard owns is handed to it after the Diffie-Hellman (`shard.rs`):
//! only there is the key known.
//!
//! Invariants: nothing changes before the initiation authenticated and its timestamp is
//! newer than the peer's last; a shard hands out only receiver indices it owns.

use super::*;

impl Server {
    /// The flood defence, before any Diffie-Hellman: false (counted, perhaps a cookie
    /// reply queued) if the initiation goes no further.
    pub(super) fn screen_init(
        &mut self,
        now: Instant,
        from: SocketAddr,
        p: &OuterPacket<&mut [u8]>,
    ) -> bool {
        if !self.guard.keys().mac1_ok(p.bytes()) {
            self.counters.rx_bad_mac1 += 1;
            return false;
        }
        match self.guard.admit(now, &mut self.rng, from, p.bytes()) {
            Admit::Process => true,
            Admit::RateLimited => {
                self.counters.rx_handshake_rate_limited += 1;
                false
            }
            Admit::Cookie => {
                let mac1 = mac1_of(p.bytes());
                self.replies
                    .owe_cookie(&mut self.rng, p.path(), p.index(), from, mac1);
                false
            }
        }
    }

    pub(super) fn handle_init(
        &mut self,
        now: Instant,
        from: SocketAddr,
        p: &OuterPacket<&mut [u8]>,
    ) {
        if self.screen_init(now, from, p) {
            self.answer_init(now, from, p);
        }
    }

    /// A screened initiation: the Diffie-Hellman, then the response (or, for a peer of
    /// another shard, the initiation handed to it).
    pub(super) fn answer_init(
        &mut self,
        now: Instant,
        from: SocketAddr,
        p: &OuterPacket<&mut [u8]>,
    ) {
        let mut seed = [0u8; 32];
        self.rng.fill_bytes(&mut seed);
        let resp = match Responder::read_init(&self.cfg.local_key, seed, p.noise()) {
            Ok(r) => r,
            Err(_) => {
                self.counters.rx_handshake_failed += 1;
                return;
            }
        };
        let Some(&pi) = self.by_key.get(&resp.remote()) else {
            self.counters.rx_unknown_peer += 1;
            return;
        };
        if !self.shard.owns_key(&resp.remote()) {
            let to = self.shard.owner_of_key(&resp.remote());
            let bytes = p.bytes().to_vec();
            return self.hand_off(Handoff::Datagram { to, from, bytes });
        }
        if resp.timestamp_us() <= self.peers[pi].last_timestamp {
            self.counters.rx_handshake_replayed += 1;
            return;
        }
        let fresh = resp.flags() & INIT_FLAG_FRESH != 0;
        let takes_relays = resp.flags() & INIT_FLAG_RELAYS != 0;
        let timestamp = resp.timestamp_us();
        let (client_index, path) = (p.index(), PathId(p.path()));
        let mut local_index = self.shard.own_index(self.rng.next_u32());
        while self.by_index.contains_key(&local_index) {
            local_index = self.shard.own_index(self.rng.next_u32());
        }
        let new_session = fresh || self.peers[pi].session.is_none();
        let flags = if new_session {
            RESP_FLAG_NEW_SESSION
        } else {
            0
        };
        let mut out = vec![0u8; HANDSHAKE_RESP_LEN];
        let keys = match resp.write_resp(flags, self.cfg.ciphers, &mut out[12..12 + NOISE_RESP_LEN])
        {
            Ok((_, keys)) => keys,
            // Nothing was written or changed: the client hears nothing, as for a key we
            // do not know, and the operator sees why in this counter.
            Err(CryptoError::NoCommonCipher) => {
                self.counters.rx_no_common_cipher += 1;
                return;
            }
            Err(_) => {
                self.counters.rx_handshake_failed += 1;
                return;
            }
        };
        outer::emit_resp_header(&mut out, path.0, local_index, client_index);
        let peer = &mut self.peers[pi];
        // mac1 under the client's key lets it drop forged responses before its DH.
        MacKeys::new(&peer.cfg.public_key).seal(&mut out, None);
        peer.last_timestamp = timestamp;
        let kp = Keypair::new(local_index, client_index, keys, now);
        match peer.session.as_deref_mut() {
            Some(s) if !new_session => s.keys.install_next(kp),
            _ => {
                let mut s = Session::new(
                    peer.cfg.public_key.session_id(),
                    self.cfg.session,
                    Side::Server,
                );
                s.keys.install_current(kp);
                peer.session = Some(Box::new(s));
            }
        }
        let s = peer.session.as_deref_mut().expect("installed above");
        peer.takes_relays = takes_relays;
        if takes_relays {
            let r = &self.relays;
            s.offer_relays(r.epoch, r.count, &r.encoded);
        }
        s.ensure_path(now, path, from);
        // A handshake proves the client's address too (it may have moved while away).
        if s.follow_path(path, from) {
            self.events.push_back((pi, Event::PathRoamed(path, from)));
        }
        s.confirm_path(now, path);
        self.by_index.retain(|_, v| *v != pi);
        for idx in s.keys.indices() {
            self.by_index.insert(idx, pi);
        }
        self.counters.handshakes += 1;
        self.replies.respond(path, from, out);
        self.touched(pi);
    }
}
