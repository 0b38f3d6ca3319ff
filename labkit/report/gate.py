"""The comparability gate: what differs between two sets of stored runs besides what was meant to differ.

Pure: stored runs (store.StoredRun) in, a Gate out. Each fact (simulated or real, source, engine image, engine version,
labkit version, measurement plan, prompt set, prompt content, recipe content) is read from every run of both sides; a fact
that differs between the sides, or within one side, is listed. Simulated against real and different
measurement plans (for imports, different settings) make the comparison meaningless, so they block it unless
forced. Recipe keys that the
varied variant axes set are expected and said so. docs/compare.md, "The comparability gate".
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from labkit.measure import WORKLOADS
from labkit.store import IMPORT_SOURCE, UNKNOWN, MeasureInfo, StoredBoot, StoredPlan, StoredRun, tool_label

# measure keys that say how often to repeat, not what one run measures
REPETITION_KEYS = (
    "runs",
    "target_ci",
    "max_runs",
    "target_measures",
    "seed",
    "telemetry_period",
    "clock_drop",
)

BLOCKING = ("simulated", "measurement plan")
# resolved keys that are not recipe content: the measure table is its own fact, labels only name the lane
NOT_CONTENT = ("measure.", "lane.label", "lane.description", "lane.aliases")


def workload_keys(*roles: str) -> tuple[str, ...]:
    """The [measure] keys of the registry's workloads of these roles, in registry order. "content" and "added"
    workloads add measures of their own without changing the others (windows of their own, prompts no other
    workload shares): listed as facts of their own ("prompt content", "added workloads"), never blocking
    (labkit/measure/workloads/base.py, Role); a workload's other tables (`also_keys`) after its own. Read at
    each call, so every registered workload counts."""
    return tuple(key for w in WORKLOADS.values() if w.role in roles for key in (w.recipe_key, *w.also_keys))


@dataclass(frozen=True)
class GateItem:
    """One fact that is not the same everywhere: its values on each side, whether it blocks, and a note."""

    fact: str
    a: tuple[str, ...]
    b: tuple[str, ...]
    blocking: bool = False
    note: str = ""

    def line(self) -> str:
        a, b = ", ".join(self.a) or "—", ", ".join(self.b) or "—"
        tail = f" ({self.note})" if self.note else ""
        return f"{self.fact}: A {a} | B {b}{tail}"


@dataclass
class Gate:
    """Every listed difference; `blocked` names the blocking facts (empty: the comparison may go ahead)."""

    items: list[GateItem] = field(default_factory=list)

    @property
    def blocked(self) -> list[str]:
        return [i.fact for i in self.items if i.blocking]

    def to_dict(self) -> dict[str, Any]:
        return {
            "blocked": self.blocked,
            "items": [
                {"fact": i.fact, "a": list(i.a), "b": list(i.b), "blocking": i.blocking, "note": i.note}
                for i in self.items
            ],
        }


def measure_plan(doc: StoredRun) -> str:
    """What one run measured (api, decode and prefill sweeps, timeout), without the repetition settings; for an
    imported run, the tool and the setting its file gives (concurrency, lengths, depth, rate)."""
    if imported(doc):
        # the tool and the setting its file gives, as the import stored them for comparison
        # (exchange Setting.comparable: no request count, counted lengths by scale)
        compared = doc.plan.imported.compared if doc.plan.imported else {}
        return json.dumps({"imported": compared}, sort_keys=True)
    m = dict(doc.plan.measure or doc.provenance.plan)
    for key in REPETITION_KEYS + workload_keys("content", "added"):
        m.pop(key, None)
    return json.dumps(m, sort_keys=True) if m else "not recorded"


def prompt_content(doc: StoredRun) -> str:
    """The content categories a run measured besides the default synthetic prose, in plan order."""
    content = doc.plan.measure.get("content")
    return ", ".join(content) if content else "synthetic prose only"


def added_workloads(doc: StoredRun) -> str:
    """The workloads a run added beside the fresh-prompt phases: its sessions, idle turns and depths."""
    m = doc.plan.measure
    parts = [f"{key} {json.dumps(m[key], sort_keys=True)}" for key in workload_keys("added") if m.get(key)]
    return "; ".join(parts) or "none"


def node_versions(doc: StoredRun) -> str:
    """The kernel, driver, CUDA and NIC firmware the run's nodes booted with (each distinct set once; the nodes
    themselves are the lane's), from the boot state (docs/engines.md, "Boot state")."""
    sets = {
        f"kernel {n.kernel or 'unknown'}, driver {n.driver or 'unknown'}, cuda {n.cuda or 'unknown'}, "
        f"firmware {n.firmware or 'unknown'}"
        for n in doc.boot.state.values()
    }
    return " | ".join(sorted(sets)) or "not recorded"


def compile_caches(doc: StoredRun) -> str:
    """Whether the engine found its compile caches warm, cold (on which nodes) or had none to find."""
    state = doc.boot.state
    if not any(facts.caches for facts in state.values()):
        return "none recorded"
    cold = sorted(node for node, facts in state.items() if facts.cold)
    return f"cold on {', '.join(cold)}" if cold else "warm"


