"""TLS for gRPC: the one module that turns certificate files into grpc credentials.

Nodes (tidelog/config.py's ``[tls]`` table) and clients (``security_protocol="SSL"``) give PEM
files; this module reads them, says in one line what is wrong with them (a missing file, a key
others can read, a certificate that is not PEM), and builds:

* **server credentials that reload**: gRPC asks :class:`_Reloader` for the certificate
  configuration on every new handshake; it answers with the files' contents when their
  modification times changed since the last load, so a renewed certificate (written in place,
  or renamed over the old one) is served to the next connection without a restart. A renewal
  that cannot be read (half written, a key that does not parse) keeps the old configuration and
  is logged, rather than breaking every new connection;
* **channel credentials** (the CA to verify the server with; a certificate and key when the
  server wants one): the node's own outgoing channels (to controllers, to leaders) and the
  clients';
* :class:`ChannelFactory`: opens an aio channel to an address, secure when credentials are set,
  plaintext otherwise, so code that dials peers does not care which.

Peer listeners (controller, inter-broker) require a client certificate signed by the CA (mutual
TLS): a node of another cluster, or anything without a certificate, fails the handshake before a
single request is read. The client listener may ask for one (``client_auth``).
"""

from __future__ import annotations

import logging
import os
import stat
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from tidelog.errors import InvalidConfigError

__all__ = [
    "CLIENT_AUTH",
    "SECURITY_PROTOCOLS",
    "ChannelFactory",
    "ClientSecurity",
    "TlsFiles",
    "server_credentials",
]

log = logging.getLogger("tidelog.tls")

#: Kafka's ssl.client.auth values.
CLIENT_AUTH = ("none", "requested", "required")
#: The client's security_protocol values (SASL_SSL comes with the authentication work).
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL")
#: How often a channel factory looks at its files' modification times, at most.
RELOAD_CHECK_S = 5.0


@dataclass(frozen=True)
class TlsFiles:
    """A CA bundle, and optionally a certificate chain and its private key (PEM files)."""

    ca_file: str
    cert_file: str = ""
    key_file: str = ""

    def check(self, where: str) -> None:
        """InvalidConfigError naming the first unusable file (read now, not at first use)."""
        self.read(where)

    def read(self, where: str) -> tuple[bytes, bytes | None, bytes | None]:
        if bool(self.cert_file) != bool(self.key_file):
            raise InvalidConfigError(f"{where}: give both a certificate and its key, or neither")
        ca = _read_pem(self.ca_file, f"{where} CA file", "CERTIFICATE")
        if not self.cert_file:
            return ca, None, None
        cert = _read_pem(self.cert_file, f"{where} certificate file", "CERTIFICATE")
        key = _read_pem(self.key_file, f"{where} key file", "PRIVATE KEY", private=True)
        return ca, cert, key

    def mtimes(self) -> tuple[int, ...]:
        return tuple(_mtime(p) for p in (self.ca_file, self.cert_file, self.key_file) if p)


def _read_pem(path: str, what: str, kind: str, *, private: bool = False) -> bytes:
    if not path:
        raise InvalidConfigError(f"{what} is not set")
    p = Path(path)
    try:
        mode = p.stat().st_mode
        data = p.read_bytes()
    except OSError as e:
        raise InvalidConfigError(f"cannot read {what} {p}: {e.strerror}") from None
    if private and mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise InvalidConfigError(f"{what} {p} is readable by others (mode "
                                 f"{stat.filemode(mode)}); chmod 600 it")
    if b"-----BEGIN " not in data or kind.encode() not in data:
        raise InvalidConfigError(f"{what} {p} holds no PEM {kind.lower()}")
    return data


def _mtime(path: str) -> int:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return -1


# ------------------------------------------------------------------------------------- servers
class _Reloader:
    """gRPC's certificate-configuration fetcher: new files' contents when their mtimes moved."""

    def __init__(self, files: TlsFiles, where: str) -> None:
        self._files = files
        self._where = where
        self._lock = threading.Lock()
        self._loaded = files.mtimes()
        self.reloads = 0

    def initial(self) -> Any:
        return self._config(self._files.read(self._where))

    def __call__(self) -> Any:
        with self._lock:
            mtimes = self._files.mtimes()
            if mtimes == self._loaded:
                return None  # keep what gRPC has
            try:
                config = self._config(self._files.read(self._where))
            except InvalidConfigError as e:
                log.warning("%s: renewed TLS files not loaded, keeping the old ones: %s",
                            self._where, e)
                return None
            self._loaded = mtimes
            self.reloads += 1
            log.info("%s: loaded renewed TLS certificate files", self._where)
            return config

    @staticmethod
    def _config(pems: tuple[bytes, bytes | None, bytes | None]) -> Any:
        ca, cert, key = pems
        assert cert is not None and key is not None
        return grpc.ssl_server_certificate_configuration([(key, cert)],
                                                         root_certificates=ca)


