"""TLS under the Raft transport's wire, as bytes in and bytes out: no sockets, no pysyncobj.

When a controller has ``[tls]``, every Raft connection runs TLS (1.2 or 1.3) with mutual
authentication against the cluster CA, and framing.py's handshake and MAC'd frames run on top of
it unchanged (defence in depth: a node must hold both a certificate of the CA and the cluster
secret). What each side checks:

* the dialer verifies the listener's certificate chain against the CA and that its subject
  alternative names cover the host of the voter address it dialled (``server_hostname``;
  OpenSSL matches an IP address against IP SANs, a name against DNS SANs);
* the listener requires a client certificate of the CA (CERT_REQUIRED), and once the dialer's
  HELLO names the voter it claims to be, that the certificate's SANs cover that voter's host
  (:func:`_san_mismatch`, checked by connection.py before the challenge is answered): a client
  user's certificate of the same CA (no SANs) or another node's cannot pose as a voter.

:class:`_TlsWire` wraps ``ssl.SSLObject`` over two ``ssl.MemoryBIO``: connection.py owns the
non-blocking socket in pysyncobj's poller, so TLS is driven as a pure transformation: ciphertext
read from the socket goes in, plaintext comes out; plaintext goes in, ciphertext to send comes
out; the handshake advances as bytes arrive. Every ssl error becomes one _PeerRefused whose
reason is stable text (no source lines: refusals are rate-limited per reason), e.g. "TLS
handshake failed: certificate verify failed: unable to get local issuer certificate".

Buffering stays bounded: every call drains all the plaintext it made readable and every byte of
ciphertext it produced, so the incoming BIO holds at most one partial record (checked) and the
outgoing BIO nothing between calls; connection.py's read-ahead limit applies to the plaintext.

:class:`_TlsContexts` builds the ``ssl.SSLContext`` pair from the node's PEM files (ssl wants
paths: ``load_cert_chain`` reads files, which are on disk already) and rebuilds them for new
connections when the files' modification times move, checked at most every RELOAD_CHECK_S (as
tidelog.tls.ChannelFactory does), so a renewed certificate is used without a restart. A renewal
that cannot be loaded (half written, a key that does not match) keeps the old contexts, with a
warning. Established connections keep the certificate they were made with.
"""

from __future__ import annotations

import ipaddress
import logging
import ssl
import time
from collections.abc import Callable
from typing import Any

from tidelog.controller.raft.framing import _PeerRefused
from tidelog.errors import InvalidConfigError
from tidelog.tls import RELOAD_CHECK_S, TlsFiles

logger = logging.getLogger("controller.raft")  # one logger for the whole adapter

#: Plaintext bytes per SSLObject.read call (a TLS record holds at most 16 KiB).
_READ_CHUNK = 64 * 1024
#: Ciphertext the incoming BIO may hold after a call: everything complete is consumed, so only
#: one partial record remains (16 KiB of plaintext, plus header, padding and tag: under 17 KiB).
_INCOMING_PENDING_MAX = 18 * 1024
#: A TLS record's first byte when it carries a handshake message (a ClientHello first of all).
_HANDSHAKE_RECORD = 0x16
#: TLS 1.2 suites: forward secrecy and AEAD only (TLS 1.3's suites are all of that kind).
_TLS12_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20"
#: Where the files come from, as TlsFiles.read names them in its errors ("tls certificate ...").
_WHERE = "tls"


def _host_of(address: str) -> str:
    """The host of ``host:port`` (an IPv6 host without its brackets)."""
    return address.rsplit(":", 1)[0].strip("[]")


def _reason(exc: ssl.SSLError, *, handshake: bool) -> str:
    """One line for an ssl error, without the source line CPython appends to its message."""
    prefix = "TLS handshake failed" if handshake else "TLS failed"
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"{prefix}: certificate verify failed: {exc.verify_message}"
    reason = getattr(exc, "reason", None)
    if not isinstance(reason, str) or not reason:
        return f"{prefix}: {exc}"
    text = reason.lower().replace("_", " ")
    if "alert" in text:  # the peer refused this node, and said why in a TLS alert
        return f"{prefix}: alert from the peer: {text}"
    return f"{prefix}: {text}"


