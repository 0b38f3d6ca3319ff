"""`[cluster.fabric]` and `[engine.docker]`: parsing, defaults, overlays, each bad value refused with the file
and key, the plan's `rdma_access` and `compile_cache_mounts`, and how `labkit show` describes them."""

from __future__ import annotations

import dataclasses
import re
import shlex
import textwrap
from pathlib import Path

import pytest

from labkit.errors import RecipeError
from labkit.recipe import describe_plan, load_recipe
from labkit.recipe.launch import BindMount, DockerOptions, FabricSpec
from labkit.recipe.lookup import load_plan
from labkit.recipe.override import with_nodes
from labkit.serve.enginehelp import in_image
from labkit.serve.engines import NodeLaunch
from labkit.serve.runtimes import runtime_for

BASE = """
[model]
repo = "org/model"
[engine]
kind = "vllm"
image = "img:1"
runtime = "{runtime}"
parallel = {{ tp = 2 }}
[cluster]
nodes = ["dgx5", "dgx6"]
shared_cache = "/nas/hub"
"""


def write(tmp_path: Path, extra: str = "", runtime: str = "docker") -> Path:
    folder = tmp_path / "lane"
    folder.mkdir(exist_ok=True)
    (folder / "recipe.toml").write_text(
        textwrap.dedent(BASE.format(runtime=runtime)) + textwrap.dedent(extra)
    )
    return folder


def plan_of(tmp_path: Path, extra: str = "", runtime: str = "docker", **choices: str):
    return load_recipe(write(tmp_path, extra, runtime)).resolve(choices)


def refused(tmp_path: Path, extra: str, runtime: str = "docker") -> RecipeError:
    with pytest.raises(RecipeError) as info:
        load_recipe(write(tmp_path, extra, runtime))
    assert info.value.file.endswith("lane/recipe.toml")
    return info.value


FABRIC = """
[cluster.fabric]
interface = "enp1s0f1np1"
hcas = ["rocep1s0f1", "roceP2p1s0f1"]
addresses = { dgx5 = "192.168.177.15", dgx6 = "fd00::6" }
"""


def test_fabric_parses_into_a_frozen_spec(tmp_path):
    plan = plan_of(tmp_path, FABRIC)
    fabric = plan.cluster.fabric
    assert fabric == FabricSpec(
        "enp1s0f1np1",
        ("rocep1s0f1", "roceP2p1s0f1"),
        (("dgx5", "192.168.177.15"), ("dgx6", "fd00::6")),
    )
    assert fabric.address("dgx5") == "192.168.177.15" and fabric.address("dgx7") is None
    assert plan.rdma_access
    with pytest.raises(AttributeError):
        fabric.interface = "lo"  # type: ignore[misc]
    assert plan.resolved["cluster"]["fabric"]["interface"] == "enp1s0f1np1"  # recorded in run.json


def test_fabric_defaults(tmp_path):
    plan = plan_of(tmp_path)
    assert plan.cluster.fabric is None and not plan.rdma_access
    assert plan.cluster.gpus_per_node == 1
    plan = plan_of(tmp_path, '[cluster.fabric]\ninterface = "lo"\n')
    assert plan.cluster.fabric == FabricSpec("lo")
    assert plan.cluster.fabric.hcas == () and plan.cluster.fabric.address("dgx5") is None
    assert not plan.rdma_access  # no HCAs: no RDMA


def test_rdma_access_only_for_the_docker_runtime(tmp_path):
    assert plan_of(tmp_path, FABRIC).rdma_access
    assert not plan_of(tmp_path, FABRIC, runtime="process").rdma_access


