"""Serving under load, the recipe half: load levels (`[measure.load]`) and the SLO they are judged against
(`[measure.slo]`), as recipe fields, cross-key rules, the frozen plans the measure step will read and their lines
(docs/measurement.md, "Load levels and arrival schedules").

Kept apart from measureplan.py so load reads as one idea: the keys, their defaults, what may not be combined,
the engine's own caps a level may not exceed, the two dataclasses and their lines.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import labkit.recipe.schema as s
from labkit.recipe.depthplan import context_window
from labkit.recipe.measureplan import MeasurePlan, Rows, WorkloadTable, int_flag

Arrival = Literal["constant", "poisson", "gamma"]
ARRIVALS: tuple[Arrival, ...] = (
    "constant",
    "poisson",
    "gamma",
)  # labkit/measure/request/arrivals.py draws them
DEFAULT_ARRIVAL: Arrival = "poisson"
# typo guards, far beyond any lane this lab serves
MAX_CONCURRENCY = 4096
MAX_RATE = 10_000.0  # requests per second
MAX_LEVEL_S = 86_400.0  # a level's duration, ramp and stall bounds, seconds
MAX_LEVEL_REQUESTS = 1_000_000
MAX_TOKENS = 1_048_576
# the engine flags that cap its running requests: vLLM's (and the simulator's), SGLang's
RUNNING_CAP_FLAGS = ("--max-num-seqs", "--max-running-requests")
SLO_BOUNDS = ("ttft_s", "tpot_s", "e2e_s")
Profile = Literal["levels", "sweep", "capacity"]
# how the levels are chosen: as given; guidellm's sweep (c1, the widest concurrency, then rates between); the
# highest level within [measure.slo] (the levels a ladder, then bisection)
PROFILES: tuple[Profile, ...] = ("levels", "sweep", "capacity")
LoadLoop = Literal["closed", "open", "sessions"]  # concurrency, rate or agentic-session levels
Think = Literal["fixed", "exponential"]
THINKS: tuple[Think, ...] = ("fixed", "exponential")  # a session's gap between a turn's end and its next send
DEFAULT_TURNS, DEFAULT_TOOL_TOKENS = 4, 256  # a session level's turns and tool-result size when unset
MAX_SESSIONS = 1024
MAX_SWEEP_RATES = 50  # [measure.slo]'s bounds, in the order the lines show them


@dataclass(frozen=True)
class LoadPlan:
    """Load levels: closed-loop `concurrency` levels (N streams, each sending its next request when its previous
    one ended) or open-loop `rate` levels (requests per second at intended times drawn by `arrival`, gamma's
    shape `burstiness`, at most `max_concurrency` in flight when set); each level lasts `duration_s` or
    `level_requests` requests (the key `requests`), after `warmup` requests sent one at a time and with a ramp of
    `ramp_up_s`. Every request has a prompt of `prompt_tokens` (the first `shared_prefix_tokens` of them the same
    across the level) and forces `output_tokens`. A level with more than `max_error_share` failed, cut or
    timed-out requests is invalid; a stream with no chunk for `stall_s` is cut. An open level is client-bound
    when its lateness p99 exceeds max(`lateness_floor_ms`, `lateness_share` of the mean gap).

    Agentic levels (`sessions`): S sessions at once, each `turns` turns of one growing conversation (an
    opening of `prompt_tokens`, then each turn appends the answer and a tool result of about `tool_tokens`),
    the next turn sent `think_s` after the previous one ended (fixed, or drawn from an exponential of that
    mean); a level is its S sessions' turns, so it lasts neither a duration nor a request count."""

    concurrency: tuple[int, ...] = ()
    rate: tuple[float, ...] = ()
    sessions: tuple[int, ...] = ()
    turns: int = DEFAULT_TURNS
    think_s: float = 0.0
    think: Think = "fixed"
    tool_tokens: int = DEFAULT_TOOL_TOKENS
    arrival: Arrival | None = None  # open loop only
    burstiness: float | None = None  # gamma only
    max_concurrency: int | None = None  # open loop only
    duration_s: float | None = None
    level_requests: int | None = None
    prompt_tokens: int = 512
    output_tokens: int = 128
    shared_prefix_tokens: int = 0
    range_ratio: float = 0.0  # prompt and answer lengths uniform over L(1 - r) .. L(1 + r), vLLM's convention
    warmup: int = 1
    ramp_up_s: float = 0.0
    max_error_share: float = 0.01
    stall_s: float = 30.0
    lateness_floor_ms: float = 1.0
    lateness_share: float = 0.05
    profile: Profile = "levels"
    sweep_rates: int = 5  # the sweep profile's constant rates between c1's and the widest level's

    @property
    def closed(self) -> bool:
        """A closed loop (concurrency levels); else an open one (rates) or agentic sessions."""
        return bool(self.concurrency)

    @property
    def loop(self) -> LoadLoop:
        """The kind of the plan's levels: closed (concurrencies), open (rates) or sessions."""
        return "closed" if self.concurrency else "sessions" if self.sessions else "open"

    @property
    def levels(self) -> tuple[float, ...]:
        """The levels in the order they run: concurrencies, rates or session counts."""
        return tuple(self.concurrency) if self.closed else tuple(self.sessions) or self.rate

    def requests(self) -> int | None:
        """Requests of one repetition, warm-ups included: exact for levels of a request count and for constant
        arrivals by duration, the expectation for Poisson and gamma ones (a ramp makes the steady schedule
        ramp/2 shorter); None for closed-loop levels by duration, whose count the engine's speed sets, and for
        the sweep and capacity profiles, whose levels the run chooses."""
        if self.profile != "levels":
            return None
        if self.sessions:
            return sum(n * self.turns + self.warmup for n in self.sessions)
        if self.level_requests is not None:
            return len(self.levels) * (self.level_requests + self.warmup)
        if self.closed or self.duration_s is None:
            return None
        steady_s = self.duration_s - self.ramp_up_s / 2
        return sum(math.ceil(r * steady_s) + self.warmup for r in self.rate)


