"""``mmreason env-serve module:Factory``: an environment in a process of its own, served over HTTP, so a tool
with heavy or unsafe dependencies runs apart from the trainer (docs/extending.md, "Serve an environment over
HTTP"; the client is ``env_client.HttpEnvironment``).

The same protocol as in process (``environment.py``), one session per episode, with the request shapes of
OpenEnv's HTTP API where they fit (``observation`` / ``reward`` / ``done`` answers, ``{"action": ...}`` steps,
an ``episode_id`` naming the session):

    GET  /health  {"status", "environment", "stop_strings", "sessions", "max_sessions", "limits", "proof"}
    POST /reset   {"sample": encoded sample}  -> {"episode_id", "observation": {"text": ""}, "reward": null,
                  "done": false}: a new environment from the factory, reset on the sample
    POST /step    {"episode_id", "action": {"text": the assistant turn}, "timeout_s"?}  -> {"episode_id",
                  "observation": encoded observation, "reward": null, "done"}; a done episode is closed
    POST /close   {"episode_id"} -> {"closed": whether it was open}

The HTTP side is ``mmreason vllm-serve``'s (``vllm_http``: FastAPI on uvicorn, the shared key and the
client's challenge, per-connection header and body deadlines, at most ``--max_connections`` calls at once,
bodies within ``--max_body_mb``). On top: at most ``--max_sessions`` episodes live at once (one more reset is
503), an episode untouched for ``--idle_timeout_s`` seconds is closed, one step at a time per episode (409),
a reset or step past ``--step_timeout_s`` seconds is 504 and ends its episode, and an environment that
raises is 422 naming the sample (the client counts it as the episode's fault). Payloads are ``env_wire``'s
JSON, bounded on receipt. The environment's code runs in worker threads: the event loop, and so ``/health``
and the other episodes, never wait on it.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import secrets
import signal
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

# the server's web stack (the dev and vllm extras): `mmreason env-serve` only
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.requests import ClientDisconnect

from mmreason.rollout.backends import vllm_auth as auth
from mmreason.rollout.backends.vllm_server import Refused, _loopback
from mmreason.rollout.backends.vllm_wire import WireError, _keys, parse_json
from mmreason.rollout.deadline import StepTimeout, call_with_deadline
from mmreason.rollout.env_client import ENV, token_file
from mmreason.rollout.env_wire import MediaBounds, check_containers, decode_sample, encode_observation

if TYPE_CHECKING:
    from mmreason.types import Sample

MAX_STOP_STRINGS, MAX_STOP_CHARS = 16, 64


@dataclass(frozen=True)
class EnvLimits:
    """What one client may take of the server (its flags); the first six are ``vllm_http``'s."""

    # seconds a request has to deliver its body once its headers are in
    read_timeout: float = 30.0
    # seconds a connection has to send a request's line and headers
    header_timeout: float = 10.0
    # calls with the key in progress at once; one more is answered 503
    max_connections: int = 64
    max_waiting: int = 256  # connections waiting for their headers at once
    max_waiting_per_address: int = 64  # the same, of one client address
    max_body_mb: float = 64.0  # request body
    max_sessions: int = 256  # episodes live at once; one more reset is answered 503
    idle_timeout_s: float = 300.0  # an episode untouched this long is closed
    step_timeout_s: float = 60.0  # a reset or step running longer is 504 and ends its episode
    media: MediaBounds = field(default_factory=MediaBounds)

    @property
    def max_body(self) -> int:
        return int(self.max_body_mb * (1 << 20))


@dataclass
class _Session:
    env: Any
    sample_id: str
    last: float
    busy: bool = False
    steps: int = 0


def stop_strings_of(factory: Callable[[], Any]) -> tuple[str, ...]:
    """Return the environment's ``stop_strings`` (the factory's attribute, else one instance's), checked."""
    stops: Any = getattr(factory, "stop_strings", None)
    if stops is None:
        probe = factory()
        stops = getattr(probe, "stop_strings", ())
        _close_env(probe)
    stops = tuple(stops)
    if len(stops) > MAX_STOP_STRINGS or not all(isinstance(s, str) and 0 < len(s) <= MAX_STOP_CHARS for s in stops):
        raise ValueError(f"env-serve: stop_strings must be at most {MAX_STOP_STRINGS} strings of 1-64 characters")
    return stops


