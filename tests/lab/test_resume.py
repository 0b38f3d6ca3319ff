"""Which sweep points a re-run skips (labkit/lab/resume.py), on hand-made run.json dicts read as stored runs: identical
provenance resumes, a changed recipe or labkit version refuses, a point with fewer runs than asked is
measured again, and the engine facts are held to one value after boot unless the engine itself is swept."""

from __future__ import annotations

import pytest

from labkit import __version__, lab
from labkit.lab.resume import Resume, boot_fingerprint, fingerprint, plan_resume
from labkit.store import SweepPoint
from tests.support.results import stored_run

DT = 'engine.args."--decode-tps"'


def _doc(plan, run_id, version="0.33.0+labkit.sim", recipe_hash=None, labkit=__version__):
    return stored_run(
        {
            "run_id": run_id,
            "status": "complete",
            "labkit_version": labkit,
            "plan": {**plan.to_dict(), "recipe_hash": recipe_hash or plan.recipe_hash},
            "boot": {"engine_version": version},
        }
    )


@pytest.fixture
def sp():
    return lab.sweep_plan("sim", f"{DT}=20,40")


def test_identical_provenance_resumes_and_fewer_runs_do_not(sp):
    a, b = sp.plans
    docs = {"r1": _doc(a, "r1"), "r2": _doc(b, "r2")}
    points = [
        SweepPoint(a.variant_id, {"dt": 20}, "measured", ["r1"]),
        SweepPoint(b.variant_id, {}, "failed"),
    ]
    resume = plan_resume(points, sp.plans, docs, "sim/x")
    assert resume.done == {a.variant_id: ["r1"]} and resume.engine["engine version"] == "0.33.0+labkit.sim"
    import dataclasses

    three = [dataclasses.replace(p, measure=dataclasses.replace(p.measure, runs=3)) for p in sp.plans]
    assert plan_resume(points, three, docs, "sim/x").done == {}  # 1 run stored, 3 asked for
    gone = {"r2": docs["r2"]}  # r1's folder is gone: measured again, no refusal
    assert plan_resume(points, sp.plans, gone, "sim/x").done == {}


def test_changed_recipe_or_labkit_version_refuses_naming_point_and_fact(sp):
    a, _ = sp.plans
    points = [SweepPoint(a.variant_id, {"dt": 20}, "measured", ["r1"])]
    for doc, fact in (
        (_doc(a, "r1", recipe_hash="0ld"), "recipe content"),
        (_doc(a, "r1", labkit="0.0.1"), "labkit version"),
    ):
        with pytest.raises(lab.resume.SweepRefused, match=f"{a.variant_id} \\(run r1\\): {fact}") as err:
            plan_resume(points, sp.plans, {"r1": doc}, "sim/x")
        assert "--fresh" in str(err.value)


def test_boots_are_held_to_the_first_engine_unless_the_engine_is_swept(sp):
    a, _ = sp.plans
    r = Resume()
    r.check_boot(boot_fingerprint(a, {"engine_version": "1.0"}))
    with pytest.raises(lab.resume.SweepRefused, match=r"engine version 1.0 \(now 2.0\)"):
        r.check_boot(boot_fingerprint(a, {"engine_version": "2.0"}))
    swept = Resume(engine_swept=True)
    swept.check_boot(boot_fingerprint(a, {"engine_version": "1.0"}))
    swept.check_boot(boot_fingerprint(a, {"engine_version": "2.0"}))  # the swept thing may differ
    assert lab.sweep_plan("sim", 'engine.version="a","b"').engine_swept and not sp.engine_swept
    assert fingerprint(_doc(a, "r"))["engine image"] == "none (process runtime)"


def test_a_stored_sweep_over_another_key_under_the_same_short_name_is_refused(sp, tmp_path):
    """check_folders reads each stored run's provenance.sweep.axes (a key path per short name) as parsed."""
    import json

    from labkit.errors import LabkitError
    from labkit.lab.sweep_run import check_folders

    folder = tmp_path / "sim" / sp.plans[0].variant_id / "r1"
    folder.mkdir(parents=True)

    def store(key: list[str]) -> None:
        doc = {"run_id": "r1", "schema_version": 1, "provenance": {"sweep": {"axes": {"dt": key}}}}
        (folder / "run.json").write_text(json.dumps(doc))

    store(["engine", "env", "DT"])
    with pytest.raises(LabkitError, match="holds a sweep over engine.env.DT under the short name 'dt'"):
        check_folders(sp, tmp_path)
    store(["engine", "args", "--decode-tps"])
    check_folders(sp, tmp_path)  # the same key: the same lane folder
