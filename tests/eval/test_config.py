"""lmms-eval style flags: --model_args / --gen_kwargs parsing, --limit, --tasks specs."""

from __future__ import annotations

import pytest

from mmreason.config import ConfigError
from mmreason.eval.config import parse_gen_kwargs, parse_kv, parse_model_args, resolve_limit
from mmreason.eval.tasks import load_task, parse_task_specs


def test_key_value_strings_are_typed():
    assert parse_kv("temperature=0,max_new_tokens=256, top_p=0.9", "--gen_kwargs") == {
        "temperature": 0,
        "max_new_tokens": 256,
        "top_p": 0.9,
    }
    args = parse_model_args("min_pixels=3136,max_pixels=802816,attn_implementation=sdpa,dtype=bfloat16")
    assert (args.min_pixels, args.max_pixels, args.attn_implementation, args.dtype) == (
        3136,
        802816,
        "sdpa",
        "bfloat16",
    )
    gen = parse_gen_kwargs("temperature=0.7,top_k=20")
    assert (gen.temperature, gen.top_k, gen.max_new_tokens) == (0.7, 20, 256)


def test_bad_keys_and_values_name_themselves():
    with pytest.raises(ConfigError, match=r"--model_args: unknown config key 'max_pixel'.*'max_pixels'"):
        parse_model_args("max_pixel=100")
    with pytest.raises(ConfigError, match=r"max_new_tokens.*integer"):
        parse_gen_kwargs("max_new_tokens=lots")
    with pytest.raises(ConfigError, match="key=value"):
        parse_gen_kwargs("temperature")


def test_do_sample_flag():
    assert parse_gen_kwargs("temperature=0.8,do_sample=false").temperature == 0.0
    with pytest.raises(ConfigError, match="do_sample=true needs temperature > 0"):
        parse_gen_kwargs("do_sample=true")


def test_limit_counts_and_fractions():
    assert resolve_limit(None, 10) == 10
    assert resolve_limit(4, 10) == 4
    assert resolve_limit(50, 10) == 10
    assert resolve_limit(0.25, 10) == 3  # ceil(2.5)


def test_task_specs():
    assert parse_task_specs("shapes, shapes:data/my.jsonl") == [("shapes", None), ("shapes", "data/my.jsonl")]
    assert parse_task_specs(["a,b", "c"]) == [("a", None), ("b", None), ("c", None)]
    with pytest.raises(ValueError, match="names no task"):
        parse_task_specs(" , ")


@pytest.mark.parametrize("spec", ["videoqa:", "videoqa: ", "shapes,videoqa:"])
def test_an_empty_path_after_the_colon_is_an_error_naming_it(spec):
    """``--tasks videoqa:$H`` with ``H`` unset used to evaluate the pack's default split without a word."""
    with pytest.raises(ValueError, match=r"--tasks 'videoqa:': no data file after the colon \(PACK:PATH\)"):
        parse_task_specs(spec)


def test_an_empty_task_path_stops_the_eval_command_before_the_model_loads(capsys):
    from mmreason.cli import main

    # --model does not exist either: the task spec is checked first
    assert main(["eval", "--model", "no-such-model", "--tasks", "videoqa:"]) == 2
    assert "--tasks 'videoqa:': no data file after the colon" in capsys.readouterr().err


def test_unknown_task_lists_the_valid_ones(shapes_cache):
    with pytest.raises(KeyError, match=r"unknown task 'shapez'.*did you mean 'shapes'"):
        load_task("shapez", None)
    with pytest.raises(FileNotFoundError, match="nothere.jsonl"):
        load_task("shapes", "nothere.jsonl")


def test_vllm_server_model_args_are_typed_and_checked():
    args = parse_model_args(
        "backend=vllm,vllm_mode=server,vllm_server_host=localhost,vllm_server_port=8123,vllm_generate_timeout=30"
    )
    assert (args.vllm_mode, args.vllm_server_host, args.vllm_server_port) == ("server", "localhost", 8123)
    assert args.vllm_generate_timeout == 30.0 and args.vllm_server_timeout == 240.0
    with pytest.raises(ConfigError, match="vllm_mode=server needs backend=vllm"):
        parse_model_args("vllm_mode=server")
    with pytest.raises(ConfigError, match="vllm_mode: 'remote' is not colocate or server"):
        parse_model_args("backend=vllm,vllm_mode=remote")
    with pytest.raises(ConfigError, match="vllm_server_port"):
        parse_model_args("backend=vllm,vllm_mode=server,vllm_server_port=70000")
