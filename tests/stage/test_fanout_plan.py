"""The fan-out plan (labkit/stage/fanout.py), pure: chains, where the NAS reads go, fallback order, requests."""

from __future__ import annotations

import shlex

import pytest

from labkit.errors import LabkitError
from labkit.stage.fanout import NAS, FanoutFile, needs_from, plan_fanout
from labkit.stage.fanout_requests import partial_name, pull_request, serve_request, token_keys
from labkit.stage.peer_ops import peer_command, peer_parts, peer_script, shippable

NODES = ("dgx5", "dgx6", "dgx7", "dgx8")
A = FanoutFile(
    "model-00047-of-00048.safetensors",
    101_500_000_000,
    "/nas/snap/model-00047-of-00048.safetensors",
    "a7" * 32,
    "blob name",
)
B = FanoutFile(
    "model-00048-of-00048.safetensors",
    101_400_000_000,
    "/nas/snap/model-00048-of-00048.safetensors",
    "b8" * 32,
    "blob name",
)
HAND = FanoutFile(
    "model-00001-of-00048.safetensors", 5_000_000_000, "/nas/hand/model-00001-of-00048.safetensors"
)


def test_each_shard_is_read_from_the_nas_once_by_a_different_node():
    plan = plan_fanout({n: [A, B] for n in NODES})
    assert plan.nas_reads() == {A.name: ["dgx5"], B.name: ["dgx6"]}
    assert plan.describe() == [
        f"{A.name}: nas -> dgx5 -> dgx6 -> dgx7 -> dgx8",
        f"{B.name}: nas -> dgx6 -> dgx7 -> dgx8 -> dgx5",
    ]
    for node in NODES:  # every node receives each file once and sends it at most once
        assert [c.file for c in plan.receiving(node)] == [A, B]
        assert set(plan.serving(node).values()) <= {1}
    assert plan.serving("dgx8") == {B.name: 1} and plan.serving("dgx5") == {A.name: 1}
    assert plan.total_bytes == 4 * (A.size + B.size)


def test_fallbacks_are_the_nodes_ahead_nearest_first_then_the_nas():
    chain = plan_fanout({n: [A] for n in NODES}).chains[0]
    assert chain.sources("dgx5") == (None,)
    assert chain.sources("dgx6") == ("dgx5", None)
    assert chain.sources("dgx8") == ("dgx7", "dgx6", "dgx5", None)


def test_more_shards_than_nodes_spread_the_nas_bytes():
    files = [FanoutFile(f"s{i}", size, f"/nas/s{i}") for i, size in enumerate((90, 80, 70, 60, 50, 40))]
    plan = plan_fanout({n: files for n in NODES[:3]})
    by_reader: dict[str, int] = {}
    for name, readers in plan.nas_reads().items():
        assert len(readers) == 1
        by_reader[readers[0]] = by_reader.get(readers[0], 0) + next(f.size for f in files if f.name == name)
    assert by_reader == {"dgx5": 130, "dgx6": 130, "dgx7": 130}  # largest first, to the least loaded


def test_a_node_holding_a_verified_copy_heads_the_chain_instead_of_the_nas():
    plan = plan_fanout({"dgx5": [], "dgx6": [A], "dgx7": [A]}, holders={A.name: ["dgx5"]})
    (chain,) = plan.chains
    assert chain.head == "dgx5" and chain.receivers == ("dgx6", "dgx7")
    assert plan.nas_reads() == {A.name: []}
    assert chain.sources("dgx7") == ("dgx6", "dgx5", None)
    assert plan.serving("dgx5") == {A.name: 1} and plan.serving("dgx7") == {}


