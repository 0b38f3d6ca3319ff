"""The simulator's one flag per setting: `--decode-tps 40` is `--set decode_tps=40`, applied in command-line
order with the --set items, named in its own errors, listed by --help (so `labkit doctor` and the sweep flag
check find it), and the sim adapter's known_flags are exactly the flags of that help."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from labkit.measures import CONTENT
from labkit.serve.enginehelp import help_flags
from labkit.serve.engines.sim import Sim
from labkit.sim import add_cli_arguments
from labkit.sim.config import FIELDS, build_config


def parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m labkit.sim")
    add_cli_arguments(p)
    return p.parse_args(list(argv))


def config(*argv: str):
    """The SimConfig `python -m labkit.sim ARGV` would serve (as labkit.sim.cli.run builds it)."""
    a = parse(*argv)
    kw = dict(flavor=a.flavor, host=a.host, port=a.port, model_name=a.model_name)
    return build_config(a.preset, a.config, a.sets, **kw)


@pytest.fixture(scope="module")
def sim_help() -> str:
    out = subprocess.run([sys.executable, "-m", "labkit.sim", "--help"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_a_setting_flag_is_the_same_as_its_set_item():
    assert config("--decode-tps", "40") == config("--set", "decode_tps=40")
    assert config("--decode-tps", "40").decode_tps == 40.0
    both = ("--spec-method", "mtp", "--spec-k", "2", "--spec-accept", "0.9,0.5", "--prefix-caching", "false")
    sets = ("--set", "spec_method=mtp", "spec_k=2", "spec_accept=0.9,0.5", "prefix_caching=false")
    assert config(*both) == config(*sets)
    assert config(*both).spec_accept == [0.9, 0.5] and config(*both).prefix_caching is False


def test_setting_flags_and_set_items_apply_in_command_line_order_after_preset_and_file(tmp_path):
    assert config("--decode-tps", "40", "--set", "decode_tps=30").decode_tps == 30.0
    assert config("--set", "decode_tps=30", "--decode-tps", "40").decode_tps == 40.0
    assert config("--decode-tps", "40", "--decode-tps", "41").decode_tps == 41.0
    file = tmp_path / "sim.toml"
    file.write_text("decode_tps = 7.0\nprefill_tps = 123.0\n")
    cfg = config("--preset", "test", "--config", str(file), "--decode-tps", "9")
    assert (cfg.decode_tps, cfg.prefill_tps, cfg.max_model_len) == (9.0, 123.0, 8192)  # 8192: the preset's


def test_a_bad_value_is_named_by_its_flag(capsys):
    with pytest.raises(SystemExit) as e:
        parse("--decode-tps", "fast")
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "argument --decode-tps: sim setting decode_tps: cannot read 'fast' as float" in err


def test_help_lists_a_flag_per_setting_and_no_second_spelling_of_the_explicit_ones(sim_help):
    flags = help_flags(sim_help)
    assert "--prefill-chunk-tokens" in flags and "--decode-tps" in flags and "--fault-hold-until" in flags
    explicit = {"preset", "flavor", "host", "port", "model_name"}
    assert {"--" + k.replace("_", "-") for k in FIELDS if k not in explicit} <= flags
    # the acceptance per prompt content has its flags too, so a sweep can walk it (--over)
    assert {f"--spec-accept-{c}" for c in CONTENT} <= flags
    assert "settings:" in sim_help and "--decode-tps X" in sim_help and "float, default 50.0" in sim_help
    assert "--model_name" not in flags and sim_help.count("\n  --host ") == 1


def test_the_sim_adapters_known_flags_are_the_flags_of_its_help(sim_help):
    assert Sim.known_flags == help_flags(sim_help)
