"""``mmreason vllm-serve`` against local users without the key and against malformed calls from key holders
(the HTTP layer with the stand-in engine of ``test_vllm_server_http``; no vLLM).

What must hold (docs/vllm.md, "Who may drive the server, and its limits"): connection slots are nothing a client
without the key can hold (``/health`` and key holders' calls are answered while slow connections are re-opened
as fast as they are dropped); a weights group nobody joins neither freezes ``/generate`` nor outlives its join
deadline; a failed reload keeps the server serving; malformed bodies are 400, never 500."""

from __future__ import annotations

import socket
import threading
import time

import pytest

pytest.importorskip("fastapi")  # the server's web stack comes with vLLM (the vllm extra)

from test_vllm_server_http import GOOD, KEY, StandIn, call, serve  # noqa: E402, F401 - the fixture too


def _slow(port: int) -> socket.socket | None:
    """A connection that sends half a request line and then nothing (a slowloris peer)."""
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(b"GET /hea")
        return s
    except OSError:
        return None


def test_slow_connections_without_the_key_never_keep_health_or_calls_out(serve):  # noqa: F811
    """50 slow connections, each re-opened as soon as the server drops it, the whole time /health and
    /generate are called: every probe is answered 200 (before: 503 once 32 were held), and no more of them
    stay open than one address may keep waiting."""
    engine = StandIn()
    server, port = serve(engine, header_timeout=2)
    stop, held = threading.Event(), [s for s in (_slow(port) for _ in range(50)) if s is not None]

    def reopen() -> None:  # the attacker: whatever the server closed is opened again at once
        while not stop.is_set():
            for k, s in enumerate(held):
                s.setblocking(False)
                try:
                    gone = s.recv(1) == b""
                except BlockingIOError:
                    gone = False
                except OSError:
                    gone = True
                if gone:
                    s.close()
                    held[k] = _slow(port) or s
            time.sleep(0.02)

    attacker = threading.Thread(target=reopen, daemon=True)
    attacker.start()
    try:
        answers = []
        deadline = time.monotonic() + 5  # past two header deadlines: every slow connection dropped and re-opened
        while time.monotonic() < deadline:
            answers.append(call(port, "GET", "/health", key=None, timeout=10)[0])
            answers.append(call(port, "POST", "/generate", GOOD, timeout=10)[0])
            time.sleep(0.1)
    finally:
        stop.set()
        attacker.join(5)
    open_now = sum(1 for c in list(server.http.uvicorn.server_state.connections) if c._mm_waiting())
    for s in held:
        s.close()
    assert answers and set(answers) == {200}, answers
    assert open_now <= server.limits.max_waiting_per_address + 1
    assert engine.calls == len(answers) // 2


# ---- a weights group nobody joins, a failed push, malformed bodies ------------------------------------------


class Collective(StandIn):
    """A stand-in whose workers can join a weights group: joining waits for the client as a worker's store
    does, and fails after the join's timeout when nobody comes (no client joins in these tests)."""

    engine_workers = 1

    class settings:  # noqa: N801 - the engine's attribute
        weight_sync = "collective"

    def __init__(self):
        super().__init__()
        self.llm, self.fail_reload = self, None

    def collective_rpc(self, method, args=(), kwargs=None):
        if method == "mm_join_weight_group":
            time.sleep(args[4])  # the join's timeout_s: nobody joined
            raise TimeoutError("the weights group's store timed out waiting for its clients")

    def reload(self, path):
        super().reload(path)
        if self.fail_reload is not None:
            raise self.fail_reload


@pytest.fixture
def start(tmp_path):
    """``start(engine, *flags)`` -> (server, port): an ``EngineServer`` whose limits come from
    ``vllm-serve``'s own flags (``limits_of``), as ``run`` builds them, with a 512-id context."""
    import argparse

    from mmreason.rollout.backends import vllm_server

    servers = []

    def go(engine, *flags, facts=None):
        parser = argparse.ArgumentParser()
        vllm_server.add_arguments(parser)
        args = parser.parse_args(["model", *flags])
        folder = tmp_path / f"weights{len(servers)}"
        folder.mkdir()
        server = vllm_server.EngineServer(
            ("127.0.0.1", 0),
            engine,
            api_key=KEY,
            max_model_len=512,
            weights_dir=folder,
            limits=vllm_server.limits_of(args, 512, **(facts or {})),
            join_timeout=args.join_timeout,
        )
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        for _ in range(200):
            try:
                if call(server.server_port, "GET", "/health", key=None, timeout=5)[0] == 200:
                    break
            except OSError:
                time.sleep(0.05)
        return server, server.server_port

    yield go
    for server in servers:
        server.shutdown()
        server.server_close()


