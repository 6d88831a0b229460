"""Enrollment by claim certificate: the messages between a box and the operator's enrollment service.

| message | topic | retained | written by |
|---|---|---|---|
| `EnrollmentRequest` | `edge/enroll/<claim>/<request_id>/request` (QoS 1) | no | a box, with the claim certificate |
| `EnrollmentResponse` | `edge/enroll/<claim>/<request_id>/response` (QoS 1) | yes (cleared later) | the operator's service |

`<claim>` is the claim certificate's common name (`claim-<batch>`), the broker's user name for the box;
many boxes share it. `request_id` is random (128 bits) and `nonce` is random too, so a box waits on a
topic no other box knows and accepts only the answer that echoes its nonce. The response carries only a
certificate (public), so it needs no secrecy; the box binds it to itself by checking that the certificate's
public key is its own and that it chains to the fleet CA (docs/enrollment.md).

Decoding is strict like `protocol.py`: size-bounded, UTF-8 JSON without duplicate keys, `extra="forbid"`.
"""

from __future__ import annotations

import re
import secrets
from typing import Annotated, Final, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from edge_sdk.core.errors import ConfigError
from edge_sdk.fleet.wire.manifest import IDENTIFIER_PATTERN
from edge_sdk.fleet.wire.protocol import decode_message, encode_message
from edge_sdk.mqtt.topics import ROOT, check_identity

ENROLL_LEVEL: Final = "enroll"
"""`edge/enroll/...`: no device may be named `enroll` (its tree would be `edge/enroll/...`)."""
CLAIM_PREFIX: Final = "claim-"
"""Claim certificates' common names start with it; no device id may (the broker's ACL tells them apart)."""

MAX_REQUEST_BYTES: Final = 32 * 1024
MAX_ENROLLMENT_RESPONSE_BYTES: Final = 64 * 1024
MAX_PEM_CHARS: Final = 8 * 1024

RequestId = Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{22,64}$")]
Nonce = Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{22,64}$")]
Serial = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")]
Identifier = Annotated[str, Field(pattern=IDENTIFIER_PATTERN)]
Pem = Annotated[str, Field(max_length=MAX_PEM_CHARS)]

_CLAIM = re.compile(r"^claim-[A-Za-z0-9][A-Za-z0-9._-]{0,120}$")


def check_claim_name(name: str) -> str:
    """A claim certificate's common name: `claim-` then an identifier (one topic level)."""
    check_identity(name)
    if not _CLAIM.match(name):
        raise ConfigError(f"expected a claim name like 'claim-<batch>' (letters, digits, . _ -), got {name!r}")
    return name


def check_device_name(name: str) -> str:
    """A device id that cannot collide with the enrollment tree or a claim identity."""
    check_identity(name)
    if name == ENROLL_LEVEL or name.startswith(CLAIM_PREFIX):
        raise ConfigError(f"expected a device id other than {ENROLL_LEVEL!r} and not starting with {CLAIM_PREFIX!r}")
    return name


def request_topic(claim: str, request_id: str) -> str:
    return f"{ROOT}/{ENROLL_LEVEL}/{claim}/{request_id}/request"


def response_topic(claim: str, request_id: str) -> str:
    return f"{ROOT}/{ENROLL_LEVEL}/{claim}/{request_id}/response"


REQUEST_FILTER: Final = f"{ROOT}/{ENROLL_LEVEL}/+/+/request"
"""What the operator's service subscribes to."""


def parse_request_topic(topic: str) -> tuple[str, str] | None:
    """(claim, request_id) of a request topic; None for any other topic."""
    parts = topic.split("/")
    if len(parts) != 5 or parts[0] != ROOT or parts[1] != ENROLL_LEVEL or parts[4] != "request":
        return None
    return parts[2], parts[3]


def new_token() -> str:
    """128 random bits, URL-safe base64 (22 characters): request ids and nonces."""
    return secrets.token_urlsafe(16)


class EnrollmentFacts(BaseModel):
    """What the box says about itself; the policy matches on serial and labels."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    serial: Serial = Field(description="The box's hardware serial number.")
    profile: Identifier | None = Field(None, description="Device profile name (detected or configured).")
    labels: dict[Identifier, Annotated[str, Field(max_length=256)]] = Field(
        default_factory=dict, max_length=64, description="The box's labels, e.g. {site: lyon}."
    )
    sdk_version: str | None = Field(None, max_length=64, description="edge_sdk version on the box.")


class EnrollmentRequest(BaseModel):
    """A box asks for its device certificate: a CSR (common name = the device id it proposes) and its facts."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    request_id: RequestId = Field(description="Random; also the topic level the answer comes on.")
    nonce: Nonce = Field(description="Random; the answer must echo it.")
    csr_pem: Pem = Field(description="PKCS#10 CSR in PEM, signed by the box's own key.")
    facts: EnrollmentFacts
    sent_at: AwareDatetime | None = Field(None, description="When the box sent it.")


class EnrollmentResponse(BaseModel):
    """The operator's answer; only `approved` carries a certificate."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    request_id: RequestId
    nonce: Nonce = Field(description="The request's nonce, echoed.")
    status: Literal["approved", "refused", "pending"]
    device_id: Identifier | None = Field(None, description="The device id the certificate names (approved).")
    certificate_pem: Pem | None = Field(None, description="The device certificate (approved).")
    chain_pem: list[Pem] = Field(
        default_factory=list, max_length=4, description="Intermediate CA certificates, leaf's issuer first."
    )
    reason: str | None = Field(None, max_length=1024, description="Why refused or pending.")


def encode_enrollment(message: EnrollmentRequest | EnrollmentResponse) -> bytes:
    return encode_message(message)


def decode_request(payload: bytes, max_bytes: int = MAX_REQUEST_BYTES) -> EnrollmentRequest:
    return decode_message(payload, EnrollmentRequest, max_bytes)


def decode_enrollment_response(payload: bytes, max_bytes: int = MAX_ENROLLMENT_RESPONSE_BYTES) -> EnrollmentResponse:
    return decode_message(payload, EnrollmentResponse, max_bytes)