def test_a_file_without_a_digest_goes_to_its_other_receivers_checked_against_the_first_nas_read():
    """No SHA-256 (a hand-made cache): no holder heads it (nothing could check the holder's copy); the first
    round reads it from the NAS on one node only, the second passes it on checked against that read's hash."""
    needs = {"dgx5": [], **{n: [A, HAND] for n in NODES[1:]}}
    plan = plan_fanout(needs, holders={HAND.name: ["dgx5"], A.name: ["dgx5"]})
    hand = next(c for c in plan.chains if c.file == HAND)
    assert hand.head is None and next(c for c in plan.chains if c.file == A).head == "dgx5"
    first = plan.first_round()
    assert [c.receivers for c in first.chains if c.file == HAND] == [hand.receivers[:1]]
    assert [c for c in first.chains if c.file == A] == [c for c in plan.chains if c.file == A]
    (reader,) = hand.receivers[:1]
    second = plan.second_round({HAND.name: (reader, "c9" * 32)})
    (chain,) = second.chains
    assert chain.head == reader and chain.receivers == hand.receivers[1:]
    assert (chain.file.sha256, chain.file.trust) == ("c9" * 32, f"sha256 of {reader}'s NAS read")
    assert plan.second_round({}).chains == ()  # the first read failed: nothing passed on unchecked
    trust = plan.trust()
    assert trust[A.name] == "sha256 = blob name, checked by every receiver"
    assert f"sha256 of {reader}'s NAS read" in trust[HAND.name]
    alone = plan_fanout({n: [HAND] for n in NODES}, fanout=False).trust()
    assert alone == {HAND.name: "no digest: not passed peer to peer (read from the NAS by each receiver)"}


def test_without_fanout_every_node_reads_the_nas_itself():
    plan = plan_fanout({n: [A, B] for n in NODES}, fanout=False)
    assert plan.nas_reads() == {A.name: list(NODES), B.name: list(NODES)}
    assert all(plan.serving(n) == {} for n in NODES)


def test_nodes_that_disagree_about_a_file_or_a_bad_digest_are_refused():
    other = FanoutFile(A.name, A.size + 1, A.src)
    with pytest.raises(LabkitError, match="differs from the other nodes"):
        plan_fanout({"dgx5": [A], "dgx6": [other]})
    with pytest.raises(LabkitError, match="64 lower-case hex"):
        plan_fanout({"dgx5": [FanoutFile("x", 1, "/nas/x", "ABC")]})


BINDS = {n: f"10.0.0.{i + 5}" for i, n in enumerate(NODES)}


def test_requests_name_growing_copies_sources_and_temp_names():
    plan = plan_fanout({n: [A] for n in NODES})
    tokens = {key: f"{key[0]}>{key[1]}:{key[2]}".ljust(32, "-") for key in token_keys(plan)}
    common = {"run": "r1", "tokens": tokens, "stall": 5.0}
    serve = serve_request(plan, "dgx6", "/v", bind="10.0.0.6", binds=BINDS, lifetime=60, idle=9, **common)
    tmp = partial_name(A.name, "r1")
    assert tmp.startswith(".labkit-partial.") and tmp.endswith(".r1")
    (offered,) = serve["files"]
    assert (offered["path"], offered["final"], offered["adopt"]) == (f"/v/{tmp}", f"/v/{A.name}", True)
    # a token per receiver that may pull it from dgx6 (dgx7 next, dgx8 as a fallback), and only they connect
    assert offered["tokens"] == {
        tokens[("dgx6", "dgx7", A.name)]: "dgx7",
        tokens[("dgx6", "dgx8", A.name)]: "dgx8",
    }
    assert serve["allow"] == ["10.0.0.7", "10.0.0.8"]
    assert serve["expect"] == {A.name: 1} and serve["bind"] == "10.0.0.6" and serve["flip"] == {}
    assert "token" not in serve
    assert serve_request(plan, "dgx8", "/v", bind="x", binds=BINDS, lifetime=60, idle=9, **common) is None
    endpoints = {"dgx5": ("10.0.0.5", 4001), "dgx7": ("10.0.0.7", 4003)}  # dgx6's server did not start
    pull = pull_request(plan, "dgx8", "/v", bind="10.0.0.8", endpoints=endpoints, **common)
    (f,) = pull["files"]
    assert [s["label"] for s in f["sources"]] == ["dgx7", "dgx5", NAS]
    assert [s.get("token") for s in f["sources"]] == [
        tokens[("dgx7", "dgx8", A.name)],
        tokens[("dgx5", "dgx8", A.name)],
        None,
    ]
    assert f["sources"][-1] == {"kind": "file", "label": NAS, "path": A.src}
    assert f["partial"] == tmp and f["blob"] == A.src
    assert (f["sha256"], f["digest_of"]) == (A.sha256, "sha256 = blob name")
    assert pull["bind"] == "10.0.0.8" and "token" not in pull
    nas = {"address": "127.0.0.1", "port": 9, "token": "n"}
    via = pull_request(plan, "dgx5", "/v", bind="10.0.0.5", endpoints=endpoints, nas=nas, **common)
    assert via["files"][0]["sources"] == [{"kind": "peer", "label": NAS, **nas}]
    # a stand-in server takes one token per file (the benchmark's throttled NAS): each file gets its own
    per_file = {"address": "127.0.0.1", "port": 9, "tokens": {A.name: "ta"}}
    via = pull_request(plan, "dgx5", "/v", bind="10.0.0.5", endpoints=endpoints, nas=per_file, **common)
    assert via["files"][0]["sources"] == [
        {"kind": "peer", "label": NAS, "address": "127.0.0.1", "port": 9, "token": "ta"}
    ]