def _san_mismatch(certificate: dict[str, Any], host: str) -> str | None:
    """Why ``certificate`` (SSLObject.getpeercert()'s dict) does not cover ``host``, or None.

    The rule OpenSSL applies to a server for the dialer, applied by the listener to the dialer's
    certificate: an IP address must equal an IP SAN; a name must equal a DNS SAN (case and a
    trailing dot aside) or match a wildcard in its leftmost label only (RFC 6125)."""
    sans = [(kind, str(value).strip()) for kind, value in certificate.get("subjectAltName", ())]
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        ip = None
    for kind, value in sans:
        if ip is not None and kind == "IP Address":
            try:
                if ipaddress.ip_address(value) == ip:
                    return None
            except ValueError:
                continue
        elif ip is None and kind == "DNS" and _dns_matches(value, host):
            return None
    names = ", ".join(value for _kind, value in sans) or "none"
    return (f"its TLS certificate does not cover voter host {host!r} (subject alternative "
            f"names: {names})")


def _dns_matches(pattern: str, host: str) -> bool:
    pattern, host = pattern.lower().rstrip("."), host.lower().rstrip(".")
    if pattern == host:
        return True
    if not pattern.startswith("*.") or "*" in pattern[2:]:
        return False
    label, _, rest = host.partition(".")
    return bool(label) and rest == pattern[2:]


class _TlsWire:
    """One connection's TLS, as bytes in and bytes out (see the module docstring).

    ``server_hostname`` None makes the listener's side; else the dialer's, verifying that the
    listener's certificate covers that host."""

    def __init__(self, context: ssl.SSLContext, *, server_hostname: str | None) -> None:
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self.is_server = server_hostname is None
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_side=self.is_server,
                                     server_hostname=server_hostname)
        #: True once the TLS handshake is done (the peer's certificate verified).
        self.handshake_done = False
        #: True once the peer ended TLS (close_notify): read like a closed socket.
        self.closed = False
        self._received_any = False
        self._plaintext_received = False

    def start(self) -> bytes:
        """The dialer's first flight (its ClientHello), to send once TCP is connected."""
        self._advance()
        return self.outgoing()

    def receive(self, data: bytes) -> bytes:
        """Takes ciphertext read from the socket; returns the plaintext it completes (maybe
        none). Handshake replies, if any, wait in :meth:`outgoing`. Raises _PeerRefused."""
        if self.is_server and not self._received_any and data and data[0] != _HANDSHAKE_RECORD:
            # Said plainly: "wrong version number" is what OpenSSL makes of it.
            raise _PeerRefused("TLS handshake failed: the peer does not speak TLS (a controller "
                               "without [tls], or not a controller)")
        self._received_any = self._received_any or bool(data)
        self._incoming.write(data)
        if not self.handshake_done:
            self._advance()
        plaintext = bytearray()
        while self.handshake_done and not self.closed:
            try:
                chunk = self._tls.read(_READ_CHUNK)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError:
                self.closed = True
                break
            except ssl.SSLError as exc:
                # In TLS 1.3 the dialer is done before the listener has checked its certificate:
                # an alert before any data is still the handshake failing.
                raise _PeerRefused(_reason(exc, handshake=not self._plaintext_received)) \
                    from None
            if not chunk:
                break
            plaintext += chunk
            self._plaintext_received = True
        if self._incoming.pending > _INCOMING_PENDING_MAX:  # cannot happen: see the docstring
            raise _PeerRefused(f"TLS failed: more than {_INCOMING_PENDING_MAX} bytes of unread "
                               f"records")
        return bytes(plaintext)

    def send(self, plaintext: bytes) -> bytes:
        """Encrypts ``plaintext`` (after the handshake only); returns the ciphertext to send."""
        if not self.handshake_done:
            raise RuntimeError("TLS data before the TLS handshake is done")
        view = memoryview(plaintext)
        try:
            while view:
                # A memory BIO never pushes back, so each write takes a record or more at once.
                view = view[self._tls.write(view):]
        except ssl.SSLError as exc:  # TLS already ended (the peer's close_notify, an alert)
            raise _PeerRefused(_reason(exc, handshake=False)) from None
        return self.outgoing()

    def outgoing(self) -> bytes:
        """Ciphertext waiting to be sent (handshake messages, alerts, records), now removed."""
        return self._outgoing.read()

    def peer_mismatch(self, host: str) -> str | None:
        """After the handshake: why the peer's verified certificate does not cover ``host``."""
        certificate = self._tls.getpeercert()
        if not certificate:
            return "no verified TLS certificate"
        return _san_mismatch(certificate, host)

    def _advance(self) -> None:
        try:
            self._tls.do_handshake()
        except ssl.SSLWantReadError:
            return
        except ssl.SSLError as exc:
            raise _PeerRefused(_reason(exc, handshake=True)) from None
        self.handshake_done = True


