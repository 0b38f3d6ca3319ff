"""The parts of a stored run: run.json read key by key (Part), and the typed plan, provenance and boot facts.

Each part keeps what other packages read as fields and the JSON object it came from as `raw`, because the
rest is free-form (the resolved recipe, engine info, timings). A value of the wrong type is a ResultsError
naming the file and the dotted key; a null or absent part reads as empty, as older runs have it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from labkit.store.files import ResultsError

EMPTY: Mapping[str, Any] = {}
Name = TypeVar("Name", bound=str)


class Part:
    """One JSON object of run.json, read key by key: a wrong type raises ResultsError naming the file and
    the dotted key. A null value reads as an absent one."""

    def __init__(self, data: object, file: Path, key: str = "") -> None:
        if data is None:
            data = {}
        if not isinstance(data, Mapping):
            raise ResultsError(f"{file}: {key or 'the file'}: expected an object, found {_kind(data)}")
        self.data: Mapping[str, Any] = data
        self.file = file
        self.key = key

    def at(self, name: str) -> str:
        return f"{self.key}.{name}" if self.key else name

    def wrong(self, name: str, want: str) -> ResultsError:
        return ResultsError(f"{self.file}: {self.at(name)}: expected {want}, found {_kind(self.data[name])}")

    def text(self, name: str) -> str | None:
        value = self.data.get(name)
        if value is not None and not isinstance(value, str):
            raise self.wrong(name, "a string")
        return value

    def seed(self, name: str) -> str | None:
        """A prompt seed: text ("7/3", repetition 3 of seed 7), or a whole number read as its text."""
        value = self.data.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
        return self.text(name)

    def number(self, name: str) -> float | None:
        value = self.data.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise self.wrong(name, "a number")
        return None if value is None else float(value)

    def whole(self, name: str) -> int | None:
        value = self.data.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise self.wrong(name, "a whole number")
        return value

    def truth(self, name: str) -> bool | None:
        value = self.data.get(name)
        if value is not None and not isinstance(value, bool):
            raise self.wrong(name, "true or false")
        return value

    def part(self, name: str) -> Part:
        return Part(self.data.get(name), self.file, self.at(name))

    def items(self, name: str) -> list[object]:
        value = self.data.get(name)
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.wrong(name, "a list")
        return value

    def texts(self, name: str) -> tuple[str, ...]:
        found = self.items(name)
        if not all(isinstance(x, str) for x in found):
            raise self.wrong(name, "a list of strings")
        return tuple(str(x) for x in found)

    def parts(self, name: str) -> dict[str, Part]:
        """{key: Part} of an object whose every value is an object (per node, per measure)."""
        inner = self.part(name)
        return {k: Part(v, self.file, inner.at(k)) for k, v in inner.data.items()}


def one_of(names: tuple[Name, ...], value: str, file: Path, key: str) -> Name:
    """`value` as one of `names` (a Literal's values); ResultsError naming the file and key otherwise."""
    for name in names:
        if name == value:
            return name
    raise ResultsError(f"{file}: {key}: {value!r} is none of {', '.join(names)}")


def _kind(value: object) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "true or false"}.get(
        type(value), type(value).__name__
    )


@dataclass(frozen=True)
class ImportedPlan:
    """plan.imported of a run made from another tool's file: its format, tool, setting, and `compared`, the
    tool and setting as the gate compares them (empty in imports by an earlier labkit)."""

    format: str
    tool: str
    setting: Mapping[str, Any]
    compared: Mapping[str, Any]

    @classmethod
    def parse(cls, part: Part) -> ImportedPlan:
        return cls(
            part.text("format") or "",
            part.text("tool") or "",
            part.part("setting").data,
            part.part("compared").data,
        )


