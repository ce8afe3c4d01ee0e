"""The secret a ``mmreason vllm-serve`` server and its clients share (docs/vllm.md, "Server mode").

Every endpoint but ``/health`` wants ``Authorization: Bearer KEY``. The key is ``--api_key`` or
``$MMREASON_VLLM_API_KEY`` on the server; without either the server makes one and writes it to a token file
only its user can read (mode 0600, in a 0700 folder: ``token_file(port)``), removed when it stops. A client
takes ``rollout.vllm_server_api_key`` (eval: ``--model_args vllm_server_api_key=``), else the environment
variable, else that token file. The client also checks the server: it sends a fresh challenge with each
request and the server answers ``HMAC-SHA256(key, challenge)``, which only a holder of the key can compute,
so a process that took the port is refused before the key is sent to it (``/health`` carries the first
proof). The key itself is never printed or saved (``mmreason.config.to_dict`` blanks ``*api_key`` fields).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
from pathlib import Path

ENV = "MMREASON_VLLM_API_KEY"
CHALLENGE = "X-MMReason-Challenge"
PROOF = "X-MMReason-Proof"


class KeyFileError(PermissionError):
    """A token file anyone but its owner could read or replace."""


def token_file(port: int) -> Path:
    """Return where a server on ``port`` that was given no key writes the one it made."""
    return Path.home() / ".cache" / "mmreason" / "vllm-serve" / f"{int(port)}.token"


def new_key() -> str:
    return secrets.token_urlsafe(32)


def write_token_file(path: Path, key: str) -> None:
    """Write ``key`` into ``path`` (mode 0600; its folder 0700), replacing a stale one atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, key.encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)


def read_token_file(path: Path) -> str | None:
    """Read the key in ``path``; None when there is none. A file (or folder) others can read or write, a link, or one
    owned by another user is refused: its key could be anyone's."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    parent = os.stat(path.parent)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077 or parent.st_mode & 0o022:
        raise KeyFileError(
            f"{path}: a server token file must be a regular file of yours with mode 0600 in a "
            "folder only you can write (found mode "
            f"{stat.filemode(st.st_mode)}); delete it and restart `mmreason vllm-serve`"
        )
    return path.read_text().strip() or None


def client_key(explicit: str | None, port: int) -> str | None:
    """Return the key a client sends: the config's, else ``$MMREASON_VLLM_API_KEY``, else the server's token file."""
    return explicit or os.environ.get(ENV) or read_token_file(token_file(port))


def proof(key: str, challenge: str) -> str:
    return hmac.new(key.encode(), challenge.encode(), hashlib.sha256).hexdigest()


def new_challenge() -> str:
    return secrets.token_hex(16)


def authorized(key: str, header: str | None) -> bool:
    """Tell whether an ``Authorization`` header carries ``key`` (compared in constant time)."""
    return hmac.compare_digest(f"Bearer {key}".encode(), (header or "").encode("latin-1", "replace"))
