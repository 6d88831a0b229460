"""What `edge-sdk fleet enroll serve --auto` signs without an operator (`--policy policy.yaml`), and how fast."""

from __future__ import annotations

import fnmatch
import time
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from edge_sdk.core.yaml_model import load_yaml_model
from edge_sdk.fleet.wire.enrollment import EnrollmentRequest
from edge_sdk.fleet.wire.manifest import IDENTIFIER_PATTERN


class EnrollmentPolicy(BaseModel):
    """`--policy policy.yaml`: which requests `fleet enroll serve --auto` signs without an operator."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    serials: list[Annotated[str, Field(min_length=1, max_length=128)]] = Field(
        description="Allowed serials; shell patterns (`SN-2026-*`) match many."
    )
    labels: dict[Annotated[str, Field(pattern=IDENTIFIER_PATTERN)], str] = Field(
        default_factory=dict, description="Labels a box must report with these values, e.g. {site: lyon}."
    )
    claims: list[str] = Field(
        default_factory=list, description="Claim identities accepted (`claim-<batch>`); empty: any claim."
    )
    rate_per_min: float = Field(60.0, gt=0, le=100_000, description="Certificates signed per minute at most.")
    device_id: str = Field(
        "{requested}",
        max_length=128,
        description="The device id: `{requested}` (the CSR's common name) or a template of `{serial}`, e.g. "
        "`cam-{serial}`; a request asking for another id is refused.",
    )
    days: int = Field(825, ge=1, le=3650, description="Validity of the device certificates.")

    def allows(self, request: EnrollmentRequest, claim: str) -> str | None:
        """None when the request meets the policy, else why not."""
        facts = request.facts
        if not any(fnmatch.fnmatchcase(facts.serial, pattern) for pattern in self.serials):
            return f"serial {facts.serial} is not in the allow-list"
        if self.claims and claim not in self.claims:
            return f"claim {claim} is not accepted"
        for name, value in self.labels.items():
            if facts.labels.get(name) != value:
                return f"expected label {name}={value}, got {facts.labels.get(name)!r}"
        return None

    def expected_device_id(self, request: EnrollmentRequest, requested: str) -> str:
        return self.device_id.replace("{requested}", requested).replace("{serial}", request.facts.serial)


def load_policy(path: Path) -> EnrollmentPolicy:
    return load_yaml_model(path, EnrollmentPolicy)


class RateLimit:
    """A token bucket: `per_min` signatures a minute, bursts up to the same number."""

    def __init__(self, per_min: float, clock: Any = time.monotonic):
        self.rate = per_min / 60.0
        self.capacity = max(1.0, per_min)
        self.tokens = self.capacity
        self.clock = clock
        self.at = clock()

    def take(self) -> bool:
        now = self.clock()
        self.tokens = min(self.capacity, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False
