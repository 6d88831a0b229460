"""The expected latency of a mode on a link: what the plan prints and the agent's decision compares.

A mode's cost (`ModeCost`) is what was measured once, offline (`planner.py`): the edge's compute
before anything is sent, the bytes each way and the worker's compute. Its expected latency on a link
of `bandwidth_bps` and `rtt_ms` is

- edge: `edge_queue_ms + edge_ms`;
- remote (`cloud`, `split@...`): `edge_ms + up/bandwidth + rtt_ms + cloud_queue_ms + cloud_ms +
  down/bandwidth`,

where up and down are the request's and the answer's bytes plus a per-message constant each way
(below). The model, stated:
- both directions are serialised at the one estimated bandwidth (the link estimator measures one),
  and the answer's bytes count as well as the request's;
- one round trip per frame (the request and the answer each take half), added once;
- no overlap: the edge's work, the transfer up, the worker's queue and compute and the transfer down
  follow each other (true for one frame; frames in flight overlap each other, which is throughput,
  not this frame's latency);
- the edge's queue delays the edge mode only (a remote frame's edge work is short and runs beside the
  engine's queue), the worker's queue the remote modes only;
- post-processing runs on the edge in every mode (the answer holds the model's raw outputs), so it is
  left out of every mode alike, and so is decoding the (small) answer;
- with frames sent at `frames_per_s` (the agent's; the plan's latencies are of one frame alone), the
  uplink is busy `utilisation = frames_per_s x up transfer` of the time, and a request waits behind
  the others `up transfer x utilisation / (2 (1 - utilisation))` (an M/D/1 queue: fixed-size
  messages arriving at random). A mode that would keep the uplink busier than MAX_UTILISATION is
  expected to take forever: the link cannot carry it, and the frames would pile up until their
  deadlines. This is what keeps a mode that saturates the link from looking fast the moment it is
  left (its backlog drained) and slow the moment it is taken, which made the decision flap.

Per-message overhead (`UP_OVERHEAD_BYTES`, `DOWN_OVERHEAD_BYTES`) is MQTT's: the request's PUBLISH
header (topic `edge/<device>/offload/req/<model>/<part>`, Response Topic and Correlation Data
properties, packet id) and the PUBACK of the answer go up; the answer's PUBLISH header and the
request's PUBACK come down. Measured roughly by counting the bytes a TCP proxy carried between a
paho client and Mosquitto for 50 exchanges at each of 1 KB, 20 KB and 100 KB requests (device name
of 11 characters): 127 bytes up, 60 down per exchange, whatever the payload. TCP/IP and TLS framing
grow with the bytes (about 4 % for full segments) rather than per message; they are left to the
bandwidth, which the link estimator measures as the payload's goodput, so it already pays them.

Pure functions of numbers, no I/O: the decision calls them for every mode on every frame.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

EDGE = "edge"
CLOUD = "cloud"
SPLIT_PREFIX = "split@"
UP_OVERHEAD_BYTES = 128
"""MQTT bytes per exchange sent up besides the request's payload (measured: 127)."""
DOWN_OVERHEAD_BYTES = 64
"""MQTT bytes per exchange coming down besides the answer's payload (measured: 60)."""
MAX_UTILISATION = 0.9
"""The most of the uplink's time a mode may expect to keep busy; beyond it the link cannot carry it."""