def test_a_weights_group_nobody_joins_holds_generate_only_until_its_join_deadline(start):
    """Before: the engines waited --weight_sync_timeout (600 s) + 30 for a client that never came, every
    /generate with them, while /health said all was well."""
    engine = Collective()
    _, port = start(engine, "--join_timeout", "1")
    assert call(port, "POST", "/init_communicator", {"host": "127.0.0.1"})[0] == 200
    assert call(port, "GET", "/health", key=None)[1]["weights"].startswith("joining a weights group")
    status, reply, _ = call(port, "POST", "/generate", GOOD, timeout=20)  # waits out the 1 s join, then served
    assert status == 200 and len(reply["rows"]) == 2
    assert call(port, "GET", "/health", key=None)[1]["weights"] == "ok"
    status, reply, _ = call(port, "POST", "/update_weights", {"buckets": [[["w", "float32", [1], 0]]]})
    assert status == 409 and "no weights group" in reply["error"]


def _safetensors(folder, size=2):
    from safetensors.numpy import save_file

    folder.mkdir()
    save_file({"w": __import__("numpy").zeros(size, dtype="float32")}, str(folder / "model.safetensors"))


def test_a_failed_reload_refuses_generate_until_a_push_succeeds(start, tmp_path):
    """Before: the failed reload answered 500 with /health "ok", and the next /generate sampled the
    half-replaced weights (vLLM's engine died of it). A file that is no safetensors, or gives a tensor of the
    served checkpoint another shape (which left vLLM's engine unable to take any weights again), is 400
    before any engine reads it."""
    engine = Collective()
    _safetensors(tmp_path / "served")
    engine.model_dir = str(tmp_path / "served")
    server, port = start(engine)
    _safetensors(server.weights_dir / "push")
    _safetensors(server.weights_dir / "reshaped", size=3)
    status, reply, _ = call(port, "POST", "/reload_weights", {"path": "reshaped"})
    assert status == 400 and "w [3] (served: [2])" in reply["error"] and engine.reloads == []
    (server.weights_dir / "junk").mkdir()
    (server.weights_dir / "junk" / "model.safetensors").write_bytes(b"\xff" * 64)
    status, reply, _ = call(port, "POST", "/reload_weights", {"path": "junk"})
    assert status == 400 and "not a safetensors file" in reply["error"] and engine.reloads == []
    engine.fail_reload = RuntimeError("size mismatch for w")
    assert call(port, "POST", "/reload_weights", {"path": "push"})[0] == 500
    health = call(port, "GET", "/health", key=None)[1]
    assert "size mismatch for w" in health["weights"] and not health["dead"]
    calls = engine.calls
    status, reply, _ = call(port, "POST", "/generate", GOOD)
    assert status == 409 and "weight push failed" in reply["error"] and engine.calls == calls
    engine.fail_reload = None
    assert call(port, "POST", "/reload_weights", {"path": "push"})[0] == 200
    assert call(port, "POST", "/generate", GOOD)[0] == 200 and call(port, "GET", "/health")[1]["weights"] == "ok"


def _image(n: int) -> dict:
    import base64

    return {"mode": "RGB", "size": [1, 1], "data": base64.b64encode(bytes(3 * n)).decode()}


def _frames(values) -> dict:
    import base64

    import numpy as np

    data = np.array(values, dtype="float32")
    return {"dtype": "float32", "shape": list(data.shape), "data": base64.b64encode(data.tobytes()).decode()}


def test_malformed_bodies_the_engine_would_choke_on_are_400(start):
    """Each of these answered 500 (the engine's error) or reached the engine: now 400 naming the field."""
    engine = Collective()
    image_pad, video_pad, vocab = 90, 91, 100
    _, port = start(engine, facts={"vocab_size": vocab, "image_token": image_pad, "video_token": video_pad})

    def gen(**request):
        return {**GOOD, "requests": [request]}

    for body, why in [
        (gen(prompt_token_ids=[1, image_pad, 2], images=[_image(1), _image(1)]), "2 image(s) for 1 image placeholder"),
        (gen(prompt_token_ids=[1, image_pad, 2, image_pad]), "0 image(s) for 2 image placeholder"),
        (
            gen(prompt_token_ids=[1, video_pad], videos=[{"frames": _frames([[1.0, float("nan")]])}]),
            "NaN or infinite",
        ),
        (gen(prompt_token_ids=[1, video_pad], videos=[{"frames": _frames([float("inf")])}]), "NaN or infinite"),
        (gen(prompt_token_ids=[1, 5000]), "outside the vocabulary of 100"),
        (gen(prompt_token_ids=[1] * 512), "at most 511 items"),  # the whole context: nothing left to sample
    ]:
        status, reply, _ = call(port, "POST", "/generate", body)
        assert status == 400 and why in reply["error"], (why, status, reply)
    assert engine.calls == 0
    assert call(port, "POST", "/generate", gen(prompt_token_ids=[1, image_pad], images=[_image(1)]))[0] == 200
    for body in (b"[" * 5000 + b"]" * 5000, b'{"buckets": "\xff\xfe"}', {"buckets": []}, {"buckets": [[]]}):
        status, reply, _ = call(port, "POST", "/update_weights", body)
        assert status == 400, (body if isinstance(body, dict) else body[:20], status, reply)
