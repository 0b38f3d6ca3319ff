"""The reachability check (issue 27, topology) as data: the probe command quoted, iputils' ping output parsed
(answered, lost, no route, not installed), the verdicts (duplicates, the subnet note, what to set on a switch
or a ring), and on the four sshd nodes with the `ping` shim: a node whose interface differs (per-node
`interfaces`) is checked on its own port, and a silent head refuses the start naming the node."""

from __future__ import annotations

import ipaddress

from labkit.nodes import Result
from labkit.serve.reach import parse_probe, probe_command, reach_checks, subnet_note
from labkit.serve.verdict import FAIL, OK, SKIP, WARN
from tests.recipe.test_topology import four
from tests.serve.test_preflight import lane_on, refused

ANSWERED = """PING 10.0.0.5 (10.0.0.5) from 10.0.0.6 : 56(84) bytes of data.
64 bytes from 10.0.0.5: icmp_seq=1 ttl=64 time=0.061 ms
64 bytes from 10.0.0.5: icmp_seq=3 ttl=64 time=0.050 ms

--- 10.0.0.5 ping statistics ---
3 packets transmitted, 2 received, 33.3333% packet loss, time 404ms
rtt min/avg/max/mdev = 0.050/0.055/0.061/0.005 ms
"""
LOST = """PING 10.0.2.1 (10.0.2.1) from 10.0.2.13 : 56(84) bytes of data.

--- 10.0.2.1 ping statistics ---
3 packets transmitted, 0 received, 100% packet loss, time 410ms
"""


def res(stdout: str = "", stderr: str = "", code: int = 0) -> Result:
    return Result("dgx6", "ping", stdout, stderr, code)


def test_probe_command_quotes_its_arguments():
    assert probe_command("10.0.0.6", "10.0.0.5") == "ping -n -c 3 -i 0.2 -W 2 -I 10.0.0.6 10.0.0.5"
    assert probe_command("a b", "$(id)") == "ping -n -c 3 -i 0.2 -W 2 -I 'a b' '$(id)'"


def test_ping_output_answered_lost_unreachable_and_missing():
    p = parse_probe(res(ANSWERED))
    assert p.reached and p.text == "2/3 echoes answered"
    p = parse_probe(res(LOST, code=1))
    assert not p.reached and p.text == "3 packets transmitted, 0 received, 100% packet loss, time 410ms"
    p = parse_probe(res(stderr="ping: connect: Network is unreachable\n", code=2))
    assert not p.reached and not p.missing and p.text == "connect: Network is unreachable"
    p = parse_probe(res(stderr="bash: line 1: ping: command not found\n", code=127))
    assert p.missing and "iputils-ping" in p.text


def test_subnet_note_says_when_the_node_is_on_another_subnet():
    own = ipaddress.IPv4Interface("10.0.2.13/30")
    assert "10.0.2.13/30 is on another subnet than dgx5's 10.0.2.1" in subnet_note("dgx5", "10.0.2.1", own)
    assert subnet_note("dgx5", "10.0.2.14", own) == ""
    assert subnet_note("dgx5", "10.0.2.1", None) == ""


def test_verdicts_per_node(tmp_path):
    plan = four(tmp_path / "s", '[cluster.fabric]\ninterface = "enp1s0f1np1"\n')
    addresses = {"dgx5": "10.0.0.5", "dgx6": "10.0.0.6", "dgx7": "10.0.1.7", "dgx8": None}
    nets = {n: ipaddress.IPv4Interface(f"{a}/24") for n, a in addresses.items() if a}
    probes = {"dgx6": res(ANSWERED), "dgx7": res(LOST, code=1)}
    rows = {c.node: c for c in reach_checks(plan, "dgx5", addresses, nets, probes)}  # type: ignore[arg-type]
    assert [rows[n].status for n in ("dgx5", "dgx6", "dgx7", "dgx8")] == [OK, OK, FAIL, SKIP]
    text = rows["dgx7"].result
    assert text.startswith(
        "cannot reach dgx5's rendezvous address 10.0.0.5 on enp1s0f1np1: 3 packets transmitted"
    )
    assert "10.0.1.7/24 is on another subnet than dgx5's 10.0.0.5" in text
    assert 'set [cluster.fabric] topology = "ring" and interface = the management port' in text
    assert plan.file in text
    assert rows["dgx8"].result == "not checked: dgx8's address on the fabric is not known"
    ring = four(tmp_path / "r", '[cluster.fabric]\ntopology = "ring"\ninterface = "enP7s7"\n')
    (row,) = [c for c in reach_checks(ring, "dgx5", addresses, nets, probes) if c.node == "dgx7"]  # type: ignore[arg-type]
    assert "a ring's rendezvous goes over the management network: enP7s7 must reach every node" in row.result
    assert "topology = " not in row.result


def test_two_nodes_with_one_address_fail_and_a_missing_ping_warns(tmp_path):
    plan = four(tmp_path, '[cluster.fabric]\ninterface = "enp1s0f1np1"\n')
    addresses = {"dgx5": "10.0.0.5", "dgx6": "10.0.0.6", "dgx7": "10.0.0.6", "dgx8": "10.0.0.8"}
    probes = {
        "dgx6": res(ANSWERED),
        "dgx7": res(ANSWERED),
        "dgx8": res(stderr="sh: 1: ping: not found\n", code=127),
    }
    rows = {c.node: c for c in reach_checks(plan, "dgx5", addresses, {}, probes)}  # type: ignore[arg-type]
    assert rows["dgx6"].status == rows["dgx7"].status == FAIL
    assert rows["dgx6"].result == "10.0.0.6 on enp1s0f1np1 is also dgx7's address: every node needs its own"
    assert rows["dgx8"].status == WARN and "could not check that 10.0.0.5 is reachable" in rows["dgx8"].result


