"""The live `--stats` table: stages (process, fps, load, restarts), rings (slots, drops), latency."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table

from edge_sdk.pipeline.snapshot import RuntimeSnapshot, StageView


def render_snapshot(snapshot: RuntimeSnapshot) -> Group:
    stages = Table("stage", "pid", "state", "frames", "fps", "busy", "restarts", title=f"{snapshot.elapsed:.0f} s")
    for stage in snapshot.stages:
        stages.add_row(
            stage.name,
            str(stage.pid or "-"),
            stage.state,
            str(stage.frames),
            f"{stage.fps:.1f}",
            f"{stage.busy:.0%}",
            str(stage.restarts),
        )
    rings = Table("source", "free", "writing", "ready", "in use", "sent", "dropped")
    columns = ("free", "writing", "ready", "in_use", "sent", "dropped")
    for name, states in snapshot.rings.items():
        rings.add_row(name, *(str(states.get(k, 0)) for k in columns))
    latency = f"latency (recent frames): p50 {snapshot.latency_p50_ms:.1f} ms, p99 {snapshot.latency_p99_ms:.1f} ms"
    parts: list[Table | str] = [stages, rings, latency]
    breaking = [stage for stage in snapshot.stages if stage.breaker]
    if breaking:
        parts.append(_breaker_table(breaking))
    batching = [stage for stage in snapshot.stages if stage.batching]
    if batching:
        parts.append(_batching_table(batching))
    offloading = [stage for stage in snapshot.stages if stage.offload]
    if not offloading:
        return Group(*parts)
    offload = Table(
        "stage", "mode", "throughput", "computed", "link", "rtt", "cloud", "fallbacks", "late", title="offload"
    )
    for stage in offloading:
        counters = stage.offload or {}
        offload.add_row(
            stage.name,
            str(counters.get("mode", "-")),
            f"{counters['throughput_share']:.0%} away" if counters.get("throughput_share") else "-",
            _counts(counters.get("computed", {})),
            f"{counters['bandwidth_mbps']:.1f} Mbit/s" if counters.get("bandwidth_mbps") else "-",
            f"{counters['rtt_ms']:.0f} ms" if counters.get("rtt_ms") else "-",
            ", ".join(f"{name} {ms:.0f} ms" for name, ms in counters.get("cloud_ms", {}).items()) or "-",
            _counts(counters.get("fallbacks", {})),
            str(counters.get("late_answers", 0)),
        )
    return Group(*parts, offload)


def _breaker_table(stages: list[StageView]) -> Table:
    """The circuit breaker of each inference worker (a pipeline's `fallback:` model)."""
    table = Table("stage", "breaker", "primary", "fallback", "openings", "errors", title="fallback model")
    for stage in stages:
        counters = stage.breaker or {}
        frames = counters.get("frames", {})
        table.add_row(
            stage.name,
            str(counters.get("state", "-")).replace("_", "-"),
            str(frames.get("primary", 0)),
            str(frames.get("fallback", 0)),
            str(counters.get("openings", 0)),
            str(counters.get("errors", 0)),
        )
    return table


def _batching_table(stages: list[StageView]) -> Table:
    """Each inference worker's SLO batcher (runtime.latency_slo_ms)."""
    table = Table("stage", "target", "mean batch", "shed", "padded", title="latency target")
    for stage in stages:
        counters = stage.batching or {}
        table.add_row(
            stage.name,
            f"{counters.get('slo_ms', 0):g} ms",
            f"{counters.get('mean_batch', 0):.1f}",
            str(counters.get("shed", 0)),
            f"{counters.get('padding_share', 0):.0%}",
        )
    return table


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{name} {count}" for name, count in counts.items()) or "-"
