"""`mmreason data examples --out DIR` never overwrites what is already there (the docs write `--out data`, where a
user's own files are): one line naming the first file it would replace, nothing written; ``--force`` replaces.
An ``--out`` it cannot write to is one line too."""

from __future__ import annotations

from mmreason.cli import main


def test_examples_refuse_to_overwrite_and_force_replaces(tmp_path, capsys):
    out = tmp_path / "data"
    out.mkdir()
    mine = out / "trl.jsonl"
    mine.write_text('{"prompt": "my own row", "solution": "mine"}\n')
    assert main(["data", "examples", "--out", str(out), "--layouts", "trl,sharegpt", "--rows", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"mmreason data: error: --out {str(out)!r}: {str(mine)!r} already exists; nothing was written "
        "(choose another --out, or add --force to replace them)"
    )
    assert mine.read_text() == '{"prompt": "my own row", "solution": "mine"}\n'
    assert sorted(p.name for p in out.iterdir()) == ["trl.jsonl"]  # no media, no sharegpt.json, no staging folder
    assert main(["data", "examples", "--out", str(out), "--layouts", "trl", "--rows", "2", "--force"]) == 0
    assert "my own row" not in mine.read_text() and len(mine.read_text().splitlines()) == 2
    # a second run into the same folder is refused too (its trl.jsonl and two pictures are there now)
    assert main(["data", "examples", "--out", str(out), "--layouts", "trl", "--rows", "2"]) == 2
    assert "already exists (and 2 more)" in capsys.readouterr().err


def test_an_out_that_is_a_file_is_one_line(tmp_path, capsys):
    target = tmp_path / "data"
    target.write_text("a file\n")
    assert main(["data", "examples", "--out", str(target), "--layouts", "trl"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"mmreason data: error: --out {str(target)!r}: cannot write there") and "\n" not in err
