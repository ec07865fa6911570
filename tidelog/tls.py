"""TLS for gRPC: the one module that turns certificate files into grpc credentials.

Nodes (tidelog/config.py's ``[tls]`` table) and clients (``security_protocol="SSL"`` or
``"SASL_SSL"``) give PEM files; this module reads them, says in one line what is wrong with them
(a missing file, a key others can read, a certificate that is not PEM), and builds:

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
  plaintext otherwise, so code that dials peers does not care which. A SASL_SSL client's factory
  also carries call credentials (:class:`CallAuth`, the SCRAM plugin of
  ``tidelog/scram_auth.py``): they ride on every call of its TLS channels, and survive a
  renewal of the TLS files.

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import grpc

from tidelog import scram
from tidelog.errors import InvalidConfigError
from tidelog.scram_auth import ScramAuth

__all__ = [
    "CLIENT_AUTH",
    "SASL_MECHANISMS",
    "SASL_MECHANISM_DEFAULT",
    "SECURITY_PROTOCOLS",
    "CallAuth",
    "ChannelFactory",
    "ClientSecurity",
    "TlsFiles",
    "server_credentials",
]

log = logging.getLogger("tidelog.tls")

#: Kafka's ssl.client.auth values.
CLIENT_AUTH = ("none", "required")
#: Why Kafka's third value is refused: grpcio's Python server credentials either require a
#: client certificate or do not ask for one (GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE), so a
#: "requested" listener would silently see no certificate at all (measured: an auth context
#: without x509 names although the client sent a certificate).
REQUESTED_UNAVAILABLE = (
    'client_auth = "requested" is not available: gRPC\'s Python server cannot ask for a '
    'client certificate without requiring one. Use "required" (every client presents one; '
    'SCRAM users too) or "none" (SCRAM users and anonymous clients)')
#: The client's security_protocol values (Kafka's, less SASL_PLAINTEXT: a SCRAM client key is a
#: bearer token and travels inside TLS only).
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_SSL")
#: The client's sasl_mechanism values.
SASL_MECHANISMS = tuple(scram.MECHANISMS)
SASL_MECHANISM_DEFAULT = "SCRAM-SHA-256"
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
    ``client_auth``: none | required (a client certificate, verified against the CA)."""
    if client_auth not in CLIENT_AUTH:
        raise InvalidConfigError(f"{where}: client_auth must be one of {CLIENT_AUTH}")
    reloader = _Reloader(files, where)
    return grpc.dynamic_ssl_server_credentials(
        reloader.initial(), reloader, require_client_authentication=client_auth == "required")


# ------------------------------------------------------------------------------------- clients
@dataclass(frozen=True)
class ClientSecurity:
    """What a client (Producer, Consumer, Admin, the CLI) needs to reach TLS listeners, with
    Kafka's config names in snake_case.

    ``security_protocol``: PLAINTEXT; SSL (TLS: ``ssl_cafile`` verifies the brokers; a client
    certificate and key for a listener that asks for one, whose CN is then the principal);
    SASL_SSL (TLS as SSL, the client certificate optional, and a SCRAM user: ``sasl_username``,
    ``sasl_password``, ``sasl_mechanism`` SCRAM-SHA-256 or SCRAM-SHA-512). Every mistake is a
    one-line ValueError (InvalidConfigError for an unreadable file) naming it; none shows the
    password, which is kept out of ``repr()`` too."""

    security_protocol: str = "PLAINTEXT"
    ssl_cafile: str = ""
    ssl_certfile: str = ""
    ssl_keyfile: str = ""
    sasl_mechanism: str = SASL_MECHANISM_DEFAULT
    sasl_username: str = ""
    sasl_password: str = field(default="", repr=False)

    def __post_init__(self) -> None:
        if self.security_protocol not in SECURITY_PROTOCOLS:
            raise ValueError(f"security_protocol must be one of {SECURITY_PROTOCOLS}, got "
                             f"{self.security_protocol!r}")
        tls = self.security_protocol != "PLAINTEXT"
        sasl = self.security_protocol == "SASL_SSL"
        if not tls and (self.ssl_cafile or self.ssl_certfile):
            raise ValueError("ssl_cafile/ssl_certfile are set but security_protocol is "
                             "PLAINTEXT: set security_protocol='SSL' (or 'SASL_SSL')")
        if not isinstance(self.sasl_mechanism, str) or scram.mechanism_named(
                self.sasl_mechanism) is None:
            raise ValueError(f"sasl_mechanism must be one of {SASL_MECHANISMS}, got "
                             f"{self.sasl_mechanism!r}")
        object.__setattr__(self, "sasl_mechanism", self.sasl_mechanism.upper())
        if not sasl:
            given = [n for n, v in (("sasl_username", self.sasl_username),
                                    ("sasl_password", self.sasl_password),
                                    ("sasl_mechanism",
                                     self.sasl_mechanism != SASL_MECHANISM_DEFAULT)) if v]
            if given:
                raise ValueError(f"{'/'.join(given)} set but security_protocol is "
                                 f"{self.security_protocol}: set security_protocol='SASL_SSL'")
        else:
            self._check_user()
        if tls:
            TlsFiles(self.ssl_cafile, self.ssl_certfile, self.ssl_keyfile).check("ssl")

    def _check_user(self) -> None:
        if not self.sasl_username or not self.sasl_password:
            missing = " and ".join(n for n, v in (("sasl_username", self.sasl_username),
                                                  ("sasl_password", self.sasl_password))
                                   if not v)
            raise ValueError(f"security_protocol='SASL_SSL' needs {missing} (a SCRAM user: "
                             "`tidelog user create`)")
        if not isinstance(self.sasl_username, str) or not isinstance(self.sasl_password, str):
            raise ValueError("sasl_username and sasl_password must be strings")
        if not _utf8(self.sasl_password):
            raise ValueError("sasl_password is not valid Unicode text (a lone surrogate)")
        problem = scram.user_name_problem(self.sasl_username)
        if problem is not None:
            raise ValueError(f"sasl_username: {problem}")

    @property
    def sasl(self) -> bool:
        return self.security_protocol == "SASL_SSL"

    def without_sasl(self) -> ClientSecurity:
        """The same TLS settings without the SCRAM user (SASL_SSL becomes SSL): for channels to
        listeners that take no SCRAM users, such as the controllers'."""
        if not self.sasl:
            return self
        return ClientSecurity("SSL", self.ssl_cafile, self.ssl_certfile, self.ssl_keyfile)

    def channel_factory(self) -> ChannelFactory:
        if self.security_protocol == "PLAINTEXT":
            return ChannelFactory(None)
        factory = ChannelFactory.for_files(
            TlsFiles(self.ssl_cafile, self.ssl_certfile, self.ssl_keyfile), "ssl")
        if self.sasl:
            mechanism = scram.mechanism_named(self.sasl_mechanism)
            assert mechanism is not None  # checked in __post_init__
            factory.set_call_auth(ScramAuth(mechanism, self.sasl_username, self.sasl_password,
                                            dial=factory.blocking_tls))
        return factory


