"""Node telemetry, the executor: one long-lived sampler command per node for the length of a run, its lines
read as they arrive and stamped on labkit's clock (docs/measurement.md, "Node telemetry").

Each node runs one `sh -c` script (`sampler_script`): nvidia-smi in loop mode in the background, and a loop
that reads /proc/meminfo at the same period. The script ends when its stop file appears, when its lifetime
(the plan's timeout budget) is over, or when labkit's side of the pipe is gone (its next write raises
SIGPIPE, on which it cleans up; nvidia-smi's own next write ends it the same way); nvidia-smi runs under `timeout` with the same lifetime, so nothing outlives a
crashed labkit for longer than that. The script sleeps in the background and waits for that sleep, so a
signal is handled at once: `NodeTelemetry.stop` wakes it with USR1 for one more sample now, then touches the
stop file and sends TERM, instead of waiting out a sleep of up to a period twice.
"""

from __future__ import annotations

import math
import shlex
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence

from labkit.errors import LabkitError
from labkit.measure.telemetry.series import (
    GPU_QUERY,
    REASONS_FIELDS,
    NodeSeries,
    TelemetryRun,
    node_csv,
    parse_node,
)
from labkit.nodes import Host, HostError, ignoring_interrupts, map_nodes

STATE_PREFIX = "/tmp/labkit-telemetry-"  # <token>-<i>.stop and .pid on the node
POLL_S = 0.01


def sampler_script(*, period_ms: int, max_seconds: int, base: str) -> str:
    """The node-side script: tagged lines on stdout (`M` memory, `-` for a value the kernel did not give, `N`
    no nvidia-smi, `F` the reasons field used, `X` nvidia-smi's exit status, `Q` no /proc/meminfo) between
    nvidia-smi's own CSV rows. Pure."""
    q = shlex.quote
    new, old = REASONS_FIELDS
    period = f"{period_ms / 1000:g}"
    return f"""stop={q(base + ".stop")}; pidf={q(base + ".pid")}; smi= nap=
cleanup() {{
  if [ -n "$nap" ]; then kill "$nap" 2>/dev/null; nap=; fi
  if [ -n "$smi" ]; then kill "$smi" 2>/dev/null; wait "$smi" 2>/dev/null; smi=; fi
  rm -f "$stop" "$pidf"
}}
trap 'cleanup; exit 0' TERM INT HUP PIPE
trap : USR1
echo $$ >"$pidf"
end=$(( $(date +%s) + {max_seconds} ))
if command -v nvidia-smi >/dev/null 2>&1; then
  r={old}
  nvidia-smi --query-gpu={new} --format=csv,noheader >/dev/null 2>&1 && r={new}
  printf 'F %s\\n' "$r"
  timeout --foreground -k 2 {max_seconds} nvidia-smi --query-gpu={GPU_QUERY},"$r" --format=csv,noheader,nounits \\
    -lms {period_ms} 2>&1 &
  smi=$!
else
  printf 'N %s\\n' 'nvidia-smi: command not found'
fi
[ -r /proc/meminfo ] || printf 'Q %s\\n' '/proc/meminfo: not readable'
while [ ! -e "$stop" ]; do
  now=$(date '+%s %Y/%m/%d %H:%M:%S.%3N')
  [ "${{now%% *}}" -le "$end" ] || break  # -le: whole seconds, so a lifetime of L lasts L to L+1 s
  if [ -r /proc/meminfo ]; then
    t= a= c=
    while read -r k v _; do
      case "$k" in MemTotal:) t=$v ;; MemAvailable:) a=$v ;; Cached:) c=$v ;; esac
    done </proc/meminfo
    printf 'M %s %s %s %s\\n' "${{now#* }}" "${{t:--}}" "${{a:--}}" "${{c:--}}"
  fi
  if [ -n "$smi" ] && ! kill -0 "$smi" 2>/dev/null; then wait "$smi"; printf 'X %s\\n' "$?"; smi=; fi
  sleep {period} </dev/null >/dev/null 2>&1 &
  nap=$!
  wait "$nap" || kill "$nap" 2>/dev/null  # a signal ends the wait at once: USR1 samples again, TERM ends
  nap=
done
cleanup
"""


def signal_command(base: str, signal: str, *, stop: bool = False, forget: bool = False) -> str:
    """The node command that sends `signal` to the pid the script wrote under `base` (nothing if it has not
    written one yet); `stop`: touch its stop file first, which the loop also checks; `forget`: remove the pid
    file after. Pure."""
    pid = shlex.quote(base + ".pid")
    run = f"kill -{signal} $(cat {pid} 2>/dev/null) 2>/dev/null"
    if stop:
        run = f"touch {shlex.quote(base + '.stop')}; {run}"
    return f"{run}; rm -f {pid}" if forget else f"{run}; true"


