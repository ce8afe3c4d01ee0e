"""A ``.jinja`` prompt template is a file anyone may hand over: it is rendered in Jinja's sandbox within a time
and a size bound (``mmreason.templating``), and a template that breaks out or past a bound is one line naming
it, before any row is read (the loader renders it once on a short text)."""

from __future__ import annotations

import tracemalloc

import pytest

from mmreason import templating
from mmreason.paths import write_jsonl
from mmreason.tasks.generic.data import generic_load


@pytest.fixture
def rows(tmp_path):
    """Two rows in EasyR1's layout (``problem`` / ``answer``), text only."""
    path = tmp_path / "rows.jsonl"
    write_jsonl(path, [{"problem": "What is 2 + 2?", "answer": "4"}, {"problem": "What is 3 + 3?", "answer": "6"}])
    return path


def _load(rows, tmp_path, source: str):
    template = tmp_path / "hostile.jinja"
    template.write_text(source)
    return generic_load(str(rows), prompt_template=str(template)), template


def test_a_template_cannot_reach_python(rows, tmp_path):
    marker = tmp_path / "PWNED"
    for source in (
        "{{ cycler.__init__.__globals__.os.system('touch " + str(marker) + "') }}{{ content }}",
        "{{ ''.__class__.__mro__[1].__subclasses__() }}{{ content }}",
        "{{ content.__class__ }}",
        "{{ lipsum.__globals__ }}{{ content }}",
    ):
        with pytest.raises(ValueError, match="prompt_template .*hostile.jinja") as err:
            _load(rows, tmp_path, source)
        assert "\n" not in str(err.value), str(err.value)
    assert not marker.exists()


def test_a_template_cannot_take_the_runs_memory(rows, tmp_path):
    """``range(10**12)``, a string multiplied by 10**10, a string doubled in a loop, a 10**9-wide filter,
    99,999 copies of the row: each refused from its operands' sizes before it is built (peak well under
    100 MB; the first one took ``eval`` to 19 GB before)."""
    tracemalloc.start()
    try:
        for source in (
            "{% for i in range(10**12) %}{{ content }}{% endfor %}",
            "{{ content ~ 'x' * 10**10 }}",
            "{% set ns = namespace(s=content) %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}"
            "{{ ns.s }}",
            "{{ content | center(10**9) }}",
            "{{ content.ljust(10**9) }}",
            "{% for i in range(99999) %}{{ content }}{% endfor %}",
            "{% macro grow(s, n) %}{{ grow(s ~ s, n - 1) if n else s }}{% endmacro %}{{ grow(content, 64) }}",
        ):
            with pytest.raises(ValueError, match="prompt_template .*hostile.jinja"):
                _load(rows, tmp_path, source)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 100 * 2**20, peak


def test_a_template_cannot_take_the_runs_time(rows, tmp_path, monkeypatch):
    """Loops that build nothing (nested over ``range`` or over the row's own text) stop at the time bound,
    and the next template renders as usual (the watchdog's exception never lands outside its render)."""
    monkeypatch.setattr(templating, "TIMEOUT_S", 0.5)
    for source in (
        "{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}{{ content }}",
        "{% for a in content %}{% for b in range(99999) %}{% for c in range(99999) %}{% endfor %}{% endfor %}"
        "{% endfor %}{{ content }}",
    ):
        with pytest.raises(ValueError, match="ran past 0.5 s"):
            _load(rows, tmp_path, source)
    samples, _ = _load(rows, tmp_path, "Q: {{ content | trim }}")
    assert samples[1].prompt_text == "Q: What is 3 + 3?"
    compiled = templating.compile_template("{{ n * 2 }}")
    assert [templating.render(compiled, {"n": k}, timeout_s=0.05) for k in range(200)][-1] == "398"


def test_ordinary_templates_render_as_before(rows, tmp_path):
    """What EasyR1's ``format_prompt`` templates use: filters, conditions, loops, a namespace."""
    samples, _ = _load(
        rows,
        tmp_path,
        "{% set ns = namespace(n=0) %}{% for w in content.split() %}{% set ns.n = ns.n + 1 %}{% endfor %}"
        "{{ content | trim | replace('?', '') }} ({{ ns.n }} words){% if 'What' in content %} Think.{% endif %}",
    )
    assert samples[0].prompt_text == "What is 2 + 2 (5 words) Think."


def test_the_watchdog_is_no_worker_a_run_waits_for_at_its_end():
    """The watchdog thread lives for the process, idle between renders: the end of a run (parallel/shutdown.py)
    joins only its workers, so it must not be one (it was: every run that rendered a template waited 5 s at its
    end, then exited without finalization)."""
    import threading

    from mmreason.parallel.shutdown import join_workers, running_workers

    templating.render(templating.compile_template("{{ n }}"), {"n": 1})
    assert any(t.name.endswith("template-watchdog") and t.is_alive() for t in threading.enumerate())
    assert not [name for name in running_workers() if "template" in name]
    assert not [name for name in join_workers(0.1) if "template" in name]
