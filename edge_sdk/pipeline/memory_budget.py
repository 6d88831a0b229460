"""How much memory a pipeline's frame rings and inference batches take, worked out before anything
is allocated, and refused with the figure when the host cannot hold it.

The rings are shared memory (/dev/shm, a tmpfs that is usually half of RAM): one segment per source
of `runtime.ring_slots` slots, each the size of that source's largest frame (a file's own frame size,
`runtime.max_frame_size` for live sources: `source_slot`). Each inference worker gathers up to `runtime.batch_size`
frames and stacks them into one tensor. The runtime calls `check_pipeline_memory` once it knows the
slot size of every source and before it creates the first ring:

    sizes = [slot size (width, height) of each source, in config.sources order]
    check_pipeline_memory(config, sizes, workers=workers)   # ConfigError with the figures, or an estimate

Engine memory (weights, activations, arenas) and the small queue messages are not counted.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np

from edge_sdk.core.errors import ConfigError, SourceError
from edge_sdk.sources.registry import create_source
from edge_sdk.sources.spec import BufferPolicy, SourceSpec

from .config import PipelineConfig
from .frame_ring import RingLayout

SHM_DIR = Path("/dev/shm")

log = logging.getLogger(__name__)

MAX_MEMORY_FRACTION = 0.75
"""Share of the host's physical memory that rings and batches together may take: the rest is left to
the engines, the OS and everything else on the box."""


@dataclass(frozen=True)
class HostMemory:
    """What the host can give: free bytes in the shared-memory folder (None when there is none, e.g.
    not Linux) and physical memory (None when unknown)."""

    shm_free_bytes: int | None
    physical_bytes: int | None
    shm_dir: Path = SHM_DIR

    @classmethod
    def probe(cls, shm_dir: Path = SHM_DIR) -> HostMemory:
        """This host's figures: os.statvfs of `shm_dir` and sysconf's physical pages."""
        try:
            stats = os.statvfs(shm_dir)
            shm_free: int | None = stats.f_bavail * stats.f_frsize
        except OSError:
            shm_free = None
        try:
            physical: int | None = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            physical = None
        return cls(shm_free, physical if physical and physical > 0 else None, shm_dir)


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes the rings (shared memory) and the inference batches (private memory) of one run need."""

    ring_bytes: int
    """All rings together, exactly as FrameRing.create sizes them (header + slots x frame)."""
    batch_bytes: int
    """All inference workers together: the frames of a full batch and their stacked copy."""
    slots: int
    frame_sizes: tuple[tuple[int, int], ...]
    """(width, height) of the slots of each source."""
    workers: int
    batch: int
    """Frames per batch as it can really fill: batch_size, at most every slot of every ring."""

    @property
    def total_bytes(self) -> int:
        return self.ring_bytes + self.batch_bytes

    @property
    def sources(self) -> int:
        return len(self.frame_sizes)

    def describe_rings(self) -> str:
        """E.g. '3 sources x 8 slots of 1920x1080'."""
        sizes = list(dict.fromkeys(f"{width}x{height}" for width, height in self.frame_sizes))
        plural = "source" if self.sources == 1 else "sources"
        return f"{self.sources} {plural} x {self.slots} slots of {', '.join(sizes)}"


def estimate_memory(
    config: PipelineConfig,
    frame_sizes: Sequence[tuple[int, int]] | None = None,
    *,
    workers: int | None = None,
    input_bytes: int | None = None,
) -> MemoryEstimate:
    """The bytes `config` needs for its rings and batches; allocates nothing.

    `frame_sizes` is the slot (width, height) of each source in `config.sources` order (a file's own
    frame size, `runtime.max_frame_size` for a live source); None assumes max_frame_size for every one.
    `workers` is the number of inference processes (default: runtime.inference_workers, else 1).
    `input_bytes` is one frame's preprocessed model input, when known; by default it follows
    `config.preprocess`: with `fold` the engine takes the raw frame, otherwise a `resize` frame (or the
    frame at its own size) in the input's dtype.
    """
    runtime = config.runtime
    sizes = tuple(frame_sizes) if frame_sizes is not None else (runtime.max_frame_size,) * len(config.sources)
    if len(sizes) != len(config.sources):
        raise ValueError(f"expected one frame size per source ({len(config.sources)}), got {len(sizes)}")
    workers = workers if workers is not None else (runtime.inference_workers or 1)
    slots = runtime.ring_slots
    rings = sum(RingLayout(slots, height, width).total_bytes for width, height in sizes)
    largest_frame = max(width * height * 3 for width, height in sizes)
    batch = min(runtime.batch_size, slots * len(sizes))
    preprocess = config.preprocess
    if input_bytes is None and preprocess.fold:
        input_bytes = largest_frame  # the engine takes raw uint8 frames and resizes inside
    elif input_bytes is None:
        pixels = preprocess.resize[0] * preprocess.resize[1] * 3 if preprocess.resize else largest_frame
        input_bytes = pixels * np.dtype(preprocess.dtype).itemsize
    # One tensor per frame (a copy, unless a raw frame fills its slot exactly), then the stacked batch.
    per_worker = 2 * batch * input_bytes
    return MemoryEstimate(rings, workers * per_worker, slots, sizes, workers, batch)


