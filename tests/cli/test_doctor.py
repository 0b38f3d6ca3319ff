"""`labkit doctor` as a real subprocess on the four sshd nodes: every failing pre-boot check reported per node with
nothing started (and the page cache left alone), each engine flag looked up in the engine's own `--help` inside
the image (the docker shim runs `docker run --rm IMAGE CMD` on the node: the simulator's help, and the REAL
`vllm serve --help=all` of vLLM 0.32), and `--probe` searching the real vllm package."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import textwrap

import pytest

from labkit.nodes import Result
from labkit.recipe.lookup import load_plan
from labkit.serve.enginehelp import canonical, flag_checks, help_flags, lane_flags, probe_checks, probe_script
from labkit.serve.plan import launches
from labkit.serve.verdict import FAIL, OK, SKIP, WARN
from tests.support.lanes import SPARK_FABRIC, sim_recipe
from tests.support.serving import labkit_cli
from tests.support.vllm import vllm_available

IMAGE = "labkit/sim:shim"


def doctor(fake, folder, *args: str) -> tuple[int, str, str]:
    proc = labkit_cli("doctor", str(folder), *args, env=fake.cli_env())
    out, err = proc.communicate(timeout=240)
    return proc.returncode, out, err


def rows(out: str) -> dict[tuple[str, str], list[dict]]:
    """{(node, check): [check dicts]} of `doctor --json` output."""
    found: dict[tuple[str, str], list[dict]] = {}
    for c in json.loads(out)["checks"]:
        found.setdefault((c["node"], c["check"]), []).append(c)
    return found


def started_nothing(fake) -> None:
    """No container started, no image pulled, and the engine's CLI asked (`run --rm`) only on the head."""
    for i, addr in enumerate(fake.addresses):
        calls = fake.calls(addr)
        assert not [c for c in calls if c[:2] == ["run", "-d"] or c[0] == "pull"], addr
        assert i == 0 or not [c for c in calls if c[:2] == ["run", "--rm"]], addr
        assert fake.containers(addr) == []
    assert fake.processes() == []


def sim_lane(fake, tmp_path, **kw):
    folder = tmp_path / "lane"
    sim_recipe(
        folder, 18381, nodes=fake.addresses, runtime="docker", ssh_port=fake.port, user=fake.user, **kw
    )
    return folder


def test_doctor_reports_each_failing_check_per_node_and_starts_nothing(nodes, tmp_path):
    a = nodes.addresses
    nodes.plant_containers(a[0], [{"name": "old-sglang", "image": "lmsysorg/sglang:spark", "labels": {}}])
    nodes.set_images(a[1], {IMAGE: "sha256:" + "2" * 64})
    nodes.set_interfaces(a[2], {"cx7": {"state": "NO-CARRIER"}})
    nodes.set_rdma(a[3], "rocep1s0f1 port 1 ==> enp1s0f1np1 (Up)\n")
    folder = sim_lane(
        nodes,
        tmp_path,
        extra=SPARK_FABRIC,
        engine="drop_caches = true",
        cluster='min_free_memory = "100T"',
        args='"--presett" = "test"',
    )
    code, out, err = doctor(nodes, folder)
    assert code == 1, out + err
    started_nothing(nodes)
    assert [c for c in nodes.calls(a[0]) if c[:2] == ["run", "--rm"]] == [
        ["run", "--rm", "--gpus", "all", IMAGE, "python3", "-m", "labkit.sim", "--help"]
    ]
    for addr in a:
        assert f"\n{addr}" in "\n" + out
    assert f"{a[0]}  (head)" in out
    table = out.replace(" ", "")
    assert "gpuFAILheldbycontainerold-sglang(lmsysorg/sglang:spark)" in table
    assert "imageFAILlabkit/sim:shimissha256:222222222222" in table
    assert "fabricFAILcx7isdown:stateDOWN,nocarrier" in table
    assert "rdmaFAILroceP2p1s0f1missing" in table
    assert table.count("memoryFAILMemAvailable") == 4
    assert (
        "--presett(engine.args)isnotlistedby`python3-mlabkit.sim--help`inlabkit/sim:shim;didyoumean--preset?"
        in table
    )
    assert "  page cache " not in out  # doctor never drops it (no such row)
    assert out.rstrip().endswith(
        f"check(s) failed on {', '.join(a)}; nothing was started; the page cache was left alone (a start drops it)"
    )
    assert "asking `python3 -m labkit.sim --help`" in err


