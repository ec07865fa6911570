"""The configs' part of a metadata delta (ConfigurationsImage's): Config records for topics and
for the brokers' cluster-wide defaults, validated again at replay and kept canonical."""

from __future__ import annotations

from collections.abc import Callable

from tidelog import configs
from tidelog.errors import TidelogError
from tidelog.metadata.delta_journal import MISSING, Ignored, UndoJournal, require
from tidelog.metadata.image import BROKER, TOPIC, ConfigurationsImage, frozen_mapping
from tidelog.v1 import metadata_pb2

__all__ = ["ConfigsDelta"]


class ConfigsDelta:
    """Config entries changed by replayed records: (resource type, resource name, key) ->
    value, None when removed."""

    def __init__(self, image: ConfigurationsImage, journal: UndoJournal, *,
                 topic_exists: Callable[[str], bool]) -> None:
        self._image = image
        self._journal = journal
        self._topic_exists = topic_exists
        self._configs: dict[tuple[int, str, str], str | None] = {}

    def __bool__(self) -> bool:
        return bool(self._configs)

    def config(self, resource_type: int, resource_name: str, key: str) -> str | None:
        change = self._configs.get((resource_type, resource_name, key), MISSING)
        if change is not MISSING:
            assert change is None or isinstance(change, str)
            return change
        return self._image.get(resource_type, resource_name).get(key)

    def keys(self, resource_type: int, resource_name: str) -> list[str]:
        """The keys set on a resource now, sorted."""
        keys = set(self._image.get(resource_type, resource_name))
        for kind, name, key in self._configs:
            if kind == resource_type and name == resource_name:
                keys.add(key)
        return sorted(k for k in keys if self.config(resource_type, resource_name, k) is not None)

    def remove_topic(self, name: str) -> None:
        """A removed topic's configs go with it."""
        for key in self.keys(TOPIC, name):
            self._journal.set(self._configs, (TOPIC, name, key), None)

    def replay_config(self, r: metadata_pb2.ConfigRecord, _: int) -> None:
        if r.resource_type == TOPIC:
            require(self._topic_exists(r.resource_name), "topic does not exist")
            validate: Callable[[str, str], str] = configs.validate_topic_config
        else:
            require(r.resource_type == BROKER, f"unknown resource type {r.resource_type}")
            require(
                r.resource_name == "" or r.resource_name.isdecimal(),
                f"broker resource name {r.resource_name!r} is not '' or a broker id",
            )
            validate = configs.validate_broker_default_config
        key = (r.resource_type, r.resource_name, r.name)
        if r.HasField("value"):
            try:
                canonical = validate(r.name, r.value)
            except TidelogError as error:
                raise Ignored(error.message) from None
            require(canonical == r.value, f"{r.name}: value {r.value!r} is not canonical")
            self._journal.set(self._configs, key, r.value)
        else:
            self._journal.set(self._configs, key, None)

    def apply(self) -> ConfigurationsImage:
        if not self._configs:
            return self._image
        resources: dict[tuple[int, str], dict[str, str]] = {}
        for (kind, name, key), value in self._configs.items():
            entries = resources.setdefault((kind, name), dict(self._image.get(kind, name)))
            if value is None:
                entries.pop(key, None)
            else:
                entries[key] = value
        merged = dict(self._image.resources)
        for resource, entries in resources.items():
            if entries:
                merged[resource] = frozen_mapping(entries)
            else:
                merged.pop(resource, None)
        return ConfigurationsImage(frozen_mapping(merged))
