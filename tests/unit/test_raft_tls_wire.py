"""TLS under the Raft transport (controller/raft/tls_wire.py), as bytes in and bytes out.

Two _TlsWire, a dialer's and a listener's, are pumped against each other in memory with
certificates from tidelog.certs (as `tidelog security init` makes them: one CA, a certificate
per node with its addresses as SANs). What must hold:

* with certificates of the CA the handshake completes (TLS 1.3, and 1.2 when a side caps it),
  data flows both ways whole, fed back in any chunk sizes, and nothing stays buffered;
* refused, each with one reason naming the failure: a dialer whose certificate comes from
  another CA (by the listener), a listener whose certificate does (by the dialer), a dialer
  without a certificate, a listener whose SANs do not cover the host dialled (IP and DNS), a
  peer that does not speak TLS; the side that is refused hears why in an alert;
* the listener's second check, once the HELLO names a voter: the dialer's certificate must
  cover that voter's host (a client user's certificate of the same CA has no SANs);
* _TlsContexts: unusable files fail at start in one line; renewed files are used by the next
  connection (checked at most every RELOAD_CHECK_S); a renewal that cannot be loaded keeps the
  old contexts and warns once.

Then one real RaftQuorum (a voter of two; this test is the other) with [tls]: a peer with a
node certificate and the cluster secret is served through TLS; a plaintext HELLO, another CA's
certificate and a CA certificate that does not cover the claimed voter are closed, counted and
logged; and a node without [tls] dialled with TLS says so in its refusal.
"""

from __future__ import annotations

import logging
import os
import socket
import ssl
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tidelog.certs import Issued, issue, make_ca
from tidelog.cluster_secret import derive_key
from tidelog.controller import raft
from tidelog.controller.raft import RaftQuorum, RaftSettings
from tidelog.controller.raft.tls_wire import _san_mismatch, _TlsContexts, _TlsWire
from tidelog.errors import InvalidConfigError
from tidelog.tls import RELOAD_CHECK_S, TlsFiles

HOST = "127.0.0.1"
SECRET = "s" * 43
KEY = derive_key(SECRET, "raft")
WAIT_S = 10.0


@dataclass(frozen=True)
class Pki:
    dir: Path
    ca: Issued

    def files(self, name: str, *, ca: str = "ca") -> TlsFiles:
        return TlsFiles(str(self.dir / f"{ca}.crt"), str(self.dir / f"{name}.crt"),
                        str(self.dir / f"{name}.key"))

    def write(self, name: str, issued: Issued) -> None:
        (self.dir / f"{name}.crt").write_bytes(issued.cert_pem)
        key = self.dir / f"{name}.key"
        key.write_bytes(issued.key_pem)
        key.chmod(0o600)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    pki = Pki(tmp_path_factory.mktemp("pki"), make_ca())
    other = make_ca("Another CA")
    (pki.dir / "ca.crt").write_bytes(pki.ca.cert_pem)
    (pki.dir / "other-ca.crt").write_bytes(other.cert_pem)
    for name in ("node-a", "node-b"):
        pki.write(name, issue(pki.ca, name, hosts=(HOST, "localhost")))
    pki.write("voter-b", issue(pki.ca, "voter-b", hosts=("127.0.0.2",)))  # the node's peer
    pki.write("named", issue(pki.ca, "named", hosts=("controller-2.example",)))
    pki.write("alice", issue(pki.ca, "alice"))  # a client user's: no SANs
    pki.write("rogue", issue(other, "rogue", hosts=(HOST,)))
    return pki


@dataclass
class Outcome:
    dialer_refused: str | None = None
    listener_refused: str | None = None


def pump(dialer: _TlsWire, listener: _TlsWire, *, chunk: int = 1 << 20) -> Outcome:
    """Runs the handshake in memory, ``chunk`` bytes at a time, until nothing moves or a side
    refuses (its alert is still delivered to the other, as connection.py sends it)."""
    outcome = Outcome()
    to_listener, to_dialer = dialer.start(), b""
    for _ in range(100):
        if not to_listener and not to_dialer:
            break
        try:
            for i in range(0, len(to_listener), chunk):
                listener.receive(to_listener[i:i + chunk])
        except raft._PeerRefused as exc:
            outcome.listener_refused = str(exc)
        to_listener, to_dialer = b"", to_dialer + listener.outgoing()
        if outcome.listener_refused is not None and not to_dialer:
            break
        try:
            for i in range(0, len(to_dialer), chunk):
                dialer.receive(to_dialer[i:i + chunk])
        except raft._PeerRefused as exc:
            outcome.dialer_refused = str(exc)
        to_dialer, to_listener = b"", dialer.outgoing()
        if outcome.listener_refused or outcome.dialer_refused:
            # The refused side has one more thing to read: the other's alert.
            if to_listener and outcome.listener_refused is None:
                try:
                    listener.receive(to_listener)
                except raft._PeerRefused as exc:
                    outcome.listener_refused = str(exc)
            break
    return outcome