@dataclass(frozen=True)
class StoredPlan:
    """The lane plan the run was stored under; `resolved` is the recipe as resolved, free-form (TOML tables)."""

    recipe_hash: str | None = None
    resolved: Mapping[str, Any] = field(default_factory=dict)
    imported: ImportedPlan | None = None
    raw: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, part: Part) -> StoredPlan:
        imported = part.part("imported")
        return cls(
            recipe_hash=part.text("recipe_hash"),
            resolved=part.part("resolved").data,
            imported=ImportedPlan.parse(imported) if imported.data else None,
            raw=part.data,
        )

    @classmethod
    def of(cls, plan: Mapping[str, Any], where: str = "lane plan") -> StoredPlan:
        """A lane plan as it would be stored (LanePlan.to_dict()), for comparing with stored runs."""
        return cls.parse(Part(plan, Path(where)))

    @property
    def measure(self) -> Mapping[str, Any]:
        """The resolved [measure] table ({} when the plan has none)."""
        table = self.resolved.get("measure")
        return table if isinstance(table, Mapping) else EMPTY

    @property
    def image(self) -> str | None:
        """The recipe's engine image name, when it names one."""
        engine = self.resolved.get("engine")
        image = engine.get("image") if isinstance(engine, Mapping) else None
        return str(image) if image else None


@dataclass(frozen=True)
class Provenance:
    """Where the run came from. Typed: what comparison, export, sweeps and imports read; `raw` keeps the
    rest (engine info, timings, the tool's metadata)."""

    prompt_seed: str | None = None  # "7/3": repetition 3 of seed 7; None: fresh random prompts
    cold_expected: bool | None = None  # the run booted its lane (its first request is the cold turn)
    engine_version: str | None = None
    model: str | None = None
    recipe_hash: str | None = None
    tool: str | None = None  # an import's tool, its version, the file's hash and the result's index in it
    tool_version: str | None = None
    file_sha256: str | None = None
    result_index: int | None = None
    sweep_axes: Mapping[str, tuple[str, ...]] = field(
        default_factory=dict
    )  # sweep.axes: short name -> key path
    plan: Mapping[str, Any] = field(default_factory=dict)  # an older run's measure plan
    raw: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, part: Part) -> Provenance:
        axes = part.part("sweep").part("axes")
        return cls(
            prompt_seed=part.seed("prompt_seed"),
            cold_expected=part.truth("cold_expected"),
            engine_version=part.text("engine_version"),
            model=part.text("model"),
            recipe_hash=part.text("recipe_hash"),
            tool=part.text("tool"),
            tool_version=part.text("tool_version"),
            file_sha256=part.text("file_sha256"),
            result_index=part.whole("result_index"),
            sweep_axes={k: axes.texts(k) for k in axes.data},
            plan=part.part("plan").data,
            raw=part.data,
        )


@dataclass(frozen=True)
class NodeBoot:
    """One node's boot state (docs/engines.md, "Boot state"): versions (None: not read), whether it had any
    compile cache to find, and the caches it found cold."""

    kernel: str | None = None
    driver: str | None = None
    cuda: str | None = None
    firmware: str | None = None
    caches: bool = False
    cold: tuple[str, ...] = ()

    @classmethod
    def parse(cls, part: Part) -> NodeBoot:
        caches = part.part("caches")
        return cls(
            part.text("kernel"),
            part.text("driver"),
            part.text("cuda"),
            part.text("firmware"),
            bool(caches.data),
            part.texts("cold"),
        )


@dataclass(frozen=True)
class StoredBoot:
    """The lane's boot facts as stored: engine version, each node's boot state and image ID (from the
    pre-boot checks); `raw` keeps the rest (timings, memory, KV pool, log lines)."""

    engine_version: str | None = None
    state: Mapping[str, NodeBoot] = field(default_factory=dict)
    image_ids: Mapping[str, str] = field(default_factory=dict)  # node -> image ID, nodes that had one
    raw: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, part: Part) -> StoredBoot:
        images = {node: image.text("id") for node, image in part.parts("images").items()}
        return cls(
            engine_version=part.text("engine_version"),
            state={node: NodeBoot.parse(p) for node, p in part.parts("state").items()},
            image_ids={node: found for node, found in images.items() if found},
            raw=part.data,
        )

    @classmethod
    def of(cls, facts: Mapping[str, Any], where: str = "boot facts") -> StoredBoot:
        """A lane's boot facts as they would be stored (BootFacts.to_dict()), for comparing with stored runs."""
        return cls.parse(Part(facts, Path(where)))