class NodeTelemetry:
    """Samples GPU power, clocks, temperature, utilization and clock reasons (nvidia-smi) and memory
    (/proc/meminfo) on every node in parallel at one period while a run measures.

    `start()` starts one sampler per node (over a twin of its host, so the host stays free for other commands)
    and waits until each has sent its first samples; `stop()` ends them and waits until each node has sent a
    sample after the stop was asked for, so the last window is covered. `result(t_origin)` gives the parsed
    series, `csv(t_origin)` the raw samples per node. `clock_baseline` ({node: healthy SM clock, MHz}) and
    `clock_drop` are the health marks' settings, passed on to the summary."""

    def __init__(
        self,
        hosts: Sequence[Host],
        *,
        period_s: float = 1.0,
        clock_baseline: Mapping[str, float] | None = None,
        clock_drop: float = 0.10,
        settle_s: float = 10.0,
    ):
        if not period_s > 0:
            raise LabkitError(f"telemetry period must be > 0 s, got {period_s!r}")
        self.hosts = list(hosts)
        self.period_ms = max(1, round(period_s * 1000))
        self.clock_baseline = dict(clock_baseline) if clock_baseline else None
        self.clock_drop = clock_drop
        self.settle_s = settle_s
        self.lines: dict[str, list[tuple[int, str]]] = {}
        self.errors: dict[str, str] = {}
        self.bases: dict[str, str] = {}
        self.threads: dict[str, threading.Thread] = {}
        self.running = False

    # ---------------------------------------------------------------- lifecycle
    def start(self, max_seconds: float = 3600.0) -> None:
        """One sampler per node, each ending by itself after `max_seconds` at the latest."""
        if self.running:
            return
        token = uuid.uuid4().hex[:12]
        life = max(1, math.ceil(max_seconds))
        self.lines, self.errors, self.bases, self.threads = {}, {}, {}, {}
        for i, host in enumerate(self.hosts):
            base = f"{STATE_PREFIX}{token}-{i}"
            script = sampler_script(period_ms=self.period_ms, max_seconds=life, base=base)
            self.lines[host.name], self.bases[host.name] = [], base
            t = threading.Thread(
                target=self._sample,
                args=(host, script, life),
                name=f"labkit-telemetry-{host.name}",
                daemon=True,
            )
            self.threads[host.name] = t
        self.running = True
        for t in self.threads.values():
            t.start()
        self._settle({name: 0 for name in self.lines}, self.settle_s)

    def _sample(self, host: Host, script: str, life: int) -> None:
        """Runs in the node's thread until the script ends; each line is stamped when it arrives."""
        lines = self.lines[host.name]
        twin = host.twin()
        try:
            r = twin.run_streaming(
                ["sh", "-c", script],
                timeout=life + 30,
                on_line=lambda line: lines.append((time.perf_counter_ns(), line)),
            )
            if not lines and r.stderr.strip():
                self.errors[host.name] = r.stderr.strip().splitlines()[-1][:300]
        except Exception as e:  # the node's figures are lost, not the run
            self.errors[host.name] = (e.message if isinstance(e, HostError) else str(e))[:300]
        finally:
            if twin is not host:
                twin.close()

    def _settle(self, marks: Mapping[str, int], seconds: float) -> None:
        """Wait (at most `seconds`) until every node's sampler has sent, after line `marks[node]`, a GPU line
        (unless nvidia-smi is known missing or gone) and a memory line (unless /proc/meminfo is missing)."""
        deadline = time.monotonic() + seconds
        waiting = set(marks)
        while waiting and time.monotonic() < deadline:
            waiting = {n for n in waiting if not self._fresh(n, marks[n])}
            if waiting:
                time.sleep(POLL_S)

    def _fresh(self, node: str, mark: int) -> bool:
        if not self.threads[node].is_alive():
            return True
        lines = self.lines[node]
        tags = [line[:2] for _, line in lines]
        new = tags[mark:]
        gpu = "N " in tags or "X " in tags or any(t not in ("M ", "F ", "Q ") for t in new)
        memory = "Q " in tags or "M " in new
        return gpu and memory

    def stop(self) -> None:
        """End every node's sampler: USR1 for one more sample after now (nvidia-smi's own loop gives its next
        row within a period), then the stop file and TERM, then TERM again if need be.
        Idempotent; an interrupt cannot cut it short (the samplers would run on until their lifetime)."""
        if not self.running:
            return
        self.running = False
        with ignoring_interrupts():
            marks = {n: len(lines) for n, lines in self.lines.items()}
            self._on_nodes(lambda h: self._send(h, "USR1"))  # one more sample now
            self._settle(marks, 2 * self.period_ms / 1000 + 2)
            self._on_nodes(lambda h: self._send(h, "TERM", stop=True))
            self._join(self.period_ms / 1000 + 5)
            self._on_nodes(lambda h: self._send(h, "TERM", forget=True))  # the last resort
            self._join(5)

    def _send(self, host: Host, signal: str, *, stop: bool = False, forget: bool = False) -> None:
        run = signal_command(self.bases[host.name], signal, stop=stop, forget=forget)
        host.run(run, timeout=15)

    def _on_nodes(self, fn: Callable[[Host], object]) -> None:
        """fn(host) on every node whose sampler still runs, in parallel; a failure costs only that node."""
        alive = [h for h in self.hosts if self.threads[h.name].is_alive()]
        if alive:
            map_nodes(fn, alive)

    def _join(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        for t in self.threads.values():
            t.join(max(0.0, deadline - time.monotonic()))

    def __enter__(self) -> NodeTelemetry:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---------------------------------------------------------------- what was sampled
    def series(self, t_origin: int) -> dict[str, NodeSeries]:
        """{node: parsed series}, stamps made relative to `t_origin` (the run's origin)."""
        return {
            name: parse_node(
                name, [(t - t_origin, line) for t, line in list(lines)], self.errors.get(name, "")
            )
            for name, lines in self.lines.items()
        }

    def result(self, t_origin: int) -> TelemetryRun:
        return TelemetryRun(self.series(t_origin), self.period_ms, self.clock_baseline, self.clock_drop)

    def csv(self, t_origin: int) -> dict[str, str]:
        """{node: `telemetry/<node>.csv` text}: the raw samples, stamps relative to `t_origin`."""
        return {name: node_csv(s) for name, s in self.series(t_origin).items()}


def as_telemetry(telemetry: NodeTelemetry | Sequence[Host] | None) -> NodeTelemetry | None:
    """A sampler from what run_bench was given: a NodeTelemetry as is, hosts with the default settings."""
    if telemetry is None or isinstance(telemetry, NodeTelemetry):
        return telemetry
    return NodeTelemetry(list(telemetry))
