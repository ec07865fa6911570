"""Certificates for a cluster, made with ``cryptography`` (the one module that imports it).

``tidelog security init`` uses it: one CA, then a certificate per node (its addresses as
subject alternative names, so clients and peers verify the host they dial) and per client user
(its common name is the principal ``User:<CN>`` once authorisation lands). Keys are ECDSA P-256,
signatures SHA-256; every certificate may serve and authenticate (serverAuth and clientAuth),
because a node is both: a server to its peers and a client of them. Nothing here is hand-rolled
crypto: key generation, signing and encoding are the library's.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["Issued", "issue", "make_ca"]

CA_DAYS = 3650
CERT_DAYS = 397  # what browsers accept; renew well before (docs/security.md)


@dataclass(frozen=True)
class Issued:
    """A private key and its certificate, PEM-encoded."""

    key_pem: bytes
    cert_pem: bytes


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def make_ca(common_name: str = "Tidelog CA", *, days: int = CA_DAYS) -> Issued:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder()
            .subject_name(_name(common_name)).issuer_name(_name(common_name))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True,
                                         crl_sign=True, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False,
                                         decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    return Issued(_key_pem(key), cert.public_bytes(serialization.Encoding.PEM))


def issue(ca: Issued, common_name: str, *, hosts: tuple[str, ...] = (),
          days: int = CERT_DAYS) -> Issued:
    """A certificate for ``common_name`` signed by ``ca``; ``hosts`` (IP addresses or DNS
    names) become its subject alternative names."""
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    builder = (x509.CertificateBuilder()
               .subject_name(_name(common_name)).issuer_name(ca_cert.subject)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=days))
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                     ExtendedKeyUsageOID.CLIENT_AUTH]),
                              critical=False))
    if hosts:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([_general_name(h) for h in hosts]), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return Issued(_key_pem(key), cert.public_bytes(serialization.Encoding.PEM))


def _general_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)