def _close_env(env: object) -> None:
    close = getattr(env, "close", None)
    if callable(close):
        try:
            close()
        # a close that fails frees what it can; the server goes on
        except Exception as exc:  # noqa: BLE001
            print(f"env-serve: closing an environment failed: {type(exc).__name__}: {exc}", file=sys.stderr)


class EnvServer:
    """The sessions and endpoints' logic; the HTTP side (bound at construction) is ``vllm_http.HttpServer``.
    ``factory()`` makes one environment per episode."""

    log_name = "env-serve"

    def __init__(
        self,
        address: tuple[str, int],
        factory: Callable[[], Any],
        *,
        api_key: str,
        limits: EnvLimits | None = None,
        token_file: Path | None = None,
        name: str = "environment",
    ) -> None:
        from mmreason.rollout.backends import vllm_http

        self.factory, self.name = factory, name
        self.api_key, self.limits = api_key, limits or EnvLimits()
        self.stop_strings = stop_strings_of(factory)
        self.sessions: dict[str, _Session] = {}
        self.opening = 0  # resets in progress (their slots are taken)
        self.counts = {"opened": 0, "closed": 0, "expired": 0, "env_errors": 0, "timeouts": 0}
        self.token_file = token_file
        if token_file is not None:
            auth.write_token_file(token_file, api_key)
        self.http = vllm_http.HttpServer(self, address, app=build_app(self))

    @property
    def server_port(self) -> int:
        return self.http.port

    def serve_forever(self) -> None:
        self.http.serve()

    def shutdown(self) -> None:
        self.http.stop()

    def server_close(self) -> None:
        self.http.close()
        if self.token_file is not None:
            self.token_file.unlink(missing_ok=True)

    def info(self) -> dict:
        return {
            "status": "healthy",
            "environment": self.name,
            "stop_strings": list(self.stop_strings),
            "sessions": len(self.sessions),
            "max_sessions": self.limits.max_sessions,
            "counts": dict(self.counts),
            "limits": {k: v for k, v in asdict(self.limits).items() if k != "media"} | asdict(self.limits.media),
        }

    # ---- endpoints (on the event loop; environment code in worker threads) ----------------------------

    def _parse(self, raw: bytes, what: str) -> dict:
        try:
            check_containers(raw, self.limits.media, f"{what} body")
        except WireError as exc:
            raise Refused(400, str(exc)) from None
        body = parse_json(raw)
        if not isinstance(body, dict):
            raise WireError(f"{what} takes a JSON object")
        return body

    async def reset(self, raw: bytes) -> dict:
        body = await asyncio.to_thread(self._parse, raw, "reset")
        _keys(body, "reset", {"sample"}, {"sample"})
        self.expire()
        live = len(self.sessions) + self.opening
        if live >= self.limits.max_sessions:
            raise Refused(503, f"{live} episodes live (--max_sessions {self.limits.max_sessions}); try again")
        self.opening += 1
        try:
            sample = await asyncio.to_thread(decode_sample, body["sample"], self.limits.media)
            env = await asyncio.to_thread(self._start, sample)
        finally:
            self.opening -= 1
        sid = secrets.token_urlsafe(18)
        self.sessions[sid] = _Session(env, sample.id, time.monotonic())
        self.counts["opened"] += 1
        return {"episode_id": sid, "observation": {"text": ""}, "reward": None, "done": False}

    def _start(self, sample: Sample) -> Any:
        """Start a new environment reset on ``sample`` (in a worker thread); 504 / 422 when it overruns or raises."""
        try:
            env = self.factory()
            call_with_deadline(env.reset, (sample,), self.limits.step_timeout_s, what="reset")
        except StepTimeout as exc:
            self.counts["timeouts"] += 1
            raise Refused(504, f"sample {sample.id!r}: {exc} (--step_timeout_s)") from None
        except Exception as exc:  # the environment's own error: the client's reset raises it
            self.counts["env_errors"] += 1
            raise Refused(422, f"sample {sample.id!r}: the environment cannot start: {_said(exc)}") from None
        return env

    async def step(self, raw: bytes) -> dict:
        body = await asyncio.to_thread(self._parse, raw, "step")
        _keys(body, "step", {"episode_id", "action", "timeout_s", "request_id"}, {"episode_id", "action"})
        action = _keys(body["action"], "action", {"text"}, {"text"})["text"]
        if not isinstance(action, str) or len(action) > self.limits.media.max_text_chars:
            raise WireError(f"action.text must be a string of at most {self.limits.media.max_text_chars} characters")
        sid, session = self._session(body["episode_id"])
        timeout = self._timeout(body.get("timeout_s"))
        if session.busy:
            raise Refused(409, f"episode {sid}: a step is in progress (one at a time)")
        session.busy = True
        try:
            obs = await asyncio.to_thread(call_with_deadline, session.env.step, (action,), timeout)
            payload = await asyncio.to_thread(encode_observation, obs)
        except StepTimeout as exc:
            self.counts["timeouts"] += 1
            self.drop(sid)
            raise Refused(504, f"sample {session.sample_id!r}: {exc} (--step_timeout_s); episode closed") from None
        # a bug or a hostile action in the environment ends this episode only
        except Exception as exc:
            self.counts["env_errors"] += 1
            self.drop(sid)
            raise Refused(422, f"sample {session.sample_id!r}: the environment's step raised {_said(exc)}") from None
        finally:
            session.busy, session.last = False, time.monotonic()
        session.steps += 1
        if obs.done:
            self.drop(sid)
        return {"episode_id": sid, "observation": payload, "reward": None, "done": bool(obs.done)}

    async def close_episode(self, raw: bytes) -> dict:
        body = await asyncio.to_thread(self._parse, raw, "close")
        sid = _keys(body, "close", {"episode_id"}, {"episode_id"})["episode_id"]
        known = isinstance(sid, str) and sid in self.sessions and not self.sessions[sid].busy
        if known:
            self.drop(sid)
        return {"closed": known}

    def _session(self, sid: Any) -> tuple[str, _Session]:
        if not isinstance(sid, str) or sid not in self.sessions:
            raise Refused(
                404, f"no live episode {str(sid)[:64]!r} (closed, done, idle past --idle_timeout_s, or never opened)"
            )
        return sid, self.sessions[sid]

    def _timeout(self, asked: Any) -> float:
        """Return the step's deadline: the server's, or the client's ``timeout_s`` when shorter (OpenEnv's field)."""
        if asked is None:
            return self.limits.step_timeout_s
        if isinstance(asked, bool) or not isinstance(asked, (int, float)) or not 0 < asked < float("inf"):
            raise WireError("timeout_s must be a positive number of seconds")
        return min(float(asked), self.limits.step_timeout_s)

    def drop(self, sid: str) -> None:
        """Forget episode ``sid`` and close its environment (in a thread: a slow close holds nobody)."""
        session = self.sessions.pop(sid, None)
        if session is not None:
            self.counts["closed"] += 1
            asyncio.get_running_loop().run_in_executor(None, _close_env, session.env)

    def expire(self) -> None:
        """Close the episodes untouched for ``idle_timeout_s`` seconds (not one in a step)."""
        cutoff = time.monotonic() - self.limits.idle_timeout_s
        for sid, s in list(self.sessions.items()):
            if not s.busy and s.last < cutoff:
                self.counts["expired"] += 1
                self.drop(sid)

    async def expire_forever(self) -> None:
        while True:
            await asyncio.sleep(min(5.0, self.limits.idle_timeout_s / 2))
            self.expire()

    def close_all(self) -> None:
        for sid in list(self.sessions):
            self.drop(sid)


