"""`mmreason data inspect` prints a dataset's own text (a rendered prompt, paths, problems): escape sequences,
carriage returns and bidirectional overrides in a row reach the terminal only as visible
escapes (``mmreason.terminal.printable``)."""

from __future__ import annotations

from mmreason.cli import main
from mmreason.paths import write_jsonl
from mmreason.terminal import printable

HOSTILE = "What\x1b[2J\x1b]0;owned\x07 is\r 2 + 2?\x9b31m \u202eevil\u202c"
RAW = ("\x1b", "\x07", "\r", "\x9b", "\u202e", "\u202c")


def test_inspect_escapes_what_a_terminal_would_act_on(tmp_path, capsys):
    path = tmp_path / "rows.jsonl"
    rows = [{"problem": HOSTILE, "answer": "4"}, {"problem": "fine", "answer": ["\x1b[31m", 5]}]
    write_jsonl(path, rows)
    main(["data", "inspect", str(path)])
    out = capsys.readouterr().out
    assert not any(c in out for c in RAW), [c for c in RAW if c in out]
    assert "What\\x1b[2J\\x1b]0;owned\\x07 is\\x0d 2 + 2?\\x9b31m \\u202eevil\\u202c" in out
    assert "\n" in out  # the report keeps its lines


def test_printable_leaves_ordinary_text_alone():
    text = "Qu'est-ce que c'est ? 答案是 42 — résumé\tok\nnext"
    assert printable(text) == text
    assert printable("a\nb", keep="") == "a\\x0ab" and printable("x\ud800") == "x\\ud800"  # a lone surrogate
