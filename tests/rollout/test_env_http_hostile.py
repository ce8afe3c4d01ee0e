"""The client of a served environment against servers that are dead, slow or lying (``env_client``).

Each fake server is a real HTTP server or socket on localhost. What must hold: whatever the server does, the
client's ``step`` raises ``EnvironmentServerError`` naming what was wrong (the multi-turn engine counts it as
the episode's fault), within the client's ``timeout_s`` even when the server trickles its answer, and never
decodes an answer beyond its bounds; a failure during ``reset`` is held and raised by the first ``step``."""

from __future__ import annotations

import base64
import io
import json
import socket
import struct
import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from PIL import Image

from mmreason.rollout.backends import vllm_auth as auth
from mmreason.rollout.env_client import EnvironmentServerError, HttpEnvironment
from mmreason.rollout.env_wire import MediaBounds
from mmreason.types import Sample

KEY = "hostile-test-key-0123456789"
SAMPLE = Sample("s0", [{"role": "user", "content": "?"}])


def _png(width: int, height: int) -> str:
    """A PNG whose header says ``width x height`` (valid chunks, no pixel data): a decompression bomb's look."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return base64.b64encode(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IEND", b"")).decode()


def _small_png() -> str:
    buffer = io.BytesIO()
    Image.new("RGB", (4, 4)).save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode()


def _step(obs: dict, done=False, episode="e1") -> bytes:
    return json.dumps({"episode_id": episode, "observation": obs, "reward": None, "done": done}).encode()


def _frames(shape, nbytes: int) -> dict:
    return {"dtype": "uint8", "shape": shape, "data": base64.b64encode(bytes(nbytes)).decode()}


# (the /step answer's body, its headers beyond the proof, whether it proves the key, what the error says)
LIES = {
    "not json": (b"<html>oops</html>", {}, True, "not a JSON reply"),
    "a list": (b"[1, 2]", {}, True, "not a JSON object"),
    "deep nesting": (b"[" * 300_000, {}, True, "JSON arrays/objects"),
    "another episode": (_step({"text": "hi"}, episode="e2"), {}, True, "answered for episode 'e2'"),
    "unknown key": (_step({"text": "hi", "evil": 1}), {}, True, r"observation: unknown keys \['evil'\]"),
    "done not a bool": (_step({"text": "hi"}, done="yes"), {}, True, "done must be true or false"),
    "text too long": (_step({"text": "x" * 1000}), {}, True, "observation.text: 1000 characters"),
    "not base64": (_step({"text": "", "images": [{"png": "!!!"}]}), {}, True, r"images\[0\]: not base64"),
    "not a png": (
        _step({"text": "", "images": [{"png": base64.b64encode(b"GIF89a....").decode()}]}),
        {},
        True,
        r"images\[0\]: not a readable PNG",
    ),
    "a bomb": (_step({"text": "", "images": [{"png": _png(9000, 9000)}]}), {}, True, "9000x9000 pixels"),
    "too many images": (_step({"text": "", "images": [{"png": _small_png()}] * 5}), {}, True, "5 items"),
    "frames of 4 channels": (
        _step({"text": "", "videos": [_frames([2, 4, 8, 8], 512)]}),
        {},
        True,
        r"shape \[T, 3, H, W\]",
    ),
    "frames short of their shape": (
        _step({"text": "", "videos": [_frames([1, 3, 8, 8], 10)]}),
        {},
        True,
        "does not fit its 10 bytes",
    ),
    "a huge reply": (b"{}", {"Content-Length": str(10**12)}, True, "a reply of 1000000000000 bytes"),
    "no proof": (_step({"text": "hi"}), {}, False, "could not prove it holds the key"),
    "a server error": (b'{"error": "boom"}', {"Status": "500"}, True, r"step \(500\): boom"),
}


class _Liar(BaseHTTPRequestHandler):
    """Answers /health and /reset as the protocol says, and /step with ``server.lie``."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def _answer(self, body: bytes, headers: dict, proves: bool = True) -> None:
        headers = dict(headers)
        status = int(headers.pop("Status", 200))
        self.send_response(status)
        challenge = self.headers.get(auth.CHALLENGE, "")
        if proves:
            self.send_header(auth.PROOF, auth.proof(KEY, challenge))
        if "Content-Length" not in headers:
            headers["Content-Length"] = str(len(body))
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        try:
            self.wfile.write(body)
        except OSError:
            pass

    def do_GET(self) -> None:
        proof = auth.proof(KEY, self.headers.get(auth.CHALLENGE, ""))
        self._answer(json.dumps({"status": "healthy", "stop_strings": ["</t>"], "proof": proof}).encode(), {})

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path == "/reset":
            self._answer(_step({"text": ""}), {})
        else:
            body, headers, proves, _ = self.server.lie
            self._answer(body, headers, proves)


@pytest.fixture(scope="module")
def liar():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Liar)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join(10)


@pytest.mark.parametrize("lie", sorted(LIES))
def test_a_lying_server_is_the_episode_s_fault(liar, lie):
    liar.lie = LIES[lie]
    env = HttpEnvironment(
        f"http://127.0.0.1:{liar.server_address[1]}",
        api_key=KEY,
        timeout_s=10,
        bounds=MediaBounds(max_images=4, max_text_chars=100),
    )
    assert env.stop_strings == ("</t>",)
    env.reset(SAMPLE)
    with pytest.raises(EnvironmentServerError, match=LIES[lie][3]) as caught:
        env.step("<t>zoom</t>")
    assert "sample 's0'" in str(caught.value)
    assert env.episode_id is None  # a lying server is not asked again for this episode


@pytest.fixture
def silent():
    """A socket server that reads requests and then, per ``mode``: never answers, or trickles an answer a
    byte at a time for ever. Yields (port, set_mode)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    state = {"mode": "never", "stop": threading.Event()}
    conns = []

    def handle(conn: socket.socket) -> None:
        conn.recv(1 << 16)
        if state["mode"] == "trickle":
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
            while not state["stop"].wait(0.05):
                try:
                    conn.sendall(b" ")
                except OSError:
                    return
        state["stop"].wait()

    def accept() -> None:
        while not state["stop"].is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            conns.append(conn)
            threading.Thread(target=handle, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    yield sock.getsockname()[1], lambda mode: state.update(mode=mode)
    state["stop"].set()
    sock.close()
    for conn in conns:
        conn.close()


@pytest.mark.parametrize("mode", ["never", "trickle"])
def test_a_slow_server_is_cut_at_the_client_s_timeout(silent, mode):
    port, set_mode = silent
    set_mode(mode)
    env = HttpEnvironment(f"http://127.0.0.1:{port}", api_key=KEY, timeout_s=0.5, stop_strings=("</t>",))
    env.reset(SAMPLE)  # no answer: held, not raised (the server's failure is not the sample's)
    assert env.fault is not None
    with pytest.raises(EnvironmentServerError, match=r"sample 's0'.*no answer within 0.5 s"):
        env.step("x")


def test_a_dead_server_is_the_episode_s_fault():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    env = HttpEnvironment(f"http://127.0.0.1:{port}", api_key=KEY, timeout_s=5)
    assert env.stop_strings == ()  # no /health answer: no stop strings, and the reset fails below
    env.reset(SAMPLE)
    with pytest.raises(EnvironmentServerError, match=r"sample 's0'.*reset.*ConnectionRefusedError"):
        env.step("x")
    env.close()  # nothing open: nothing sent