def wires(pki: Pki, dialer: str, listener: str, *, host: str = HOST,
          dialer_ca: str = "ca", listener_ca: str = "ca") -> tuple[_TlsWire, _TlsWire]:
    return (_TlsContexts(pki.files(dialer, ca=dialer_ca)).wire(server_hostname=host),
            _TlsContexts(pki.files(listener, ca=listener_ca)).wire(server_hostname=None))


# ---------------------------------------------------------------------------------- in memory


def test_handshake_completes_and_data_flows_both_ways(pki: Pki) -> None:
    dialer, listener = wires(pki, "node-b", "node-a")
    assert pump(dialer, listener, chunk=100) == Outcome()
    assert dialer.handshake_done and listener.handshake_done
    assert dialer._tls.version() == "TLSv1.3"
    assert listener.peer_mismatch(HOST) is None  # the dialer's certificate covers its host
    big = os.urandom(1 << 20)  # many records, fed back in odd chunk sizes
    sealed = dialer.send(big)
    assert dialer.outgoing() == b"" and sealed != big and big[:64] not in sealed
    received = bytearray()
    for i in range(0, len(sealed), 7_001):
        received += listener.receive(sealed[i:i + 7_001])
        assert listener._incoming.pending < 18 * 1024  # at most one partial record held
    assert bytes(received) == big
    assert dialer.receive(listener.send(b"answer")) == b"answer"


def test_tls_1_2_works_too(pki: Pki) -> None:
    capped = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    capped.maximum_version = ssl.TLSVersion.TLSv1_2
    capped.load_verify_locations(cafile=str(pki.dir / "ca.crt"))
    capped.load_cert_chain(str(pki.dir / "node-b.crt"), str(pki.dir / "node-b.key"))
    dialer = _TlsWire(capped, server_hostname=HOST)
    listener = _TlsContexts(pki.files("node-a")).wire(server_hostname=None)
    assert pump(dialer, listener) == Outcome()
    assert listener._tls.version() == "TLSv1.2"
    assert listener.receive(dialer.send(b"x" * 40_000)) == b"x" * 40_000


def test_a_dialer_with_another_cas_certificate_is_refused(pki: Pki) -> None:
    # It trusts the cluster CA (so it goes on), but presents a certificate of its own CA.
    dialer, listener = wires(pki, "rogue", "node-a")
    outcome = pump(dialer, listener)
    assert outcome.listener_refused is not None
    assert outcome.listener_refused.startswith("TLS handshake failed: certificate verify "
                                               "failed: ")
    assert not listener.handshake_done
    # The dialer hears why: TLS 1.3 had it done before the listener checked it.
    assert outcome.dialer_refused == "TLS handshake failed: alert from the peer: tlsv1 alert " \
        "unknown ca"


def test_a_listener_with_another_cas_certificate_is_refused(pki: Pki) -> None:
    dialer, listener = wires(pki, "node-b", "rogue", listener_ca="ca")
    outcome = pump(dialer, listener)
    assert outcome.dialer_refused is not None
    assert outcome.dialer_refused.startswith("TLS handshake failed: certificate verify failed: ")
    assert not dialer.handshake_done and not listener.handshake_done


def test_a_dialer_without_a_certificate_is_refused(pki: Pki) -> None:
    anonymous = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    anonymous.load_verify_locations(cafile=str(pki.dir / "ca.crt"))
    dialer = _TlsWire(anonymous, server_hostname=HOST)
    listener = _TlsContexts(pki.files("node-a")).wire(server_hostname=None)
    outcome = pump(dialer, listener)
    assert outcome.listener_refused == "TLS handshake failed: peer did not return a certificate"
    assert outcome.dialer_refused is not None and "alert from the peer" in outcome.dialer_refused


