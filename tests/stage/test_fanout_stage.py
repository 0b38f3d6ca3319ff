"""The pure parts of the fan-out in stage() (docs/fanout.md, "Running it"): what a delivered file puts into
the node's report and manifest entry, whose notes a fan-out's warnings are, and the progress of its pulls."""

from __future__ import annotations

from labkit.stage.build import node_warnings, received_copies
from labkit.stage.fanout import needs_from
from labkit.stage.fanout_run import Fetched
from labkit.stage.reports import CopyProgress, NodeReport
from labkit.stage.viewstate import FileState

SHA = "ab" * 32


class Assessed:
    """The parts of a NodeAssessment that received_copies and needs_from read."""

    def __init__(self, node: str, blob: str, copy: bool = True):
        self.node = node
        self.files = {"a.bin": FileState("a.bin", 10, "copy" if copy else "verified", blob=blob)}
        self.to_copy = [{"name": "a.bin", "size": 10, "src": "/c/snapshots/x/a.bin"}] if copy else []


def fetched(sha: str = SHA, tried: tuple[str, ...] = ()) -> Fetched:
    return Fetched("n2", "a.bin", 10, 0.5, "n1", sha, "sha256 given", tried)


def test_a_received_file_counts_as_copied_with_its_source_and_fallbacks():
    rep = NodeReport("n2", "c0")
    view = {"a.bin": {"state": "file", "size": 10, "mtime_ns": 5, "ctime_ns": 6, "alloc": 4096}}
    got = received_copies(
        rep, Assessed("n2", SHA), {"a.bin": fetched(tried=("n3: reset at 4",))}, view, False
    )
    assert got["a.bin"]["bytes"] == 10 and got["a.bin"]["seconds"] == 0.5 and got["a.bin"].get("deep") is None
    assert (rep.bytes_copied, rep.copy_seconds, rep.methods) == (10, 0.5, ["fan-out"])
    assert rep.sources == {"a.bin": "n1"}
    assert rep.warnings == ["a.bin: n3: reset at 4; received from n1 instead"]


def test_in_deep_mode_the_sha256_checked_on_receipt_is_the_deep_record_when_it_is_the_blob_name():
    view = {"a.bin": {"state": "file", "size": 10, "mtime_ns": 5, "ctime_ns": 6}}
    got = received_copies(NodeReport("n2", "c0"), Assessed("n2", SHA), {"a.bin": fetched()}, view, True)
    assert got["a.bin"]["deep"] == {"algo": "sha256", "hex": SHA, "size": 10, "mtime_ns": 5, "ctime_ns": 6}
    other = received_copies(
        NodeReport("n2", "c0"), Assessed("n2", "cd" * 32), {"a.bin": fetched()}, view, True
    )
    assert other["a.bin"].get("deep") is None


def test_the_blob_name_is_the_expected_sha256_of_each_file_to_deliver():
    needs, holders = needs_from([Assessed("n1", SHA), Assessed("n2", SHA), Assessed("n3", SHA, copy=False)])
    assert [f.sha256 for f in needs["n1"]] == [SHA] and needs["n3"] == []
    assert holders == {"a.bin": ["n3"]}
    (f,) = needs_from([Assessed("n1", "0123abcd" * 5)])[0]["n1"]  # a git blob: no SHA-256 to expect
    assert f.sha256 is None


def test_a_fanout_warning_goes_to_the_node_it_names_else_to_every_node():
    notes = node_warnings(["n2: its fan-out server did not start (x)", "fan-out: something"], ["n1", "n2"])
    assert notes == {
        "n1": ["fan-out: something"],
        "n2": ["n2: its fan-out server did not start (x)", "fan-out: something"],
    }


def test_pull_progress_is_counted_and_server_events_are_not(capsys):
    bar = CopyProgress(100, enabled=False)
    sink = bar.peer_sink("n2")
    sink({"event": "progress", "name": "a.bin", "done": 40, "total": 100, "source": "n1", "rate": 2e6})
    sink({"event": "progress", "name": "a.bin", "done": 90, "total": 100, "role": "server"})
    sink({"event": "fallback", "name": "a.bin", "source": "n1", "at": 40, "why": "reset"})
    assert bar.done == 40
    assert "n2 a.bin: n1 failed at 40 bytes (reset)" in capsys.readouterr().err
