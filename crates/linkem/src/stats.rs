//! Counters reported by `stats` and `--stats-json`.
//!
//! Invariant (checked by the pipeline tests): every frame that entered is, at any instant,
//! exactly one of dropped (loss, queue, outage), queued, in flight, or delivered:
//! `in = dropped_loss + dropped_queue + dropped_outage + queued + in_flight + delivered`,
//! in frames and in bytes.

use serde::Serialize;

/// A frame count and a byte count.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counter {
    /// Frames.
    pub frames: u64,
    /// Bytes (wire size of the frames).
    pub bytes: u64,
}

impl Counter {
    /// Adds one frame of `bytes`.
    pub fn add(&mut self, bytes: u64) {
        self.frames += 1;
        self.bytes += bytes;
    }

    /// Adds `frames` frames totalling `bytes`.
    pub fn add_many(&mut self, frames: u64, bytes: u64) {
        self.frames += frames;
        self.bytes += bytes;
    }
}

/// Counters of one direction's impairment pipeline.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PipelineStats {
    /// Frames offered to the pipeline.
    #[serde(rename = "in")]
    pub input: Counter,
    /// Dropped by the loss model.
    pub dropped_loss: Counter,
    /// Dropped because the queue was full.
    pub dropped_queue: Counter,
    /// Dropped because the link was down (on arrival, or flushed from the queue).
    pub dropped_outage: Counter,
    /// Handed out of the pipeline.
    pub delivered: Counter,
    /// Waiting in the queue now (gauge).
    pub queued: Counter,
    /// Past the rate stage, waiting out their delay now (gauge).
    pub in_flight: Counter,
    /// Whether the direction is down now (scheduled outage or `down` command).
    pub down: bool,
}

/// Counters of the socket layer of one direction.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct IoStats {
    /// Frames the kernel dropped before linkem could read them (PACKET_STATISTICS).
    pub rx_kernel_drops: u64,
    /// Frames that could not be read whole or parsed.
    pub rx_errors: u64,
    /// Frames the output interface refused.
    pub tx_errors: u64,
}

/// Everything about one direction.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DirectionStats {
    /// The impairment model's counters.
    #[serde(flatten)]
    pub pipeline: PipelineStats,
    /// The socket layer's counters.
    pub io: IoStats,
}

/// The reply to `stats`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Stats {
    /// Seconds since linkem started.
    pub uptime_s: f64,
    /// Interface A → interface B.
    pub a2b: DirectionStats,
    /// Interface B → interface A.
    pub b2a: DirectionStats,
}
