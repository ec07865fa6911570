"""ConfigControlManager: AlterConfigs (incremental, Kafka's IncrementalAlterConfigs) and
DescribeConfigs.

Resources: a topic (by name), the cluster (BROKER resource named "") or one broker (its id as a
decimal string). Topic resources take topic config names (retention.ms); broker resources take
the broker-level names of the same configs (log.retention.ms), which act as defaults for every
topic (see tidelog/configs.py). Values are validated and stored in canonical form; SET of the
current value and DELETE of an unset key write nothing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from tidelog import configs
from tidelog.controller.managers.common import (
    CONFIG_OPS_PER_RESOURCE_MAX,
    CONFIG_RESOURCES_PER_REQUEST_MAX,
    set_error,
)
from tidelog.errors import (
    DuplicateResourceError,
    InvalidConfigError,
    InvalidRequestError,
    TidelogError,
    UnknownTopicOrPartitionError,
)
from tidelog.metadata.image import BROKER, TOPIC, MetadataImage
from tidelog.metadata.records import metadata_record
from tidelog.v1 import controller_pb2, metadata_pb2

__all__ = ["ConfigControlManager"]

Records = list[metadata_pb2.MetadataRecord]
_SOURCE_DEFAULT = controller_pb2.CONFIG_SOURCE_DEFAULT
_SOURCE_TOPIC = controller_pb2.CONFIG_SOURCE_TOPIC
_SOURCE_CLUSTER = controller_pb2.CONFIG_SOURCE_CLUSTER
_SOURCE_BROKER = controller_pb2.CONFIG_SOURCE_BROKER


def _definitions(
    image: MetadataImage, resource_type: int, resource_name: str
) -> Mapping[str, configs.ConfigDef]:
    """The configs a resource takes, after checking that the resource exists and is valid."""
    if resource_type == TOPIC:
        if image.topics.get(resource_name) is None:
            raise UnknownTopicOrPartitionError(f"topic {resource_name!r} does not exist")
        return configs.TOPIC_CONFIGS
    if resource_type == BROKER:
        if resource_name != "" and not (resource_name.isdecimal() and resource_name.isascii()):
            raise InvalidRequestError(
                f"broker resource name {resource_name!r} is not '' (cluster) or a broker id"
            )
        return configs.BROKER_DEFAULT_CONFIGS
    raise InvalidRequestError(f"unknown config resource type {resource_type}")


def _effective(
    image: MetadataImage, resource_type: int, resource_name: str, definition: configs.ConfigDef
) -> tuple[str, int]:
    """The value a config has for a resource, and where it comes from (ConfigSource)."""
    if resource_type == TOPIC:
        override = image.configs.get(TOPIC, resource_name).get(definition.name)
        if override is not None:
            return override, _SOURCE_TOPIC
    elif resource_name != "":
        override = image.configs.get(BROKER, resource_name).get(definition.broker_name)
        if override is not None:
            return override, _SOURCE_BROKER
    cluster = image.configs.get(BROKER, "").get(definition.broker_name)
    if cluster is not None:
        return cluster, _SOURCE_CLUSTER
    return definition.default, _SOURCE_DEFAULT


class ConfigControlManager:
    """Topic and cluster/broker config overrides."""

    # --- AlterConfigs -------------------------------------------------------------------------

    def alter_configs(
        self, image: MetadataImage, request: controller_pb2.AlterConfigsRequest
    ) -> tuple[Records, controller_pb2.AlterConfigsResponse]:
        response = controller_pb2.AlterConfigsResponse()
        if len(request.resources) > CONFIG_RESOURCES_PER_REQUEST_MAX:
            set_error(response, InvalidRequestError(
                f"{len(request.resources)} resources in one request, above "
                f"{CONFIG_RESOURCES_PER_REQUEST_MAX}"
            ))
            return [], response
        counts = Counter((r.resource_type, r.resource_name) for r in request.resources)
        records: Records = []
        for resource in request.resources:
            result = response.resources.add(
                resource_type=resource.resource_type, resource_name=resource.resource_name
            )
            try:
                if counts[(resource.resource_type, resource.resource_name)] > 1:
                    raise DuplicateResourceError(
                        f"resource {resource.resource_name!r} appears more than once in the request"
                    )
                changes = self._changes(image, resource)
            except TidelogError as error:
                set_error(result, error)
                continue
            if not request.validate_only:
                records.extend(_config_record(resource, key, value) for key, value in changes)
        return records, response

    def _changes(
        self, image: MetadataImage, resource: controller_pb2.AlterConfigsRequest.Resource
    ) -> list[tuple[str, str | None]]:
        definitions = _definitions(image, resource.resource_type, resource.resource_name)
        if len(resource.ops) > CONFIG_OPS_PER_RESOURCE_MAX:
            raise InvalidRequestError(
                f"{len(resource.ops)} config ops on one resource, above "
                f"{CONFIG_OPS_PER_RESOURCE_MAX}"
            )
        names = Counter(op.name for op in resource.ops)
        current = image.configs.get(resource.resource_type, resource.resource_name)
        changes: list[tuple[str, str | None]] = []
        for op in resource.ops:
            if names[op.name] > 1:
                raise InvalidRequestError(f"config {op.name!r} appears more than once")
            definition = definitions.get(op.name)
            if definition is None:
                kind = "topic" if resource.resource_type == TOPIC else "broker"
                raise InvalidConfigError(f"unknown {kind} config {op.name!r}")
            value = self._new_value(image, resource, definition, op)
            if value != current.get(op.name):
                changes.append((op.name, value))
        return changes

    def _new_value(
        self,
        image: MetadataImage,
        resource: controller_pb2.AlterConfigsRequest.Resource,
        definition: configs.ConfigDef,
        op: controller_pb2.AlterConfigsRequest.Op,
    ) -> str | None:
        if op.op == controller_pb2.ALTER_CONFIG_SET:
            return configs.canonical_value(definition, op.value)
        if op.op == controller_pb2.ALTER_CONFIG_DELETE:
            return None
        if op.op not in (controller_pb2.ALTER_CONFIG_APPEND, controller_pb2.ALTER_CONFIG_SUBTRACT):
            raise InvalidRequestError(f"config {op.name!r}: unknown operation {op.op}")
        if definition.type is not configs.ConfigType.LIST:
            raise InvalidConfigError(
                f"config {op.name!r} is not a list, so it cannot be appended to or subtracted from"
            )
        base, _ = _effective(image, resource.resource_type, resource.resource_name, definition)
        items = configs.split_list(base)
        given = configs.split_list(op.value)
        if op.op == controller_pb2.ALTER_CONFIG_APPEND:
            items += [item for item in given if item not in items]
        else:
            items = [item for item in items if item not in given]
        return configs.canonical_value(definition, configs.join_list(items))

    # --- DescribeConfigs ----------------------------------------------------------------------

    def describe_configs(
        self, image: MetadataImage, request: controller_pb2.DescribeConfigsRequest
    ) -> controller_pb2.DescribeConfigsResponse:
        """Read-only: every (or each named) config of each resource, with value and source.

        Unknown config names are left out of the answer, as Kafka does.
        """
        response = controller_pb2.DescribeConfigsResponse()
        if len(request.resources) > CONFIG_RESOURCES_PER_REQUEST_MAX:
            set_error(response, InvalidRequestError(
                f"{len(request.resources)} resources in one request, above "
                f"{CONFIG_RESOURCES_PER_REQUEST_MAX}"
            ))
            return response
        for resource in request.resources:
            result = response.resources.add(
                resource_type=resource.resource_type, resource_name=resource.resource_name
            )
            try:
                definitions = _definitions(image, resource.resource_type, resource.resource_name)
            except TidelogError as error:
                set_error(result, error)
                continue
            wanted = set(resource.names)
            for name, definition in definitions.items():
                if wanted and name not in wanted:
                    continue
                value, source = _effective(
                    image, resource.resource_type, resource.resource_name, definition
                )
                result.configs.add(
                    name=name, value=value, source=source,
                    read_only=False, sensitive=False, documentation=definition.doc,
                )
        return response


def _config_record(
    resource: controller_pb2.AlterConfigsRequest.Resource, key: str, value: str | None
) -> metadata_pb2.MetadataRecord:
    record = metadata_pb2.ConfigRecord(
        resource_type=resource.resource_type,
        resource_name=resource.resource_name,
        name=key,
    )
    if value is not None:
        record.value = value
    return metadata_record(record)