def images(boot: StoredBoot, plan: StoredPlan) -> str:
    """The image ID every node ran (from the pre-boot checks), else the recipe's image name, else none."""
    found = sorted(set(boot.image_ids.values()))
    if found:
        return "+".join(found)
    image = plan.image
    return f"{image} (tag; no image ID recorded)" if image else "none (process runtime)"


def prompt_set(doc: StoredRun) -> str:
    seed = doc.provenance.prompt_seed
    # "7/3" is repetition 3 of seed 7: every run of a lane has its own, the set is the seed before the slash
    return f"seed {str(seed).split('/')[0]}" if seed is not None else "fresh random prompts"


def imported(doc: StoredRun) -> bool:
    return doc.source == IMPORT_SOURCE


def tool_of(doc: StoredRun) -> str:
    """The tool and version an imported run's file names (store.tool_label)."""
    prov = doc.provenance
    return tool_label(str(prov.tool), str(prov.tool_version or UNKNOWN))


def about_rows(doc: StoredRun) -> dict[str, tuple[str, MeasureInfo]]:
    """{labkit measure: (figure key, its measure_info row)} of an imported run's figures that speak of a labkit
    measure, converted into its unit (docs/imports.md, "Definitions"), its load measures at the file's level
    among them (the row's `load_about` as its `about`); {} for a measured run."""
    if not imported(doc):
        return {}
    out = {
        row.about: (key, row)
        for key, row in doc.measure_info.items()
        if row.about and row.converted is not None
    }
    for key, row in doc.measure_info.items():  # the load measure of the file's level, as its own about row
        if row.load_about and row.load_converted is not None and row.load_about not in out:
            as_load = replace(
                row, about=row.load_about, convert=row.load_convert, converted=row.load_converted
            )
            out[row.load_about] = (key, replace(as_load, exact=False))
    return out


def provenance_kind(doc: StoredRun) -> str:
    """Whether labkit measured the run, or which tool's file it came from and what that file could not say."""
    if not imported(doc):
        return doc.source
    return f"external run ({tool_of(doc)}): engine image, engine args and boot unknown"


def figure_definitions(doc: StoredRun) -> dict[str, tuple[str, str]]:
    """{labkit measure: (definition id, its text)} of one run: labkit's own for a measured figure; for an imported
    one, the tool field it came from, unless its definition is labkit's (docs/imports.md, "Definitions")."""
    method = doc.summary.method
    if not imported(doc):
        return {
            k: ("labkit", f"labkit: {method.get(k) or 'docs/measurement.md'}") for k in doc.summary.measures
        }
    out: dict[str, tuple[str, str]] = {}
    for about, (key, row) in about_rows(doc).items():
        text = f"{key}: {method.get(key, '')}"
        ident = row.definition or key  # a tool's definition applied by another: an id of its own
        out[about] = ("labkit", f"labkit (exact, from {text})") if row.exact else (ident, text)
    return out


def definition_items(a: Sequence[StoredRun], b: Sequence[StoredRun]) -> list[GateItem]:
    """A blocking item per labkit measure whose figures on the two sides have different definitions, naming
    both; only where a side holds imported runs (labkit's own measures share one definition)."""
    if not any(imported(d) for d in (*a, *b)):
        return []
    side: list[dict[str, dict[str, str]]] = [{}, {}]
    for i, docs in enumerate((a, b)):
        for doc in docs:
            for measure, (ident, text) in figure_definitions(doc).items():
                side[i].setdefault(measure, {})[ident] = text
    items = []
    for measure in sorted(set(side[0]) & set(side[1])):
        da, db = side[0][measure], side[1][measure]
        if set(da) != set(db) or len(da) > 1:
            items.append(
                GateItem(
                    f"definition of {measure}",
                    tuple(da[k] for k in sorted(da)),
                    tuple(db[k] for k in sorted(db)),
                    blocking=True,
                    note="figures of different definitions (docs/imports.md)",
                )
            )
    return items


FACTS: dict[str, Callable[[StoredRun], str]] = {
    "simulated": lambda d: "simulated" if d.simulated else "real",
    "source": provenance_kind,
    "engine image": lambda d: images(d.boot, d.plan),
    "engine version": lambda d: d.provenance.engine_version or "not recorded",
    "labkit version": lambda d: d.labkit_version or "not recorded",
    "measurement plan": measure_plan,
    "prompt set": prompt_set,
    "prompt content": prompt_content,
    "added workloads": added_workloads,
    "node versions": node_versions,
    "compile caches": compile_caches,
}


