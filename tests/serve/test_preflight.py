"""The pre-boot checks (issue 14): the parsers against the real tools' output formats, and the lane's start on
the four sshd nodes, whose `docker`, `ip`, `nvidia-smi` and `ibdev2netdev` shims answer like a DGX Spark's.
A failing check stops the start before anything runs, with a table naming every failing node and check; an
absent image is pulled first, outside the boot timer; a passing start records image IDs and memory."""

from __future__ import annotations

import hashlib
import io
import json

import pytest

from labkit.errors import LabkitError
from labkit.nodes import Result, routable
from labkit.recipe.lookup import load_plan
from labkit.serve import Lane
from labkit.serve.errors import PreflightFailed
from labkit.serve.fabric import parse_address
from labkit.serve.holders import foreign, gpu_check, looks_like_engine, parse_containers, parse_gpu_apps
from labkit.serve.preflight import (
    commands,
    drop_check,
    fabric_check,
    memory_check,
    parse_image,
    parse_meminfo,
    rdma_check,
)
from labkit.serve.verdict import FAIL, OK, SKIP, WARN
from labkit.store import RunFolderSink
from labkit.units import parse_size
from tests.support.lanes import SPARK_FABRIC, sim_recipe
from tests.support.serving import assert_clean_cluster, served_plan

IMAGE = "labkit/sim:shim"
MEMINFO = "MemTotal:       131267412 kB\nMemFree:        20123456 kB\nMemAvailable:   98765432 kB\nCached:         70000000 kB\n"


def res(stdout: str = "", stderr: str = "", code: int = 0) -> Result:
    return Result("dgx5", "cmd", stdout, stderr, code)


def image_id(image: str = IMAGE) -> str:
    """The docker shim's default ID of an image."""
    return "sha256:" + hashlib.sha256(image.encode()).hexdigest()


# ---------------------------------------------------------------------------------------------- parsers


def test_image_inspect_output_absent_image_and_a_daemon_that_does_not_answer():
    ok = parse_image(res(f'{image_id()} ["labkit/sim@sha256:{"a" * 64}"]\n'))
    assert ok.present and ok.id == image_id() and ok.digests == (f"labkit/sim@sha256:{'a' * 64}",)
    assert parse_image(res(f"{image_id()} null\n")).digests == ()
    absent = parse_image(res(stderr=f"Error: No such image: {IMAGE}\n", code=1))
    assert not absent.present and not absent.error
    down = parse_image(
        res(stderr="Cannot connect to the Docker daemon at unix:///var/run/docker.sock.", code=1)
    )
    assert not down.present and "Cannot connect" in down.error


def test_link_state_as_ip_prints_it():
    up = "3: cx7: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 9000 qdisc mq state UP mode DEFAULT group default\\"
    addr = res("3: cx7    inet 10.10.0.5/24 scope global cx7\\       valid_lft forever")
    c = fabric_check("dgx5", "cx7", res(up), addr, None)
    assert c.status == OK and "address 10.10.0.5 (detected)" in c.result
    no_carrier = "3: cx7: <NO-CARRIER,BROADCAST,MULTICAST,UP> mtu 9000 qdisc mq state DOWN mode DEFAULT\\"
    c = fabric_check("dgx5", "cx7", res(no_carrier), addr, None)
    assert c.status == FAIL and c.result == "cx7 is down: state DOWN, no carrier (cable or peer down)"
    c = fabric_check(
        "dgx5", "cx7", res("3: cx7: <BROADCAST,MULTICAST> mtu 9000 state DOWN mode\\"), addr, None
    )
    assert c.status == FAIL and "administratively down" in c.result
    c = fabric_check("dgx5", "cx7", res(stderr='Device "cx7" does not exist.', code=1), res(code=1), None)
    assert c.status == FAIL and c.result == 'cx7: Device "cx7" does not exist.'
    c = fabric_check("dgx5", "cx7", res(up), addr, "10.10.0.9")
    assert c.status == FAIL and "has 10.10.0.5, not 10.10.0.9 (cluster.fabric.addresses)" in c.result
    assert fabric_check("dgx5", "cx7", res(up), res(""), None).result == "cx7 is up but has no IPv4 address"


