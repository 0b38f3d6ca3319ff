"""The reachability check on real point-to-point subnets (issue 27, topology): four network namespaces with an
OpenSSH server each (tests/support/netns.py), cabled as a switch (one bridge), as a switchless ring (veth pairs,
each link its own /30) and on a management bridge. labkit's own SSH path runs every command with the real `ip`
and `ping`. On the switch every node reaches the head; on the ring without mesh mode the head's port address
answers only its neighbour on that cable, so the start is refused before anything runs and `labkit doctor`
names the nodes that cannot reach it and says what to set; with `topology = "ring"` the rendezvous goes over the
management bridge, every node reaches it, and the lane's commands carry the mesh set."""

from __future__ import annotations

import io
import json

import pytest

from labkit.serve import Lane
from labkit.serve.checks import preflight
from labkit.serve.errors import PreflightFailed
from labkit.serve.plan import launches
from labkit.serve.verdict import FAIL, OK
from tests.support.lanes import sim_recipe
from tests.support.netns import NetnsCluster, netns_available
from tests.support.serving import labkit_cli


@pytest.fixture(scope="module")
def ring(tmp_path_factory):
    """The four namespaced nodes; namespaces, veths, bridges and every process removed after, even on failure."""
    reason = netns_available()
    if reason:
        pytest.skip(f"network namespaces unavailable: {reason}")
    c = NetnsCluster(tmp_path_factory.mktemp("netns"))
    try:
        c.start()
        yield c
    finally:
        c.stop()
        assert c.leftovers() == []


def plan_on(ring, folder, fabric: str, **kw):
    """A simulator lane (process runtime) on the namespaced nodes, with `fabric` as its [cluster.fabric] body."""
    return sim_recipe(
        folder,
        18391,
        nodes=ring.addresses,
        ssh_port=22,
        user="root",
        extra=f"[cluster.fabric]\n{fabric}",
        **kw,
    )


def lane_of(ring, plan) -> Lane:
    return Lane(plan, ssh=ring.ssh_options(), progress=io.StringIO(), poll=0.1, stop_grace=3)


def reach_rows(checks) -> dict[str, object]:
    return {c.node: c for c in checks if c.check == "reach"}


def test_on_a_switch_every_node_reaches_the_heads_fabric_address(ring, tmp_path):
    lane = lane_of(ring, plan_on(ring, tmp_path / "lane", 'interface = "fab0"\n'))
    try:
        report = preflight(lane.state, pull=False, drop=False)
    finally:
        lane.close()
    a = ring.addresses
    assert report.addresses == {a[i]: ring.fab(i) for i in range(4)}  # detected with the real `ip`
    rows = reach_rows(report.checks)
    assert rows[a[0]].status == OK and rows[a[0]].result == f"the rendezvous host: {ring.fab(0)} on fab0"
    for i in (1, 2, 3):
        assert rows[a[i]].status == OK, rows[a[i]].result
        assert rows[a[i]].result.startswith(f"reaches {a[0]}'s rendezvous address {ring.fab(0)} on fab0 (")
        assert "echoes answered" in rows[a[i]].result
    assert not report.failed, [c for c in report.failed]


RING_NO_MESH = 'interface = "ring0"\ninterfaces = { "{n1}" = "ring1" }\n'


def test_on_a_ring_without_mesh_mode_the_start_is_refused_naming_the_nodes_that_cannot_reach_the_head(
    ring, tmp_path
):
    a = ring.addresses
    # the head's ring0 address is on the cable to node 1, whose ring1 is the other end; 2 and 3 are not on it
    fabric = RING_NO_MESH.replace("{n1}", a[1])
    lane = lane_of(ring, plan_on(ring, tmp_path / "lane", fabric))
    try:
        with pytest.raises(PreflightFailed) as e:
            lane.start()
        assert ring.processes() == []  # nothing was started on any node
    finally:
        lane.close()
    err = e.value
    assert set(err.failures) == {a[2], a[3]}
    rows = reach_rows(err.checks)
    assert rows[a[1]].status == OK and f"{ring.ring0(0)} on ring1" in rows[a[1]].result
    for i in (2, 3):
        text = rows[a[i]].result
        assert rows[a[i]].status == FAIL
        assert text.startswith(f"cannot reach {a[0]}'s rendezvous address {ring.ring0(0)} on ring0: ")
        assert "Network is unreachable" in text or ", 0 received, 100% packet loss" in text  # ping's words
        assert f"its address {ring.ring0(i)}/30 is on another subnet than {a[0]}'s {ring.ring0(0)}" in text
        assert 'set [cluster.fabric] topology = "ring" and interface = the management port' in text
        assert str(tmp_path / "lane" / "recipe.toml") in text or "recipe.toml" in text
        assert f"{a[i]}  reach" in str(err)  # the refusal's table names the node and the check


