"""Hostile input files, for every reader of a user's file (data rows, benchmark files, predictions, a completion to
score, a prompt template, a results file, run logs): a FIFO, a device, a folder, an oversized sparse file, JSON
50,000 levels deep, bytes that are not UTF-8, a lone surrogate, a byte-order mark, a non-finite number where an
integer belongs, a damaged ``save_to_disk`` folder. Each is one line naming the file (and the row or field), found
without reading past a bound; none is a traceback, a hang or memory out of proportion to the input.

Before: a FIFO hung the reader (or raised ``NotADirectoryError``), a FIFO or folder of predictions was "does not
exist", a sparse 2 GB predictions file was read whole, deep JSON was a ``RecursionError`` traceback, non-UTF-8
predictions, completion and template files were ``UnicodeDecodeError`` tracebacks, a UTF-8 BOM was refused in JSON
Lines, MathVista ``precision: Infinity`` was an ``OverflowError``, a damaged ``save_to_disk`` folder a pyarrow
traceback, image bytes given as text "string argument without an encoding", and ``data examples --out`` at a file
a ``NotADirectoryError`` traceback."""

from __future__ import annotations

import errno
import json
import os
import threading
import time
from pathlib import Path

import pytest

from mmreason.cli import main
from mmreason.eval.compare import load_results
from mmreason.eval.predictions import read_predictions
from mmreason.files import MAX_PREDICTIONS_BYTES
from mmreason.paths import read_jsonl
from mmreason.published_files import image_field, table_rows
from mmreason.rows import read_rows
from mmreason.tasks.generic.data import generic_load
from mmreason.tasks.generic.storage import open_source
from mmreason.tasks.mathvista.data import mathvista_row

DEEP = "[" * 50_000 + "]" * 50_000


def _fifo(tmp_path: Path, name: str) -> Path:
    """A FIFO, and a thread that, should a reader block on it (the old behaviour), feeds it a byte and closes it
    after a few seconds so the test fails instead of hanging."""
    path = tmp_path / name
    os.mkfifo(path)

    def unblock() -> None:
        end = time.monotonic() + 10
        while time.monotonic() < end:
            try:
                fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as err:  # ENXIO: no reader (the refusal never opened it)
                if err.errno != errno.ENXIO:
                    return
                time.sleep(3)
                continue
            os.write(fd, b"x")
            os.close(fd)
            return

    threading.Thread(target=unblock, daemon=True).start()
    return path


def test_fifos_and_devices_are_refused_by_name_without_opening_them(tmp_path):
    with pytest.raises(ValueError, match=r"data file '.*rows.jsonl' is a FIFO \(named pipe\), not a file"):
        read_rows(_fifo(tmp_path, "rows.jsonl"), "shapes")
    with pytest.raises(ValueError, match=r"mathvista data file '.*bench.json' is a FIFO"):
        table_rows(_fifo(tmp_path, "bench.json"), "mathvista")
    with pytest.raises(ValueError, match=r"predictions file '.*preds.json' is a FIFO"):
        read_predictions(_fifo(tmp_path, "preds.json"))
    with pytest.raises(ValueError, match=r"generic data '.*data' is a FIFO"):
        open_source(str(_fifo(tmp_path, "data")))
    with pytest.raises(ValueError, match=r"mathvista data file '/dev/zero' is a device, not a file"):
        table_rows("/dev/zero", "mathvista")
    with pytest.raises(ValueError, match=r"predictions file '.*' is a folder, not a file"):
        read_predictions(tmp_path)


def test_a_fifo_as_the_completion_file_is_one_line(tmp_path, capsys):
    fifo = _fifo(tmp_path, "completion.txt")
    assert main(["reward", "vqa_exact", "--completion-file", str(fifo), "--column", "answer=x"]) == 2
    assert "completion file" in capsys.readouterr().err


def test_an_oversized_sparse_file_is_refused_before_it_is_read(tmp_path):
    path = tmp_path / "preds.json"
    with path.open("wb") as f:
        f.truncate(MAX_PREDICTIONS_BYTES + 1)  # sparse: no disk, and never read
    with pytest.raises(ValueError, match=r"is 1,073,741,825 bytes, over the limit of 1,073,741,824 bytes"):
        read_predictions(path)


