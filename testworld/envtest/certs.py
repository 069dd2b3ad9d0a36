"""Throw-away PKI for a local control plane.

The API server needs a serving certificate, a client CA that vouches for the
admin user, and a key to sign service-account tokens.  Everything lives in the
control plane's temporary folder and dies with it.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

_VALIDITY = dt.timedelta(days=7)


@dataclass(frozen=True)
class Pki:
    """Paths of the PEM files a control plane is started with."""

    serving_cert: Path
    serving_key: Path
    client_ca: Path
    admin_cert: Path
    admin_key: Path
    service_account_key: Path
    service_account_pub: Path


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    parts = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        parts.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(parts)


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _issue(
    subject: x509.Name,
    public_key: ec.EllipticCurvePublicKey,
    issuer: x509.Name,
    signer: ec.EllipticCurvePrivateKey,
    *,
    is_ca: bool,
    usage: list[x509.ObjectIdentifier],
    sans: list[x509.GeneralName] | None = None,
) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=is_ca, path_length=None), critical=True)
    )
    if usage:
        builder = builder.add_extension(x509.ExtendedKeyUsage(usage), critical=False)
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(signer, hashes.SHA256())


def _ca(common_name: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = _name(common_name)
    return _issue(name, key.public_key(), name, key, is_ca=True, usage=[]), key


def _serving(
    common_name: str, ca: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey, ips: tuple[str, ...]
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A serving certificate ``ca`` signs, for localhost and ``ips``, and its key."""
    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = [
        x509.DNSName("localhost"),
        *(x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips),
    ]
    cert = _issue(
        _name(common_name),
        key.public_key(),
        ca.subject,
        ca_key,
        is_ca=False,
        usage=[x509.oid.ExtendedKeyUsageOID.SERVER_AUTH],
        sans=sans,
    )
    return cert, key


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def generate(folder: Path, extra_ips: tuple[str, ...] = ()) -> Pki:
    """Write a fresh PKI into ``folder``; serving certs cover 127.0.0.1, localhost and ``extra_ips``."""
    folder.mkdir(parents=True, exist_ok=True)
    pki = Pki(
        serving_cert=folder / "apiserver.crt",
        serving_key=folder / "apiserver.key",
        client_ca=folder / "client-ca.crt",
        admin_cert=folder / "admin.crt",
        admin_key=folder / "admin.key",
        service_account_key=folder / "sa.key",
        service_account_pub=folder / "sa.pub",
    )
    serving_ca, serving_ca_key = _ca("runnerpool-envtest-serving-ca")
    client_ca, client_ca_key = _ca("runnerpool-envtest-client-ca")

    serving, serving_key = _serving("kube-apiserver", serving_ca, serving_ca_key, ("127.0.0.1", *extra_ips))
    # The serving CA is appended so the kubeconfig can trust the chain from one file.
    pki.serving_cert.write_bytes(_pem(serving) + _pem(serving_ca))
    _write_key(pki.serving_key, serving_key)

    admin_key = ec.generate_private_key(ec.SECP256R1())
    admin = _issue(
        _name("envtest-admin", "system:masters"),
        admin_key.public_key(),
        client_ca.subject,
        client_ca_key,
        is_ca=False,
        usage=[x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH],
    )
    pki.client_ca.write_bytes(_pem(client_ca))
    pki.admin_cert.write_bytes(_pem(admin))
    _write_key(pki.admin_key, admin_key)

    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _write_key(pki.service_account_key, sa_key)
    pki.service_account_pub.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    (folder / "serving-ca.crt").write_bytes(_pem(serving_ca))
    return pki


@dataclass(frozen=True)
class PrivateServer:
    """A server certificate signed by a CA of its own (a GHES behind a private CA), as files."""

    ca_pem: str
    cert_file: Path
    key_file: Path

    def server_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert_file, self.key_file)
        return context


def private_server(folder: Path, ips: tuple[str, ...] = ("127.0.0.1",)) -> PrivateServer:
    """A fresh private CA and a serving certificate for ``ips`` and localhost, written to ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    ca, ca_key = _ca("runnerpool-testworld-private-ca")
    cert, key = _serving("fake-ghes", ca, ca_key, ips)
    server = PrivateServer(_pem(ca).decode(), folder / "server.crt", folder / "server.key")
    server.cert_file.write_bytes(_pem(cert))
    _write_key(server.key_file, key)
    return server
