"""A training run's side of server mode (``rollout.vllm_mode=server``): the rollout backend that samples
through a ``mmreason vllm-serve`` server on this machine (``vllm_server.py``) instead of an engine of its own.

It builds the colocate path's requests (``engine_request``: the prompt builder's ids and decoded media),
sends them as JSON (``vllm_wire``), and checks the expanded prompt ids the server returns against the
trainer's (``checked_rows``), so what the trainer scores is what the server sampled. Weights are pushed by
writing them to a directory the server can read and asking it to reload them; the reply must come within
``weight_sync_timeout`` seconds, and a generate call's within ``generate_timeout`` seconds (the wait for the
answer: the server replies once the whole batch is sampled). A server that stops answering, does not answer
in time, or answers that its engine died, is ``EngineDied`` naming host:port: the trainer saves its last
finished step and stops. Every call carries the server's key (``vllm_auth.client_key``: the config's, the
environment's, or the server's token file) and a fresh challenge whose answer proves the server holds the same
key; replies are read only up to a size the request can produce. The training process needs no vLLM of its
own for the directory push; the collective one (``rollout.vllm_weight_sync=collective``, the default) joins
each server's weights group with vLLM's stateless group helper, and falls back to the directory push where
vLLM is not installed. Several servers (``rollout.vllm_server_hosts``) share each call's prompts and all take
every push. The client is thread-safe (``VLLMClient``).
"""

from __future__ import annotations

import hmac
import http.client
import json
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch

from mmreason.rollout.backends import EngineDied
from mmreason.rollout.backends import vllm_auth as auth
from mmreason.rollout.backends.vllm_engine import (
    RESTART,
    EngineSampler,
    checked_rows,
    engine_request,
    placeholder_ids,
    write_weights,
)
from mmreason.rollout.backends.vllm_wire import encode_request, encode_settings
from mmreason.rollout.backends.weight_group import (
    broadcast_to_all,
    finish_beside,
    gather_along,
    join_group,
)
from mmreason.rollout.generate import GenerationSettings
from mmreason.rollout.prompts import PromptInputs


class ServerUnreachable(ConnectionError):
    """No ``mmreason vllm-serve`` answered at host:port (raised before any step)."""


class ServerMismatch(ValueError):
    """The server's engine cannot serve this run (its context or processor limits differ, or it does not
    hold this run's key)."""


class ServerIdentityError(ServerMismatch):
    """Whoever answered at host:port could not prove it holds the key (``vllm_auth``), or refused ours."""


SMALL_REPLY = 1 << 20  # /health and /reload_weights answers


def run_key(explicit: str | None, host: str, port: int) -> str:
    """Return the key this run sends to the server at host:port (``vllm_auth.client_key``), or a one-line error."""
    try:
        key = auth.client_key(explicit, port)
    except auth.KeyFileError as exc:
        raise ServerIdentityError(str(exc)) from None
    if not key:
        raise ServerIdentityError(
            f"vLLM server at {host}:{port}: no key; set rollout.vllm_server_api_key (eval: --model_args "
            f"vllm_server_api_key=...) or ${auth.ENV} to the server's --api_key, or run where its token file "
            f"{auth.token_file(port)} is"
        )
    return key


def server_info(host: str, port: int, timeout: float, api_key: str | None = None) -> dict:
    """Poll the server's ``/health`` answer until it comes or ``timeout`` seconds pass; then the server must prove it
    holds this run's key (``api_key``, else ``vllm_auth.client_key``)."""
    try:
        key, missing = run_key(api_key, host, port), None
    # said once a server answers: an absent server is the first thing to fix
    except ServerIdentityError as exc:
        key, missing = None, exc
    deadline = time.monotonic() + timeout
    while True:
        try:
            info = _call(host, port, "GET", "/health", None, timeout=min(10.0, max(timeout, 1.0)), key=key)
            break
        except (OSError, http.client.HTTPException) as exc:
            if time.monotonic() >= deadline:
                raise ServerUnreachable(
                    f"rollout.vllm_mode=server: no vLLM server answered at {host}:{port} within {timeout:g} s "
                    f"({exc}); start one with `mmreason vllm-serve MODEL --port {port}`"
                ) from None
        time.sleep(0.5)
    if missing is not None:
        raise missing
    return info


