"""Running the suite on several pytest-xdist workers (`make test` and `make test-fast` run `pytest -n 2`).

Tests run side by side unless they share something one worker must own; tests/conftest.py gives those an
`xdist_group`, and `--dist loadgroup` sends a group's tests to one worker, in collection order:

    vllm           the vLLM and docker tiers: the shared lane's tests have one boot per session
                   (tests/support/vllm_fixtures.py), which a second worker would boot again, and no two
                   vLLM engines boot or serve at once on the two cores
    nodes          the rest of the ssh tier: engines on the sshd nodes listen on the same addresses in every
                   worker's cluster
    alone          the modules that hold an `alone` test (below), outside the two groups above
    <module path>  the llama.cpp, sim and notebook tiers (a module's lanes share its fixed ports and lane ids,
                   lanes keep their state under ~/.cache/labkit/lanes/<lane id>), and a module with a
                   module-scoped fixture (a simulator, a tool's shared lane): one set-up
    explicit       a test marked `xdist_group` itself (a shipped recipe's fixed port); `recipe-sim` holds the
                   two whole runs of the shipped sim lane (`RECIPE_SIM`)

Each worker has its own sshd nodes (a free port of their own) and temp folders. Ports from a test range go to
the workers in turn (`free_port`), so two workers never probe and bind the same one.

A test marked `alone` checks a timing truth within a few percent (the simulator's decode rate, a 3 % lane
difference): another worker's engine boot or notebook kernel on the same two cores delays the client's reads
by more than that. It runs while no other test runs (`Turns`): every test holds the run's lock, shared, and an
`alone` test holds it exclusively, kept across the `alone` tests that follow it on its worker; a gate lock in
front keeps a waiting `alone` test from being passed by ever new shared holders. Each `alone` test that waits
costs every other worker the rest of its current test and then the whole `alone` test, so they run in one
stretch at the start: the `alone` group is handed out first (`run_order`, with xdist's own reordering by size
turned off by `--no-loadscope-reorder`), its `alone` tests before its other tests.

A `light` test (of the pure tier only: no engine, node, notebook or simulator) takes no lock: it runs beside an
`alone` test, so the other worker fills the `alone` stretch with the light tests that are in no group, which
`run_order` hands out next. While an `alone` test holds the lock, a light test runs at nice 19 where the worker
may lower it again afterwards (root, or a nice limit that allows it), so the simulator and client of the
`alone` test are not kept waiting by it: the kernel runs a waking nice-0 process before a busy nice-19 one. Not
otherwise: beside a vLLM boot on both cores, nice 19 would leave a light test under 1 % of a core (the kernel's
weights: 15 against 1024 for each nice-0 thread; derived, not timed). Two light
workers beside one `alone` test were too many even so: with three workers, an open-loop test on the simulator
saw its client's sends go more than 2.5 ms late; with two, one core stays free for it.
"""

from __future__ import annotations

import fcntl
import os
import resource
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, TypeVar

from labkit.sim.oracle import free_port as first_free_port

T = TypeVar("T")

VLLM = "vllm"
NODES = "nodes"
ALONE = "alone"
RECIPE_SIM = "recipe-sim"


def group_of(
    tiers: Iterable[str],
    scopes: Iterable[str],
    fixtures: Iterable[str],
    module: str,
    alone_module: bool = False,
) -> str | None:
    """The xdist group of a test with `tiers`, using `fixtures` of `scopes`, in test module `module`
    (`alone_module`: one that holds an `alone` test)."""
    tiers, fixtures = set(tiers), set(fixtures)
    if {"vllm", "docker"} & tiers or "vllm_shared" in fixtures:
        return VLLM
    if "ssh" in tiers and "llamacpp" not in tiers:
        return NODES
    if alone_module:
        return ALONE
    if {"llamacpp", "sim", "notebook"} & tiers or {"module", "class", "package"} & set(scopes):
        return module
    return None


