"""The transport a node's collectives used, read from boot-log text (labkit.serve.transport): every NCCL line
shape of docs/engines.md "NCCL transport lines", vLLM CPU's gloo line from a recorded boot, and the
`socket-fallback` flag. Text in, facts out: no NCCL here."""

from __future__ import annotations

from pathlib import Path

from labkit.serve.transport import (
    Transport,
    TransportReader,
    net_devices,
    read_transport,
    socket_fallback_flags,
)

P = "spark-a1b2:1234:1290 [0] NCCL INFO "  # NCCL's own prefix
WORKER = "(Worker pid=4321) "  # a multi-process engine's prefix before it
IB = P + (
    "NET/IB : Using [0]rocep1s0f1:1/RoCE [1]roceP2p1s0f1:1/RoCE [RO]; OOB enp1s0f1np1:192.168.100.10<0>"
)
SOCKET = P + "NET/Socket : Using [0]enp1s0f1np1:192.168.100.10<0>"
USING_IB = P + "Using network IB"
USING_SOCKET = P + "Using network Socket"
NO_VERBS = P + "Failed to open libibverbs.so[.1]"
FIXTURE = Path(__file__).parents[1] / "support" / "fixtures" / "vllm-0.32-cpu" / "boot-ngram.log"


def test_net_ib_line_gives_ib_and_its_roce_devices():
    t = read_transport(WORKER + IB + "\n")
    assert t == Transport("ib", ("rocep1s0f1", "roceP2p1s0f1"), WORKER + IB, False)


def test_net_socket_line_gives_socket_and_its_interface():
    t = read_transport(SOCKET)
    assert (t.kind, t.devices, t.line) == ("socket", ("enp1s0f1np1",), SOCKET)


def test_using_network_lines_decide_the_kind():
    assert read_transport(USING_IB).kind == "ib"
    assert read_transport(USING_SOCKET) == Transport("socket", (), USING_SOCKET)
    # IB started, yet the communicator took sockets: the choice wins and the devices are the socket ones
    t = read_transport("\n".join([IB, SOCKET, USING_SOCKET]))
    assert (t.kind, t.devices, t.line) == ("socket", ("enp1s0f1np1",), SOCKET)
    t = read_transport("\n".join([IB, USING_IB]))
    assert (t.kind, t.devices) == ("ib", ("rocep1s0f1", "roceP2p1s0f1"))


def test_communicators_that_disagree_record_sockets():
    assert read_transport("\n".join([USING_IB, USING_SOCKET, USING_IB])).kind == "socket"


def test_a_missing_libibverbs_is_recorded_beside_the_fallback():
    t = read_transport("\n".join([NO_VERBS, SOCKET, USING_SOCKET]))
    assert t.kind == "socket" and t.libibverbs_missing
    warn = read_transport(NO_VERBS.replace("NCCL INFO", "NCCL WARN"))
    assert (warn.kind, warn.libibverbs_missing) == ("unknown", True)


def test_vllm_cpu_boot_records_gloo():
    """The recorded vLLM CPU boot: its parallel_state line says backend=gloo, and no NCCL line appears."""
    t = read_transport(FIXTURE.read_text())
    assert t.kind == "gloo" and t.devices == () and "backend=gloo" in t.line
    assert "[parallel_state.py:" in t.line
    nccl = t.line.replace("backend=gloo", "backend=nccl")
    assert read_transport(nccl).kind == "unknown"  # a GPU build's same line is no transport statement


def test_unrelated_lines_leave_the_transport_unknown_and_unseen():
    r = TransportReader()
    for line in ["INFO 12-01 [api_server.py:1] Starting", P + "NCCL version 2.27.3+cuda13.0", ""]:
        r.feed(line)
    assert r.transport() == Transport() and not r.seen
    r.feed(SOCKET)
    assert r.seen


def test_net_devices_drop_port_link_address_and_the_oob_part():
    assert net_devices("[0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:10.1.1.1<0>") == ("mlx5_0", "mlx5_1")
    assert net_devices("[0]eth0:fe80::1%eth0<0> [1]eth1:10.0.0.2<0>") == ("eth0", "eth1")


def test_to_dict_is_plain_json():
    assert read_transport(IB).to_dict() == {
        "kind": "ib",
        "devices": ["rocep1s0f1", "roceP2p1s0f1"],
        "line": IB,
        "libibverbs_missing": False,
    }


def test_sockets_on_a_lane_with_hcas_are_flagged_and_ib_is_not():
    hcas = ("rocep1s0f1", "roceP2p1s0f1")
    transport = {
        "dgx6": read_transport("\n".join([NO_VERBS, SOCKET, USING_SOCKET])).to_dict(),
        "dgx5": read_transport(IB).to_dict(),
    }
    flags = socket_fallback_flags(transport, hcas)
    assert [(f["code"], f["window"]) for f in flags] == [("socket-fallback", "boot")]
    assert flags[0]["message"].startswith("dgx6: NCCL used sockets (enp1s0f1np1)")
    assert "rocep1s0f1, roceP2p1s0f1" in flags[0]["message"] and "libibverbs" in flags[0]["message"]
    assert socket_fallback_flags(transport, ()) == []  # no HCAs: sockets are the plan
    unknown = {"dgx5": Transport().to_dict(), "dgx6": read_transport(FIXTURE.read_text()).to_dict()}
    assert socket_fallback_flags(unknown, hcas) == []