def server_credentials(files: TlsFiles, *, client_auth: str, where: str) -> grpc.ServerCredentials:
    """Server credentials for one listener, reloading renewed files (see the module doc).
    ``client_auth``: none | requested | required (a client certificate, verified against the
    CA)."""
    if client_auth not in CLIENT_AUTH:
        raise InvalidConfigError(f"{where}: client_auth must be one of {CLIENT_AUTH}")
    reloader = _Reloader(files, where)
    return grpc.dynamic_ssl_server_credentials(
        reloader.initial(), reloader, require_client_authentication=client_auth == "required")


# ------------------------------------------------------------------------------------- clients
@dataclass(frozen=True)
class ClientSecurity:
    """What a client (Producer, Consumer, Admin, the CLI) needs to reach TLS listeners, with
    Kafka's config names in snake_case."""

    security_protocol: str = "PLAINTEXT"
    ssl_cafile: str = ""
    ssl_certfile: str = ""
    ssl_keyfile: str = ""

    def __post_init__(self) -> None:
        if self.security_protocol not in SECURITY_PROTOCOLS:
            raise ValueError(f"security_protocol must be one of {SECURITY_PROTOCOLS}, got "
                             f"{self.security_protocol!r}")
        if self.security_protocol == "PLAINTEXT" and (self.ssl_cafile or self.ssl_certfile):
            raise ValueError("ssl_cafile/ssl_certfile are set but security_protocol is "
                             "PLAINTEXT: set security_protocol='SSL'")
        if self.security_protocol == "SSL":
            TlsFiles(self.ssl_cafile, self.ssl_certfile, self.ssl_keyfile).check("ssl")

    def channel_factory(self) -> ChannelFactory:
        if self.security_protocol == "PLAINTEXT":
            return ChannelFactory(None)
        return ChannelFactory.for_files(
            TlsFiles(self.ssl_cafile, self.ssl_certfile, self.ssl_keyfile), "ssl")


class ChannelFactory:
    """Opens aio channels: TLS with ``credentials``, plaintext when they are None.

    Built from files (:meth:`for_files`), it notices renewed files: :meth:`refresh` reloads
    them when their modification times moved (checked at most every :data:`RELOAD_CHECK_S`)
    and bumps :attr:`generation`; callers that keep channels open (a broker's channels to the
    controllers and to leaders) compare generations and open new channels with the renewed
    certificate, so a long-running node does not present an expired one when it reconnects.
    """

    def __init__(self, credentials: grpc.ChannelCredentials | None,
                 files: TlsFiles | None = None, where: str = "") -> None:
        self.credentials = credentials
        self._files = files
        self._where = where
        self._loaded = files.mtimes() if files is not None else ()
        self._checked = time.monotonic()
        self.generation = 0

    @classmethod
    def for_files(cls, files: TlsFiles, where: str) -> ChannelFactory:
        return cls(_channel_credentials(files.read(where)), files, where)

    @property
    def secure(self) -> bool:
        return self.credentials is not None

    def refresh(self) -> int:
        """Reload renewed files (see the class doc); the current generation."""
        if self._files is None:
            return self.generation
        now = time.monotonic()
        if now - self._checked < RELOAD_CHECK_S:
            return self.generation
        self._checked = now
        mtimes = self._files.mtimes()
        if mtimes == self._loaded:
            return self.generation
        try:
            self.credentials = _channel_credentials(self._files.read(self._where))
        except InvalidConfigError as e:
            log.warning("%s: renewed TLS files not loaded, keeping the old ones: %s",
                        self._where, e)
            return self.generation
        self._loaded = mtimes
        self.generation += 1
        log.info("%s: loaded renewed TLS certificate files for new connections", self._where)
        return self.generation

    def aio(self, address: str, options: Sequence[tuple[str, Any]],
            interceptors: Sequence[Any] | None = None) -> grpc.aio.Channel:
        if self.credentials is None:
            return grpc.aio.insecure_channel(address, options=list(options),
                                             interceptors=interceptors)
        return grpc.aio.secure_channel(address, self.credentials, options=list(options),
                                       interceptors=interceptors)

    def blocking(self, address: str, options: Sequence[tuple[str, Any]] = ()) -> grpc.Channel:
        if self.credentials is None:
            return grpc.insecure_channel(address, options=list(options))
        return grpc.secure_channel(address, self.credentials, options=list(options))


def _channel_credentials(pems: tuple[bytes, bytes | None, bytes | None]
                         ) -> grpc.ChannelCredentials:
    ca, cert, key = pems
    return grpc.ssl_channel_credentials(root_certificates=ca, private_key=key,
                                        certificate_chain=cert)


PLAINTEXT = ChannelFactory(None)
