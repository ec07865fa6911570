"""AclControlManager: CreateAcls and DeleteAcls (Kafka's AclControlManager).

Bindings live in the metadata log as AclRecord / RemoveAclRecord, so every broker builds the same
Authorizer from its image and the set survives restarts. Each creation and each filter is decided
on its own: an invalid one gets INVALID_REQUEST naming the field, the rest still apply, and all
the records of one request are one batch.

- A creation equal to an existing binding, or to an earlier one in the same request, succeeds
  without a second record (Kafka does the same), so a retried CreateAcls is harmless.
- A filter deletes every binding it matches (an empty filter matches all of them, as Kafka's
  ANY filter does); a binding matched by several filters is removed by one record, and each
  filter's result lists every binding it matched.
"""

from __future__ import annotations

import random
import uuid

from tidelog import acl
from tidelog.acl import AclBinding, binding_from_proto, binding_to_proto
from tidelog.controller.managers.common import (
    ACL_CREATIONS_PER_REQUEST_MAX,
    ACL_FILTERS_PER_REQUEST_MAX,
    error_response,
    set_error,
)
from tidelog.errors import InvalidRequestError
from tidelog.metadata.image import ACL_ID_BYTES, MetadataImage
from tidelog.metadata.records import metadata_record
from tidelog.v1 import common_pb2, controller_pb2, metadata_pb2

__all__ = ["AclControlManager"]

Records = list[metadata_pb2.MetadataRecord]
class AclControlManager:
    """ACL bindings: created with fresh ids, deleted by filter."""

    def __init__(self, rng: random.Random) -> None:
        # The controller's seeded source (as topic ids): deterministic in tests and simulations.
        self._rng = rng

    def _new_acl_id(self, taken: set[bytes], image: MetadataImage) -> bytes:
        while True:
            acl_id = uuid.UUID(int=self._rng.getrandbits(8 * ACL_ID_BYTES), version=4).bytes
            if acl_id not in taken and image.acls.get(acl_id) is None:
                return acl_id

    # --- CreateAcls ---------------------------------------------------------------------------

    def create_acls(
        self, image: MetadataImage, request: controller_pb2.CreateAclsRequest
    ) -> tuple[Records, controller_pb2.CreateAclsResponse]:
        response = controller_pb2.CreateAclsResponse()
        if len(request.creations) > ACL_CREATIONS_PER_REQUEST_MAX:
            error = InvalidRequestError(
                f"{len(request.creations)} ACL creations in one request, above "
                f"{ACL_CREATIONS_PER_REQUEST_MAX}")
            return [], error_response(controller_pb2.CreateAclsResponse, request, error)
        records: Records = []
        created: set[AclBinding] = set()
        new_ids: set[bytes] = set()
        for creation in request.creations:
            result = response.results.add(error_code=common_pb2.ErrorCode.NONE)
            binding = binding_from_proto(creation)
            problem = binding.problem()
            if problem is not None:
                set_error(result, InvalidRequestError(problem))
                continue
            if binding in created or image.acls.id_of(binding) is not None:
                continue  # already there: success, no second copy
            acl_id = self._new_acl_id(new_ids, image)
            new_ids.add(acl_id)
            created.add(binding)
            records.append(metadata_record(metadata_pb2.AclRecord(
                acl_id=acl_id, binding=binding_to_proto(binding))))
        return records, response

    # --- DeleteAcls ---------------------------------------------------------------------------

    def delete_acls(
        self, image: MetadataImage, request: controller_pb2.DeleteAclsRequest
    ) -> tuple[Records, controller_pb2.DeleteAclsResponse]:
        response = controller_pb2.DeleteAclsResponse()
        if len(request.filters) > ACL_FILTERS_PER_REQUEST_MAX:
            error = InvalidRequestError(
                f"{len(request.filters)} ACL filters in one request, above "
                f"{ACL_FILTERS_PER_REQUEST_MAX}")
            return [], error_response(controller_pb2.DeleteAclsResponse, request, error)
        records: Records = []
        removed: set[bytes] = set()
        ordered = sorted(image.acls.by_id.items())
        for proto in request.filters:
            result = response.results.add(error_code=common_pb2.ErrorCode.NONE)
            f = acl.filter_from_proto(proto)
            problem = f.problem()
            if problem is not None:
                set_error(result, InvalidRequestError(problem))
                continue
            for acl_id, binding in ordered:
                if not f.matches(binding):
                    continue
                result.deleted.append(binding_to_proto(binding))
                if acl_id not in removed:
                    removed.add(acl_id)
                    records.append(metadata_record(metadata_pb2.RemoveAclRecord(acl_id=acl_id)))
        return records, response

