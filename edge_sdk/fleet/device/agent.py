"""The device agent: one MQTT connection, presence, commands, deployments and desired/reported state.

    agent = Agent(load_agent_config(Path("agent.yaml")))
    agent.start()   # connects in the background, keeps reconnecting with the broker settings' back-off
    ...
    agent.stop()    # publishes offline presence, disconnects

Topics are `DeviceTopics(device_id)`. The agent subscribes (QoS 1) to `cmd`, `desired` and
`artifacts/<version>/<name>`; it publishes retained presence on `state` (with a retained offline last
will), answers every command on `resp` with the command's correlation data, and keeps a retained
reported state on `reported`, and live telemetry below `telemetry/` (edge_sdk.fleet.wire.telemetry: each
pipeline's status events, its stats every `stats_interval_s`, and the preview thumbnails of `type: agent`
sinks that ask for them). Commands are never retained: one with the retain flag is logged, not run.
Every message is handled on the inbox's one worker thread in arrival order (agent_inbox.py), and a
message that cannot be decoded or a handler that fails is answered (commands.py) or logged, never fatal.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from edge_sdk import __version__
from edge_sdk.core.errors import ArtifactError, ChunkError, ConfigError
from edge_sdk.core.status import StatusEvent
from edge_sdk.engines.cache import EngineCache
from edge_sdk.fleet.device.agent_config import AgentConfig
from edge_sdk.fleet.device.agent_inbox import AgentInbox
from edge_sdk.fleet.device.agent_state import AgentState
from edge_sdk.fleet.device.artifacts import ArtifactStore
from edge_sdk.fleet.device.commands import answer
from edge_sdk.fleet.device.deploy import Deployer, DeployResult
from edge_sdk.fleet.device.pipeline_stats import StatsPublisher
from edge_sdk.fleet.device.pipelines import DEFAULT_START_TIMEOUT_S, PipelineStartError, PipelineSupervisor
from edge_sdk.fleet.device.results_forwarder import ResultForwarder
from edge_sdk.fleet.wire.manifest import DeviceIdentity
from edge_sdk.fleet.wire.protocol import (
    DesiredState,
    LastDeploy,
    Presence,
    ProtocolError,
    ReportedState,
    Response,
    decode_desired,
    encode_message,
    encode_response,
    offline_presence,
    utc_now,
)
from edge_sdk.fleet.wire.signing import load_trusted_keys
from edge_sdk.mqtt import Message, MqttClient, MqttError, MqttSettings, Will
from edge_sdk.mqtt.client_roles import AgentClient
from edge_sdk.mqtt.topics import DeviceTopics
from edge_sdk.pipeline.snapshot import RuntimeSnapshot
from edge_sdk.profiles import DeviceProfile, ProfileCatalog
from edge_sdk.sinks.agent import OUTBOX_ENV

log = logging.getLogger(__name__)

STOP_TIMEOUT_S = 5.0
RESULTS_OUTBOX = "results-outbox.sqlite"
"""The outbox of `type: agent` sinks, in the store folder (see edge_sdk.sinks.agent)."""


class Agent:
    """The device side of fleet control (see the module docstring)."""

    def __init__(
        self,
        config: AgentConfig,
        *,
        now: Callable[[], datetime] = utc_now,
        profile: DeviceProfile | None = None,
        client: Callable[[MqttSettings], AgentClient] = MqttClient,
    ):
        self.config = config
        self.topics = DeviceTopics(config.device_id)
        self.store = ArtifactStore(config.store_dir, keep=config.keep_versions)
        self.store.remove_stale()
        self.state = AgentState.load(config.store_dir / "agent-state.json")
        self._catalog = ProfileCatalog(config.profile_dir)
        self._profile = profile or self._catalog.resolve(self.state.profile or config.profile)
        self._now = now
        cache = EngineCache(config.engine_cache_dir) if config.engine_cache_dir else None
        self.pipelines = PipelineSupervisor(
            self.store,
            lambda: self._profile,
            cache,
            on_change=lambda: self.inbox.submit("facts", self._publish_facts),
            on_status=self._pipeline_status,
            environment={OUTBOX_ENV: str(config.store_dir / RESULTS_OUTBOX)},
            on_snapshot=self._publish_stats if config.stats_interval_s else None,
        )
        self.deployer = Deployer(
            self.store,
            _trusted_keys(config.trusted_keys_dir),
            identity=self.identity,
            profile=lambda: self._profile,
            now=now,
            cache=cache,
            on_activated=self._restart_pipelines,
        )
        self.client = client(self._settings())
        self.inbox = AgentInbox(
            self.client, name=f"edge-agent-{config.device_id}", max_chunk_bytes=config.max_pending_chunk_bytes
        )
        self.results = ResultForwarder(
            config.store_dir / RESULTS_OUTBOX, self.client, self.topics, config.max_outbox_results
        )
        self.stats = StatsPublisher(self.client, self.topics, config.stats_interval_s)
        self._desired: DesiredState | None = None
        self._online_since = now()

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> None:
        """Start the worker, connect in the background and subscribe (renewed on every reconnect)."""
        self.inbox.start()
        self.inbox.submit("pipelines", self._sync_pipelines)
        self.inbox.on_connected(self._on_connected)
        self.client.start()
        self.results.start()
        self.inbox.subscribe(self.topics.cmd, "command", self._command)
        self.inbox.subscribe(self.topics.desired, "desired", self._on_desired)
        self.inbox.subscribe_chunks(self.topics.artifacts("#"), self._chunk)
        log.info("agent %s started (profile %s)", self.config.device_id, self._profile.name)

    def stop(self) -> None:
        """Publish offline presence (retained), disconnect cleanly, stop the worker."""
        self.inbox.stop(STOP_TIMEOUT_S)
        self.pipelines.stop_all()
        self.results.stop()
        if self.client.is_connected:
            try:
                self.client.publish(self.topics.state, offline_presence(self.config.device_id), qos=1, retain=True)
            except MqttError as exc:
                log.warning("could not publish offline presence: %s", exc)
        self.client.disconnect(flush_timeout=STOP_TIMEOUT_S)
        self.deployer.close()

    def __enter__(self) -> Agent:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # ---------------------------------------------------------------- facts
    def identity(self) -> DeviceIdentity:
        return DeviceIdentity(self.config.device_id, self._profile.name, dict(self.config.labels))

    @property
    def profile(self) -> DeviceProfile:
        return self._profile

    def presence(self) -> Presence:
        current = self.store.current_version()
        models: list[str] = []
        if current is not None:
            try:
                models = [a.name for a in self.store.manifest(current).artifacts if a.kind == "model"]
            except ArtifactError as exc:
                log.warning("cannot read the active manifest: %s", exc)
        last = self.state.last_deploy
        running = self.pipelines.running()
        degraded = last is not None and last.outcome in ("rolled_back", "failed")
        health = "degraded" if degraded or set(self.state.pipelines) - set(running) else "ok"
        return Presence(
            device=self.config.device_id,
            online=True,
            profile=self._profile.name,
            labels=dict(self.config.labels),
            sdk_version=__version__,
            active_version=current,
            models=models,
            pipelines=running,
            health=health,
            since=self._online_since,
        )

    def reported(self) -> ReportedState:
        return ReportedState(
            device=self.config.device_id,
            applied_revision=self.state.applied_revision,
            active_version=self.store.current_version(),
            last_deploy=self.state.last_deploy,
            pipelines=self.pipelines.running(),
        )

    # ---------------------------------------------------------------- what commands do
    def apply_deployment(self, signed: bytes, require_rollback: bool = False) -> DeployResult:
        """Run one deployment and record its outcome (reported state and presence are republished)."""
        result = self.deployer.deploy(signed, require_rollback)
        outcome = result.outcome
        if outcome is not None:
            self.state.last_deploy = LastDeploy(
                version=result.version,
                outcome=outcome,
                reason=result.message if outcome != "active" else None,
                at=self._now(),
            )
            self.state.save()
            self._publish_facts()
        return result

    def set_pipeline(self, name: str, running: bool) -> list[str]:
        """Start (PipelineStartError when it cannot) or stop a pipeline; returns the running ones.

        A started pipeline is wanted: it is started again on every new version and after a restart.
        """
        if running:
            self.pipelines.start(name, timeout=self._start_timeout(self.store.current_version()))
        else:
            self.pipelines.stop(name)
        wanted = [p for p in self.state.pipelines if p != name] + ([name] if running else [])
        self.state.pipelines = sorted(wanted)
        self.state.save()
        self._publish_facts()
        return self.pipelines.running()

    def set_profile(self, name: str) -> None:
        self._profile = self._catalog.load(name)
        self.state.profile = name
        self.state.save()
        self._publish_facts()

    # ---------------------------------------------------------------- MQTT
    def _settings(self) -> MqttSettings:
        settings = self.config.broker
        update: dict[str, Any] = {
            "will": Will(topic=self.topics.state, payload=offline_presence(self.config.device_id).decode(), qos=1)
        }
        if not settings.client_id:
            update["client_id"] = self.config.device_id
        return settings.model_copy(update=update)

    # ---------------------------------------------------------------- the worker's jobs
    def _on_connected(self) -> None:
        self._online_since = self._now()
        self._publish_facts()
        self._converge()

    def _command(self, message: Message) -> None:
        if message.retain:  # commands are not retained by design: a retained one would run at every restart
            log.warning("ignored a retained command on %s; clear it with an empty retained message", message.topic)
            return
        self._respond(message, answer(self, message.payload))

    def _respond(self, message: Message, response: Response) -> None:
        correlation = message.correlation_data
        if correlation is None and response.id != "unknown":
            correlation = response.id.encode()
        payload = encode_response(response)
        try:
            self.client.publish(self.topics.resp, payload, qos=1, wait=False, correlation_data=correlation)
        except MqttError as exc:
            log.warning("could not answer command %s: %s", response.id, exc)

    def _chunk(self, message: Message) -> None:
        levels = message.topic[len(self.topics.artifacts()) + 1 :].split("/")
        if len(levels) != 2 or not levels[0].isdigit() or len(levels[0]) > 19:
            log.warning("dropped a message on %s: expected artifacts/<version>/<name>", message.topic)
            return
        try:
            complete = self.deployer.accept_chunk(int(levels[0]), levels[1], message.payload)
        except (ChunkError, ArtifactError) as exc:
            log.warning("dropped a chunk on %s: %s", message.topic, exc)
            return
        desired = self._desired
        if complete and desired is not None and desired.revision > self.state.applied_revision:
            self._converge()

    def _on_desired(self, message: Message) -> None:
        if not message.payload:
            return  # retained desired state cleared
        try:
            desired = decode_desired(message.payload, max_bytes=self.config.max_command_bytes)
        except ProtocolError as exc:
            log.warning("refused a desired state: %s", exc)
            return
        if self._desired is not None and desired.revision <= self._desired.revision:
            return
        self._desired = desired
        self._converge()

    def _converge(self) -> None:
        """Bring the device to the newest desired state it has not applied yet."""
        desired = self._desired
        if desired is None or desired.revision <= self.state.applied_revision:
            return
        log.info("converging to desired revision %d", desired.revision)
        applied = True
        self.state.pipelines = sorted(set(desired.pipelines))  # a new version starts these
        if desired.deployment is not None:
            result = self.apply_deployment(desired.deployment.encode("utf-8", errors="surrogatepass"))
            if result.status == "need_chunks":
                applied = False
                self.state.last_deploy = LastDeploy(
                    version=result.version,
                    outcome="pending",
                    reason=f"need_chunks: waiting for chunks {_chunk_ranges(result.missing)}"[:4096],
                    at=self._now(),
                )
            elif result.status == "deploy_failed":
                applied = False  # e.g. a download failed: tried again on the next connect
        self._sync_pipelines()
        if applied:
            self.state.applied_revision = desired.revision
        self.state.save()
        self._publish_facts()

    def _start_timeout(self, version: int | None) -> float:
        try:
            check = self.store.manifest(version).health_check if version is not None else None
        except ArtifactError:
            check = None
        return check.pipeline_start_timeout_s if check is not None else DEFAULT_START_TIMEOUT_S

    def _restart_pipelines(self, version: int) -> None:
        """After an activation: the wanted pipelines run on `version` (PipelineStartError rolls it back)."""
        self.pipelines.restart_on(version, list(self.state.pipelines), self._start_timeout(version))

    def _sync_pipelines(self) -> None:
        """Start wanted pipelines that do not run, stop the others; failures are logged and shown as degraded."""
        running = set(self.pipelines.running())
        for name in sorted(running - set(self.state.pipelines)):
            self.pipelines.stop(name)
        for name in self.state.pipelines:
            if name not in running:
                try:
                    self.pipelines.start(name, timeout=self._start_timeout(self.store.current_version()))
                except PipelineStartError as exc:
                    log.warning("%s", exc)

    def _pipeline_status(self, pipeline: str, event: StatusEvent) -> None:
        """Pipeline status events go to telemetry/pipelines/<name> (QoS 1; spooled while offline with a spool)."""
        payload = json.dumps({"device": self.config.device_id, "pipeline": pipeline, **event.to_dict()}, default=str)
        try:
            self.client.publish(self.topics.telemetry("pipelines", pipeline), payload.encode(), qos=1, wait=False)
        except MqttError as exc:
            log.debug("pipeline status not published: %s", exc)

    def _publish_stats(self, pipeline: str, snapshot: RuntimeSnapshot) -> None:
        """A pipeline's runtime snapshot to telemetry/stats/<name> (QoS 0, at most every stats_interval_s)."""
        self.stats.publish(pipeline, snapshot)

    def _publish_facts(self) -> None:
        for topic, message in ((self.topics.state, self.presence()), (self.topics.reported, self.reported())):
            try:
                self.client.publish(topic, encode_message(message), qos=1, retain=True, wait=False)
            except MqttError as exc:
                log.warning("could not publish %s: %s", topic, exc)


def _trusted_keys(folder: Path) -> list[Any]:
    paths = sorted(folder.glob("*.pub")) if folder.is_dir() else []
    if not paths:
        raise ConfigError(f"{folder}: expected the operators' public keys (*.pub) the device trusts, found none")
    return load_trusted_keys(paths)


def _chunk_ranges(missing: dict[str, list[list[int]]]) -> str:
    """'model.onnx 0-3, 7' for the chunks a deploy waits for (ranges of chunk indexes, first and last)."""
    return "; ".join(
        f"{name} " + ", ".join(f"{r[0]}-{r[-1]}" if r[0] != r[-1] else str(r[0]) for r in ranges)
        for name, ranges in missing.items()
    )
