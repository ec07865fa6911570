"""ScramControlManager: AlterUserScramCredentials (Kafka's ScramControlManager, KIP-554).

Credentials live in the metadata log as UserScramCredentialRecord /
RemoveUserScramCredentialRecord, so every broker checks SASL_SSL clients against the same set and
it survives restarts. The client salts the password; the controller derives StoredKey and
ServerKey from the salted password and writes only those, with the salt and iterations.

Decided per user, as Kafka does: a user named in both a deletion and an upsertion, or twice for
one mechanism, gets DUPLICATE_RESOURCE and none of its items apply; a deletion of a credential
that does not exist gets RESOURCE_NOT_FOUND; an out-of-bounds item gets UNACCEPTABLE_CREDENTIAL or
UNSUPPORTED_SASL_MECHANISM (tidelog.scram.upsertion_problem). Other users' items still apply,
and all the records of one request are one batch. An upsertion of an existing (user, mechanism)
replaces it: a password change, effective for the next call a client makes.
"""

from __future__ import annotations

from tidelog import scram
from tidelog.controller.managers.common import error_response, set_error
from tidelog.errors import InvalidRequestError, TidelogError, error_for_code
from tidelog.metadata.image import MetadataImage
from tidelog.metadata.records import metadata_record
from tidelog.v1 import common_pb2, controller_pb2, metadata_pb2

__all__ = ["SCRAM_ITEMS_PER_REQUEST_MAX", "ScramControlManager"]

Records = list[metadata_pb2.MetadataRecord]
#: Deletions plus upsertions in one request (Kafka sets no bound; one keeps batches small).
SCRAM_ITEMS_PER_REQUEST_MAX = 1000


class ScramControlManager:
    """Users' SCRAM credentials, set and deleted per (user, mechanism)."""

    def alter(
        self, image: MetadataImage, request: controller_pb2.AlterUserScramCredentialsRequest
    ) -> tuple[Records, controller_pb2.AlterUserScramCredentialsResponse]:
        items = len(request.deletions) + len(request.upsertions)
        if items > SCRAM_ITEMS_PER_REQUEST_MAX:
            error = InvalidRequestError(
                f"{items} SCRAM credential changes in one request, above "
                f"{SCRAM_ITEMS_PER_REQUEST_MAX}")
            return [], error_response(controller_pb2.AlterUserScramCredentialsResponse,
                                      request, error)
        response = controller_pb2.AlterUserScramCredentialsResponse()
        records: Records = []
        duplicates = _duplicated_users(request)
        for user in scram.request_users(request):
            result = response.results.add(user=user, error_code=common_pb2.ErrorCode.NONE)
            if user in duplicates:
                set_error(result, error_for_code(
                    common_pb2.ErrorCode.DUPLICATE_RESOURCE,
                    f"user {user!r} is named more than once for one mechanism, or in both a "
                    f"deletion and an upsertion"))
                continue
            refusal, changes = _changes_of(image, request, user)
            if refusal is not None:
                set_error(result, refusal)
                continue
            records.extend(changes)
        return records, response


def _duplicated_users(request: controller_pb2.AlterUserScramCredentialsRequest) -> set[str]:
    deleted = {d.name for d in request.deletions}
    upserted = {u.name for u in request.upsertions}
    keys = [(d.name, d.mechanism) for d in request.deletions] + \
        [(u.name, u.mechanism) for u in request.upsertions]
    twice = {name for name, mechanism in keys if keys.count((name, mechanism)) > 1}
    return (deleted & upserted) | twice


def _changes_of(image: MetadataImage,
                request: controller_pb2.AlterUserScramCredentialsRequest,
                user: str) -> tuple[TidelogError | None, Records]:
    """The records for one user's items, or the refusal of all of them."""
    records: Records = []
    for d in (d for d in request.deletions if d.name == user):
        mechanism = scram.mechanism_named(d.mechanism)
        if mechanism is None:
            return error_for_code(common_pb2.ErrorCode.UNSUPPORTED_SASL_MECHANISM,
                                  f"unknown SCRAM mechanism {d.mechanism}"), []
        if image.scram.get(user, d.mechanism) is None:
            return error_for_code(common_pb2.ErrorCode.RESOURCE_NOT_FOUND,
                                  f"user {user!r} has no {mechanism.name} credential"), []
        records.append(metadata_record(metadata_pb2.RemoveUserScramCredentialRecord(
            name=user, mechanism=d.mechanism)))
    for u in (u for u in request.upsertions if u.name == user):
        problem = scram.upsertion_problem(u.name, u.mechanism, u.iterations, u.salt,
                                          u.salted_password)
        if problem is not None:
            code, message = problem
            return error_for_code(common_pb2.ErrorCode.Value(code), message), []
        mechanism = scram.mechanism_named(u.mechanism)
        assert mechanism is not None  # upsertion_problem checked it
        c = scram.credential_from_salted(user, mechanism, u.salt, u.salted_password,
                                         u.iterations)
        records.append(metadata_record(metadata_pb2.UserScramCredentialRecord(
            name=user, mechanism=u.mechanism, salt=c.salt, stored_key=c.stored_key,
            server_key=c.server_key, iterations=c.iterations)))
    return None, records