def test_every_source_receiver_and_file_has_its_own_token_key():
    plan = plan_fanout({n: [A, B] for n in NODES})
    keys = list(token_keys(plan))
    assert len(keys) == len(set(keys)) == 2 * (1 + 2 + 3)  # per file: 1 + 2 + 3 peer sources down the chain
    assert ("dgx5", "dgx8", A.name) in keys and ("dgx8", "dgx5", A.name) not in keys


def test_the_peer_command_is_quoted_and_carries_no_token():
    cmd = peer_command("serve", ["labkit-stage-job=abc"])
    argv = shlex.split(cmd)
    assert argv[:4] == ["python3", "-I", "-S", "-c"] and argv[5:] == ["serve", "-"]
    assert argv[4] == peer_script(["labkit-stage-job=abc"])
    assert argv[4].startswith("# labkit-stage-job=abc\nfrom __future__ import annotations\n")


def test_the_peer_script_is_its_parts_as_they_read_less_their_imports_of_each_other():
    """What a node runs is the files: every line of every part is in the text, in order, but the imports
    of labkit (the other parts, whose names come earlier in the text) and the parts' own __future__ lines."""
    script = peer_script()
    compile(script, "peer", "exec")
    assert "import labkit" not in script and "from labkit" not in script
    assert script.count("from __future__ import annotations") == 1
    names = [p.name for p in peer_parts()]
    assert names[-1] == "peer.py" and len(names) > 1
    at = 0
    for part in peer_parts():
        for line in part.read_text().splitlines():
            if line and not line.startswith(("from __future__", "from labkit", "    ", ")")):
                at = script.index(line + "\n", at)


def test_no_part_of_the_peer_script_rebinds_a_name_another_part_defines():
    """The parts are joined as text, so a top-level name defined in two parts would silently rebind the first
    (the later part's function would serve the earlier one's callers)."""
    import ast

    seen: dict[str, str] = {}
    for part in peer_parts():
        for node in ast.parse(part.read_text()).body:
            if isinstance(node, ast.FunctionDef | ast.ClassDef):
                names = [node.name]
            elif isinstance(node, ast.Assign):
                names = [n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)]
            else:
                continue
            for name in names:
                assert seen.setdefault(name, part.name) == part.name, (
                    f"{part.name} and {seen[name]} define {name}"
                )
    assert {"emit", "serve", "pull", "main"} <= set(seen)


