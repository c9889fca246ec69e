//! The running link: two pipelines, two packet sockets, one forwarding thread per direction.
//!
//! Each direction thread reads frames from its input interface in batches, hands them to its
//! [`Pipeline`] stamped with the shared monotonic clock, sends whatever the pipeline says is
//! due out of the other interface, then sleeps in ppoll until the next frame arrives, the
//! pipeline's next due time, or a poke on its eventfd (a live change or shutdown). Two threads
//! rather than one poll loop because two cores forward twice as fast, and the directions share
//! nothing but the clock.
//! Invariants: a pipeline is only touched under its mutex and `now` is read after the lock is
//! taken, so every pipeline sees non-decreasing time; no thread sleeps past a due time by
//! more than the kernel's wake-up latency (timer slack is set to 1 ns).

use crate::config::LinkConfig;
use crate::control::{describe, Dir};
use crate::pipeline::{Change, Pipeline};
use crate::stats::{DirectionStats, IoStats, Stats};
use crate::sys::packet::{PacketSocket, RecvBatch, BATCH};
use crate::sys::wait::{set_timer_slack, wait_readable, EventFd};
use crate::wire::wire_bytes;
use serde_json::{json, Value};
use std::io;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Longest sleep without a due time, so a missed wake-up can never hang a thread for long.
const MAX_SLEEP: Duration = Duration::from_millis(100);

#[derive(Default)]
struct IoCounters {
    rx_kernel_drops: AtomicU64,
    rx_errors: AtomicU64,
    tx_errors: AtomicU64,
}

struct Direction {
    pipeline: Mutex<Pipeline<Vec<u8>>>,
    wake: EventFd,
    io: IoCounters,
}

/// Both directions of a running emulated link.
pub struct Link {
    start: Instant,
    dirs: [Direction; 2],
    sockets: Mutex<Option<[Arc<PacketSocket>; 2]>>,
    shutdown: AtomicBool,
}

impl Link {
    /// A link with `cfg`; direction RNGs are streams 0 (a2b) and 1 (b2a) of `seed`.
    pub fn new(cfg: LinkConfig, seed: u64) -> io::Result<Arc<Link>> {
        let dir = |params, stream| -> io::Result<Direction> {
            Ok(Direction {
                pipeline: Mutex::new(Pipeline::new(params, seed, stream)),
                wake: EventFd::new()?,
                io: IoCounters::default(),
            })
        };
        Ok(Arc::new(Link {
            start: Instant::now(),
            dirs: [dir(cfg.a2b, 0)?, dir(cfg.b2a, 1)?],
            sockets: Mutex::new(None),
            shutdown: AtomicBool::new(false),
        }))
    }

    /// Time since the link was created, the pipelines' clock.
    pub fn now(&self) -> Duration {
        self.start.elapsed()
    }

    fn lock(&self, i: usize) -> MutexGuard<'_, Pipeline<Vec<u8>>> {
        // A poisoned lock means a forwarding thread panicked mid-update; the model's state is
        // still consistent at the granularity of one call, so keep serving.
        self.dirs[i]
            .pipeline
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Applies changes to the selected directions and wakes their threads.
    pub fn apply(&self, dir: Dir, changes: &[Change]) {
        for i in (0..2).filter(|&i| dir.selects(i)) {
            {
                let mut p = self.lock(i);
                let now = self.now();
                for c in changes {
                    p.apply(now, c.clone());
                }
            }
            self.dirs[i].wake.notify();
        }
    }