@pytest.mark.parametrize(("listener", "host", "reason"), [
    ("node-a", "127.0.0.2", "IP address mismatch, certificate is not valid for '127.0.0.2'"),
    ("named", "controller-3.example",
     "Hostname mismatch, certificate is not valid for 'controller-3.example'"),
    ("named", HOST, "IP address mismatch"),
])
def test_a_listener_whose_sans_miss_the_dialled_host_is_refused(
        pki: Pki, listener: str, host: str, reason: str) -> None:
    dialer, listening = wires(pki, "node-b", listener, host=host)
    outcome = pump(dialer, listening)
    assert outcome.dialer_refused is not None
    assert outcome.dialer_refused.startswith("TLS handshake failed: certificate verify failed: ")
    assert reason in outcome.dialer_refused


def test_a_dns_san_covers_its_name(pki: Pki) -> None:
    dialer, listener = wires(pki, "node-b", "named", host="CONTROLLER-2.example")
    assert pump(dialer, listener) == Outcome()


def test_the_listener_checks_the_claimed_voter_against_the_dialers_certificate(
        pki: Pki) -> None:
    dialer, listener = wires(pki, "node-b", "node-a")
    pump(dialer, listener)
    assert listener.peer_mismatch("localhost") is None
    assert listener.peer_mismatch("127.0.0.2") == (
        "its TLS certificate does not cover voter host '127.0.0.2' (subject alternative "
        "names: 127.0.0.1, localhost)")
    dialer, listener = wires(pki, "alice", "node-a")
    assert pump(dialer, listener) == Outcome()  # a certificate of the CA: TLS lets it in
    assert listener.peer_mismatch(HOST) == (
        "its TLS certificate does not cover voter host '127.0.0.1' (subject alternative "
        "names: none)")


@pytest.mark.parametrize(("sans", "host", "covered"), [
    ((("IP Address", "127.0.0.1"),), "127.0.0.1", True),
    ((("IP Address", "0:0:0:0:0:0:0:1\n"),), "::1", True),  # how OpenSSL prints IPv6
    ((("IP Address", "127.0.0.1"),), "127.0.0.10", False),
    ((("DNS", "127.0.0.1"),), "127.0.0.1", False),  # an IP host needs an IP SAN
    ((("DNS", "Node-1.Example."),), "node-1.example", True),
    ((("DNS", "*.example"),), "node-1.example", True),
    ((("DNS", "*.example"),), "a.node-1.example", False),
    ((("DNS", "*.example"),), "example", False),
    ((("DNS", "n*.example"),), "node-1.example", False),
    ((), "node-1.example", False),
])
def test_san_matching(sans: tuple[tuple[str, str], ...], host: str, covered: bool) -> None:
    assert (_san_mismatch({"subjectAltName": sans}, host) is None) == covered


def test_a_peer_that_does_not_speak_tls_is_refused(pki: Pki) -> None:
    listener = _TlsContexts(pki.files("node-a")).wire(server_hostname=None)
    hello = raft._Handshake(KEY, self_address="127.0.0.2:1", dial_address="127.0.0.1:1",
                            accept_peer=lambda _a: None).hello()
    with pytest.raises(raft._PeerRefused, match="the peer does not speak TLS"):
        listener.receive(raft._FRAME_LENGTH.pack(len(hello)) + hello)


def test_data_before_the_handshake_is_a_bug() -> None:
    wire = _TlsWire(ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT), server_hostname=HOST)
    with pytest.raises(RuntimeError, match="before the TLS handshake"):
        wire.send(b"x")


# ----------------------------------------------------------------------------- certificates


def test_unusable_files_fail_at_start_in_one_line(pki: Pki, tmp_path: Path) -> None:
    with pytest.raises(InvalidConfigError, match="cannot read tls certificate file"):
        _TlsContexts(TlsFiles(str(pki.dir / "ca.crt"), str(tmp_path / "none.crt"),
                              str(pki.dir / "node-a.key")))
    with pytest.raises(InvalidConfigError, match="for the Raft transport: key values mismatch"):
        _TlsContexts(TlsFiles(str(pki.dir / "ca.crt"), str(pki.dir / "node-a.crt"),
                              str(pki.dir / "node-b.key")))


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def served(contexts: _TlsContexts, pki: Pki) -> bytes:
    """The certificate a listener built from ``contexts`` presents to a dialer now."""
    dialer = _TlsContexts(pki.files("node-b")).wire(server_hostname=HOST)
    listener = contexts.wire(server_hostname=None)
    assert pump(dialer, listener) == Outcome()
    der = dialer._tls.getpeercert(binary_form=True)
    assert der is not None
    return der


