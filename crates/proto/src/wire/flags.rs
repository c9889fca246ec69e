//! The flags byte of DATA frames: policy, whether the packet is ordered, and what the
//! receiver's reorder buffer releases it after (`OrderMode`, PROTOCOL.md §4.3).
//!
//! Invariant: bits 5–7 are written as zero; any byte parses (unknown bits are ignored).
//! Policy code 3 (`realtime`) adds a 2-byte `deadline_ms` after the flags (PROTOCOL.md §4.3).

/// Flags of a DATA frame: which policy the flow is under, whether the receiver must
/// deliver it in order, and in which order (bits 3–4, `OrderMode`). Bits 5–7 are zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DataFlags(pub u8);

/// What an `ordered` packet waits for at the receiver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OrderMode {
    /// Every packet of the session sent before it (the order of version 0.2).
    Session,
    /// Nothing: the first packet of its flow.
    FlowFirst,
    /// The previous packet of its flow, `pred_gap` sequence numbers back (a u16 follows
    /// the flags).
    FlowGap,
    /// The previous packet of its flow, which is the session's previous packet
    /// (`pred_gap` = 1, not sent).
    FlowPrev,
}

/// Bytes of `pred_gap` when the order mode carries one.
pub const PRED_GAP_LEN: usize = 2;
/// Bytes of `deadline_ms`, which a realtime packet (policy code 3) carries.
pub const DEADLINE_LEN: usize = 2;
/// Policy code of `realtime` packets.
pub const REALTIME_CODE: u8 = 3;

impl DataFlags {
    /// The receiver holds this packet in the reorder buffer until earlier ones arrive.
    pub const ORDERED: u8 = 0x01;
    const ORDER_SHIFT: u8 = 3;
    const ORDER_MASK: u8 = 0x03 << Self::ORDER_SHIFT;

    /// Policy code carried so the server can apply the same policy to the reverse flow.
    pub fn policy_code(self) -> u8 {
        (self.0 >> 1) & 0x03
    }

    /// Builds flags from a policy code (0..=3) and the ordered bit (order mode `Session`).
    pub fn new(policy_code: u8, ordered: bool) -> Self {
        DataFlags(((policy_code & 0x03) << 1) | u8::from(ordered))
    }

    /// Whether the packet is to be delivered in order.
    pub fn ordered(self) -> bool {
        self.0 & Self::ORDERED != 0
    }

    /// What the packet waits for, if `ordered`.
    pub fn order_mode(self) -> OrderMode {
        match (self.0 & Self::ORDER_MASK) >> Self::ORDER_SHIFT {
            0 => OrderMode::Session,
            1 => OrderMode::FlowFirst,
            2 => OrderMode::FlowGap,
            _ => OrderMode::FlowPrev,
        }
    }

    /// The same flags with order mode `mode`.
    pub fn with_order(self, mode: OrderMode) -> Self {
        let bits = match mode {
            OrderMode::Session => 0,
            OrderMode::FlowFirst => 1,
            OrderMode::FlowGap => 2,
            OrderMode::FlowPrev => 3,
        };
        DataFlags((self.0 & !Self::ORDER_MASK) | (bits << Self::ORDER_SHIFT))
    }

    /// Flags ordering a packet after its flow's previous packet, `pred_gap` sequence
    /// numbers back (`None`: the flow has none). A gap beyond 16 bits falls back to the
    /// session order, which is never wrong, only slower.
    pub fn with_pred_gap(self, pred_gap: Option<u64>) -> (Self, u16) {
        match pred_gap {
            None => (self.with_order(OrderMode::FlowFirst), 0),
            Some(1) => (self.with_order(OrderMode::FlowPrev), 1),
            Some(g) => match u16::try_from(g) {
                Ok(g) if g > 0 => (self.with_order(OrderMode::FlowGap), g),
                _ => (self.with_order(OrderMode::Session), 0),
            },
        }
    }

    /// Whether the packet is under the `realtime` policy (code 3): a `deadline_ms` (u16)
    /// follows the flags (after `pred_gap`, if any).
    pub fn realtime(self) -> bool {
        self.policy_code() == REALTIME_CODE
    }

    /// Bytes the order mode and the policy add after the flags byte: `pred_gap` in mode
    /// `FlowGap`, `deadline_ms` for a realtime packet.
    pub fn extra_len(self) -> usize {
        let gap = if self.order_mode() == OrderMode::FlowGap {
            PRED_GAP_LEN
        } else {
            0
        };
        gap + if self.realtime() { DEADLINE_LEN } else { 0 }
    }
}