    /// Counters of both directions.
    pub fn stats(&self) -> Stats {
        let sockets = self
            .sockets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let dir_stats = |i: usize| {
            let d = &self.dirs[i];
            if let Some(s) = &sockets {
                d.io.rx_kernel_drops
                    .fetch_add(s[i].take_kernel_drops(), Ordering::Relaxed);
            }
            let pipeline = {
                let p = self.lock(i);
                p.stats(self.now())
            };
            DirectionStats {
                pipeline,
                io: IoStats {
                    rx_kernel_drops: d.io.rx_kernel_drops.load(Ordering::Relaxed),
                    rx_errors: d.io.rx_errors.load(Ordering::Relaxed),
                    tx_errors: d.io.tx_errors.load(Ordering::Relaxed),
                },
            }
        };
        Stats {
            uptime_s: self.now().as_secs_f64(),
            a2b: dir_stats(0),
            b2a: dir_stats(1),
        }
    }

    /// Current settings of both directions as JSON.
    pub fn show(&self) -> Value {
        let d = |i: usize| {
            let p = self.lock(i);
            describe(&p.params(), p.is_down(self.now()))
        };
        json!({ "a2b": d(0), "b2a": d(1) })
    }

    /// Opens both interfaces and starts forwarding; errors of a running thread are returned
    /// by its handle.
    pub fn start(
        self: &Arc<Self>,
        iface_a: &str,
        iface_b: &str,
    ) -> io::Result<Vec<JoinHandle<io::Result<()>>>> {
        let a = Arc::new(PacketSocket::open(iface_a).map_err(|e| annotate(e, iface_a))?);
        let b = Arc::new(PacketSocket::open(iface_b).map_err(|e| annotate(e, iface_b))?);
        *self.sockets.lock().unwrap_or_else(|e| e.into_inner()) = Some([a.clone(), b.clone()]);
        let mut handles = Vec::new();
        for (i, rx, tx) in [(0, a.clone(), b.clone()), (1, b, a)] {
            let link = Arc::clone(self);
            let name = if i == 0 { "linkem-a2b" } else { "linkem-b2a" };
            handles.push(
                std::thread::Builder::new()
                    .name(name.into())
                    .spawn(move || link.forward(i, &rx, &tx))?,
            );
        }
        Ok(handles)
    }

    /// Asks the forwarding threads to stop.
    pub fn stop(&self) {
        self.shutdown.store(true, Ordering::SeqCst);
        for d in &self.dirs {
            d.wake.notify();
        }
    }

    fn forward(&self, i: usize, rx: &PacketSocket, tx: &PacketSocket) -> io::Result<()> {
        set_timer_slack(1)?;
        let d = &self.dirs[i];
        let mut batch = RecvBatch::new();
        let mut out: Vec<Vec<u8>> = Vec::with_capacity(BATCH);
        while !self.shutdown.load(Ordering::Relaxed) {
            let (n, bad) = match rx.recv_batch(&mut batch) {
                Ok(r) => r,
                // The interface went down under us; it may come back (handoff scripts do this).
                Err(e) if e.raw_os_error() == Some(libc::ENETDOWN) => {
                    d.io.rx_errors.fetch_add(1, Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                }
                Err(e) => return Err(e),
            };
            d.io.rx_errors.fetch_add(bad, Ordering::Relaxed);
            let wake_at = {
                let mut p = self.lock(i);
                let now = self.now();
                for f in batch.frames() {
                    p.enqueue(now, f.to_vec(), wire_bytes(f));
                }
                while let Some(f) = p.poll_dequeue(now) {
                    out.push(f);
                }
                p.next_wakeup()
            };
            if !out.is_empty() {
                let refused = tx.send_all(&out);
                d.io.tx_errors.fetch_add(refused, Ordering::Relaxed);
                out.clear();
            }
            if n == BATCH {
                continue; // more are probably waiting; read before sleeping
            }
            let timeout =
                wake_at.map_or(MAX_SLEEP, |w| w.saturating_sub(self.now()).min(MAX_SLEEP));
            if timeout.is_zero() {
                continue;
            }
            wait_readable(&[rx.as_fd(), d.wake.as_fd()], Some(timeout))?;
            d.wake.drain();
        }
        Ok(())
    }
}

fn annotate(e: io::Error, iface: &str) -> io::Error {
    io::Error::new(e.kind(), format!("interface {iface}: {e}"))
}
