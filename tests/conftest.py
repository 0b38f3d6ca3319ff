"""Shared fixtures: four real sshd nodes (tests/support/nodes.py), an isolated environment for local lanes and
a copy of the committed lab record (tests/support/record.py)."""

from __future__ import annotations

import shutil
import signal
import uuid
from pathlib import Path

import pytest

from tests.support.nodes import Cluster, kill_processes, session_processes, sshd_available
from tests.support.record import copy_record
from tests.support.tiers import RECORD_FIXTURE, TIERS, tiers_of_test
from tests.support.workers import ALONE, Turns, group_of, run_order

pytest_plugins = ["tests.support.vllm_fixtures"]


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    """Four OpenSSH nodes on 127.0.0.2-5 for the whole session; every sshd and leftover is killed at the end."""
    reason = sshd_available()
    if reason:
        pytest.skip(reason)
    c = Cluster(tmp_path_factory.mktemp("nodes"))
    try:
        c.start()
        yield c
    finally:
        c.stop()


@pytest.fixture
def nodes(cluster):
    """The cluster with every shim at its default and no recorded call before the test, and the shims reset after."""
    cluster.reset_shims()
    cluster.clear_calls()
    yield cluster
    cluster.reset_shims()


class LocalEnv:
    def __init__(self, token: str, state_dir):
        self.token = token
        self.state_dir = state_dir

    def processes(self):
        return session_processes(self.token)


@pytest.fixture
def local_env(tmp_path, monkeypatch):
    """Local lanes in isolation: a temp state dir, and a token every started process inherits (leftover check)."""
    token = uuid.uuid4().hex
    monkeypatch.setenv("LABKIT_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("LABKIT_TEST_SESSION", token)
    env = LocalEnv(token, tmp_path / "state")
    yield env
    kill_processes(token)


@pytest.fixture(scope="session")
def committed_record(tmp_path_factory) -> Path:
    """git's version of results/, copied once per session; read it through `lab_record`, which may be changed."""
    return copy_record(tmp_path_factory.mktemp("committed") / "results")


@pytest.fixture
def lab_record(committed_record, tmp_path) -> Path:
    """The test's own copy of the committed lab record: never results/ itself, whose runs beyond the commit
    (a `make bench`, a user's own) no test may count."""
    return Path(shutil.copytree(committed_record, tmp_path / "lab-record" / "results"))


def pytest_configure(config):
    """A suite started from a background job (`nohup make test &`) inherits SIGINT ignored, and Python then
    leaves it ignored: every test that sends a real Ctrl-C would wait for an interrupt that never comes, and
    every CLI child would ignore one too. Ctrl-C is part of what the tests check, so it is always restored
    (a Python handler here, so exec'd children start with the default action)."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    """Each test gets its tier markers from what it uses (tests/support/tiers.py), so `-m` picks tiers, and
    `record` when it reads the committed lab record; and the xdist group of what it shares with other tests
    (tests/support/workers.py), before xdist reads the groups. Then the order the groups are handed out in:
    the `alone` tests first (`run_order`)."""
    alone_modules = {str(item.path) for item in items if _alone(item)}
    for item in items:
        if not isinstance(item, pytest.Function):
            continue
        defs = item._fixtureinfo.name2fixturedefs
        fixtures = {name: {d.func.__module__ for d in defs.get(name, ())} for name in item.fixturenames}
        tiers = tiers_of_test(item.path, item.originalname, fixtures)
        for tier in sorted(tiers):
            item.add_marker(tier)
        if RECORD_FIXTURE in item.fixturenames:
            item.add_marker("record")
        scopes = {d.scope for name in item.fixturenames for d in defs.get(name, ())}
        module = item.nodeid.split("::")[0]
        group = group_of(tiers, scopes, item.fixturenames, module, str(item.path) in alone_modules)
        if group and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(group))
    items[:] = run_order(items, _group, _alone, _light)


def _group(item: pytest.Item) -> str | None:
    marker = item.get_closest_marker("xdist_group")
    return None if marker is None else str(marker.kwargs.get("name", marker.args[0] if marker.args else ""))


def _alone(item: pytest.Item) -> bool:
    return item.get_closest_marker(ALONE) is not None


def _light(item: pytest.Item) -> bool:
    """Of the pure tier only: it may run beside an `alone` test (tests/support/workers.py)."""
    return {m.name for m in item.iter_markers()} & set(TIERS) == {"pure"}


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    """Under xdist, a test marked `alone` runs while no other test does but light ones
    (tests/support/workers.py, `Turns`): its set-up, call and teardown. Outermost, so that pytest-timeout's
    clock starts once the lock is held."""
    turns = item.config.stash.setdefault(TURNS, Turns())
    turns.take(_alone(item), _light(item))
    try:
        yield
    finally:
        turns.done(_alone(nextitem) if nextitem is not None else None)


TURNS = pytest.StashKey[Turns]()
