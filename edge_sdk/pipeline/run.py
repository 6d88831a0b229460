"""Run a pipeline file's config with the runtime it asks for, or iterate its results in your own loop."""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable, Iterator

from edge_sdk.core.results import Result
from edge_sdk.core.status import StatusCallback, ignore_status
from edge_sdk.core.systemd_notify import SystemdNotifier
from edge_sdk.engines.cache import EngineCache
from edge_sdk.profiles import DeviceProfile
from edge_sdk.sinks import check_sinks

from .config import PipelineConfig
from .loop import run_inline
from .metrics import RunSummary
from .prometheus import PrometheusExporter
from .runtime import PipelineRuntime
from .snapshot import RuntimeSnapshot


def run_pipeline(
    config: PipelineConfig,
    profile: DeviceProfile,
    cache: EngineCache | None = None,
    stop: threading.Event | None = None,
    on_status: StatusCallback = ignore_status,
    on_snapshot: Callable[[RuntimeSnapshot], None] | None = None,
    notifier: SystemdNotifier | None = None,
) -> RunSummary:
    """Stage processes over shared memory (runtime.mode: processes, the default) or one loop (inline).

    `notifier` (`edge-sdk run` passes systemd's, edge_sdk.core.systemd_notify) is told READY=1 when the
    pipeline has started, WATCHDOG=1 from the runtime's loop and STOPPING=1 when it drains.
    """
    check_sinks(config.sinks)
    if config.runtime.mode == "inline":
        return run_inline(config, profile, cache, stop=stop, on_status=on_status, notifier=notifier)
    if config.runtime.prometheus is None:
        return PipelineRuntime(
            config, profile, cache, on_status=on_status, on_snapshot=on_snapshot, notifier=notifier
        ).run(stop)
    exporter = PrometheusExporter(config.runtime.prometheus.port, config.runtime.prometheus.address)

    def publish(snapshot: RuntimeSnapshot) -> None:
        exporter.update(snapshot)
        if on_snapshot:
            on_snapshot(snapshot)

    try:
        return PipelineRuntime(config, profile, cache, on_status=on_status, on_snapshot=publish, notifier=notifier).run(
            stop
        )
    finally:
        exporter.close()


def iter_results(
    config: PipelineConfig,
    profile: DeviceProfile,
    cache: EngineCache | None = None,
    on_status: StatusCallback = ignore_status,
    max_pending: int = 64,
) -> Iterator[Result]:
    """The pipeline's results as they come, for a `for` loop in your own code.

    The pipeline runs inline (one process, `runtime.mode: inline`) in a background thread, so each
    Result reaches the loop without crossing a process; its sinks run too. Leaving the loop early
    (break, an exception, closing the iterator) stops the pipeline and waits for it. At most
    `max_pending` results wait for the loop: a slow loop holds the pipeline back, it never grows a
    queue. An error of the pipeline is raised from the loop.
    """
    results: queue.Queue[Result | None] = queue.Queue(maxsize=max_pending)
    stop = threading.Event()
    failure: list[BaseException] = []

    def deliver(result: Result) -> None:
        while not stop.is_set():
            try:
                results.put(result, timeout=0.1)
                return
            except queue.Full:
                continue

    def run() -> None:
        try:
            run_inline(config, profile, cache, stop=stop, on_result=deliver, on_status=on_status)
        except BaseException as exc:  # handed to the caller's loop
            failure.append(exc)
        finally:
            deliver_end()

    def deliver_end() -> None:
        """The end marker, however slow the loop; unless the loop has gone (stop set), which drains."""
        while True:
            try:
                results.put(None, timeout=0.1)
                return
            except queue.Full:
                if stop.is_set():
                    return

    worker = threading.Thread(target=run, name=f"pipeline-{config.name}", daemon=True)
    worker.start()
    try:
        while (result := results.get()) is not None:
            yield result
        worker.join()
        if failure:
            raise failure[0]
    finally:
        stop.set()
        while worker.is_alive():  # let a producer blocked on a full queue see the stop
            with contextlib.suppress(queue.Empty):
                results.get(timeout=0.1)
        worker.join()