# ---------------------------------------------------------------------------------------------- on the sshd nodes


def test_a_node_on_another_port_is_checked_on_it_and_a_silent_head_refuses_the_start(nodes, tmp_path):
    a = nodes.addresses
    # dgx7 is cabled on another port, on the fabric's subnet; the others keep cx7
    nodes.set_interfaces(
        a[2], {"cx7": None, "enp1s0f0np0": {"index": 4, "address": "10.10.0.7/24", "state": "UP"}}
    )
    fabric = f'[cluster.fabric]\ninterface = "cx7"\ninterfaces = {{ "{a[2]}" = "enp1s0f0np0" }}\n'
    nodes.clear_calls()
    nodes._node_file(a[3], "ping.json", '{"silent": ["10.10.0.5"]}')  # the head does not answer dgx8
    e = refused(lane_on(nodes, tmp_path, 18377, extra=fabric), nodes)
    assert set(e.failures) == {a[3]}
    rows = {c.node: c for c in e.checks if c.check == "reach"}
    assert rows[a[2]].status == OK and "10.10.0.5 on enp1s0f0np0" in rows[a[2]].result
    assert {c.node: c.status for c in e.checks if c.check == "fabric"} == dict.fromkeys(a, OK)
    text = rows[a[3]].result
    assert text.startswith(
        f"cannot reach {a[0]}'s rendezvous address 10.10.0.5 on cx7: 3 packets transmitted, 0"
    )
    assert "another subnet" not in text  # same subnet: the head is down, not a ring


def test_fabric_net_names_each_nodes_own_interface_in_an_mtu_difference():
    from labkit.serve.netcheck import fabric_net_checks

    def link(name: str, mtu: int) -> Result:
        return res(f"3: {name}: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu {mtu} qdisc mq state UP mode DEFAULT\n")

    links = {"dgx5": link("enp1s0f1np1", 9000), "dgx6": link("enp1s0f0np0", 1500)}
    addrs = {"dgx5": res("3: enp1s0f1np1    inet 10.0.0.5/24 scope global\n"), "dgx6": res("")}
    rows = {
        c.node: c
        for c in fabric_net_checks({"dgx5": "enp1s0f1np1", "dgx6": "enp1s0f0np0"}, links, addrs, "dgx5")
    }
    assert rows["dgx5"].status == OK and rows["dgx6"].status == FAIL
    assert rows["dgx6"].result.startswith("enp1s0f0np0 mtu 1500, but 9000 on dgx5's enp1s0f1np1: ")


def test_cabling_judges_three_or_more_nodes_whose_ports_each_share_a_subnet_with_one_node(tmp_path):
    from labkit.serve.cabling import cabling_checks, hca_ports

    rdma = res("rocep1s0f0 port 1 ==> enp1s0f0np0 (Up)\nrocep1s0f1 port 1 ==> enp1s0f1np1 (Up)\n")
    addrs = res(
        "1: lo    inet 127.0.0.1/8 scope host lo\n"
        "3: enp1s0f0np0    inet 10.20.0.11/24 scope global\n"
        "4: enp1s0f1np1    inet 10.20.6.11/24 scope global\n"
        "5: enP7s7    inet 192.0.2.11/24 scope global\n"
    )
    assert [d for d, _ in hca_ports(("rocep1s0f0", "rocep1s0f1:1"), rdma, addrs)] == [
        "enp1s0f0np0",
        "enp1s0f1np1",
    ]
    assert hca_ports(("rocep1s0f0",), res("# /sys/class/infiniband\nrocep1s0f0\n"), addrs) == []

    def port(dev: str, text: str):
        return (dev, ipaddress.IPv4Interface(text))

    switch = four(tmp_path / "s", '[cluster.fabric]\ninterface = "enP7s7"\nhcas = ["rocep1s0f0"]\n')
    ring = {  # the four-node example of eugr's NETWORKING.md, one rail per cable
        "dgx5": [port("enp1s0f0np0", "10.20.0.11/24"), port("enp1s0f1np1", "10.20.6.11/24")],
        "dgx6": [port("enp1s0f0np0", "10.20.2.12/24"), port("enp1s0f1np1", "10.20.0.12/24")],
        "dgx7": [port("enp1s0f0np0", "10.20.4.13/24"), port("enp1s0f1np1", "10.20.2.13/24")],
        "dgx8": [port("enp1s0f0np0", "10.20.6.14/24"), port("enp1s0f1np1", "10.20.4.14/24")],
    }
    rows = {c.node: c for c in cabling_checks(switch, ring)}
    assert set(rows) == set(ring) and {c.status for c in rows.values()} == {FAIL}
    assert "enp1s0f0np0 10.20.0.11/24 with dgx6; enp1s0f1np1 10.20.6.11/24 with dgx8" in rows["dgx5"].result
    flat = {n: [port("enp1s0f1np1", f"10.10.0.{i}/24")] for i, n in enumerate(ring, 5)}
    assert cabling_checks(switch, flat) == []  # one subnet for all: a switch
    assert cabling_checks(switch, {**ring, "dgx8": []}) == []  # a node without an addressed port: cannot tell
    two = {n: ring[n] for n in ("dgx5", "dgx6")}
    assert cabling_checks(switch, two) == []  # two nodes on one cable look the same either way
    as_ring = four(tmp_path / "r", '[cluster.fabric]\ntopology = "ring"\ninterface = "enP7s7"\n')
    assert cabling_checks(as_ring, ring) == []