def test_doctor_json_an_absent_image_warns_and_pull_fetches_it(nodes, tmp_path):
    a = nodes.addresses
    folder = sim_lane(nodes, tmp_path, extra=SPARK_FABRIC)
    nodes.set_images(a[1], {IMAGE: None})
    code, out, err = doctor(nodes, folder, "--json")
    assert code == 0, out + err
    found = rows(out)
    assert found[(a[1], "image")][0]["status"] == WARN and "not present (the start pulls it first)" in out
    assert [c["status"] for c in found[(a[0], "engine args")]] == [OK]
    assert all(found[(n, c)][0]["status"] == OK for n in a for c in ("fabric", "rdma", "memory", "gpu"))
    nodes.set_images(a[0], {IMAGE: None})
    code, out, _ = doctor(nodes, folder, "--json")
    assert code == 0 and rows(out)[(a[0], "engine args")][0]["status"] == SKIP
    assert "is not on the head (`labkit doctor --pull` pulls it)" in out
    code, out, err = doctor(nodes, folder, "--json", "--pull")
    assert code == 0, out + err
    found = rows(out)
    expected = "sha256:" + hashlib.sha256(IMAGE.encode()).hexdigest()
    for n in a:
        (img,) = found[(n, "image")]
        assert (
            img["status"] == OK and img["facts"]["id"] == expected and img["facts"]["pulled"] == (n in a[:2])
        )
    assert [c[0] for c in nodes.calls(a[0])].count("pull") == 1 and "Status: Downloaded newer image" in err


def test_doctor_prints_no_paramiko_traceback_for_a_node_that_is_not_sshd(nodes, tmp_path):
    """A node whose SSH port accepts the connection and closes it (a service that is not sshd, a host refusing
    SSH) fails its ssh row, and stderr carries labkit's progress only: paramiko's transport thread used to print
    "Exception (client): Error reading SSH protocol banner" and two tracebacks above doctor's tables."""
    import socket
    import threading

    listener = socket.create_server(("127.0.0.9", nodes.port))
    stop = threading.Event()

    def refuse() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            conn.close()

    thread = threading.Thread(target=refuse, daemon=True)
    thread.start()
    try:
        folder = tmp_path / "lane"
        head = nodes.addresses[0]
        sim_recipe(
            folder, 18381, nodes=[head, "127.0.0.9"], runtime="docker", ssh_port=nodes.port, user=nodes.user
        )
        code, out, err = doctor(nodes, folder)
    finally:
        stop.set()
        thread.join()
        listener.close()
    assert code == 1, out + err
    assert "cannot connect to" in out and "127.0.0.9" in out
    assert "Traceback" not in err and "Exception (client)" not in err and "paramiko" not in err, err


def test_doctor_names_a_twin_on_the_fabric_subnet_and_a_node_with_another_mtu(nodes, tmp_path):
    a = nodes.addresses
    nodes.set_interfaces(a[1], {"enP2p1s0f1np1": {"address": "10.10.0.16/24", "state": "UP"}})
    nodes.set_interfaces(a[3], {"cx7": {"mtu": 1500}})
    folder = sim_lane(nodes, tmp_path, extra=SPARK_FABRIC)
    code, out, err = doctor(nodes, folder, "--json")
    assert code == 1, out + err
    found = rows(out)
    (twin,) = found[(a[1], "fabric net")]
    assert twin["status"] == FAIL and twin["result"].startswith(
        "enP2p1s0f1np1 10.10.0.16/24 on cx7's subnet: two interfaces on one subnet confuse routing"
    )
    (mtu,) = found[(a[3], "fabric net")]
    assert (
        mtu["status"] == FAIL
        and f"cx7 mtu 1500, but 9000 on {a[0]}: the nodes' fabric MTUs differ" in mtu["result"]
    )
    for n in (a[0], a[2]):
        (ok,) = found[(n, "fabric net")]
        assert (
            ok["status"] == OK
            and ok["result"] == f"mtu 9000 as on {a[0]}; no other interface on cx7's subnet"
        )
    started_nothing(nodes)


