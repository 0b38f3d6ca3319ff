"""The engine registry and the engine facts table agree: every kind has an adapter, a facts row and known flags;
a kind missing from either side is reported (docs/engines.md, "Engine facts")."""

from __future__ import annotations

import dataclasses

import pytest

from labkit.errors import LabkitError
from labkit.recipe import ENGINE_FACTS, Invalid, engine_facts
from labkit.recipe.enginefacts import ENGINE_KINDS, EngineFacts, ParallelFlags, RequestMetricsFlags
from labkit.recipe.fields import recipe_fields
from labkit.recipe.lookup import load_plan
from labkit.recipe.specs import Parallel
from labkit.serve.engines import ENGINES, Engine, NodeSpec, engine_for, registry_problems
from labkit.serve.engines.vllm import Vllm

NODES = [NodeSpec("dgx5", "10.0.0.5"), NodeSpec("dgx6", "10.0.0.6")]


def plan_of(kind: str, parallel: Parallel | None = None):
    """The sim recipe's plan run by `kind` (the sim's own args kept only for the sim)."""
    plan = load_plan("sim")
    engine = dataclasses.replace(
        plan.engine,
        kind=kind,
        args=plan.engine.args if kind == "sim" else (),
        parallel=parallel or plan.engine.parallel,
    )
    return dataclasses.replace(plan, engine=engine)


def test_every_engine_kind_has_an_adapter_a_facts_row_and_known_flags():
    assert list(ENGINES) == list(ENGINE_FACTS) == list(ENGINE_KINDS)
    assert registry_problems() == []
    for kind, adapter in ENGINES.items():
        assert adapter.known_flags, kind


def test_the_recipe_accepts_exactly_the_kinds_of_the_table():
    engine = recipe_fields(partial=True)["engine"].check  # the [engine] table as an overlay checks it
    for kind in ENGINE_KINDS:
        assert engine({"kind": kind}, "engine")["kind"] == kind
    with pytest.raises(Invalid, match="tgi"):
        engine({"kind": "tgi"}, "engine")


def test_facts_and_adapters_agree():
    for kind, adapter in ENGINES.items():
        assert adapter.kind == kind == ENGINE_FACTS[kind].kind
        engine = engine_for(plan_of(kind))
        assert type(engine) is adapter
        assert engine.kind_facts is ENGINE_FACTS[kind]
        assert ENGINE_FACTS[kind].parallel.all_flags <= adapter.known_flags


def test_an_unknown_kind_is_an_error_not_a_default():
    with pytest.raises(ValueError, match="unknown engine kind 'tgi'"):
        engine_facts("tgi")
    plan = load_plan("sim")
    with pytest.raises(ValueError, match="unknown engine kind 'tgi'"):
        engine_for(dataclasses.replace(plan, engine=dataclasses.replace(plan.engine, kind="tgi")))


class Tgi(Engine):
    kind = "tgi"
    known_flags = frozenset({"--num-shard"})


TGI_FACTS = EngineFacts(
    kind="tgi",
    name="TGI",
    runtime="docker",
    model_format="hf",
    nodes="one",
    parallel=ParallelFlags(tp=("--num-shard",)),
    flexible_flags=False,
    request_metrics=RequestMetricsFlags(),
)


def test_a_fake_extra_kind_missing_a_row_or_an_adapter_is_detected():
    assert registry_problems({**ENGINES, "tgi": Tgi}, ENGINE_FACTS) == [
        "tgi: an adapter (Tgi) but no engine facts row"
    ]
    assert registry_problems(ENGINES, {**ENGINE_FACTS, "tgi": TGI_FACTS}) == [
        "tgi: an engine facts row but no adapter in ENGINES"
    ]
    assert registry_problems({**ENGINES, "tgi": Tgi}, {**ENGINE_FACTS, "tgi": TGI_FACTS}) == []


def test_an_adapter_that_disagrees_with_its_row_is_detected():
    class Unlisted(Tgi):
        known_flags = frozenset({"--port"})

    class Silent(Tgi):
        known_flags = frozenset()

    facts = {**ENGINE_FACTS, "tgi": TGI_FACTS}
    assert registry_problems({**ENGINES, "tgi": Unlisted}, facts) == [
        "tgi: parallelism flags not in Unlisted.known_flags: --num-shard"
    ]
    assert "tgi: Silent.known_flags is empty" in registry_problems({**ENGINES, "tgi": Silent}, facts)
    assert (
        registry_problems({**ENGINES, "tgi": Vllm}, facts)[0] == "tgi: adapter kind 'vllm', facts kind 'tgi'"
    )


def test_one_node_engines_refuse_two_nodes_and_the_others_launch_on_each():
    for kind, adapter in ENGINES.items():
        plan = plan_of(kind)
        if ENGINE_FACTS[kind].nodes == "one":
            with pytest.raises(LabkitError, match="runs on one node"):
                adapter.for_plan(plan).launch(plan, NODES)
        else:
            assert [ln.node for ln in adapter.for_plan(plan).launch(plan, NODES)] == ["dgx5", "dgx6"]


def test_the_adapters_add_the_first_flag_of_each_axis_of_their_row():
    plan_sizes = Parallel(tp=2, pp=2, dp=2, ep=2)
    for kind, adapter in ENGINES.items():
        table = ENGINE_FACTS[kind].parallel
        plan = plan_of(kind, plan_sizes)
        (ln,) = adapter.for_plan(plan).launch(plan, NODES[:1])
        for axis in ("tp", "pp", "dp", "ep"):
            flags = table.axis(axis)
            if not flags:
                continue
            at = ln.argv.index(flags[0])
            if axis == "ep" and table.ep_switch:
                assert ln.argv[at + 1].startswith("-"), kind
            else:
                assert ln.argv[at + 1] == "2", (kind, axis)
            assert not set(flags[1:]) & set(ln.argv), (kind, axis)
