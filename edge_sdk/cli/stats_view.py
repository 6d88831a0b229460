"""The live `--stats` table: stages (process, fps, load, restarts), rings (slots, drops), latency."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table

from edge_sdk.pipeline.snapshot import RuntimeSnapshot


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
    return Group(stages, rings, latency)
