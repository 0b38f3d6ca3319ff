"""The docker runtime against a real Docker engine (dockerd 20.10 from Debian's packages): the tiny vLLM lane boots
in a container through the same `docker run` line the Spark lanes get, and labels, env, mounts, ulimits,
teardown and the leftover sweep are checked against the daemon itself, not a shim.

The image is a Debian root file system imported offline (tests/support/docker_real.py); the venv and its
interpreter are mounted read-only. The lane has no GPU and no HCAs, so it sets `engine.docker.gpus = "none"`
(docker refuses `--gpus` without NVIDIA's runtime) and gets none of the RDMA options (`--ulimit
memlock=-1:-1`, which this machine's hard memlock limit refuses, among them).
"""

from __future__ import annotations

import dataclasses
import shlex
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from labkit.measure import BenchOptions, run_bench
from labkit.measure.request.recording import BURST_FLAG
from labkit.nodes.local import LocalHost
from labkit.recipe.launch import BindMount, DockerOptions
from labkit.serve import Lane, measure_bandwidth
from labkit.serve.engines import NodeLaunch
from labkit.serve.errors import LaneBusy
from labkit.serve.runtimes import runtime_for
from labkit.store import RunFolderSink
from tests.support import all_reduce_perf_shim
from tests.support.docker_real import IMAGE, docker, docker_available, docker_daemon, inspect, labelled
from tests.support.vllm import vllm_available
from tests.support.vllm_lanes import eager, free_port, isolated, tiny_vllm_plan

pytestmark = pytest.mark.skipif(
    (docker_available() or vllm_available()) is not None, reason=docker_available() or vllm_available() or ""
)

NOFILE = ("nofile", "16384:16384")  # a ulimit this machine allows (its hard memlock limit refuses -1)


