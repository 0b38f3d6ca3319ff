"""pytest fixtures for tests against a real vLLM (the CPU build): one lane shared by the session, and fresh boots.

A CPU boot takes 40-65 s on 2 cores, so the tests whose engine flags agree share one boot: `vllm_shared`, the
shipped tiny-vllm recipe with ngram speculation (K = 4), plus `--enable-prompt-tokens-details` and vLLM's
development mode (it serves POST /reset_prefix_cache only then). It boots for the first test that asks for it
and goes down after the last one (`pytest_runtest_teardown` below), not at the end of the session, so that its
processes do not sit beside the rest of the suite. A test on it must pass whatever ran on the engine before:
it reads deltas of the engine's counters, never their totals, asks for no cold turn, and gets the prefix cache
emptied first (`vllm_lane`, or `vllm_shared.prepare()` in a module fixture).

A test that ends the engine (kills it mid-run) asks for `vllm_shared_last`: the shared lane, with the test run
after every other test on it (the collection hook below moves it there), so it costs no boot of its own; the
lane then goes down after it as after any last user, and must still leave nothing behind.

A test that needs what only a fresh engine shows (a cold first turn, Ctrl-C during boot, a boot with flags of
its own) asks for `vllm_fresh`: lanes of its own, checked to leave nothing behind.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from labkit.recipe import LanePlan
from labkit.serve import Lane
from labkit.serve.plan import Endpoint
from labkit.store import RunFolderSink
from tests.support.nodes import kill_processes, session_processes
from tests.support.vllm import vllm_available
from tests.support.vllm_lanes import eager as with_eager
from tests.support.vllm_lanes import free_port, tiny_vllm_plan

T = TypeVar("T")
SHARED = "vllm_shared"
LAST = "vllm_shared_last"
# the shared lane's flags beyond the ngram variant's: the responses' cached_tokens, for the prefix-cache tests
SHARED_ARGS = (("--enable-prompt-tokens-details", ()),)
# vLLM serves POST /reset_prefix_cache only in its development mode (it also answers GET /server_info then)
SHARED_ENV = (("VLLM_SERVER_DEV_MODE", "1"),)
_HOLDER = pytest.StashKey["SharedVllm"]()
_LAST_USER = pytest.StashKey["str | None"]()


def _skip_without_vllm() -> None:
    reason = vllm_available()
    if reason:
        pytest.skip(reason)


@dataclasses.dataclass
class LaneEnv:
    """What a local lane in a test runs under: a state dir, the session's model cache, and a token every process
    it starts inherits (the leftover check)."""

    root: Path
    cache: Path
    token: str = dataclasses.field(default_factory=lambda: uuid.uuid4().hex)

    @property
    def state_dir(self) -> Path:
        return self.root / "state"

    @property
    def variables(self) -> dict[str, str]:
        return {
            "LABKIT_STATE_DIR": str(self.state_dir),
            "LABKIT_TEST_SESSION": self.token,
            "LABKIT_CACHE": str(self.cache),
        }

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """The variables set for the block only (lane commands read the state dir from the environment)."""
        with pytest.MonkeyPatch.context() as mp:
            for name, value in self.variables.items():
                mp.setenv(name, value)
            yield

    def processes(self) -> list[tuple[int, str]]:
        return session_processes(self.token)


def _model_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.getbasetemp() / "labkit-cache"  # one tiny-model build for the whole session


def _metrics(url: str) -> dict[str, float]:
    """Every sample of /metrics summed over its labels, by metric name."""
    with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
        text = r.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            key = name.split("{", 1)[0]
            out[key] = out.get(key, 0.0) + float(value)
    return out


class SharedVllm:
    """The session's shared lane: its plan, the `Lane`, the endpoint and boot facts of its one boot, its run
    folder (`root / "run"`, the node log and boot.json)."""

    def __init__(self, root: Path, cache: Path):
        self.root = root
        self.env = LaneEnv(root, cache)
        with self.env.active():
            plan = tiny_vllm_plan(free_port(), spec="ngram")
        engine = dataclasses.replace(
            plan.engine, args=plan.engine.args + SHARED_ARGS, env=plan.engine.env + SHARED_ENV
        )
        self.plan: LanePlan = dataclasses.replace(plan, engine=engine)
        self.lane = Lane(self.plan, sink=RunFolderSink(root / "run"), poll=0.2, stop_grace=10)
        self.ep: Endpoint | None = None
        self.closed = False

    @property
    def endpoint(self) -> Endpoint:
        assert self.ep is not None, "the shared vLLM lane is not up"
        return self.ep

    @property
    def url(self) -> str:
        """The root URL (/metrics, /tokenize, ...); `endpoint.base_url` is the /v1 one."""
        return self.endpoint.root_url

    @property
    def model_dir(self) -> Path:
        return Path(self.plan.model.path)

    def start(self) -> None:
        with self.env.active():
            self.ep = self.lane.start()

    def prepare(self, attempts: int = 20) -> None:
        """Before a test: nothing in flight on the engine, and its prefix cache empty. vLLM's POST
        /reset_prefix_cache answers {"success": false} while blocks are still held, and says to retry."""
        gauges = _metrics(self.url)
        busy = gauges.get("vllm:num_requests_running", 0.0) + gauges.get("vllm:num_requests_waiting", 0.0)
        assert busy == 0, f"the shared vLLM lane has {busy:g} requests on it before the test"
        answers = []
        for _ in range(attempts):
            req = urllib.request.Request(self.url + "/reset_prefix_cache", data=b"", method="POST")
            with urllib.request.urlopen(req, timeout=30) as r:
                answers.append(json.loads(r.read()))
            if answers[-1] == {"success": True}:
                return
            time.sleep(0.5)
        raise AssertionError(f"POST /reset_prefix_cache never succeeded: {answers[-3:]}")

    def close(self) -> None:
        """Down, and nothing of it left: no pid file, no process with its token. Runs once."""
        if self.closed:
            return
        self.closed = True
        try:
            with self.env.active():
                self.lane.down()
                assert self.lane.status() == {"localhost": "absent"} and self.lane.leftovers() == {}
            assert self.env.processes() == []
        finally:
            kill_processes(self.env.token)


@pytest.fixture(scope="session")
def vllm_shared(request, tmp_path_factory) -> Iterator[SharedVllm]:
    """The shared tiny-vllm lane (ngram, K = 4), up from the first test that uses it to the last one. Tests use
    it through `vllm_lane`; a module-scoped fixture calls `prepare()` itself before its requests."""
    _skip_without_vllm()
    shared = SharedVllm(tmp_path_factory.mktemp("vllm-shared"), _model_cache(tmp_path_factory))
    request.config.stash[_HOLDER] = shared
    try:
        shared.start()
        yield shared
    finally:
        shared.close()


@pytest.fixture
def vllm_lane(vllm_shared: SharedVllm) -> SharedVllm:
    """The shared lane for one test: idle, its prefix cache emptied. Read counter deltas, expect no cold turn."""
    vllm_shared.prepare()
    return vllm_shared


@pytest.fixture
def vllm_shared_last(vllm_lane: SharedVllm) -> SharedVllm:
    """`vllm_lane` for a test that may end the lane: no test on it runs after this one
    (pytest_collection_modifyitems below). The lane goes down after the test as after any last user."""
    return vllm_lane


class FreshVllm:
    """Lanes of one test's own: plans of the shipped tiny-vllm recipe on a test port, `Lane`s whose teardown is
    checked, and the environment a subprocess that boots one itself (papermill) needs."""

    def __init__(self, env: LaneEnv):
        self.env = env
        self.lanes: list[Lane] = []

    @property
    def state_dir(self) -> Path:
        return self.env.state_dir

    def plan(self, spec: str = "none", eager: bool = False, **measure) -> LanePlan:
        """tiny-vllm (`spec` variant) on a free test port with a short measurement plan (vllm_lanes.short_plan).
        `eager`: with --enforce-eager, which skips the boot's torch.compile (for a test to which the engine's
        speed and compile facts do not matter)."""
        plan = tiny_vllm_plan(free_port(), spec=spec, **measure)
        return with_eager(plan) if eager else plan

    def lane(self, plan: LanePlan | None = None, **options) -> Lane:
        """A Lane of `plan` (default: `self.plan()`) with its run folder under the test's own root."""
        plan = plan or self.plan()
        kw = {"sink": RunFolderSink(self.env.root / f"run{len(self.lanes)}"), "poll": 0.2, "stop_grace": 10}
        lane = Lane(plan, **{**kw, **options})
        self.lanes.append(lane)
        return lane

    def processes(self) -> list[tuple[int, str]]:
        return self.env.processes()


