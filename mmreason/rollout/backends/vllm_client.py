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
own (standard library, numpy and PIL only).
"""

from __future__ import annotations

import hmac
import http.client
import json
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from mmreason.rollout.backends import EngineDied
from mmreason.rollout.backends import vllm_auth as auth
from mmreason.rollout.backends.vllm_engine import (
    RESTART,
    EngineSampler,
    checked_rows,
    engine_request,
    write_weights,
)
from mmreason.rollout.backends.vllm_wire import encode_request, encode_settings
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
    """The key this run sends to the server at host:port (``vllm_auth.client_key``), or a one-line error."""
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
    """The server's ``/health`` answer, polled until it comes or ``timeout`` seconds pass; then the server
    must prove it holds this run's key (``api_key``, else ``vllm_auth.client_key``)."""
    try:
        key, missing = run_key(api_key, host, port), None
    except ServerIdentityError as exc:  # said once a server answers: an absent server is the first thing to fix
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
    what: str = "data.max_prompt_length + rollout.max_completion_length, or the longest episode",
) -> None:
    """Errors before any step: a dead engine, a context shorter than the run needs (``what`` says where
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
    """Errors before any step: calls of ``prompts`` prompts x ``n`` rows of up to ``max_new_tokens`` that the
    server's limits (``--max_requests``, ``--max_n``, ``--max_rows``, ``--max_new_tokens``) would refuse;
    ``names``: the run's settings for the three numbers."""
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
    """Samples through a ``mmreason vllm-serve`` server; the same interface as the colocated ``VLLMBackend``."""

    def __init__(
        self,
        host: str,
        port: int,
        tokenizer,
        *,
        api_key: str | None = None,
        server_timeout: float = 240.0,
        weight_sync_timeout: float | None = 600.0,
        generate_timeout: float | None = 600.0,
    ):
        self.host, self.port, self.tokenizer = host, int(port), tokenizer
        self.weight_sync_timeout, self.generate_timeout = weight_sync_timeout, generate_timeout
        self._key = run_key(api_key, host, self.port)
        self.info = server_info(host, self.port, server_timeout, self._key)
        self.model_dir = self.info.get("model")
        self.placeholders = {tokenizer.convert_tokens_to_ids(t) for t in ("<|image_pad|>", "<|video_pad|>")}
        self.sync_dir = _push_dir(self.info, host, self.port)
        self.sync_seconds = 0.0

    def sample(
        self, prompts: Sequence[PromptInputs], n: int, settings: GenerationSettings, seeds: Sequence[int]
    ) -> list[tuple[list[int], list[float], bool]]:
        """As ``VLLMBackend.sample``, through the server."""
        body = {
            "requests": [encode_request(engine_request(p, self.placeholders)) for p in prompts],
            "n": int(n),
            "settings": encode_settings(settings),
            "seeds": [int(s) % (2**31) for s in seeds],
        }
        # the most the rows can take as JSON: <= 12 characters a prompt id, <= 48 a sampled id and its log-prob
        most = (1 << 16) + int(n) * sum(12 * p.length + 48 * settings.max_new_tokens + 64 for p in prompts)
        reply = self._post("/generate", body, self.generate_timeout, "rollout.vllm_generate_timeout", most)
        return checked_rows(prompts, n, reply["rows"])

    def sync_weights(self, model, state: dict | None = None) -> float:
        """Write ``model``'s weights (LoRA merged; ``state``: its gathered whole state dict when sharded) where
        the server reads them and have it reload them."""
        t = time.perf_counter()
        write_weights(model, self.sync_dir, state)
        self._post(
            "/reload_weights",
            {"path": str(self.sync_dir)},
            self.weight_sync_timeout,
            "rollout.vllm_weight_sync_timeout",
            SMALL_REPLY,
        )
        self.sync_seconds = time.perf_counter() - t
        return self.sync_seconds

    def close(self) -> None:
        """Drop the weights directory; the server keeps running (it belongs to whoever started it)."""
        shutil.rmtree(self.sync_dir, ignore_errors=True)

    def _post(self, path: str, body: dict, timeout: float | None, knob: str, max_reply: int) -> dict:
        """``path``'s answer; ``knob`` names the setting that bounds it (in the error when it runs out)."""
        where = f"vLLM server at {self.host}:{self.port}"
        try:
            return _call(self.host, self.port, "POST", path, body, timeout, key=self._key, max_reply=max_reply)
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


class _EngineDeadReply(RuntimeError):
    pass


def _push_dir(info: dict, host: str, port: int) -> Path:
    """A fresh folder for this client's weight pushes inside the server's announced ``weights_dir`` (the only
    place its ``/reload_weights`` reads)."""
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
    timeout: float | None,
    *,
    key: str | None,
    max_reply: int = SMALL_REPLY,
) -> dict:
    """One JSON request on a fresh connection, carrying ``key`` (but to ``/health``) and a challenge the reply
    must answer (``ServerIdentityError`` otherwise; no check only for a keyless ``/health`` probe); a reply
    over ``max_reply`` bytes is refused unread; a 4xx/5xx answer raises with the server's error message."""
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