def test_a_link_local_address_listed_first_is_skipped():
    """`ip -o -4 addr show dev IF` with the kernel's 169.254/16 fallback address first: the routable one is the
    node's fabric address; with link-local addresses only, the node is refused and the error says so."""
    up = "3: cx7: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 9000 qdisc mq state UP mode DEFAULT group default\\"
    both = res(
        "3: cx7    inet 169.254.12.7/16 brd 169.254.255.255 scope link cx7\\       valid_lft forever\n"
        "3: cx7    inet 10.10.0.5/24 brd 10.10.0.255 scope global cx7\\       valid_lft forever\n"
    )
    c = fabric_check("dgx5", "cx7", res(up), both, None)
    assert c.status == OK and "address 10.10.0.5 (detected)" in c.result
    assert parse_address("dgx5", "cx7", both.stdout) == "10.10.0.5"
    only = res(
        "3: cx7    inet 169.254.12.7/16 brd 169.254.255.255 scope link cx7\\       valid_lft forever\n"
    )
    c = fabric_check("dgx5", "cx7", res(up), only, None)
    assert c.status == FAIL and c.result == (
        "cx7 is up but has only link-local addresses (169.254.12.7), which are not routed: give it a routable one"
    )
    with pytest.raises(LabkitError, match=r"^dgx5: cannot detect the fabric address of cx7: only link-local"):
        parse_address("dgx5", "cx7", only.stdout)
    assert routable(["fe80::1", "169.254.0.9", "fd00::6", "10.0.0.1"]) == ["fd00::6", "10.0.0.1"]


def test_rdma_devices_from_ibdev2netdev_or_sysfs():
    spark = "rocep1s0f1 port 1 ==> enp1s0f1np1 (Up)\nroceP2p1s0f1 port 1 ==> enP2p1s0f1np1 (Up)\n"
    hcas = ("rocep1s0f1", "roceP2p1s0f1")
    assert rdma_check("dgx5", hcas, res(spark)).status == OK
    c = rdma_check("dgx5", hcas, res(spark.splitlines()[0] + "\n"))
    assert c.status == FAIL and c.result.startswith(
        "roceP2p1s0f1 missing (listed by ibdev2netdev: rocep1s0f1)"
    )
    c = rdma_check("dgx5", hcas, res(spark.replace("(Up)\nroceP2", "(Down)\nroceP2")))
    assert c.status == FAIL and "rocep1s0f1 port 1 ==> enp1s0f1np1 is Down" in c.result
    sysfs = res("# /sys/class/infiniband\nmlx5_0\nmlx5_1\n")
    assert rdma_check("dgx5", ("mlx5_0:1", "mlx5_1"), sysfs).status == OK
    c = rdma_check(
        "dgx5", ("mlx5_2",), res("# /sys/class/infiniband\n", "ls: cannot access ...: No such file", 2)
    )
    assert c.status == FAIL and "mlx5_2 missing" in c.result and "No such file" in c.result


def test_memory_from_proc_meminfo_and_the_recipe_minimum():
    info = parse_meminfo(MEMINFO + "SwapTotal:             0 kB\nHugePages_Total:       0\n")
    assert info == {"MemTotal": 131267412 * 1024, "MemFree": 20123456 * 1024, "MemAvailable": 98765432 * 1024,
                    "Cached": 70000000 * 1024}  # fmt: skip
    c = memory_check("dgx5", res(MEMINFO), None)
    assert c.status == OK and c.result == "MemAvailable 101.1 GB of 134.4 GB (page cache 71.7 GB)"
    c = memory_check("dgx5", res(MEMINFO), 110 * 10**9)
    assert c.status == FAIL and c.result.endswith("below cluster.min_free_memory 110.0 GB")
    assert memory_check("dgx5", res(MEMINFO), 100 * 10**9).status == OK


