"""Pipelines on the device: started from the active version, kept across deploys, a failing start rolls back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edge_sdk.fleet.device.agent import Agent
from edge_sdk.fleet.device.deploy import DeployResult
from edge_sdk.fleet.device.pipelines import PipelineStartError
from tests.fleet.agent_fixtures import people_pipeline
from tests.fleet.conftest import Keys
from tests.support.clients import recording_client
from tests.support.waits import poll_until
from tools.harness.deployments import Deployment, make_deployment

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def agent(pipeline_agent: Agent) -> Agent:
    return pipeline_agent


def install(agent: Agent, deployment: Deployment) -> DeployResult:
    agent.apply_deployment(deployment.signed)
    for suffix, payload in deployment.chunks():
        version, name = suffix.split("/")
        agent.deployer.accept_chunk(int(version), name, payload)
    return agent.apply_deployment(deployment.signed)


def wait_for_lines(path: Path, count: int, timeout: float = 20.0) -> int:
    def lines() -> int:
        return len(path.read_text().splitlines()) if path.exists() else 0

    poll_until(lambda: lines() >= count, timeout, interval=0.1)
    return lines()


def test_pipeline_when_started_then_it_runs_the_deployed_model_and_survives_a_new_version(
    agent: Agent, tmp_path: Path, operator_keys: Keys
) -> None:
    # given version 1 with a pipeline, started
    results = tmp_path / "results.jsonl"
    assert (
        install(
            agent, make_deployment(tmp_path / "a", operator_keys.private, 1, pipeline=people_pipeline(results))
        ).status
        == "active"
    )
    assert agent.set_pipeline("people", running=True) == ["people"]
    assert wait_for_lines(results, 3) >= 3, "the pipeline writes classification results"
    assert agent.presence().pipelines == ["people"] and agent.presence().health == "ok"
    client = recording_client(agent)
    telemetry = [json.loads(p) for t, p, _ in client.published if t == agent.topics.telemetry("pipelines", "people")]
    assert any(event["kind"] == "source_connected" for event in telemetry), "status events go to telemetry"

    # when version 2 is activated, then the pipeline runs again, now from version 2
    assert (
        install(
            agent, make_deployment(tmp_path / "b", operator_keys.private, 2, pipeline=people_pipeline(results))
        ).status
        == "active"
    )
    assert agent.pipelines.running() == ["people"]
    assert agent.pipelines._runs["people"].version == 2

    # when it is stopped, then it no longer runs and is no longer wanted
    assert agent.set_pipeline("people", running=False) == []
    assert agent.state.pipelines == []


def test_pipeline_when_new_version_pipeline_fails_to_start_then_rolled_back_and_old_one_runs_again(
    agent: Agent, tmp_path: Path, operator_keys: Keys
) -> None:
    results = tmp_path / "results.jsonl"
    install(agent, make_deployment(tmp_path / "a", operator_keys.private, 1, pipeline=people_pipeline(results)))
    agent.set_pipeline("people", running=True)

    broken = people_pipeline(results, source="nosuch://camera")
    result = install(agent, make_deployment(tmp_path / "b", operator_keys.private, 2, pipeline=broken))

    assert result.status == "activation_failed" and result.active_version == 1, result
    assert "people" in (result.message or "") and agent.store.current_version() == 1
    assert agent.pipelines.running() == ["people"] and agent.pipelines._runs["people"].version == 1
    assert agent.state.last_deploy is not None and agent.state.last_deploy.outcome == "rolled_back"


def test_pipeline_when_not_in_the_active_version_then_start_fails_and_nothing_is_wanted(agent: Agent) -> None:
    with pytest.raises(PipelineStartError, match="no version is active"):
        agent.set_pipeline("people", running=True)
    assert agent.state.pipelines == [] and agent.pipelines.running() == []
