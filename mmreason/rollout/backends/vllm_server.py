"""``mmreason vllm-serve MODEL``: one vLLM engine on this machine that training runs with
``rollout.vllm_mode=server`` sample from (docs/vllm.md, "Server mode").

A small HTTP server (the standard library's threading ``http.server``, JSON bodies) around the colocate
path's engine (``VLLMBackend``):

    GET  /health           {"model", "max_model_len", "processor_kwargs", "dead", "weights_dir", "limits",
                            "proof"}  (no key needed; "proof" answers the client's challenge, ``vllm_auth``)
    POST /generate         {"requests": [encoded request], "n", "settings", "seeds": [one per row]}
                           -> {"rows": [[expanded prompt ids, sampled ids, their log-probs, truncated]]}
    POST /reload_weights   {"path": a folder inside --weights_dir holding model.safetensors} -> {"seconds"}

Only its clients drive it: every endpoint but ``/health`` wants the shared key (``vllm_auth``: ``--api_key``,
``$MMREASON_VLLM_API_KEY``, or a token file it writes), else 401 before any body is read; a reload reads only
inside ``--weights_dir`` (an absolute path outside it, ``..`` or a link leaving it: 403). No client can freeze
it: each connection has its own thread and ``--read_timeout`` seconds to deliver a whole request (an idle,
trickling or half-sent one is dropped then), at most ``--max_connections`` are held at once, and a body is
bounded in bytes (``--max_body_mb``) and, before it is parsed, in JSON items (``vllm_wire.check_body_shape``).
Requests are decoded by ``vllm_wire`` (JSON, arrays as base64 bytes; nothing is unpickled) within the
limits of ``--max_requests``, ``--max_rows``, ``--max_n`` and ``--max_new_tokens``; anything malformed is 400.
The engine serves one call at a time (a lock); reading and writing bodies happens outside it. An engine
that died (``EngineDied``: decided by the exception's type and the engine's state) answers 503 with
``"dead"`` from then on (the trainer stops cleanly and saves its last finished step).
"""

from __future__ import annotations

import io
import ipaddress
import json
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from mmreason.rollout.backends import EngineDied
from mmreason.rollout.backends import vllm_auth as auth
from mmreason.rollout.backends.vllm_wire import WireError, WireLimits, check_body_shape, decode_generate

# C0 and C1 control characters (and DEL) as \xNN in the request log: a path cannot write to the terminal
_ESCAPE = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0))}


@dataclass(frozen=True)
class ServerLimits:
    """What one client may take of the server (its flags)."""

    read_timeout: float = 30.0  # seconds a connection has to deliver one whole request (line, headers, body)
    max_connections: int = 32  # connections held at once; more are answered 503 and closed
    max_body_mb: float = 256.0  # request body
    wire: WireLimits = WireLimits()

    @property
    def max_body(self) -> int:
        return int(self.max_body_mb * (1 << 20))


class Refused(Exception):
    """A request answered with ``code`` before it reaches the engine."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


def add_arguments(parser) -> None:
    parser.add_argument("model", help="model directory (a checkpoint the trainer starts from)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--gpu_memory_utilization", type=float, default=0.9)
    parser.add_argument("--max_model_len", type=int, default=None, help="the engine's context (default: the model's)")
    parser.add_argument("--tensor_parallel_size", type=int, default=1)
    parser.add_argument("--kv_cache_gib", type=float, default=1.0, help="CPU only: the KV cache")
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
        "--read_timeout", type=float, default=d.read_timeout, help="seconds a connection has to send one whole request"
    )
    parser.add_argument("--max_connections", type=int, default=d.max_connections)
    parser.add_argument("--max_body_mb", type=float, default=d.max_body_mb, help="largest request body (MiB)")
    parser.add_argument("--max_requests", type=int, default=w.max_requests, help="prompts per /generate call")
    parser.add_argument("--max_rows", type=int, default=w.max_rows, help="prompts x n per /generate call")
    parser.add_argument("--max_n", type=int, default=w.max_n, help="rows per prompt")
    parser.add_argument("--max_new_tokens", type=int, default=None, help="per row (default: --max_model_len)")


def limits_of(args, max_model_len: int) -> ServerLimits:
    wire = WireLimits(
        max_requests=args.max_requests,
        max_rows=args.max_rows,
        max_n=args.max_n,
        max_new_tokens=args.max_new_tokens or max_model_len,
        max_prompt_tokens=max_model_len,
    )
    for name in ("read_timeout", "max_connections", "max_body_mb", "max_requests", "max_rows", "max_n"):
        if getattr(args, name) <= 0:
            raise SystemExit(f"vllm-serve: --{name} must be > 0")
    return ServerLimits(
        read_timeout=args.read_timeout, max_connections=args.max_connections, max_body_mb=args.max_body_mb, wire=wire
    )


def run(args) -> int:
    from mmreason.models import load_processor
    from mmreason.rollout.backends.vllm_engine import VLLMBackend, VLLMSettings, processor_kwargs

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
        weight_sync="directory",
    )  # clients push through /reload_weights
    backend = VLLMBackend(args.model, load_processor(args.model).tokenizer, settings)
    max_len = backend.llm.llm_engine.model_config.max_model_len
    server = EngineServer(
        (args.host, args.port),
        backend,
        api_key=key or auth.new_key(),
        weights_dir=args.weights_dir,
        limits=limits_of(args, max_len),
        max_model_len=max_len,
        processor_kwargs=settings.processor_kwargs,
        token_file=token,
    )
    signal.signal(signal.SIGTERM, _interrupt)  # a plain kill shuts the engine down too
    print(
        f"vllm-serve: {args.model} ready at http://{args.host}:{server.server_port} "
        f"(key: {'--api_key / $' + auth.ENV if key else token}; weights from {server.weights_dir})",
        flush=True,
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        backend.close()
    return 0


def _loopback(host: str) -> bool:
    """Whether ``host`` (an address or a name) is this machine's loopback only."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        return ipaddress.ip_address(socket.gethostbyname(host)).is_loopback
    except (OSError, ValueError):
        return False


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


