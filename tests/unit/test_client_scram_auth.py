"""A SASL_SSL client: its security options, the SCRAM call credentials against a real TLS gRPC
server on 127.0.0.1 (tests/unit/fake_scram_broker.py checks the proof as the broker does), and
how refusals reach the caller: typed, at once, never retried.
"""

from __future__ import annotations

import concurrent.futures
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from fake_scram_broker import FakeScramBroker, Pki, credential

from tidelog import scram, scram_auth
from tidelog.client import Admin, Consumer, Producer, TopicPartition
from tidelog.client._io import error_from_rpc
from tidelog.errors import (
    InvalidConfigError,
    NetworkError,
    SaslAuthenticationFailedError,
    UnsupportedSaslMechanismError,
)
from tidelog.tls import ClientSecurity
from tidelog.v1 import broker_pb2, broker_pb2_grpc

FAST: dict[str, Any] = dict(request_timeout_ms=3_000, default_api_timeout_ms=20_000,
                            retry_backoff_ms=10, retry_backoff_max_ms=50)
SALT = b"0123456789abcdef0123456789abcdef"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki.make(tmp_path_factory.mktemp("pki"))


@pytest.fixture()
def broker(pki: Pki) -> Iterator[FakeScramBroker]:
    with FakeScramBroker(pki, require_auth=True) as fake:
        fake.add(credential("alice", "s3cret", salt=SALT, iterations=4096))
        fake.add(credential("alice", "s3cret", "SCRAM-SHA-512", salt=SALT, iterations=8192))
        yield fake


def sasl(pki: Pki, password: str = "s3cret", **extra: str) -> dict[str, str]:
    return dict(security_protocol="SASL_SSL", ssl_cafile=pki.ca_file, sasl_username="alice",
                sasl_password=password) | extra


def expected_key(password: str, mechanism: str = "SCRAM-SHA-256", iterations: int = 4096,
                 salt: bytes = SALT) -> bytes:
    m = scram.mechanism_named(mechanism)
    assert m is not None
    return scram.client_key(m, scram.salted_password(m, password, salt, iterations))


# ====================================================================== the options
@pytest.mark.parametrize(("options", "message"), [
    (dict(security_protocol="SASL_PLAINTEXT"), "security_protocol must be one of ('PLAINTEXT', "
                                               "'SSL', 'SASL_SSL')"),
    (dict(security_protocol="SASL_SSL", sasl_password="x"),
     "security_protocol='SASL_SSL' needs sasl_username (a SCRAM user"),
    (dict(security_protocol="SASL_SSL"), "needs sasl_username and sasl_password"),
    (dict(security_protocol="SASL_SSL", sasl_username="alice", sasl_password="pw",
          sasl_mechanism="PLAIN"), "sasl_mechanism must be one of ('SCRAM-SHA-256', "
                                   "'SCRAM-SHA-512'), got 'PLAIN'"),
    (dict(sasl_username="alice"), "sasl_username set but security_protocol is PLAINTEXT: set "
                                  "security_protocol='SASL_SSL'"),
    (dict(security_protocol="SSL", sasl_password="pw", sasl_mechanism="SCRAM-SHA-512"),
     "sasl_password/sasl_mechanism set but security_protocol is SSL"),
    (dict(security_protocol="SASL_SSL", sasl_username=" alice", sasl_password="pw"),
     "sasl_username: the user name ' alice' has leading or trailing whitespace"),
    (dict(security_protocol="SASL_SSL", sasl_username="a\nb", sasl_password="pw"),
     "contains a control character"),
    (dict(security_protocol="SASL_SSL", sasl_username="alice", sasl_password="pw\udcff"),
     "sasl_password is not valid Unicode text"),
])
def test_security_option_mistakes_are_one_line(options: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError) as info:
        ClientSecurity(**options)
    text = str(info.value)
    assert message in text and "\n" not in text
    assert "pw" not in text.replace("password", "")  # the password is never shown


def test_sasl_ssl_needs_the_ca_and_takes_an_optional_certificate(pki: Pki) -> None:
    with pytest.raises(InvalidConfigError, match="ssl CA file is not set"):
        ClientSecurity("SASL_SSL", sasl_username="alice", sasl_password="pw")
    security = ClientSecurity(**sasl(pki, sasl_mechanism="scram-sha-512"))
    assert security.sasl_mechanism == "SCRAM-SHA-512"
    assert "s3cret" not in repr(security)
    factory = security.channel_factory()
    assert factory.secure and factory.auth is not None
    assert "s3cret" not in repr(factory.auth)
    assert security.without_sasl() == ClientSecurity("SSL", pki.ca_file)
    assert ClientSecurity("SSL", pki.ca_file).channel_factory().auth is None


