"""The device probe's script run for real on this CPU, by the interpreter that runs labkit's vLLM lanes (it has
torch) and by one that sees neither torch nor numpy (`-S`: no site-packages): figures in the first case, a
warning that says why in the second, never a refusal. No assertion is about how fast this machine is."""

from __future__ import annotations

import subprocess
import sys

import pytest

from labkit.nodes import Result
from labkit.serve.devprobe import MARK, PROBE_BYTES, parse_probe, probe_argv
from labkit.serve.verdict import OK, WARN


def _run(argv: list[str]) -> Result:
    p = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    return Result("localhost", " ".join(argv[:2]), p.stdout, p.stderr, p.returncode)


def test_the_probe_measures_this_cpu_with_the_engines_torch():
    pytest.importorskip("torch", reason="the probe's torch path needs torch in this interpreter")
    check = parse_probe("localhost", _run(probe_argv(sys.executable)), "2026-12-07T00:00:00+00:00")
    f = check.facts
    assert (
        check.status == OK and f["tool"].startswith("torch ") and (f["kind"], f["device"]) == ("cpu", "cpu")
    )
    assert f["read_bytes_per_s"] > 0 and f["matmul_flops_per_s"] > 0 and f["matmul_dtype"] == "float32"
    assert 0 < f["read_bytes"] <= PROBE_BYTES["cpu"] and f["date"] == "2026-12-07T00:00:00+00:00"
    assert check.result.startswith("cpu: read ") and "GB/s, matmul " in check.result


def test_without_torch_or_numpy_it_warns_and_says_why():
    argv = probe_argv(sys.executable)
    check = parse_probe("n1", _run([argv[0], "-S", *argv[1:]]), "d")
    assert (
        check.status == WARN and check.result == f"not measured: neither torch nor numpy in {sys.executable}"
    )


def test_no_answer_line_is_a_warning_with_the_last_error_line():
    check = parse_probe("n1", Result("n1", "python3", "", "sh: 1: python3: not found\n", 127), "d")
    assert check.status == WARN and check.result == "not measured: sh: 1: python3: not found"
    assert MARK not in check.result
