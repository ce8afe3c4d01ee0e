"""The HTTP side of ``mmreason vllm-serve`` (``vllm_server.EngineServer``): FastAPI on uvicorn, as
``trl vllm-serve``. FastAPI and uvicorn come with vLLM (the ``vllm`` extra); only the server imports them.

Every request is served on one event loop; the engines run in threads of their own (``vllm_pool``), so a
client waiting on the engine, reading its answer slowly or sending its request slowly never blocks another.
What uvicorn does not bound by itself is bounded here:

- ``_Guard`` (ASGI, before any body is read): every path but ``/health`` wants the key (401); a body must
  declare its length (411) within ``--max_body_mb`` (413); the reply carries the proof of the client's
  challenge; one escaped request line per request goes to stderr (never a header, so never the key).
- ``_DeadlineH11`` (uvicorn's h11 protocol): a connection has ``--header_timeout`` seconds to deliver a
  request line and headers, counted from when it opened or its last answer went out (uvicorn's own
  keep-alive timer restarts with every byte, so a peer trickling a byte at a time would hold it for good);
  at most ``--max_waiting_per_address`` connections of one address (``--max_waiting`` in all) wait for
  their headers at once, one more closing the longest-waiting. Waiting connections hold no slot: anyone can
  open them, so they must never keep ``/health`` or a key holder's call out. A body gets ``--read_timeout``
  seconds from its headers (408 after). uvicorn's h11 also caps an incomplete request line + headers at 16 KiB.
- ``_Guard`` again: at most ``--max_connections`` calls with the key are in progress at once (one more: 503);
  ``/health`` and refusals never take one.
"""

from __future__ import annotations

import asyncio
import socket
import sys
import threading
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

from mmreason.rollout.backends import EngineDied
from mmreason.rollout.backends import vllm_auth as auth
from mmreason.rollout.backends.vllm_wire import Refused, WireError
from mmreason.terminal import printable

# a server's endpoint: the request body in, the JSON answer out
Route = Callable[[bytes], Awaitable[Any]]


class HttpServer:
    """``server``'s endpoints on a socket bound at construction (``port``: the one it got); ``serve()`` runs
    uvicorn until ``stop()`` or a signal (in the main thread)."""

    def __init__(self, server: Any, address: tuple[str, int], app: FastAPI | None = None) -> None:
        """Serve ``app``: the endpoints (default ``build_app(server)``: vllm-serve's; ``mmreason env-serve`` gives its
        own), served behind the same guard and connection bounds."""
        self.server = server
        family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(address)
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        limits = server.limits
        protocol = type(
            "DeadlineH11",
            (_DeadlineH11,),
            {
                "header_timeout": limits.header_timeout,
                "max_waiting": limits.max_waiting,
                "max_waiting_per_address": limits.max_waiting_per_address,
            },
        )
        config = uvicorn.Config(
            _Guard(app if app is not None else build_app(server), server),
            http=protocol,
            lifespan="on",
            access_log=False,
            log_level="warning",
            timeout_keep_alive=max(1, int(limits.header_timeout)),
            timeout_graceful_shutdown=5,
        )
        self.uvicorn = uvicorn.Server(config)
        self.serving, self.stopped = threading.Event(), threading.Event()

    def serve(self) -> None:
        try:
            if self.uvicorn.should_exit or self.sock.fileno() < 0:
                return  # stopped (and its socket closed) before the thread got here
            self.serving.set()
            self.uvicorn.run(sockets=[self.sock])
        finally:
            self.stopped.set()

    def stop(self) -> None:
        self.uvicorn.should_exit = True
        self.stopped.wait(30)

    def close(self) -> None:
        if self.serving.is_set():  # the socket is uvicorn's until it has shut down
            self.stop()
        self.sock.close()


class _DeadlineH11(H11Protocol):
    """uvicorn's h11 protocol with the server's connection bounds. A connection is *waiting* from when it
    opens, or its last answer went out, until a request's line and headers have arrived: it holds nothing
    but a socket, whoever it is. So waiting connections never count against the calls' slots; they have
    ``header_timeout`` seconds to send their headers, and at most ``max_waiting_per_address`` of one address
    (``max_waiting`` in all) wait at once: one more closes the one of that address that has waited longest
    (in all: of the address with the most waiting). A client that sends its request at once is never the
    longest waiting, so slow or idle connections re-opened as fast as they are dropped cannot keep it out."""

    header_timeout = 10.0
    max_waiting = 256
    max_waiting_per_address = 32
    _mm_timer: asyncio.TimerHandle | None = None
    _mm_since = 0.0  # when it began waiting

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._mm_host = self.client[0] if self.client else ""
        self._mm_wait()
        self._mm_make_room()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # the next request on a kept-alive connection has its own deadline
        self._mm_wait()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._mm_timer is not None:
            self._mm_timer.cancel()
        super().connection_lost(exc)

    def _mm_waiting(self) -> bool:
        return (self.cycle is None or self.cycle.response_complete) and not self.transport.is_closing()

    def _mm_wait(self) -> None:
        if self._mm_timer is not None:
            self._mm_timer.cancel()
        self._mm_since = self.loop.time()
        self._mm_timer = self.loop.call_later(self.header_timeout, self._mm_expire)

    def _mm_expire(self) -> None:
        """Drop the connection when no request has begun since the deadline was armed (idle, or its line / headers still
        arriving). A request already in the app bounds its own body."""
        if self._mm_waiting():
            self.transport.close()

    def _mm_make_room(self) -> None:
        """Close the longest-waiting connection of this address when it has too many waiting, else of the address with
        the most waiting when too many wait in all."""
        waiting = [c for c in self.connections if isinstance(c, _DeadlineH11) and c._mm_waiting()]
        mine = [c for c in waiting if c._mm_host == self._mm_host]
        if len(mine) > self.max_waiting_per_address:
            victims = mine
        elif len(waiting) > self.max_waiting:
            counts = Counter(c._mm_host for c in waiting)
            host = max(counts, key=counts.__getitem__)
            victims = [c for c in waiting if c._mm_host == host]
        else:
            return
        min(victims, key=lambda c: c._mm_since).transport.close()