def plan_difference(a: str, b: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Two measurement plans (measure_plan's JSON) as just the keys that differ: ("decode.turns=4", ...)."""
    if "not recorded" in (a, b):
        return (a,), (b,)
    fa, fb = flatten(json.loads(a)), flatten(json.loads(b))
    keys = sorted(k for k in set(fa) | set(fb) if fa.get(k) != fb.get(k))
    return tuple(f"{k}={fa.get(k, '—')}" for k in keys), tuple(f"{k}={fb.get(k, '—')}" for k in keys)


def flatten(data: Any, prefix: str = "") -> dict[str, str]:
    """{"engine.args.--x": "value", ...}: nested tables as dotted keys, every leaf as JSON text."""
    if isinstance(data, dict) and data:
        out: dict[str, str] = {}
        for key, value in data.items():
            out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: json.dumps(data, sort_keys=True, default=str)} if prefix else {}


def _values(docs: Sequence[StoredRun], fact: Callable[[StoredRun], str]) -> tuple[str, ...]:
    return tuple(sorted({fact(d) for d in docs}))


def recipe_differences(
    a: Sequence[StoredRun], b: Sequence[StoredRun], expected: Sequence[str] = ()
) -> tuple[list[str], list[str]]:
    """(differing resolved recipe keys outside `expected`, those inside it) between the first run of each side;
    `expected` holds key prefixes the varied axes set. The measure table is the gate's own fact."""
    fa = {k: v for k, v in flatten(dict(a[0].plan.resolved)).items() if not k.startswith(NOT_CONTENT)}
    fb = {k: v for k, v in flatten(dict(b[0].plan.resolved)).items() if not k.startswith(NOT_CONTENT)}
    null = json.dumps(None)
    keys = sorted(k for k in set(fa) | set(fb) if fa.get(k, null) != fb.get(k, null))
    inside = [k for k in keys if any(k == p or k.startswith(p + ".") for p in expected)]
    return [k for k in keys if k not in inside], inside


def gate(a: Sequence[StoredRun], b: Sequence[StoredRun], expected: Sequence[str] | None = None) -> Gate:
    """The gate between run sets A and B (both non-empty). `expected`: recipe key prefixes the varied axes
    set (None when unknown, e.g. the recipe file is gone: every recipe difference is then just listed)."""
    g = Gate()
    for name, fact in FACTS.items():
        va, vb = _values(a, fact), _values(b, fact)
        if va == vb and len(va) == 1:
            continue
        mixed = [side for side, v in (("A", va), ("B", vb)) if len(v) > 1]
        note = f"{' and '.join(mixed)} mix{'es' if len(mixed) == 1 else ''} values" if mixed else ""
        blocking = name in BLOCKING and va != vb
        kinds = {imported(d) for d in (*a, *b)}
        blocking_off = name == "measurement plan" and kinds == {True, False}
        if blocking_off:
            # labkit's plan beside another tool's setting: no key to compare; the definitions block, below.
            # Between imports the settings compare as plans do (c1 against c2, pp512 against pp4096 block).
            blocking = False
        if name == "measurement plan" and not mixed and not blocking_off:
            va, vb = plan_difference(va[0], vb[0])
        g.items.append(GateItem(name, va, vb, blocking=blocking, note=note))
    g.items.extend(definition_items(a, b))
    g.items.extend(recipe_items(a, b, expected))
    for side, docs in (("A", a), ("B", b)):
        for doc in docs:
            for flag in doc.summary.flags:
                g.items.append(
                    GateItem(
                        f"run flag ({side} {doc.run_id})",
                        (),
                        (),
                        note=f"{flag.code} in {flag.window}: {flag.message}",
                    )
                )
    return g


def recipe_items(
    a: Sequence[StoredRun], b: Sequence[StoredRun], expected: Sequence[str] | None
) -> list[GateItem]:
    """The recipe keys that differ outside the varied axes, and those inside; a side imported without a
    recipe has none to compare, and says so."""
    bare = [
        side for side, docs in (("A", a), ("B", b)) if any(imported(d) and not d.plan.resolved for d in docs)
    ]
    if bare:
        return [GateItem("recipe content", (), (), note=f"{' and '.join(bare)}: imported without a recipe")]
    items = []
    outside, inside = recipe_differences(a, b, expected or ())
    if outside:
        note = "keys that differ" if expected is None else "keys that differ besides the varied axes"
        more = f" and {len(outside) - 12} more" if len(outside) > 12 else ""
        items.append(GateItem("recipe content", (), (), note=f"{note}: " + ", ".join(outside[:12]) + more))
    if inside:
        items.append(GateItem("varied axes", (), (), note="expected: " + ", ".join(inside[:12])))
    return items


def axis_keys(overlays: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The recipe key prefixes a set of variant overlays sets ({variant name: overlay table}); label and
    description only name the lane."""
    keys: set[str] = set()
    for overlay in overlays.values():
        for top, value in overlay.items():
            if top in ("label", "description"):
                continue
            if top == "staging" or not isinstance(value, dict):
                keys.add(top)
                continue
            for key in flatten(value, top):
                keys.add(key_prefix(key.split(".")))
    return sorted(keys)


def key_prefix(parts: Sequence[str]) -> str:
    """A recipe key as the gate compares it: an engine arg or env var is one key whatever its value's shape
    (engine.args.--speculative-config, not its JSON fields)."""
    parts = list(parts)
    return ".".join(parts[:3] if parts[:2] in (["engine", "args"], ["engine", "env"]) else parts)