def test_what_holds_the_gpu():
    ps = "other-lane\tlabkit/sim:shim\tlabkit.lane=labkit-other-1,labkit.node=dgx5\n" \
         "this-lane\tlabkit/sim:shim\tlabkit.lane=labkit-me-2\n" \
         "old-vllm\tvllm/vllm-openai:latest\t\n" \
         "grafana\tgrafana/grafana:11\tcom.docker.compose.project=mon\n"  # fmt: skip
    found = foreign(parse_containers(ps), "labkit-me-2")
    assert [c.name for c in found] == ["other-lane", "old-vllm"]
    assert all(
        looks_like_engine(i) for i in ("lmsysorg/sglang:spark", "nvcr.io/nim/meta/llama3", "ghcr.io/x/tgi")
    )
    assert not looks_like_engine("grafana/grafana:11") and not looks_like_engine("animation/app")
    apps = parse_gpu_apps("4242, /usr/bin/python3, 81920 MiB\n")
    assert [(a.pid, a.name, a.memory) for a in apps] == [("4242", "/usr/bin/python3", "81920 MiB")]
    info = res("0, NVIDIA GB10, 580.95.05, [N/A]\n")
    c = gpu_check("dgx5", "labkit-me-2", res(ps), res("4242, /usr/bin/python3, 81920 MiB\n"), info)
    assert c.status == FAIL
    assert c.result == (
        "held by container other-lane (labkit/sim:shim, lane labkit-other-1); container old-vllm "
        "(vllm/vllm-openai:latest); process 4242 /usr/bin/python3 (81920 MiB)"
    )
    assert gpu_check("dgx5", "x", res(ps), res(""), info, strict=False).status == WARN  # a process (CPU) lane
    c = gpu_check("dgx5", "x", res(""), res(""), info)
    assert (
        c.status == OK
        and c.result == "free: no other engine container, no compute process (NVIDIA GB10, driver 580.95.05)"
    )
    missing = res(stderr="sh: 1: nvidia-smi: not found", code=127)
    assert gpu_check("dgx5", "x", res(""), missing, missing).result.endswith(
        "(nvidia-smi not found: not checked there)"
    )
    assert gpu_check("dgx5", "x", missing, missing, missing).status == SKIP


def test_dropping_the_page_cache_never_fails_the_boot():
    before = parse_meminfo(MEMINFO)
    after = MEMINFO.replace("70000000 kB", "400000 kB")
    c = drop_check("dgx5", res("# /proc/meminfo\n" + after), before)
    assert c.status == OK and c.result == "dropped (page cache 71.7 GB -> 409.6 MB)"
    c = drop_check("dgx5", res("# /proc/meminfo\n" + MEMINFO, "sudo: a password is required\n", 1), before)
    assert c.status == WARN and c.result == "not dropped: sudo: a password is required (the boot goes on)"
    assert drop_check("dgx5", None, before, "dgx5: connection lost").status == WARN


def test_memory_after_the_drop_gates_the_boot_whether_the_drop_worked_or_not():
    """Without passwordless sudo the drop is a warning, and MemAvailable (which counts the page cache) passed
    a node with 20 GB free: cluster.min_free_after_drop reads MemFree after the drop instead."""
    before = parse_meminfo(MEMINFO)  # MemFree 20.6 GB
    freed = MEMINFO.replace("20123456 kB", "95000000 kB")
    ok = drop_check("dgx5", res("# /proc/meminfo\n" + freed), before, minimum=parse_size("90G"))
    assert ok.status == OK and ok.result.endswith("MemFree 97.3 GB after it, minimum 90.0 GB")
    assert ok.facts["after"]["MemFree"] == 95000000 * 1024 and ok.facts["minimum"] == 90 * 10**9
    kept = drop_check(
        "dgx5",
        res("# /proc/meminfo\n" + MEMINFO, "sudo: a password is required\n", 1),
        before,
        minimum=90 * 10**9,
    )
    assert kept.status == FAIL and kept.result == (
        "not dropped: sudo: a password is required; MemFree 20.6 GB after it, below cluster.min_free_after_drop 90.0 GB"
    )
    short = drop_check("dgx5", res("# /proc/meminfo\n" + MEMINFO), before, minimum=90 * 10**9)
    assert short.status == FAIL and "below cluster.min_free_after_drop" in short.result
    assert drop_check("dgx5", None, before, "lost", minimum=1).status == FAIL  # no reading: not shown enough


def test_each_lane_asks_only_what_its_checks_need():
    assert set(commands(load_plan("dsv41"))) == {
        "image", "link", "addresses", "all_addresses", "rdma", "meminfo", "containers", "gpu_apps", "gpu_info",
        "state",
    }  # fmt: skip
    assert set(commands(load_plan("sim"))) == {"meminfo", "containers", "gpu_apps", "gpu_info", "state"}
    cmd = commands(load_plan("dsv41"))["image"]
    assert (
        cmd
        == "docker image inspect --format '{{.Id}} {{json .RepoDigests}}' eugr/spark-vllm:nightly-20261015"
    )
    assert load_plan("dsv41").engine.drop_caches and load_plan("prod").engine.drop_caches
    assert not load_plan("sim").engine.drop_caches and load_plan("dsv41").cluster.min_free_memory is None


# ---------------------------------------------------------------------------------------------- on the nodes


def lane_on(fake, tmp_path, port, **kw) -> Lane:
    """A simulator lane with the docker runtime on the fake nodes `fake` (the docker shim runs it)."""
    plan = sim_recipe(
        tmp_path / kw.pop("name", "lane"),
        port,
        nodes=fake.addresses,
        runtime="docker",
        ssh_port=fake.port,
        user=fake.user,
        **kw,
    )
    return Lane(
        served_plan(plan), ssh=fake.ssh_options(), sink=RunFolderSink(tmp_path / "run"), poll=0.1, stop_grace=3,
        progress=io.StringIO(),
    )  # fmt: skip


