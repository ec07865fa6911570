"""Toxiproxy's HTTP admin API on aiohttp: its routes, status codes, JSON shapes and error bodies.

The routes are those of Toxiproxy 2.x's api.go except /metrics: /version, /reset, /populate,
proxies (index, create, show, update by POST or PATCH, delete) and their toxics (index, create,
show, update, delete). Status codes as Toxiproxy's: 201 create, 204 delete or reset, 409 exists,
404 not found, 400 bad body; every error answer is Toxiproxy's body, ``{"error": message,
"status": status}``, including unknown routes (404) and wrong methods (405), which gorilla/mux
would answer in plain text. A request that is not HTTP at all (a bad request line or header)
is aiohttp's to answer: 400 in plain text, as Go's net/http answers it for Toxiproxy.

`Api` holds the proxies and answers; it knows nothing of listening (chaos/toxiproxy/server.py).
Each request's body is read whole before its handler runs, at most HTTP_BODY_BYTES_MAX bytes
(aiohttp's client_max_size, and a Content-Length over it is refused before a byte is read)
within HTTP_REQUEST_TIMEOUT_S. Handlers run on the serving loop and touch state only there.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import Awaitable, Callable
from typing import Any, Final

from aiohttp import web

from tidelog.chaos.toxiproxy.limits import HTTP_BODY_BYTES_MAX, HTTP_REQUEST_TIMEOUT_S, PROXIES_MAX
from tidelog.chaos.toxiproxy.model import ApiError, ProxyConfig, bad_body, error_body
from tidelog.chaos.toxiproxy.proxy import Proxy
from tidelog.chaos.toxiproxy.toxics import Toxic, create_toxic, update_toxic

__all__ = ["VERSION", "Api"]

log = logging.getLogger(__name__)

VERSION: Final = "2.x-compatible (tidelog chaos/toxiproxy)"

_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_PROXY: Final = "/proxies/{proxy:[^/]+}"  # any segment; its %-escapes decoded, as Toxiproxy's
_TOXIC: Final = _PROXY + "/toxics/{toxic:[^/]+}"


def _answer(status: int, body: Any = None) -> web.Response:
    if body is None:
        return web.Response(status=status)
    return web.json_response(body, status=status)


def _error(status: int, message: str, *, close: bool = False) -> web.Response:
    response = _answer(status, error_body(status, message))
    if close:  # what is left of the request is not read: the connection cannot go on
        response.force_close()
    return response


def _path(request: web.Request) -> str:
    return request.raw_path.partition("?")[0]


@web.middleware
async def _toxiproxy_answers(request: web.Request, handler: _Handler) -> web.StreamResponse:
    """Reads the request's body (bounded), runs its handler, and turns every failure into an
    error answer in Toxiproxy's shape, never a crash."""
    if request.content_length is not None and request.content_length > HTTP_BODY_BYTES_MAX:
        return _error(413, f"body over {HTTP_BODY_BYTES_MAX} bytes", close=True)
    try:
        async with asyncio.timeout(HTTP_REQUEST_TIMEOUT_S):
            await request.read()  # kept by aiohttp for the handler
    except web.HTTPRequestEntityTooLarge:  # a chunked body that grew past the limit
        return _error(413, f"body over {HTTP_BODY_BYTES_MAX} bytes", close=True)
    except TimeoutError:
        return _error(408, f"body not read within {HTTP_REQUEST_TIMEOUT_S} s", close=True)
    except (web.RequestPayloadError, ConnectionError) as error:
        # A malformed chunked body, or one cut short by the client going away (then this
        # answer reaches nobody, and aiohttp lets the connection go quietly).
        return _error(400, f"bad request body: {error}", close=True)
    try:
        return await handler(request)
    except ApiError as error:
        return _error(error.status, error.message)
    except web.HTTPMethodNotAllowed:
        return _error(405, f"method {request.method} not allowed on {_path(request)}")
    except web.HTTPNotFound:
        return _error(404, "404 page not found")
    except web.HTTPException as error:  # anything else aiohttp's router refuses
        return _error(error.status, error.reason)
    except Exception as error:
        log.exception("toxiproxy API: %s %s failed", request.method, _path(request))
        return _error(500, f"internal error: {error!r}")


