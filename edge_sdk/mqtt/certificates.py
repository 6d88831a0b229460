"""A small certificate authority for a fleet's broker: the broker's server certificate and one client
certificate per device or operator, whose common name is the MQTT identity
(Mosquitto's `use_identity_as_username`), so it must be a valid topic level.

Keys are ECDSA P-256, written as unencrypted PKCS#8 PEM with mode 0600. The CA key signs every
identity of the fleet: keep it off the broker and off the devices.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from edge_sdk.core.errors import ConfigError

from .topics import check_identity

_LEAF_KEY_USAGE = x509.KeyUsage(
    digital_signature=True,
    key_cert_sign=False,
    crl_sign=False,
    content_commitment=False,
    key_encipherment=False,
    data_encipherment=False,
    key_agreement=False,
    encipher_only=False,
    decipher_only=False,
)


@dataclass(frozen=True)
class IssuedCertificate:
    common_name: str
    cert_file: Path
    key_file: Path


class CertificateAuthority:
    def __init__(self, certificate: x509.Certificate, key: ec.EllipticCurvePrivateKey):
        self.certificate = certificate
        self.key = key

    @classmethod
    def create(cls, common_name: str = "edge-sdk fleet CA", days: int = 3650) -> CertificateAuthority:
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        now = _now()
        certificate = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256())
        )
        return cls(certificate, key)

    @classmethod
    def load(cls, cert_file: Path, key_file: Path) -> CertificateAuthority:
        try:
            certificate = x509.load_pem_x509_certificate(cert_file.read_bytes())
            key = serialization.load_pem_private_key(key_file.read_bytes(), password=None)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot load the CA from {cert_file} and {key_file}: {exc}") from None
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ConfigError(f"expected an EC private key in {key_file}, got {type(key).__name__}")
        return cls(certificate, key)

    def save(self, cert_file: Path, key_file: Path) -> None:
        _write(cert_file, self.certificate.public_bytes(serialization.Encoding.PEM), 0o644)
        _write(key_file, _key_pem(self.key), 0o600)

    def issue_server(
        self,
        cert_file: Path,
        key_file: Path,
        hostnames: Sequence[str] = ("localhost",),
        ips: Sequence[str] = ("127.0.0.1",),
        days: int = 825,
    ) -> IssuedCertificate:
        """The broker's certificate, valid for `hostnames` and `ips` (clients check the name they dialled)."""
        names: list[x509.GeneralName] = [x509.DNSName(host) for host in hostnames]
        names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
        if not names:
            raise ConfigError("expected at least one host name or IP address for the broker certificate")
        common_name = hostnames[0] if hostnames else ips[0]
        return self._issue(common_name, ExtendedKeyUsageOID.SERVER_AUTH, names, cert_file, key_file, days)

    def issue_client(self, common_name: str, cert_file: Path, key_file: Path, days: int = 825) -> IssuedCertificate:
        """A device's or operator's certificate; `common_name` becomes its MQTT user name at the broker."""
        check_identity(common_name)
        return self._issue(common_name, ExtendedKeyUsageOID.CLIENT_AUTH, [], cert_file, key_file, days)

    def _issue(
        self,
        common_name: str,
        usage: x509.ObjectIdentifier,
        names: list[x509.GeneralName],
        cert_file: Path,
        key_file: Path,
        days: int,
    ) -> IssuedCertificate:
        key = ec.generate_private_key(ec.SECP256R1())
        certificate = self._certificate(common_name, key.public_key(), usage, names, days)
        _write(cert_file, certificate.public_bytes(serialization.Encoding.PEM), 0o644)
        _write(key_file, _key_pem(key), 0o600)
        return IssuedCertificate(common_name=common_name, cert_file=cert_file, key_file=key_file)

    def sign_client_csr(
        self, csr: x509.CertificateSigningRequest, common_name: str, days: int = 825
    ) -> x509.Certificate:
        """A client certificate for the key of `csr` (enrollment: the key never left the box), named
        `common_name` whatever the CSR asks, with the same usage and validity rules as `issue_client`."""
        check_identity(common_name)
        if not csr.is_signature_valid:
            raise ConfigError("the CSR's signature does not match its public key")
        public_key = csr.public_key()
        if not isinstance(public_key, ec.EllipticCurvePublicKey):
            raise ConfigError(f"expected an EC public key in the CSR, got {type(public_key).__name__}")
        return self._certificate(common_name, public_key, ExtendedKeyUsageOID.CLIENT_AUTH, [], days)

    def _certificate(
        self,
        common_name: str,
        public_key: ec.EllipticCurvePublicKey,
        usage: x509.ObjectIdentifier,
        names: list[x509.GeneralName],
        days: int,
    ) -> x509.Certificate:
        now = _now()
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(self.certificate.subject)
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(min(now + datetime.timedelta(days=days), self.certificate.not_valid_after_utc))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_LEAF_KEY_USAGE, critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False)
        )
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        return builder.sign(self.key, hashes.SHA256())


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _write(path: Path, data: bytes, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_bytes(data)
    temporary.chmod(mode)
    temporary.replace(path)