FABRIC_BAD = [
    (
        FABRIC.replace('dgx6 = "fd00::6"', 'dgx9 = "10.0.0.9"'),
        "cluster.fabric.addresses.dgx9",
        "'dgx9' is not one of cluster.nodes",
    ),
    (
        FABRIC.replace('dgx6 = "fd00::6"', 'dgx6 = "dgx6.fabric"'),
        "cluster.fabric.addresses.dgx6",
        "expected a numeric IPv4 or IPv6 address, got 'dgx6.fabric'",
    ),
    (
        FABRIC.replace('"192.168.177.15"', '"192.168.177.256"'),
        "cluster.fabric.addresses.dgx5",
        "expected a numeric IPv4 or IPv6 address",
    ),
    (
        FABRIC.replace('"fd00::6"', '"192.168.177.15"'),
        "cluster.fabric.addresses.dgx6",
        "192.168.177.15 is dgx5's address too",
    ),
    (
        FABRIC.replace('interface = "enp1s0f1np1"\n', ""),
        "cluster.fabric.interface",
        "required key is missing",
    ),
    (
        FABRIC.replace('"enp1s0f1np1"', '"enp1s0f1np1; reboot"'),
        "cluster.fabric.interface",
        "expected a network interface name",
    ),
    (
        FABRIC.replace('"enp1s0f1np1"', '"a-very-long-interface0"'),
        "cluster.fabric.interface",
        "at most 15 characters",
    ),
    (FABRIC.replace('"rocep1s0f1",', '"-x",'), "cluster.fabric.hcas[0]", "expected an RDMA device name"),
    (FABRIC.replace('"rocep1s0f1",', '"roceP2p1s0f1",'), "cluster.fabric.hcas[1]", "duplicate entry"),
    (FABRIC.replace("hcas =", "hca ="), "cluster.fabric.hca", "unknown key (did you mean 'hcas'?)"),
    (
        '[cluster.fabric]\ninterface = "lo"\naddresses = ["10.0.0.1"]\n',
        "cluster.fabric.addresses",
        "expected a table",
    ),
]


@pytest.mark.parametrize("extra,key,why", FABRIC_BAD, ids=[k for _, k, _ in FABRIC_BAD])
def test_bad_fabric_values_name_file_and_key(tmp_path, extra, key, why):
    assert plan_of(tmp_path, FABRIC).cluster.fabric is not None  # the good fabric loads
    err = refused(tmp_path, extra)
    assert (err.key, why in err.message) == (key, True), str(err)


def test_a_variant_may_set_or_extend_the_fabric(tmp_path):
    extra = (
        FABRIC
        + "[variants.net.roce]\n[variants.net.tcp]\ncluster.fabric.hcas = []\n"
        + '[variants.net.moved]\ncluster.fabric.addresses = { dgx6 = "10.0.0.6" }\n'
    )
    assert plan_of(tmp_path, extra).rdma_access
    assert not plan_of(tmp_path, extra, net="tcp").rdma_access
    moved = plan_of(tmp_path, extra, net="moved").cluster.fabric
    assert (moved.address("dgx5"), moved.address("dgx6")) == ("192.168.177.15", "10.0.0.6")


def test_a_variant_adding_a_partial_fabric_is_checked_whole(tmp_path):
    err = refused(tmp_path, '[variants.net.a]\n[variants.net.b]\ncluster.fabric.hcas = ["mlx5_0"]\n')
    assert err.key == "cluster.fabric.interface" and "with variants net=b" in err.message


DOCKER = """
[engine.docker]
privileged = false
devices = ["/dev/dri", "/dev/fuse:/dev/fuse:rwm"]
cap_add = ["sys_nice", "IPC_LOCK"]
ulimits = { memlock = "-1:-1", nofile = 1048576, stack = "67108864:67108864" }
shm_size = "16g"
mounts = ["/data/prompts:/prompts:ro", "/scratch:/scratch", "/a//b/./c:/c:rw"]
compile_cache = true
"""


def test_docker_options_parse(tmp_path):
    d = plan_of(tmp_path, DOCKER).engine.docker
    assert d == DockerOptions(
        privileged=False,
        devices=("/dev/dri", "/dev/fuse:/dev/fuse:rwm"),
        cap_add=("SYS_NICE", "IPC_LOCK"),
        ulimits=(("memlock", "-1:-1"), ("nofile", "1048576"), ("stack", "67108864:67108864")),
        shm_size="16g",
        mounts=(
            BindMount("/data/prompts", "/prompts", True),
            BindMount("/scratch", "/scratch"),
            BindMount("/a/b/c", "/c"),
        ),
        compile_cache=True,
    )
    assert [m.volume for m in d.mounts] == ["/data/prompts:/prompts:ro", "/scratch:/scratch", "/a/b/c:/c"]
    assert d.ulimit("memlock") == "-1:-1" and d.ulimit("core") is None


def test_docker_defaults_add_nothing(tmp_path):
    plan = plan_of(tmp_path)
    assert plan.engine.docker == DockerOptions()
    assert plan.engine.docker.privileged is None and not plan.engine.docker.compile_cache
    assert plan.compile_cache_mounts == ()
    assert load_plan("sim").engine.docker == DockerOptions()


