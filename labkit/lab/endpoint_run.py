"""A run measured on an endpoint this run did not boot (`labkit bench`), stored like a lane's run and marked as
such: the lane's running engine at its client address (after `labkit up`), an endpoint given by URL for a
recipe's lane, or a bare endpoint under a lane of its own. Without a stored run, the up/bench/down path and every
endpoint labkit did not boot never reached the tables.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from labkit.errors import LabkitError
from labkit.lab.rooflines import measured_roofline
from labkit.lab.runs import refuse_empty, run_provenance, store_result, write_records
from labkit.recipe import LanePlan, MeasurePlan

if TYPE_CHECKING:
    from labkit.measure import BenchOptions, BenchResult
    from labkit.store import Run

EndpointOrigin = Literal["lane", "url", "bare"]

# what a stored run says about the engine it measured (provenance.endpoint_origin, boot.source)
ORIGINS: dict[EndpointOrigin, str] = {
    "lane": "the lane's client address, booted before this run (labkit up, or by hand as the recipe says)",
    "url": "an endpoint given by --url for the recipe's lane; labkit did not boot it",
    "bare": "a bare endpoint measured under a lane of its own; labkit did not boot it",
}
BARE_VARIANT = "endpoint"  # the variant id of a bare endpoint's lane: it has no recipe, so no axes


@dataclass(frozen=True)
class EndpointRun:
    """What `measure_endpoint` stored for one repetition: the result and its run folder."""

    result: BenchResult
    path: Path


def bare_lane(name: str, url: str) -> dict[str, Any]:
    """The plan a bare endpoint's run is stored under: a lane `name` that is no recipe's (refused when `name`
    names one: the run would then sit among that recipe's runs without its plan)."""
    from labkit.recipe import recipe_named

    found = recipe_named(name)
    if found is not None:
        raise LabkitError(
            f"--lane {name!r} names the recipe {found!r}: give the recipe as the target "
            f"(labkit bench {found} --url {url}), or choose another lane name"
        )
    return {"recipe": name, "variant_id": BARE_VARIANT, "label": name, "variants": {}, "resolved": {}}


def measure_endpoint(
    plan: LanePlan | dict[str, Any],
    measure: MeasurePlan,
    url: str,
    options: BenchOptions,
    origin: EndpointOrigin,
    results: str | Path | None = None,
) -> list[EndpointRun]:
    """Measure `url` with `measure` into fresh run folders under `plan`'s lane, one per repetition
    (`measure.runs`) as `labkit run` stores them; only the first may meet a cold engine. A request-less
    repetition or an interruption leaves its folder failed with what was measured, as a lane's run does."""
    from labkit.store import ResultsStore

    prov = run_provenance(plan) if isinstance(plan, LanePlan) else {}
    prov.update(endpoint_origin=origin, endpoint_note=ORIGINS[origin])
    store = ResultsStore(results)
    once = dataclasses.replace(measure, runs=1)
    done = []
    for i in range(measure.runs):
        seed = None if measure.seed is None else f"{measure.seed}/{i}"
        each = dataclasses.replace(options, cold_expected=options.cold_expected and i == 0, prompt_seed=seed)
        done.append(_one(store.new_run(plan, provenance=prov), plan, once, url, each, origin))
    return done


def _one(
    run: Run,
    plan: LanePlan | dict[str, Any],
    measure: MeasurePlan,
    url: str,
    options: BenchOptions,
    origin: str,
) -> EndpointRun:
    from labkit.measure import run_bench

    with run:
        result = run_bench(
            url,
            measure,
            dataclasses.replace(options, run_id=run.run_id, on_partial=functools.partial(write_records, run)),
        )
        refuse_empty(run, result)
        if not isinstance(plan, LanePlan):  # a bare lane is simulated when the engine says so
            run.update(simulated=bool(result.provenance.get("simulated")))
        boot = {"source": "not booted by this run", "endpoint_origin": origin}
        roof = measured_roofline(plan, boot, result) if isinstance(plan, LanePlan) else None
        store_result(run, result, boot, roofline=roof)
    return EndpointRun(result, run.path)