class EngineServer(ThreadingHTTPServer):
    """The HTTP server that owns the engine: a thread per connection, the engine behind a lock.

    ``backend``: ``generate_requests(requests, n, settings, seeds)`` and ``reload(path)`` (``VLLMBackend``, or
    a stand-in in the HTTP tests). ``token_file``: where the key is written for clients (removed at close).
    """

    daemon_threads = True
    request_queue_size = 64

    def __init__(
        self,
        address: tuple[str, int],
        backend,
        *,
        api_key: str,
        max_model_len: int,
        processor_kwargs: dict | None = None,
        weights_dir: str | Path | None = None,
        limits: ServerLimits | None = None,
        token_file: Path | None = None,
    ):
        super().__init__(address, _Handler)
        self.backend, self.api_key, self.limits = backend, api_key, limits or ServerLimits()
        self.max_model_len, self.processor_kwargs = max_model_len, processor_kwargs or {}
        self.own_weights_dir = weights_dir is None
        root = Path(weights_dir) if weights_dir else Path(tempfile.mkdtemp(prefix="mmreason-vllm-serve-"))
        if not root.is_dir():
            raise SystemExit(f"vllm-serve: --weights_dir {root} is not a folder")
        self.weights_dir = root.resolve()
        self.token_file = token_file
        if token_file is not None:
            auth.write_token_file(token_file, api_key)
        self.dead: str | None = None  # the engine's death, once seen
        self.engine_lock = threading.Lock()
        self.slots = threading.BoundedSemaphore(self.limits.max_connections)

    def server_close(self) -> None:
        super().server_close()
        if self.token_file is not None:
            self.token_file.unlink(missing_ok=True)
        if self.own_weights_dir:
            shutil.rmtree(self.weights_dir, ignore_errors=True)

    # ---- connections ----------------------------------------------------------------------------

    def process_request(self, request, client_address) -> None:
        """A thread for the connection while fewer than ``max_connections`` are held; else 503 at once."""
        if not self.slots.acquire(blocking=False):
            try:
                request.settimeout(1.0)
                request.sendall(
                    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                    b"Content-Length: 35\r\nConnection: close\r\n\r\n"
                    b'{"error": "too many connections"}\r\n'
                )
            except OSError:
                pass
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()

    # ---- endpoints ------------------------------------------------------------------------------

    def info(self) -> dict:
        return {
            "model": getattr(self.backend, "model_dir", None),
            "max_model_len": self.max_model_len,
            "processor_kwargs": self.processor_kwargs,
            "dead": self.dead,
            "weights_dir": str(self.weights_dir),
            "limits": {
                "max_body_mb": self.limits.max_body_mb,
                "read_timeout": self.limits.read_timeout,
                **asdict(self.limits.wire),
            },
        }

    def generate(self, body) -> dict:
        requests, n, settings, seeds = decode_generate(body, self.limits.wire)
        with self.engine_lock:
            self._check_alive()
            rows = self.backend.generate_requests(requests, n, settings, seeds)
        return {"rows": [list(row) for row in rows]}

    def reload_weights(self, body) -> dict:
        if not isinstance(body, dict) or set(body) != {"path"}:
            raise WireError('reload_weights takes {"path": a folder inside the server\'s weights_dir}')
        path = self.weights_path(body["path"])
        with self.engine_lock:
            self._check_alive()
            t = time.perf_counter()
            self.backend.reload(path)
        return {"seconds": time.perf_counter() - t}

    def weights_path(self, raw) -> Path:
        """``raw`` (absolute, or relative to ``weights_dir``) as a folder inside ``weights_dir`` holding a
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


class _DeadlineSocket(io.RawIOBase):
    """The connection's reading side, every read bounded by what is left of the request's deadline: a peer
    that sends nothing, or a byte at a time, loses the connection when the deadline passes."""

    def __init__(self, sock: socket.socket):
        self.sock, self.until = sock, time.monotonic()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        left = self.until - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request's read deadline passed")
        self.sock.settimeout(left)
        return self.sock.recv_into(buffer)


class _Handler(BaseHTTPRequestHandler):
    server: EngineServer
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        self.reader = _DeadlineSocket(self.connection)
        self.rfile = io.BufferedReader(self.reader)

    def handle_one_request(self) -> None:
        """One request, which must arrive whole within ``read_timeout`` (a kept-alive idle connection too)."""
        self.reader.until = time.monotonic() + self.server.limits.read_timeout
        super().handle_one_request()

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path != "/health":
            return self._reply(404, {"error": "no such path"})
        info = self.server.info()
        challenge = self.headers.get(auth.CHALLENGE)
        if challenge:
            info["proof"] = auth.proof(self.server.api_key, challenge[:256])
        self._reply(200, info)

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        routes = {"/generate": self.server.generate, "/reload_weights": self.server.reload_weights}
        try:
            if self.path not in routes:
                raise Refused(404, "no such path")
            if not auth.authorized(self.server.api_key, self.headers.get("Authorization")):
                raise Refused(401, "missing or wrong key (send Authorization: Bearer KEY)")
            body = self._body()
        except Refused as exc:
            self.close_connection = True  # the body (if any) was not read
            return self._reply(exc.code, {"error": str(exc)}, proof=True)
        except TimeoutError:
            self.close_connection = True
            return self._reply(
                408, {"error": f"request body not received within {self.server.limits.read_timeout:g} s"}, proof=True
            )
        self._answer(routes[self.path], body)

    def _answer(self, route, body) -> None:
        try:
            self._reply(200, route(body), proof=True)
        except Refused as exc:
            self._reply(exc.code, {"error": str(exc)}, proof=True)
        except WireError as exc:
            self._reply(400, {"error": str(exc)}, proof=True)
        except EngineDied as exc:
            self.server.dead = self.server.dead or str(exc)
            self._reply(503, {"error": str(exc), "dead": True}, proof=True)
        except Exception as exc:  # noqa: BLE001 - answered, so the trainer sees it instead of a dropped line
            self._reply(500, {"error": f"{type(exc).__name__}: {exc}"}, proof=True)

    def _body(self):
        """The parsed JSON body: its length declared and within ``max_body_mb``, its shape within the
        limits before it is parsed (``Refused`` 411 / 413 / 400 otherwise)."""
        if self.headers.get("Transfer-Encoding"):
            raise Refused(411, "send the body with a Content-Length")
        declared = (self.headers.get("Content-Length") or "").strip()
        if not declared.isdigit():
            raise Refused(411, f"Content-Length {declared[:40]!r} is not a byte count")
        length, most = int(declared), self.server.limits.max_body
        if not 0 < length <= most:
            raise Refused(
                413, f"request body of {length} bytes (1 to {most}: --max_body_mb {self.server.limits.max_body_mb:g})"
            )
        raw = bytearray()
        while len(raw) < length:  # in pieces: memory follows what arrives, not what was declared
            piece = self.rfile.read(min(length - len(raw), 1 << 20))
            if not piece:
                break
            raw += piece
        if len(raw) < length:
            raise Refused(400, f"request body cut at {len(raw)} of {length} bytes")
        try:
            check_body_shape(raw, self.server.limits.wire)
            return json.loads(raw)
        except WireError as exc:
            raise Refused(400, str(exc)) from None
        except (ValueError, RecursionError) as exc:  # not JSON, not UTF-8, nested too deep
            raise Refused(400, f"request body is not JSON: {str(exc)[:200]}") from None

    def _reply(self, code: int, payload: dict, proof: bool = False) -> None:
        data = json.dumps(payload).encode()
        self.connection.settimeout(self.server.limits.read_timeout)  # a peer that does not read is dropped too
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        challenge = self.headers.get(auth.CHALLENGE) if proof and self.headers else None
        if challenge:
            self.send_header(auth.PROOF, auth.proof(self.server.api_key, challenge[:256]))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - http.server's signature
        line = f"{self.address_string()} {format % args}".translate(_ESCAPE)
        print(f"vllm-serve: {line}", file=sys.stderr, flush=True)
