"""Build the `ssl.SSLContext` for a `TlsSettings` (reads the certificate files, so it runs at connect time)."""

from __future__ import annotations

import ssl

from edge_sdk.core.errors import ConfigError

from .settings import TlsSettings


def ssl_context_from(tls: TlsSettings) -> ssl.SSLContext:
    """A client context that always verifies the broker's certificate; hostname check as configured.

    Raises ConfigError naming the file when a CA, certificate or key cannot be loaded.
    """
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    if tls.ca_file is not None:
        ca_file = tls.ca_file.expanduser()
        try:
            context.load_verify_locations(cafile=str(ca_file))
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"MQTT TLS: cannot load CA file {ca_file}: {_describe(exc)}") from None
    context.check_hostname = tls.verify_hostname
    context.verify_mode = ssl.CERT_REQUIRED
    if tls.cert_file is not None and tls.key_file is not None:
        cert_file, key_file = tls.cert_file.expanduser(), tls.key_file.expanduser()
        try:
            context.load_cert_chain(certfile=str(cert_file), keyfile=str(key_file))
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(
                f"MQTT TLS: cannot load client certificate {cert_file} with key {key_file}: {_describe(exc)}"
            ) from None
    return context


def _describe(exc: OSError | ssl.SSLError) -> str:
    if isinstance(exc, ssl.SSLError):
        return exc.reason or str(exc)
    return exc.strerror or str(exc)