def test_compile_cache_mounts(tmp_path):
    plan = plan_of(tmp_path, "[engine.docker]\ncompile_cache = true\n")
    assert plan.compile_cache_mounts == (
        ("$HOME/.cache/labkit/compile/vllm/vllm", "/root/.cache/vllm"),
        ("$HOME/.cache/labkit/compile/vllm/flashinfer", "/root/.cache/flashinfer"),
        ("$HOME/.cache/labkit/compile/vllm/triton", "/root/.triton"),
        ("$HOME/.cache/labkit/compile/vllm/tilelang", "/root/.tilelang"),
    )
    assert all(host.startswith("$HOME/") for host, _ in load_plan("prod").compile_cache_mounts)
    assert {h.split("/")[4] for h, _ in load_plan("prod").compile_cache_mounts} == {"sglang"}
    assert plan.compile_cache_env == {}  # vLLM's caches sit at their default paths
    # apart from the model's mounts, so the serve side decides how to expand $HOME
    assert not set(plan.compile_cache_mounts) & set(plan.mounts())


def test_the_sglang_lane_keeps_sglangs_own_caches():
    """SGLang's own cache root (SGLANG_CACHE_DIR: DeepGEMM JIT, FlashInfer autotune, JIT builds) and TorchInductor,
    not vLLM's folder, which SGLang never writes; the variables point SGLang at the mounts."""
    plan = load_plan("prod")
    mounts = dict((c, h) for h, c in plan.compile_cache_mounts)
    assert "/root/.cache/vllm" not in mounts
    assert mounts["/root/.cache/sglang"] == "$HOME/.cache/labkit/compile/sglang/sglang"
    assert {"/root/.cache/torchinductor", "/root/.triton", "/root/.cache/flashinfer"} <= set(mounts)
    assert plan.compile_cache_env == {
        "SGLANG_CACHE_DIR": "/root/.cache/sglang",
        "TORCHINDUCTOR_CACHE_DIR": "/root/.cache/torchinductor",
    }
    off = dataclasses.replace(plan.engine.docker, compile_cache=False)
    assert (
        dataclasses.replace(plan, engine=dataclasses.replace(plan.engine, docker=off)).compile_cache_env == {}
    )


def test_docker_overlay_merges_key_by_key(tmp_path):
    extra = DOCKER + "[variants.x.a]\n[variants.x.b]\nengine.docker.ulimits = { nofile = 4096 }\n"
    extra += 'engine.docker.mounts = ["/other:/other"]\n'
    d = plan_of(tmp_path, extra, x="b").engine.docker
    assert d.ulimits == (("memlock", "-1:-1"), ("nofile", "4096"), ("stack", "67108864:67108864"))
    assert d.mounts == (BindMount("/other", "/other"),)  # arrays are replaced whole
    assert d.compile_cache and d.shm_size == "16g"


DOCKER_BAD = [
    ('privileged = "yes"', "engine.docker.privileged", "expected true or false"),
    ('devices = ["dev/dri"]', "engine.docker.devices[0]", "with absolute paths"),
    ('devices = ["/dev/a:/dev/b:/dev/c"]', "engine.docker.devices[0]", 'expected "host[:container][:perms]"'),
    ('cap_add = ["IPC LOCK"]', "engine.docker.cap_add[0]", "expected a capability name"),
    ('cap_add = ["--privileged"]', "engine.docker.cap_add[0]", "expected a capability name"),
    ("ulimits = { memlok = -1 }", "engine.docker.ulimits.memlok", "unknown ulimit (did you mean 'memlock'?)"),
    ('ulimits = { nofile = "lots" }', "engine.docker.ulimits.nofile", "expected an integer >= -1"),
    ("ulimits = { nofile = -2 }", "engine.docker.ulimits.nofile", "expected an integer >= -1"),
    ('ulimits = { nofile = "2048:1024" }', "engine.docker.ulimits.nofile", "soft limit 2048 is above"),
    ("ulimits = { nofile = true }", "engine.docker.ulimits.nofile", 'expected an integer or "soft:hard"'),
    ('shm_size = "16 GB"', "engine.docker.shm_size", "expected a size like '16g'"),
    ("shm_size = 0", "engine.docker.shm_size", "expected a size like '16g'"),
    ('mounts = ["data:/data"]', "engine.docker.mounts[0]", "with absolute paths"),
    ('mounts = ["/a/../etc:/etc2"]', "engine.docker.mounts[0]", "must not contain '..'"),
    ('mounts = ["/data"]', "engine.docker.mounts[0]", 'expected "host:container[:ro]"'),
    ('mounts = ["/data:/data:z"]', "engine.docker.mounts[0]", 'expected "host:container[:ro]"'),
    ('mounts = ["/a:/x", "/b:/x/"]', "engine.docker.mounts[1]", "/x is already mounted"),
    (
        'mounts = ["/elsewhere:/nas/hub"]',
        "engine.docker.mounts[0]",
        "already mounted in the container (the shared",
    ),
    (
        'compile_cache = true\nmounts = ["/t:/root/.triton"]',
        "engine.docker.mounts[0]",
        "already mounted in the container (a compile cache",
    ),
    ("compile_cach = true", "engine.docker.compile_cach", "unknown key (did you mean 'compile_cache'?)"),
    ('gpus = "gpu0"', "engine.docker.gpus", 'expected "all", "none", a count or "device=0,1"'),
    ("gpus = 0", "engine.docker.gpus", "expected a string"),
]