def run_order(
    items: list[T],
    group: Callable[[T], str | None],
    alone: Callable[[T], bool],
    light: Callable[[T], bool] = lambda item: False,
) -> list[T]:
    """`items` in the order xdist is to hand them out (`--no-loadscope-reorder` keeps it): the `alone` group
    first, its `alone` items before its others; then the light items of no group, which the other worker runs
    beside the `alone` stretch; then the longest groups, so that they start early: the shipped sim lane's
    two whole runs (`RECIPE_SIM`, about 80 s each, one after the other on the recipe's port; the longest
    group of the fast tiers), the vLLM and the nodes groups; then the other groups, most items first (xdist's
    own reordering); then the other items of no group, short ones that fill the end. Each part keeps its
    order."""
    groups = [group(item) for item in items]
    sizes = Counter(groups)

    def rank(pair: tuple[T, str | None]) -> tuple[int, int, bool]:
        item, g = pair
        if g is None:
            first = 1 if light(item) else 6
        else:
            first = {ALONE: 0, RECIPE_SIM: 2, VLLM: 3, NODES: 4}.get(g, 5)
        return first, -sizes[g] if first == 5 else 0, g == ALONE and not alone(item)

    return [item for item, _ in sorted(zip(items, groups, strict=True), key=rank)]


def worker() -> tuple[int, int]:
    """(this worker's number, the number of workers); (0, 1) outside xdist."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return int(name.removeprefix("gw") or 0), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))


def free_port(low: int, high: int) -> int:
    """A port in [low, high] nobody listens on now, among the ports dealt to this worker (every n-th)."""
    number, count = worker()
    others = {port for port in range(low, high + 1) if port % count != number}
    return first_free_port(low, high, skip=others)


LIGHT_NICE = 19


def can_lower_nice() -> bool:
    """Whether this process may set its nice value back down after raising it (root, or RLIMIT_NICE)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NICE)
    if os.geteuid() == 0 or soft == resource.RLIM_INFINITY:
        return True
    return 20 - soft <= os.getpriority(os.PRIO_PROCESS, 0)


class Turns:
    """This worker's hold on the run's test lock (nothing outside xdist). `take(alone, light)` before a test:
    nothing for a light test (at nice `LIGHT_NICE` while an `alone` test runs, where that can be undone),
    shared, or exclusive for an `alone` test (kept when the previous test was `alone` too); `done(next_alone)`
    after it: the nice value back; a shared hold is let go after every test, so an `alone` test waiting at the
    gate gets its turn; an exclusive one is kept while the worker's next test is `alone` too (None: no next
    test)."""

    def __init__(self, run: str | None = None, folder: Path | None = None):
        self.run = run if run is not None else os.environ.get("PYTEST_XDIST_TESTRUNUID")
        self.folder = folder or Path(tempfile.gettempdir())
        self.alone: bool | None = None  # what is held now (None: nothing)
        self._files: tuple[IO[str], IO[str]] | None = None
        self._nice: int | None = None  # the nice value to go back to after a light test

    def take(self, alone: bool, light: bool = False) -> None:
        if not self.run:
            return
        if light and not alone:
            self.release()
            if self._alone_runs() and can_lower_nice():
                self._nice = os.getpriority(os.PRIO_PROCESS, 0)
                os.setpriority(os.PRIO_PROCESS, 0, max(self._nice, LIGHT_NICE))
            return
        if self.alone is alone:
            return
        self.release()
        gate = (self.folder / f"labkit-tests-{self.run}.gate").open("a")
        lock = (self.folder / f"labkit-tests-{self.run}.lock").open("a")
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            fcntl.flock(gate, fcntl.LOCK_UN)
        self._files, self.alone = (gate, lock), alone

    def _alone_runs(self) -> bool:
        """Whether another worker holds the lock exclusively now: a shared hold, asked for without waiting, fails."""
        with (self.folder / f"labkit-tests-{self.run}.lock").open("a") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            return False  # closing the file lets go of the shared hold

    def done(self, next_alone: bool | None) -> None:
        if self._nice is not None:
            os.setpriority(os.PRIO_PROCESS, 0, self._nice)
            self._nice = None
        if not (self.alone and next_alone):
            self.release()

    def release(self) -> None:
        if self._files is not None:
            for f in self._files:
                f.close()  # closing the file lets go of its lock
        self._files, self.alone = None, None


def without_workers(env: dict[str, str]) -> dict[str, str]:
    """`env` for a pytest run started by a test: without this run's xdist variables, so it neither waits on this
    run's test lock (which the test starting it holds) nor takes this worker's share of the ports."""
    return {k: v for k, v in env.items() if not k.startswith("PYTEST_XDIST_")}
