"""Turn what went wrong while connecting into a typed `MqttError` whose message says what to check."""

from __future__ import annotations

import socket
import ssl

from .errors import BrokerUnreachableError, ConnectRefusedError, MqttError, TlsHandshakeError
from .settings import MqttSettings

# What a CONNACK failure usually means for whoever configured the client.
CONNACK_HINTS = {
    0x84: "the broker does not speak this protocol version: try protocol: v311",
    0x85: "the broker rejected the client id",
    0x86: "check username and the password in password_env / password_file",
    0x87: "check username, password and the broker's ACL for this client",
    0x88: "the broker is unavailable",
    0x89: "the broker is busy",
    0x8A: "this client is banned",
}


def refusal_from_connack(settings: MqttSettings, reason_code: int, reason: str) -> ConnectRefusedError:
    """The broker answered CONNECT with a failure reason code."""
    hint = CONNACK_HINTS.get(reason_code, "")
    return ConnectRefusedError(
        f"MQTT broker {settings.address} refused the connection: {reason} (reason code 0x{reason_code:02X})"
        + (f"; {hint}" if hint else ""),
        reason_code=reason_code,
        reason=reason,
    )


def error_from_connect_exception(settings: MqttSettings, exc: Exception) -> MqttError:
    """paho's connect() raised while opening the TCP connection or during the TLS handshake."""
    where = f"MQTT broker {settings.address}"
    if isinstance(exc, ssl.SSLCertVerificationError):
        return TlsHandshakeError(
            f"TLS with {where} failed: {exc.verify_message or exc.reason} "
            "(check tls.ca_file, and that the certificate names this host or set tls.verify_hostname: false)"
        )
    if isinstance(exc, ssl.CertificateError):
        return TlsHandshakeError(f"TLS with {where} failed: {exc}")
    if isinstance(exc, ssl.SSLError):
        return TlsHandshakeError(f"TLS with {where} failed: {exc.reason or exc}{_tls_hint(settings, str(exc))}")
    if isinstance(exc, ConnectionRefusedError):
        return BrokerUnreachableError(f"cannot reach {where}: connection refused (is a broker listening there?)")
    if isinstance(exc, socket.gaierror):
        return BrokerUnreachableError(f"cannot reach {where}: unknown host ({exc.strerror})")
    if isinstance(exc, TimeoutError):
        return BrokerUnreachableError(f"cannot reach {where}: no answer within {settings.connect_timeout_s:g} s")
    if isinstance(exc, OSError):
        return BrokerUnreachableError(f"cannot reach {where}: {exc.strerror or exc}")
    return MqttError(f"cannot connect to {where}: {exc}")


def error_from_early_close(settings: MqttSettings, detail: str) -> MqttError:
    """The connection closed before CONNACK; `detail` is paho's last error line, if any."""
    where = f"MQTT broker {settings.address}"
    if settings.tls is not None:
        # Under TLS 1.3 the server checks the client certificate after the client's side of the
        # handshake is done, so a refusal shows up as the connection closing before CONNACK.
        return TlsHandshakeError(
            f"TLS with {where} failed: the broker closed the connection before answering CONNECT"
            + (f" ({detail})" if detail else "")
            + _tls_hint(settings, detail)
        )
    return BrokerUnreachableError(
        f"{where} closed the connection before answering CONNECT" + (f": {detail}" if detail else "")
    )


def _tls_hint(settings: MqttSettings, detail: str) -> str:
    if "WRONG_VERSION_NUMBER" in detail.upper():
        return "; is this a TLS listener? (a plain MQTT port answers TLS with garbage)"
    if "UNKNOWN_CA" in detail.upper():
        return "; the broker does not trust the client certificate's CA"
    if settings.tls is not None and settings.tls.cert_file is None:
        return "; the broker may require a client certificate: set tls.cert_file and tls.key_file"
    return ""
