"""The ASGI app behind ``jsonmode serve`` (Starlette).

    POST /v1/chat/completions   structured (response_format, strict tools) or proxied
    POST /v1/responses          the Responses API, text.format honoured
    GET  /v1/models             the upstream model
    GET  /metrics               Prometheus: jsonmode's families (all workers' sum)
    GET  /healthz               200 once the server serves (no key needed)

(``/chat/completions`` and ``/models`` answer too, for clients configured without
``/v1``.) The app keeps no state between requests: any number of processes behind a
load balancer serve alike.

Bodies are read up to ``max_body_bytes`` (413 beyond, announced or not); bad requests
are 400 with the JSON path of the problem, answered before the upstream is touched.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from jsonmode.errors import JsonModeError
from jsonmode.serve.auth import BearerAuth
from jsonmode.serve.chat import structured_reply
from jsonmode.serve.config import ServeConfig, from_env
from jsonmode.serve.errors import ServeError, error_response, from_jsonmode
from jsonmode.serve.httpmetrics import RequestMetrics, exposition
from jsonmode.serve.responses import responses_reply
from jsonmode.serve.tools import has_strict_tools, tools_reply
from jsonmode.serve.upstream import Upstream
from jsonmode.serve.wire import parse_body, read_chat

__all__ = ["app_from_env", "create_app", "read_json"]


async def read_json(request: Request, limit: int) -> dict[str, Any]:
    """The request's body as a JSON object, read up to ``limit`` bytes.

    Raises:
        ServeError: 413 past the limit (announced by Content-Length or not), 400 for a
            body that is not a JSON object.
    """
    announced = request.headers.get("content-length")
    if announced is not None and announced.isdigit() and int(announced) > limit:
        raise _too_large(limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        chunks.append(chunk)
    return parse_body(b"".join(chunks))


def _too_large(limit: int) -> ServeError:
    return ServeError(
        413,
        f"the request body is over the server's limit of {limit} bytes",
        type="request_too_large",
        code="request_too_large",
    )


def create_app(config: ServeConfig) -> Starlette:
    """The server's app for ``config`` (one :class:`Upstream` per app, made at startup
    inside the serving event loop and closed at shutdown)."""
    state: dict[str, Any] = {}
    registry = _registry()

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        state["upstream"] = Upstream(config)
        state["metrics"] = _metrics(registry)
        try:
            yield
        finally:
            await state["upstream"].aclose()
            _metrics_off(state["metrics"])

    async def chat(request: Request) -> Response:
        upstream: Upstream = state["upstream"]
        try:
            body = await read_json(request, config.max_body_bytes)
            call = read_chat(body, config)
        except ServeError as error:
            return error_response(error)
        if not call.structured and has_strict_tools(call):
            try:
                return tools_reply(call, upstream, config.keepalive_s)  # type: ignore[return-value]
            except ServeError as error:
                return error_response(error)
        if not call.structured:
            return await _proxied(upstream, body)
        return structured_reply(call, upstream, config.keepalive_s)  # type: ignore[return-value]

    async def responses(request: Request) -> Response:
        try:
            body = await read_json(request, config.max_body_bytes)
            reply = responses_reply(body, config, state["upstream"])
        except ServeError as error:
            return error_response(error)
        return reply  # type: ignore[no-any-return]

    async def models(request: Request) -> Response:
        upstream: Upstream = state["upstream"]
        model = {"id": upstream.model_name, "object": "model", "created": 0, "owned_by": "jsonmode"}
        return JSONResponse({"object": "list", "data": [model]})

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def metrics(request: Request) -> Response:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        data = generate_latest(exposition(state["metrics"]))
        return Response(data, media_type=CONTENT_TYPE_LATEST)

    routes = [
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/chat/completions", chat, methods=["POST"]),
        Route("/v1/responses", responses, methods=["POST"]),
        Route("/responses", responses, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/models", models, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
    ]
    # each served path is counted under its own name (any other path as "other")
    paths = [route.path for route in routes]
    middleware = [Middleware(RequestMetrics, registry=registry, routes=paths)]
    if config.cors_origins:
        from starlette.middleware.cors import CORSMiddleware

        middleware.append(
            Middleware(
                CORSMiddleware,
                allow_origins=list(config.cors_origins),
                allow_methods=["GET", "POST"],
                allow_headers=["authorization", "content-type"],
            )
        )
    if config.api_key is not None:
        middleware.append(Middleware(BearerAuth, key=config.api_key))
    return Starlette(routes=routes, middleware=middleware, lifespan=lifespan)


def _registry() -> Any:
    from prometheus_client import CollectorRegistry

    return CollectorRegistry()


def _metrics(registry: Any) -> Any:
    import jsonmode.metrics

    return jsonmode.metrics.enable(registry)


def _metrics_off(registry: Any) -> None:
    """Stop counting into ``registry`` if it is still the process's active one."""
    import jsonmode.metrics

    if jsonmode.metrics.active_registry() is registry:
        jsonmode.metrics.disable()


async def _proxied(upstream: Upstream, body: dict[str, Any]) -> Response:
    """A request without structure, sent upstream unchanged; its answer streamed back."""
    try:
        status, headers, pieces = await upstream.proxy(body)
    except JsonModeError as exc:
        return error_response(from_jsonmode(exc))
    return StreamingResponse(pieces, status_code=status, headers=headers)


def app_from_env() -> Starlette:
    """The app for the config in ``JSONMODE_SERVE_CONFIG`` (uvicorn's factory, for
    worker processes)."""
    return create_app(from_env())