def test_a_parenthesised_labkit_import_is_left_out_whole_and_nothing_else():
    text = "from __future__ import annotations\nimport os\nfrom labkit.x import (\n    a,\n    b,\n)\nfrom labkit.y import c\nX = (\n    1,\n)\n"
    assert shippable(text) == "import os\nX = (\n    1,\n)\n"


def test_needs_from_assessments():
    class F:
        def __init__(self, status):
            self.status, self.blob = status, A.sha256  # the blob name is the file's SHA-256

    class Assessed:
        def __init__(self, node, to_copy, files):
            self.node, self.to_copy, self.files = node, to_copy, files

    copy = {"name": A.name, "src": A.src, "size": A.size}
    needs, holders = needs_from(
        [
            Assessed("dgx5", [], {A.name: F("verified")}),
            Assessed("dgx6", [copy], {A.name: F("repair")}),
            Assessed("dgx7", [copy], {A.name: F("copy")}),
        ]
    )
    assert needs == {"dgx5": [], "dgx6": [A], "dgx7": [A]} and holders == {A.name: ["dgx5"]}


def test_bind_addresses_come_from_the_recipe_the_node_or_the_name():
    from types import SimpleNamespace

    from labkit.nodes import Result
    from labkit.recipe.launch import FabricSpec
    from labkit.stage.fanout_run import fabric_binds

    class Node:
        def __init__(self, name, ip_output):
            self.name, self.ip_output, self.ran = name, ip_output, []

        def run(self, cmd, timeout=None, stdin=None):
            self.ran.append(cmd)
            return Result(self.name, str(cmd), self.ip_output, "", 0 if self.ip_output else 1)

    fabric = FabricSpec("enp1s0f1np1", addresses=(("dgx5", "192.168.177.11"),))
    plan = SimpleNamespace(cluster=SimpleNamespace(fabric=fabric))
    known, seen = (
        Node("dgx5", ""),
        Node("dgx6", "3: enp1s0f1np1    inet 192.168.177.12/24 brd 192.168.177.255\n"),
    )
    assert fabric_binds(plan, [known, seen]) == {"dgx5": "192.168.177.11", "dgx6": "192.168.177.12"}
    assert known.ran == [] and seen.ran == [["ip", "-o", "-4", "addr", "show", "dev", "enp1s0f1np1"]]
    with pytest.raises(
        LabkitError, match="dgx7: no address to bind on the fabric interface enp1s0f1np1: no IPv4"
    ):
        fabric_binds(plan, [Node("dgx7", "")])
    # a link-local address listed first is never bound (nor offered to the other nodes' allow-lists)
    link_local = "3: enp1s0f1np1    inet 169.254.3.7/16 brd 169.254.255.255\n"
    late = Node("dgx8", link_local + "3: enp1s0f1np1    inet 192.168.177.14/24 brd 192.168.177.255\n")
    assert fabric_binds(plan, [late]) == {"dgx8": "192.168.177.14"}
    with pytest.raises(LabkitError, match="dgx8: .*only link-local addresses .169.254.3.7."):
        fabric_binds(plan, [Node("dgx8", link_local)])
    # a node cabled on another port (cluster.fabric.interfaces) is read on its own port
    other = SimpleNamespace(
        cluster=SimpleNamespace(fabric=FabricSpec("enp1s0f1np1", interfaces=(("dgx9", "enP2p1s0f1np1"),)))
    )
    port = Node("dgx9", "5: enP2p1s0f1np1    inet 192.168.178.19/24 brd 192.168.178.255\n")
    assert fabric_binds(other, [port]) == {"dgx9": "192.168.178.19"}
    assert port.ran == [["ip", "-o", "-4", "addr", "show", "dev", "enP2p1s0f1np1"]]
    no_fabric = SimpleNamespace(cluster=SimpleNamespace(fabric=None))
    assert fabric_binds(no_fabric, [Node("127.0.0.3", ""), Node("localhost", "")]) == {
        "127.0.0.3": "127.0.0.3",
        "localhost": "127.0.0.1",
    }
