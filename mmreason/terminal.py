"""Text from user data made safe to print: a row, a path or a request line can hold terminal escape sequences
(``ESC [ 2 J`` clears the screen, ``ESC ] ... BEL`` retitles the window, a C1 ``CSI`` does either on some
terminals), a carriage return that overwrites the line before it, bidirectional overrides that show text in
another order than it is, or a lone surrogate that no terminal encoding can write. ``printable`` writes each of
those as a visible escape (``\\x1b``, ``\\u202e``) and leaves every other character as it is.
"""

from __future__ import annotations

import re

# C0 controls, DEL, C1 controls, the bidirectional marks, embeddings, overrides and isolates, lone surrogates
_UNSAFE = "\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff"
_PATTERNS: dict[str, re.Pattern] = {}


def _escape(match: re.Match) -> str:
    code = ord(match.group(0))
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: object, keep: str = "\n\t") -> str:
    """``text`` (anything, as ``str``) with every character a terminal would act on escaped, but the
    characters in ``keep`` (default: newline and tab, so a multi-line report keeps its lines)."""
    pattern = _PATTERNS.get(keep)
    if pattern is None:
        kept = "".join(re.escape(c) for c in keep)
        pattern = _PATTERNS[keep] = re.compile(f"(?![{kept}])[{_UNSAFE}]" if keep else f"[{_UNSAFE}]")
    return pattern.sub(_escape, str(text))
