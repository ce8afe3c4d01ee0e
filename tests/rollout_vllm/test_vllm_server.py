"""Server mode on the tiny model: ``mmreason vllm-serve`` in a subprocess on a free port, training runs and
the client sampling through it. The 1-engine server is the session's (tests/rollout_vllm/conftest.py, shared with
test_vllm_serve_async.py; every test pushes the weights it needs); the last test kills it. Skipped where vLLM is
not installed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from PIL import Image

vllm = pytest.importorskip("vllm")

from mmreason.rollout.generate import GenerationSettings, generate_groups  # noqa: E402
from mmreason.rollout.prompts import build_prompt  # noqa: E402
from mmreason.types import Sample  # noqa: E402
from tests.rollout_vllm.helpers import ROOT, start_server, stop_server  # noqa: E402
from tests.rollout_vllm.helpers import assert_rollout_logprobs_are_the_trainers as _assert_logprobs  # noqa: E402
from tests.rollout_vllm.helpers import server_train_args as _train_args  # noqa: E402

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def policy(tiny_model_dir):
    """The tiny model with its LM head sharpened (x 30): greedy decoding has clear winners."""
    from mmreason.models import ModelConfig, load_model, load_processor

    model = load_model(ModelConfig(name_or_path=str(tiny_model_dir), dtype="float32"), trainable=False)
    with torch.no_grad():
        model.lm_head.weight.mul_(30.0)
    return model, load_processor(tiny_model_dir)


def _prompts(processor, folder):
    """An image prompt, a video prompt (decoded frames and their metadata cross the wire), a text prompt."""
    import numpy as np

    from mmreason.media.video_write import write_mp4
    from mmreason.types import VideoRef

    frames = [np.full((48, 64, 3), (20 * i, 255 - 20 * i, 90), dtype=np.uint8) for i in range(8)]
    clip = str(write_mp4(folder / "clip.mp4", frames, fps=4))
    samples = [
        Sample(
            id="image",
            messages=[
                {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What colour is the shape?"}]}
            ],
            images=[Image.new("RGB", (112, 84), (200, 30, 30))],
        ),
        Sample(
            id="video",
            messages=[{"role": "user", "content": [{"type": "video"}, {"type": "text", "text": "What changes?"}]}],
            videos=[VideoRef(clip, num_frames=2)],
        ),
        Sample(id="text", messages=[{"role": "user", "content": "What is the answer?"}]),
    ]
    return [build_prompt(processor, s, max_prompt_length=1024, video_max_frames=8) for s in samples]


def test_server_greedy_equals_hf_and_follows_pushed_weights(server, policy, tmp_path):
    """Through the server: greedy rows equal HF ``generate``'s after a push (the prompt ids and visual tokens
    the server's engine expanded are checked against the trainer's on every row); after a push of perturbed
    weights they change, and still equal HF's on the new weights. Seeded sampling repeats."""
    from mmreason.rollout.backends.vllm_client import VLLMClient

    _, port = server
    model, processor = policy
    prompts = _prompts(processor, tmp_path)
    assert [p.visual_tokens > 0 for p in prompts] == [True, True, False]
    client = VLLMClient("127.0.0.1", port, processor.tokenizer, server_timeout=5)
    greedy = GenerationSettings(max_new_tokens=8, temperature=0.0)

    def rows(sampler, settings=greedy, n=1, seeds=(0, 0, 0)):
        if sampler is client:
            out = client.generate_groups(prompts, [0, 1, 2], n, settings, list(seeds))
        else:
            out = generate_groups(sampler, processor, prompts, [0, 1, 2], n, settings=settings, seeds=list(seeds))
        return [t.token_ids.tolist() for t in out]

    client.sync_weights(model)
    before = rows(client)
    assert before == rows(model)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.model.language_model.parameters():
            p.add_(torch.randn(p.shape, generator=generator) * 0.05)
    try:
        client.sync_weights(model)
        after = rows(client)
        assert after != before and after == rows(model)
        sampled = GenerationSettings(max_new_tokens=8, temperature=1.0)
        assert rows(client, sampled, 2, (5, 6, 7)) == rows(client, sampled, 2, (5, 6, 7))
        # a stop string (the first two characters of the image row's greedy text) ends the row as in HF
        text = client.generate_groups(prompts[:1], [0], 1, greedy, [0])[0].completion_text.strip()
        stopped = GenerationSettings(max_new_tokens=8, temperature=0.0, stop_strings=(text[:2],))
        ours = client.generate_groups(prompts[:1], [0], 1, stopped, [0])[0]
        hf = generate_groups(model, processor, prompts[:1], [0], 1, settings=stopped, seeds=[0])[0]
        assert len(text) >= 2 and ours.token_ids.tolist() == hf.token_ids.tolist()
        assert ours.completion_length < 8
    finally:
        client.close()