def check_server(
    info: dict,
    host: str,
    port: int,
    need_context: int,
    processor_kwargs: dict | None,
    *,
    what: str = "data.max_prompt_length + rollout.max_completion_length, or the longest episode",
) -> None:
    """Raise before any step on a dead engine, a context shorter than the run needs (``what`` says where
    ``need_context`` comes from), other pixel limits."""
    where = f"vLLM server at {host}:{port}"
    if info.get("dead"):
        raise ServerMismatch(f"{where}: its engine died ({info['dead']}); restart it")
    if int(info.get("max_model_len", 0)) < need_context:
        raise ServerMismatch(
            f"{where}: --max_model_len {info.get('max_model_len')} < the {need_context} tokens this run needs ({what})"
        )
    if (info.get("processor_kwargs") or {}) != (processor_kwargs or {}):
        raise ServerMismatch(
            f"{where}: processor limits {info.get('processor_kwargs') or {}} differ from the "
            f"run's {processor_kwargs or {}} (start it with the run's --min_pixels/--max_pixels)"
        )


def check_calls(
    info: dict, host: str, port: int, *, prompts: int, n: int, max_new_tokens: int, names: tuple[str, str, str]
) -> None:
    """Raise before any step on calls of ``prompts`` prompts x ``n`` rows of up to ``max_new_tokens`` that the server's
    limits (``--max_requests``, ``--max_n``, ``--max_rows``, ``--max_new_tokens``) would refuse; ``names``: the run's
    settings for the three numbers."""
    limits = info.get("limits") or {}
    for flag, value, name in (
        ("max_requests", prompts, names[0]),
        ("max_n", n, names[1]),
        ("max_rows", prompts * n, f"{names[0]} x {names[1]}"),
        ("max_new_tokens", max_new_tokens, names[2]),
    ):
        if isinstance(limits.get(flag), int) and value > limits[flag]:
            raise ServerMismatch(
                f"vLLM server at {host}:{port}: {name} = {value} is over its --{flag} "
                f"{limits[flag]}; restart it with a larger --{flag}"
            )


