"""An in-process fake of the BrokerService's SCRAM RPCs, for the client's, the Admin's and the
CLI's unit tests (the real broker's checks are tested with a real cluster elsewhere).

Not a broker: a gRPC server on 127.0.0.1, plaintext or TLS (``pki``: a CA and a certificate for
127.0.0.1 made with tidelog.certs), that keeps SCRAM credentials in a dict as the controller
would (tidelog.scram's stored form: salt, iterations, StoredKey; never a password) and answers
as the contract says (proto/tidelog/v1/controller.proto and broker.proto):

* ``AlterUserScramCredentials``: one result per user named, in first-seen order (deletions
  first); a user both deleted and set is DUPLICATE_RESOURCE; an upsertion is checked with
  ``scram.upsertion_problem``; deleting what is not there is RESOURCE_NOT_FOUND;
* ``DescribeUserScramCredentials``: every user (none named) or the named ones, RESOURCE_NOT_FOUND
  for a named user without credentials;
* ``ScramSalt``: the user's salt and iterations, or a stable decoy salt for an unknown user;
  UNSUPPORTED_SASL_MECHANISM while ``unsupported_mechanism`` is set;
* ``Metadata`` and ``DescribeCluster``: an empty cluster; ``FetchStream`` and ``ProduceStream``:
  an empty answer to each request.

With ``require_auth`` every RPC but ScramSalt checks the call's SCRAM metadata as the broker
does (``scram.verify``) and aborts with UNAUTHENTICATED ``SASL_AUTHENTICATION_FAILED: ...``.
Knobs: ``not_controller_rounds`` (the next n alter requests answer every user NOT_CONTROLLER),
``error_rounds`` (codes: the next alter requests answer every user with each in turn),
``refuse`` (CLUSTER_AUTHORIZATION_FAILED). Records: ``requests`` (each SCRAM admin request),
``salt_requests`` (each ScramSalt request with its metadata), ``auth_metadata`` (the SCRAM
metadata of each other call), ``calls`` (method names, in order).
"""

from __future__ import annotations

import hashlib
import threading
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from tidelog import scram
from tidelog.certs import issue, make_ca
from tidelog.errors import ErrorCode
from tidelog.v1 import broker_pb2, broker_pb2_grpc, controller_pb2


@dataclass(frozen=True)
class Pki:
    """A CA, and a certificate for 127.0.0.1 signed by it, as files under ``root``."""

    root: Path

    @classmethod
    def make(cls, root: Path) -> Pki:
        ca = make_ca()
        server = issue(ca, "broker", hosts=("127.0.0.1",))
        (root / "ca.crt").write_bytes(ca.cert_pem)
        (root / "broker.crt").write_bytes(server.cert_pem)
        (root / "broker.key").write_bytes(server.key_pem)
        (root / "broker.key").chmod(0o600)
        return cls(root)

    @property
    def ca_file(self) -> str:
        return str(self.root / "ca.crt")

    def server_credentials(self) -> grpc.ServerCredentials:
        return grpc.ssl_server_credentials([((self.root / "broker.key").read_bytes(),
                                             (self.root / "broker.crt").read_bytes())])


def credential(user: str, password: str, mechanism: str = "SCRAM-SHA-256",
               iterations: int = 4096, salt: bytes = b"s" * 32) -> scram.ScramCredential:
    """The stored form of ``password``, as the controller keeps it."""
    m = scram.mechanism_named(mechanism)
    assert m is not None
    return scram.credential_from_salted(user, m, salt,
                                        scram.salted_password(m, password, salt, iterations),
                                        iterations)