def _utf8(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


class CallAuth(Protocol):
    """Call credentials' plugin (a ``grpc.AuthMetadataPlugin``) whose secret is derived from
    what a broker says (the SCRAM salt), so a refusal may mean the broker's side changed."""

    #: Bumped whenever the secret the plugin sends changes.
    generation: int

    def __call__(self, context: Any, callback: Any) -> None: ...

    def recheck(self, address: str, generation: int) -> bool:
        """After a call sent with ``generation`` was refused: whether the secret has changed
        since (asking ``address`` again when it has not just been asked): a call worth
        sending again. Blocking."""
        ...


class ChannelFactory:
    """Opens aio channels: TLS with ``credentials``, plaintext when they are None.

    Built from files (:meth:`for_files`), it notices renewed files: :meth:`refresh` reloads
    them when their modification times moved (checked at most every :data:`RELOAD_CHECK_S`)
    and bumps :attr:`generation`; callers that keep channels open (a broker's channels to the
    controllers and to leaders) compare generations and open new channels with the renewed
    certificate, so a long-running node does not present an expired one when it reconnects.

    With call credentials (:meth:`set_call_auth`, a SASL_SSL client), :attr:`credentials` are
    the TLS credentials composed with them, renewed or not; :meth:`blocking_tls` opens a
    channel with the TLS credentials alone (what the plugin itself dials).
    """

    def __init__(self, credentials: grpc.ChannelCredentials | None,
                 files: TlsFiles | None = None, where: str = "") -> None:
        self._tls = credentials
        self.credentials = credentials
        self.auth: CallAuth | None = None
        self._call_credentials: grpc.CallCredentials | None = None
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

    def set_call_auth(self, auth: CallAuth) -> None:
        """Send ``auth``'s metadata with every call (TLS only: gRPC sends call credentials over
        secure channels alone)."""
        if self._tls is None:
            raise ValueError("call credentials need TLS")
        self.auth = auth
        self._call_credentials = grpc.metadata_call_credentials(auth, name="tidelog-sasl")
        self.credentials = self._compose()

    def _compose(self) -> grpc.ChannelCredentials | None:
        if self._tls is None or self._call_credentials is None:
            return self._tls
        return grpc.composite_channel_credentials(self._tls, self._call_credentials)

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
            self._tls = _channel_credentials(self._files.read(self._where))
        except InvalidConfigError as e:
            log.warning("%s: renewed TLS files not loaded, keeping the old ones: %s",
                        self._where, e)
            return self.generation
        self.credentials = self._compose()
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

    def blocking_tls(self, address: str,
                     options: Sequence[tuple[str, Any]] = ()) -> grpc.Channel:
        """A blocking channel with the TLS credentials only, without call credentials."""
        if self._tls is None:
            return grpc.insecure_channel(address, options=list(options))
        return grpc.secure_channel(address, self._tls, options=list(options))


def _channel_credentials(pems: tuple[bytes, bytes | None, bytes | None]
                         ) -> grpc.ChannelCredentials:
    ca, cert, key = pems
    return grpc.ssl_channel_credentials(root_certificates=ca, private_key=key,
                                        certificate_chain=cert)


PLAINTEXT = ChannelFactory(None)