def _contexts(files: TlsFiles) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(listener's, dialer's) contexts from ``files``; InvalidConfigError naming what is wrong."""
    files.read(_WHERE)  # a missing file, a key others can read, not PEM: TlsFiles' own words
    if not files.cert_file:
        raise InvalidConfigError("tls: the Raft transport needs cert_file and key_file")
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.verify_mode = ssl.CERT_REQUIRED  # mutual TLS: a certificate of the CA, or nothing
    # No session tickets: a Raft connection lives until a failure and is never resumed.
    server.num_tickets = 0
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # CERT_REQUIRED and check_hostname on
    for context in (server, client):
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.set_ciphers(_TLS12_CIPHERS)
        try:
            context.load_verify_locations(cafile=files.ca_file)
            context.load_cert_chain(files.cert_file, files.key_file)
        except (ssl.SSLError, OSError) as exc:
            detail = _reason(exc, handshake=False).removeprefix("TLS failed: ") \
                if isinstance(exc, ssl.SSLError) else str(exc)
            raise InvalidConfigError(
                f"tls: cannot load {files.cert_file} and {files.key_file} with CA "
                f"{files.ca_file} for the Raft transport: {detail}") from None
    return server, client


class _TlsContexts:
    """The node's TLS contexts for Raft connections, rebuilt when its files are renewed.

    Built once at start (InvalidConfigError if the files cannot be loaded); each new connection
    asks for a :class:`_TlsWire`, which first reloads renewed files (see the module docstring).
    Only the tick thread calls it."""

    def __init__(self, files: TlsFiles, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.files = files
        self._clock = clock
        self._loaded = files.mtimes()
        self._server, self._client = _contexts(files)
        self._checked = clock()
        self._failed: tuple[int, ...] | None = None
        #: How many renewals were loaded since start.
        self.reloads = 0

    def wire(self, *, server_hostname: str | None) -> _TlsWire:
        """A new connection's TLS: the listener's (None) or the dialer's of that host."""
        self.refresh()
        context = self._server if server_hostname is None else self._client
        return _TlsWire(context, server_hostname=server_hostname)

    def refresh(self) -> None:
        now = self._clock()
        if now - self._checked < RELOAD_CHECK_S:
            return
        self._checked = now
        mtimes = self.files.mtimes()  # before reading: a change during the read shows next time
        if mtimes == self._loaded or mtimes == self._failed:
            return
        try:
            self._server, self._client = _contexts(self.files)
        except InvalidConfigError as exc:
            self._failed = mtimes  # warned once per change, not every check
            logger.warning("raft: renewed TLS files not loaded, keeping the old ones: %s", exc)
            return
        self._loaded, self._failed = mtimes, None
        self.reloads += 1
        logger.info("raft: loaded renewed TLS certificate files for new connections")
