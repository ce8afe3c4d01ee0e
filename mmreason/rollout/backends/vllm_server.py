"""``mmreason vllm-serve MODEL``: vLLM engines that training runs with ``rollout.vllm_mode=server`` (and
``mmreason eval``) sample from (docs/vllm.md, "Server mode").

FastAPI on uvicorn (``vllm_http.py``), JSON bodies, around ``--data_parallel_size`` K colocate-path engines
(``VLLMBackend``; ``vllm_pool.EnginePool`` spreads each call's prompts over them and batches the calls of
several clients into one engine call):

    GET  /health              {"model", "max_model_len", "processor_kwargs", "dead", "weights_dir", "limits",
                               "engines", "engine_workers", "collective", "dtype", "pushes", "proof"}  (no key needed; "proof"
                               answers the client's challenge, ``vllm_auth``)
    POST /generate            {"requests": [encoded request], "n", "settings", "seeds": [one per row]}
                              -> {"rows": [[expanded prompt ids, sampled ids, their log-probs, truncated]]}
    POST /reload_weights      {"path": a folder inside --weights_dir holding model.safetensors} -> {"seconds"}
    POST /init_communicator   {"host": the client's name for this server} -> {"port", "world_size", "rank",
                              "backend"}: every engine worker joins a new weights group (ranks 0..W-1, worker
                              0 holds its store on "port"); the client joins it as "rank" (W) after this answer
    POST /update_weights      {"buckets": the layout (``weight_group.buckets_to_wire``)} -> {"seconds",
                              "tensors"}: every worker receives the buckets the client broadcasts meanwhile
    POST /close_communicator  {} -> {}: the workers leave the group

Only its clients drive it: every endpoint but ``/health`` wants the shared key (``vllm_auth``: ``--api_key``,
``$MMREASON_VLLM_API_KEY``, or a token file it writes), else 401 before any body is read; a reload reads only
inside ``--weights_dir`` (an absolute path outside it, ``..`` or a link leaving it: 403). No client can freeze
it: requests are served on one event loop, the engines in threads of their own; each connection has
``--header_timeout`` seconds to send a request's headers and ``--read_timeout`` more for its body (an idle,
trickling or half-sent one is dropped then); connections waiting for their headers take no slot and are
capped per address (the longest waiting is closed), at most ``--max_connections`` calls with the key are in
progress at once, and a body is bounded in bytes (``--max_body_mb``) and, before
it is parsed, in JSON items (``vllm_wire.check_body_shape``). Requests are decoded by ``vllm_wire`` (JSON,
arrays as base64 bytes; nothing is unpickled) within ``--max_requests``, ``--max_rows``, ``--max_n`` and
``--max_new_tokens``; anything malformed is 400. An engine that died (``EngineDied``: decided by the
exception's type and the engine's state) makes the server answer 503 with ``"dead"`` from then on (the
trainer stops cleanly and saves its last finished step).
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from mmreason.rollout.backends import EngineDied
from mmreason.rollout.backends import vllm_auth as auth
from mmreason.rollout.backends.vllm_inprocess import launcher_env
from mmreason.rollout.backends.vllm_pool import EnginePool, bounded, engine_env
from mmreason.rollout.backends.vllm_wire import (
    Refused,
    WireError,
    WireLimits,
    check_body_shape,
    check_safetensors,
    decode_generate,
    parse_json,
    safetensors_shapes,
)

if TYPE_CHECKING:
    from mmreason.rollout.backends.vllm_engine import VLLMSettings

# tensors in one /update_weights layout (a 70B checkpoint has ~1,000)
MAX_LAYOUT_TENSORS = 100_000


@dataclass(frozen=True)
class ServerLimits:
    """What one client may take of the server (its flags)."""

    # seconds a request has to deliver its body once its headers are in
    read_timeout: float = 30.0
    # seconds a connection has to send a request's line and headers
    header_timeout: float = 10.0
    # calls with the key in progress at once; one more is answered 503
    max_connections: int = 32
    # connections waiting for their headers at once; one more closes the longest waiting
    max_waiting: int = 256
    max_waiting_per_address: int = 32  # the same, of one client address
    max_body_mb: float = 256.0  # request body
    wire: WireLimits = WireLimits()

    @property
    def max_body(self) -> int:
        return int(self.max_body_mb * (1 << 20))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", help="model directory (a checkpoint the trainer starts from)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--gpu_memory_utilization", type=float, default=0.9)
    parser.add_argument("--max_model_len", type=int, default=None, help="the engine's context (default: the model's)")
    parser.add_argument("--tensor_parallel_size", type=int, default=1)
    parser.add_argument(
        "--data_parallel_size",
        type=int,
        default=1,
        help="engines behind the server (one per tensor_parallel_size GPUs; on CPU one per group of cores)",
    )
    parser.add_argument(
        "--batch_wait_ms",
        type=float,
        default=5.0,
        help="an engine waits this long after a call arrives for other clients' calls to batch with it",
    )
    parser.add_argument("--kv_cache_gib", type=float, default=1.0, help="CPU only: the KV cache of each engine")
    parser.add_argument("--min_pixels", type=int, default=None, help="the trainer's data.min_pixels, when set")
    parser.add_argument("--max_pixels", type=int, default=None, help="the trainer's data.max_pixels, when set")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--dtype",
        default=None,
        help="bfloat16 | float32 (default: fp32 on CPU, the checkpoint's on GPUs); the trainer's model.dtype",
    )
    parser.add_argument(
        "--weight_sync_timeout",
        type=float,
        default=600.0,
        help="seconds a weight reload may take before the engine counts as dead",
    )
    parser.add_argument(
        "--generate_timeout",
        type=float,
        default=600.0,
        help="seconds one generate call may take before the engine counts as dead",
    )
    parser.add_argument(
        "--join_timeout",
        type=float,
        default=120.0,
        help="seconds a client has to join the weights group /init_communicator opens (and a push's buckets "
        "to arrive one after another); the engines wait for nothing else meanwhile",
    )
    parser.add_argument(
        "--api_key",
        default=None,
        help=f"the key clients must send (default ${auth.ENV}; without either one is made and "
        "written to ~/.cache/mmreason/vllm-serve/PORT.token, mode 0600)",
    )
    parser.add_argument(
        "--weights_dir",
        default=None,
        help="the only folder /reload_weights reads from (default: a new private temp folder)",
    )
    d, w = ServerLimits(), WireLimits()
    parser.add_argument(
        "--read_timeout", type=float, default=d.read_timeout, help="seconds a request has to send its body"
    )
    parser.add_argument(
        "--header_timeout",
        type=float,
        default=d.header_timeout,
        help="seconds a connection has to send a request's line and headers",
    )
    parser.add_argument(
        "--max_connections", type=int, default=d.max_connections, help="calls with the key in progress at once"
    )
    parser.add_argument(
        "--max_waiting", type=int, default=d.max_waiting, help="connections waiting for their headers at once"
    )
    parser.add_argument(
        "--max_waiting_per_address",
        type=int,
        default=d.max_waiting_per_address,
        help="connections of one address waiting for their headers at once",
    )
    parser.add_argument("--max_body_mb", type=float, default=d.max_body_mb, help="largest request body (MiB)")
    parser.add_argument("--max_requests", type=int, default=w.max_requests, help="prompts per /generate call")
    parser.add_argument("--max_rows", type=int, default=w.max_rows, help="prompts x n per /generate call")
    parser.add_argument("--max_n", type=int, default=w.max_n, help="rows per prompt")
    parser.add_argument("--max_new_tokens", type=int, default=None, help="per row (default: --max_model_len)")


def limits_of(args: argparse.Namespace, max_model_len: int, **engine: Any) -> ServerLimits:
    """Read the flags' limits; ``engine``: what the loaded engine knows (``vocab_size``, ``image_token``,
    ``video_token``: ``engine_facts``). A prompt is at most ``max_model_len - 1`` ids (one left to sample)."""
    wire = WireLimits(
        max_requests=args.max_requests,
        max_rows=args.max_rows,
        max_n=args.max_n,
        max_new_tokens=args.max_new_tokens or max_model_len,
        max_prompt_tokens=max(1, max_model_len - 1),
        **engine,
    )
    flags = ("read_timeout", "header_timeout", "max_connections", "max_waiting", "max_waiting_per_address")
    for name in (*flags, "max_body_mb", "max_requests", "max_rows", "max_n", "join_timeout"):
        if getattr(args, name) <= 0:
            raise SystemExit(f"vllm-serve: --{name} must be > 0")
    if args.data_parallel_size < 1 or args.batch_wait_ms < 0:
        raise SystemExit("vllm-serve: --data_parallel_size must be >= 1 and --batch_wait_ms >= 0")
    return ServerLimits(**{name: getattr(args, name) for name in flags}, max_body_mb=args.max_body_mb, wire=wire)


def engine_facts(engine: Any) -> dict:
    """Read the engine's vocabulary size and, for Qwen-style pads, the image and video placeholder ids (so a call whose
    media do not match its placeholders is 400 before it reaches the engine)."""
    facts = {"vocab_size": int(engine.llm.llm_engine.model_config.get_vocab_size())}
    vocab = engine.tokenizer.get_vocab()
    for key, token in (("image_token", "<|image_pad|>"), ("video_token", "<|video_pad|>")):
        if token in vocab:
            facts[key] = int(vocab[token])
    return facts


def build_engines(args: argparse.Namespace, settings: VLLMSettings) -> list:
    """Build ``--data_parallel_size`` engines of ``MODEL``, each started in the environment of its core group or devices
    (``vllm_pool.engine_env``), one after the other."""
    import torch

    from mmreason.models import load_processor
    from mmreason.rollout.backends.vllm_engine import VLLMBackend

    tokenizer = load_processor(args.model).tokenizer
    k, engines = args.data_parallel_size, []
    on_cpu, visible = not torch.cuda.is_available(), os.environ.get("CUDA_VISIBLE_DEVICES")
    count = 0 if on_cpu else torch.cuda.device_count()
    # every engine's devices before the first loads: a list too short is one line, at once
    envs = [
        engine_env(
            j, k, on_cpu=on_cpu, tensor_parallel_size=args.tensor_parallel_size, visible=visible, device_count=count
        )
        for j in range(k)
    ]
    for j, env in enumerate(envs):
        # this engine's devices while it is built, the server's own after
        with launcher_env(env):
            engines.append(VLLMBackend(args.model, tokenizer, settings))
        if k > 1:
            print(f"vllm-serve: engine {j + 1}/{k} ready ({env})", flush=True)
    return engines


def run(args: argparse.Namespace) -> int:
    from mmreason.rollout.backends.vllm_engine import VLLMSettings, processor_kwargs

    key = args.api_key or os.environ.get(auth.ENV)
    if not key and not _loopback(args.host):
        raise SystemExit(
            f"vllm-serve: --host {args.host} is reachable from other machines: give it --api_key "
            f"(or ${auth.ENV}); the token file is for clients on this machine"
        )
    token = None if key else auth.token_file(args.port)
    limits_of(args, args.max_model_len or 1)  # the flags' errors before the engine loads
    settings = VLLMSettings(
        mode="server",
        gpu_memory_utilization=args.gpu_memory_utilization,
        max_model_length=args.max_model_len,
        tensor_parallel_size=args.tensor_parallel_size,
        kv_cache_gib=args.kv_cache_gib,
        seed=args.seed,
        processor_kwargs=processor_kwargs(args.min_pixels, args.max_pixels),
        weight_sync_timeout=args.weight_sync_timeout,
        generate_timeout=args.generate_timeout,
        dtype=args.dtype,
        # the workers can join a client's weights group (/init_communicator)
        weight_sync="collective",
    )
    engines = build_engines(args, settings)
    max_len = engines[0].llm.llm_engine.model_config.max_model_len
    server = EngineServer(
        (args.host, args.port),
        engines,
        api_key=key or auth.new_key(),
        weights_dir=args.weights_dir,
        limits=limits_of(args, max_len, **engine_facts(engines[0])),
        join_timeout=args.join_timeout,
        max_model_len=max_len,
        processor_kwargs=settings.processor_kwargs,
        token_file=token,
        batch_wait_s=args.batch_wait_ms / 1000,
        weight_sync_timeout=args.weight_sync_timeout,
    )
    print(
        f"vllm-serve: {args.model} ready at http://{args.host}:{server.server_port} with {len(engines)} "
        f"engine(s) (key: {'--api_key / $' + auth.ENV if key else token}; weights from {server.weights_dir})",
        flush=True,
    )
    # uvicorn stops on SIGINT / SIGTERM, then raises the signal again under the handler it found: SIGTERM's
    # default would kill the process here, before the cleanup below (engine cores left running, the token file
    # and weights folder left behind), so a SIGTERM ends it through the `finally` as SIGINT does
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        server.serve_forever()
    finally:
        # an engine thread still inside a call (a weights group nobody joined, a hung engine) must not keep
        # the process: the cleanup gets CLEANUP_S seconds, then the process ends anyway
        threading.Thread(target=_exit_after, args=(CLEANUP_S,), name="vllm-serve-exit", daemon=True).start()
        server.server_close()
        for engine in engines:
            engine.close()
    return 0


# seconds vllm-serve's shutdown may take before the process exits without it
CLEANUP_S = 30.0


def _exit_on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)


def _exit_after(seconds: float) -> None:
    time.sleep(seconds)
    print(f"vllm-serve: shutdown took over {seconds:g} s; exiting without it", file=sys.stderr, flush=True)
    os._exit(1)


def _loopback(host: str) -> bool:
    """Tell whether ``host`` (an address or a name) is this machine's loopback only."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        return ipaddress.ip_address(socket.gethostbyname(host)).is_loopback
    except (OSError, ValueError):
        return False


