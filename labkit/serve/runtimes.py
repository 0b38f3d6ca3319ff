"""Runtimes: how one node's engine process is started, watched, read and removed.

Pure shell-command builders (one string per action, every argument quoted); the lane runs them on hosts.
  docker   one named, labelled container per node (`docker run -d --name <lane>-<node> --network host ...`)
  process  a background process group per node (nohup; a new process group in the caller's session, so the
           engine shares the CPU scheduler's group with a client on the same host), pid and log files under a
           per-lane state dir on the node: ${LABKIT_STATE_DIR:-$HOME/.cache/labkit}/lanes/<lane_id>/<node>.{pid,log}

Every `alive` command prints one word: `alive`, `dead` (exited but not removed) or `absent`.
Every `stop` command exits 0 only when nothing of that node's lane is left (it verifies, not assumes).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from labkit.recipe import LanePlan
from labkit.serve.engines.base import NodeLaunch

LABEL = "labkit.lane"
ALIVE, DEAD, ABSENT = "alive", "dead", "absent"

# A process group counts as gone when none of its members is running; zombies (unreaped children of an
# init that does not reap) are ignored.
# /proc is read directly (no procps on minimal images); `cat` skips processes that vanish mid-scan. In a stat
# line the fields after "(comm) " are state, ppid, pgrp.
_GROUP_RUNNING = (
    'cat /proc/[0-9]*/stat 2>/dev/null | awk -v g="$p" '
    '\'{sub(/^.*\\) /, ""); if ($3 == g && $1 != "Z") n++} END {exit n ? 0 : 1}\''
)


# Beside <node>.pid (the pid alone, as pid files go) <node>.started holds "STARTTIME BOOT_ID": the engine's start
# time (field 22 of /proc/PID/stat, clock ticks since boot; the 20th field after "(comm) ") and the node's boot id
# when it started. After a reboot or a kill -9 the pid may name an unrelated process (group); a different boot id,
# or a live PID with another start time, makes the pid file stale: the lane counts as absent there and nothing is
# signalled. "-" is an unknown field; a pid file without .started (older labkit) is trusted as before.
_START_TIME = 'awk \'{sub(/^.*\\) /, ""); print $20}\' /proc/"$p"/stat 2>/dev/null'
_BOOT_ID = "cat /proc/sys/kernel/random/boot_id 2>/dev/null"
# Sets S (the .started file of "$P") and p: the pid in "$P", or "" when that file is stale or holds no pid.
_READ_PID = (
    'S="${P%.pid}.started"; p=; st=; b=; read -r p 2>/dev/null < "$P"; '
    'case "$p" in \'\'|*[!0-9]*) p= ;; esac; [ -s "$S" ] && read -r st b 2>/dev/null < "$S"; '
    'if [ -n "$p" ] && [ -n "$b" ] && [ "$b" != - ] && [ "$b" != "$(' + _BOOT_ID + ')" ]; then p=; fi; '
    'if [ -n "$p" ] && [ -n "$st" ] && [ "$st" != - ]; then now=$(' + _START_TIME + "); "
    'if [ -n "$now" ] && [ "$now" != "$st" ]; then p=; fi; fi; '
)


# The engine's own process group, in the session of the shell that starts it: perl's setpgrp, then exec (perl-base
# is essential on Debian/Ubuntu). Not setsid: a new session is a new scheduler autogroup on Linux, which caps the
# engine's CPU share against a client in another session; on 2 cores vLLM CPU's API server then starves and sends
# whole responses in one burst (docs/engines.md, "Process runtime and scheduler groups"). Without perl: setsid.
# The wrapper writes the pid (= process group id) to "$0" before exec, so the pid file names the engine.
_NEW_GROUP = (
    "if command -v perl >/dev/null 2>&1; then set -- perl -e "
    + shlex.quote(
        'setpgrp(0, 0) or die "setpgrp: $!\\n"; my $f = shift; open(my $h, ">", $f) or die "$f: $!\\n"; '
        'print $h "$$\\n"; close($h) or die "$f: $!\\n"; exec { $ARGV[0] } @ARGV or die "exec $ARGV[0]: $!\\n"'
    )
    + ' "$P"; else set -- setsid sh -c \'echo $$ > "$0"; exec "$@"\' "$P"; fi; '
)


def _safe(node: str) -> str:
    """A node name usable in container and file names."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", node)