@pytest.mark.parametrize("line,key,why", DOCKER_BAD, ids=[line for line, _, _ in DOCKER_BAD])
def test_bad_docker_options_name_file_and_key(tmp_path, line, key, why):
    assert plan_of(tmp_path, DOCKER).engine.docker.compile_cache  # the good table loads
    err = refused(tmp_path, "[engine.docker]\n" + line + "\n")
    assert (err.key, why in err.message) == (key, True), str(err)


def test_gpus_none_leaves_the_option_out_of_the_run_and_help_lines(tmp_path):
    """A CPU lane in docker: docker refuses `--gpus` without NVIDIA's runtime, so "none" drops it from the
    lane's container and from the help run, which gets the lane's mounts and env like the container does."""
    default = plan_of(tmp_path)
    assert default.engine.docker.gpus == "all"
    launch = NodeLaunch("n1", 0, ("vllm", "serve"), (), True)
    assert "--gpus all" in runtime_for(default).start_command(launch, "img:1", [])
    assert "--gpus device=0,1" in runtime_for(
        plan_of(tmp_path, '[engine.docker]\ngpus = "device=0,1"\n')
    ).start_command(launch, "img:1", [])
    cpu = plan_of(
        tmp_path,
        '[engine.docker]\ngpus = "none"\nmounts = ["/opt/venv:/opt/venv:ro"]\n'
        '[engine.env]\nVLLM_CPU_KVCACHE_SPACE = "1"\n',
    )
    assert "--gpus" not in runtime_for(cpu).start_command(launch, "img:1", [])
    assert "no --gpus (CPU)" in describe_plan(cpu)
    help_line = shlex.split(in_image(cpu, ["vllm", "serve", "--help=all"], gpus=True))
    assert "--gpus" not in help_line and {"/opt/venv:/opt/venv:ro", "/nas/hub:/nas/hub"} <= set(help_line)
    assert help_line[-4:] == [cpu.engine.image, "vllm", "serve", "--help=all"]
    assert [help_line[i + 1] for i, a in enumerate(help_line) if a == "-e"] == ["VLLM_CPU_KVCACHE_SPACE=1"]
    assert "--gpus" in in_image(default, ["vllm", "--help"], gpus=True)


def test_docker_options_on_the_process_runtime_are_refused(tmp_path):
    err = refused(tmp_path, "[engine.docker]\ncompile_cache = true\n", runtime="process")
    assert err.key == "engine.docker" and "engine.runtime is process" in err.message
    assert plan_of(tmp_path, "[engine.docker]\n", runtime="process").engine.docker == DockerOptions()


def test_shipped_spark_recipes_declare_the_fabric():
    for name in ("dsv41", "prod"):
        for choice in ({}, {"spec": "dspark"}, {"staging": "local-view"}):
            plan = load_plan(name, **choice)
            assert plan.cluster.fabric == FabricSpec("enp1s0f1np1", ("rocep1s0f1", "roceP2p1s0f1"))
            assert all(plan.cluster.fabric.address(n) is None for n in plan.cluster.nodes)  # detected at boot
            assert plan.cluster.gpus_per_node == 1 and plan.engine.docker.compile_cache
            assert plan.rdma_access and plan.engine.docker.privileged is None
            assert plan.cluster.head_address is None  # the client stays on the management name