def test_address_of_a_service_url() -> None:
    assert scram_auth.address_of("https://127.0.0.1:9092/tidelog.v1.BrokerService") == (
        "127.0.0.1:9092")
    assert scram_auth.address_of("https://[::1]:9093/x.Y") == "[::1]:9093"
    assert scram_auth.address_of("https://broker.example/x.Y") == "broker.example:443"


# ====================================================================== the call credentials
def test_every_call_carries_the_client_key_and_the_salt_is_asked_once(
        broker: FakeScramBroker, pki: Pki) -> None:
    with Admin(broker.bootstrap, **FAST, **sasl(pki)) as admin:
        # Concurrent first calls: each plugin thread waits for the one fetch.
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            found = list(pool.map(lambda _: admin.describe_cluster().cluster_id, range(4)))
        assert found == ["fake"] * 4
        admin.describe_cluster()
    assert len(broker.salt_requests) == 1
    request, metadata = broker.salt_requests[0]
    assert (request.user, request.mechanism) == ("alice", scram.MECHANISMS["SCRAM-SHA-256"].value)
    assert scram.METADATA_PROOF not in metadata  # the salt channel has no call credentials
    assert broker.auth_metadata[-1] == {
        scram.METADATA_MECHANISM: "SCRAM-SHA-256", scram.METADATA_USER: b"alice",
        scram.METADATA_PROOF: expected_key("s3cret")}
    assert len(broker.auth_metadata) == 5


def test_sha_512_with_the_brokers_iterations(broker: FakeScramBroker, pki: Pki) -> None:
    with Admin(broker.bootstrap, **FAST, **sasl(pki, sasl_mechanism="SCRAM-SHA-512")) as admin:
        admin.describe_cluster()
    assert broker.auth_metadata[-1][scram.METADATA_PROOF] == expected_key(
        "s3cret", "SCRAM-SHA-512", 8192)