@dataclass(frozen=True)
class Runtime:
    lane_id: str
    stop_grace: float = 10.0  # seconds between TERM and KILL

    kind = ""

    def name(self, node: str) -> str:
        return f"{self.lane_id}-{_safe(node)}"

    def start_command(self, launch: NodeLaunch, image: str | None, mounts: list[tuple[str, str]]) -> str:
        raise NotImplementedError

    def alive_command(self, node: str) -> str:
        raise NotImplementedError

    def stop_command(self, node: str) -> str:
        raise NotImplementedError

    def logs_command(self, node: str, offset: int = 0, tail: int | None = None) -> str:
        """The log from byte `offset` (to follow it), or its last `tail` lines."""
        raise NotImplementedError

    def leftovers_command(self) -> str:
        """Prints one line per thing of this lane still present on the node (empty when clean)."""
        raise NotImplementedError


def _cut(offset: int, tail: int | None) -> str:
    if tail is not None:
        return f" | tail -n {int(tail)}"
    return f" | tail -c +{int(offset) + 1}" if offset else ""


@dataclass(frozen=True)
class DockerRuntime(Runtime):
    options: object | None = None  # the recipe's engine.docker (labkit.recipe DockerOptions)
    rdma: bool = False  # LanePlan.rdma_access: give the container the RoCE devices
    cache_mounts: tuple[tuple[str, str], ...] = ()  # LanePlan.compile_cache_mounts (host side starts "$HOME")

    kind = "docker"

    def start_command(self, launch: NodeLaunch, image: str | None, mounts: list[tuple[str, str]]) -> str:
        if not image:
            raise ValueError("the docker runtime needs engine.image")
        argv = [
            "docker",
            "run",
            "-d",
            "--name",
            self.name(launch.node),
            "--label",
            f"{LABEL}={self.lane_id}",
            "--label",
            f"labkit.node={launch.node}",
            "--restart",
            "no",
            *self.host_access(),
        ]
        for host_path, container_path in mounts:
            argv += ["-v", f"{host_path}:{container_path}"]
        for key, value in launch.env:
            argv += ["-e", f"{key}={value}"]
        caches, made = home_mounts(self.cache_mounts)
        return made + shlex.join(argv) + caches + " " + shlex.join([image, *launch.argv])

    def host_access(self) -> list[str]:
        """What the lane's container gets of the host: its network and IPC, the GPUs, the recipe's options and
        the RoCE devices (shared by the engine's container and doctor's tool runs)."""
        return [
            "--network",
            "host",
            "--ipc",
            "host",
            *gpu_args(self.options),
            *docker_option_args(self.options, self.rdma),
        ]

    def tool_prefix(self, image: str) -> list[str]:
        """`docker run --rm` with the lane's host access, before a tool's argv: a fabric tool that only the image
        has runs as the engine would (labelled, so a leftover is this lane's); an image absent on the node is
        not pulled here (doctor's image check reports it)."""
        return [
            "docker",
            "run",
            "--rm",
            "--pull",
            "never",
            "--label",
            f"labkit.tool={self.lane_id}",
            *self.host_access(),
            image,
        ]

    def alive_command(self, node: str) -> str:
        n = shlex.quote(self.name(node))
        return (
            f"s=$(docker inspect -f '{{{{.State.Running}}}}' {n} 2>/dev/null) || {{ echo {ABSENT}; exit 0; }}; "
            f'if [ "$s" = true ]; then echo {ALIVE}; else echo {DEAD}; fi'
        )

    def stop_command(self, node: str) -> str:
        n = shlex.quote(self.name(node))
        return (
            f"docker rm -f {n} >/dev/null 2>&1; "
            f'if docker inspect {n} >/dev/null 2>&1; then echo "container {self.name(node)} still present" >&2; '
            "exit 1; fi"
        )

    def logs_command(self, node: str, offset: int = 0, tail: int | None = None) -> str:
        return f"docker logs {shlex.quote(self.name(node))} 2>&1" + _cut(offset, tail)

    def leftovers_command(self) -> str:
        return shlex.join(
            ["docker", "ps", "-a", "--filter", f"label={LABEL}={self.lane_id}", "--format", "{{.Names}}"]
        )


