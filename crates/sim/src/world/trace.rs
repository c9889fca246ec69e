//! `MH_SIM_TRACE`: a line per server session with each path's estimator state, the
//! ingress queue, every link queue, the client's reorder hold and each TCP flow's window,
//! on stderr — a debugging aid, never part of a run's results (which stay deterministic
//! and identical with or without it).

use super::{pi, World};
use std::time::Duration;

impl World {
    /// `MH_SIM_TRACE`: one line per server session with each path's estimator state and
    /// the client's reorder hold, on stderr (a debugging aid; never in results).
    pub(super) fn trace_paths(&self, now: Duration) {
        if let Some(s) = self.server.as_ref() {
            for p in s.peers() {
                let Some(sess) = p.session else { continue };
                let mut line = format!("t={:.3}", now.as_secs_f64());
                for path in sess.paths() {
                    let v = path.view(pi(now));
                    let l = path.loss_counters();
                    line += &format!(
                        " | p{} bw={:.1} pace={:.1} cap={:.1} srtt={:.0} min={:.0} infl={} cwnd={} valid={} st={} cl={} el={} tx={} reo={:.1} ro={:?}",
                        v.id.0, v.bandwidth_bps * 8e-6, v.pacing_bps * 8e-6,
                        path.capacity().unwrap_or(0.0) * 8e-6,
                        v.srtt.as_secs_f64() * 1e3, v.min_rtt.as_secs_f64() * 1e3,
                        v.inflight_bytes, v.cwnd_bytes, v.bw_valid, path.in_startup(),
                        l.congestion, l.error, path.counters().tx_bytes,
                        path.reorder_window().as_secs_f64() * 1e3,
                        path.reordering()
                    );
                }
                let q = sess.queue_drops();
                line += &format!(
                    " | q={} codel={} ovf={}",
                    sess.queued_bytes(),
                    q.codel,
                    q.overflow
                );
                for h in &self.hops {
                    let st = h.pipe.stats(now);
                    line += &format!(
                        " | h{}{} qp={} qb={} drop={}",
                        h.label.1,
                        if h.label.2 { "u" } else { "d" },
                        st.queued.frames,
                        st.queued.bytes,
                        st.dropped_queue.frames
                    );
                }
                for (i, a) in self.apps.iter().enumerate() {
                    if let Some((w, rtt, fl)) = a.tcp_probe() {
                        line += &format!(
                            " | f{i} cwnd={:.0}k rtt={:.0} fl={:.0}k",
                            w / 1e3,
                            rtt * 1e3,
                            fl as f64 / 1e3
                        );
                    }
                }
                if let Some(ep) = self.clients.first().and_then(|c| c.ep.as_ref()) {
                    let cs = ep.session();
                    let r = cs.reorder_stats();
                    line += &format!(
                        " | hold={:.1} skips={} lost_skips={} late={} repaired={}",
                        cs.reorder_hold(pi(now)).as_secs_f64() * 1e3,
                        r.skipped_gaps,
                        r.lost_skips,
                        r.late,
                        s.peers()
                            .filter_map(|p| p.session)
                            .map(|x| x.counters().repaired)
                            .sum::<u64>()
                    );
                }
                eprintln!("{line}");
            }
        }
    }
}
