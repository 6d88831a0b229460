"""Running a staged rollout of a signed deployment over a fleet: a first wave, then a rate, an abort threshold.

    rollout_id = create_rollout(operator, store, envelope, first_wave=5, rate_per_min=60, abort_threshold=0.2)
    record = RolloutRunner(operator, store, rollout_id).run()

How it goes (`create_rollout`, in rollout_plan, chose the targets and their waves; rollout_outcomes says
what a device's answers mean):
- wave 0 (the first `first_wave` devices) is sent at once and must finish before anything else is
  sent; then devices are sent one at a time at `rate_per_min`, in waves of a minute's worth;
- an online device gets a `deploy` command (chunks sent when it asks) and, once active, its retained
  desired state; an offline device gets only the retained desired state and converges to it when
  it returns (its `reported` state resolves it, or a deploy command when it comes online);
- after every outcome, a wave whose failure ratio passes `abort_threshold` stops the rollout:
  nothing more is sent, and the devices of that wave (and any later one in flight) that became
  active are rolled back: each to the version it reported before the rollout, with a rollback
  manifest signed for it alone when the runner has the operator's signing key (else the signed
  rollback manifest given, else the previous desired state; see rollout_rollback). The ratio is failures (refused, failed, timed out) over the devices of the wave that
  finished, but over no fewer than `first_wave` of them (or the whole wave when it is smaller), so
  one early failure does not stop a big wave and a big wave need not fail in bulk to stop;
- every change is written to the `RolloutStore` first, so `run()` on a new operator resumes where
  it stopped: done devices are never sent the deployment again.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from edge_sdk.core.errors import ChunkSendError, CommandTimeoutError, EdgeSDKError
from edge_sdk.fleet.operator.client import DeviceRecord, FleetOperator
from edge_sdk.fleet.operator.rollout_outcomes import outcome_of, reported_outcome
from edge_sdk.fleet.operator.rollout_rollback import SigningKey, resolve_signing_key, restore_desired, roll_back_device
from edge_sdk.fleet.operator.rollout_store import (
    VIA_COMMAND,
    VIA_DESIRED,
    DeviceProgress,
    Outcome,
    RolloutRecord,
    RolloutState,
    RolloutStore,
)
from edge_sdk.mqtt import AckTimeoutError, MqttError

log = logging.getLogger(__name__)

COMMAND = VIA_COMMAND
DESIRED = VIA_DESIRED

__all__ = ["RolloutRunner"]


@dataclass(frozen=True)
class _Result:
    device: str
    outcome: Outcome
    reason: str | None
    rollback: bool = False


class RolloutRunner:
    """Drives one rollout of `store` to its end (or until `stop` is set); safe to run again to resume."""

    def __init__(
        self,
        operator: FleetOperator,
        store: RolloutStore,
        rollout_id: str,
        *,
        max_parallel: int = 32,
        offline_wait_s: float = 0.0,
        resend_on_return: bool = True,
        on_change: Callable[[str, Outcome, str | None], None] | None = None,
        signing_key: SigningKey | None = None,
    ):
        """`signing_key` signs per-device rollback manifests; by default the key file kept with the rollout."""
        self.operator = operator
        self.store = store
        self.rollout_id = rollout_id
        self.max_parallel = max_parallel
        self.offline_wait_s = offline_wait_s
        self.resend_on_return = resend_on_return
        self.on_change = on_change
        self.signing_key = signing_key
        self._key = None if isinstance(signing_key, Path) else signing_key
        self._events: queue.Queue[_Result | DeviceRecord] = queue.Queue()
        self._inflight: set[str] = set()
        self._progress: dict[str, DeviceProgress] = {}
        self._outcome: dict[str, Outcome] = {}
        self._via: dict[str, str | None] = {}
        self._aborted_wave: int | None = None

    # ---------------------------------------------------------------- the loop
    def run(self, stop: threading.Event | None = None) -> RolloutRecord:
        stop = stop or threading.Event()
        record = self.store.load(self.rollout_id)
        if record.state.finished and not (record.state is RolloutState.ABORTED and record.aborted_wave is not None):
            return record
        self._aborted_wave = record.aborted_wave  # an aborted rollout resumes its rollback
        self.spec = record.spec
        self._key = resolve_signing_key(record.spec, self.signing_key)  # a missing key file fails before anything
        self._sizes: dict[int, int] = {}
        for device in record.devices:
            self._progress[device.device] = device
            self._outcome[device.device] = device.outcome
            self._via[device.device] = device.via
            self._sizes[device.wave] = self._sizes.get(device.wave, 0) + 1
        remove = self.operator.add_listener(lambda rec, kind: self._events.put(rec))
        self._executor = ThreadPoolExecutor(max_workers=self.max_parallel, thread_name_prefix="rollout")
        try:
            for rec in self.operator.devices():  # what is already known (retained) resolves resumed devices
                self._on_record(rec)
            if record.state is RolloutState.RUNNING:
                self._dispatch_all(record, stop)
            self._drain(stop)
            if self._aborted_wave is not None and not stop.is_set():
                self._roll_back_wave(self._aborted_wave, stop)
            elif not stop.is_set():
                self._wait_offline(stop)
            if not stop.is_set():
                self._finish()
        finally:
            remove()
            self._executor.shutdown(wait=True, cancel_futures=stop.is_set())
            self._record_late_results()
        return self.store.load(self.rollout_id)

    def _record_late_results(self) -> None:
        """After a stop: record the answers that came in while the workers finished (nothing is sent any more)."""
        while True:
            try:
                event = self._events.get_nowait()
            except queue.Empty:
                return
            if isinstance(event, _Result) and (event.rollback or self._outcome[event.device] is Outcome.SENT):
                self._set(event.device, event.outcome, event.reason)

    def _dispatch_all(self, record: RolloutRecord, stop: threading.Event) -> None:
        interval = 60.0 / self.spec.rate_per_min
        # Commands that were in flight when the last run stopped are sent again (deploy is idempotent).
        for device in record.devices:
            if self._outcome[device.device] is Outcome.SENT and device.via == COMMAND:
                self._send(device.device)
        next_at = time.monotonic()
        first_wave_done = False
        for device in record.devices:
            if stop.is_set() or self._aborted_wave is not None:
                return
            if device.wave > 0 and not first_wave_done:
                self._wait(lambda: not any(self._progress[d].wave == 0 for d in self._inflight), stop)
                first_wave_done = True
                next_at = time.monotonic()
                if stop.is_set() or self._aborted_wave is not None:
                    return
            if self._outcome[device.device] is not Outcome.PENDING:
                continue
            if device.wave > 0:
                self._wait(lambda: False, stop, deadline=next_at)
                if stop.is_set() or self._aborted_wave is not None:
                    return
                next_at = max(next_at + interval, time.monotonic())
            self._dispatch(device.device)
            self._handle_events(block=False)
        unsent = any(o is Outcome.PENDING for o in self._outcome.values())
        if not stop.is_set() and self._aborted_wave is None and not unsent:
            self.store.set_state(self.rollout_id, RolloutState.WAITING)

    def _dispatch(self, device: str) -> None:
        if self.operator.device(device).online:
            self._send(device)
            return
        try:
            self.operator.publish_desired(device, self.spec.manifest)
        except AckTimeoutError:
            pass  # paho holds the QoS 1 message until the broker has it, across reconnects
        except MqttError as exc:
            log.warning("could not publish the desired state of %s: %s; `fleet resume` sends it", device, exc)
            return
        self._set(device, Outcome.SENT, "offline: desired state published", via=DESIRED)

    def _send(self, device: str) -> None:
        if device in self._inflight:
            return
        self._inflight.add(device)
        self._set(device, Outcome.SENT, None, via=COMMAND)
        self._executor.submit(self._deploy_worker, device)

    def _deploy_worker(self, device: str) -> None:
        spec = self.spec
        try:
            response = self.operator.deploy(device, spec.manifest, spec.artifacts_dir, spec.command_timeout_s)
            outcome, reason = outcome_of(response, spec.version, self.operator.device(device))
            if outcome is Outcome.ACTIVE:
                self._publish_desired_quietly(device, spec.manifest)
        except CommandTimeoutError as exc:
            outcome, reason = Outcome.TIMED_OUT, str(exc)
        except ChunkSendError as exc:
            outcome, reason = Outcome.FAILED, str(exc)
        except EdgeSDKError as exc:
            outcome, reason = Outcome.FAILED, f"{type(exc).__name__}: {exc}"
        except Exception as exc:  # never lose a device: whatever happens it gets an outcome
            log.exception("deploy to %s failed", device)
            outcome, reason = Outcome.FAILED, f"operator error: {type(exc).__name__}: {exc}"
        self._events.put(_Result(device, outcome, reason))

    def _publish_desired_quietly(self, device: str, deployment: bytes | None) -> None:
        try:
            self.operator.publish_desired(device, deployment)
        except MqttError as exc:
            log.warning("could not publish the desired state of %s: %s", device, exc)

    # ---------------------------------------------------------------- events
    def _wait(self, condition: Callable[[], bool], stop: threading.Event, deadline: float | None = None) -> None:
        """Handle events until `condition()` holds or `deadline` (monotonic) passes, the rollout stops or aborts."""
        while not condition() and not stop.is_set() and self._aborted_wave is None:
            timeout = 0.2
            if deadline is not None:
                timeout = min(timeout, deadline - time.monotonic())
                if timeout <= 0:
                    return
            self._handle_events(block=True, timeout=timeout)

    def _handle_events(self, block: bool, timeout: float = 0.2) -> None:
        try:
            event = self._events.get(block=block, timeout=timeout if block else None)
        except queue.Empty:
            return
        while True:
            if isinstance(event, _Result):
                self._on_result(event)
            else:
                self._on_record(event)
            try:
                event = self._events.get_nowait()
            except queue.Empty:
                return

    def _on_result(self, result: _Result) -> None:
        self._inflight.discard(result.device)
        current = self._outcome[result.device]
        if result.rollback:
            self._set(result.device, result.outcome, result.reason)
            return
        if current is Outcome.SENT:
            self._set(result.device, result.outcome, result.reason)
            self._check_abort(self._progress[result.device].wave)

    def _on_record(self, record: DeviceRecord) -> None:
        device = record.device
        outcome = self._outcome.get(device)
        if outcome is None:
            return
        if outcome in (Outcome.SENT, Outcome.TIMED_OUT) and device not in self._inflight:
            resolved = reported_outcome(record, self.spec.version)
            if resolved is not None:
                self._set(device, *resolved)
                if outcome is Outcome.SENT:
                    self._check_abort(self._progress[device].wave)
                return
        if (
            outcome is Outcome.SENT
            and self._via[device] == DESIRED
            and record.online
            and self.resend_on_return
            and self._aborted_wave is None
        ):
            self._send(device)

    def _set(self, device: str, outcome: Outcome, reason: str | None, via: str | None = None) -> None:
        self.store.set_outcome(self.rollout_id, device, outcome, reason, via)
        self._outcome[device] = outcome
        if via is not None:
            self._via[device] = via
        if self.on_change is not None:
            self.on_change(device, outcome, reason)

    def _check_abort(self, wave: int) -> None:
        if self._aborted_wave is not None:
            return
        members = [d for d, p in self._progress.items() if p.wave == wave]
        failures = sum(1 for d in members if self._outcome[d].failure)
        finished = sum(1 for d in members if self._outcome[d].done)
        # A big wave is judged on what finished so far, once as many devices as the first wave had.
        judged = max(finished, min(self._sizes[wave], self.spec.first_wave))
        if failures / judged > self.spec.abort_threshold:
            self._aborted_wave = wave
            reason = (
                f"wave {wave}: {failures} of {judged} devices failed ({failures / judged:.0%}), "
                f"above the abort threshold {self.spec.abort_threshold:.0%}"
            )
            log.warning("rollout %s aborted: %s", self.rollout_id, reason)
            self.store.set_state(self.rollout_id, RolloutState.ABORTED, reason, aborted_wave=wave)

    # ---------------------------------------------------------------- ends
    def _drain(self, stop: threading.Event) -> None:
        """Wait for every command in flight to end (they all end: answer, error or timeout)."""
        while self._inflight and not stop.is_set():
            self._handle_events(block=True)

    def _wait_offline(self, stop: threading.Event) -> None:
        deadline = time.monotonic() + self.offline_wait_s
        while not stop.is_set() and self._aborted_wave is None:
            waiting = [d for d, o in self._outcome.items() if o is Outcome.SENT]
            if not waiting and not self._inflight:
                return
            if time.monotonic() >= deadline and not self._inflight:
                return
            self._handle_events(block=True, timeout=max(0.01, min(0.2, deadline - time.monotonic())))
        if self._aborted_wave is not None:
            self._drain(stop)
            self._roll_back_wave(self._aborted_wave, stop)

    def _finish(self) -> None:
        record = self.store.load(self.rollout_id)
        if record.state in (RolloutState.RUNNING, RolloutState.WAITING):
            unsent = sum(1 for d in record.devices if d.outcome is Outcome.PENDING)
            waiting = sum(1 for d in record.devices if d.outcome is Outcome.SENT)
            if unsent:  # the broker refused the desired state: stays RUNNING so `fleet resume` sends it
                self.store.set_state(
                    self.rollout_id, RolloutState.RUNNING, f"{unsent} device(s) not sent yet; run it again to send"
                )
            elif waiting:
                self.store.set_state(
                    self.rollout_id, RolloutState.WAITING, f"{waiting} device(s) still converging (offline)"
                )
            else:
                self.store.set_state(self.rollout_id, RolloutState.COMPLETED, "every device has an outcome")

    def _roll_back_wave(self, wave: int, stop: threading.Event) -> None:
        targets = [d for d, p in self._progress.items() if p.wave >= wave and self._outcome[d] is Outcome.ACTIVE]
        offline = [
            d
            for d, p in self._progress.items()
            if p.wave >= wave and self._outcome[d] is Outcome.SENT and self._via[d] == DESIRED
        ]
        for device in offline:  # they never got it: put their desired state back before they return
            self._restore_desired(device)
            self._set(device, Outcome.PENDING, "not applied: rollout aborted while the device was offline")
        for device in targets:
            self._inflight.add(device)
            self._executor.submit(self._rollback_worker, device)
        self._drain(stop)

    def _rollback_worker(self, device: str) -> None:
        def remember(envelope: bytes) -> None:
            self.store.set_rollback_manifest(self.rollout_id, device, envelope)

        try:
            outcome, reason = roll_back_device(self.operator, self.spec, self._progress[device], self._key, remember)
        except Exception as exc:  # never lose a device: whatever happens it gets an outcome
            log.exception("rollback of %s failed", device)
            outcome, reason = Outcome.ACTIVE, f"rollback failed: operator error: {type(exc).__name__}: {exc}"
        self._events.put(_Result(device, outcome, reason, rollback=True))

    def _restore_desired(self, device: str) -> None:
        previous = self._progress[device].previous_desired
        try:
            if previous is not None:
                restore_desired(self.operator, device, previous)
            else:
                self.operator.publish_desired(device, None)
        except MqttError as exc:
            log.warning("could not restore the desired state of %s: %s", device, exc)
