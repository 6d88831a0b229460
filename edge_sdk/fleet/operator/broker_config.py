"""The Mosquitto config and ACL of a fleet, as `fleet init` writes them for one folder.

They say what deploy/mosquitto/mosquitto.conf and deploy/mosquitto/acl say (TLS only, the client
certificate's common name is the MQTT user, each device only below edge/<device>/, operators
everywhere, cloud offload workers on the offload topics), with the folder's absolute paths, so
`mosquitto -c broker/mosquitto.conf` runs from any working directory. A test keeps DEVICE_ACL and
WORKER_ACL equal to the rules of deploy/mosquitto/acl.
"""

from __future__ import annotations

import getpass
import os
from collections.abc import Sequence
from pathlib import Path

DEVICE_ACL = """\
pattern write edge/%u/state
pattern read edge/%u/cmd
pattern write edge/%u/resp
pattern read edge/%u/desired
pattern write edge/%u/reported
pattern read edge/%u/artifacts/#
pattern write edge/%u/results/#
pattern write edge/%u/telemetry/#
pattern write edge/%u/offload/req/#
pattern read edge/%u/offload/resp
pattern read offload/workers/#
"""
"""What a device may use: its presence, commands and answers, desired and reported state, artifact
chunks, results and telemetry, its cloud offload requests and their answers, all below
edge/<its certificate's name>/; and what every client may read: the offload workers' load reports."""

WORKER_ACL = """\
topic read edge/+/offload/req/#
topic write edge/+/offload/resp
topic write offload/workers/{worker}
"""
"""What one cloud offload worker may use, below its `user` line: every device's requests (the rule
names the topics, not the `$share/<group>/` filter: Mosquitto 2.0 grants every subscription and
checks "read" at delivery against the message's own topic), every device's response topic, and its
own load report (cloud_offload/protocol.py has the topics)."""

CLAIM_ACL = """\
topic write edge/enroll/{claim}/+/request
topic read edge/enroll/{claim}/+/response
topic deny edge/{claim}/#
topic deny offload/#
"""
"""What one claim identity (`claim-<batch>`, shared by a batch of boxes) may use, below its `user` line:
enrollment requests out and their answers in, on its own enrollment tree only. The denials are checked
before the device patterns, which would otherwise give it a device tree edge/<claim>/ and the load
reports (docs/enrollment.md)."""

DEFAULT_CLAIM = "claim-factory"

LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")


def acl_text(operators: Sequence[str], workers: Sequence[str] = (), claims: Sequence[str] = (DEFAULT_CLAIM,)) -> str:
    """The ACL file: the device patterns, every operator allowed everything below edge/, then each
    offload worker's rules, then each claim identity's (enrollment only)."""
    lines = [
        "# edge_sdk fleet ACL: %u is the common name of the client certificate (use_identity_as_username).",
        "# Devices: each one only below edge/<its name>/; everybody reads the offload workers' load reports.",
        DEVICE_ACL.rstrip("\n"),
        "# Operators: everything below edge/ (one 'user' line and its topic line per operator certificate).",
    ]
    for name in operators:
        lines += [f"user {name}", "topic readwrite edge/#"]
    if workers:
        lines.append("# Offload workers: every device's requests and response topics, their own load report.")
    for name in workers:
        lines += [f"user {name}", WORKER_ACL.format(worker=name).rstrip("\n")]
    if claims:
        lines.append("# Claim certificates: enrollment requests and their answers only (docs/enrollment.md).")
    for name in claims:
        lines += [f"user {name}", CLAIM_ACL.format(claim=name).rstrip("\n")]
    return "\n".join(lines) + "\n"


def mosquitto_config(folder: Path, host: str, port: int) -> str:
    """mosquitto.conf for the broker files in `folder` (ca.pem, broker.pem, broker.key, acl; data/ and a log)."""
    folder = folder.resolve()
    bind = f" {host}" if host in LOCAL_HOSTS else ""
    lines = [
        "# Mosquitto 2 for an edge_sdk fleet, written by `edge-sdk fleet init`: TLS only, every client",
        "# proves who it is with a certificate of the fleet CA, whose common name is its MQTT user name.",
        "per_listener_settings false",
        "allow_anonymous false",
        f"acl_file {folder / 'acl'}",
        "persistence true",
        f"persistence_location {folder / 'data'}/",
        "autosave_interval 60",
        "persistent_client_expiration 14d",
        "max_queued_messages 10000",
        "# large enough for inline artifact chunks (at most 16 MiB of data plus a small header)",
        "max_packet_size 16800000",
        "# small packets (PUBACKs) go at once, not 40 ms later behind a delayed ACK",
        "set_tcp_nodelay true",
        f"log_dest file {folder / 'mosquitto.log'}",
        "log_type error",
        "log_type warning",
        "log_type notice",
        "log_type information",
        "connection_messages true",
    ]
    if os.geteuid() == 0:
        # Started as root, Mosquitto drops to the 'mosquitto' user, who cannot read keys made by root
        # with mode 0600; as another user this line has no effect.
        lines.append("# started as root, Mosquitto would switch to the 'mosquitto' user, who cannot read the 0600 keys")
        lines.append(f"user {getpass.getuser()}")
    lines += [
        f"listener {port}{bind}",
        "protocol mqtt",
        f"cafile {folder / 'ca.pem'}",
        f"certfile {folder / 'broker.pem'}",
        f"keyfile {folder / 'broker.key'}",
        "tls_version tlsv1.2",
        "require_certificate true",
        "use_identity_as_username true",
        "# the client id is replaced by the certificate's name, so no client can take over another's session",
        "use_username_as_clientid true",
    ]
    return "\n".join(lines) + "\n"
