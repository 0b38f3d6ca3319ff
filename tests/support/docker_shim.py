"""A `docker` stand-in for test nodes: records every call and runs a container's command as a local process.

Installed by tests/support/nodes.py as `<shim dir>/docker` with the test interpreter in its shebang. State lives in
$LABKIT_SHIM_STATE/<$LABKIT_TEST_NODE>/: `calls.jsonl` (one argv per call, for assertions) and
`containers/<name>.json|.log`. Supports the subset labkit uses: run -d, run --rm (in the foreground), rm -f, ps,
inspect, logs, image inspect, pull. Unknown options fail with exit 125 like docker does, so a wrong command line
is caught by tests.

Per-node files a test writes (tests/support/nodes.py has helpers for each):
  images.json    {image: ID or null}: an image not listed is present with ID "sha256:" + sha256(image name);
                 null makes it absent ("Error: No such image: IMG", exit 1) until `docker pull` adds it
  foreign.json   [{"name", "image", "labels"}]: running containers of someone else, listed by `docker ps`
  pull_fail      its text makes `docker pull` fail with that message
  pull_delay     (in the state root, for every node) seconds each `docker pull` takes
  image-tools/   programs only "the image" has: a foreground `run --rm` finds them first on its PATH
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

VALUE_OPTS = {
    "--name",
    "--label",
    "-l",
    "--network",
    "--net",
    "--ipc",
    "--gpus",
    "-v",
    "--volume",
    "-e",
    "--env",
    "--shm-size",
    "--restart",
    "--ulimit",
    "--cap-add",
    "--device",
    "--entrypoint",
    "-w",
    "--workdir",
    "--pull",
}
FLAG_OPTS = {"-d", "--detach", "--rm", "--privileged", "--init"}


def state() -> Path:
    root = Path(os.environ["LABKIT_SHIM_STATE"]) / os.environ.get("LABKIT_TEST_NODE", "local")
    (root / "containers").mkdir(parents=True, exist_ok=True)
    return root


def fail(msg: str, code: int = 1) -> None:
    print(msg, file=sys.stderr)
    sys.exit(code)


def running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def load(name: str) -> dict | None:
    f = state() / "containers" / f"{name}.json"
    return json.loads(f.read_text()) if f.exists() else None


def containers() -> list[dict]:
    return [json.loads(f.read_text()) for f in sorted((state() / "containers").glob("*.json"))]


def cmd_run(args: list[str]) -> None:
    opts: dict[str, list[str]] = {}
    i = 0
    while i < len(args) and args[i].startswith("-"):
        a = args[i]
        if a in FLAG_OPTS:
            opts.setdefault(a, []).append("")
            i += 1
        elif a in VALUE_OPTS and i + 1 < len(args):
            opts.setdefault(a, []).append(args[i + 1])
            i += 2
        else:
            fail(f"unknown flag: {a}", 125)
    if i >= len(args):
        fail('"docker run" requires at least 1 argument.', 125)
    image, argv = args[i], args[i + 1 :]
    name = (opts.get("--name") or [""])[-1]
    if not name and ("-d" in opts or "--detach" in opts):
        fail("shim: containers must be named", 125)
    old = load(name) if name else None
    if old is not None:
        fail(
            f'docker: Error response from daemon: Conflict. The container name "/{name}" is already in use.',
            125,
        )
    if os.environ.get("LABKIT_SHIM_PULL_FAIL"):
        fail(f"Unable to find image '{image}' locally", 125)
    env = dict(os.environ)
    for item in opts.get("-e", []) + opts.get("--env", []):
        k, _, v = item.partition("=")
        env[k] = v
    if "-d" not in opts and "--detach" not in opts:
        if "--rm" not in opts or name:
            fail("shim: a foreground run must be `run --rm` without --name", 125)
        # `docker run --rm IMAGE CMD...` in the foreground: CMD runs on the node itself (its PATH has python3 and
        # vllm), so an engine's --help and a probe of its package answer for real; the exit code is CMD's.
        tools = state() / "image-tools"
        if tools.is_dir():
            env["PATH"] = f"{tools}:{env.get('PATH', '')}"
        sys.exit(subprocess.run(argv, env=env, stdin=subprocess.DEVNULL).returncode)
    crash = state() / "crash_on_run"  # a broken node: its container prints this file's line and exits 1
    if crash.exists():
        argv = ["sh", "-c", 'sleep 0.5; echo "$0"; exit 1', crash.read_text().strip()]
    labels = dict(item.partition("=")[::2] for item in opts.get("--label", []) + opts.get("-l", []))
    log = state() / "containers" / f"{name}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    record = {
        "name": name,
        "image": image,
        "argv": argv,
        "labels": labels,
        "pid": proc.pid,
        "opts": opts,
        "created": time.time(),
    }
    (state() / "containers" / f"{name}.json").write_text(json.dumps(record))
    print(f"{proc.pid:064x}")


def cmd_rm(args: list[str]) -> None:
    names = [a for a in args if not a.startswith("-")]
    missing = []
    for name in names:
        c = load(name)
        if c is None:
            missing.append(name)
            continue
        pid = c["pid"]
        if running(pid) and "-f" not in args and "--force" not in args:
            fail(f"Error response from daemon: cannot remove container {name}: container is running", 1)
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        for _ in range(50):
            if not running(pid):
                break
            time.sleep(0.02)
        (state() / "containers" / f"{name}.json").unlink()
        (state() / "containers" / f"{name}.log").unlink(missing_ok=True)
        print(name)
    if missing:
        fail("\n".join(f"Error response from daemon: No such container: {n}" for n in missing), 1)


def _filters(args: list[str]) -> list[str]:
    return [args[i + 1] for i, a in enumerate(args[:-1]) if a in ("--filter", "-f")]


def _format(args: list[str]) -> str | None:
    for i, a in enumerate(args[:-1]):
        if a == "--format":
            return args[i + 1]
    return None


def foreign() -> list[dict]:
    """Containers a test planted (foreign.json): someone else's, always running, never removed by labkit."""
    f = state() / "foreign.json"
    items = json.loads(f.read_text()) if f.exists() else []
    return [{"pid": 0, "argv": [], "labels": {}, **c, "foreign": True} for c in items]