def refused(lane: Lane, cluster) -> PreflightFailed:
    """Start `lane`, which must be refused by its pre-boot checks with nothing started or pulled anywhere."""
    try:
        with pytest.raises(PreflightFailed) as e:
            lane.start()
        for addr in cluster.addresses:
            assert not [c for c in cluster.calls(addr) if c[0] in ("run", "pull")], addr
        assert_clean_cluster(lane, cluster)
    finally:
        lane.close()
    assert "nothing was started" in str(e.value)
    return e.value


def test_a_passing_start_records_image_ids_memory_and_every_check(nodes, tmp_path):
    lane = lane_on(nodes, tmp_path, 18371, extra=SPARK_FABRIC, engine="drop_caches = true")
    try:
        with lane.up() as ep:
            boot = ep.boot
        assert_clean_cluster(lane, nodes)
    finally:
        lane.close()
    for addr in nodes.addresses:
        assert boot.images[addr]["id"] == image_id() and boot.images[addr]["repo_digests"][0].startswith(
            "labkit/sim@"
        )
        assert not boot.images[addr]["pulled"]
        assert (
            boot.memory[addr]["MemAvailable"] > 0
            and boot.memory[addr]["MemTotal"] >= boot.memory[addr]["MemAvailable"]
        )
        rows = {r["check"]: r for r in boot.preflight if r["node"] == addr}
        assert set(rows) == {
            "image", "fabric", "fabric net", "reach", "rdma", "memory", "gpu", "page cache", "boot state"
        }  # fmt: skip
        # the node's versions as the kernel and the nvidia-smi shim give them; the sim compiles nothing
        state = boot.state[addr]
        assert state["kernel"] and state["driver"] == "580.95.05" and state["cuda"] == "13.0"
        assert state["firmware"] is None and state["caches"] == {} and state["cold"] == []  # no ethtool here
        assert {r["status"] for r in rows.values()} <= {OK, WARN}
        assert rows["page cache"]["status"] == OK or rows["page cache"]["result"].startswith("not dropped: ")
        assert "NVIDIA GB10" in rows["gpu"]["result"] and rows["rdma"]["status"] == OK
        calls = [c[:2] for c in nodes.calls(addr)]
        assert calls.count(["run", "-d"]) == 1 and calls.index(["image", "inspect"]) < calls.index(
            ["run", "-d"]
        )
    doc = json.loads((tmp_path / "run" / "boot.json").read_text())
    assert (
        doc["images"][nodes.addresses[0]]["id"] == image_id() and len(doc["preflight"]) == 36
    )  # 9 checks x 4 nodes
    assert doc["state"][nodes.addresses[0]]["driver"] == "580.95.05"  # the boot state, in boot.json too
    said = lane.progress.getvalue()
    assert "pre-boot checks: " in said and "passed on 4 node(s)" in said
    assert "preflight" in lane.timings and "pull" not in lane.timings


def test_an_absent_image_is_pulled_first_outside_the_boot_timer(nodes, tmp_path):
    absent = nodes.addresses[1:3]
    for addr in absent:
        nodes.set_images(addr, {IMAGE: None})
    nodes.set_pull(absent[0], delay=3)
    lane = lane_on(nodes, tmp_path, 18372)
    try:
        with lane.up() as ep:
            boot = ep.boot
        assert_clean_cluster(lane, nodes)
    finally:
        lane.close()
    assert lane.timings["pull"] >= 3 > boot.boot_seconds  # the pull is not part of the boot figure
    for addr in nodes.addresses:
        calls = [c[0] for c in nodes.calls(addr)]
        assert ("pull" in calls) == (addr in absent)
        if addr in absent:
            assert calls.index("pull") < calls.index("run")
        assert boot.images[addr]["pulled"] == (addr in absent) and boot.images[addr]["id"] == image_id()
    said = lane.progress.getvalue()
    assert f"image {IMAGE}: not on {absent[0]}, {absent[1]}; pulling it there first" in said
    assert f"{absent[0]}: Status: Downloaded newer image for {IMAGE}" in said
    assert f"image {IMAGE}: pulled on {absent[0]}, {absent[1]} in " in said


