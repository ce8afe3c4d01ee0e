"""``mmreason vllm-serve MODEL``: one vLLM engine on this machine that training runs with
``rollout.vllm_mode=server`` sample from (docs/vllm.md, "Server mode").

A small HTTP server (the standard library's ``http.server``, JSON bodies, one request at a time: the engine
is not shared between threads) around the colocate path's engine (``VLLMBackend``):

    GET  /health           {"model", "max_model_len", "processor_kwargs", "dead"}
    POST /generate         {"requests": [encoded request], "n", "settings", "seeds": [one per row]}
                           -> {"rows": [[expanded prompt ids, sampled ids, their log-probs, truncated]]}
    POST /reload_weights   {"path": a directory holding model.safetensors} -> {"seconds"}

Requests are decoded by ``vllm_wire`` (JSON, arrays as base64 bytes; nothing is unpickled), so the engine
gets the same prompt ids and media a colocated engine would and samples them with the same
``sampling_params``. Weights arrive through a directory both processes read (the trainer writes it, the
server reloads it). The server binds 127.0.0.1 unless told otherwise: it reads any path a client names and
has no authentication, so it is not for a shared network. An engine that died answers 503 with
``"dead": true`` from then on (the trainer stops cleanly and saves its last finished step).
"""

from __future__ import annotations

import json
import signal
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

from mmreason.rollout.backends import EngineDied
from mmreason.rollout.backends.vllm_wire import WireError, decode_request, decode_settings

MAX_BODY = 1 << 31  # 2 GiB: a long batch of decoded video frames still fits


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
    parser.add_argument("--weight_sync_timeout", type=float, default=600.0,
                        help="seconds a weight reload may take before the engine counts as dead")
    parser.add_argument("--generate_timeout", type=float, default=600.0,
                        help="seconds one generate call may take before the engine counts as dead")


def run(args) -> int:
    from mmreason.models import load_processor
    from mmreason.rollout.backends.vllm_engine import VLLMBackend, VLLMSettings, processor_kwargs

    settings = VLLMSettings(mode="server", gpu_memory_utilization=args.gpu_memory_utilization,
                            max_model_length=args.max_model_len, tensor_parallel_size=args.tensor_parallel_size,
                            kv_cache_gib=args.kv_cache_gib, seed=args.seed,
                            processor_kwargs=processor_kwargs(args.min_pixels, args.max_pixels),
                            weight_sync_timeout=args.weight_sync_timeout,
                            generate_timeout=args.generate_timeout,
                            weight_sync="directory")  # clients push through /reload_weights
    backend = VLLMBackend(args.model, load_processor(args.model).tokenizer, settings)
    server = EngineServer((args.host, args.port), backend)
    signal.signal(signal.SIGTERM, _interrupt)  # a plain kill shuts the engine down too
    print(f"vllm-serve: {args.model} ready at http://{args.host}:{server.server_port}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        backend.close()
    return 0


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


class EngineServer(HTTPServer):
    """The HTTP server that owns the engine (one request at a time)."""

    def __init__(self, address: tuple[str, int], backend):
        super().__init__(address, _Handler)
        self.backend = backend
        self.dead: str | None = None  # the engine's death, once seen

    def info(self) -> dict:
        b = self.backend
        return {"model": b.model_dir, "max_model_len": b.llm.llm_engine.model_config.max_model_len,
                "processor_kwargs": b.settings.processor_kwargs or {}, "dead": self.dead}

    def generate(self, body: dict) -> dict:
        requests = [decode_request(r) for r in _field(body, "requests", list)]
        n, seeds = _field(body, "n", int), _field(body, "seeds", list)
        if n < 1 or len(seeds) != len(requests) * n or not all(isinstance(s, int) for s in seeds):
            raise WireError(f"n={n} and {len(seeds)} seeds do not fit {len(requests)} requests (one seed a row)")
        rows = self.backend.generate_requests(requests, n, decode_settings(_field(body, "settings", dict)), seeds)
        return {"rows": [list(row) for row in rows]}

    def reload_weights(self, body: dict) -> dict:
        import time

        path = Path(_field(body, "path", str))
        if not (path / "model.safetensors").is_file():
            raise WireError(f"reload_weights: {path} holds no model.safetensors")
        t = time.perf_counter()
        self.backend.reload(path)
        return {"seconds": time.perf_counter() - t}


def _field(body: dict, key: str, kind: type):
    value = body.get(key) if isinstance(body, dict) else None
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise WireError(f"request field {key!r} must be a {kind.__name__}")
    return value


class _Handler(BaseHTTPRequestHandler):
    server: EngineServer
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path != "/health":
            return self._reply(404, {"error": f"no such path {self.path}"})
        self._reply(200, self.server.info())

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        routes = {"/generate": self.server.generate, "/reload_weights": self.server.reload_weights}
        if self.path not in routes:
            return self._reply(404, {"error": f"no such path {self.path}"})
        try:
            body = self._body()
            if self.server.dead:
                return self._reply(503, {"error": self.server.dead, "dead": True})
            self._reply(200, routes[self.path](body))
        except (WireError, json.JSONDecodeError) as exc:
            self._reply(400, {"error": str(exc)})
        except EngineDied as exc:
            self.server.dead = str(exc)
            self._reply(503, {"error": str(exc), "dead": True})
        except Exception as exc:  # noqa: BLE001 - answered, so the trainer sees it instead of a dropped line
            self._reply(500, {"error": f"{type(exc).__name__}: {exc}"})

    def _body(self) -> dict:
        length = int(self.headers.get("Content-Length") or 0)
        if not 0 < length <= MAX_BODY:
            raise WireError(f"request body of {length} bytes (1 to {MAX_BODY})")
        return json.loads(self.rfile.read(length))

    def _reply(self, code: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - http.server's signature
        print(f"vllm-serve: {self.address_string()} {format % args}", file=sys.stderr, flush=True)