async def _json(request: web.Request) -> Any:
    body = await request.read()
    if not body.strip():
        raise bad_body("EOF")  # what Go's decoder says about an empty body
    try:
        return json.loads(body)
    except (ValueError, RecursionError) as error:
        raise bad_body(str(error)) from None


async def _json_object(request: web.Request) -> dict[str, Any]:
    value = await _json(request)
    if not isinstance(value, dict):
        raise bad_body("expected a JSON object")
    return value


class Api:
    """The proxies and the admin API's answers over them, for one event loop."""

    def __init__(self, *, seed: int | None = None) -> None:
        # One seeded generator for toxicity draws, jitter and slice sizes, so a test can
        # replay them (the order of connections still depends on the test's own timing).
        self.rng = random.Random(seed)
        self.proxies: dict[str, Proxy] = {}

    def application(self) -> web.Application:
        app = web.Application(client_max_size=HTTP_BODY_BYTES_MAX,
                              middlewares=[_toxiproxy_answers])
        # The route table, as Toxiproxy's api.go. No HEAD: Toxiproxy has none.
        for method, path, handler in (
                ("GET", "/version", self.handle_version),
                ("POST", "/reset", self.handle_reset),
                ("GET", "/proxies", self.handle_proxy_index),
                ("POST", "/proxies", self.handle_proxy_create),
                ("POST", "/populate", self.handle_populate),
                ("GET", _PROXY, self.handle_proxy_show),
                ("POST", _PROXY, self.handle_proxy_update),
                ("PATCH", _PROXY, self.handle_proxy_update),
                ("DELETE", _PROXY, self.handle_proxy_delete),
                ("GET", _PROXY + "/toxics", self.handle_toxic_index),
                ("POST", _PROXY + "/toxics", self.handle_toxic_create),
                ("GET", _TOXIC, self.handle_toxic_show),
                ("POST", _TOXIC, self.handle_toxic_update),
                ("PATCH", _TOXIC, self.handle_toxic_update),
                ("DELETE", _TOXIC, self.handle_toxic_delete)):
            app.router.add_route(method, path, handler)
        return app

    def close(self) -> None:
        """Stops every proxy and drops its connections."""
        for proxy in self.proxies.values():
            proxy.stop()
        self.proxies.clear()

    # -- proxies ---------------------------------------------------------------------------------

    def _proxy(self, request: web.Request) -> Proxy:
        proxy = self.proxies.get(request.match_info["proxy"])
        if proxy is None:
            raise ApiError(404, "proxy not found")
        return proxy

    async def handle_version(self, request: web.Request) -> web.Response:
        return _answer(200, {"version": VERSION})

    async def handle_reset(self, request: web.Request) -> web.Response:
        errors = []
        for proxy in self.proxies.values():
            try:
                await proxy.start()
            except ApiError as error:
                errors.append(f"{proxy.name}: {error.message}")
            proxy.toxics.clear()
            proxy.toxics_changed()
        if errors:
            raise ApiError(500, "; ".join(errors))
        return _answer(204)

    async def handle_proxy_index(self, request: web.Request) -> web.Response:
        return _answer(200, {name: p.to_json() for name, p in self.proxies.items()})

    async def handle_proxy_show(self, request: web.Request) -> web.Response:
        return _answer(200, self._proxy(request).to_json())

    async def handle_proxy_create(self, request: web.Request) -> web.Response:
        config = ProxyConfig.from_json(await _json_object(request))
        if config.name in self.proxies:
            raise ApiError(409, "proxy already exists")
        if len(self.proxies) >= PROXIES_MAX:
            raise ApiError(400, f"at most {PROXIES_MAX} proxies")
        proxy = Proxy(config.name, config.listen, config.upstream, rng=self.rng)
        if config.enabled:
            await proxy.start()  # a failed listen leaves nothing behind, as in Toxiproxy
        self.proxies[config.name] = proxy
        return _answer(201, proxy.to_json())

    async def handle_populate(self, request: web.Request) -> web.Response:
        body = await _json(request)
        if not isinstance(body, list) or len(body) > PROXIES_MAX:
            raise bad_body(f"expected a list of at most {PROXIES_MAX} proxies")
        # Every entry is checked before any proxy is touched, as Toxiproxy does.
        configs = []
        for entry in body:
            if not isinstance(entry, dict):
                raise bad_body("expected a list of proxy objects")
            configs.append(ProxyConfig.from_json(entry))
        populated: list[Proxy] = []
        for config in configs:
            existing = self.proxies.get(config.name)
            if existing is not None and (existing.listen, existing.upstream) == (
                    config.listen, config.upstream):
                populated.append(existing)
                continue
            if existing is not None:
                existing.stop()
                del self.proxies[config.name]
            proxy = Proxy(config.name, config.listen, config.upstream, rng=self.rng)
            try:
                if config.enabled:
                    await proxy.start()
            except ApiError as error:
                return _answer(error.status, {**error_body(error.status, error.message),
                                              "proxies": [p.to_json() for p in populated]})
            self.proxies[config.name] = proxy
            populated.append(proxy)
        return _answer(201, {"proxies": [p.to_json() for p in populated]})

    async def handle_proxy_update(self, request: web.Request) -> web.Response:
        proxy = self._proxy(request)
        current = ProxyConfig(proxy.name, proxy.listen, proxy.upstream, proxy.enabled)
        config = current.updated(await _json_object(request))
        # As Toxiproxy's Proxy.Update: a new address restarts the proxy; disabling stops
        # listening and drops every connection; enabling listens again on the same address.
        if (config.listen, config.upstream) != (proxy.listen, proxy.upstream):
            proxy.stop()
            proxy.listen, proxy.upstream = config.listen, config.upstream
        if config.enabled and not proxy.enabled:
            await proxy.start()
        elif not config.enabled and proxy.enabled:
            proxy.stop()
        return _answer(200, proxy.to_json())

    async def handle_proxy_delete(self, request: web.Request) -> web.Response:
        proxy = self._proxy(request)
        proxy.stop()
        del self.proxies[proxy.name]
        return _answer(204)

    # -- toxics ----------------------------------------------------------------------------------

    def _toxic(self, proxy: Proxy, request: web.Request) -> Toxic:
        for toxic in proxy.toxics:
            if toxic.name == request.match_info["toxic"]:
                return toxic
        raise ApiError(404, "toxic not found")

    async def handle_toxic_index(self, request: web.Request) -> web.Response:
        return _answer(200, [t.to_json() for t in self._proxy(request).sorted_toxics()])

    async def handle_toxic_show(self, request: web.Request) -> web.Response:
        proxy = self._proxy(request)
        return _answer(200, self._toxic(proxy, request).to_json())

    async def handle_toxic_create(self, request: web.Request) -> web.Response:
        proxy = self._proxy(request)
        toxic = create_toxic(await _json_object(request), proxy.toxics)
        proxy.toxics.append(toxic)
        proxy.toxics_changed()
        return _answer(200, toxic.to_json())

    async def handle_toxic_update(self, request: web.Request) -> web.Response:
        proxy = self._proxy(request)
        toxic = self._toxic(proxy, request)
        update_toxic(toxic, await _json_object(request))
        proxy.toxics_changed()
        return _answer(200, toxic.to_json())

    async def handle_toxic_delete(self, request: web.Request) -> web.Response:
        proxy = self._proxy(request)
        proxy.toxics.remove(self._toxic(proxy, request))
        proxy.toxics_changed()
        return _answer(204)