class VLLMClient(EngineSampler):
    """Samples through one or more ``mmreason vllm-serve`` servers; the same interface as the colocated
    ``VLLMBackend``.

    ``hosts``: more servers (``(host, port)``, or ``(host, port, key)`` for a server with a key of its own) beside
    ``host:port``: each call's prompts are cut into
    contiguous chunks, one per server, sampled at once, and every push reaches every server. ``weight_sync``:
    ``collective`` joins each server's weights group (``/init_communicator``; needs vLLM's stateless group
    helper here, else the push falls back to the directory path with one line saying so) and broadcasts the
    policy in buckets of ``sync_bucket_mb``; ``directory`` writes a safetensors file into each server's
    weights folder and has it reload it.

    Thread-safe: ``sample`` may run from several threads at once (each call is its own connection), and
    ``sync_weights`` / ``close`` are serialised by a lock, so a background generation thread can sample while
    the training thread pushes (the server orders the two).
    """

    def __init__(
        self,
        host: str,
        port: int,
        tokenizer: Any,
        *,
        api_key: str | None = None,
        server_timeout: float = 240.0,
        weight_sync_timeout: float | None = 600.0,
        generate_timeout: float | None = 600.0,
        hosts: Sequence[tuple[str, int]] = (),
        weight_sync: str = "directory",
        sync_bucket_mb: float = 64.0,
    ) -> None:
        self.host, self.port, self.tokenizer = host, int(port), tokenizer
        self.weight_sync_timeout, self.generate_timeout = weight_sync_timeout, generate_timeout
        self.sync_bucket_mb = sync_bucket_mb
        self.servers = [
            _Server(h, p, k if k is not None else api_key, server_timeout)
            for h, p, k in _unique([(host, port), *hosts])
        ]
        self._key = self.servers[0].key
        self.info = self.servers[0].info
        self.model_dir = self.info.get("model")
        # the family's visual placeholders (Qwen pads, InternVL wraps)
        self.placeholders = placeholder_ids(tokenizer)
        self.sync_dir = self.servers[0].sync_dir
        self.sync_seconds = 0.0
        self._lock = threading.Lock()
        # non-None once every server's group is joined (the trainer then skips a gather)
        self.weight_group = None
        if weight_sync == "collective":
            self.weight_group = self._join_groups()
        self.engine_dtype = _engine_dtype([s.info for s in self.servers])  # what a collective push casts to
        # a sharded (FSDP2) policy's other processes: each push only takes part in the main process's gathers
        # (the trainer sets both, train/rollout_backend.py); per_process: every process calls sync_weights
        self.gathers_only = False
        self.per_process = False

    @property
    def streams_weights(self) -> bool:
        """Tell whether a push goes tensor by tensor (the trainer gathers no whole state dict for it)."""
        return self.weight_group is not None or self.gathers_only

    def sample(
        self, prompts: Sequence[PromptInputs], n: int, settings: GenerationSettings, seeds: Sequence[int]
    ) -> list[tuple[list[int], list[float], bool]]:
        """Sample as ``VLLMBackend.sample`` does, through the servers (the prompts cut into one contiguous chunk
        each)."""
        chunks = _chunks(len(prompts), len(self.servers))
        if len(chunks) <= 1:
            return self._sample_on(self.servers[0], prompts, n, settings, seeds)
        with ThreadPoolExecutor(max_workers=len(chunks), thread_name_prefix="mmreason-vllm-client") as pool:
            futures = [
                pool.submit(self._sample_on, server, prompts[a:b], n, settings, seeds[a * n : b * n])
                for server, (a, b) in zip(self.servers, chunks)
            ]
            return [row for f in futures for row in f.result()]

    def _sample_on(
        self,
        server: _Server,
        prompts: Sequence[PromptInputs],
        n: int,
        settings: GenerationSettings,
        seeds: Sequence[int],
    ) -> list:
        body = {
            "requests": [encode_request(engine_request(p, self.placeholders)) for p in prompts],
            "n": int(n),
            "settings": encode_settings(settings),
            "seeds": [int(s) % (2**31) for s in seeds],
        }
        # the most the rows can take as JSON: <= 12 characters a prompt id, <= 48 a sampled id and its log-prob
        most = (1 << 16) + int(n) * sum(12 * p.length + 48 * settings.max_new_tokens + 64 for p in prompts)
        reply = self._post(
            server, "/generate", body, self.generate_timeout, "rollout.vllm_generate_timeout", max_reply=most
        )
        return checked_rows(prompts, n, reply["rows"])

    def sync_weights(self, model: Any, state: dict | None = None) -> float:
        """Push ``model``'s weights (LoRA merged) to every server: through their weights groups in buckets (each
        tensor gathered once, cast to the engines' dtype), or as a safetensors file (``state``: a sharded
        model's gathered whole state dict) each reloads. ``gathers_only``: the gathers of the main process's
        push, nothing sent."""
        with self._lock:
            t = time.perf_counter()
            if self.gathers_only:
                gather_along(model)
            elif self.weight_group is not None:
                self._push_collective(model)
            else:
                for server in self.servers:
                    write_weights(model, server.sync_dir, state)
                    self._post(
                        server,
                        "/reload_weights",
                        {"path": str(server.sync_dir)},
                        self.weight_sync_timeout,
                        "rollout.vllm_weight_sync_timeout",
                        max_reply=SMALL_REPLY,
                    )
            self.sync_seconds = time.perf_counter() - t
            return self.sync_seconds

    def _join_groups(self) -> list[Any] | None:
        """Join every server's weights group; None (and the directory path for all) when this process cannot
        (no vLLM here) or a server cannot (its engines were built without the workers' side)."""
        try:
            from vllm.distributed.utils import stateless_init_torch_distributed_process_group  # noqa: F401
        except ImportError as exc:
            print(
                f"rollout.vllm_weight_sync=collective needs vLLM in the training process ({exc}); "
                "pushing through the servers' weights folders instead",
                file=sys.stderr,
                flush=True,
            )
            return None
        if not all(s.info.get("collective") for s in self.servers):
            print(
                "rollout.vllm_weight_sync=collective: a server's engines cannot join a weights group; pushing "
                "through the servers' weights folders instead",
                file=sys.stderr,
                flush=True,
            )
            return None
        limit = self.weight_sync_timeout or 600.0
        for server in self.servers:
            reply = self._post(
                server,
                "/init_communicator",
                {"host": server.host},
                limit,
                "rollout.vllm_weight_sync_timeout",
                max_reply=SMALL_REPLY,
            )
            server.group_rank = int(reply["rank"])
            try:
                server.group = join_group(
                    server.host,
                    int(reply["port"]),
                    server.group_rank,
                    int(reply["world_size"]),
                    reply["backend"],
                    timeout_s=limit,
                )
            # a group that cannot form: the run cannot push this way
            except Exception as exc:  # noqa: BLE001
                raise EngineDied(
                    f"vLLM server at {server.host}:{server.port}: joining its weights group on port "
                    f"{reply['port']} failed ({exc!r}); the trainer must reach that port, or use "
                    "rollout.vllm_weight_sync=directory"
                ) from None
        return [s.group for s in self.servers]

    def _push_collective(self, model: Any) -> None:
        """Broadcast ``model``'s tensors in buckets to every server's group while its workers receive them (its
        ``/update_weights`` answers once they are loaded); the first server's failure is raised once every
        server's call has ended."""
        limit = self.weight_sync_timeout
        deadline = None if limit is None else time.monotonic() + limit

        def receive(server: _Server) -> Callable[[list], object]:
            return lambda wire: self._post(
                server,
                "/update_weights",
                {"buckets": wire},
                limit,
                "rollout.vllm_weight_sync_timeout",
                max_reply=SMALL_REPLY,
            )

        ends = [(s.group, s.group_rank, receive(s)) for s in self.servers]
        results = broadcast_to_all(model, ends, int(self.sync_bucket_mb * 2**20), self.engine_dtype)
        failed: BaseException | None = None
        for server, (thread, box, error) in zip(self.servers, results):
            try:
                _finish_push(server, thread, box, error, deadline=deadline, limit=limit)
            except EngineDied as exc:
                failed = failed or exc
        if failed is not None:
            raise failed

    def close(self) -> None:
        """Leave the weights groups and drop the weights directories; the servers keep running (they belong
        to whoever started them)."""
        with self._lock:
            for server in self.servers:
                server.close(self)

    def _post(
        self, server: _Server, path: str, body: dict, timeout: float | None, knob: str, *, max_reply: int
    ) -> dict:
        """Post to ``path`` and return its answer; ``knob`` names the setting that bounds it (in the error when it runs
        out)."""
        where = f"vLLM server at {server.host}:{server.port}"
        try:
            return _call(
                server.host, server.port, "POST", path, body, timeout=timeout, key=server.key, max_reply=max_reply
            )
        except ServerIdentityError as exc:
            raise EngineDied(f"{exc} ({RESTART})") from None
        except TimeoutError:
            raise EngineDied(
                f"{where} did not answer {path} within {timeout:g} s ({knob}); taken as dead ({RESTART})"
            ) from None
        except _EngineDeadReply as exc:
            raise EngineDied(f"{where}: vLLM engine died: {exc} ({RESTART})") from None
        except (OSError, http.client.HTTPException) as exc:
            raise EngineDied(f"{where} stopped answering {path}: {exc!r} ({RESTART})") from None