def test_fabric_net_checks_read_ip_output():
    from labkit.serve.netcheck import fabric_net_checks, same_subnet

    addrs = (
        "1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever\n"
        "3: enp1s0f1np1    inet 192.168.177.11/24 brd 192.168.177.255 scope global enp1s0f1np1\\       valid_lft\n"
        "4: enP2p1s0f1np1    inet 169.254.3.3/16 brd 169.254.255.255 scope link enP2p1s0f1np1\\       valid\n"
        "5: enP7s7    inet 192.168.1.11/24 brd 192.168.1.255 scope global enP7s7\\       valid_lft forever\n"
    )
    assert same_subnet("enp1s0f1np1", addrs) == []  # link-local and other subnets do not clash
    twin = (
        addrs + "4: enP2p1s0f1np1    inet 192.168.177.12/24 brd 192.168.177.255 scope global enP2p1s0f1np1\n"
    )
    assert same_subnet("enp1s0f1np1", twin) == ["enP2p1s0f1np1 192.168.177.12/24"]
    link = "3: enp1s0f1np1: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu {} qdisc mq state UP mode DEFAULT\\"
    links = {
        n: Result(n, "", link.format(m), "", 0) for n, m in (("dgx5", 9000), ("dgx6", 9000), ("dgx7", 1500))
    }
    checks = fabric_net_checks("enp1s0f1np1", links, {n: Result(n, "", addrs, "", 0) for n in links}, "dgx5")
    assert [c.status for c in checks] == [OK, OK, FAIL] and "mtu 1500, but 9000 on dgx5" in checks[2].result
    assert checks[0].result == "mtu 9000 as on dgx5; no other interface on enp1s0f1np1's subnet"


# ---------------------------------------------------------------------------------------------- the real vLLM

VLLM_RECIPE = """
[model]
repo = "org/tiny"
[engine]
kind = "vllm"
image = "vllm/vllm-openai:v0.32.0"
runtime = "docker"
port = 18382
parallel = {{ tp = 4 }}
drop_caches = true
[engine.args]
"--max-num-batched-token" = 4096
"--max-model-len" = 4096
"--kv_cache_dtype" = "auto"
"--enforce-eager" = true
[cluster]
nodes = {nodes}
ssh_port = {port}
user = "{user}"
connect_timeout = 3
[cluster.fabric]
interface = "cx7"
"""
PROBES = ("VLLM_CPU_KVCACHE_SPACE", "B12X_W4A16_MXFP4_PREFILL_MIN_TOKENS")


@pytest.fixture(scope="module")
def vllm_doctor(cluster, tmp_path_factory):
    """One `labkit doctor --json` of a vLLM lane (its --help takes 5-15 s): (exit code, rows, stdout, stderr)."""
    if vllm_available():
        pytest.skip(vllm_available())
    cluster.reset_shims()
    cluster.clear_calls()
    folder = tmp_path_factory.mktemp("doctor-vllm")
    text = VLLM_RECIPE.format(nodes=json.dumps(list(cluster.addresses)), port=cluster.port, user=cluster.user)
    (folder / "recipe.toml").write_text(textwrap.dedent(text))
    args = [a for p in PROBES for a in ("--probe", p)]
    code, out, err = doctor(cluster, folder, "--json", *args)
    return code, rows(out), out, err


def test_doctor_names_a_misspelled_flag_from_the_real_vllm_help(vllm_doctor, cluster):
    code, found, out, err = vllm_doctor
    assert code == 1, out + err
    head = cluster.addresses[0]
    (bad,) = found[(head, "engine args")]
    assert bad["status"] == FAIL and bad["facts"]["suggestion"] == "--max-num-batched-tokens"
    assert bad["result"].startswith(
        "--max-num-batched-token (engine.args) is not listed by `vllm serve --help=all` in vllm/vllm-openai:v0.32.0; "
        "did you mean --max-num-batched-tokens?"
    )
    # labkit's own multi-node flags, the other recipe flags and vLLM's underscore spelling are all known
    assert sum(c["status"] == FAIL for c in json.loads(out)["checks"]) == 1
    assert cluster.calls(head).count(["run", "--rm", "--gpus", "all", "vllm/vllm-openai:v0.32.0", "vllm", "serve",
                                      "--help=all"]) == 1  # fmt: skip
    started_nothing(cluster)