def test_the_plugin_runs_off_the_io_loop_thread(broker: FakeScramBroker, pki: Pki,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    threads: list[str] = []
    real = scram_auth.ScramAuth.client_key

    def recording(self: scram_auth.ScramAuth, address: str) -> bytes:
        threads.append(threading.current_thread().name)
        return real(self, address)

    monkeypatch.setattr(scram_auth.ScramAuth, "client_key", recording)
    with Admin(broker.bootstrap, **FAST, **sasl(pki)) as admin:
        admin.describe_cluster()
    assert threads and "tidelog-client-io" not in threads


def test_a_wrong_password_fails_at_once_without_retries(
        broker: FakeScramBroker, pki: Pki, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scram_auth, "RECHECK_INTERVAL_S", 60.0)  # however slow the machine
    with Admin(broker.bootstrap, **FAST, **sasl(pki, password="wrong")) as admin, \
            pytest.raises(SaslAuthenticationFailedError,
                          match="authentication of user 'alice' failed"):
        admin.describe_cluster()
    assert broker.calls == ["DescribeCluster"]
    assert len(broker.salt_requests) == 1  # asked again at most once per RECHECK_INTERVAL_S


def test_an_unknown_user_is_refused_the_same_way(broker: FakeScramBroker, pki: Pki) -> None:
    with Admin(broker.bootstrap, **FAST, **sasl(pki, sasl_username="mallory")) as admin, \
            pytest.raises(SaslAuthenticationFailedError):
        admin.describe_cluster()
    assert broker.calls == ["DescribeCluster"]


def test_producer_send_and_consumer_poll_fail_fast(broker: FakeScramBroker, pki: Pki) -> None:
    with Producer(broker.bootstrap, max_block_ms=20_000, **sasl(pki, password="bad")) as p, \
            pytest.raises(SaslAuthenticationFailedError):
        p.send("orders", b"v")
    sent = list(broker.calls)
    assert sent == ["Metadata"] * len(sent) and len(sent) <= 2, sent  # no retry loop
    with Consumer(broker.bootstrap, **sasl(pki, password="bad")) as c:
        c.assign([TopicPartition("orders", 0)])
        with pytest.raises(SaslAuthenticationFailedError):
            c.poll(timeout_ms=200)  # the first poll already says why


@pytest.mark.parametrize("password", ["s3cret", "wrong"])
def test_streams_carry_the_credentials_and_end_typed_when_refused(
        broker: FakeScramBroker, pki: Pki, password: str) -> None:
    from tidelog.client._io import Connections, io_thread

    conns = Connections("test", ClientSecurity(**sasl(pki, password=password)).channel_factory())

    async def both() -> list[Any]:
        out: list[Any] = []
        for method, request, call in (
                ("Fetch", broker_pb2.FetchRequest(), conns.exchange),
                ("Produce", broker_pb2.ProduceRequest(), conns.multiplex)):
            # A stream this fake (a sync gRPC server) refuses at once sometimes ends "Internal
            # error from Core" instead of with its status: a retriable NetworkError, as the
            # client treats it, so try again (bounded), as the client's retries would.
            for _ in range(5):
                try:
                    out.append(await call(broker.bootstrap, method, request, timeout_ms=5_000))
                except SaslAuthenticationFailedError as e:
                    out.append(e)
                except NetworkError:
                    continue
                break
        await conns.close()
        return out

    answers = io_thread().run(both(), 30)
    assert set(broker.calls) == {"FetchStream", "ProduceStream"}
    assert len(answers) == 2, answers
    if password == "wrong":
        assert all(isinstance(a, SaslAuthenticationFailedError) for a in answers), answers
    else:
        assert [type(a).__name__ for a in answers] == ["FetchResponse", "ProduceResponse"]


def test_a_broker_without_the_mechanism(broker: FakeScramBroker, pki: Pki) -> None:
    broker.unsupported_mechanism = True
    with Admin(broker.bootstrap, **FAST, **sasl(pki)) as admin:
        with pytest.raises(UnsupportedSaslMechanismError, match="not enabled on this listener"):
            admin.describe_cluster()
        broker.unsupported_mechanism = False
        assert admin.describe_cluster().cluster_id == "fake"  # a failed fetch is not kept
    assert broker.calls == ["DescribeCluster"]


def test_a_credential_set_again_with_a_new_salt_is_followed(
        broker: FakeScramBroker, pki: Pki, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scram_auth, "RECHECK_INTERVAL_S", 0.0)
    with Admin(broker.bootstrap, **FAST, **sasl(pki)) as admin:
        admin.describe_cluster()
        broker.add(credential("alice", "s3cret", salt=b"N" * 32))  # same password, new salt
        assert admin.describe_cluster().cluster_id == "fake"  # refused, rechecked, resent
    # (the NetworkError also asked for a metadata refresh: a Metadata call in between)
    assert broker.calls.count("DescribeCluster") == 3
    assert len(broker.salt_requests) == 2
    assert broker.auth_metadata[-1][scram.METADATA_PROOF] == expected_key("s3cret",
                                                                          salt=b"N" * 32)


def test_renewed_tls_files_keep_the_call_credentials(
        broker: FakeScramBroker, pki: Pki, monkeypatch: pytest.MonkeyPatch) -> None:
    import tidelog.tls as tls

    monkeypatch.setattr(tls, "RELOAD_CHECK_S", 0.0)
    factory = ClientSecurity(**sasl(pki)).channel_factory()
    ca = Path(pki.ca_file)
    os.utime(ca, ns=(ca.stat().st_atime_ns, ca.stat().st_mtime_ns + 10**9))
    assert factory.refresh() == 1
    with factory.blocking(broker.bootstrap) as channel:
        stub = broker_pb2_grpc.BrokerServiceStub(channel)
        assert stub.DescribeCluster(broker_pb2.DescribeClusterRequest(),
                                    timeout=5).cluster_id == "fake"
    assert broker.auth_metadata[-1][scram.METADATA_PROOF] == expected_key("s3cret")


# ====================================================================== status -> error
class _Status:
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


@pytest.mark.parametrize(("code", "details", "cls", "message"), [
    (grpc.StatusCode.UNAUTHENTICATED, "SASL_AUTHENTICATION_FAILED: bad proof",
     SaslAuthenticationFailedError, "broker b:1: bad proof"),
    (grpc.StatusCode.UNAUTHENTICATED, "UNSUPPORTED_SASL_MECHANISM: not here",
     UnsupportedSaslMechanismError, "broker b:1: not here"),
    (grpc.StatusCode.UNAUTHENTICATED, "who are you", SaslAuthenticationFailedError,
     "broker b:1: who are you"),
    (grpc.StatusCode.UNAVAILABLE, "Getting metadata from plugin failed with error: "
     "UNSUPPORTED_SASL_MECHANISM: ScramSalt: off", UnsupportedSaslMechanismError,
     "broker b:1: ScramSalt: off"),
    (grpc.StatusCode.UNAVAILABLE, "Getting metadata from plugin failed with error: "
     "NETWORK_EXCEPTION: ScramSalt failed: connection refused", NetworkError,
     "broker b:1: ScramSalt failed: connection refused"),
    (grpc.StatusCode.UNAVAILABLE, "Getting metadata from plugin failed with error: oops",
     NetworkError, "broker b:1: oops"),
    (grpc.StatusCode.UNAVAILABLE, "connection refused", NetworkError,
     "broker b:1: connection refused"),
])
def test_status_to_typed_error(code: grpc.StatusCode, details: str, cls: type,
                               message: str) -> None:
    error = error_from_rpc(_Status(code, details), "b:1")  # type: ignore[arg-type]
    assert type(error) is cls and error.message == message
    assert error.retriable == (cls is NetworkError)
