"""`edge-sdk run` as edge-sdk-pipeline@.service starts it (Type=notify, WatchdogSec=, KillMode=mixed): READY=1
once the pipeline has started, WATCHDOG=1 from the runtime's loop, and on SIGTERM to the main process
STOPPING=1, a drain, exit 128 + SIGTERM (the unit's SuccessExitStatus=) and nothing left behind."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.support.notify_socket import NotifySocket

from .run_process import built_engine_cache, detector_pipeline, start_run

pytestmark = pytest.mark.slow  # edge-sdk subprocesses and multi-process runs: not in make test-fast

WAIT_S = 120.0
"""Generous: the machine may be loaded; the assertions count messages, none times them closely."""


@pytest.fixture(scope="module")
def built_cache(tmp_path_factory: pytest.TempPathFactory, demo_model: Path) -> Path:
    return built_engine_cache(tmp_path_factory, demo_model)


@pytest.mark.parametrize("mode", ["processes", "inline"])
def test_run_under_notify_socket_says_ready_pings_the_watchdog_and_stopping_on_sigterm(
    tmp_path: Path, demo_model: Path, built_cache: Path, mode: str
) -> None:
    # given an endless live pipeline, started with systemd's notify socket and a 2 s watchdog
    pipeline = detector_pipeline(tmp_path, demo_model, [{"type": "jsonl", "path": "out/results.jsonl"}], mode=mode)
    with NotifySocket.bind(tmp_path / "notify.sock") as notify:
        env = {"NOTIFY_SOCKET": notify.address, "WATCHDOG_USEC": "2000000"}
        run = start_run(pipeline, built_cache, env=env)
        try:
            # then READY=1 once it has started, and WATCHDOG=1 keeps coming from its loop
            run.wait_for(lambda: notify.count("READY=1") == 1, WAIT_S, "READY=1")
            assert notify.snapshot()[0] == ["READY=1", "STATUS=pipeline door started"]
            run.wait_for(lambda: notify.count("WATCHDOG=1") >= 4, WAIT_S, "four WATCHDOG=1")

            # when systemd stops it: SIGTERM to the main process only (KillMode=mixed)
            run.send(signal.SIGTERM, to_group=False)
            done = run.finish(timeout=WAIT_S)
        finally:
            if run.process.poll() is None:
                run.send(signal.SIGKILL)
                run.process.communicate()
        # then STOPPING=1, and it ends as a stop, not a failure, leaving nothing behind
        output = done.stdout + done.stderr
        assert done.returncode == 128 + signal.SIGTERM, output
        assert "Traceback" not in output, output
        assert notify.count("STOPPING=1") == 1, notify.snapshot()
        assert notify.count("READY=1") == 1, "READY=1 once"
        processes, segments = run.left_behind()
        assert not processes and not segments, (processes, segments)