def check_memory(estimate: MemoryEstimate, host: HostMemory | None = None) -> None:
    """Raise ConfigError, with the figures and what to lower, when the rings do not fit in the free
    shared memory or rings and batches together exceed MAX_MEMORY_FRACTION of physical memory."""
    host = host or HostMemory.probe()
    if host.shm_free_bytes is not None and estimate.ring_bytes > host.shm_free_bytes:
        raise ConfigError(
            f"the rings need {_size(estimate.ring_bytes)} of shared memory for {estimate.describe_rings()}; "
            f"this host has {_size(host.shm_free_bytes)} free in {host.shm_dir}; "
            "lower runtime.ring_slots or max_frame_size"
        )
    if host.physical_bytes is not None and estimate.total_bytes > MAX_MEMORY_FRACTION * host.physical_bytes:
        raise ConfigError(
            f"the rings and batches need {_size(estimate.total_bytes)} ({_size(estimate.ring_bytes)} for "
            f"{estimate.describe_rings()}, {_size(estimate.batch_bytes)} for {estimate.workers} inference "
            f"worker{'s' if estimate.workers != 1 else ''} x batch {estimate.batch}); a pipeline may use "
            f"{MAX_MEMORY_FRACTION:.0%} of this host's {_size(host.physical_bytes)}; lower runtime.ring_slots, "
            "max_frame_size, batch_size or inference_workers"
        )


def check_pipeline_memory(
    config: PipelineConfig,
    frame_sizes: Sequence[tuple[int, int]] | None = None,
    *,
    workers: int | None = None,
    input_bytes: int | None = None,
    host: HostMemory | None = None,
) -> MemoryEstimate:
    """`estimate_memory`, then `check_memory`: the estimate when it fits, else ConfigError. Call it
    before the first ring is created (see the module docstring)."""
    estimate = estimate_memory(config, frame_sizes, workers=workers, input_bytes=input_bytes)
    check_memory(estimate, host)
    warn_if_batches_can_hold_the_rings(estimate)
    return estimate


def warn_if_batches_can_hold_the_rings(estimate: MemoryEstimate) -> None:
    """One warning when the inference workers' batches can hold more than half of all ring slots.

    On the H200 (8 sources of 1920x1080, the demo detector on CUDA) such layouts collapsed: 6 workers x 8
    or 4 x 16 on 8 slots per source ran at 20-33 FPS with the GPU 3% busy, where 4 x 8 ran at 337-351 FPS;
    with 24 slots per source 6 x 8 and 4 x 16 ran at 410 and 413 FPS (docs/benchmarks.md).
    """
    total = estimate.slots * estimate.sources
    held = estimate.workers * estimate.batch
    if 2 * held > total:
        enough = -(-2 * held // estimate.sources)
        log.warning(
            "%d inference worker%s x batch %d can hold %d of the %d ring slots (%s); with more than half held, "
            "GPU pipelines have run at a tenth of their rate or less (docs/benchmarks.md): raise runtime.ring_slots "
            "to at least %d",
            estimate.workers, "s" if estimate.workers != 1 else "", estimate.batch, held, total,
            estimate.describe_rings(), enough,
        )  # fmt: skip


def _size(size: int) -> str:
    """Decimal units, as `df -H` and most people count: 24.9 GB, 310.0 MB."""
    if size >= 1e9:
        return f"{size / 1e9:.1f} GB"
    if size >= 1e6:
        return f"{size / 1e6:.1f} MB"
    return f"{size / 1e3:.1f} kB"


class SourceSlot(NamedTuple):
    name: str
    policy: BufferPolicy
    size: tuple[int, int]
    """(width, height) of the ring's slots."""
    live: bool
    """A camera or stream (frames arrive in real time), not a file or folder that is read ahead."""


def source_slot(spec: SourceSpec, base_dir: Path, max_frame_size: tuple[int, int]) -> SourceSlot:
    """A source's name, buffer policy and ring slot size: a file's own frame size (its first frame is
    read), or `max_frame_size` for a live source."""
    source = create_source(spec, base_dir)
    policy = spec.buffer_policy(source.is_live)
    if source.is_live:
        return SourceSlot(source.name, policy, max_frame_size, live=True)
    with source:
        frame = source.read()
    if frame is None:
        raise SourceError(f"source {source.name}: {spec.uri} has no frames")
    return SourceSlot(source.name, policy, (frame.meta.width, frame.meta.height), live=False)