def _said(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc)[:500]}"


def build_app(server: EnvServer) -> FastAPI:
    """Build the endpoints (module docstring); errors are JSON ``{"error": ...}``."""
    from mmreason.rollout.backends.vllm_http import _body, _close, add_health

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # the environments' code runs in these threads: one per call that may be in progress (asyncio's default
        # pool has cores + 4, so a machine's worth of slow tools would queue the other episodes' steps)
        workers = server.limits.max_connections + 4
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(workers, thread_name_prefix="env-serve"))
        task = asyncio.create_task(server.expire_forever())
        yield
        task.cancel()
        server.close_all()

    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)
    add_health(app, server)

    def endpoint(
        route: Callable[[bytes], Awaitable[dict[str, Any]]],
    ) -> Callable[[Request], Awaitable[JSONResponse]]:
        async def answer(request: Request) -> JSONResponse:
            try:
                raw = await _body(request, server.limits.read_timeout)
                return JSONResponse(await route(raw))
            except Refused as exc:
                return JSONResponse({"error": str(exc)}, status_code=exc.code, headers=_close(exc.code))
            except WireError as exc:
                return JSONResponse({"error": str(exc)}, status_code=400)
            except ClientDisconnect:
                return JSONResponse({"error": "client went away"}, status_code=400, headers=_close(400))
            # answered, so the client counts it instead of a dropped line
            except Exception as exc:  # noqa: BLE001
                return JSONResponse({"error": _said(exc)}, status_code=500)

        return answer

    for path, route in (("/reset", server.reset), ("/step", server.step), ("/close", server.close_episode)):
        app.add_api_route(path, endpoint(route), methods=["POST"])
    return app