def test_renewed_files_are_used_by_new_connections(
        pki: Pki, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    renewing = Pki(tmp_path, pki.ca)
    (tmp_path / "ca.crt").write_bytes(pki.ca.cert_pem)
    renewing.write("node", issue(pki.ca, "node", hosts=(HOST,)))
    clock = Clock()
    contexts = _TlsContexts(renewing.files("node"), clock=clock)
    first = served(contexts, pki)

    renewed = issue(pki.ca, "node", hosts=(HOST,))
    renewing.write("node", renewed)
    os.utime(tmp_path / "node.crt", ns=(time.time_ns(), time.time_ns() + 10**9))
    assert served(contexts, pki) == first  # not looked at again before RELOAD_CHECK_S
    clock.now += RELOAD_CHECK_S
    after = served(contexts, pki)
    assert ssl.DER_cert_to_PEM_cert(after).strip() == renewed.cert_pem.decode().strip()
    assert contexts.reloads == 1

    # Half a renewal (a certificate without its key): the old contexts stay, one warning.
    (tmp_path / "node.crt").write_bytes(issue(pki.ca, "node", hosts=(HOST,)).cert_pem)
    os.utime(tmp_path / "node.crt", ns=(time.time_ns(), time.time_ns() + 2 * 10**9))
    with caplog.at_level(logging.WARNING, logger="controller.raft"):
        for _ in range(3):
            clock.now += RELOAD_CHECK_S
            assert served(contexts, pki) == after
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "renewed TLS files not loaded, keeping the old ones" in \
        warnings[0] and "key values mismatch" in warnings[0]
    assert contexts.reloads == 1


# ------------------------------------------------------------------- a real node, with [tls]


def free_address() -> str:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return f"{HOST}:{s.getsockname()[1]}"


class _NullMachine:
    def apply(self, batch: bytes, index: int) -> None:
        pass

    def snapshot(self) -> bytes:
        return b""

    def restore(self, data: bytes) -> None:
        pass


def start_node(tmp_path: Path, files: TlsFiles | None) -> RaftQuorum:
    address = free_address()
    # Voter 127.0.0.2:... is greater, so it dials this node (pysyncobj's rule): this test.
    return RaftQuorum(0, address, [address, "127.0.0.2:9094"], tmp_path / "raft",
                      _NullMachine(), settings=RaftSettings(), cluster_secret=SECRET,
                      tls_files=files)


@pytest.fixture
def node(pki: Pki, tmp_path: Path) -> Iterator[RaftQuorum]:
    quorum = start_node(tmp_path, pki.files("node-a"))
    try:
        yield quorum
    finally:
        quorum.close()


def dial(node: RaftQuorum, pki: Pki, name: str | None) -> ssl.SSLSocket:
    """A TLS connection to the node's Raft port, as ``name`` (None: no certificate)."""
    context = ssl.create_default_context(cafile=str(pki.dir / "ca.crt"))
    if name is not None:
        context.load_cert_chain(str(pki.dir / f"{name}.crt"), str(pki.dir / f"{name}.key"))
    host, port = node.self_address.rsplit(":", 1)
    raw = socket.create_connection((host, int(port)), timeout=WAIT_S)
    return context.wrap_socket(raw, server_hostname=host)


def send_body(sock: socket.socket, body: bytes) -> None:
    sock.sendall(raft._FRAME_LENGTH.pack(len(body)) + body)


def read_body(sock: socket.socket) -> bytes:
    data = b""
    while len(data) < 4 or len(data) < 4 + raft._FRAME_LENGTH.unpack_from(data)[0]:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data[4:]


def closed_by_node(sock: socket.socket) -> bool:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        try:
            if not sock.recv(65536):
                return True
        except TimeoutError:
            return False
        except (ConnectionResetError, ssl.SSLError):
            return True
    return False


def wait_refusals(node: RaftQuorum, count: int) -> None:
    deadline = time.monotonic() + WAIT_S
    while node.transport_refusals() < count and time.monotonic() < deadline:
        time.sleep(0.01)
    assert node.transport_refusals() == count


def hello(node: RaftQuorum) -> raft._Handshake:
    return raft._Handshake(KEY, self_address="127.0.0.2:9094", dial_address=node.self_address,
                           accept_peer=lambda _a: None)


def test_a_node_with_tls_serves_its_voter_and_refuses_the_rest(
        node: RaftQuorum, pki: Pki, caplog: pytest.LogCaptureFixture) -> None:
    assert node.status()["transport_tls"] is True
    # A node certificate of the CA for 127.0.0.1 passes TLS, but does not cover the voter
    # (127.0.0.2) its HELLO claims: refused before the challenge...
    with caplog.at_level(logging.WARNING, logger="controller.raft"):
        with dial(node, pki, "node-b") as sock:
            send_body(sock, hello(node).hello())
            assert closed_by_node(sock)
        wait_refusals(node, 1)
        # ... plaintext, another CA's certificate, and no certificate are refused in TLS.
        port = int(node.self_address.rsplit(":", 1)[1])
        with socket.create_connection((HOST, port), timeout=WAIT_S) as plain:
            send_body(plain, hello(node).hello())
            assert closed_by_node(plain)
        wait_refusals(node, 2)
        for name in ("rogue", None):
            with pytest.raises((ssl.SSLError, ConnectionError)), \
                    dial(node, pki, name) as sock:
                sock.sendall(b"x")
                sock.recv(1)  # TLS 1.3: the refusal comes as the first read's alert
        wait_refusals(node, 4)
    reasons = [r.getMessage() for r in caplog.records]
    for reason in ("its TLS certificate does not cover voter host '127.0.0.2'",
                   "TLS handshake failed: the peer does not speak TLS",
                   "TLS handshake failed: certificate verify failed: ",
                   "TLS handshake failed: peer did not return a certificate"):
        assert any(reason in r for r in reasons), (reason, reasons)
    assert node.status()["running"] and node.failure is None


def test_a_voter_with_the_ca_and_the_key_is_served_through_tls(
        pki: Pki, tmp_path: Path) -> None:
    quorum = start_node(tmp_path, pki.files("node-a"))
    try:
        with dial(quorum, pki, "voter-b") as sock:
            handshake = hello(quorum)
            send_body(sock, handshake.hello())
            proof, codec = handshake.receive(read_body(sock))
            assert proof is not None and codec is not None
            send_body(sock, proof)
            message = raft._decode_message(codec.open(read_body(sock)))
            assert message["type"] in {"request_vote", "tidelog_keepalive"}
        assert quorum.transport_refusals() == 0
    finally:
        quorum.close()


def test_a_node_without_tls_says_so_when_dialled_with_tls(
        pki: Pki, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    quorum = start_node(tmp_path, None)
    try:
        assert quorum.status()["transport_tls"] is False
        with caplog.at_level(logging.WARNING, logger="controller.raft"), \
                pytest.raises((ssl.SSLError, ConnectionError, TimeoutError)):
            dial(quorum, pki, "node-b")
        wait_refusals(quorum, 1)
        assert any("the peer starts TLS, but this node has no [tls]" in r.getMessage()
                   for r in caplog.records)
    finally:
        quorum.close()


def test_a_member_with_another_cas_certificate_is_kept_out_and_both_sides_say_why(
        pki: Pki, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    low, high = sorted([free_address(), free_address()])  # the higher address dials
    members = [(0, low, pki.files("node-a")), (1, high, pki.files("rogue", ca="other-ca"))]
    quorums: list[RaftQuorum] = []
    with caplog.at_level(logging.WARNING, logger="controller.raft"):
        try:
            for node_id, address, files in members:
                quorums.append(RaftQuorum(node_id, address, [low, high], tmp_path / str(node_id),
                                          _NullMachine(), settings=RaftSettings(),
                                          cluster_secret=SECRET, tls_files=files))
            deadline = time.monotonic() + WAIT_S
            while not all(q.transport_refusals() for q in quorums):
                assert time.monotonic() < deadline, [q.transport_refusals() for q in quorums]
                time.sleep(0.01)
            assert not any(any(q.peer_connections().values()) for q in quorums)
        finally:
            for quorum in quorums:
                quorum.close()
    reasons = [r.getMessage() for r in caplog.records]
    # The dialer refuses the listener's certificate; the listener hears it in an alert.
    assert any(f"(voter address {low}): TLS handshake failed: certificate verify failed: " in r
               for r in reasons), reasons
    assert any("TLS handshake failed: alert from the peer: tlsv1 alert unknown ca" in r
               for r in reasons), reasons
