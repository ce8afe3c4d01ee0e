"""The client of ``mmreason env-serve`` (``env_server.py``): an ``Environment`` whose episodes run in the
server's process (docs/extending.md, "Serve an environment over HTTP").

``HttpEnvironment(url, api_key=...)`` is one episode's environment, as a pack's ``make_environment`` makes
one per trajectory: ``reset(sample)`` opens a session on the server (``/reset``), ``step(text)`` plays a turn
(``/step``), ``close()`` ends it (``/close``; the engine calls it when the episode is over, and a done
episode is closed by the server itself). ``http_environment(url, ...)`` is the factory of such environments
(a pack's ``make_environment``, or a run's environment setting with its keyword arguments).

The server is untrusted like model output: every reply must come within ``timeout_s`` seconds in all (a
watchdog shuts the socket: a server trickling bytes is cut too), carry the proof of this call's challenge
(``vllm_auth``: only a holder of the key can answer), stay within ``max_reply_mb`` and decode within the
``MediaBounds`` (``env_wire``), and a step's answer must name this episode. What happens when it does not:

- a dead, slow, refusing (5xx, 404: a lost session) or lying server during ``step``: ``EnvironmentServerError``,
  which the multi-turn engine records as the episode's "environment error" end (the trainer counts it in
  ``count/env_faults``), never a crash of the run;
- the same during ``reset``: held, and raised by the episode's first ``step`` (an episode fault, as above),
  since a server's failure is not the sample's;
- the server's environment raising in ``reset`` (422), or refusing the sample (400, 413): raised by ``reset``,
  as an in-process environment's would be (a broken sample, counted under ``max_bad_samples``);
- a wrong key (401): raised by ``reset`` with what to set, so a misconfigured run stops at once.
"""

from __future__ import annotations

import hmac
import http.client
import json
import os
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mmreason.rollout.backends import vllm_auth as auth
from mmreason.rollout.backends.vllm_wire import WireError
from mmreason.rollout.env_wire import MediaBounds, check_containers, decode_observation, encode_sample
from mmreason.rollout.environment import Observation
from mmreason.types import Sample

ENV = "MMREASON_ENV_API_KEY"
SMALL_REPLY = 1 << 20  # /health, /reset and /close answers


class EnvironmentServerError(RuntimeError):
    """The environment server did not answer a call as the protocol says (dead, slow, refusing or lying)."""


class EnvironmentServerRefused(ValueError):
    """The environment server refused this sample or its environment could not start on it (``reset``)."""