def test_doctor_probes_the_real_vllm_package(vllm_doctor, cluster):
    _, found, _, _ = vllm_doctor
    known, unknown = found[(cluster.addresses[0], "probe")]
    assert known["status"] == OK and known["result"].startswith("VLLM_CPU_KVCACHE_SPACE: found in ")
    assert "vllm/envs.py" in known["facts"]["files"] and len(known["facts"]["files"]) >= 2
    assert unknown["status"] == WARN and unknown["result"].startswith(
        "B12X_W4A16_MXFP4_PREFILL_MIN_TOKENS: not found in /"
    )
    assert unknown["facts"]["package"].endswith("/vllm")


# ---------------------------------------------------------------------------------------------- the parsers


def test_help_flags_read_from_argparse_help():
    import argparse

    p = argparse.ArgumentParser(prog="vllm serve")
    p.add_argument("--api-server-count", "-asc", type=int, help="How many API server processes to run.")
    p.add_argument(
        "--kv-cache-dtype", choices=["auto", "fp8"], help="- INFO: a help line that starts with a dash"
    )
    p.add_argument("--enforce-eager", action=argparse.BooleanOptionalAction, help="x, -y is not a flag")
    p.add_argument("--a-very-long-option-name-that-wraps", metavar="VALUE_WITH_A_LONG_NAME", help="wrapped")
    flags = help_flags(p.format_help())
    assert flags == {
        "-h", "--help", "--api-server-count", "-asc", "--kv-cache-dtype", "--enforce-eager", "--no-enforce-eager",
        "--a-very-long-option-name-that-wraps",
    }  # fmt: skip


def test_the_flags_a_lane_sends_include_labkits_own():
    plan = load_plan("dsv41", spec="dspark")
    flags = dict(lane_flags(plan, launches(plan), ("vllm", "serve")))
    assert flags["--speculative-config"] == flags["--max-model-len"] == "engine.args"
    for derived in ("--nnodes", "--node-rank", "--master-addr", "--master-port", "--headless", "--port",
                    "--tensor-parallel-size", "--data-parallel-backend"):  # fmt: skip
        assert flags[derived] == "added by labkit", derived
    assert not [f for f in flags if not f.startswith("-")]
    ray = dataclasses.replace(plan, engine=dataclasses.replace(plan.engine, multinode="ray"))
    assert "--distributed-executor-backend" in dict(lane_flags(ray, launches(ray), ("vllm", "serve")))
    assert canonical("--kv_cache_dtype", "vllm") == "--kv-cache-dtype"
    assert canonical("--compilation-config.level=3", "vllm") == "--compilation-config"
    assert canonical("--model_alias", "llamacpp") == "--model_alias"


def test_flag_checks_suggest_the_closest_flag():
    help_text = "options:\n  --max-num-batched-tokens N\n  --max-model-len N\n  --port PORT\n"
    r = Result("dgx5", "", help_text, "", 0)
    flags = [
        ("--max-num-batched-token", "engine.args"),
        ("--port", "added by labkit"),
        ("--zzz", "engine.args"),
    ]
    bad = flag_checks("dgx5", "vllm", "`vllm serve --help=all`", flags, r)
    assert [c.facts["suggestion"] for c in bad] == ["--max-num-batched-tokens", None]
    assert "argparse would take it as an abbreviation of --max-num-batched-tokens" in bad[0].result
    (ok,) = flag_checks("dgx5", "vllm", "x", [("--port", "added by labkit")], r)
    assert ok.status == OK
    (broken,) = flag_checks("dgx5", "vllm", "x", flags, Result("dgx5", "", "", "docker: no such image", 125))
    assert broken.status == FAIL and broken.result == "x listed no flags: docker: no such image"


