"""The Toxiproxy-compatible server's values, checked without a server: chaos/toxiproxy/toxics.py
(toxic kinds, a create body's defaults and checks in Toxiproxy's order, updates that merge) and
chaos/toxiproxy/model.py (addresses, names, a proxy's configuration). Pure functions called
directly; each refusal is checked for Toxiproxy's status and message, which the API answers as
its error body. The same refusals through the real client are in test_toxiproxy_api.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from tidelog.chaos.toxiproxy.limits import NAME_CHARS_MAX, TOXICS_PER_PROXY_MAX
from tidelog.chaos.toxiproxy.model import ApiError, ProxyConfig, format_address, parse_address
from tidelog.chaos.toxiproxy.toxics import KINDS, Toxic, create_toxic, update_toxic


def _refused(call: Any, *args: Any, **kwargs: Any) -> tuple[int, str]:
    with pytest.raises(ApiError) as error:
        call(*args, **kwargs)
    return error.value.status, error.value.message


def _state(toxic: Toxic) -> tuple[dict[str, int], float, int]:
    return toxic.attributes, toxic.toxicity, toxic.version


def test_a_create_body_gets_toxiproxys_defaults() -> None:
    toxic = create_toxic({"type": "latency", "attributes": {"latency": 5}}, [])
    assert toxic.to_json() == {"name": "latency_downstream", "type": "latency",
                               "stream": "downstream", "toxicity": 1.0,
                               "attributes": {"latency": 5, "jitter": 0}}
    upstream = create_toxic({"type": "noop", "stream": "UpStream", "toxicity": 0}, [])
    assert (upstream.name, upstream.stream, upstream.toxicity, upstream.attributes) == (
        "noop_upstream", "upstream", 0.0, {})
    assert upstream.uid != toxic.uid  # open connections tell a re-added toxic apart by it


def test_every_kind_defaults_its_attributes_to_zero() -> None:
    for name, kind in KINDS.items():
        body: dict[str, Any] = {"type": name}
        if kind.minimums:
            body["attributes"] = {key: minimum for key, minimum in kind.minimums}
        toxic = create_toxic(body, [])
        assert set(toxic.attributes) == set(kind.attributes)
        assert all(value == dict(kind.minimums).get(key, 0)
                   for key, value in toxic.attributes.items())


@pytest.mark.parametrize(("body", "status", "message"), [
    # the stream is checked first, then the type, as Toxiproxy does
    ({"type": "nonsense", "stream": "sideways"}, 400,
     "stream was invalid, can be either upstream or downstream"),
    ({"type": "nonsense"}, 400, "invalid toxic type"),
    ({"type": ["latency"]}, 400, "invalid toxic type"),
    ({"type": "latency", "name": "a/b"}, 400,
     f"bad request body: name must be printable, without '/', at most {NAME_CHARS_MAX} chars"),
    ({"type": "latency", "toxicity": 2}, 400, "bad request body: toxicity must be between 0 and 1"),
    ({"type": "latency", "toxicity": True}, 400, "bad request body: toxicity must be a number"),
    ({"type": "latency", "attributes": [1]}, 400, "bad request body: attributes must be an object"),
    ({"type": "latency", "attributes": {"latnecy": 1}}, 400,
     "bad request body: latency has no attribute 'latnecy' (it has ['latency', 'jitter'])"),
    ({"type": "latency", "attributes": {"latency": 1.5}}, 400,
     "bad request body: attribute 'latency' must be an integer"),
    ({"type": "latency", "attributes": {"latency": -1}}, 400,
     "bad request body: attribute 'latency' must be between 0 and 9007199254740992"),
    ({"type": "slicer", "attributes": {"average_size": 0}}, 400,
     "bad request body: slicer average_size must be at least 1"),
])
def test_a_bad_create_body_is_refused_with_toxiproxys_answer(
        body: dict[str, Any], status: int, message: str) -> None:
    assert _refused(create_toxic, body, []) == (status, message)


def test_a_duplicate_name_is_409_and_a_full_proxy_400() -> None:
    existing = [create_toxic({"type": "latency"}, [])]
    assert _refused(create_toxic, {"type": "latency"}, existing) == (409, "toxic already exists")
    full = [Toxic(f"t{i}", "noop", "downstream", 1.0, {}) for i in range(TOXICS_PER_PROXY_MAX)]
    assert _refused(create_toxic, {"type": "noop"}, full) == (
        400, f"at most {TOXICS_PER_PROXY_MAX} toxics per proxy")


def test_an_update_merges_attributes_and_bumps_the_version() -> None:
    toxic = create_toxic({"type": "latency", "attributes": {"latency": 5}}, [])
    update_toxic(toxic, {"attributes": {"jitter": 2}})
    assert _state(toxic) == ({"latency": 5, "jitter": 2}, 1.0, 1)
    update_toxic(toxic, {"toxicity": 0.5})
    assert _state(toxic) == ({"latency": 5, "jitter": 2}, 0.5, 2)


def test_a_bad_update_changes_nothing() -> None:
    toxic = create_toxic({"type": "latency", "attributes": {"latency": 5}}, [])
    assert _refused(update_toxic, toxic, {"attributes": {"jitter": 2}, "toxicity": 7})[0] == 400
    assert _refused(update_toxic, toxic, {"attributes": {"rate": 1}})[0] == 400
    assert _state(toxic) == ({"latency": 5, "jitter": 0}, 1.0, 0)


def test_addresses() -> None:
    assert parse_address("127.0.0.1:0", "listen", listen=True) == ("127.0.0.1", 0)
    assert parse_address("[::1]:8474", "listen", listen=True) == ("::1", 8474)
    assert parse_address(":9092", "upstream", listen=False) == ("127.0.0.1", 9092)  # as Go dials
    assert format_address("::1", 8474) == "[::1]:8474"
    assert format_address("127.0.0.1", 1) == "127.0.0.1:1"
    assert _refused(parse_address, "127.0.0.1:0", "upstream", listen=False) == (
        400, "bad request body: upstream port out of range in '127.0.0.1:0'")
    for bad in ("no-port", "h:", "h:x", "h:123456"):
        assert _refused(parse_address, bad, "listen", listen=True) == (
            400, f"bad request body: listen must be host:port, got {bad!r}")
    assert _refused(parse_address, None, "upstream", listen=False) == (
        400, "missing required field: upstream")


def test_a_proxy_config_from_a_create_body_and_an_update() -> None:
    config = ProxyConfig.from_json({"name": "b1", "upstream": "127.0.0.1:9092"})
    assert config == ProxyConfig("b1", "127.0.0.1:0", "127.0.0.1:9092", True)  # loopback only
    moved = config.updated({"upstream": "127.0.0.1:9093", "listen": "", "enabled": False})
    assert moved == ProxyConfig("b1", "127.0.0.1:0", "127.0.0.1:9093", False)
    assert config.updated({"name": "other"}).name == "b1"
    for body, message in (
            ({"upstream": "127.0.0.1:1"}, "missing required field: name"),
            ({"name": "x"}, "missing required field: upstream"),
            ({"name": "x", "upstream": "127.0.0.1:1", "enabled": "yes"},
             "bad request body: enabled must be true or false"),
            ({"name": "x" * (NAME_CHARS_MAX + 1), "upstream": "127.0.0.1:1"},
             f"bad request body: name must be printable, without '/', at most {NAME_CHARS_MAX} "
             "chars")):
        assert _refused(ProxyConfig.from_json, body) == (400, message)