@dataclass(frozen=True)
class ProcessRuntime(Runtime):
    kind = "process"

    def state_dir(self) -> str:
        """Shell expression for the lane's state dir on the node (expanded there)."""
        return f'"${{LABKIT_STATE_DIR:-$HOME/.cache/labkit}}"/lanes/{shlex.quote(self.lane_id)}'

    def _files(self, node: str) -> str:
        safe = shlex.quote(_safe(node))
        return f'D={self.state_dir()}; P="$D"/{safe}.pid; S="$D"/{safe}.started; L="$D"/{safe}.log; '

    def start_command(self, launch: NodeLaunch, image: str | None, mounts: list[tuple[str, str]]) -> str:
        env = [f"{k}={v}" for k, v in launch.env]
        inner = shlex.join(["env", *env, *launch.argv]) if env else shlex.join(list(launch.argv))
        # The wrapper (_NEW_GROUP) makes the engine's process group, writes its pid (= the group id) and execs the
        # engine, so the pid file names the engine and `kill -- -PGID` reaches everything it spawned.
        # Once the pid is there, the start command records the engine's identity (start time, boot id) beside it.
        return (
            self._files(launch.node)
            + 'mkdir -p "$D" || exit 1; '
            + 'if [ -s "$P" ]; then '
            + _READ_PID
            + 'if [ -n "$p" ] && '
            + _GROUP_RUNNING
            + "; then "
            + 'echo "already running as process group $p ($P)" >&2; exit 17; fi; fi; '
            + 'rm -f "$P" "$S"; cd "$D" || exit 1; '
            + _NEW_GROUP
            + 'nohup "$@" '
            + inner
            + ' > "$L" 2>&1 < /dev/null & '
            + 'i=0; while [ ! -s "$P" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done; '
            + "[ -s \"$P\" ] || { echo 'process did not start' >&2; exit 1; }; "
            + 'read -r p < "$P"; st=$('
            + _START_TIME
            + "); b=$("
            + _BOOT_ID
            + "); "
            + 'printf \'%s %s\\n\' "${st:--}" "${b:--}" > "$S.new" && mv -f "$S.new" "$S" || exit 1; '
            + 'echo "$p"'
        )

    def alive_command(self, node: str) -> str:
        return (
            self._files(node)
            + f'[ -s "$P" ] || {{ echo {ABSENT}; exit 0; }}; '
            + _READ_PID
            + f'[ -n "$p" ] || {{ echo {ABSENT}; exit 0; }}; '
            + f'if [ -r /proc/"$p"/stat ] && ! grep -q \') Z \' /proc/"$p"/stat; then echo {ALIVE}; '
            + f"else echo {DEAD}; fi"
        )

    def stop_command(self, node: str) -> str:
        steps = max(1, int(self.stop_grace / 0.1))
        return (
            self._files(node)
            + '[ -s "$P" ] || exit 0; '
            + _READ_PID
            + '[ -n "$p" ] || { rm -f "$P" "$S"; exit 0; }; '
            + 'kill -s TERM -- -"$p" 2>/dev/null; '
            + f"i=0; while {_GROUP_RUNNING} && [ $i -lt {steps} ]; do sleep 0.1; i=$((i+1)); done; "
            + "if "
            + _GROUP_RUNNING
            + '; then kill -s KILL -- -"$p" 2>/dev/null; sleep 0.2; fi; '
            + "if "
            + _GROUP_RUNNING
            + '; then echo "process group $p still running after KILL" >&2; exit 1; fi; '
            + 'rm -f "$P" "$S"'
        )

    def logs_command(self, node: str, offset: int = 0, tail: int | None = None) -> str:
        return self._files(node) + 'cat "$L" 2>/dev/null' + _cut(offset, tail)

    def leftovers_command(self) -> str:
        return (
            f'D={self.state_dir()}; for P in "$D"/*.pid; do [ -s "$P" ] || continue; {_READ_PID}'
            f'[ -n "$p" ] || continue; if {_GROUP_RUNNING}; then echo "process group $p ($P)"; fi; done'
        )


