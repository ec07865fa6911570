"""The security parts of a metadata delta: ACLs (AclsImage's) and SCRAM credentials
(ScramImage's), each record checked again at replay."""

from __future__ import annotations

from tidelog.acl import AclBinding, binding_from_proto
from tidelog.metadata.delta_journal import UndoJournal, overlaid, require
from tidelog.metadata.image import ACL_ID_BYTES, AclsImage, ScramImage, frozen_mapping
from tidelog.scram import ScramCredential, mechanism_named, user_name_problem
from tidelog.v1 import metadata_pb2

__all__ = ["AclsDelta", "ScramDelta"]


class AclsDelta:
    """ACL bindings added (id -> binding) and removed (None), indexed both ways."""

    def __init__(self, image: AclsImage, journal: UndoJournal) -> None:
        self._image = image
        self._journal = journal
        self._acls: dict[bytes, AclBinding | None] = {}
        self._acl_ids: dict[AclBinding, bytes | None] = {}

    def acl(self, acl_id: bytes) -> AclBinding | None:
        if acl_id in self._acls:
            return self._acls[acl_id]
        return self._image.get(acl_id)

    def acl_id(self, binding: AclBinding) -> bytes | None:
        if binding in self._acl_ids:
            return self._acl_ids[binding]
        return self._image.id_of(binding)

    def replay_acl(self, r: metadata_pb2.AclRecord, _: int) -> None:
        require(len(r.acl_id) == ACL_ID_BYTES and any(r.acl_id), "ACL id is not a valid UUID")
        binding = binding_from_proto(r.binding)
        problem = binding.problem()
        require(problem is None, lambda: f"ACL {r.acl_id.hex()}: {problem}")
        require(self.acl(r.acl_id) is None, f"ACL id {r.acl_id.hex()} is in use")
        # One copy of each binding (the image indexes ids by binding): the manager writes no
        # record for a duplicate, so a duplicate here was made from a stale image.
        existing = self.acl_id(binding)
        require(existing is None, lambda: f"ACL {r.acl_id.hex()}: the same binding exists "
                f"as ACL {(existing or b'').hex()}")
        self._journal.set(self._acls, r.acl_id, binding)
        self._journal.set(self._acl_ids, binding, r.acl_id)

    def replay_remove_acl(self, r: metadata_pb2.RemoveAclRecord, _: int) -> None:
        binding = self.acl(r.acl_id)
        require(binding is not None, f"ACL id {r.acl_id.hex()} does not exist")
        self._journal.set(self._acls, r.acl_id, None)
        self._journal.set(self._acl_ids, binding, None)

    def apply(self) -> AclsImage:
        if not self._acls:
            return self._image
        return AclsImage.of(overlaid(self._image.by_id, self._acls))


class ScramDelta:
    """SCRAM credentials upserted or removed: (user, mechanism) -> credential, None when
    removed."""

    def __init__(self, image: ScramImage, journal: UndoJournal) -> None:
        self._image = image
        self._journal = journal
        self._scram: dict[tuple[str, int], ScramCredential | None] = {}

    def scram_credential(self, name: str, mechanism: int) -> ScramCredential | None:
        if (name, mechanism) in self._scram:
            return self._scram[(name, mechanism)]
        return self._image.get(name, mechanism)

    def replay_user_scram_credential(self, r: metadata_pb2.UserScramCredentialRecord,
                                     _: int) -> None:
        mechanism = mechanism_named(r.mechanism)
        require(mechanism is not None, lambda: f"SCRAM credential of {r.name!r}: unknown "
                f"mechanism {r.mechanism}")
        problem = user_name_problem(r.name)
        require(problem is None, lambda: f"SCRAM credential: {problem}")
        key_bytes = mechanism.key_bytes if mechanism is not None else 0
        require(len(r.stored_key) == key_bytes and len(r.server_key) == key_bytes
                and len(r.salt) > 0 and r.iterations > 0,
                lambda: f"SCRAM credential of {r.name!r}: malformed keys, salt or iterations")
        # An upsertion replaces the user's credential of that mechanism (a password change).
        self._journal.set(self._scram, (r.name, r.mechanism), ScramCredential(
            name=r.name, mechanism=r.mechanism, salt=r.salt, stored_key=r.stored_key,
            server_key=r.server_key, iterations=r.iterations))

    def replay_remove_user_scram_credential(
            self, r: metadata_pb2.RemoveUserScramCredentialRecord, _: int) -> None:
        require(self.scram_credential(r.name, r.mechanism) is not None,
                lambda: f"no SCRAM credential of {r.name!r} for mechanism {r.mechanism}")
        self._journal.set(self._scram, (r.name, r.mechanism), None)

    def apply(self) -> ScramImage:
        if not self._scram:
            return self._image
        return ScramImage(frozen_mapping(overlaid(self._image.credentials, self._scram)))
