"""The agent as a service: run it until stopped, telling systemd it is ready and, while its inbox works,
alive (the watchdog of deploy/systemd/edge-sdk-agent.service)."""

from __future__ import annotations

import logging
import threading

from edge_sdk.core.systemd_notify import SystemdNotifier

from .agent import Agent
from .agent_config import AgentConfig

log = logging.getLogger(__name__)

INBOX_HUNG_AFTER_S = 3600.0
"""One job of the inbox (a deployment with an engine build, a pipeline start) running longer than this
counts as a hung agent: its systemd watchdog pings stop and systemd restarts it (a TensorRT engine build
on a Jetson is one job and can take many minutes)."""


def run_agent(
    config: AgentConfig,
    stop: threading.Event,
    notifier: SystemdNotifier | None = None,
    hung_after_s: float = INBOX_HUNG_AFTER_S,
) -> None:
    """Run until `stop` is set (the CLI sets it on SIGTERM / SIGINT).

    Under systemd (`Type=notify`, deploy/systemd/) it sends READY=1 once the agent has started (its
    connection is made in the background), WATCHDOG=1 from this loop while the inbox's worker is alive
    and not stuck in one job for `hung_after_s`, and STOPPING=1 when it stops.
    """
    notifier = notifier or SystemdNotifier.from_environment()
    agent = Agent(config)
    agent.start()
    notifier.ready(f"agent {config.device_id} started; broker {config.broker.address}")
    interval = notifier.ping_interval
    tick = None if interval is None else min(1.0, interval / 2)
    stuck = False
    try:
        while not stop.wait(tick):
            if agent.inbox.alive(hung_after_s):
                notifier.watchdog_if_due()
                stuck = False
            elif not stuck:
                stuck = True
                log.error("the agent's inbox worker is dead or stuck; watchdog pings stop (systemd restarts it)")
    finally:
        notifier.stopping("agent stopping")
        agent.stop()
