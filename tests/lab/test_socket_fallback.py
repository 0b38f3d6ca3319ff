"""A lane with RoCE HCAs whose NCCL used sockets is flagged `socket-fallback` (docs/engines.md, "NCCL transport
lines"): boot-log text through the engine's own log parser into the boot facts, the flag into the stored run's
summary, where the tables read flags. Text in, facts out: no NCCL here."""

from __future__ import annotations

from labkit import store
from labkit.lab.runs import boot_flags, store_result
from labkit.measure import BenchResult, RunSummary
from labkit.recipe.lookup import load_plan
from labkit.report.tables import flags_of
from labkit.serve.engines import BootLog, engine_for
from tests.support.results import requests_for, sim_plan

PREFIX = "(Worker pid=77) spark-6:77:90 [0] NCCL INFO "
SOCKET_BOOT = (
    "INFO 12-03 10:00:01 [parallel_state.py:1906] world_size=2 rank=1 local_rank=0 backend=nccl\n"
    + PREFIX
    + "Failed to open libibverbs.so[.1]\n"
    + PREFIX
    + "NET/Socket : Using [0]enp1s0f1np1:10.0.0.6<0>\n"
    + PREFIX
    + "Using network Socket\n"
)
IB_BOOT = (
    PREFIX
    + "NET/IB : Using [0]rocep1s0f1:1/RoCE [1]roceP2p1s0f1:1/RoCE [RO]; OOB enp1s0f1np1:10.0.0.5<0>\n"
    + PREFIX
    + "Using network IB\n"
)


def transport_of(plan, logs: dict[str, str]) -> dict:
    """{node: transport} as the boot watch records it: each node's log fed to its own BootLog."""
    engine = engine_for(plan)
    out = {}
    for i, (node, text) in enumerate(logs.items()):
        log = BootLog(engine, node, head=i == 0)
        for chunk in (text[:40], text[40:]):  # lines split across polls
            log.feed(chunk)
        log.flush()
        if log.transport.seen:
            out[node] = log.transport.transport().to_dict()
    return out


def test_net_socket_on_an_rdma_fabric_is_flagged_and_net_ib_is_not():
    plan = load_plan("dsv41", spec="dspark")
    assert plan.cluster.fabric is not None and plan.cluster.fabric.rdma
    transport = transport_of(plan, {"dgx5": IB_BOOT, "dgx6": SOCKET_BOOT, "dgx7": "INFO nothing\n"})
    assert set(transport) == {"dgx5", "dgx6"}  # dgx7's log said nothing: no entry
    assert transport["dgx6"]["kind"] == "socket" and transport["dgx6"]["libibverbs_missing"]
    assert transport["dgx5"]["devices"] == ["rocep1s0f1", "roceP2p1s0f1"]
    flags = boot_flags(plan, {"transport": transport})
    assert [(f["code"], f["window"]) for f in flags] == [("socket-fallback", "boot")]
    assert flags[0]["message"].startswith("dgx6: ")
    assert boot_flags(plan, {"transport": transport_of(plan, {"dgx5": IB_BOOT, "dgx6": IB_BOOT})}) == []
    assert boot_flags(plan, {}) == []  # a boot that recorded no transport (older runs, no NCCL_DEBUG)


def test_a_lane_without_hcas_is_not_flagged_for_sockets():
    plan = sim_plan()
    assert plan.cluster.fabric is None
    assert boot_flags(plan, {"transport": {"dgx6": {"kind": "socket", "devices": ["eth0"]}}}) == []


def test_the_flag_is_stored_in_the_runs_summary_where_the_tables_read_it(tmp_path):
    plan = sim_plan()
    result = BenchResult(
        records=requests_for("x", n=2),
        groups=[],
        summary=RunSummary(measures={"decode_c1": 30.0}, n_ok=2),
        provenance={},
    )
    flag = {"code": "socket-fallback", "window": "boot", "message": "dgx6: NCCL used sockets"}
    run = store.ResultsStore(tmp_path).new_run(plan)
    with run:
        store_result(run, result, {"transport": {}}, [flag])
    doc = store.read_run(run.path)
    assert [(f.code, f.window, f.message) for f in flags_of(doc)] == [
        (flag["code"], flag["window"], flag["message"])
    ]
