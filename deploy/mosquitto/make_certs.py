"""Make the fleet's CA, the broker's certificate, and one certificate per device, operator and offload worker.

    python deploy/mosquitto/make_certs.py OUT --broker-host mqtt.example.com --device cam-001 --operator operator

Writes into OUT:
    ca.pem, ca.key              the fleet CA (made on the first run, reused afterwards; keep ca.key offline)
    broker.pem, broker.key      the broker's certificate for --broker-host / --broker-ip names
    devices/<id>.pem, .key      one per --device: the common name is the device id (its MQTT user name)
    operators/<id>.pem, .key    one per --operator (list each in the broker's acl as "user <id>")
    workers/<id>.pem, .key      one per --worker, a cloud offload worker (list each in the acl as "user <id>")
    claims/<name>.pem, .key     one per --claim (claim-<batch>): shipped on every box of a batch, it may only ask
                                to enroll (docs/enrollment.md); add the acl block this script prints
Run it again with more --device options to add devices to the same fleet. Existing certificates
are kept unless --force is given. Needs the `cryptography` package (a dependency of edge-sdk).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from edge_sdk.core.errors import ConfigError
from edge_sdk.fleet.operator.broker_config import CLAIM_ACL
from edge_sdk.fleet.wire.enrollment import check_claim_name, check_device_name
from edge_sdk.mqtt.certificates import CertificateAuthority
from edge_sdk.mqtt.topics import check_identity


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path, help="folder for the certificates and keys")
    parser.add_argument("--broker-host", action="append", default=[], help="DNS name clients dial (repeatable)")
    parser.add_argument("--broker-ip", action="append", default=[], help="IP address clients dial (repeatable)")
    parser.add_argument("--device", action="append", default=[], help="device id (repeatable)")
    parser.add_argument("--operator", action="append", default=[], help="operator identity (repeatable)")
    parser.add_argument("--worker", action="append", default=[], help="cloud offload worker identity (repeatable)")
    parser.add_argument(
        "--claim", action="append", default=[], help="claim identity claim-<batch>, shared by a batch of boxes"
    )
    parser.add_argument("--days", type=int, default=825, help="validity of the broker, device, operator certificates")
    parser.add_argument("--ca-days", type=int, default=3650, help="validity of a new CA")
    parser.add_argument("--force", action="store_true", help="replace certificates that exist already")
    args = parser.parse_args(argv)
    try:
        roles = [set(args.device), set(args.operator), set(args.worker)]
        for name in set().union(*roles):
            check_identity(name)
        for name in args.device:
            check_device_name(name)
        for name in args.claim:
            check_claim_name(name)
        clash = (roles[0] & roles[1]) | (roles[0] & roles[2]) | (roles[1] & roles[2])
        if clash:
            raise ConfigError(f"expected device, operator and worker names to differ, got {sorted(clash)} in two roles")
        made = issue(args)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for line in made:
        print(line)
    return 0


def issue(args: argparse.Namespace) -> list[str]:
    out: Path = args.out
    ca_cert, ca_key = out / "ca.pem", out / "ca.key"
    made = []
    if ca_cert.exists() and ca_key.exists():
        ca = CertificateAuthority.load(ca_cert, ca_key)
        made.append(f"kept    {ca_cert} (existing CA)")
    else:
        ca = CertificateAuthority.create(days=args.ca_days)
        ca.save(ca_cert, ca_key)
        made.append(f"made    {ca_cert} and {ca_key} (keep the key offline)")

    def wanted(cert_file: Path) -> bool:
        if cert_file.exists() and not args.force:
            made.append(f"kept    {cert_file}")
            return False
        return True

    if (args.broker_host or args.broker_ip) and wanted(out / "broker.pem"):
        ca.issue_server(out / "broker.pem", out / "broker.key", args.broker_host, args.broker_ip, args.days)
        made.append(f"made    {out / 'broker.pem'} for {', '.join([*args.broker_host, *args.broker_ip])}")
    folders = (("devices", args.device), ("operators", args.operator), ("workers", args.worker), ("claims", args.claim))
    for folder, names in folders:
        for name in names:
            cert_file = out / folder / f"{name}.pem"
            if wanted(cert_file):
                ca.issue_client(name, cert_file, out / folder / f"{name}.key", args.days)
                made.append(f"made    {cert_file}")
    for name in args.claim:
        made.append(f"acl     add this block to the broker's acl unless it is there:\n{claim_acl(name)}")
    return made


def claim_acl(name: str) -> str:
    """The broker's acl block for claim certificate `name`: enrollment requests out and its answers in, nothing
    else (the denials override the device patterns, which would otherwise give it an edge/<name>/ tree)."""
    check_claim_name(name)
    return f"user {name}\n" + CLAIM_ACL.format(claim=name)


if __name__ == "__main__":
    sys.exit(main())
