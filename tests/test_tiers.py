"""Test tiers (tests/support/tiers.py): every collected test has one, and known tests have the tiers of what they
start. The suite is collected in a subprocess, as `make test-fast` collects it, with a plugin that prints each
test's markers."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.record import REPO
from tests.support.tiers import TIERS, ModuleCode, tiers_of_test

PLUGIN = """
def pytest_collection_finish(session):
    for item in session.items:
        print(f"MARKS {item.nodeid}\t{','.join(sorted({m.name for m in item.iter_markers()}))}")
"""

KNOWN = {
    "tests/report/test_compare.py::test_welch_matches_scipy": {"pure"},
    "tests/report/test_compare.py::test_compare_on_the_stored_sim_lanes_prints_the_correction_it_applied": {
        "pure",
        "record",
    },
    "tests/measure/test_runner_sim.py::test_cold_turn_detected_and_matches_truth": {"sim"},
    "tests/lab/test_run_output.py::test_labkit_run_bench_logs_the_measured_table_as_text": {
        "sim",
        "notebook",
    },
    "tests/lab/test_lab.py::test_users_papermill_command_leaves_a_complete_run": {"notebook"},
    "tests/lab/test_notebooks.py::test_compare_notebook_runs_against_temp_results_and_writes_tables": {
        "notebook",
        "record",
    },
    "tests/serve/test_serve_teardown.py::test_unwritable_log_file_does_not_skip_removal": {"ssh"},
    "tests/stage/test_staging_ssh.py::test_four_nodes_get_verified_views_then_verification_only": {"ssh"},
    "tests/serve/test_llamacpp_server.py::test_boot_log_facts_are_in_stderr": {"llamacpp"},
    "tests/measure/test_vllm_real.py::test_acceptance_is_x_of_4_with_k_from_the_engine": {"vllm"},
    "tests/serve/test_docker_real.py::test_boot_facts_come_from_the_containers_log_and_it_serves": {
        "docker",
        "vllm",
    },
    "tests/cli/test_cli.py::test_check_passes_on_shipped_recipes": {"pure"},
    # needs llama-cpp-python only through its skipif decorator
    "tests/cli/test_cli.py::test_show_points_the_commands_at_a_labkit_built_model_without_building_it": {
        "llamacpp"
    },
}


@pytest.fixture(scope="module")
def marks(tmp_path_factory) -> dict[str, set[str]]:
    """{test id: its markers} for the whole suite, as collected in a subprocess."""
    folder = tmp_path_factory.mktemp("plugin")
    (folder / "markdump.py").write_text(PLUGIN)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(folder)])}
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-p", "markdump"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    out = {}
    for line in r.stdout.splitlines():
        if line.startswith("MARKS "):
            test, _, names = line.removeprefix("MARKS ").rpartition("\t")
            out[test] = set(names.split(","))
    return out


def test_every_test_has_a_tier(marks):
    assert len(marks) > 1000
    assert [t for t, m in marks.items() if not m & set(TIERS)] == []


@pytest.mark.parametrize("test", sorted(KNOWN))
def test_known_tests_have_their_tiers(marks, test):
    assert test in marks
    assert marks[test] & {*TIERS, "record"} == KNOWN[test]


def test_a_helper_is_followed_to_the_support_module_it_calls():
    code = ModuleCode(
        "from tests.support import lanes\n"
        "from tests.support.vllm import serve\n"
        "X = 3\n"
        "def _boot(p):\n    return lanes.sim_recipe(p, port=X)\n"
        "def _argv():\n    return ['python', '-m', 'labkit', 'run', 'bench']\n"
        "def test_a(tmp_path):\n    _boot(tmp_path)\n"
        "def test_b():\n    import subprocess\n    subprocess.run(_argv())\n"
        "def test_c():\n    assert X == 3\n"
    )
    assert code.tiers(["test_a"]) == {"sim"}
    assert code.tiers(["test_b"]) == {"notebook"}
    assert code.tiers(["test_c"]) == set()


def test_a_modules_pytestmark_applies_to_each_of_its_tests():
    code = ModuleCode(
        "import pytest\n"
        "from tests.support.vllm import vllm_available\n"
        "pytestmark = pytest.mark.skipif(vllm_available() is not None, reason='')\n"
        "def test_a():\n    pass\n"
    )
    assert code.tiers(["test_a"]) == {"vllm"}


def test_a_fixture_defined_in_a_support_module_gives_that_modules_tier(tmp_path):
    """A fixture added to tests/support/vllm.py (or any listed module) tiers its tests without a list."""
    module = tmp_path / "test_x.py"
    module.write_text("def test_x(engine):\n    pass\n")
    assert tiers_of_test(module, "test_x", {"engine": {"tests.support.vllm"}}) == {"vllm"}
    assert tiers_of_test(module, "test_x", {"cluster": {"tests.conftest"}}) == {"ssh"}
    assert tiers_of_test(module, "test_x", {"tmp_path": {"_pytest.tmpdir"}}) == {"pure"}
