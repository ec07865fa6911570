"""The toxics as data: each kind's name and attributes, a proxy's toxic as the API shows it, and
the checks of a create or update body, with Toxiproxy's error answers. Pure.

How each kind acts on the bytes is chaos/toxiproxy/pipe.py's business; this module only says
what a toxic is. Attributes are integers, 0 when not given (as in Toxiproxy's Go structs). Units:
latency, jitter, timeout and slow_close's delay in ms; slicer's delay in µs; bandwidth's rate in
KB/s (1 KB = 1000 bytes); average_size, size_variation and limit_data's bytes in bytes.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from tidelog.chaos.toxiproxy.limits import ATTRIBUTE_VALUE_MAX, TOXICS_PER_PROXY_MAX
from tidelog.chaos.toxiproxy.model import ApiError, bad_body, check_name

__all__ = ["KINDS", "STREAMS", "Toxic", "ToxicKind", "create_toxic", "update_toxic"]

STREAMS: Final = ("upstream", "downstream")  # Toxiproxy lists upstream toxics first


@dataclass(frozen=True, slots=True)
class ToxicKind:
    """A toxic type: its attribute names and, where 0 makes no sense, each one's least value."""

    name: str
    attributes: tuple[str, ...] = ()
    minimums: tuple[tuple[str, int], ...] = ()

    def defaults(self) -> dict[str, int]:
        return dict.fromkeys(self.attributes, 0)


KINDS: Final[dict[str, ToxicKind]] = {kind.name: kind for kind in (
    ToxicKind("noop"),
    ToxicKind("latency", ("latency", "jitter")),
    ToxicKind("bandwidth", ("rate",)),
    ToxicKind("timeout", ("timeout",)),
    ToxicKind("reset_peer", ("timeout",)),
    ToxicKind("slow_close", ("delay",)),
    # An average_size of 0 makes Go's slicer panic; here it is refused.
    ToxicKind("slicer", ("average_size", "size_variation", "delay"), (("average_size", 1),)),
    ToxicKind("limit_data", ("bytes",)),
)}

_uids = itertools.count(1)


@dataclass
class Toxic:
    """One toxic of a proxy as the API shows it. `uid` tells open connections apart from a
    re-added toxic of the same name, and `version` (bumped by each update) lets them notice
    the update."""

    name: str
    type: str
    stream: str
    toxicity: float
    attributes: dict[str, int]
    uid: int = field(default_factory=lambda: next(_uids))
    version: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.type,
            "stream": self.stream,
            "toxicity": self.toxicity,
            "attributes": dict(self.attributes),
        }


def check_toxicity(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise bad_body("toxicity must be a number")
    if not (math.isfinite(value) and 0.0 <= value <= 1.0):
        raise bad_body("toxicity must be between 0 and 1")
    return float(value)


def check_attributes(kind: ToxicKind, given: object, base: dict[str, int]) -> dict[str, int]:
    """Merges `given` into `base`. Stricter than Toxiproxy, which ignores unknown keys and takes
    negative numbers: here both are a 400, so a typo in a test fails loudly."""
    if not isinstance(given, dict):
        raise bad_body("attributes must be an object")
    result = dict(base)
    for key, value in given.items():
        if key not in kind.attributes:
            raise bad_body(f"{kind.name} has no attribute {key!r} (it has {list(kind.attributes)})")
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise bad_body(f"attribute {key!r} must be an integer")
        if not math.isfinite(value) or value != int(value):
            raise bad_body(f"attribute {key!r} must be an integer")
        if not 0 <= value <= ATTRIBUTE_VALUE_MAX:
            raise bad_body(f"attribute {key!r} must be between 0 and {ATTRIBUTE_VALUE_MAX}")
        result[key] = int(value)
    for key, minimum in kind.minimums:
        if result[key] < minimum:
            raise bad_body(f"{kind.name} {key} must be at least {minimum}")
    return result


def create_toxic(body: dict[str, Any], existing: Sequence[Toxic]) -> Toxic:
    """The toxic a create body asks for, next to a proxy's `existing` ones. Checked in
    Toxiproxy's order: stream, type, duplicate name, then the values."""
    stream = body.get("stream") or "downstream"
    if not isinstance(stream, str) or stream.lower() not in STREAMS:
        raise ApiError(400, "stream was invalid, can be either upstream or downstream")
    stream = stream.lower()
    toxic_type = body.get("type")
    kind = KINDS.get(toxic_type) if isinstance(toxic_type, str) else None
    if kind is None:
        raise ApiError(400, "invalid toxic type")
    name = check_name(body.get("name") or f"{kind.name}_{stream}", "name")
    if any(toxic.name == name for toxic in existing):
        raise ApiError(409, "toxic already exists")
    if len(existing) >= TOXICS_PER_PROXY_MAX:
        raise ApiError(400, f"at most {TOXICS_PER_PROXY_MAX} toxics per proxy")
    toxicity = check_toxicity(body.get("toxicity", 1.0))
    attributes = check_attributes(kind, body.get("attributes") or {}, kind.defaults())
    return Toxic(name, kind.name, stream, toxicity, attributes)


def update_toxic(toxic: Toxic, body: dict[str, Any]) -> None:
    """Applies an update body. As in Toxiproxy only the attributes (merged into the current
    ones) and the toxicity change; nothing changes unless both are good."""
    kind = KINDS[toxic.type]
    attributes = check_attributes(kind, body.get("attributes") or {}, toxic.attributes)
    toxicity = check_toxicity(body.get("toxicity", toxic.toxicity))
    toxic.attributes, toxic.toxicity = attributes, toxicity
    toxic.version += 1