# ---- the command -------------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    d = EnvLimits()
    parser.add_argument("factory", help="the environment: pkg.module:Factory or path/file.py:Factory (one per episode)")
    parser.add_argument("--env_args", default="{}", help="keyword arguments for the factory, a JSON object")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8100)
    parser.add_argument(
        "--api_key",
        default=None,
        help=f"the key clients must send (default ${ENV}; without either one is made and written to "
        "~/.cache/mmreason/env-serve/PORT.token, mode 0600)",
    )
    for name, kind, text in (
        ("max_sessions", int, "episodes live at once"),
        ("idle_timeout_s", float, "seconds an untouched episode lives"),
        ("step_timeout_s", float, "seconds a reset or step may take (504 after; the episode ends)"),
        ("read_timeout", float, "seconds a request has to send its body"),
        ("header_timeout", float, "seconds a connection has to send a request's line and headers"),
        ("max_connections", int, "calls with the key in progress at once"),
        ("max_body_mb", float, "largest request body (MiB)"),
    ):
        parser.add_argument(f"--{name}", type=kind, default=getattr(d, name), help=text)
    m = MediaBounds()
    parser.add_argument("--max_images", type=int, default=m.max_images, help="images per sample")
    parser.add_argument("--max_image_pixels", type=int, default=m.max_image_pixels, help="pixels of one image")


def limits_of(args: Any) -> EnvLimits:
    """Read the flags' limits; a value <= 0 is a one-line error naming the flag."""
    names = ("max_sessions", "idle_timeout_s", "step_timeout_s", "read_timeout", "header_timeout")
    for name in (*names, "max_connections", "max_body_mb", "max_images", "max_image_pixels"):
        if getattr(args, name) <= 0:
            raise SystemExit(f"env-serve: --{name} must be > 0")
    media = MediaBounds(max_images=args.max_images, max_image_pixels=args.max_image_pixels)
    return EnvLimits(
        **{n: getattr(args, n) for n in names},
        max_connections=args.max_connections,
        max_body_mb=args.max_body_mb,
        media=media,
    )


def factory_of(ref: str, env_args: str) -> Callable[..., Any]:
    """Return the factory ``ref`` names, with ``env_args`` (a JSON object) bound as keyword arguments."""
    from mmreason.references import resolve_reference

    try:
        kwargs = json.loads(env_args)
    except ValueError as exc:
        raise SystemExit(f"env-serve: --env_args is not JSON ({exc})") from None
    if not isinstance(kwargs, dict):
        raise SystemExit("env-serve: --env_args must be a JSON object of keyword arguments")
    factory = resolve_reference(ref, "environment")
    return functools.update_wrapper(functools.partial(factory, **kwargs), factory) if kwargs else factory


def run(args: Any) -> int:
    key = args.api_key or os.environ.get(ENV)
    if not key and not _loopback(args.host):
        raise SystemExit(
            f"env-serve: --host {args.host} is reachable from other machines: give it --api_key (or ${ENV}); "
            "the token file is for clients on this machine"
        )
    limits = limits_of(args)
    server = EnvServer(
        (args.host, args.port),
        factory_of(args.factory, args.env_args),
        api_key=key or auth.new_key(),
        limits=limits,
        token_file=None if key else token_file(args.port),
        name=args.factory,
    )
    print(
        f"env-serve: {args.factory} ready at http://{args.host}:{server.server_port} (key: "
        f"{'--api_key / $' + ENV if key else server.token_file}; stop strings {list(server.stop_strings)})",
        flush=True,
    )
    signal.signal(signal.SIGTERM, _exit_on_sigterm)  # uvicorn re-raises SIGTERM: end through `finally`
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return 0


def _exit_on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)