def test_show_describes_fabric_and_docker(tmp_path):
    text = describe_plan(load_plan("dsv41", spec="dspark"))
    assert "fabric          interface enp1s0f1np1, HCAs rocep1s0f1, roceP2p1s0f1" in text
    assert "fabric address  dgx5: detected at boot" in text and "dgx8: detected at boot" in text
    assert "client          http://dgx5:8000  (the head's management name)" in text
    assert "docker          compile cache on" in text
    assert "rdma            device /dev/infiniband, cap-add IPC_LOCK, ulimit memlock=-1:-1" in text
    assert "$HOME/.cache/labkit/compile/vllm/triton -> /root/.triton  (compile cache)" in text
    text = describe_plan(
        plan_of(tmp_path, FABRIC + DOCKER.replace("privileged = false", "privileged = true"))
    )
    assert "fabric address  dgx5: 192.168.177.15" in text and "dgx6: fd00::6" in text
    assert "docker          privileged, device /dev/dri" in text and "ulimit memlock=-1:-1" in text
    assert "shm-size 16g, compile cache on" in text and "rdma            privileged container" in text
    assert "mount           /data/prompts -> /prompts  (read-only)" in text
    text = describe_plan(load_plan("sim"))
    assert re.search(r"^fabric +- \(no \[cluster\.fabric\]\)$", text, re.M) and "docker " not in text


def test_pre_boot_keys_parse_default_and_refuse_bad_values(tmp_path):
    """cluster.min_free_memory (a size, no minimum by default) and engine.drop_caches (false by default, a
    variant may turn it on), as the pre-boot checks read them (docs/engines.md, "Pre-boot checks and labkit
    doctor")."""
    plan = plan_of(tmp_path)
    assert plan.cluster.min_free_memory is None and plan.engine.drop_caches is False
    assert re.search(r"^pre-boot +min free memory none, page cache kept$", describe_plan(plan), re.M)
    extra = (
        'min_free_memory = "100G"\n[variants.cache.keep]\n[variants.cache.drop]\nengine.drop_caches = true\n'
    )
    plan = plan_of(tmp_path, extra, cache="drop")
    assert plan.cluster.min_free_memory == 100 * 10**9 and plan.engine.drop_caches is True
    assert "min free memory 100.0 GB, page cache dropped (engine.drop_caches)" in describe_plan(plan)
    assert plan_of(tmp_path, extra, cache="keep").engine.drop_caches is False
    e = refused(tmp_path, 'min_free_memory = "lots"\n')
    assert e.key == "cluster.min_free_memory" and "expected a size like '10G'" in e.message
    with_gate = extra.replace(
        "drop_caches = true\n", 'drop_caches = true\ncluster.min_free_after_drop = "90G"\n'
    )
    gated = plan_of(tmp_path, with_gate, cache="drop")
    assert gated.cluster.min_free_after_drop == 90 * 10**9
    assert "MemFree after the drop at least 90.0 GB" in describe_plan(gated)
    assert plan.cluster.min_free_after_drop is None and "MemFree after" not in describe_plan(plan)
    e = refused(tmp_path, 'min_free_after_drop = "90G"\n')  # checked on what the drop leaves: needs it on
    assert e.key == "cluster.min_free_after_drop" and "needs engine.drop_caches = true" in e.message
    e = refused(tmp_path, '[variants.cache.drop]\nengine.drop_caches = "yes"\n')
    assert e.key.endswith("engine.drop_caches") and "expected true or false" in e.message


def test_a_multinode_docker_lane_without_a_fabric_is_warned_about_naming_file_and_key(tmp_path):
    from labkit.recipe import lane_warnings

    (warning,) = lane_warnings(plan_of(tmp_path))  # two named vLLM nodes in docker, no [cluster.fabric]
    assert warning.startswith(f"{tmp_path / 'lane' / 'recipe.toml'}: cluster.fabric: missing: ")
    assert "host names dgx5, dgx6 as their addresses" in warning and "127.0.1.1" in warning
    assert describe_plan(plan_of(tmp_path)).startswith(f"WARNING: {warning}\n")
    assert lane_warnings(plan_of(tmp_path, FABRIC)) == []
    assert lane_warnings(plan_of(tmp_path, runtime="process")) == []  # the process lanes here run on loopback
    assert lane_warnings(with_nodes(plan_of(tmp_path), ["10.0.0.5", "10.0.0.6"])) == []  # taken verbatim
    for name in ("dsv41", "prod", "sim", "tiny-vllm", "tiny-llamacpp"):
        assert lane_warnings(load_plan(name)) == [], name