class _Guard:
    """ASGI middleware: the key, the body's declared size and the proof header, before the app reads a byte."""

    def __init__(self, app: ASGIApp, server: Any) -> None:
        self.app, self.server = app, server
        # authorized calls in progress (their slots: --max_connections)
        self.calls = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        challenge = headers.get(auth.CHALLENGE.lower(), "")[:256]
        status = {"code": 0}

        async def send_proved(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
                if challenge and scope["path"] != "/health":
                    proof = auth.proof(self.server.api_key, challenge)
                    message = {
                        **message,
                        "headers": [*message.get("headers", []), (b"x-mmreason-proof", proof.encode())],
                    }
            await send(message)

        counted = False
        try:
            refusal = self._refusal(scope, headers)
            if refusal is None and scope["path"] != "/health":
                if self.calls >= self.server.limits.max_connections:
                    refusal = 503, f"{self.calls} calls in progress (--max_connections); try again"
                else:
                    self.calls, counted = self.calls + 1, True
            if refusal is None:
                await self.app(scope, receive, send_proved)
            else:
                code, text = refusal
                await JSONResponse({"error": text}, status_code=code, headers={"Connection": "close"})(
                    scope, receive, send_proved
                )
        finally:
            if counted:
                self.calls -= 1
            client = scope.get("client") or ("-", 0)
            # control characters as \xNN: a path cannot write to the terminal
            line = printable(f"{client[0]} {scope['method']} {scope['path']} {status['code']}", keep="")
            print(f"{getattr(self.server, 'log_name', 'vllm-serve')}: {line}", file=sys.stderr, flush=True)

    def _refusal(self, scope: Scope, headers: dict) -> tuple[int, str] | None:
        path = scope["path"]
        if path == "/health":
            return None
        if not auth.authorized(self.server.api_key, headers.get("authorization")):
            return 401, "missing or wrong key (send Authorization: Bearer KEY)"
        if scope["method"] != "POST":
            return None  # 404 / 405 from the app
        if headers.get("transfer-encoding"):
            return 411, "send the body with a Content-Length"
        declared = headers.get("content-length", "").strip()
        if not declared.isdigit():
            return 411, f"Content-Length {declared[:40]!r} is not a byte count"
        length, most = int(declared), self.server.limits.max_body
        if not 0 < length <= most:
            return (
                413,
                f"request body of {length} bytes (1 to {most}: --max_body_mb {self.server.limits.max_body_mb:g})",
            )
        return None


def add_health(app: FastAPI, server: Any) -> None:
    """Add ``GET /health`` to ``app``: ``server.info()``, with the proof of ``server.api_key`` when the client sent a
    challenge (so a client knows the server holds the key before it sends anything)."""

    @app.get("/health")
    async def health(request: Request) -> JSONResponse:
        info = server.info()
        challenge = request.headers.get(auth.CHALLENGE)
        if challenge:
            info["proof"] = auth.proof(server.api_key, challenge[:256])
        return JSONResponse(info)


def build_app(server: Any) -> FastAPI:
    """Build the endpoints (``vllm_server``'s module docstring); errors are JSON ``{"error": ...}``."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await server.pool.start()
        yield
        await server.pool.stop()

    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)
    add_health(app, server)

    async def answer(request: Request, route: Route) -> JSONResponse:
        try:
            raw = await _body(request, server.limits.read_timeout)
            return JSONResponse(await route(raw))
        except Refused as exc:
            return JSONResponse({"error": str(exc)}, status_code=exc.code, headers=_close(exc.code))
        except WireError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        except EngineDied as exc:
            server.dead = server.dead or str(exc)
            return JSONResponse({"error": str(exc), "dead": True}, status_code=503)
        except ClientDisconnect:
            return JSONResponse({"error": "client went away"}, status_code=400, headers=_close(400))
        # answered, so the trainer sees it instead of a dropped line
        except Exception as exc:  # noqa: BLE001
            return JSONResponse({"error": f"{type(exc).__name__}: {exc}"}, status_code=500)

    for path, route in (
        ("/generate", server.generate),
        ("/reload_weights", server.reload_weights),
        ("/init_communicator", server.init_communicator),
        ("/update_weights", server.update_weights),
        ("/close_communicator", server.close_communicator),
    ):
        app.add_api_route(path, _endpoint(answer, route), methods=["POST"])
    return app


def _endpoint(
    answer: Callable[[Request, Route], Awaitable[JSONResponse]], route: Route
) -> Callable[[Request], Awaitable[JSONResponse]]:
    async def endpoint(request: Request) -> JSONResponse:
        return await answer(request, route)

    return endpoint


def _close(code: int) -> dict:
    return {"Connection": "close"} if code in (400, 408, 411, 413) else {}


async def _body(request: Request, read_timeout: float) -> bytes:
    """Read the whole body within ``read_timeout`` seconds of the headers (408 otherwise), exactly its declared length
    (400 when cut)."""
    declared = int(request.headers.get("content-length", "0"))
    try:
        raw = await asyncio.wait_for(request.body(), timeout=read_timeout)
    except asyncio.TimeoutError:
        raise Refused(408, f"request body not received within {read_timeout:g} s") from None
    if len(raw) < declared:
        raise Refused(400, f"request body cut at {len(raw)} of {declared} bytes")
    return raw
