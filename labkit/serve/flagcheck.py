"""The flag check before a sweep boots anything: the given flags (each with where it came from, e.g. "swept by
--over") looked up in the engine's own `--help` on the head, as `labkit doctor` asks it; when the head cannot
run that (unreachable, the image not there, the help failing or listing nothing), in the adapter's
`known_flags` instead, and each result says which of the two it was checked against
(docs/engines.md, "Known flags and the sweep flag check").

Runs only the image lookup (`docker image inspect`, docker lanes) and the help command on the head; nothing
is started or pulled.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from labkit.nodes import Host, HostError
from labkit.recipe import engine_facts
from labkit.serve.checks import CHECK_TIMEOUT, ask_help
from labkit.serve.enginehelp import canonical, closest, flag_checks, help_problem
from labkit.serve.preflight import image_command, parse_image
from labkit.serve.state import LaneState
from labkit.serve.verdict import FAIL, OK, Check

HELP, KNOWN = "help", "known flags"  # facts["source"]: what a flag was checked against
PULL_HINT = "`labkit doctor --pull` lets the image's own --help be asked"


def check_flags(lane: LaneState, flags: Sequence[tuple[str, str]]) -> list[Check]:
    """[(flag, origin)] checked against the engine's own --help on the head, else against the adapter's
    known_flags: a FAIL per flag neither lists (the closest one suggested), ok otherwise; facts["source"] is
    "help" or "known flags"."""
    flags = list(flags)
    head = lane.group.head
    lane.say(f"checking {', '.join(f for f, _ in flags)} against the engine's own flags")
    why = image_problem(lane, head)
    if not why:
        shown, r, failed = ask_help(lane, head)
        why = f"{shown} could not run: {failed}" if r is None else ""
        if r is not None:
            problem = help_problem(r)
            if not problem:
                checks = flag_checks(head.name, lane.plan.engine.kind, shown, flags, r)
                return [dataclasses.replace(c, facts={**c.facts, "source": HELP}) for c in checks]
            why = f"{shown} listed no flags: {problem}"
    name = engine_facts(lane.plan.engine.kind).name
    lane.say(
        f"the engine's own --help was not used ({why}); checking against labkit's list of known {name} flags"
    )
    hint = PULL_HINT if lane.plan.engine.runtime == "docker" else ""
    return known_flag_checks(head.name, lane.plan.engine.kind, lane.engine.known_flags, flags, why, hint)


def image_problem(lane: LaneState, head: Host) -> str:
    """Why the head cannot run the engine's --help ("" when it may): unreachable, or a docker lane's image not
    there, found with the preflight's one `docker image inspect` (nothing pulled)."""
    plan = lane.plan
    if plan.engine.runtime != "docker" or not plan.engine.image:
        return ""
    try:
        state = parse_image(head.run(image_command(plan.engine.image), timeout=CHECK_TIMEOUT))
    except HostError as e:
        return f"the head cannot be reached: {e.message}"
    if state.error:
        return f"docker on the head cannot say whether {plan.engine.image} is there: {state.error}"
    if not state.present:
        return f"{plan.engine.image} is not on the head"
    return ""


def known_flag_checks(
    node: str, kind: str, known: frozenset[str], flags: list[tuple[str, str]], why: str, hint: str = ""
) -> list[Check]:
    """One Check per flag against `known` (the adapter's list), each saying why the image's own --help was not
    used; a FAIL also says `hint` (how it could be asked)."""
    name = engine_facts(kind).name
    out = []
    for flag, origin in flags:
        key = canonical(flag, kind)
        facts = {"flag": flag, "origin": origin, "source": KNOWN, "why": why}
        if key in known:
            text = (
                f"{flag} ({origin}) is known: checked against labkit's list of known {name} flags, "
                f"not the image ({why})"
            )
            out.append(Check(node, "engine args", OK, text, facts))
            continue
        close = closest(key, known)
        text = f"{flag} ({origin}) is not in labkit's list of known {name} flags"
        text += f"; did you mean {close}?" if close else ""
        text += f" (checked against that list, not the image: {why}" + (f"; {hint})" if hint else ")")
        out.append(Check(node, "engine args", FAIL, text, {**facts, "suggestion": close}))
    return out