@dataclass(frozen=True)
class SloPlan:
    """The service-level objective load levels are judged against: each given bound (seconds) on the
    `percentile` of its metric over a level's requests."""

    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None
    percentile: float = 99.0

    def bounds(self) -> tuple[tuple[str, float], ...]:
        """The given bounds as (metric, seconds): "ttft", "tpot", "e2e", in that order."""
        given = ((key.removesuffix("_s"), getattr(self, key)) for key in SLO_BOUNDS)
        return tuple((name, float(bound)) for name, bound in given if bound is not None)


def load_fields() -> dict[str, s.Field]:
    """[measure.load]'s keys; which of them go together is the rule's (`check_load`), so a variant may add the
    missing half of a pair."""
    F = s.Field
    levels = s.integer(1, MAX_CONCURRENCY)
    return {
        "concurrency": F(s.array(levels, nonempty=True, unique=True)),  # closed-loop levels
        "rate": F(
            s.array(s.bounded(0, MAX_RATE), nonempty=True, unique=True)
        ),  # open-loop levels, requests/s
        "sessions": F(s.array(s.integer(1, MAX_SESSIONS), nonempty=True, unique=True)),  # agentic levels
        "turns": F(s.integer(2, 256)),  # sessions only; unset reads as DEFAULT_TURNS
        "think_s": F(s.bounded(0, MAX_LEVEL_S, low_closed=True)),  # sessions only; unset reads as 0
        "think": F(s.choice(*THINKS)),  # sessions only; unset reads as fixed
        "tool_tokens": F(s.integer(16, MAX_TOKENS)),  # sessions only; unset reads as DEFAULT_TOOL_TOKENS
        "arrival": F(s.choice(*ARRIVALS)),  # open loop; unset reads as DEFAULT_ARRIVAL
        "burstiness": F(s.bounded(0.01, 100, low_closed=True)),  # gamma's shape; unset reads as 1
        "max_concurrency": F(levels),  # open loop: the sender's cap on requests in flight
        "duration_s": F(s.bounded(0, MAX_LEVEL_S)),  # a level's length, the ramp included ...
        "requests": F(s.integer(1, MAX_LEVEL_REQUESTS)),  # ... or its request count
        "prompt_tokens": F(s.integer(8, MAX_TOKENS), default=512),  # server tokens, shared prefix included
        "output_tokens": F(s.integer(2, 65536), default=128),  # forced length
        "shared_prefix_tokens": F(s.integer(0, MAX_TOKENS), default=0),
        "range_ratio": F(s.bounded(0, 1, low_closed=True, high_open=True)),  # unset reads as 0: fixed lengths
        "warmup": F(s.integer(0, 64), default=1),  # per level, one at a time, in no figure
        "ramp_up_s": F(s.bounded(0, MAX_LEVEL_S, low_closed=True), default=0.0),
        "max_error_share": F(s.bounded(0, 1, low_closed=True, high_open=True), default=0.01),
        "stall_s": F(s.bounded(0, MAX_LEVEL_S), default=30.0),
        "lateness_floor_ms": F(s.bounded(0, 1000), default=1.0),
        "lateness_share": F(s.bounded(0, 1, high_open=True), default=0.05),
        "profile": F(s.choice(*PROFILES), default="levels"),
        "sweep_rates": F(s.integer(1, MAX_SWEEP_RATES)),  # sweep only; unset reads as 5
    }