def test_doctor_says_which_node_cannot_reach_the_head_and_what_to_set(ring, tmp_path):
    a = ring.addresses
    plan_on(ring, tmp_path / "lane", RING_NO_MESH.replace("{n1}", a[1]))
    proc = labkit_cli("doctor", str(tmp_path / "lane"), "--json", env=ring.cli_env())
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 1, out + err
    rows = {(c["node"], c["check"]): c for c in json.loads(out)["checks"]}
    assert [n for n in a if rows[(n, "reach")]["status"] == FAIL] == [a[2], a[3]]
    assert 'topology = "ring"' in rows[(a[3], "reach")]["result"]
    assert rows[(a[3], "reach")]["facts"] == {
        "interface": "ring0",
        "source": ring.ring0(3),
        "target": ring.ring0(0),
        "head": a[0],
        "probe": rows[(a[3], "reach")]["facts"]["probe"],
    }
    proc = labkit_cli("doctor", str(tmp_path / "lane"), env=ring.cli_env())
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 1 and "check(s) failed on " in out
    assert f"failed on {a[2]}, {a[3]}; nothing was started" in out


def test_with_topology_ring_the_rendezvous_goes_over_the_management_network_and_commands_carry_the_mesh_set(
    ring, tmp_path
):
    a = ring.addresses
    plan = plan_on(ring, tmp_path / "lane", 'topology = "ring"\ninterface = "mgmt0"\n')
    lane = lane_of(ring, plan)
    try:
        report = preflight(lane.state, pull=False, drop=False)
        detected = report.addresses
        lns = {ln.node: dict(ln.env) for ln in launches(plan, lane.group.hosts, detected)}
    finally:
        lane.close()
    assert not report.failed, report.failed
    rows = reach_rows(report.checks)
    assert all(rows[n].status == OK for n in a)
    assert rows[a[3]].result.startswith(f"reaches {a[0]}'s rendezvous address {ring.mgmt(0)} on mgmt0 (")
    for n in a:
        env = lns[n]
        assert env["NCCL_SOCKET_IFNAME"] == env["GLOO_SOCKET_IFNAME"] == "mgmt0"
        assert (env["NCCL_NET_PLUGIN"], env["NCCL_IB_SUBNET_AWARE_ROUTING"], env["NCCL_IB_MERGE_NICS"]) == (
            "none",
            "1",
            "0",
        )
        assert env["NCCL_ALGO"] == "Ring"  # four nodes


def test_a_ring_whose_rendezvous_is_on_the_management_network_but_topology_switch_is_refused_by_the_cabling(
    ring, tmp_path
):
    """The rendezvous works there, but the RoCE ports (ring0, ring1) are each on a subnet of two nodes: NCCL
    would time out between non-neighbours. On the switch port (fab0, one subnet for all) nothing is said."""
    a = ring.addresses
    ports = 'interface = "mgmt0"\nhcas = ["rocep1s0f0", "rocep1s0f1"]\n'
    lane = lane_of(ring, plan_on(ring, tmp_path / "lane", ports))
    try:
        report = preflight(lane.state, pull=False, drop=False)
    finally:
        lane.close()
    assert all(c.status == OK for c in report.checks if c.check in ("reach", "rdma"))
    rows = {c.node: c for c in report.checks if c.check == "cabling"}
    assert set(rows) == set(a) and {c.status for c in rows.values()} == {FAIL}
    text = rows[a[0]].result
    assert f"ring0 {ring.ring0(0)}/30 with {a[1]}" in text and f"ring1 {ring.ring1(0)}/30 with {a[3]}" in text
    assert 'set [cluster.fabric] topology = "ring"' in text
    for fabric in (ports.replace('interface = "mgmt0"', 'topology = "ring"\ninterface = "mgmt0"'),
                   'interface = "mgmt0"\nhcas = ["roceP2p1s0f1"]\n'):  # fmt: skip
        lane = lane_of(ring, plan_on(ring, tmp_path / "ok", fabric))
        try:
            report = preflight(lane.state, pull=False, drop=False)
        finally:
            lane.close()
        assert not report.failed, report.failed
        assert not [c for c in report.checks if c.check == "cabling"]