def render(fmt: str, c: dict, alive: bool) -> str:
    """A `--format` template as docker fills it for `ps` (its `\\t` becomes a tab, as in docker's own CLI)."""
    fields = {
        "{{.Names}}": c["name"],
        "{{.Image}}": c["image"],
        "{{.Labels}}": ",".join(f"{k}={v}" for k, v in sorted(c["labels"].items())),
        "{{.ID}}": f"{c['pid']:012x}",
        "{{.Status}}": "Up 2 minutes" if alive else "Exited (0) 1 second ago",
    }
    out = fmt.replace("\\t", "\t").replace("\\n", "\n")
    for key, value in fields.items():
        out = out.replace(key, value)
    if "{{" in out:
        fail(f"shim: unsupported ps format {fmt!r}", 125)
    return out


def cmd_ps(args: list[str]) -> None:
    show_all = "-a" in args or "--all" in args
    for c in containers() + foreign():
        alive = c.get("foreign", False) or running(c["pid"])
        if not alive and not show_all:
            continue
        ok = True
        for f in _filters(args):
            key, _, value = f.partition("=")
            if key == "label":
                lk, _, lv = value.partition("=")
                ok &= lk in c["labels"] and (not lv or c["labels"][lk] == lv)
            elif key == "name":
                ok &= value in c["name"]
        if not ok:
            continue
        fmt = _format(args)
        if "-q" in args:
            print(f"{c['pid']:012x}")
        elif fmt:
            print(render(fmt, c, alive))
        else:
            print(f"{c['pid']:012x}  {c['image']}  {'Up' if alive else 'Exited'}  {c['name']}")


def cmd_inspect(args: list[str]) -> None:
    fmt = None
    names = []
    i = 0
    while i < len(args):
        if args[i] in ("-f", "--format"):
            fmt = args[i + 1]
            i += 2
        else:
            names.append(args[i])
            i += 1
    code = 0
    for name in names:
        c = load(name)
        if c is None:
            print(f"Error: No such object: {name}", file=sys.stderr)
            code = 1
            continue
        alive = running(c["pid"])
        if fmt == "{{.State.Running}}":
            print("true" if alive else "false")
        elif fmt == "{{.State.Status}}":
            print("running" if alive else "exited")
        else:
            print(
                json.dumps(
                    [{"Name": "/" + name, "State": {"Running": alive}, "Config": {"Labels": c["labels"]}}]
                )
            )
    sys.exit(code)


def cmd_logs(args: list[str]) -> None:
    tail = None
    names = []
    i = 0
    while i < len(args):
        if args[i] in ("--tail", "-n"):
            tail = int(args[i + 1])
            i += 2
        elif args[i].startswith("-"):
            i += 1
        else:
            names.append(args[i])
            i += 1
    c = load(names[0]) if names else None
    if c is None:
        fail(f"Error response from daemon: No such container: {names[0] if names else ''}", 1)
    text = (state() / "containers" / f"{c['name']}.log").read_text(errors="replace")
    if tail is not None:
        text = "".join(text.splitlines(keepends=True)[-tail:]) if tail else ""
    sys.stdout.write(text)


