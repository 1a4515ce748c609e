"""Throwaway TLS material for tests: a CA, a broker certificate and client certificates.

Generated at test time into a temporary directory (``tmp_path``) and never written anywhere
else: this repository holds no private key. Keys are ECDSA P-256 (fast to generate, accepted by
Mosquitto's OpenSSL and Python's ``ssl``); certificates are valid from one hour ago for one day,
and carry the extensions that OpenSSL's strict verification (``VERIFY_X509_STRICT``, default in
Python 3.13's ``ssl.create_default_context``) requires: basic constraints, key usage, subject and
authority key identifiers.

The broker certificate names ``DNS:localhost`` and ``IP:127.0.0.1`` in its subject alternative
names, so a client verifying the host name connects to a test broker on the loopback interface.

Needs the ``cryptography`` package (test dependency only).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["ClientCertificate", "TlsMaterial", "make_tls_material"]

VALID_FOR = datetime.timedelta(days=1)
"""Lifetime of every generated certificate."""

BACKDATE = datetime.timedelta(hours=1)
"""How far before "now" certificates become valid (tolerates clock skew)."""


@dataclass(frozen=True)
class ClientCertificate:
    """A client certificate (common name ``name``) and its private key, PEM files."""

    name: str
    cert_file: Path
    key_file: Path


@dataclass(frozen=True)
class TlsMaterial:
    """Paths of the generated PEM files.

    ``ca_file`` is what clients trust (and what a broker uses to check client certificates);
    ``server_cert``/``server_key`` are the broker's; ``clients`` maps a common name to its
    certificate and key; ``other_ca_file`` is a second, unrelated CA that signed nothing here,
    for tests that a client trusting the wrong CA is refused.
    """

    directory: Path
    ca_file: Path
    server_cert: Path
    server_key: Path
    other_ca_file: Path
    clients: dict[str, ClientCertificate] = field(default_factory=dict)


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "edge_runtime tests"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(pem)


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _new_ca(common_name: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    public = key.public_key()
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(_name(common_name))
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + VALID_FOR)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _issue(
    ca_cert: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    common_name: str,
    *,
    server: bool,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    public = key.public_key()
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(ca_cert.subject)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + VALID_FOR)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=True,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
    return builder.sign(ca_key, hashes.SHA256()), key


def make_tls_material(directory: Path, *, clients: tuple[str, ...] = ()) -> TlsMaterial:
    """Generate a test CA, a broker certificate and one client certificate per name.

    Parameters
    ----------
    directory : Path
        Where the PEM files go (created if missing); private keys are written mode 0600.
    clients : tuple of str
        Common names of the client certificates to issue (e.g. node ids).

    Returns
    -------
    TlsMaterial
    """
    directory.mkdir(parents=True, exist_ok=True)
    ca_cert, ca_key = _new_ca("edge_runtime test CA")
    material = TlsMaterial(
        directory=directory,
        ca_file=directory / "ca.crt",
        server_cert=directory / "server.crt",
        server_key=directory / "server.key",
        other_ca_file=directory / "other-ca.crt",
    )
    _write_cert(material.ca_file, ca_cert)
    server_cert, server_key = _issue(ca_cert, ca_key, "localhost", server=True)
    _write_cert(material.server_cert, server_cert)
    _write_key(material.server_key, server_key)
    other_cert, _ = _new_ca("unrelated test CA")
    _write_cert(material.other_ca_file, other_cert)
    for name in clients:
        cert, key = _issue(ca_cert, ca_key, name, server=False)
        entry = ClientCertificate(name, directory / f"{name}.crt", directory / f"{name}.key")
        _write_cert(entry.cert_file, cert)
        _write_key(entry.key_file, key)
        material.clients[name] = entry
    # The CA's key exists only in memory: nothing can issue more certificates after this.
    return material