def test_probe_script_greps_a_package_for_real(tmp_path):
    import subprocess
    import sys

    pkg = tmp_path / "site" / "enginepkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("X = 1\n")
    (pkg / "envs.py").write_text('os.environ.get("MY_KNOB")\n')
    (pkg / "sub" / "kernels.py").write_text("# MY_KNOB tunes it\n")
    (pkg / "__pycache__").mkdir()
    (pkg / "__pycache__" / "envs.cpython-311.pyc").write_text("MY_KNOB")
    script = probe_script(sys.executable, "enginepkg", ["MY_KNOB", "-NOT-THERE"])
    env = {"PYTHONPATH": str(tmp_path / "site"), "PATH": "/usr/bin:/bin"}
    out = subprocess.run(["sh", "-c", script], capture_output=True, text=True, env=env)
    found, missing = probe_checks(
        "dgx5", "enginepkg", ["MY_KNOB", "-NOT-THERE"], Result("n", "", out.stdout, "", 0)
    )
    assert found.status == OK and sorted(found.facts["files"]) == [
        "enginepkg/envs.py",
        "enginepkg/sub/kernels.py",
    ]
    assert missing.status == WARN and missing.result == f"-NOT-THERE: not found in {pkg}"
    out = subprocess.run(
        ["sh", "-c", probe_script(sys.executable, "no_such_pkg", ["X"])], capture_output=True, text=True
    )
    (none,) = probe_checks("dgx5", "no_such_pkg", ["X"], Result("n", "", out.stdout, "", out.returncode))
    assert none.status == FAIL and none.result == "cannot search the no_such_pkg package: not installed"


def sglang_help() -> str:
    """A `python3 -m sglang.launch_server --help` in SGLang 0.5's own shape: argparse, each field's flag `--` + its
    name (`tp_size` is `--tp-size`) with its long aliases (docs/engines.md, "Known flags and the sweep flag
    check"); no `--tp`, which argparse would only take as an abbreviation."""
    import argparse

    p = argparse.ArgumentParser(prog="launch_server.py")
    for names in (
        ("--model-path", "--model"), ("--host",), ("--port",), ("--tp-size", "--tensor-parallel-size"),
        ("--pp-size", "--pipeline-parallel-size"), ("--dp-size", "--data-parallel-size"),
        ("--ep-size", "--expert-parallel-size", "--ep"), ("--served-model-name",), ("--context-length",),
        ("--mem-fraction-static",), ("--speculative-algorithm",), ("--speculative-dspark-block-size",),
        ("--speculative-num-steps",), ("--speculative-eagle-topk",), ("--speculative-num-draft-tokens",), ("--nnodes",), ("--node-rank",),
        ("--dist-init-addr", "--nccl-init-addr"),
    ):  # fmt: skip
        p.add_argument(*names, help="x")
    for switch in ("--trust-remote-code", "--enable-metrics"):
        p.add_argument(switch, action="store_true", help="x")
    return p.format_help()


def test_the_prod_lanes_flags_are_all_in_sglangs_own_help():
    plan = load_plan("prod")
    flags = lane_flags(plan, launches(plan), ("python3", "-m", "sglang.launch_server"))
    assert dict(flags)["--tp-size"] == "added by labkit" and "--tp" not in dict(flags)
    # the DSPARK flags of the public DeepSeek-V4 launches (recipes/dsv41-flash-1017-4x-sglang-ep2/NOTE.md)
    assert dict(flags)["--speculative-dspark-block-size"] == "engine.args"
    assert not {"--speculative-num-steps", "--speculative-eagle-topk"} & set(dict(flags))
    r = Result("dgx5", "", sglang_help(), "", 0)
    (ok,) = flag_checks("dgx5", "sglang", "`python3 -m sglang.launch_server --help`", flags, r)
    assert ok.status == OK, ok.result
    # a recipe that writes --tp itself is still read as the tp size (nothing added), and doctor names it
    tp = dataclasses.replace(plan.engine, args=(*plan.engine.args, ("--tp", ("4",))))
    own = dataclasses.replace(plan, engine=tp)
    argv = launches(own)[0].argv
    assert "--tp-size" not in argv and argv[argv.index("--tp") + 1] == "4"
    (bad,) = flag_checks("dgx5", "sglang", "x", lane_flags(own, launches(own), argv[:3]), r)
    assert bad.status == FAIL and "abbreviation of --tp-size" in bad.result