def docker_plan(port: int, **measure):
    """The tiny-vllm lane with runtime = docker: the test image, no --gpus, the venv and its interpreter mounted
    read-only at their own paths, the venv first on the container's PATH; eager, as what is tested is the
    container, not the compiled kernels (tests/support/vllm_lanes.py)."""
    plan = eager(tiny_vllm_plan(port, **measure))
    venv, interpreter = sys.prefix, sys.base_prefix
    options = DockerOptions(
        gpus="none",
        ulimits=(NOFILE,),
        mounts=(BindMount(venv, venv, True), BindMount(interpreter, interpreter, True)),
    )
    env = (
        *plan.engine.env,
        ("PATH", f"{venv}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
    )
    engine = dataclasses.replace(plan.engine, runtime="docker", image=IMAGE, docker=options, env=env)
    return dataclasses.replace(plan, engine=engine)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    log = tmp_path_factory.mktemp("dockerd") / "dockerd.log"
    with pytest.MonkeyPatch.context() as mp, docker_daemon(log) as host:
        mp.setenv("DOCKER_HOST", host)
        yield host


@pytest.fixture(scope="module")
def lane_up(daemon, tmp_path_factory):
    """The docker lane, up for the module's first tests; what its container looked like while it ran."""
    root = tmp_path_factory.mktemp("vllm-docker")
    with isolated(root) as env:
        plan = docker_plan(free_port())
        lane = Lane(plan, sink=RunFolderSink(root / "run"), poll=0.2, stop_grace=10)
        with lane.up() as ep:
            name = lane.runtime.name("localhost")
            yield SimpleNamespace(
                plan=plan, lane=lane, ep=ep, env=env, root=root, name=name, info=inspect(name)
            )
        assert lane.status() == {"localhost": "absent"} and lane.leftovers() == {}
        assert labelled(f"labkit.lane={plan.lane_id}") == []


def test_the_container_carries_the_lanes_labels_env_mounts_and_limits(lane_up):
    info, plan = lane_up.info, lane_up.plan
    assert info["State"]["Running"] and info["Config"]["Image"] == IMAGE
    labels = info["Config"]["Labels"]  # beside the image's own label
    assert (labels["labkit.lane"], labels["labkit.node"]) == (plan.lane_id, "localhost")
    env = dict(item.partition("=")[::2] for item in info["Config"]["Env"])
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "1" and env["HF_HUB_OFFLINE"] == "1"
    assert env["PATH"].startswith(f"{sys.prefix}/bin:")
    host = info["HostConfig"]
    assert (host["NetworkMode"], host["IpcMode"], host["RestartPolicy"]["Name"]) == ("host", "host", "no")
    assert not host.get("DeviceRequests")  # gpus = "none": no --gpus
    assert not host.get("Devices") and not host.get("CapAdd")  # no HCAs: no /dev/infiniband, no IPC_LOCK
    assert host["Ulimits"] == [{"Name": "nofile", "Soft": 16384, "Hard": 16384}]  # and no memlock
    mounts = {m["Destination"]: (m["Source"], m["RW"]) for m in info["Mounts"]}
    assert mounts[str(plan.model.path)] == (str(plan.model.path), True)
    assert mounts[sys.prefix] == (sys.prefix, False) and mounts[sys.base_prefix] == (sys.base_prefix, False)
    # the limit as the engine inside has it (PID 1 of the container is `vllm serve`)
    limits = docker("exec", lane_up.name, "cat", "/proc/1/limits").stdout
    assert [line.split()[3:5] for line in limits.splitlines() if line.startswith("Max open files")] == [
        ["16384", "16384"]
    ]


@pytest.mark.alone  # its c1 turns came out without a decode figure beside another worker's load (workers.py)
def test_boot_facts_come_from_the_containers_log_and_it_serves(lane_up):
    boot = lane_up.ep.boot
    assert boot.engine_version.startswith("0.32")
    assert (boot.kv_pool_tokens, boot.kv_pool_context) == (524_288, 16_384)
    assert boot.transport["localhost"]["kind"] == "gloo"
    assert "Application startup complete" in boot.lines["ready"]
    plan = lane_up.plan
    options = BenchOptions(model=lane_up.ep.model, progress=False, prefill=False, loops_expected=True)
    result = run_bench(lane_up.ep.base_url, plan.measure, options)
    assert result.records and all(r.ok for r in result.records), [r.error for r in result.records]
    c1 = [r for r in result.records if r.phase == "decode" and r.concurrency == 1 and not r.cold]
    decode = result.summary.measures.get("decode_c1")
    # a machine loaded from outside can read every c1 answer in one burst: such a record keeps its TTFT but gives
    # no decode figure, and the summary says so (docs/measurement.md, "Burst reads and the server's view"); anything else fails
    if decode is None:
        assert c1 and all(BURST_FLAG in r.flags for r in c1), [r.flags for r in c1]
        assert any("burst" in n for n in result.summary.notes) and result.summary.measures["ttft_c1"] > 0
    else:
        assert decode > 0


def test_an_orphaned_container_is_found_refused_and_removed(lane_up, daemon):
    """What a labkit killed mid-run leaves: the lane's container, started by the lane's own command line.
    Another run of the lane refuses to start over it, naming the node and the container; `down` removes it."""
    lane_up.lane.down()  # the module's lane is done with; the checks of lane_up's teardown still hold after
    plan = lane_up.plan
    runtime = runtime_for(plan)
    orphan = NodeLaunch("localhost", 0, ("sleep", "600"), (("LABKIT_ORPHAN", "1"),), True)
    host = LocalHost()
    host.run(runtime.start_command(orphan, IMAGE, plan.mounts())).check("start")
    lane = Lane(plan, poll=0.2, stop_grace=2)
    assert lane.status() == {"localhost": "alive"}
    with pytest.raises(LaneBusy) as e:
        lane.refuse_if_present()
    assert "localhost" in str(e.value) and runtime.name("localhost") in str(e.value)
    docker("kill", runtime.name("localhost"))
    assert lane.status() == {"localhost": "dead"}  # exited, not removed: still a leftover
    assert lane.leftovers() == {"localhost": runtime.name("localhost")}
    lane.down()
    assert lane.status() == {"localhost": "absent"} and lane.leftovers() == {}
    assert labelled(f"labkit.lane={plan.lane_id}") == []


def test_a_start_the_daemon_refuses_names_the_node_and_leaves_nothing(daemon):
    """`--gpus all` (the default) on a machine without NVIDIA's container runtime: the daemon's own refusal
    reaches the user with the node's name, and no container of the lane is left."""
    plan = docker_plan(free_port())
    plan = dataclasses.replace(
        plan,
        engine=dataclasses.replace(plan.engine, docker=dataclasses.replace(plan.engine.docker, gpus="all")),
    )
    runtime = runtime_for(plan)
    cmd = runtime.start_command(NodeLaunch("localhost", 0, ("true",), (), True), IMAGE, [])
    assert "--gpus all" in cmd
    r = LocalHost().run(cmd)
    assert not r.ok and "could not select device driver" in r.stderr, shlex.quote(r.stderr)
    r = LocalHost().run(runtime.stop_command("localhost"))
    assert r.ok and labelled(f"labkit.lane={plan.lane_id}") == []


def test_a_fabric_tool_only_in_the_image_is_measured_in_a_real_container(daemon, tmp_path):
    """doctor --bandwidth on a one-node docker lane whose image, not the node, has nccl-tests: the image is asked
    through the daemon, the tool runs in a `docker run --rm` container with the lane's host access, its report is
    read, and no container is left. The image is the test image plus the all_reduce_perf stand-in."""
    tools_image = "labkit/cpu:tools"
    made = docker("create", IMAGE, "true").stdout.strip()
    shim = tmp_path / "all_reduce_perf"
    shim.write_text("#!/usr/bin/python3\n" + Path(all_reduce_perf_shim.__file__).read_text())
    shim.chmod(0o755)
    docker("cp", str(shim), f"{made}:/usr/local/bin/all_reduce_perf")
    docker("commit", made, tools_image)
    docker("rm", made)
    plan = docker_plan(free_port())
    plan = dataclasses.replace(plan, engine=dataclasses.replace(plan.engine, image=tools_image))
    assert shutil.which("all_reduce_perf") is None  # not on this host's PATH: only the image has it
    lane = Lane(plan, poll=0.2, stop_grace=2)
    try:
        [m] = measure_bandwidth(lane.state)
    finally:
        lane.close()
    assert (m.tool, m.figure, m.unit, m.where) == ("all_reduce_perf", 21.3456, "GB/s", "image"), m.line
    assert labelled(f"labkit.tool={plan.lane_id}") == []