class _Server:
    """One server a client drives: its address, key, ``/health`` answer, push folder and weights group."""

    def __init__(self, host: str, port: int, api_key: str | None, server_timeout: float) -> None:
        self.host, self.port = host, port
        self.key = run_key(api_key, host, port)
        self.info = server_info(host, port, server_timeout, self.key)
        self.sync_dir = _push_dir(self.info, host, port)
        self.group = None
        self.group_rank = -1

    def close(self, client: VLLMClient) -> None:
        if self.group is not None:
            group, self.group = self.group, None
            try:
                client._post(self, "/close_communicator", {}, 30.0, "close", max_reply=SMALL_REPLY)
            except EngineDied:
                pass
            try:
                group.shutdown()
            # a group whose peer is gone; nothing left to release
            except Exception:  # noqa: BLE001
                pass
        shutil.rmtree(self.sync_dir, ignore_errors=True)


def _finish_push(
    server: _Server,
    thread: threading.Thread,
    box: dict,
    error: BaseException | None,
    *,
    deadline: float | None,
    limit: float | None,
) -> None:
    """Finish one server's end of a collective push: return its answer, or ``EngineDied`` naming it."""
    if error is not None and "error" in box:  # the server's answer says more than the broadcast's
        raise box["error"]
    if error is not None:
        raise EngineDied(f"vLLM server at {server.host}:{server.port}: weight broadcast failed: {error!r} ({RESTART})")
    try:
        finish_beside(thread, box, deadline, "the server's reload")
    except TimeoutError:
        raise EngineDied(
            f"vLLM server at {server.host}:{server.port} did not take the weights within {limit:g} s "
            f"(rollout.vllm_weight_sync_timeout); taken as dead ({RESTART})"
        ) from None


def _engine_dtype(infos: list[dict]) -> torch.dtype | None:
    """Return the servers' engine dtype when all announce the same floating dtype (``/health``'s ``dtype``), else None
    (tensors then travel as the trainer holds them)."""
    names = {info.get("dtype") for info in infos}
    name = names.pop() if len(names) == 1 else None
    dtype = getattr(torch, name, None) if isinstance(name, str) else None
    return dtype if isinstance(dtype, torch.dtype) and dtype.is_floating_point else None