def test_image_id_mismatch_refuses_and_names_the_node(nodes, tmp_path):
    other = "sha256:" + "0" * 64
    nodes.set_images(nodes.addresses[2], {IMAGE: other})
    e = refused(lane_on(nodes, tmp_path, 18373), nodes)
    assert set(e.failures) == {nodes.addresses[2]}
    text = str(e)
    assert f"{IMAGE} is sha256:000000000000, but {image_id()[:19]} on {nodes.addresses[0]}" in text
    assert "the nodes run different images" in text


def test_a_failed_pull_refuses_and_names_the_node(nodes, tmp_path):
    nodes.set_images(nodes.addresses[1], {IMAGE: None})
    nodes.set_pull(nodes.addresses[1], fail="pull access denied for labkit/sim, repository does not exist")
    lane = lane_on(nodes, tmp_path, 18374)
    try:
        with pytest.raises(PreflightFailed) as e:
            lane.start()
        assert_clean_cluster(lane, nodes)
    finally:
        lane.close()
    assert set(e.value.failures) == {nodes.addresses[1]}
    assert "not present (docker pull failed: Error response from daemon: pull access denied" in str(e.value)
    assert not [c for c in nodes.calls(nodes.addresses[0]) if c[0] in ("run", "pull")]


FAULTS = {
    "interface down": (lambda c, a: c.set_interfaces(a, {"cx7": {"state": "NO-CARRIER"}}), "fabric", "cx7 is down"),
    "RDMA HCA missing": (
        lambda c, a: c.set_rdma(a, "rocep1s0f1 port 1 ==> enp1s0f1np1 (Up)\n"), "rdma", "roceP2p1s0f1 missing"
    ),
    "foreign GPU container": (
        lambda c, a: c.plant_containers(a, [{"name": "old-vllm", "image": "vllm/vllm-openai:v0.11.0", "labels": {}}]),
        "gpu",
        "held by container old-vllm (vllm/vllm-openai:v0.11.0)",
    ),
    "GPU process": (
        lambda c, a: c.set_gpu_apps(a, [{"pid": 4242, "process_name": "python3", "used_memory": "81920 MiB"}]),
        "gpu",
        "held by process 4242 python3 (81920 MiB)",
    ),
}  # fmt: skip


@pytest.mark.parametrize("fault", list(FAULTS))
def test_each_failing_check_refuses_the_start_naming_node_and_check(nodes, tmp_path, fault):
    plant, check, text = FAULTS[fault]
    addr = nodes.addresses[3]
    plant(nodes, addr)
    e = refused(lane_on(nodes, tmp_path, 18375, extra=SPARK_FABRIC), nodes)
    assert e.failures == {addr: e.failures[addr]} and e.failures[addr].startswith(f"{check}: ")
    assert text in e.failures[addr]
    (row,) = [c for c in e.checks if c.failed]
    assert (row.node, row.check, row.status) == (addr, check, FAIL)
    assert f"{addr}  {check}" in str(e)  # the table's row


def test_memory_short_after_the_drop_refuses_the_boot_on_real_nodes(nodes, tmp_path):
    lane = lane_on(
        nodes,
        tmp_path,
        18377,
        extra=SPARK_FABRIC,
        engine="drop_caches = true",
        cluster='min_free_after_drop = "100T"',
    )
    e = refused(lane, nodes)
    assert set(e.failures) == set(nodes.addresses)  # no node has 100 TB free, dropped or not
    assert all("page cache: " in e.failures[a] and "below cluster.min_free_after_drop 100.0 TB" in e.failures[a]
               for a in nodes.addresses)  # fmt: skip


def test_short_memory_and_several_faults_are_named_together(nodes, tmp_path):
    nodes.set_interfaces(nodes.addresses[1], {"cx7": None})
    nodes.set_images(nodes.addresses[2], {IMAGE: "sha256:" + "1" * 64})
    e = refused(
        lane_on(nodes, tmp_path, 18376, extra=SPARK_FABRIC, cluster='min_free_memory = "100T"'), nodes
    )
    assert set(e.failures) == set(nodes.addresses)  # every node is short of 100 TB
    assert all("memory: " in e.failures[a] and "below cluster.min_free_memory 100.0 TB" in e.failures[a]
               for a in nodes.addresses)  # fmt: skip
    assert 'fabric: cx7: Device "cx7" does not exist.' in e.failures[nodes.addresses[1]]
    assert "image: " in e.failures[nodes.addresses[2]] and "image" not in e.failures[nodes.addresses[0]]
    table = str(e).splitlines()
    assert table[1].split() == ["node", "check", "status", "result"] and len(table) == 3 + 6