def parse_url(url: str) -> tuple[str, int]:
    """Parse ``http://host:port`` into (host, port); a one-line error otherwise (https is not spoken: use a tunnel)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http" or not parts.hostname or parts.path not in ("", "/"):
        raise ValueError(f"environment url {url!r}: expected http://host:port")
    try:
        port = parts.port or 80
    except ValueError:
        raise ValueError(f"environment url {url!r}: bad port") from None
    return parts.hostname, port


def token_file(port: int) -> Path:
    """Return where ``mmreason env-serve`` on ``port``, given no key, writes the one it made (mode 0600)."""
    return Path.home() / ".cache" / "mmreason" / "env-serve" / f"{int(port)}.token"


def client_key(explicit: str | None, host: str, port: int) -> str | None:
    """Return the key sent: ``explicit``, else ``$MMREASON_ENV_API_KEY``, else the token file of a server on this
    machine (``token_file``)."""
    return explicit or os.environ.get(ENV) or (auth.read_token_file(token_file(port)) if _local(host) else None)


def _local(host: str) -> bool:
    return host in ("localhost", "127.0.0.1", "::1")


class _Reply:
    """One HTTP answer: its status and JSON object."""

    def __init__(self, status: int, payload: dict) -> None:
        self.status, self.payload = status, payload

    @property
    def error(self) -> str:
        return str(self.payload.get("error", ""))[:500]


def call(
    host: str,
    port: int,
    path: str,
    data: bytes | None,
    *,
    key: str | None,
    timeout_s: float,
    max_reply: int,
    bounds: MediaBounds,
) -> _Reply:
    """Send one JSON request on a fresh connection, all of it (connect, send, headers, body) within ``timeout_s``
    seconds; the reply is refused unread past ``max_reply`` bytes, and must prove ``key`` (but a keyless ``/health``
    probe). ``data``: the JSON body (None: a GET). Raises ``EnvironmentServerError`` for anything but a JSON object from
    the server."""
    where = f"environment server {host}:{port}"
    challenge = auth.new_challenge()
    headers = {auth.CHALLENGE: challenge}
    if path != "/health":
        headers["Authorization"] = f"Bearer {key or ''}"
    if data is not None:
        headers["Content-Type"] = "application/json"
    conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
    fired = threading.Event()
    watchdog = threading.Timer(timeout_s, _cut, (conn, fired))
    watchdog.daemon = True
    started = time.monotonic()
    try:
        watchdog.start()
        conn.request("POST" if data is not None else "GET", path, body=data, headers=headers)
        resp = conn.getresponse()
        declared = resp.getheader("Content-Length")
        if declared is not None and (not declared.isdigit() or int(declared) > max_reply):
            raise EnvironmentServerError(f"{where}: a reply of {declared[:20]} bytes to {path} (at most {max_reply})")
        raw = resp.read(max_reply + 1)
        if len(raw) > max_reply:
            raise EnvironmentServerError(f"{where}: the reply to {path} is over {max_reply} bytes")
        if fired.is_set():  # the watchdog shut the socket: what was read is a cut reply
            raise TimeoutError
        if declared is not None and len(raw) < int(declared):
            raise EnvironmentServerError(f"{where}: the reply to {path} was cut at {len(raw)} of {declared} bytes")
    except (OSError, http.client.HTTPException) as exc:
        late = fired.is_set() or time.monotonic() - started >= timeout_s
        said = f"no answer within {timeout_s:g} s" if late else f"{type(exc).__name__}: {str(exc)[:200]}"
        raise EnvironmentServerError(f"{where}: {path}: {said}") from None
    finally:
        watchdog.cancel()
        conn.close()
    shown = resp.getheader(auth.PROOF)
    try:
        check_containers(raw, bounds, f"{where}: the reply to {path}")
        payload = json.loads(raw or b"{}")
    except (WireError, ValueError, RecursionError) as exc:
        raise EnvironmentServerError(f"{where}: {path}: not a JSON reply ({str(exc)[:200]})") from None
    if not isinstance(payload, dict):
        raise EnvironmentServerError(f"{where}: {path}: the reply is not a JSON object")
    if path == "/health":
        shown = payload.get("proof")
    if key is not None and resp.status != 401 and not hmac.compare_digest(str(shown or ""), auth.proof(key, challenge)):
        raise EnvironmentServerError(
            f"{where} could not prove it holds the key: another process holds the port, or the server was "
            "started with another key"
        )
    return _Reply(resp.status, payload)


def _cut(conn: http.client.HTTPConnection, fired: threading.Event) -> None:
    """Shut ``conn``'s socket (the watchdog): a read or write blocked on it returns at once."""
    fired.set()
    sock = conn.sock
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class ServerInfo:
    """A server's ``/health`` answer, asked once (until it comes) and shared by the environments of one
    factory, so each episode does not ask again."""

    def __init__(self) -> None:
        self.answer: dict | None = None
        self.lock = threading.Lock()

    def get(self, env: HttpEnvironment) -> dict | None:
        with self.lock:
            if self.answer is None:
                try:
                    self.answer = env._call("/health", None, SMALL_REPLY).payload
                except EnvironmentServerError:
                    return None
            return self.answer


