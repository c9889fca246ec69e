"""Figures of one media stream: frames and voice packets on time, late, lost; delays; bytes.

Role: turn the sender's manifest and the receiver's log of lab/tools/mediastream.py into the
``realtime-media`` suite's per-policy figures. Pure functions of the two logs: no lab, no
clock, so the definitions below are the whole story.

Definitions (deadline D, the stream's; times are CLOCK_MONOTONIC, shared by the namespaces):

- a video frame is *on time* when every one of its packets arrived by ``frame_ns + D``
  (``frame_ns``: when its first packet left the sender); *late* when all arrived but one
  after that; *lost* when one or more never arrived;
- a voice packet (one per 20 ms) is on time when it arrived by ``send_ns + D``;
- a packet's one-way delay is ``recv_ns - send_ns``; ``late_packets`` counts every packet
  (video or voice) that arrived more than D after it left, ``late_beyond_slack`` those more
  than D + ``slack_ms`` (the Python sender and receiver read the clock around ``sendto`` and
  ``recv``: lab/tests/test_tunnel_e2e.py's HOST_SLACK_MS);
- delivered bytes are inner IP bytes (UDP payload + 28) of every first copy received.
"""

from __future__ import annotations

IP_UDP = 28
CDF_POINTS = 201
MAX_LISTED = 50


def quantiles(sorted_vals: list[float], points: int = CDF_POINTS) -> list[float]:
    """``points`` evenly spaced quantiles (0 … 1) of a sorted list (empty: [])."""
    if not sorted_vals:
        return []
    n = len(sorted_vals)
    return [sorted_vals[min(n - 1, round(i * (n - 1) / (points - 1)))] for i in range(points)]


def pct(sorted_vals: list[float], q: float) -> float | None:
    if not sorted_vals:
        return None
    return sorted_vals[min(len(sorted_vals) - 1, round(q * (len(sorted_vals) - 1)))]


def video_figures(manifest: list, rx: list, deadline_ns: int) -> dict:
    """Frames on time / late / lost and video packet figures."""
    frames = {f[0]: f for f in manifest}
    got: dict[int, list[int]] = {}
    delays: list[float] = []
    late = bytes_in = 0
    for num, _idx, _count, _frame_ns, send_ns, recv_ns, size in rx:
        if num not in frames:
            continue
        got.setdefault(num, []).append(recv_ns)
        delays.append((recv_ns - send_ns) / 1e6)
        late += recv_ns - send_ns > deadline_ns
        bytes_in += size + IP_UDP
    on_time = late_frames = lost = 0
    missing = []
    for num, count, _size, frame_ns in frames.values():
        arrivals = got.get(num, [])
        if len(arrivals) < count:
            lost += 1
            missing.append([num, count - len(arrivals), count])
        elif max(arrivals) - frame_ns > deadline_ns:
            late_frames += 1
        else:
            on_time += 1
    sent = sum(f[1] for f in frames.values())
    return {
        "frames": len(frames),
        "frames_on_time": on_time,
        "frames_late": late_frames,
        "frames_lost": lost,
        "packets_sent": sent,
        "packets_received": len(delays),
        "packets_late": late,
        "packets_not_on_time": sent - len(delays) + late,
        "delivered_bytes": bytes_in,
        "delays_ms": sorted(delays),
        # Frames with packets missing: [frame, packets missing, packets in the frame] (a
        # frame number divisible by the GOP is an I-frame).
        "lost_packets": missing[:MAX_LISTED],
    }


def voice_figures(manifest: list, rx: list, deadline_ns: int) -> dict:
    """Voice packets on time / late / lost."""
    sent = {v[0] for v in manifest}
    delays: list[float] = []
    late = bytes_in = 0
    for num, send_ns, recv_ns, size in rx:
        if num not in sent:
            continue
        delays.append((recv_ns - send_ns) / 1e6)
        late += recv_ns - send_ns > deadline_ns
        bytes_in += size + IP_UDP
    return {
        "packets_sent": len(sent),
        "packets_on_time": len(delays) - late,
        "packets_late": late,
        "packets_lost": len(sent) - len(delays),
        "delivered_bytes": bytes_in,
        "delays_ms": sorted(delays),
    }


def figures(manifest: dict, rx: dict, deadline_ms: float, slack_ms: float) -> dict:
    """The stream's figures (``delays_ms`` lists replaced by quantiles and percentiles)."""
    d = int(deadline_ms * 1e6)
    video = video_figures(manifest["video"], rx["video"], d)
    voice = voice_figures(manifest["voice"], rx["voice"], d)
    beyond = sum(x > deadline_ms + slack_ms for x in video["delays_ms"] + voice["delays_ms"])
    out = {
        "video": video,
        "voice": voice,
        "late_packets": video["packets_late"] + voice["packets_late"],
        "late_beyond_slack": beyond,
        "duplicates_at_receiver": rx.get("duplicates", 0),
        "delivered_bytes": video["delivered_bytes"] + voice["delivered_bytes"],
    }
    for part in (video, voice):
        ds = part.pop("delays_ms")
        part["delay_ms"] = {
            "p50": pct(ds, 0.5),
            "p90": pct(ds, 0.9),
            "p99": pct(ds, 0.99),
            "max": ds[-1] if ds else None,
        }
        part["delay_cdf_ms"] = quantiles(ds)
    return out