class FakeScramBroker(broker_pb2_grpc.BrokerServiceServicer):
    def __init__(self, pki: Pki | None = None, *, require_auth: bool = False) -> None:
        #: (user, mechanism value) -> the stored credential.
        self.credentials: dict[tuple[str, int], scram.ScramCredential] = {}
        self.requests: list[Any] = []
        self.salt_requests: list[tuple[broker_pb2.ScramSaltRequest, dict[str, Any]]] = []
        self.auth_metadata: list[dict[str, Any]] = []
        self.calls: list[str] = []
        self.not_controller_rounds = 0
        self.error_rounds: list[int] = []
        self.refuse = ""
        self.unsupported_mechanism = False
        self.require_auth = require_auth
        self._lock = threading.Lock()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        broker_pb2_grpc.add_BrokerServiceServicer_to_server(self, self._server)
        if pki is None:
            self.port = self._server.add_insecure_port("127.0.0.1:0")
        else:
            self.port = self._server.add_secure_port("127.0.0.1:0", pki.server_credentials())

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> FakeScramBroker:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop(grace=None)

    def add(self, cred: scram.ScramCredential) -> None:
        with self._lock:
            self.credentials[(cred.name, cred.mechanism)] = cred

    # ------------------------------------------------------------------ authentication
    def _authenticate(self, method: str, context: Any) -> None:
        metadata = dict(context.invocation_metadata())
        with self._lock:
            self.calls.append(method)
            self.auth_metadata.append({k: v for k, v in metadata.items()
                                       if k.startswith("tidelog-s")})
        if not self.require_auth:
            return
        mechanism = scram.mechanism_named(metadata.get(scram.METADATA_MECHANISM, ""))
        raw_user = metadata.get(scram.METADATA_USER, b"")
        user = raw_user.decode() if isinstance(raw_user, bytes) else raw_user
        proof = metadata.get(scram.METADATA_PROOF, b"")
        if mechanism is None:
            context.abort(grpc.StatusCode.UNAUTHENTICATED,
                          "SASL_AUTHENTICATION_FAILED: this listener needs a SCRAM user")
        with self._lock:
            cred = self.credentials.get((user, mechanism.value))
        if cred is None or not scram.verify(cred, proof):
            context.abort(grpc.StatusCode.UNAUTHENTICATED,
                          f"SASL_AUTHENTICATION_FAILED: authentication of user {user!r} failed")

    # ------------------------------------------------------------------ RPCs
    def ScramSalt(self, request: broker_pb2.ScramSaltRequest,
                  context: Any) -> broker_pb2.ScramSaltResponse:
        with self._lock:
            self.salt_requests.append((request, dict(context.invocation_metadata())))
            if self.unsupported_mechanism:
                return broker_pb2.ScramSaltResponse(
                    error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                    error_message="SCRAM-SHA-256 is not enabled on this listener")
            cred = self.credentials.get((request.user, request.mechanism))
        if cred is None:  # a made-up salt, stable per user: not telling who exists
            salt = hashlib.sha256(f"decoy\0{request.user}".encode()).digest()
            return broker_pb2.ScramSaltResponse(salt=salt, iterations=4096)
        return broker_pb2.ScramSaltResponse(salt=cred.salt, iterations=cred.iterations)

    def Metadata(self, request: broker_pb2.MetadataRequest,
                 context: Any) -> broker_pb2.MetadataResponse:
        self._authenticate("Metadata", context)
        return broker_pb2.MetadataResponse(cluster_id="fake")

    def DescribeCluster(self, request: broker_pb2.DescribeClusterRequest,
                        context: Any) -> broker_pb2.DescribeClusterResponse:
        self._authenticate("DescribeCluster", context)
        return broker_pb2.DescribeClusterResponse(cluster_id="fake", controller_id=1)

    def FetchStream(self, requests: Any, context: Any) -> Any:
        self._authenticate("FetchStream", context)
        for _ in requests:
            yield broker_pb2.FetchResponse()

    def ProduceStream(self, requests: Any, context: Any) -> Any:
        self._authenticate("ProduceStream", context)
        for r in requests:
            yield broker_pb2.ProduceResponse(correlation_id=r.correlation_id)

    def AlterUserScramCredentials(
            self, request: controller_pb2.AlterUserScramCredentialsRequest,
            context: Any) -> controller_pb2.AlterUserScramCredentialsResponse:
        self._authenticate("AlterUserScramCredentials", context)
        with self._lock:
            self.requests.append(request)
            items = [*request.deletions, *request.upsertions]
            users = list(dict.fromkeys(i.name for i in items))
            response = controller_pb2.AlterUserScramCredentialsResponse()
            if self.refuse:
                for u in users:
                    response.results.add(user=u, error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                         error_message=self.refuse)
                return response
            if self.not_controller_rounds > 0:
                self.not_controller_rounds -= 1
                for u in users:
                    response.results.add(user=u, error_code=ErrorCode.NOT_CONTROLLER,
                                         error_message="no active controller yet")
                return response
            if self.error_rounds:
                code = self.error_rounds.pop(0)
                for u in users:
                    response.results.add(user=u, error_code=code, error_message="as told")
                return response
            for u in users:
                response.results.append(self._alter_user(u, request))
            return response

    def _alter_user(self, user: str, request: Any) -> Any:
        result = controller_pb2.AlterUserScramCredentialsResult(user=user)
        deletions = [d for d in request.deletions if d.name == user]
        upsertions = [u for u in request.upsertions if u.name == user]
        if deletions and upsertions:
            result.error_code = ErrorCode.DUPLICATE_RESOURCE
            result.error_message = f"user {user!r} is both deleted and set"
            return result
        for u in upsertions:
            problem = scram.upsertion_problem(u.name, u.mechanism, u.iterations, u.salt,
                                              u.salted_password)
            if problem is not None:
                result.error_code = ErrorCode.Value(problem[0])
                result.error_message = problem[1]
                return result
        for d in deletions:
            if (user, d.mechanism) not in self.credentials:
                result.error_code = ErrorCode.RESOURCE_NOT_FOUND
                result.error_message = f"user {user!r} has no such credential"
                return result
        for d in deletions:
            del self.credentials[(user, d.mechanism)]
        for u in upsertions:
            m = scram.mechanism_named(u.mechanism)
            assert m is not None
            self.credentials[(user, u.mechanism)] = scram.credential_from_salted(
                user, m, u.salt, u.salted_password, u.iterations)
        return result

    def DescribeUserScramCredentials(
            self, request: broker_pb2.DescribeUserScramCredentialsRequest,
            context: Any) -> broker_pb2.DescribeUserScramCredentialsResponse:
        self._authenticate("DescribeUserScramCredentials", context)
        with self._lock:
            self.requests.append(request)
            if self.refuse:
                return broker_pb2.DescribeUserScramCredentialsResponse(
                    error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED, error_message=self.refuse)
            by_user: dict[str, list[scram.ScramCredential]] = {}
            for (user, _), cred in sorted(self.credentials.items()):
                by_user.setdefault(user, []).append(cred)
            response = broker_pb2.DescribeUserScramCredentialsResponse()
            for user in list(request.users) or sorted(by_user):
                creds = by_user.get(user)
                if not creds:
                    response.results.add(user=user, error_code=ErrorCode.RESOURCE_NOT_FOUND,
                                         error_message=f"user {user!r} has no credentials")
                    continue
                response.results.add(user=user, credential_infos=[
                    broker_pb2.ScramCredentialInfo(mechanism=c.mechanism,
                                                   iterations=c.iterations) for c in creds])
            return response