KEY = "test-key-for-the-two-engine-server"


@pytest.fixture(scope="module")
def server_dp(tiny_model_dir, tmp_path_factory):
    """(process, port) of ``mmreason vllm-serve --data_parallel_size 2`` on the tiny model: two engines (one per
    core group), bound beyond loopback with a key from the environment."""
    log = tmp_path_factory.mktemp("serve-dp") / "serve.log"
    args = ["--host", "0.0.0.0", "--data_parallel_size", "2"]
    # two engines load one after the other
    proc, port = start_server(tiny_model_dir, log, *args, env={"MMREASON_VLLM_API_KEY": KEY}, deadline_s=600)
    try:
        yield proc, port
        assert KEY not in log.read_text()  # the key is never logged
    finally:
        stop_server(proc, port)


def _health(port):
    from mmreason.rollout.backends.vllm_client import server_info

    return server_info("127.0.0.1", port, 5, KEY)


def test_two_engines_sample_the_rows_of_one_and_refuse_strangers(server, server_dp, policy, tmp_path):
    """The same prompts and seeds give the same rows through the 2-engine server (the call's prompts spread
    over both engines), through the 1-engine server, and through a client of both servers (the prompts
    spread over the servers). A request without the key, or with another, is 401 and never reaches an engine."""
    import http.client
    import json

    from mmreason.rollout.backends.vllm_client import VLLMClient

    model, processor = policy
    prompts = _prompts(processor, tmp_path) * 2
    one = VLLMClient("127.0.0.1", server[1], processor.tokenizer, server_timeout=5)
    two = VLLMClient("127.0.0.1", server_dp[1], processor.tokenizer, api_key=KEY, server_timeout=5)
    both = VLLMClient(
        "127.0.0.1",
        server_dp[1],
        processor.tokenizer,
        api_key=KEY,
        hosts=[("127.0.0.1", server[1], one._key)],
        server_timeout=5,
    )
    try:
        for client in (one, two):
            client.sync_weights(model)
        sampled = GenerationSettings(max_new_tokens=8, temperature=1.0)
        seeds = list(range(11, 11 + len(prompts)))
        calls_before = _health(server_dp[1])["engine_calls"]

        def rows(client):
            return [
                (t.token_ids.tolist(), t.rollout_logprobs.tolist())
                for t in client.generate_groups(prompts, list(range(len(prompts))), 3, sampled, seeds)
            ]

        ref = rows(one)
        assert rows(two) == ref and rows(both) == ref
        assert len({str(r[0]) for r in ref}) > 3  # rows differ, so equal lists are not one repeated answer
        info = _health(server_dp[1])
        assert info["engines"] == 2 and all(a > b for a, b in zip(info["engine_calls"], calls_before))
    finally:
        for client in (one, two, both):
            client.close()
    for headers in ({}, {"Authorization": "Bearer not-the-key"}):
        conn = http.client.HTTPConnection("127.0.0.1", server_dp[1], timeout=30)
        conn.request("POST", "/generate", body=b"{}", headers={**headers, "Content-Type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 401 and "key" in json.loads(resp.read())["error"]
        conn.close()


def test_two_clients_sampling_at_once_both_finish_with_their_own_rows(server_dp, policy, tmp_path):
    """Two clients in two threads call the 2-engine server at once, several times: every call finishes and
    gives the rows it gives alone (the server batches the clients' calls into shared engine calls)."""
    import threading

    from mmreason.rollout.backends.vllm_client import VLLMClient

    model, processor = policy
    prompts = _prompts(processor, tmp_path)
    sampled = GenerationSettings(max_new_tokens=8, temperature=1.0)
    clients = [VLLMClient("127.0.0.1", server_dp[1], processor.tokenizer, api_key=KEY, server_timeout=5) for _ in "ab"]
    try:
        clients[0].sync_weights(model)
        alone = [
            [t.token_ids.tolist() for t in c.generate_groups(prompts, [0, 1, 2], 2, sampled, [k, k + 1, k + 2])]
            for k, c in enumerate(clients)
        ]
        got: dict = {}

        def run(k):
            got[k] = [
                [
                    t.token_ids.tolist()
                    for t in clients[k].generate_groups(prompts, [0, 1, 2], 2, sampled, [k, k + 1, k + 2])
                ]
                for _ in range(3)
            ]

        threads = [threading.Thread(target=run, args=(k,)) for k in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
        assert not any(t.is_alive() for t in threads)
        assert got[0] == [alone[0]] * 3 and got[1] == [alone[1]] * 3 and alone[0] != alone[1]
    finally:
        for c in clients:
            c.close()


def test_a_collective_push_to_the_two_engine_server_gives_hf_rows_and_logprobs(server_dp, policy, tmp_path):
    """Server mode, ``weight_sync=collective``: the client joins the server's weights group (both engines'
    workers and the trainer: 3 ranks) and broadcasts perturbed weights in 16 KB buckets (dozens of
    broadcasts). Then the greedy rows through the server (whichever engine serves them) equal HF
    ``generate``'s on the pushed weights, and sampled rows' log-probs equal the trainer's."""
    from mmreason.rollout.backends.vllm_client import VLLMClient

    model, processor = policy
    prompts = _prompts(processor, tmp_path) * 2
    client = VLLMClient(
        "127.0.0.1",
        server_dp[1],
        processor.tokenizer,
        api_key=KEY,
        server_timeout=5,
        weight_sync="collective",
        sync_bucket_mb=16 / 1024,
    )
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    generator = torch.Generator().manual_seed(3)
    try:
        assert client.weight_group is not None and _health(server_dp[1])["engine_workers"] == 2
        greedy = GenerationSettings(max_new_tokens=8, temperature=0.0)
        ids = list(range(len(prompts)))
        client.sync_weights(model)
        before = [t.token_ids.tolist() for t in client.generate_groups(prompts, ids, 1, greedy, [0] * len(prompts))]
        with torch.no_grad():
            for p in model.model.language_model.parameters():
                p.add_(torch.randn(p.shape, generator=generator) * 0.05)
        assert client.sync_weights(model) > 0
        ours = [t.token_ids.tolist() for t in client.generate_groups(prompts, ids, 1, greedy, [0] * len(prompts))]
        hf = [
            t.token_ids.tolist()
            for t in generate_groups(model, processor, prompts, ids, 1, settings=greedy, seeds=[0] * len(prompts))
        ]
        assert ours == hf
        assert ours != before
        sampled = client.generate_groups(prompts, ids, 2, GenerationSettings(max_new_tokens=8, temperature=1.0), ids)
        _assert_logprobs(model, processor, sampled)
    finally:
        client.close()
        model.load_state_dict(saved)


def test_train_in_server_mode_pushes_every_step_and_samples_the_trainers_weights(
    server, tiny_model_dir, shapes_cache, tmp_path, monkeypatch
):
    """A 2-step run through the server: a push before step 1 and after each step (``time/weight_sync``), and
    the server's log-probs are the trainer's on the sampled tokens (the same weights: only float rounding).
    The in-training eval at step 2 generates through the server too."""
    import json

    from mmreason.cli import main
    from mmreason.rollout.backends.vllm_client import VLLMClient

    _, port = server
    sample, rows_asked = VLLMClient.sample, []

    def counted(self, prompts, n, settings, seeds):
        rows_asked.append(n)
        return sample(self, prompts, n, settings, seeds)

    monkeypatch.setattr(VLLMClient, "sample", counted)
    out = tmp_path / "run"
    assert main(_train_args(tiny_model_dir, port, out, "max_steps=2", "eval_steps=2", "eval_limit=4")) == 0
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2]  # the eval before step 1, then the steps
    assert "eval/shapes/accuracy" in rows[0] and "eval/shapes/accuracy" in rows[-1]
    assert rows_asked.count(2) == 2 and 1 in rows_asked  # the steps' G = 2 rows, and the eval's one row a doc
    for r in rows[1:]:
        assert r["time/weight_sync"] > 0 and 0 <= r["mismatch/logprob_abs_diff_mean"] < 1e-3
        assert r["mismatch/ratio_outside_frac"] == 0.0


def _eval_samples(out):
    import glob
    import json

    (samples,) = glob.glob(str(out / "*" / "*_samples_shapes.jsonl"))
    (results,) = glob.glob(str(out / "*" / "*_results.json"))
    rows = [json.loads(x) for x in open(samples).read().splitlines()]
    return [(r["response"], r["completion_tokens"]) for r in rows], json.loads(open(results).read())


def test_eval_through_the_server_scores_as_hf_on_the_evaluated_models_weights(
    server, policy, tiny_model_dir, shapes_cache, tmp_path, capsys
):
    """``mmreason eval --model_args backend=vllm,vllm_mode=server,...``: the server first holds other weights
    (the unsharpened tiny model); the eval pushes ``--model``'s, and its greedy completions and score equal the
    HF backend's. A server whose context is shorter than max_prompt_length + max_new_tokens is refused before
    any doc, naming host:port."""
    from mmreason.cli import main
    from mmreason.models import ModelConfig, load_model
    from mmreason.rollout.backends.vllm_client import VLLMClient

    _, port = server
    model, processor = policy
    model.save_pretrained(tmp_path / "model")
    processor.save_pretrained(tmp_path / "model")
    other = VLLMClient("127.0.0.1", port, processor.tokenizer, server_timeout=5)
    try:
        other.sync_weights(load_model(ModelConfig(name_or_path=str(tiny_model_dir), dtype="float32"), trainable=False))
    finally:
        other.close()
    common = [
        "eval",
        "--model",
        str(tmp_path / "model"),
        "--tasks",
        "shapes",
        "--limit",
        "12",
        "--log_samples",
        "--gen_kwargs",
        "max_new_tokens=6",
        "--batch_size",
        "4",
    ]
    server_args = f"backend=vllm,vllm_mode=server,vllm_server_port={port},vllm_server_timeout=5"
    assert main([*common, "--output_path", str(tmp_path / "hf"), "--model_args", "max_prompt_length=1000"]) == 0
    assert (
        main([*common, "--output_path", str(tmp_path / "srv"), "--model_args", f"{server_args},max_prompt_length=1000"])
        == 0
    )
    (hf, hf_results), (ours, our_results) = _eval_samples(tmp_path / "hf"), _eval_samples(tmp_path / "srv")
    assert len(hf) == 12 and ours == hf
    assert our_results["results"]["shapes"]["accuracy,none"] == hf_results["results"]["shapes"]["accuracy,none"]
    assert len({text for text, _ in hf}) > 1  # the rows differ, so equal lists are not a coincidence of one answer
    capsys.readouterr()
    assert main([*common, "--output_path", str(tmp_path / "long"), "--model_args", server_args]) != 0
    err = capsys.readouterr().err
    assert f"127.0.0.1:{port}" in err and "--max_model_len 1024 < the 32774 tokens" in err


@pytest.mark.slow
def test_two_processes_sample_what_one_process_samples_through_one_server(
    server, tiny_model_dir, shapes_cache, tmp_path
):
    """Server mode with 2 training processes (gloo), both clients of the one server (the main process pushes
    the weights, the others wait for it): every group, and every row of it, is token for token what one
    process sampling all 6 prompts gets, since each row's seed comes from (run seed, step, sample id)."""
    import importlib.util
    import json
    import shutil

    if shutil.which("accelerate") is None and not (Path(sys.executable).parent / "accelerate").exists():
        pytest.skip("accelerate CLI not installed")
    _, port = server
    script = ROOT / "tests" / "parallel" / "step_rollouts_main.py"

    def overrides(out, prompts):
        return [
            f"model.name_or_path={tiny_model_dir}",
            "data.task=shapes",
            "data.max_prompt_length=512",
            f"output_dir={out}",
            f"prompts_per_step={prompts}",
            "rollout.num_generations=4",
            "rollout.max_completion_length=12",
            "rollout.temperature=1.0",
            "num_threads=1",
            "eval_steps=0",
            "rewards=[{name: anls}]",
            "rollout.backend=vllm",
            "rollout.vllm_mode=server",
            f"rollout.vllm_server_port={port}",
            "rollout.vllm_server_timeout=5",
        ]

    env = {**os.environ, "MMREASON_CACHE": str(shapes_cache), "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    two = subprocess.run(
        [
            str(Path(sys.executable).parent / "accelerate"),
            "launch",
            "--config_file",
            str(ROOT / "configs/accelerate/ddp_cpu.yaml"),
            str(script),
            str(tmp_path / "two.json"),
            *overrides(tmp_path / "two", 3),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert two.returncode == 0, two.stderr[-3000:]
    spec = importlib.util.spec_from_file_location("step_rollouts_main", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(str(tmp_path / "one.json"), overrides(tmp_path / "one", 6))  # this process, alone
    a, b = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("two", "one"))
    assert (a["processes"], b["processes"]) == (2, 1)
    assert len(a["groups"]) == 6 and sorted(a["groups"]) == sorted(b["groups"])
    for key, rows in b["groups"].items():
        assert a["groups"][key] == rows, key
        assert len(rows) == 4 and len({text for _, text in rows}) > 1  # it sampled


@pytest.mark.slow
def test_fsdp2_with_two_processes_pushes_the_whole_gathered_model(
    server, policy, tiny_model_dir, shapes_cache, tmp_path
):
    """Server mode under FSDP2 (2 gloo processes, configs/accelerate/fsdp_cpu.yaml): each push goes through the
    server's weights group, every process gathering one tensor at a time and the main process broadcasting it
    (the server counts collective pushes only; before, the whole model was gathered and written to its weights
    folder every step). The server first holds other weights
    (the tiny model plus noise); after the push before step 1
    and the one after step 1's update, the server's log-probs are the trainer's on every sampled token of both
    steps (a push of one shard, or none, would leave the server's weights, and the gap, far off)."""
    import json

    from mmreason.models import ModelConfig, load_model
    from mmreason.rollout.backends.vllm_client import VLLMClient, server_info

    accelerate = Path(sys.executable).parent / "accelerate"
    if not accelerate.exists():
        pytest.skip("accelerate CLI not installed")
    _, port = server
    _, processor = policy
    noisy = load_model(ModelConfig(name_or_path=str(tiny_model_dir), dtype="float32"), trainable=False)
    generator = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for p in noisy.parameters():
            p.add_(torch.randn(p.shape, generator=generator) * 0.05)
    other = VLLMClient("127.0.0.1", port, processor.tokenizer, server_timeout=5)
    try:
        other.sync_weights(noisy)
    finally:
        other.close()
    before = server_info("127.0.0.1", port, 5)["pushes"]
    out = tmp_path / "fsdp"
    env = {**os.environ, "MMREASON_CACHE": str(shapes_cache), "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    two = subprocess.run(
        [
            str(accelerate),
            "launch",
            "--config_file",
            str(ROOT / "configs/accelerate/fsdp_cpu.yaml"),
            "-m",
            "mmreason",
            *_train_args(tiny_model_dir, port, out, "max_steps=2", "save_steps=0", "learning_rate=3e-3"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert two.returncode == 0, two.stderr[-3000:]
    assert "processes: 2" in two.stdout and "fsdp2:" in two.stdout  # sharded, not silently DDP
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        assert r["time/weight_sync"] > 0 and 0 <= r["mismatch/logprob_abs_diff_max"] < 1e-3
        assert r["mismatch/ratio_outside_frac"] == 0.0
    after = server_info("127.0.0.1", port, 5)["pushes"]
    assert after["directory"] == before["directory"]  # no file: the tensors went through the weights group
    assert after["collective"] - before["collective"] >= 2  # the push before step 1, each update's


def test_a_dead_server_stops_the_run_with_the_last_finished_step(
    server, tiny_model_dir, shapes_cache, tmp_path, monkeypatch, capsys
):
    """The server is killed (SIGKILL) right after step 1's push: step 2's generation finds nobody at
    host:port, the run saves step 1 and stops with a message naming the server and ``resume=auto``."""
    from mmreason.cli import main
    from mmreason.rollout.backends.vllm_client import VLLMClient

    proc, port = server
    push, pushes = VLLMClient.sync_weights, []

    def push_then_die(self, model, state=None):
        seconds = push(self, model, state)
        pushes.append(seconds)
        if len(pushes) == 2:  # the push before step 1, then step 1's
            proc.kill()
            proc.wait(timeout=60)
        return seconds

    monkeypatch.setattr(VLLMClient, "sync_weights", push_then_die)
    out = tmp_path / "run"
    assert main(_train_args(tiny_model_dir, port, out, "max_steps=3", "save_steps=0")) == 2
    err = capsys.readouterr().err
    assert "run stopped at step 2" in err and f"vLLM server at 127.0.0.1:{port}" in err and "resume=auto" in err
    assert [p.name for p in out.glob("checkpoint-*")] == ["checkpoint-1"]