@dataclass(frozen=True)
class ModeCost:
    """What one way of computing a frame costs, measured once: times in milliseconds, sizes in bytes."""

    name: str
    """`edge`, `cloud` or `split@<tensor>`."""
    part: str | None
    """The protocol part the worker runs (`whole`, `tail-<id>`); None for the edge."""
    edge_ms: float
    """Local compute before the send: the whole model (edge); host preprocessing, the head and the
    tensors' encoding (split); downscaling and JPEG encoding (cloud)."""
    up_bytes: int = 0
    """The request's payload (0 for the edge)."""
    down_bytes: int = 0
    """The answer's payload: the model's raw outputs, encoded (0 for the edge)."""
    cloud_ms: float = 0.0
    """The worker's compute: decoding the request and running the whole model or the tail."""

    def __post_init__(self) -> None:
        for field in ("edge_ms", "cloud_ms"):
            value = getattr(self, field)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{self.name}: expected {field} >= 0, got {value}")
        for field in ("up_bytes", "down_bytes"):
            if getattr(self, field) < 0:
                raise ValueError(f"{self.name}: expected {field} >= 0, got {getattr(self, field)}")
        if self.is_remote and self.part is None:
            raise ValueError(f"{self.name}: a remote mode names the part the worker runs, got none")

    @property
    def is_remote(self) -> bool:
        return self.name != EDGE

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ModeCost:
        return cls(
            name=str(data["name"]),
            part=None if data.get("part") is None else str(data["part"]),
            edge_ms=float(data["edge_ms"]),
            up_bytes=int(data.get("up_bytes", 0)),
            down_bytes=int(data.get("down_bytes", 0)),
            cloud_ms=float(data.get("cloud_ms", 0.0)),
        )


def transfer_ms(payload_bytes: float, bandwidth_bps: float) -> float:
    """Milliseconds to serialise `payload_bytes` at `bandwidth_bps` (bits per second)."""
    if not bandwidth_bps > 0:
        raise ValueError(f"expected a bandwidth > 0 bit/s, got {bandwidth_bps}")
    return payload_bytes * 8.0 * 1000.0 / bandwidth_bps


def expected_ms(
    cost: ModeCost,
    bandwidth_bps: float,
    rtt_ms: float,
    cloud_queue_ms: float = 0.0,
    edge_queue_ms: float = 0.0,
    frames_per_s: float = 0.0,
) -> float:
    """The expected latency of one frame in `cost`'s mode on this link, with frames sent at
    `frames_per_s` (0: this frame alone); math.inf when the uplink cannot carry them (the model:
    module docstring)."""
    if not cost.is_remote:
        return edge_queue_ms + cost.edge_ms
    if rtt_ms < 0:
        raise ValueError(f"expected an RTT >= 0 ms, got {rtt_ms}")
    up = transfer_ms(cost.up_bytes + UP_OVERHEAD_BYTES, bandwidth_bps)
    utilisation = frames_per_s * up / 1000.0
    if utilisation > MAX_UTILISATION:
        return math.inf
    waiting = up * utilisation / (2.0 * (1.0 - utilisation))
    return (
        cost.edge_ms
        + waiting
        + up
        + rtt_ms
        + cloud_queue_ms
        + cost.cloud_ms
        + transfer_ms(cost.down_bytes + DOWN_OVERHEAD_BYTES, bandwidth_bps)
    )


def uplink_capacity_fps(cost: ModeCost, bandwidth_bps: float) -> float:
    """How many of this mode's requests a second the uplink carries at MAX_UTILISATION."""
    return MAX_UTILISATION * 1000.0 / transfer_ms(cost.up_bytes + UP_OVERHEAD_BYTES, bandwidth_bps)


def expected_all(
    costs: Iterable[ModeCost],
    bandwidth_bps: float,
    rtt_ms: float,
    cloud_queue_ms: float = 0.0,
    edge_queue_ms: float = 0.0,
) -> dict[str, float]:
    """Each mode's expected latency by name; a name given twice keeps its lower one."""
    expected: dict[str, float] = {}
    for cost in costs:
        value = expected_ms(cost, bandwidth_bps, rtt_ms, cloud_queue_ms, edge_queue_ms)
        if cost.name not in expected or value < expected[cost.name]:
            expected[cost.name] = value
    return expected


def best_mode(
    costs: Iterable[ModeCost],
    bandwidth_bps: float,
    rtt_ms: float,
    cloud_queue_ms: float = 0.0,
    edge_queue_ms: float = 0.0,
) -> ModeCost:
    """The cost with the lowest expected latency; on a tie the first given (list the edge first, and
    a tie stays local)."""
    best: ModeCost | None = None
    best_ms = math.inf
    for cost in costs:
        value = expected_ms(cost, bandwidth_bps, rtt_ms, cloud_queue_ms, edge_queue_ms)
        if best is None or value < best_ms:
            best, best_ms = cost, value
    if best is None:
        raise ValueError("expected at least one mode, got none")
    return best
