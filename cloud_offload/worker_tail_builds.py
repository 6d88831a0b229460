"""Tails a worker builds when an edge first asks for one: each on a thread of its own, started once;
until it is ready its requests are answered "tail not ready", and a failed build is remembered (not
retried), so every later request for it is answered at once with why."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from edge_sdk.core.errors import first_line

from .worker_models import TailRunner

log = logging.getLogger("cloud_offload.worker")

TailBuilder = Callable[[str, str, Sequence[str]], TailRunner | None]
"""(model key, part, the cut's tensors as a request names them) -> the tail, or None for no such cut."""


class TailBuilds:
    def __init__(self, builder: TailBuilder, add: Callable[[str, str, TailRunner], None]):
        self.builder, self.add = builder, add
        self._threads: list[threading.Thread] = []
        """Builds under way: joined on stop, since a process that exits while one is inside the engine
        library is aborted by it ("terminate called without an active exception")."""
        self._state: dict[tuple[str, str], str | None] = {}
        """Tails being built (None) or whose build failed (why)."""
        self._lock = threading.Lock()

    def start(self, key: str, part: str, tensors: Sequence[str]) -> None:
        """Build the tail `part` of `key` unless its build started already."""
        with self._lock:
            if (key, part) in self._state:
                return
            self._state[key, part] = None
        thread = threading.Thread(
            target=self._build, args=(key, part, tuple(tensors)), name=f"offload-tail-{part}", daemon=True
        )
        self._threads.append(thread)
        thread.start()

    def failure(self, key: str, part: str) -> str | None:
        """Why the tail's build failed; None while it builds (or never started)."""
        with self._lock:
            return self._state.get((key, part))

    def join(self, timeout_s: float) -> None:
        for thread in self._threads:
            thread.join(timeout_s)

    def _build(self, key: str, part: str, tensors: Sequence[str]) -> None:
        try:
            runner = self.builder(key, part, tensors)
            if runner is None:
                raise LookupError(f"no cut of model {key} has the part name {part}")
            self.add(key, part, runner)
            log.info("offload worker: tail %s of model %s ready", part, key)
        except Exception as exc:  # remembered, not retried: every request for it is answered at once
            with self._lock:
                self._state[key, part] = first_line(exc)
            log.warning("offload worker: tail %s of model %s cannot be served: %s", part, key, first_line(exc))
