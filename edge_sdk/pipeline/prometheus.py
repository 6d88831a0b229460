"""Serve the runtime's counters as Prometheus metrics while a pipeline runs."""

from __future__ import annotations

import errno
import socket
from typing import Any

from edge_sdk.core.errors import BackendUnavailableError, ConfigError
from edge_sdk.serving.breaker import STATE_VALUE, BreakerState

from .snapshot import RuntimeSnapshot


def listen_error(port: int, address: str, exc: OSError) -> str:
    """One line for a /metrics endpoint that cannot listen: the port is taken, privileged, or the
    address is not this host's."""
    where = f"port {port} on {address}"
    if isinstance(exc, socket.gaierror):
        return f"prometheus: cannot resolve address '{address}' ({exc.strerror}); expected an IP address or host name"
    if exc.errno == errno.EADDRINUSE:
        return f"prometheus: {where} is in use"
    if exc.errno == errno.EACCES:
        return f"prometheus: {where} needs privileges; expected a port above 1023 (runtime.prometheus.port)"
    if exc.errno == errno.EADDRNOTAVAIL:
        return f"prometheus: address {address} is not one of this host's (runtime.prometheus.address)"
    return f"prometheus: cannot listen on {where} ({exc.strerror or exc})"


class PrometheusExporter:
    """Owns a private registry and an HTTP server on `address:port`; `update()` with each snapshot."""

    def __init__(self, port: int, address: str = "127.0.0.1"):
        try:
            import prometheus_client as prom
        except ImportError:
            raise BackendUnavailableError(
                "runtime.prometheus needs prometheus-client: pip install 'edge-sdk[metrics]'"
            ) from None
        self.registry = prom.CollectorRegistry()
        self._stage_fps = prom.Gauge(
            "edge_sdk_stage_fps", "Frames per second per stage", ["stage"], registry=self.registry
        )
        self._stage_busy = prom.Gauge(
            "edge_sdk_stage_busy_ratio", "Fraction of time a stage spends working", ["stage"], registry=self.registry
        )
        self._stage_frames = prom.Gauge(
            "edge_sdk_stage_frames", "Frames a stage handled since it (re)started", ["stage"], registry=self.registry
        )
        self._restarts = prom.Gauge("edge_sdk_stage_restarts", "Restarts of a stage", ["stage"], registry=self.registry)
        self._dropped = prom.Gauge(
            "edge_sdk_source_dropped_frames", "Frames dropped per source", ["source"], registry=self.registry
        )
        self._slots = prom.Gauge(
            "edge_sdk_ring_slots", "Frame ring slots by state", ["source", "state"], registry=self.registry
        )
        self._latency = prom.Gauge(
            "edge_sdk_latency_ms", "Capture-to-result latency over recent frames", ["quantile"], registry=self.registry
        )
        self._offload_frames = prom.Gauge(
            "edge_sdk_offload_frames",
            "Frames an inference stage's offload agent had computed, by where (edge, cloud, split@...)",
            ["stage", "computed_at"],
            registry=self.registry,
        )
        self._offload_fallbacks = prom.Gauge(
            "edge_sdk_offload_fallbacks",
            "Frames sent away and computed on the edge after all, by reason",
            ["stage", "reason"],
            registry=self.registry,
        )
        self._offload_link = prom.Gauge(
            "edge_sdk_offload_link", "The offload agent's link estimate", ["stage", "quantity"], registry=self.registry
        )
        self._offload_cloud_ms = prom.Gauge(
            "edge_sdk_offload_cloud_ms", "Workers' compute time per mode", ["stage", "mode"], registry=self.registry
        )
        self._offload_share = prom.Gauge(
            "edge_sdk_offload_throughput_share",
            "Share of frames sent away because the edge cannot keep pace with the cameras (0 while it can)",
            ["stage"],
            registry=self.registry,
        )
        self._offload_late = prom.Gauge(
            "edge_sdk_offload_late_answers", "Answers that came after their frame's deadline", ["stage"],
            registry=self.registry,
        )  # fmt: skip
        self._breaker_state = prom.Gauge(
            "edge_sdk_breaker_state",
            "An inference stage's circuit breaker of the fallback model: 0 closed, 1 half-open, 2 open",
            ["stage"],
            registry=self.registry,
        )
        self._model_frames = prom.Gauge(
            "edge_sdk_model_frames",
            "Frames an inference stage computed, by model (primary, fallback)",
            ["stage", "model"],
            registry=self.registry,
        )
        self._breaker_openings = prom.Gauge(
            "edge_sdk_breaker_openings", "Times an inference stage's circuit breaker opened", ["stage"],
            registry=self.registry,
        )  # fmt: skip
        self._batch_mean = prom.Gauge(
            "edge_sdk_batch_mean", "An inference stage's mean batch under runtime.latency_slo_ms", ["stage"],
            registry=self.registry,
        )  # fmt: skip
        self._batch_shed = prom.Gauge(
            "edge_sdk_batching_shed",
            "Frames an inference stage dropped because they could not meet runtime.latency_slo_ms", ["stage"],
            registry=self.registry,
        )  # fmt: skip
        self._server: Any
        try:
            self._server, self._thread = prom.start_http_server(port, addr=address, registry=self.registry)
        except OSError as exc:
            raise ConfigError(listen_error(port, address, exc)) from None
        self.port = port

    def update(self, snapshot: RuntimeSnapshot) -> None:
        for stage in snapshot.stages:
            self._stage_fps.labels(stage.name).set(stage.fps)
            self._stage_busy.labels(stage.name).set(stage.busy)
            self._stage_frames.labels(stage.name).set(stage.frames)
            self._restarts.labels(stage.name).set(stage.restarts)
            if stage.offload:
                self._update_offload(stage.name, stage.offload)
            if stage.breaker:
                self._update_breaker(stage.name, stage.breaker)
            if stage.batching:
                self._batch_mean.labels(stage.name).set(stage.batching.get("mean_batch", 0))
                self._batch_shed.labels(stage.name).set(stage.batching.get("shed", 0))
        for source, states in snapshot.rings.items():
            self._dropped.labels(source).set(states.get("dropped", 0))
            for state, count in states.items():
                if state != "dropped":
                    self._slots.labels(source, state).set(count)
        self._latency.labels("0.5").set(snapshot.latency_p50_ms)
        self._latency.labels("0.99").set(snapshot.latency_p99_ms)

    def _update_offload(self, stage: str, counters: dict[str, Any]) -> None:
        for where, count in counters.get("computed", {}).items():
            self._offload_frames.labels(stage, where).set(count)
        for reason, count in counters.get("fallbacks", {}).items():
            self._offload_fallbacks.labels(stage, reason).set(count)
        for quantity, key in (("bandwidth_mbps", "bandwidth_mbps"), ("rtt_ms", "rtt_ms")):
            if counters.get(key) is not None:
                self._offload_link.labels(stage, quantity).set(counters[key])
        for mode, ms in counters.get("cloud_ms", {}).items():
            self._offload_cloud_ms.labels(stage, mode).set(ms)
        self._offload_late.labels(stage).set(counters.get("late_answers", 0))
        self._offload_share.labels(stage).set(counters.get("throughput_share", 0))

    def _update_breaker(self, stage: str, counters: dict[str, Any]) -> None:
        state = counters.get("state", "closed")
        self._breaker_state.labels(stage).set(STATE_VALUE.get(BreakerState(state), 0))
        for model, count in counters.get("frames", {}).items():
            self._model_frames.labels(stage, model).set(count)
        self._breaker_openings.labels(stage).set(counters.get("openings", 0))

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
