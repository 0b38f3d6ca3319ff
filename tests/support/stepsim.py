"""The simulator's step scheduler on a fake clock, driven step by step as the server's engine loop drives it
(labkit/sim/steps.py): for the tests that compute every expected time from the step formula.
"""

from __future__ import annotations

from dataclasses import dataclass

from labkit.sim.config import build_config
from labkit.sim.engine import SimEngine
from labkit.sim.scheduler import Emission, StepScheduler

BASE, TOK = 0.01, 0.001  # step_base_s, step_token_s of most tests: a step of n tokens lasts 10 + n ms


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


@dataclass
class Arrival:
    t: float
    prompt: int
    tokens: int


class Sim:
    """An engine and its scheduler on a fake clock; `run` drives the engine loop as the server does."""

    def __init__(self, *sets: str):
        self.clock = FakeClock()
        sets = (f"step_base_s={BASE}", f"step_token_s={TOK}", "prefix_caching=false", *sets)
        self.cfg = build_config("test", sets=list(sets))
        self.eng = SimEngine(self.cfg, self.clock)
        self.sched = StepScheduler(self.eng)
        self.steps: list = []
        self.emissions: list[Emission] = []

    def add(self, prompt: int, tokens: int, t: float | None = None):
        n = len(self.eng.records) + 1
        rec = self.eng.admit(
            [n] * prompt,
            tokens,
            0,
            True,
            "chat",
            True,
            f"r{n}",
            now=self.clock.t if t is None else t,
            scheduled=False,
        )
        self.sched.add(rec)
        return rec

    def step(self):
        """Plan one step, move the clock to its end, complete it; None when idle."""
        step = self.sched.plan(self.clock.t)
        if step is None:
            return None
        self.clock.t = step.end
        self.steps.append(step)
        done = self.sched.complete(step, self.clock.t)
        for em in done:
            if em.done:  # the request's handler closes it, as the server's does (engine.finish)
                self.eng.finish(em.rec, "finished", "length")
        self.emissions += done
        return step

    def run(self, arrivals: tuple[Arrival, ...] = ()) -> None:
        """Steps back to back until idle; each arrival joins at its time (the step after it arrived)."""
        pending = sorted(arrivals, key=lambda a: a.t)
        while True:
            while pending and pending[0].t <= self.clock.t:
                a = pending.pop(0)
                self.add(a.prompt, a.tokens, a.t)
            if self.step() is None:
                if not pending:
                    return
                self.clock.t = pending[0].t

    def times(self, steps) -> float:
        return sum(s.end - s.start for s in steps)
