"""The ``mmreason vllm-serve`` HTTP layer without vLLM: the real ``EngineServer`` in a thread with a stand-in
engine (``StandIn``: rows made from the request) behind it, driven by raw sockets and the real client.

What must hold (docs/vllm.md, "Server mode"): no client freezes or exhausts it (stalled connections neither
delay another client nor outlive ``read_timeout``; bodies, calls and their JSON shape are bounded before
parsing); only key holders drive it (401, the token file, the client's check of the server's proof, reloads
confined to ``weights_dir``); malformed payloads are 400, never 500; engine death is decided by type and
state; the request log escapes control characters and never shows the key."""

from __future__ import annotations

import http.client
import json
import os
import socket
import threading
import time
import tracemalloc

import numpy as np
import pytest

pytest.importorskip("fastapi")  # the server's web stack comes with vLLM (the vllm extra)

from mmreason.rollout.backends import EngineDied  # noqa: E402
from mmreason.rollout.backends import vllm_auth as auth  # noqa: E402
from mmreason.rollout.backends.vllm_server import EngineServer, ServerLimits  # noqa: E402
from mmreason.rollout.backends.vllm_wire import WireLimits  # noqa: E402

KEY = "test-key-0123456789"
GOOD = {"requests": [{"prompt_token_ids": [5, 6, 7]}], "n": 2, "settings": {"max_new_tokens": 3}, "seeds": [11, 12]}


class StandIn:
    """What the server needs of an engine: each row is the prompt ids, 3 ids made from the seed, their
    log-probs; ``fail`` is raised instead when set."""

    model_dir = "stand-in"

    def __init__(self):
        self.calls, self.reloads, self.fail = 0, [], None

    def generate_requests(self, requests, n, settings, seeds):
        self.calls += 1
        if self.fail is not None:
            raise self.fail
        return [
            (
                r["prompt_token_ids"],
                [seeds[i * n + k] % 97] * settings.max_new_tokens,
                [-0.5] * settings.max_new_tokens,
                False,
            )
            for i, r in enumerate(requests)
            for k in range(n)
        ]

    def reload(self, path):
        self.reloads.append(path)


@pytest.fixture
def serve(tmp_path):
    """``serve(**limits)`` -> (server, port): an ``EngineServer`` on a free port, shut down after the test."""
    servers = []

    def start(engine=None, key=KEY, token_file=None, **limits):
        wire = WireLimits(
            **{
                "max_prompt_tokens": 512,  # the context, as vllm-serve sets it
                **{k: limits.pop(k) for k in list(limits) if k in WireLimits.__dataclass_fields__},
            }
        )
        folder = tmp_path / f"weights{len(servers)}"
        folder.mkdir()
        server = EngineServer(
            ("127.0.0.1", 0),
            engine or StandIn(),
            api_key=key,
            max_model_len=512,
            weights_dir=folder,
            limits=ServerLimits(wire=wire, **limits),
            token_file=token_file,
        )
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        wait_up(server.server_port)
        return server, server.server_port

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def wait_up(port):
    for _ in range(200):
        try:
            if call(port, "GET", "/health", key=None, timeout=5)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.05)
    pytest.fail("the server did not come up")