def test_deep_json_is_one_line_in_every_reader(tmp_path):
    rows, array, bench, preds, results = (tmp_path / n for n in ("a.jsonl", "b.json", "c.json", "d.json", "e.json"))
    rows.write_text('{"id": 1}\n{"x": ' + DEEP + "}\n")
    array.write_text("[" + DEEP + "]")
    bench.write_text('{"1": {"x": ' + DEEP + "}}")
    preds.write_text('{"1": ' + DEEP + "}")
    results.write_text('{"results": ' + DEEP + "}")
    with pytest.raises(ValueError, match=r"a.jsonl': line 2: JSON nested too deeply"):
        read_rows(rows, "shapes")
    with pytest.raises(ValueError, match=r"b.json': a JSON array of rows: JSON nested too deeply"):
        read_rows(array, "shapes")
    with pytest.raises(ValueError, match=r"c.json': JSON nested too deeply"):
        table_rows(bench, "mathvista")
    with pytest.raises(ValueError, match=r"d.json: JSON nested too deeply"):
        read_predictions(preds)
    with pytest.raises(ValueError, match=r"e.json': JSON nested too deeply"):
        load_results(results)
    log = tmp_path / "metrics.jsonl"
    log.write_text('{"step": 1}\n' + DEEP + '\n{"step": 2}\n')
    assert [r["step"] for r in read_jsonl(log)] == [1, 2]  # a run log: the line skipped and counted
    assert main(["reward", "vqa_exact", "--completion", "x", "--column", f"answer={DEEP}"]) in (0, 1)


def test_text_that_is_not_utf8_names_the_file_and_line(tmp_path, capsys):
    preds = tmp_path / "preds.jsonl"
    preds.write_bytes(b'{"id": 1, "response": "a"}\n{"id": 2, "response": "\xff"}\n')
    with pytest.raises(ValueError, match=r"predictions file '.*preds.jsonl': line 2: byte 0xff is not UTF-8 text"):
        read_predictions(preds)
    completion = tmp_path / "completion.txt"
    completion.write_bytes(b"the answer is \xfe")
    assert main(["reward", "vqa_exact", "--completion-file", str(completion), "--column", "answer=x"]) == 2
    assert "completion.txt': line 1: byte 0xfe is not UTF-8 text" in capsys.readouterr().err
    data, template = tmp_path / "rows.jsonl", tmp_path / "t.jinja"
    data.write_text(json.dumps({"problem": "2 + 2?", "answer": "4"}) + "\n")
    template.write_bytes(b"{{ content }} \xe9\n")
    with pytest.raises(ValueError, match=r"prompt template '.*t.jinja': line 1: byte 0xe9 is not UTF-8"):
        generic_load(str(data), prompt_template=str(template))


def test_a_lone_surrogate_in_a_response_is_named_and_never_half_written(tmp_path):
    preds = tmp_path / "preds.json"
    preds.write_text('{"7": {"response": "ok \\ud800"}}')
    with pytest.raises(ValueError, match=r"key '7': field 'response' holds a lone surrogate"):
        read_predictions(preds)
    from mmreason.eval.output import _dumps

    assert json.loads(_dumps({"response": "ok \ud800"})) == {"response": "ok \ud800"}


def test_a_byte_order_mark_is_dropped_in_json_lines_as_in_json(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"id": "a", "answer": "1"}\n{"id": "b", "answer": "2"}\n')
    assert [r["id"] for r in read_rows(path, "shapes")] == ["a", "b"]


def test_infinite_precision_and_image_bytes_given_as_text_are_one_line(tmp_path):
    row = {"pid": "1", "question": "q", "answer": "1.5", "answer_type": "float", "question_type": "free_form"}
    with pytest.raises(ValueError, match=r"precision inf is not a whole number of decimal places"):
        mathvista_row({**row, "precision": float("inf")}, 0, "testmini.json")
    with pytest.raises(ValueError, match=r"row 0: decoded_image's 'bytes' is text \(a str\), not image bytes"):
        image_field({"bytes": "iVBORw0KGgo="}, tmp_path, "row 0", "decoded_image")


def test_a_damaged_save_to_disk_folder_is_one_line(tmp_path):
    datasets = pytest.importorskip("datasets")
    folder = tmp_path / "saved"
    datasets.Dataset.from_list([{"problem": "q", "answer": "a"}]).save_to_disk(str(folder))
    for shard in folder.glob("*.arrow"):
        shard.write_bytes(b"not arrow")
    with pytest.raises(ValueError, match=r"generic data '.*saved': cannot be read as a save_to_disk folder"):
        open_source(str(folder))


def test_data_examples_out_at_a_file_is_one_line(tmp_path, capsys):
    target = tmp_path / "a-file"
    target.write_text("x")
    assert main(["data", "examples", "--out", str(target)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot write there" in err and str(target) in err
