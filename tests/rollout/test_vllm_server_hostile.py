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