def load_levels(table: Mapping[str, Any]) -> LoadPlan:
    """The checked [measure.load] table (rule passed) as a plan: an open loop's arrival defaults to Poisson,
    a gamma one's burstiness to 1."""
    closed = bool(table.get("concurrency") or table.get("sessions"))
    if table["profile"] == "sweep":  # closed-loop levels first, then rates: constant unless given
        arrival = table.get("arrival")
    else:
        arrival = None if closed else (table.get("arrival") or DEFAULT_ARRIVAL)
    burstiness = table.get("burstiness")
    return LoadPlan(
        concurrency=tuple(table.get("concurrency") or ()),
        rate=tuple(table.get("rate") or ()),
        sessions=tuple(table.get("sessions") or ()),
        turns=table.get("turns") or DEFAULT_TURNS,
        think_s=float(table.get("think_s") or 0.0),
        think=table.get("think") or "fixed",
        tool_tokens=table.get("tool_tokens") or DEFAULT_TOOL_TOKENS,
        arrival=arrival,
        burstiness=(1.0 if burstiness is None else float(burstiness)) if arrival == "gamma" else None,
        max_concurrency=table.get("max_concurrency"),
        duration_s=table.get("duration_s"),
        level_requests=table.get("requests"),
        prompt_tokens=table["prompt_tokens"],
        output_tokens=table["output_tokens"],
        shared_prefix_tokens=table["shared_prefix_tokens"],
        range_ratio=float(table.get("range_ratio") or 0.0),
        warmup=table["warmup"],
        ramp_up_s=float(table["ramp_up_s"]),
        max_error_share=float(table["max_error_share"]),
        stall_s=float(table["stall_s"]),
        lateness_floor_ms=float(table["lateness_floor_ms"]),
        lateness_share=float(table["lateness_share"]),
        profile=table["profile"],
        sweep_rates=table.get("sweep_rates") or 5,
    )


def running_cap(engine_args: Mapping[str, Any]) -> tuple[str, int] | None:
    """(flag, value) of the engine's cap on running requests as the recipe sets it (RUNNING_CAP_FLAGS), None
    when it sets none."""
    return int_flag(engine_args, RUNNING_CAP_FLAGS)


def check_load(merged: dict) -> None:
    """[measure.load]'s cross-key rule on the merged recipe: one kind of level and one level length, the
    open-loop keys only on an open loop, a shared prefix inside the prompt, a ramp inside the level, a stall
    bound inside the request timeout, and no level the engine's own caps would change (--max-num-seqs or
    --max-running-requests, --max-model-len)."""
    load = merged["measure"].get("load")
    if not load:
        return
    _check_loop(load)
    _check_sessions(load)
    _check_profile(load, merged["measure"])
    if not load.get("sessions"):  # a session level lasts its sessions' turns
        _check_length(load)
    _check_engine(load, merged["engine"]["args"])
    ratio = load.get("range_ratio") or 0.0
    shortest = int(load["prompt_tokens"] * (1 - ratio))
    if load["shared_prefix_tokens"] >= shortest:
        spread = f" less measure.load.range_ratio's {ratio:g} ({shortest})" if ratio else ""
        raise s.Invalid(
            "measure.load.shared_prefix_tokens",
            f"{load['shared_prefix_tokens']} is not below prompt_tokens ({load['prompt_tokens']}){spread}: the "
            "prompt includes its shared prefix, and every request needs tokens of its own",
        )
    timeout = merged["measure"]["timeout"]
    if load["stall_s"] >= timeout:
        raise s.Invalid(
            "measure.load.stall_s",
            f"{load['stall_s']:g} s is not below measure.timeout ({timeout:g} s): the request timeout would end a "
            "stalled stream first",
        )


