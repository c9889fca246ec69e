use super::*;
use proptest::prelude::*;

fn ms(x: u64) -> Instant {
    Instant::from_micros(x * 1000)
}

/// An IPv4/UDP packet of `size` bytes (≥ 32) from source port `sport`, carrying `n`.
fn packet(sport: u16, n: u32, size: usize) -> Arc<[u8]> {
    let mut p = vec![0u8; size];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&(size as u16).to_be_bytes());
    p[8] = 64;
    p[9] = 17;
    p[12..16].copy_from_slice(&[10, 0, 0, 1]);
    p[16..20].copy_from_slice(&[10, 0, 0, 2]);
    p[20..22].copy_from_slice(&sport.to_be_bytes());
    p[22..24].copy_from_slice(&443u16.to_be_bytes());
    p[24..26].copy_from_slice(&((size - 20) as u16).to_be_bytes());
    p[28..32].copy_from_slice(&n.to_be_bytes());
    Arc::from(p)
}

fn sport_of(p: &[u8]) -> u16 {
    u16::from_be_bytes([p[20], p[21]])
}

fn n_of(p: &[u8]) -> u32 {
    u32::from_be_bytes([p[28], p[29], p[30], p[31]])
}

/// `k` source ports whose flows land in different buckets.
fn distinct_flows(k: usize) -> Vec<u16> {
    let mut seen = Vec::new();
    let mut ports = Vec::new();
    for sport in 1000u16.. {
        let b = bucket_of(&packet(sport, 0, 64));
        if !seen.contains(&b) {
            seen.push(b);
            ports.push(sport);
        }
        if ports.len() == k {
            return ports;
        }
    }
    unreachable!()
}

/// A ping that arrives behind a bulk flow's backlog leaves next, not behind it.
#[test]
fn a_sparse_flow_is_served_before_a_bulk_backlog() {
    let f = distinct_flows(2);
    let mut q = FqCodelQueue::new(1 << 20);
    for n in 0..100 {
        q.push(ms(0), packet(f[0], n, 1400));
    }
    // The bulk flow has been served a while: it is an old flow now.
    for _ in 0..10 {
        assert!(q.head(ms(1)).is_some());
        q.take();
    }
    q.push(ms(1), packet(f[1], 0, 84));
    let next = q.head(ms(1)).unwrap().clone();
    assert_eq!(sport_of(&next), f[1], "the ping goes first");
    assert_eq!(q.take().unwrap(), next, "take gives what head showed");
}

/// Two backlogged flows share the output by bytes, whatever their packet sizes.
#[test]
fn backlogged_flows_share_by_bytes() {
    let f = distinct_flows(2);
    let mut q = FqCodelQueue::new(10 << 20);
    for n in 0..2000 {
        q.push(ms(0), packet(f[0], n, 1500));
        q.push(ms(0), packet(f[1], n, 500));
    }
    let mut served = [0usize; 2];
    for _ in 0..1500 {
        let p = q.take().unwrap();
        served[usize::from(sport_of(&p) == f[1])] += p.len();
    }
    let ratio = served[0] as f64 / served[1] as f64;
    assert!((0.9..1.1).contains(&ratio), "{served:?}");
}

/// When the byte bound is reached the flow holding most bytes loses its newest packet: a
/// lighter flow's packet still gets in, and the heavy flow's own next packet does not.
#[test]
fn overflow_drops_from_the_fattest_flow() {
    let f = distinct_flows(2);
    let mut q = FqCodelQueue::new(10_000);
    for n in 0..7 {
        assert!(q.push(ms(0), packet(f[0], n, 1400)));
    }
    assert!(q.push(ms(0), packet(f[1], 0, 1400)));
    assert_eq!(q.drops().overflow, 1);
    assert!(q.bytes() <= 10_000);
    let out: Vec<_> = std::iter::from_fn(|| q.take()).collect();
    assert_eq!(out.len(), 7);
    let bulk: Vec<u32> = out
        .iter()
        .filter(|p| sport_of(p) == f[0])
        .map(|p| n_of(p))
        .collect();
    assert_eq!(
        bulk,
        [0, 1, 2, 3, 4, 5],
        "the bulk flow's newest packet went"
    );
    assert!(out.iter().any(|p| sport_of(p) == f[1]));
    // Full again: the heavy flow's next packet is refused (tail drop), nothing else goes.
    let mut q = FqCodelQueue::new(10_000);
    for n in 0..7 {
        assert!(q.push(ms(0), packet(f[0], n, 1400)));
    }
    assert!(!q.push(ms(0), packet(f[0], 7, 1400)));
    assert_eq!(q.drops().overflow, 1);
    assert_eq!(q.bytes(), 9800);
}

/// CoDel runs per flow: a flow that arrives twice as fast as it is served is dropped; a
/// light flow beside it, whose packets never wait, loses none.
#[test]
fn codel_drops_only_the_flow_that_builds_a_queue() {
    let f = distinct_flows(2);
    let mut q = FqCodelQueue::new(100 << 20);
    let mut light_out = 0;
    for t in 0..3000u64 {
        for i in 0..2 {
            q.push(ms(t), packet(f[0], (2 * t + i) as u32, 1000));
        }
        if t % 10 == 0 {
            q.push(ms(t), packet(f[1], t as u32, 100));
        }
        // Service: about 1 100 bytes per ms.
        let mut budget = 1100i64;
        while budget > 0 {
            let Some(p) = q.head(ms(t)) else { break };
            budget -= p.len() as i64;
            if sport_of(p) == f[1] {
                light_out += 1;
            }
            q.take();
        }
    }
    assert!(q.drops().codel > 10, "{:?}", q.drops());
    assert_eq!(light_out, 300, "the light flow lost nothing");
}

proptest! {
    /// Whatever the flows and the order of pushes, takes and CoDel-free drains: every
    /// packet leaves once, each flow in its own order, and the counts add up.
    #[test]
    fn each_flow_leaves_whole_and_in_order(
        ops in proptest::collection::vec((0u16..6, 40usize..1500, any::<bool>()), 1..400)
    ) {
        let mut q = FqCodelQueue::new(1 << 30);
        let mut next_n = [0u32; 6];
        let mut seen = [0u32; 6];
        let mut out = 0usize;
        let mut check = |p: Arc<[u8]>| {
            let flow = usize::from(sport_of(&p) - 2000);
            assert_eq!(n_of(&p), seen[flow], "flow {flow} out of order");
            seen[flow] += 1;
            out += 1;
        };
        for (flow, size, take) in &ops {
            let f = usize::from(*flow);
            q.push(ms(0), packet(2000 + flow, next_n[f], *size));
            next_n[f] += 1;
            if *take {
                check(q.take().unwrap());
            }
        }
        while let Some(p) = q.take() {
            check(p);
        }
        prop_assert!(q.is_empty());
        prop_assert_eq!(q.bytes(), 0);
        prop_assert_eq!(out, ops.len());
        prop_assert_eq!(seen, next_n);
    }
}
