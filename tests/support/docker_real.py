"""A real Docker engine for the docker runtime's tests: Debian's dockerd, started on a socket of its own for a
test module and stopped after it, with an image imported offline.

No registry is reachable here, so the image `labkit/cpu:test` is a Debian root file system that the test setup
made from Debian's packages (debootstrap; tools/test-setup.sh writes it to <venv>/.docker-rootfs.tar), imported
with `docker import`. The engine is not in the image: the tests mount the venv and its interpreter read-only at
their own paths, so the container runs the very vLLM the other tests run. The daemon leaves the host's
networking alone (no bridge, no iptables rules); lanes use `--network host` as on the Sparks.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

SOCKET = "/var/run/labkit-test-docker.sock"
HOST = f"unix://{SOCKET}"
DATA_ROOT = Path("/var/lib/labkit-test-docker")  # kept between sessions: the imported image stays
EXEC_ROOT = Path("/var/run/labkit-test-docker")
PID_FILE = EXEC_ROOT.with_suffix(".pid")
IMAGE = "labkit/cpu:test"
START_TIMEOUT = 60.0


def rootfs_tar() -> Path:
    return Path(sys.prefix) / ".docker-rootfs.tar"


def _rootfs_stamp() -> str:
    """Which root file system an imported image was made from (its size and time), kept as an image label."""
    st = rootfs_tar().stat()
    return f"{st.st_size}-{int(st.st_mtime)}"


def docker_available() -> str | None:
    """None when a real dockerd can be started here; otherwise the reason to skip."""
    if os.geteuid() != 0:
        return "a real dockerd needs root"
    for tool in ("dockerd", "docker"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (the test setup installs Debian's docker.io as root)"
    if not rootfs_tar().is_file():
        return f"no test image root file system at {rootfs_tar()} (the test setup makes it with debootstrap)"
    return None


def docker(*args: str, check: bool = True, timeout: float = 120.0) -> subprocess.CompletedProcess:
    """The docker CLI against the test daemon."""
    env = dict(os.environ, DOCKER_HOST=HOST)
    r = subprocess.run(["docker", *args], env=env, capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)} failed ({r.returncode}): {r.stderr.strip()}")
    return r


def inspect(name: str) -> dict:
    return json.loads(docker("inspect", name).stdout)[0]


def labelled(label: str) -> list[str]:
    """Names of every container (running or not) carrying `label` ("key" or "key=value")."""
    out = docker("ps", "-a", "--filter", f"label={label}", "--format", "{{.Names}}").stdout
    return out.split()


def _stop_pid_file() -> None:
    """Stop a daemon an earlier, killed session left behind (its pid file names it)."""
    try:
        pid = int(PID_FILE.read_text().strip())
        os.kill(pid, signal.SIGTERM)
    except (OSError, ValueError):
        return
    for _ in range(100):
        try:
            os.kill(pid, 0)
        except OSError:
            return
        time.sleep(0.2)


@contextlib.contextmanager
def docker_daemon(log: Path) -> Iterator[str]:
    """dockerd on its own socket (its output in `log`) with the test image present; yields DOCKER_HOST. On
    exit every labkit-labelled container is removed and the daemon stopped."""
    _stop_pid_file()
    EXEC_ROOT.mkdir(parents=True, exist_ok=True)
    argv = [
        "dockerd",
        "--host",
        HOST,
        "--data-root",
        str(DATA_ROOT),
        "--exec-root",
        str(EXEC_ROOT),
        "--pidfile",
        str(PID_FILE),
        "--bridge",
        "none",
        "--iptables=false",
    ]
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while docker("version", check=False, timeout=10).returncode != 0:
            if proc.poll() is not None or time.monotonic() > deadline:  # this machine cannot run it: say why
                tail = log.read_text(errors="replace").strip().splitlines()[-3:]
                pytest.skip(f"dockerd did not start here: {' | '.join(tail)}")
            time.sleep(0.5)
        stamp = _rootfs_stamp()
        have = docker(
            "image", "inspect", "--format", '{{index .Config.Labels "labkit.rootfs"}}', IMAGE, check=False
        )
        if have.returncode != 0 or have.stdout.strip() != stamp:  # absent, or made from an older root fs
            with open(rootfs_tar(), "rb") as tar:
                r = subprocess.run(
                    ["docker", "import", "--change", f"LABEL labkit.rootfs={stamp}", "-", IMAGE],
                    stdin=tar,
                    env=dict(os.environ, DOCKER_HOST=HOST),
                    capture_output=True,
                    text=True,
                    timeout=300,
                )
            assert r.returncode == 0, r.stderr
        yield HOST
    finally:
        for name in labelled("labkit.lane") if proc.poll() is None else []:
            docker("rm", "-f", name, check=False)
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