SESSION_KEYS = ("turns", "think_s", "think", "tool_tokens")  # [measure.load]'s keys of session levels only


def _check_loop(load: Mapping[str, Any]) -> None:
    """One kind of level (concurrencies, rates or sessions); the open loop's keys only with rates; a
    burstiness only with gamma."""
    closed = load.get("concurrency")
    given = [key for key in ("concurrency", "rate", "sessions") if load.get(key)]
    if len(given) > 1:
        raise s.Invalid(
            f"measure.load.{given[1]}",
            f"measure.load.{given[0]} is set too: levels are concurrencies (a closed loop), rates (an open "
            "loop) or agentic sessions, one kind per recipe",
        )
    if not given:
        raise s.Invalid(
            "measure.load",
            "needs concurrency (closed-loop levels), rate (open-loop levels, requests/s) or sessions (agentic "
            "levels)",
        )
    if load.get("sessions"):
        for key in ("arrival", "burstiness", "max_concurrency"):
            if load.get(key) is not None:
                raise s.Invalid(
                    f"measure.load.{key}",
                    "only an open loop (measure.load.rate) has it; these levels are agentic sessions",
                )
        return
    if closed:
        # a sweep's rates are open-loop levels: their arrivals may be given
        open_keys = (
            ("max_concurrency",)
            if load.get("profile") == "sweep"
            else ("arrival", "burstiness", "max_concurrency")
        )
        for key in open_keys:
            if load.get(key) is not None:
                raise s.Invalid(
                    f"measure.load.{key}",
                    "only an open loop (measure.load.rate) has it; these levels are concurrencies",
                )
    elif load.get("burstiness") is not None and load.get("arrival") != "gamma":
        arrival = load.get("arrival") or f"{DEFAULT_ARRIVAL} (the default)"
        raise s.Invalid(
            "measure.load.burstiness",
            f'only gamma arrivals have one (arrival = "gamma"); arrival is {arrival}',
        )


def _check_sessions(load: Mapping[str, Any]) -> None:
    """Session levels' keys only with sessions; no level length, shared prefix or sweep with them (a level is
    its sessions' turns, each session opens with a nonce of its own, a sweep's levels are streams and rates)."""
    if not load.get("sessions"):
        for key in SESSION_KEYS:
            if load.get(key) is not None:
                raise s.Invalid(f"measure.load.{key}", "only agentic levels (measure.load.sessions) have it")
        return
    for key, why in (
        ("duration_s", "a session level lasts its sessions' turns (measure.load.turns)"),
        ("requests", "a session level sends sessions x turns requests (measure.load.turns)"),
        ("shared_prefix_tokens", "each session opens with a nonce of its own and shares only its own turns"),
        ("range_ratio", "a session's lengths are its opening, answers and tool results"),
    ):
        if load.get(key):
            raise s.Invalid(f"measure.load.{key}", f"not with measure.load.sessions: {why}")
    if load.get("profile") == "sweep":
        raise s.Invalid(
            "measure.load.profile",
            "a sweep runs streams, then rates: agentic levels (measure.load.sessions) take levels or capacity",
        )