class HttpEnvironment:
    """One episode's environment, played by the server at ``url`` (module doc). ``stop_strings``: the
    server's (from ``/health``, asked once per factory) unless given. ``timeout_s``: the most one call may
    take (keep it under ``rollout.env_step_timeout_s``, which bounds the whole step)."""

    def __init__(
        self,
        url: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 30.0,
        stop_strings: tuple[str, ...] | list[str] | None = None,
        max_reply_mb: float = 64.0,
        bounds: MediaBounds | None = None,
        server_info: ServerInfo | None = None,
    ) -> None:
        self.url = url
        self.server_info = server_info or ServerInfo()
        self.host, self.port = parse_url(url)
        if not 0 < timeout_s < float("inf") or not 0 < max_reply_mb < float("inf"):
            raise ValueError(f"environment {url}: timeout_s and max_reply_mb must be positive numbers")
        self.api_key, self.timeout_s = api_key, float(timeout_s)
        self.max_reply = int(max_reply_mb * (1 << 20))
        self.bounds = bounds or MediaBounds()
        self._stops = None if stop_strings is None else tuple(stop_strings)
        self.episode_id: str | None = None
        self.fault: EnvironmentServerError | None = None  # a reset's failure, raised by the first step
        self.sample_id = ""

    @property
    def stop_strings(self) -> tuple[str, ...]:
        """Return where an assistant turn ends: as given, else the server's (none when it cannot be reached: the
        episode's reset then fails and counts)."""
        if self._stops is None:
            info = self.health()
            stops = info.get("stop_strings") if info else None
            ok = isinstance(stops, list) and len(stops) <= 16 and all(isinstance(s, str) and s for s in stops)
            self._stops = tuple(stops) if ok and isinstance(stops, list) else ()
        return self._stops

    def health(self) -> dict | None:
        """Ask for the server's ``/health`` answer (asked once per factory), None when it cannot be had."""
        return self.server_info.get(self)

    def _key(self) -> str | None:
        try:
            return client_key(self.api_key, self.host, self.port)
        except auth.KeyFileError as exc:
            raise EnvironmentServerRefused(str(exc)) from None

    def _call(self, path: str, body: dict | bytes | None, max_reply: int) -> _Reply:
        data = json.dumps(body).encode() if isinstance(body, dict) else body
        return call(
            self.host,
            self.port,
            path,
            data,
            key=self._key(),
            timeout_s=self.timeout_s,
            max_reply=max_reply,
            bounds=self.bounds,
        )

    def reset(self, sample: Sample) -> None:
        """Open an episode of ``sample`` on the server (closing this environment's last one)."""
        self.close()
        self.fault, self.sample_id = None, str(sample.id)
        # an unreadable image file raises here, a sample over the server's body limit below: the sample's fault
        body = json.dumps({"sample": encode_sample(sample)}).encode()
        most = _max_body(self.health())
        if most is not None and len(body) > most:
            raise EnvironmentServerRefused(
                f"sample {sample.id!r}: {len(body)} bytes encoded, over the environment server's --max_body_mb "
                f"({most} bytes)"
            )
        try:
            reply = self._call("/reset", body, SMALL_REPLY)
        except EnvironmentServerError as exc:
            self.fault = EnvironmentServerError(f"sample {sample.id!r}: reset: {exc}")
            return
        if reply.status == 401:
            raise EnvironmentServerRefused(
                f"environment server {self.host}:{self.port} refused the key ({reply.error}); give the "
                f"environment's api_key or set ${ENV} to the server's key"
            )
        if reply.status in (400, 413, 422):
            raise EnvironmentServerRefused(f"sample {sample.id!r}: the environment server refused it: {reply.error}")
        episode = reply.payload.get("episode_id")
        if reply.status != 200 or not isinstance(episode, str) or not 0 < len(episode) <= 256:
            said = reply.error or f"no episode_id in {str(reply.payload)[:100]}"
            self.fault = EnvironmentServerError(f"sample {sample.id!r}: reset ({reply.status}): {said}")
            return
        self.episode_id = episode

    def step(self, action_text: str) -> Observation:
        """Send one assistant turn and return the server's answer; ``EnvironmentServerError`` for anything else."""
        if self.fault is not None:
            raise self.fault
        if self.episode_id is None:
            raise EnvironmentServerError(f"sample {self.sample_id!r}: step without an open episode")
        where = f"environment server {self.host}:{self.port}"
        try:
            reply = self._call(
                "/step",
                {"episode_id": self.episode_id, "action": {"text": action_text}, "timeout_s": self.timeout_s},
                self.max_reply,
            )
            if reply.status != 200:
                raise EnvironmentServerError(f"{where}: step ({reply.status}): {reply.error}")
            payload = reply.payload
            if payload.get("episode_id") != self.episode_id:
                raise EnvironmentServerError(
                    f"{where}: step answered for episode {str(payload.get('episode_id'))[:64]!r}, not this one"
                )
            try:
                obs = decode_observation(payload.get("observation"), payload.get("done"), self.bounds)
            except WireError as exc:
                raise EnvironmentServerError(f"{where}: step: {exc}") from None
        except EnvironmentServerError as exc:
            # the server drops a failed episode; a lying one is not asked again
            self.episode_id = None
            raise EnvironmentServerError(f"sample {self.sample_id!r}: {exc}") from None
        if obs.done:
            self.episode_id = None  # the server closed it
        return obs

    def close(self) -> None:
        """End the open episode on the server, if any (best effort: an episode left open expires there)."""
        episode, self.episode_id = self.episode_id, None
        if episode is not None:
            try:
                self._call("/close", {"episode_id": episode}, SMALL_REPLY)
            except (EnvironmentServerError, EnvironmentServerRefused):
                pass


def _max_body(info: dict | None) -> int | None:
    """Return the server's request body limit in bytes, as its ``/health`` says (None: unknown)."""
    mb = ((info or {}).get("limits") or {}).get("max_body_mb")
    return int(mb * (1 << 20)) if isinstance(mb, (int, float)) and not isinstance(mb, bool) and mb > 0 else None


def http_environment(url: str, **options: Any) -> Callable[[], HttpEnvironment]:
    """Build the factory of ``HttpEnvironment(url, **options)``: one new environment (and server session) per call, as a
    pack's ``make_environment``."""
    HttpEnvironment(url, **options)  # the url and options' errors now, not at the first episode
    info = ServerInfo()

    def make() -> HttpEnvironment:
        return HttpEnvironment(url, server_info=info, **options)

    return make