@pytest.fixture
def vllm_fresh(tmp_path, tmp_path_factory, monkeypatch) -> Iterator[FreshVllm]:
    """A fresh vLLM for tests that need one (say why in the test's docstring). The test's environment carries a
    state dir, the session's model cache and a leftover token; at the end every lane made here is down, and
    nothing it or a subprocess started is left (checked, then killed)."""
    _skip_without_vllm()
    env = LaneEnv(tmp_path / "fresh", _model_cache(tmp_path_factory))
    for name, value in env.variables.items():
        monkeypatch.setenv(name, value)
    fresh = FreshVllm(env)
    try:
        yield fresh
        for lane in fresh.lanes:
            lane.down()
            assert lane.status() == {"localhost": "absent"} and lane.leftovers() == {}
        assert env.processes() == []
    finally:
        kill_processes(env.token)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items) -> None:
    """The tests that may end the shared lane (`vllm_shared_last`) after every other test on it, the rest in
    their order; then note the last test that uses the lane, so that it can go down right after."""
    items[:] = enders_last(items, lambda item: _uses(item, SHARED), lambda item: _uses(item, LAST))
    users = [item.nodeid for item in items if _uses(item, SHARED)]
    config.stash[_LAST_USER] = users[-1] if users else None


def enders_last(items: list[T], uses: Callable[[T], bool], ends: Callable[[T], bool]) -> list[T]:
    """`items` with those that may end the shared lane (`ends`) moved right after the last other item that
    `uses` it; unchanged when no other item uses it."""
    enders = [item for item in items if ends(item)]
    rest = [item for item in items if not ends(item)]
    others = [i for i, item in enumerate(rest) if uses(item)]
    if not (enders and others):
        return items
    return rest[: others[-1] + 1] + enders + rest[others[-1] + 1 :]


def _uses(item: pytest.Item, fixture: str) -> bool:
    return fixture in getattr(item, "fixturenames", ())


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem) -> None:
    """After the last test that uses the shared lane (its fixtures torn down already): the lane goes down."""
    if item.nodeid == item.config.stash.get(_LAST_USER, None):
        shared = item.config.stash.get(_HOLDER, None)
        if shared is not None:
            shared.close()