def image_id(image: str) -> str | None:
    """The image's ID on this node (None: absent): images.json's entry, else the default sha256 of its name."""
    f = state() / "images.json"
    images = json.loads(f.read_text()) if f.exists() else {}
    if image in images:
        return images[image]
    return "sha256:" + hashlib.sha256(image.encode()).hexdigest()


def repo_digests(image: str) -> list[str]:
    repo = image.split("@")[0]
    if ":" in repo.rsplit("/", 1)[-1]:
        repo = repo.rsplit(":", 1)[0]
    return [f"{repo}@sha256:" + hashlib.sha256(("digest " + image).encode()).hexdigest()]


def cmd_image(args: list[str]) -> None:
    """`image inspect [--format F] IMAGE...`: the formats labkit uses, else docker's JSON array."""
    if not args or args[0] != "inspect":
        fail(f"shim: unsupported: docker image {' '.join(args)}", 125)
    fmt, names, i = None, [], 1
    while i < len(args):
        if args[i] in ("-f", "--format"):
            fmt, i = args[i + 1], i + 2
        elif args[i].startswith("-"):
            fail(f"unknown flag: {args[i]}", 125)
        else:
            names.append(args[i])
            i += 1
    code, docs = 0, []
    for name in names:
        found = image_id(name)
        if found is None:
            print(f"Error: No such image: {name}", file=sys.stderr)
            code = 1
            continue
        digests = repo_digests(name)
        if fmt == "{{.Id}}":
            print(found)
        elif fmt == "{{.Id}} {{json .RepoDigests}}":
            print(f"{found} {json.dumps(digests)}")
        elif fmt is None:
            docs.append({"Id": found, "RepoTags": [name], "RepoDigests": digests})
        else:
            fail(f"shim: unsupported image inspect format {fmt!r}", 125)
    if fmt is None and code == 0:
        print(json.dumps(docs, indent=4))
    sys.exit(code)


def cmd_pull(args: list[str]) -> None:
    """`pull IMAGE`: docker's non-interactive progress lines; the image is present (default ID) afterwards."""
    names = [a for a in args if not a.startswith("-")]
    if len(names) != 1 or len(args) != 1:
        fail('"docker pull" requires exactly 1 argument.', 1)
    image = names[0]
    broken = state() / "pull_fail"
    if broken.exists():
        fail(f"Error response from daemon: {broken.read_text().strip()}", 1)
    repo, _, tag = image.rpartition(":") if ":" in image.rsplit("/", 1)[-1] else (image, "", "latest")
    if image_id(image) is not None:
        print(f"{tag}: Pulling from {repo}\nDigest: {repo_digests(image)[0].split('@')[1]}")
        print(f"Status: Image is up to date for {image}\n{image}")
        return
    delay = Path(os.environ["LABKIT_SHIM_STATE"]) / "pull_delay"
    layers = [hashlib.sha256(f"{image} {n}".encode()).hexdigest()[:12] for n in range(3)]
    print(f"{tag}: Pulling from {repo}", flush=True)
    for layer in layers:
        print(f"{layer}: Pulling fs layer", flush=True)
    for layer in layers:
        print(f"{layer}: Downloading", flush=True)
        time.sleep(float(delay.read_text()) / len(layers) if delay.exists() else 0)
        print(f"{layer}: Pull complete", flush=True)
    print(f"Digest: {repo_digests(image)[0].split('@')[1]}")
    print(f"Status: Downloaded newer image for {image}\n{image}")
    f = state() / "images.json"
    images = json.loads(f.read_text()) if f.exists() else {}
    images[image] = "sha256:" + hashlib.sha256(image.encode()).hexdigest()
    f.write_text(json.dumps(images))


def main() -> None:
    args = sys.argv[1:]
    with open(state() / "calls.jsonl", "a") as f:
        f.write(json.dumps(args) + "\n")
    if not args:
        fail("usage: docker COMMAND", 1)
    # A slow node: seconds to sleep per call, from the env or a `delay` file in the shim state root.
    delay_file = Path(os.environ["LABKIT_SHIM_STATE"]) / "delay"
    delay = os.environ.get("LABKIT_SHIM_DELAY") or (
        delay_file.read_text().strip() if delay_file.exists() else ""
    )
    if delay:
        time.sleep(float(delay))
    cmd, rest = args[0], args[1:]
    handlers = {
        "run": cmd_run,
        "rm": cmd_rm,
        "ps": cmd_ps,
        "inspect": cmd_inspect,
        "logs": cmd_logs,
        "image": cmd_image,
        "pull": cmd_pull,
    }
    if cmd not in handlers:
        fail(f"docker: '{cmd}' is not a docker command (shim)", 1)
    handlers[cmd](rest)


if __name__ == "__main__":
    main()