def _unique(entries: Sequence[tuple]) -> list[tuple[str, int, str | None]]:
    """Keep each server once among ``(host, port)`` or ``(host, port, key)`` entries (a key of its own, else the
    run's)."""
    out: list[tuple[str, int, str | None]] = []
    for host, port, *key in entries:
        if all((host, int(port)) != (h, p) for h, p, _ in out):
            out.append((host, int(port), key[0] if key else None))
    return out


def _chunks(count: int, parts: int) -> list[tuple[int, int]]:
    """Cut ``count`` items into at most ``parts`` contiguous non-empty ranges of near-equal size."""
    parts = max(1, min(parts, count))
    base, extra = divmod(count, parts)
    out, start = [], 0
    for k in range(parts):
        size = base + (1 if k < extra else 0)
        out.append((start, start + size))
        start += size
    return out


def parse_hosts(spec: str | None) -> list[tuple[str, int]]:
    """Parse ``rollout.vllm_server_hosts``: ``host:port`` entries separated by commas (empty: none)."""
    out = []
    for item in (spec or "").split(","):
        item = item.strip()
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"rollout.vllm_server_hosts: {item!r} is not host:port")
        out.append((host.strip("[]"), int(port)))
    return out


class _EngineDeadReply(RuntimeError):
    pass


def _push_dir(info: dict, host: str, port: int) -> Path:
    """Make a fresh folder for this client's weight pushes inside the server's announced ``weights_dir`` (the only place
    its ``/reload_weights`` reads)."""
    root = info.get("weights_dir")
    if not isinstance(root, str) or not Path(root).is_dir():
        raise ServerMismatch(
            f"vLLM server at {host}:{port} announces weights_dir {root!r}, which is not a folder "
            "here (the trainer and the server must share it: one machine, or --weights_dir on a "
            "shared disk)"
        )
    try:
        return Path(tempfile.mkdtemp(prefix="push-", dir=root))
    except OSError as exc:
        raise ServerMismatch(
            f"vLLM server at {host}:{port}: cannot write into its weights_dir {root} ({exc}); run "
            "the trainer as the server's user or give the server a --weights_dir both can write"
        ) from None


def _call(
    host: str,
    port: int,
    method: str,
    path: str,
    body: dict | None,
    *,
    timeout: float | None,
    key: str | None,
    max_reply: int = SMALL_REPLY,
) -> dict:
    """Send one JSON request on a fresh connection, carrying ``key`` (but to ``/health``) and a challenge the reply must
    answer (``ServerIdentityError`` otherwise; no check only for a keyless ``/health`` probe); a reply over
    ``max_reply`` bytes is refused unread; a 4xx/5xx answer raises with the server's error message."""
    challenge = auth.new_challenge()
    headers = {auth.CHALLENGE: challenge}
    if path != "/health":
        headers["Authorization"] = f"Bearer {key}"
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        data = json.dumps(body).encode() if body is not None else None
        if data:
            headers["Content-Type"] = "application/json"
        conn.request(method, path, body=data, headers=headers)
        resp = conn.getresponse()
        declared = resp.getheader("Content-Length")
        if declared is not None and (not declared.isdigit() or int(declared) > max_reply):
            raise http.client.HTTPException(f"reply of {declared} bytes to {path} (at most {max_reply} expected)")
        raw = resp.read(max_reply + 1)
        if len(raw) > max_reply:
            raise http.client.HTTPException(f"reply to {path} over {max_reply} bytes")
        payload = json.loads(raw or b"{}")
    finally:
        conn.close()
    where = f"vLLM server at {host}:{port}"
    if not isinstance(payload, dict):
        raise http.client.HTTPException(f"{where} answered {path} with JSON that is not an object")
    shown = payload.get("proof") if path == "/health" else resp.getheader(auth.PROOF)
    if resp.status == 401:
        raise ServerIdentityError(
            f"{where} refused this run's key ({payload.get('error')}); set "
            f"rollout.vllm_server_api_key or ${auth.ENV} to the server's key"
        )
    if key is not None and not hmac.compare_digest(str(shown or ""), auth.proof(key, challenge)):
        raise ServerIdentityError(
            f"{where} could not prove it holds this run's key: another process holds the "
            "port, or the server was started with another key"
        )
    if resp.status == 503 and payload.get("dead"):
        raise _EngineDeadReply(payload.get("error", "dead"))
    if resp.status == 400:
        raise ValueError(f"{where} refused {path}: {payload.get('error')}")
    if resp.status != 200:
        raise RuntimeError(f"{where} failed {path} ({resp.status}): {payload.get('error')}")
    return payload