class EngineServer:
    """The server: its engines (``EnginePool``), key, weights folder and limits, and the endpoints' logic; the
    HTTP side (FastAPI on uvicorn, bound at construction) is ``vllm_http``.

    ``engines``: one engine or a list (``generate_many`` or ``generate_requests``, and ``reload(path)``:
    ``VLLMBackend``, or a stand-in in the HTTP tests). ``token_file``: where the key is written for clients
    (removed at close).
    """

    def __init__(
        self,
        address: tuple[str, int],
        engines: Sequence[Any],
        *,
        api_key: str,
        max_model_len: int,
        processor_kwargs: dict | None = None,
        weights_dir: str | Path | None = None,
        limits: ServerLimits | None = None,
        token_file: Path | None = None,
        batch_wait_s: float = 0.005,
        weight_sync_timeout: float | None = 600.0,
        join_timeout: float = 120.0,
    ) -> None:
        from mmreason.rollout.backends import vllm_http  # FastAPI and uvicorn: the vllm extra's, imported here

        engines = list(engines) if isinstance(engines, (list, tuple)) else [engines]
        self.pool = EnginePool(engines, batch_wait_s=batch_wait_s)
        self.api_key, self.limits = api_key, limits or ServerLimits()
        self.max_model_len, self.processor_kwargs = max_model_len, processor_kwargs or {}
        self.weight_sync_timeout, self.join_timeout = weight_sync_timeout, join_timeout
        self.bind_host = address[0]
        self.own_weights_dir = weights_dir is None
        root = Path(weights_dir) if weights_dir else Path(tempfile.mkdtemp(prefix="mmreason-vllm-serve-"))
        if not root.is_dir():
            raise SystemExit(f"vllm-serve: --weights_dir {root} is not a folder")
        self.weights_dir = root.resolve()
        self.token_file = token_file
        if token_file is not None:
            auth.write_token_file(token_file, api_key)
        self.dead: str | None = None  # the engine's death, once seen
        self.group: dict | None = None  # the weights group the workers are in (or joining)
        self.joining: float | None = None  # when the workers began joining a group (None: not joining)
        self._join_task: asyncio.Task | None = None
        # why the last push failed (the weights may be half-replaced)
        self.weights_failed: str | None = None
        self.pushes = {"collective": 0, "directory": 0}  # weight pushes taken, by path (in /health)
        self.served_shapes = safetensors_shapes(getattr(self.pool.engines[0], "model_dir", None) or "")
        self.http = vllm_http.HttpServer(self, address)

    # ---- life ------------------------------------------------------------------------------------

    @property
    def server_port(self) -> int:
        return self.http.port

    def serve_forever(self, poll_interval: float | None = None) -> None:
        self.http.serve()

    def shutdown(self) -> None:
        self.http.stop()

    def server_close(self) -> None:
        self.http.close()
        if self.token_file is not None:
            self.token_file.unlink(missing_ok=True)
        if self.own_weights_dir:
            shutil.rmtree(self.weights_dir, ignore_errors=True)

    @property
    def engine_workers(self) -> int:
        """Count the engines' workers in all (a weights group's ranks but the trainer's)."""
        return sum(int(getattr(e, "engine_workers", 1)) for e in self.pool.engines)

    @property
    def collective(self) -> bool:
        """Tell whether the engines' workers can join a weights group (built with ``WeightReceiver``)."""
        return all(
            getattr(getattr(e, "settings", None), "weight_sync", None) == "collective" for e in self.pool.engines
        )

    # ---- endpoints (on the event loop; engine work in the engines' threads) ---------------------------

    def info(self) -> dict:
        return {
            "model": getattr(self.pool.engines[0], "model_dir", None),
            "max_model_len": self.max_model_len,
            "processor_kwargs": self.processor_kwargs,
            "dead": self.dead,
            "weights_dir": str(self.weights_dir),
            "engines": len(self.pool),
            "engine_workers": self.engine_workers,
            "engine_calls": list(self.pool.batches),
            "collective": self.collective,
            "dtype": getattr(self.pool.engines[0], "engine_dtype", None),  # a collective push casts to it
            "pushes": dict(self.pushes),
            "weights": self.weights_state(),
            "limits": {
                "max_body_mb": self.limits.max_body_mb,
                "read_timeout": self.limits.read_timeout,
                "header_timeout": self.limits.header_timeout,
                **asdict(self.limits.wire),
            },
        }

    def weights_state(self) -> str:
        """Report what ``/health`` says of the weights: ``ok``, a group being joined, or the last push's failure."""
        if self.weights_failed:
            return f"a weight push failed ({self.weights_failed}); /generate is refused until one succeeds"
        if self.joining is not None:
            return f"joining a weights group for {time.monotonic() - self.joining:.0f} s (--join_timeout)"
        return "ok"

    async def generate(self, raw: bytes) -> dict:
        body = await asyncio.to_thread(_parse, raw, self.limits.wire)
        requests, n, settings, seeds = decode_generate(body, self.limits.wire)
        self._check_alive()
        # sampling half-replaced weights kills the engine (vLLM 0.32 on CPU) or lies
        if self.weights_failed:
            raise Refused(409, self.weights_state())
        rows = await self.pool.generate(requests, n, settings, seeds)
        return {"rows": [list(row) for row in rows]}

    async def reload_weights(self, raw: bytes) -> dict:
        body = await asyncio.to_thread(_parse, raw, self.limits.wire)
        if not isinstance(body, dict) or set(body) != {"path"}:
            raise WireError('reload_weights takes {"path": a folder inside the server\'s weights_dir}')
        path = self.weights_path(body["path"])
        await asyncio.to_thread(check_safetensors, path / "model.safetensors", self.served_shapes)
        self._check_alive()
        t = time.perf_counter()
        await self._pushing(self.pool.on_all(lambda i, engine: engine.reload(path)))
        self.pushes["directory"] += 1
        return {"seconds": time.perf_counter() - t}

    async def _pushing(self, push: Awaitable[object]) -> None:
        """Await a weight push; a failure (not a death) leaves the weights unknown: ``/generate`` is refused
        and ``/health`` says so until a push succeeds."""
        try:
            await push
        except EngineDied:
            raise
        except Exception as exc:
            self.weights_failed = f"{type(exc).__name__}: {str(exc)[:300]}"
            raise
        self.weights_failed = None

    async def init_communicator(self, raw: bytes) -> dict:
        """Make every engine worker join a new weights group (leaving the last one); answered as soon as the joins have
        started, since they finish only once the client has joined too (within ``weight_sync_timeout``)."""
        from mmreason.rollout.backends.weight_group import free_port, group_backend

        body = await asyncio.to_thread(_parse, raw, self.limits.wire)
        host = body.get("host") if isinstance(body, dict) and set(body) == {"host"} else None
        if not isinstance(host, str) or not 0 < len(host) <= 255 or any(c.isspace() or c == "/" for c in host):
            raise WireError('init_communicator takes {"host": the name or address the client reaches this server by}')
        if not self.collective:
            raise Refused(409, "this server's engines cannot join a weights group; push with /reload_weights")
        self._check_alive()
        # every rank must name the store by the same host (it prefixes the group's keys): the client's name for
        # this machine; worker 0 listens on every interface
        store_host = host
        bind = (
            "127.0.0.1"
            if _loopback(self.bind_host)
            else ("" if self.bind_host in ("0.0.0.0", "::") else self.bind_host)
        )
        port, world, backend = free_port(bind), self.engine_workers + 1, group_backend()
        offsets = [sum(int(e.engine_workers) for e in self.pool.engines[:i]) for i in range(len(self.pool))]
        # the client joins as soon as it has the answer: the engines wait no longer
        limit = self.join_timeout

        def join(i: int, engine: Any) -> None:
            rpc = engine.llm.collective_rpc
            rpc("mm_leave_weight_group")
            bounded(
                lambda: rpc(
                    "mm_join_weight_group",
                    args=(store_host, port, world, backend, limit),
                    kwargs={"rank_offset": offsets[i]},
                ),
                limit + 30,
                "joining the weights group",
                "--join_timeout",
            )

        locked = asyncio.Event()
        self.group, self.joining = None, time.monotonic()
        task = self._join_task = asyncio.create_task(self.pool.on_all(join, locked=locked))
        task.add_done_callback(_log_failure("joining the weights group"))
        task.add_done_callback(self._joined)
        await locked.wait()
        self.group = {"port": port, "world_size": world, "rank": world - 1, "backend": backend}
        return dict(self.group)

    def _joined(self, task: asyncio.Task) -> None:
        """Record the end of the join: the group stands, or (failed, nobody joined in time) there is none."""
        self.joining = None
        if task.cancelled() or task.exception() is not None:
            self.group = None

    async def update_weights(self, raw: bytes) -> dict:
        """Make every worker receive the buckets the client broadcasts meanwhile and reload them in place."""
        from mmreason.rollout.backends.vllm_engine import _engine_dead
        from mmreason.rollout.backends.weight_group import buckets_from_wire

        _check_layout_shape(raw)
        body = await asyncio.to_thread(parse_json, raw)
        if not isinstance(body, dict) or set(body) != {"buckets"} or not isinstance(body["buckets"], list):
            raise WireError('update_weights takes {"buckets": the layout}')
        try:
            buckets = buckets_from_wire(body["buckets"])
        except (ValueError, TypeError) as exc:
            raise WireError(f"update_weights: {str(exc)[:300]}") from None
        if not buckets or not all(buckets):
            raise WireError("update_weights: the layout must hold at least one bucket, none of them empty")
        if self._join_task is not None and not self._join_task.done():  # its client joined: the workers finish
            await asyncio.wait({self._join_task}, timeout=self.join_timeout + 30)
        if self.group is None:
            raise Refused(409, "no weights group: call /init_communicator first")
        self._check_alive()
        wire, limit = body["buckets"], self.weight_sync_timeout

        def receive(i: int, engine: Any) -> None:
            def work() -> None:
                try:
                    engine.llm.collective_rpc("mm_receive_weights", args=(wire,))
                    engine.llm.reset_prefix_cache()
                    engine.llm.llm_engine.reset_encoder_cache()
                except Exception as exc:
                    if _engine_dead(exc, engine.llm):
                        raise EngineDied(f"vLLM engine died during weight sync: {exc}") from exc
                    raise

            bounded(work, limit, "a weight sync", "--weight_sync_timeout")

        t = time.perf_counter()
        await self._pushing(self.pool.on_all(receive))
        self.pushes["collective"] += 1
        return {"seconds": time.perf_counter() - t, "tensors": sum(len(b) for b in buckets)}

    async def close_communicator(self, raw: bytes) -> dict:
        if self.group is not None and self.collective:
            self.group = None
            await self.pool.on_all(lambda i, engine: engine.llm.collective_rpc("mm_leave_weight_group"))
        return {}

    def weights_path(self, raw: Any) -> Path:
        """Resolve ``raw`` (absolute, or relative to ``weights_dir``) as a folder inside ``weights_dir`` holding a
        regular ``model.safetensors`` also inside it; 403 for anything that leads out."""
        if not isinstance(raw, str) or not raw or "\x00" in raw:
            raise WireError("reload_weights: path must be a non-empty string")
        path = Path(raw)
        if ".." in path.parts:
            raise Refused(403, f"reload_weights: {raw!r}: '..' is not allowed")
        path = path if path.is_absolute() else self.weights_dir / path
        folder, file = path.resolve(), (path / "model.safetensors").resolve()
        if not (folder.is_relative_to(self.weights_dir) and file.is_relative_to(self.weights_dir)):
            raise Refused(403, f"reload_weights: {raw!r} is outside the server's weights_dir {self.weights_dir}")
        if not file.is_file():
            raise WireError(f"reload_weights: {raw!r} holds no model.safetensors")
        return folder

    def _check_alive(self) -> None:
        if self.dead:
            raise EngineDied(self.dead)


def _parse(raw: bytes, limits: WireLimits) -> Any:
    """Parse a body's JSON once its shape is within ``limits`` (``Refused`` 400 otherwise)."""
    try:
        check_body_shape(raw, limits)
    except WireError as exc:
        raise Refused(400, str(exc)) from None
    return parse_json(raw)


def _check_layout_shape(raw: bytes) -> None:
    """Refuse an oversized weights layout before parsing: a layout holds about two JSON arrays per tensor, and more
    than ``MAX_LAYOUT_TENSORS`` tensors' worth is refused."""
    most = 3 * MAX_LAYOUT_TENSORS + 16
    if raw.count(b"[") + raw.count(b"{") > most or raw.count(b",") > 8 * MAX_LAYOUT_TENSORS:
        raise Refused(400, f"update_weights: a layout of more than {MAX_LAYOUT_TENSORS} tensors")


def _log_failure(what: str) -> Callable[[asyncio.Task], None]:
    def done(task: asyncio.Task) -> None:
        if not task.cancelled() and task.exception() is not None:
            print(f"vllm-serve: {what} failed: {task.exception()!r}", file=sys.stderr, flush=True)

    return done