def _check_profile(load: Mapping[str, Any], measure: Mapping[str, Any]) -> None:
    """A sweep starts from closed-loop levels (c1, then the widest given); capacity needs an SLO to judge by and
    a ladder of at least two levels; sweep_rates only with a sweep."""
    profile = load.get("profile", "levels")
    if load.get("sweep_rates") is not None and profile != "sweep":
        raise s.Invalid("measure.load.sweep_rates", f'only the sweep profile has one; profile is "{profile}"')
    if profile == "sweep" and not load.get("concurrency"):
        raise s.Invalid(
            "measure.load.profile",
            "a sweep runs c1, then the widest of measure.load.concurrency, then rates between: it needs "
            "concurrency",
        )
    if profile == "capacity":
        if not measure.get("slo"):
            raise s.Invalid(
                "measure.load.profile", "capacity is the highest level within [measure.slo]: it needs one"
            )
        levels = load.get("concurrency") or load.get("rate") or load.get("sessions") or []
        if len(levels) < 2:
            raise s.Invalid(
                "measure.load.profile", "capacity climbs a ladder of levels: give at least two, lowest first"
            )
        if list(levels) != sorted(levels):
            raise s.Invalid(
                "measure.load.profile", f"capacity climbs its ladder lowest first; got {list(levels)}"
            )


def _check_length(load: Mapping[str, Any]) -> None:
    """A level lasts a duration or a request count, one of the two; enough requests for the widest level; a
    ramp shorter than the level."""
    duration, count = load.get("duration_s"), load.get("requests")
    if duration is not None and count is not None:
        raise s.Invalid(
            "measure.load.requests",
            "measure.load.duration_s is set too: a level lasts a duration or a number of requests, not both",
        )
    if duration is None and count is None:
        raise s.Invalid("measure.load", "needs duration_s or requests: how long each level runs")
    widest = max(load.get("concurrency") or [0])
    if count is not None and count < widest:
        raise s.Invalid(
            "measure.load.requests",
            f"{count} requests per level cannot keep the {widest} streams of the widest level busy",
        )
    if duration is not None and load["ramp_up_s"] >= duration:
        raise s.Invalid(
            "measure.load.ramp_up_s",
            f"{load['ramp_up_s']:g} s is not below the level's duration_s ({duration:g} s)",
        )


def _check_engine(load: Mapping[str, Any], engine_args: Mapping[str, Any]) -> None:
    """No closed level above the engine's cap on running requests (it would queue the rest, and the level would
    not be the concurrency it says), no request longer than its context window."""
    cap = running_cap(engine_args)
    kind = "sessions" if load.get("sessions") else "concurrency"
    for i, level in enumerate(load.get(kind) or ()):
        if cap is not None and level > cap[1]:
            raise s.Invalid(
                f"measure.load.{kind}[{i}]",
                f"{level} {'sessions' if kind == 'sessions' else 'streams'}, over the engine's cap of {cap[1]} "
                f"running requests (engine.args {cap[0]}): the engine would queue the rest, and the level would "
                f"not run at {kind} {level}",
            )
    window = context_window(engine_args)
    ratio = load.get("range_ratio") or 0.0
    prompt, output = (int(load[k] * (1 + ratio)) for k in ("prompt_tokens", "output_tokens"))
    need = prompt + output
    what = f"{prompt:,} prompt + {output:,} answer tokens" + (
        f" (the longest measure.load.range_ratio {ratio:g} draws)" if ratio else ""
    )
    if load.get("sessions"):  # the last turn holds every earlier answer and tool result
        turns = load.get("turns") or DEFAULT_TURNS
        grown = (turns - 1) * (load["output_tokens"] + (load.get("tool_tokens") or DEFAULT_TOOL_TOKENS))
        need += grown
        what += f" + {grown:,} of {turns - 1} earlier turns' answers and tool results"
    if window is not None and need > window[1]:
        raise s.Invalid(
            "measure.load.prompt_tokens",
            f"{what} = {need:,}, over the context window of {window[1]:,} (engine.args {window[0]})",
        )


def slo_fields() -> dict[str, s.Field]:
    """[measure.slo]'s keys: the bounds in seconds (each optional; the rule asks for one) and the percentile
    they hold at."""
    F = s.Field
    bound = s.bounded(0, 3600)
    return {
        "ttft_s": F(bound),  # time to first token
        "tpot_s": F(bound),  # time per output token, per request (vLLM's --goodput compares TPOT, not ITL)
        "e2e_s": F(bound),  # end-to-end latency
        "percentile": F(s.bounded(0, 100, high_open=True), default=99.0),
    }


def slo_plan(table: Mapping[str, Any]) -> SloPlan:
    """The checked [measure.slo] table as a plan."""
    return SloPlan(table.get("ttft_s"), table.get("tpot_s"), table.get("e2e_s"), float(table["percentile"]))


