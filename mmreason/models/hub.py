"""A model named by a local directory or a Hugging Face hub id, resolved to a directory the same way everywhere.

``mmreason train``, ``mmreason sft`` (``model.name_or_path``, through ``loading.check_model_dir``) and
``mmreason eval`` (``--model``) all call ``resolve_model_dir``: a path that exists is used as it is; an
``org/name`` id is the snapshot ``huggingface_hub.snapshot_download`` returns, which honours ``HF_HUB_OFFLINE``
(the cached snapshot of ``refs/main``, no network) and ``HF_HUB_CACHE`` / ``HF_HOME``.
"""

from __future__ import annotations

import re
from pathlib import Path

HUB_ID = re.compile(r"^[\w.-]+/[\w.-]+$")


def is_hub_id(spec: str) -> bool:
    """Whether ``spec`` reads as ``org/name`` (and not as a path: no leading ``.`` or ``/``)."""
    return bool(HUB_ID.match(spec)) and not spec.startswith(".")


def resolve_model_dir(spec: str | Path, key: str = "model.name_or_path") -> Path:
    """The local directory of ``spec``: the path itself when it exists, else the hub snapshot of an
    ``org/name`` id (downloaded, or read from the cache when offline). Errors are one line naming ``key``."""
    path = Path(spec)
    if path.exists() or not is_hub_id(str(spec)):
        return path
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import LocalEntryNotFoundError

        return Path(snapshot_download(str(spec)))
    except LocalEntryNotFoundError as exc:  # offline (HF_HUB_OFFLINE=1 or no network) and not in the cache
        raise FileNotFoundError(
            f"{key}={str(spec)!r}: no such directory, and not in the Hugging Face cache "
            f"({_cache_dir()}) while offline: download the hub id first (`hf download {spec}`) or give a "
            "checkpoint directory (`mmreason tiny-model DIR` builds one)"
        ) from exc
    except Exception as exc:  # unknown repo, gated, network: the user needs the id and the reason
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise FileNotFoundError(
            f"{key}={str(spec)!r}: no such directory, and the hub cannot give it: {reason}"
        ) from exc


def _cache_dir() -> str:
    """The hub cache ``snapshot_download`` reads (``HF_HUB_CACHE``, default ``HF_HOME/hub``)."""
    from huggingface_hub import constants

    return str(constants.HF_HUB_CACHE)