def gpu_args(options) -> list[str]:
    """`--gpus VALUE` from engine.docker.gpus ("all" when the recipe says nothing; none for "none")."""
    value = options.gpus if options is not None else "all"
    return [] if value == "none" else ["--gpus", value]


def docker_option_args(options, rdma: bool) -> list[str]:
    """`docker run` options from engine.docker, plus RoCE access when the lane's fabric has HCAs and the
    container is not privileged anyway: /dev/infiniband, IPC_LOCK and an unlimited memlock, as the DGX Spark
    launchers give it (docs/engines.md, "Fabric addresses and environment")."""
    out: list[str] = []
    privileged = bool(options is not None and options.privileged)
    if privileged:
        out.append("--privileged")
    devices = list(options.devices) if options is not None else []
    caps = list(options.cap_add) if options is not None else []
    ulimits = dict(options.ulimits) if options is not None else {}
    if rdma and not privileged:
        devices += [] if any(d.split(":")[0] == "/dev/infiniband" for d in devices) else ["/dev/infiniband"]
        caps += [] if "IPC_LOCK" in caps else ["IPC_LOCK"]
        ulimits.setdefault("memlock", "-1:-1")
    for d in devices:
        out += ["--device", d]
    for c in caps:
        out += ["--cap-add", c]
    for name, value in ulimits.items():
        out += ["--ulimit", f"{name}={value}"]
    if options is not None and options.shm_size:
        out += ["--shm-size", options.shm_size]
    for m in options.mounts if options is not None else ():
        out += ["-v", m.volume]
    return out


def home_path(host: str) -> str:
    """A host path that starts with a literal $HOME, for the node's shell: `"$HOME"` expanded there, the rest
    quoted (labkit.recipe.launch: the compile caches' host side)."""
    rest = host.removeprefix("$HOME")
    if rest == host:
        raise ValueError(f"compile cache path {host!r} does not start with $HOME")
    return f'"$HOME"{shlex.quote(rest)}'


def home_mounts(pairs: tuple[tuple[str, str], ...]) -> tuple[str, str]:
    """(' -v "$HOME"/rest:container ...', 'mkdir -p "$HOME"/rest ... && ') for host paths that start with a
    literal $HOME, expanded by the node's shell; the rest of each path is quoted."""
    if not pairs:
        return "", ""
    volumes, dirs = [], []
    for host, container in pairs:
        dirs.append(home_path(host))
        volumes.append(f' -v "$HOME"{shlex.quote(host.removeprefix("$HOME") + ":" + container)}')
    return "".join(volumes), "mkdir -p " + " ".join(dirs) + " && "


def runtime_for(plan: LanePlan, stop_grace: float = 10.0) -> Runtime:
    if plan.engine.runtime == "docker":
        return DockerRuntime(
            plan.lane_id,
            stop_grace,
            options=plan.engine.docker,
            rdma=plan.rdma_access,
            cache_mounts=plan.compile_cache_mounts,
        )
    return ProcessRuntime(plan.lane_id, stop_grace)