def check_slo(merged: dict) -> None:
    """[measure.slo] states at least one bound, and there are load levels for it to judge."""
    measure = merged["measure"]
    slo = measure.get("slo")
    if not slo:
        return
    if all(slo.get(key) is None for key in SLO_BOUNDS):
        raise s.Invalid(
            "measure.slo", f"states no bound: give {', '.join(SLO_BOUNDS[:-1])} or {SLO_BOUNDS[-1]}"
        )
    if not measure.get("load"):
        raise s.Invalid("measure.slo", "judges load levels: it needs [measure.load]")


def _load_rows(p: LoadPlan, m: MeasurePlan) -> Rows:
    if p.profile == "sweep":
        widest = max(p.concurrency)
        arrivals = p.arrival or "constant"
        kind = f"sweep: c1, c{widest}, then {p.sweep_rates} {arrivals} rates between their request rates"
    elif p.profile == "capacity":
        ladder = (
            ", ".join(f"c{n}" for n in p.concurrency)
            if p.closed
            else ", ".join(f"{n} sessions" for n in p.sessions)
            if p.sessions
            else ", ".join(f"{r:g}/s" for r in p.rate)
        )
        step = "one stream" if p.closed else "one session" if p.sessions else "10 % of the rate"
        kind = f"capacity under the SLO: ladder {ladder} to the first miss, then bisection to {step}, boundary x3"
    elif p.sessions:
        think = f"{p.think} think {p.think_s:g} s" if p.think_s else "no think time"
        kind = (
            f"agentic sessions at {', '.join(str(n) for n in p.sessions)} at once, {p.turns} turns each, "
            f"~{p.tool_tokens}-token tool results, {think}"
        )
    elif p.closed:
        kind = "closed loop at " + ", ".join(f"c{n}" for n in p.concurrency)
    else:
        shape = f"gamma (burstiness {p.burstiness:g})" if p.arrival == "gamma" else p.arrival
        cap = f", at most {p.max_concurrency} in flight" if p.max_concurrency else ""
        kind = f"open loop at {', '.join(f'{r:g}' for r in p.rate)} req/s, {shape} arrivals{cap}"
    length = (
        f"{p.duration_s:g} s"
        if p.duration_s is not None
        else f"{p.level_requests} requests"
        if p.level_requests is not None
        else "the sessions' turns"
    )
    ramp = f" ({p.ramp_up_s:g} s ramp)" if p.ramp_up_s else ""
    checks = (
        f"over {p.max_error_share * 100:g} % failed, cut or timed-out requests invalidate a level; a stream "
        f"silent for {p.stall_s:g} s is cut"
    )
    if p.loop == "open":
        checks += (
            f"; client-bound when lateness p99 > max({p.lateness_floor_ms:g} ms, {p.lateness_share * 100:g} % "
            "of the mean gap)"
        )
    return [
        ("load", f"{kind}, {length} per level{ramp}, {p.warmup} warmup each"),
        (
            "load requests",
            f"{p.prompt_tokens}-token openings, then growing by each turn, {p.output_tokens}-token answers"
            if p.sessions
            else f"{p.prompt_tokens}-token prompts ({p.shared_prefix_tokens} shared), {p.output_tokens}-token "
            "answers" + (f", each length uniform within ±{p.range_ratio:.0%}" if p.range_ratio else ""),
        ),
        ("load checks", checks),
    ]


def _slo_rows(p: SloPlan, m: MeasurePlan) -> Rows:
    bounds = ", ".join(f"{name.upper()} <= {bound:g} s" for name, bound in p.bounds())
    return [("slo", f"p{p.percentile:g} {bounds}; a level meets it when every given bound holds")]


LOAD_TABLE = WorkloadTable[LoadPlan](
    key="load",
    field=lambda partial: s.Field(s.table(load_fields(), partial=partial)),
    plan=load_levels,
    rows=_load_rows,
    rule=check_load,
)
SLO_TABLE = WorkloadTable[SloPlan](
    key="slo",
    field=lambda partial: s.Field(s.table(slo_fields(), partial=partial)),
    plan=slo_plan,
    rows=_slo_rows,
    rule=check_slo,
)
