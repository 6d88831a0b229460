"""How many inference worker processes a pipeline runs, and how many threads each uses."""

from __future__ import annotations

import os

from edge_sdk.profiles import DeviceProfile

from .config import RuntimeSpec


def inference_layout(runtime: RuntimeSpec, profile: DeviceProfile) -> tuple[int, int | None]:
    """(workers, threads per worker): what the file says, else one single-threaded worker per core
    (up to 4) on CPU-only profiles, which beats one multi-threaded worker on throughput, and one
    worker with the profile's threads on accelerators."""
    cpu_only = profile.backend().runs_on_cpu(profile.engine)
    workers = runtime.inference_workers or (min(os.cpu_count() or 1, 4) if cpu_only else 1)
    threads = runtime.inference_threads or (1 if cpu_only and workers > 1 else None)
    return workers, threads