def call(port, method, path, body=None, *, key=KEY, headers=None, timeout=30):
    """(status, parsed reply, reply headers) of one request on a fresh connection."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    hdrs = {"Authorization": f"Bearer {key}"} if key else {}
    conn.request(method, path, body=data, headers={**hdrs, **(headers or {})})
    resp = conn.getresponse()
    raw = resp.read()
    try:
        payload = json.loads(raw or b"{}")
    except ValueError:  # uvicorn's own refusals of what is not HTTP are plain text
        payload = {"error": raw.decode(errors="replace")}
    conn.close()
    return resp.status, payload, resp


def raw_socket(port, data=b""):
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    if data:
        s.sendall(data)
    return s


def read_reply(s) -> bytes:
    """One whole HTTP reply from ``s`` (headers, then Content-Length bytes of body)."""
    got = b""
    while b"\r\n\r\n" not in got:
        got += s.recv(65536)
    head, body = got.split(b"\r\n\r\n", 1)
    length = int(
        next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
    )
    while len(body) < length:
        body += s.recv(65536)
    return head + b"\r\n\r\n" + body


def still_open(s) -> bool:
    """The server has neither closed the connection nor answered on it."""
    s.setblocking(False)
    try:
        return s.recv(1) is None
    except BlockingIOError:
        return True
    finally:
        s.setblocking(True)


def closed_within(s, seconds) -> bytes:
    """What the server sent before closing ``s`` (fails if it does not close it within ``seconds``)."""
    s.settimeout(seconds)
    got = b""
    while True:
        piece = s.recv(4096)
        if not piece:
            return got
        got += piece


# ---- no client freezes or exhausts it ---------------------------------------------------------------


def test_stalled_connections_do_not_delay_another_clients_request(serve):
    """An idle connection, a cut request line, headers that never end, a body cut short and a finished
    kept-alive request are all held open (read_timeout 60 s) while another client's /generate is answered."""
    _, port = serve(read_timeout=60)
    kept = raw_socket(port, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    read_reply(kept)  # its answer; the connection stays open (HTTP/1.1 keep-alive)
    stalled = [
        raw_socket(port),
        raw_socket(port, b"POST /gener"),
        raw_socket(port, b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Le"),
        raw_socket(
            port,
            b"POST /generate HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
            + KEY.encode()
            + b'\r\nContent-Length: 1000\r\n\r\n{"requests"',
        ),
        kept,
    ]
    status, reply, _ = call(port, "POST", "/generate", GOOD)
    assert status == 200 and reply["rows"] == [
        [[5, 6, 7], [11] * 3, [-0.5] * 3, False],
        [[5, 6, 7], [12] * 3, [-0.5] * 3, False],
    ]
    assert all(still_open(s) for s in stalled)  # answered while every stalled peer still held its connection
    for s in stalled:
        s.close()


def test_stalled_connections_are_dropped_after_the_read_timeout_and_calls_are_capped(serve):
    _, port = serve(read_timeout=1.5, header_timeout=1.5, max_connections=1)
    kept = raw_socket(port, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    read_reply(kept)
    idle, cut_body = (
        raw_socket(port),
        raw_socket(
            port,
            b"POST /generate HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
            + KEY.encode()
            + b"\r\nContent-Length: 99\r\n\r\n{",
        ),
    )
    trickle = raw_socket(port, b"G")
    # a second call with the key while one is in progress (its body cut): answered 503 at once; /health is not
    assert call(port, "POST", "/generate", GOOD)[0] == 503 and call(port, "GET", "/health", key=None)[0] == 200
    for _ in range(100):  # one byte every 0.1 s never completes a request line: dropped at the deadline
        try:
            trickle.send(b"E")
        except OSError:
            break
        time.sleep(0.1)
    else:
        pytest.fail("a connection trickling one byte at a time was never dropped")
    assert closed_within(idle, 20) == b"" and closed_within(kept, 20) == b""  # kept alive, then idle: dropped
    assert b" 408 " in closed_within(cut_body, 20)
    assert call(port, "POST", "/generate", GOOD)[0] == 200  # the slots are free again


def test_bodies_and_calls_are_bounded_before_the_engine(serve):
    engine = StandIn()
    _, port = serve(engine, max_body_mb=1, max_requests=4, max_rows=6, max_n=3, max_new_tokens=8)
    # a declared size over the cap is refused before a byte of it is read
    s = raw_socket(
        port,
        b"POST /generate HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
        + KEY.encode()
        + b"\r\nContent-Length: 5000000000\r\n\r\n",
    )
    assert b" 413 " in closed_within(s, 20).split(b"\r\n")[0]
    req = GOOD["requests"][0]
    for body, why in [
        ({**GOOD, "requests": [req] * 5, "seeds": [1] * 10}, "requests must be a list of at most 4"),
        ({**GOOD, "n": 4, "seeds": [1] * 4}, "n must be an integer in [1, 3]"),
        ({**GOOD, "requests": [req] * 4, "n": 2, "seeds": [1] * 8}, "1 to 6 rows"),
        ({**GOOD, "settings": {"max_new_tokens": 9}}, "max_new_tokens must be an integer in [1, 8]"),
        ({**GOOD, "requests": [{"prompt_token_ids": [1] * 513}]}, "at most 512"),
        (b'{"requests": [' + b"[], " * 50000 + b"[]]}", "JSON arrays/objects"),
    ]:
        status, reply, _ = call(port, "POST", "/generate", body)
        assert status == 400 and why in reply["error"], (why, reply)
    assert call(port, "POST", "/generate", b"x", headers={"Content-Length": "-1"})[0] in (400, 411)
    assert engine.calls == 0


def test_parsing_a_hostile_body_costs_a_small_multiple_of_its_size(serve):
    """40 MiB of ``[],`` (13 M empty lists once parsed, about 1 GiB) is refused after counting its bytes: the
    server's peak memory for it stays under 3 x the body."""
    _, port = serve()
    body = b'{"requests": [' + b"[]," * (40 * 2**20 // 3) + b"[]]}"
    tracemalloc.start()
    try:
        status, reply, _ = call(port, "POST", "/generate", body)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert status == 400 and "JSON arrays/objects" in reply["error"]
    assert peak < 3 * len(body), peak


# ---- only key holders drive it -------------------------------------------------------------------------


def test_every_endpoint_but_health_wants_the_key(serve, tmp_path):
    engine = StandIn()
    server, port = serve(engine)
    for key in (None, "wrong"):
        assert call(port, "POST", "/generate", GOOD, key=key)[0] == 401
        assert call(port, "POST", "/reload_weights", {"path": "x"}, key=key)[0] == 401
    status, info, _ = call(port, "GET", "/health", key=None, headers={auth.CHALLENGE: "abc"})
    assert status == 200 and info["proof"] == auth.proof(KEY, "abc") and info["weights_dir"] == str(server.weights_dir)
    assert engine.calls == 0 and engine.reloads == []
    assert call(port, "POST", "/generate", GOOD)[0] == 200


def test_reloads_read_only_inside_the_weights_dir(serve, tmp_path):
    engine = StandIn()
    server, port = serve(engine)
    root = server.weights_dir
    outside = tmp_path / "outside"
    outside.mkdir()
    from safetensors.numpy import save_file

    save_file({"w": np.zeros(2, dtype="float32")}, str(outside / "model.safetensors"))
    (root / "push").mkdir()
    (root / "push" / "model.safetensors").write_bytes((outside / "model.safetensors").read_bytes())
    (root / "link").symlink_to(outside)
    (root / "filelink").mkdir()
    (root / "filelink" / "model.safetensors").symlink_to(outside / "model.safetensors")
    for path in (
        str(outside),
        "/etc",
        f"{root}/../outside",
        "../outside",
        "push/../../outside",
        str(root / "link"),
        "link",
        str(root / "filelink"),
    ):
        status, reply, _ = call(port, "POST", "/reload_weights", {"path": path})
        assert status == 403, (path, reply)
    assert call(port, "POST", "/reload_weights", {"path": str(root / "nothing")})[0] == 400
    assert call(port, "POST", "/reload_weights", {"path": str(root / "push")})[0] == 200
    assert call(port, "POST", "/reload_weights", {"path": "push"})[0] == 200
    assert engine.reloads == [root / "push", root / "push"]


def test_the_token_file_and_the_clients_identity_check(serve, tmp_path, monkeypatch, tiny_model_dir):
    """A server given no key writes one to a 0600 token file that the client reads; a client whose key the
    server at the port does not hold is refused before sending it; a token file others can read is refused."""
    from mmreason.models import load_processor
    from mmreason.rollout.backends.vllm_client import ServerIdentityError, VLLMClient

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv(auth.ENV, raising=False)
    tokenizer = load_processor(tiny_model_dir).tokenizer
    key = auth.new_key()
    server, port = serve(key=key, token_file=None)
    path = auth.token_file(port)
    auth.write_token_file(path, key)  # as `mmreason vllm-serve` does without --api_key (run() passes this path)
    assert os.stat(path).st_mode & 0o777 == 0o600 and os.stat(path.parent).st_mode & 0o777 == 0o700
    client = VLLMClient("127.0.0.1", port, tokenizer, server_timeout=5)
    assert client._key == key and client.sync_dir.parent == server.weights_dir
    client.close()
    with pytest.raises(ServerIdentityError, match="could not prove it holds this run's key"):
        VLLMClient("127.0.0.1", port, tokenizer, api_key="another-key", server_timeout=5)
    os.chmod(path, 0o644)
    with pytest.raises(ServerIdentityError, match="mode 0600"):
        VLLMClient("127.0.0.1", port, tokenizer, server_timeout=5)
    path.unlink()
    with pytest.raises(ServerIdentityError, match="no key"):
        VLLMClient("127.0.0.1", port, tokenizer, server_timeout=5)
    server.token_file = path  # the server's own file goes when it stops
    auth.write_token_file(path, key)
    server.server_close()
    assert not path.exists()


def test_the_client_caps_the_reply_size(tmp_path):
    """A peer that answers with a reply larger than the request can produce is refused without reading it."""
    from mmreason.rollout.backends.vllm_client import _call

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def answer():
        conn, _ = listener.accept()
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 999999999999\r\n\r\n" + b"[" * 4096)
        conn.close()

    threading.Thread(target=answer, daemon=True).start()
    with pytest.raises(http.client.HTTPException, match="999999999999 bytes"):
        _call("127.0.0.1", port, "GET", "/health", None, timeout=10, key=KEY)
    listener.close()


# ---- malformed payloads are 400, engine death by type and state ----------------------------------------------

REQ = {"prompt_token_ids": [1, 2]}
IMG = {"mode": "RGB", "size": [1, 1], "data": "AAAA"}
MALFORMED = [
    b"{not json",
    b"\xff\xfe",
    b"[1, 2]",
    b"[" * 5000 + b"]" * 5000,
    b'"text"',
    {**GOOD, "extra": 1},
    {**GOOD, "requests": [5]},
    {**GOOD, "requests": [{**REQ, "eval": "x"}]},
    {**GOOD, "requests": [{"prompt_token_ids": [1, True]}]},
    {**GOOD, "requests": [{"prompt_token_ids": [1, 2**40]}]},
    {**GOOD, "requests": [{**REQ, "images": [5]}]},
    {**GOOD, "requests": [{**REQ, "images": {"a": 1}}]},
    {**GOOD, "requests": [{**REQ, "images": [{**IMG, "data": 5}]}]},
    {**GOOD, "requests": [{**REQ, "images": [{**IMG, "data": "!!!"}]}]},
    {**GOOD, "requests": [{**REQ, "images": [{**IMG, "size": [1, True]}]}]},
    {**GOOD, "requests": [{**REQ, "videos": [{"frames": 5}]}]},
    {
        **GOOD,
        "requests": [
            {**REQ, "videos": [{"frames": {"dtype": "uint8", "shape": [1], "data": "AA=="}, "metadata": "x"}]}
        ],
    },
    {
        **GOOD,
        "requests": [
            {
                **REQ,
                "videos": [
                    {"frames": {"dtype": "uint8", "shape": [1], "data": "AA=="}, "metadata": {"fps": {"nested": 1}}}
                ],
            }
        ],
    },
    {**GOOD, "requests": [{**REQ, "videos": [{"frames": {"dtype": "uint8", "shape": [1], "data": "AA==", "x": 1}}]}]},
    {**GOOD, "requests": [{**REQ, "mm_processor_kwargs": {"do_sample_frames": "yes"}}]},
    {**GOOD, "settings": {"max_new_tokens": 3, "temperature": "hot"}},
    {**GOOD, "settings": {"max_new_tokens": 3, "top_p": -5}},
    {**GOOD, "settings": {"max_new_tokens": 1e12}},
    {**GOOD, "settings": {"max_new_tokens": 3, "stop_strings": "abc"}},
    {**GOOD, "settings": {"max_new_tokens": 3, "top_k": True}},
    {**GOOD, "settings": {"max_new_tokens": 3, "temperature": float("nan")}},
    {**GOOD, "settings": [3]},
    {**GOOD, "seeds": ["a", "b"]},
    {**GOOD, "n": True, "seeds": [1]},
]


def test_malformed_payloads_are_400_and_never_reach_the_engine(serve):
    engine = StandIn()
    _, port = serve(engine)
    for body in MALFORMED:
        status, reply, _ = call(port, "POST", "/generate", body)
        assert status == 400, (body if isinstance(body, dict) else body[:40], status, reply)
    for body in ({"path": 5}, {"path": "x", "more": 1}, [1], {"path": ""}):
        assert call(port, "POST", "/reload_weights", body)[0] == 400, body
    assert engine.calls == 0 and engine.reloads == []


def test_engine_death_is_decided_by_type_and_state_not_by_message(serve):
    from mmreason.rollout.backends.vllm_engine import _engine_dead

    engine = StandIn()
    _, port = serve(engine)
    engine.fail = ValueError("unexpected keyword argument 'deadline' (EngineCore is dead)")
    assert call(port, "POST", "/generate", GOOD)[0] == 500
    engine.fail = None
    assert call(port, "POST", "/generate", GOOD)[0] == 200  # not latched: the engine serves on
    engine.fail = EngineDied("vLLM engine died")
    status, reply, _ = call(port, "POST", "/generate", GOOD)
    assert status == 503 and reply["dead"]
    engine.fail = None
    assert call(port, "POST", "/generate", GOOD)[0] == 503 and call(port, "GET", "/health")[1]["dead"]

    class Alive:
        class llm_engine:  # noqa: N801 - vLLM's attribute names
            class engine_core:  # noqa: N801
                class resources:  # noqa: N801
                    engine_dead = False

    dead_error = type("EngineDeadError", (RuntimeError,), {"__module__": "vllm.v1.engine.exceptions"})
    assert not _engine_dead(ValueError("dead EngineCore"), Alive)
    assert _engine_dead(dead_error("anything"), Alive)
    Alive.llm_engine.engine_core.resources.engine_dead = True
    assert _engine_dead(OSError("broken pipe"), Alive)


def test_the_request_log_escapes_control_characters_and_never_shows_the_key(serve, capsys):
    _, port = serve()
    raw = raw_socket(port, b"GET /\x1b[31mred\x07\x9b HTTP/1.1\r\nHost: x\r\n\r\n")
    assert b" 400 " in closed_within(raw, 20)  # h11 refuses raw control characters in a request line
    s = raw_socket(port, b"GET /%1b[31mred%07%c2%9b HTTP/1.1\r\nHost: x\r\n\r\n")  # decoded into the path
    read_reply(s)
    s.close()
    assert call(port, "POST", "/generate", GOOD)[0] == 200
    assert call(port, "POST", "/generate", GOOD, key="wrong-" + KEY)[0] == 401
    time.sleep(0.2)  # the handler threads finish their log lines
    err = capsys.readouterr().err
    assert "\\x1b[31mred\\x07\\x9b" in err and "\x1b" not in err and "\x07" not in err
    assert KEY not in err and "/generate" in err


def test_the_key_is_never_saved_with_a_config():
    """config.yaml, the printed config, checkpoints and trackers (train) and the results' config (eval) all
    come from ``to_dict``, which blanks every ``*api_key`` field."""
    from mmreason.config import dump_yaml, load_config, to_dict
    from mmreason.eval.config import parse_model_args
    from mmreason.train.config import TrainConfig

    cfg = load_config(TrainConfig, None, ["rollout.vllm_server_api_key=s3cret-key"])
    assert cfg.rollout.vllm_server_api_key == "s3cret-key"  # the run uses it ...
    assert "s3cret-key" not in dump_yaml(cfg) and to_dict(cfg)["rollout"]["vllm_server_api_key"] is None
    args = parse_model_args("backend=vllm,vllm_mode=server,vllm_server_api_key=s3cret-key")
    assert args.vllm_server_api_key == "s3cret-key" and to_dict(args)["vllm_server_api_key"] is None


def test_a_bind_beyond_loopback_needs_an_explicit_key(monkeypatch):
    """``--host 0.0.0.0`` without ``--api_key`` (or the environment variable) stops before the engine loads:
    a token file only serves clients on this machine."""
    import argparse

    from mmreason.rollout.backends import vllm_server

    parser = argparse.ArgumentParser()
    vllm_server.add_arguments(parser)
    monkeypatch.delenv(auth.ENV, raising=False)
    with pytest.raises(SystemExit, match="--host 0.0.0.0 is reachable from other machines"):
        vllm_server.run(parser.parse_args(["no-such-model", "--host", "0.0.0.0"]))
    with pytest.raises(SystemExit, match="--max_n must be > 0"):
        vllm_server.run(parser.parse_args(["no-such-model", "--max_n", "0"]))


def test_a_run_whose_calls_the_server_would_refuse_stops_before_any_step(serve, tmp_path, capsys, monkeypatch):
    """The server's call limits are in /health: a run asking more (G = 8 against --max_n 4) is one line naming
    the setting and the flag before any step; one with the wrong key is one line too (401 is never a step)."""
    from pathlib import Path

    from mmreason.cli import main

    _, port = serve(max_n=4)
    root = Path(__file__).resolve().parents[2]
    args = [
        "train",
        str(root / "configs" / "quickstart.yaml"),
        f"output_dir={tmp_path / 'run'}",
        "rollout.backend=vllm",
        "rollout.vllm_mode=server",
        f"rollout.vllm_server_port={port}",
        "rollout.vllm_server_timeout=5",
        "data.max_prompt_length=400",
    ]

    def said():  # the run's lines (the in-process server logs its requests to stderr too)
        return [x for x in capsys.readouterr().err.splitlines() if not x.startswith("vllm-serve:")]

    monkeypatch.setenv(auth.ENV, KEY)
    assert main(args) == 2
    (err,) = said()
    assert "rollout.num_generations = 8 is over its --max_n 4" in err
    assert main([*args, "rollout.vllm_server_api_key=another-key"]) == 2
    (err,) = said()
    assert "could not prove it holds this run's key" in err and KEY not in err
    assert not (tmp_path / "run" / "metrics.jsonl").exists()
