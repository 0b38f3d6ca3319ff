"""Hosts against real processes and real sshd nodes: quoting, exit codes, files, parallel groups, failures."""

from __future__ import annotations

import os
import time

import pytest

from labkit.errors import NodeError
from labkit.nodes import CommandTimeout, HostGroup, SshOptions, check_reachable
from labkit.nodes.base import Unreachable
from labkit.nodes.group import host_for
from labkit.nodes.local import LocalHost
from labkit.nodes.ssh import SshHost

NASTY = ["a b", "it's", '"q"', "$HOME", "`id`", "x;y", "*", ""]


def test_local_run_quotes_every_argument():
    r = LocalHost().run(["printf", "%s\\n", *NASTY])
    assert r.ok
    assert r.stdout.split("\n")[:-1] == NASTY


def test_local_exit_code_stderr_and_stdin():
    r = LocalHost().run("cat; echo oops >&2; exit 3", stdin="hello")
    assert (r.exit_code, r.stdout, r.stderr) == (3, "hello", "oops\n")
    with pytest.raises(Exception, match="exit 3"):
        r.check()


def test_local_timeout_ends_the_command_and_its_children(local_env):
    with pytest.raises(CommandTimeout, match="timed out"):
        LocalHost().run("sleep 7.5 & sleep 7.5; wait", timeout=0.3)
    time.sleep(0.2)
    assert local_env.processes() == []


def ssh(cluster, addr="127.0.0.2") -> SshHost:
    return host_for(addr, None, 22, 5, cluster.ssh_options())


def test_ssh_run_env_quoting_and_exit(cluster):
    h = ssh(cluster)
    try:
        r = h.run(["printf", "%s\\n", *NASTY])
        assert r.ok and r.stdout.split("\n")[:-1] == NASTY
        assert h.run("echo $LABKIT_TEST_NODE; exit 4").exit_code == 4
        assert h.run("echo $LABKIT_TEST_NODE").stdout.strip() == "dgx5"
        assert h.run("cat", stdin="via stdin").stdout == "via stdin"
    finally:
        h.close()


def test_ssh_files_roundtrip(cluster, tmp_path):
    h = ssh(cluster, "127.0.0.3")
    path = str(tmp_path / "x y.bin")
    try:
        h.write_file(path, b"\x00\x01data", mode=0o600)
        assert h.read_file(path) == b"\x00\x01data"
        with pytest.raises(Exception, match="cannot read"):
            h.read_file(str(tmp_path / "missing"))
    finally:
        h.close()


def test_ssh_timeout(cluster):
    h = ssh(cluster)
    try:
        with pytest.raises(CommandTimeout, match="127.0.0.2: command timed out"):
            h.run("sleep 7.25", timeout=0.5)
        deadline = time.monotonic() + 5
        while any("sleep 7.25" in cmd for _, cmd in cluster.processes()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any("sleep 7.25" in cmd for _, cmd in cluster.processes())  # ended on the node too
    finally:
        h.close()


def test_ssh_rejects_unknown_host_key(cluster, tmp_path):
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    opts = cluster.ssh_options()
    h = SshHost(
        "127.0.0.2",
        user=opts.user,
        port=opts.port,
        key_files=opts.key_files,
        known_hosts=str(empty),
        use_agent=False,
    )
    with pytest.raises(Unreachable, match="host key not found"):
        h.run("true")


def test_ssh_refused_and_wrong_key(cluster, tmp_path):
    h = host_for("127.0.0.9", None, 22, 2, cluster.ssh_options())
    with pytest.raises(Unreachable, match=r"127\.0\.0\.9"):
        h.run("true")
    bad = tmp_path / "other"
    import subprocess

    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(bad)], check=True)
    opts = cluster.ssh_options()
    h = SshHost(
        "127.0.0.2",
        user=opts.user,
        port=opts.port,
        key_files=(str(bad),),
        known_hosts=opts.known_hosts,
        use_agent=False,
    )
    with pytest.raises(Unreachable, match="Authentication"):
        h.run("true")


def test_group_runs_in_parallel_and_reports_per_node(cluster):
    group = HostGroup([ssh(cluster, a) for a in cluster.addresses])
    try:
        names = group.run("echo $LABKIT_TEST_NODE", "who")
        assert {n: r.stdout.strip() for n, r in names.items()} == dict(
            zip(cluster.addresses, ["dgx5", "dgx6", "dgx7", "dgx8"], strict=True)
        )
        t = time.monotonic()
        group.run("sleep 1", "sleep")
        assert time.monotonic() - t < 3.5  # four 1 s sleeps in parallel, not 4 s in series (+connect slack)
        with pytest.raises(NodeError) as e:
            group.run(lambda h: "exit 2" if h.name in ("127.0.0.3", "127.0.0.5") else "true", "partial")
        assert set(e.value.failures) == {"127.0.0.3", "127.0.0.5"}
        assert "exit 2" in e.value.failures["127.0.0.3"]
    finally:
        group.close()


def test_check_reachable_names_every_unreachable_node(cluster):
    opts = cluster.ssh_options()
    nodes = ["127.0.0.2", "127.0.0.9", "127.0.0.3", "127.0.0.10"]
    group = HostGroup([host_for(n, None, 22, 2, opts) for n in nodes])
    try:
        with pytest.raises(NodeError) as e:
            check_reachable(group)
        assert set(e.value.failures) == {"127.0.0.9", "127.0.0.10"}
        assert "127.0.0.9" in str(e.value) and "127.0.0.10" in str(e.value)
    finally:
        group.close()


def test_ssh_options_from_env():
    o = SshOptions.from_env(
        {"LABKIT_SSH_KEY": "/k", "LABKIT_SSH_PORT": "2222", "LABKIT_SSH_KNOWN_HOSTS": "/kh"}
    )
    assert (o.key_files, o.port, o.known_hosts, o.use_agent) == (("/k",), 2222, "/kh", False)
    assert isinstance(host_for("localhost", None, 22, 1), LocalHost)


def test_each_node_has_its_own_disk_at_the_same_path(cluster):
    if not cluster.private_disks:
        pytest.skip("unshare --mount not available: nodes share this host's disk")
    group = HostGroup([ssh(cluster, a) for a in cluster.addresses])
    disk = cluster.disk_path
    try:
        group.run(lambda h: f"echo {h.name} > {disk}/whoami", "write")
        seen = group.run(f"cat {disk}/whoami; df -k --output=size {disk} | tail -1", "read")
        for addr, r in seen.items():
            name, size_kb = r.stdout.split()
            assert name == addr  # nobody else's file is visible
            assert int(size_kb) == 64 * 1024
        assert not os.path.exists(f"{disk}/whoami")  # invisible to the test process too
    finally:
        group.run(f"rm -f {disk}/whoami", "clean", check=False)
        group.close()


def test_ssh_command_sees_end_of_input_and_big_stdin_does_not_deadlock(cluster):
    h = ssh(cluster)
    try:
        # No stdin given: the command reads end-of-input at once (as with `ssh node cmd </dev/null`), not a hang.
        assert h.run("cat; echo eof", timeout=5).stdout == "eof\n"
        # The node writes 3 MB (more than the SSH window) before it reads 2 MB of stdin: both must flow at once.
        r = h.run("head -c 3000000 /dev/zero; wc -c >&2", stdin=b"x" * 2_000_000, timeout=30)
        assert (len(r.stdout), r.stderr.strip(), r.exit_code) == (3_000_000, "2000000", 0)
    finally:
        h.close()


def test_ssh_streaming_lines_stderr_and_exit_code(cluster):
    h = ssh(cluster)
    seen: list[str] = []
    try:
        r = h.run_streaming(
            "echo one; echo err >&2; printf 'two\\nlast'; exit 3", on_line=seen.append, timeout=10
        )
        assert seen == ["one", "two", "last"]  # the unterminated last line too
        assert (r.stdout, r.stderr, r.exit_code) == ("one\ntwo\nlast", "err\n", 3)
    finally:
        h.close()


def test_ssh_connection_has_nagle_off(cluster):
    """Nagle + the node's delayed ACK stalled every command ~40 ms; the connection must set TCP_NODELAY."""
    import socket

    h = ssh(cluster)
    try:
        h.run("true")
        sock = h.connection().transport.sock
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    finally:
        h.close()


def test_ctrl_c_while_waiting_on_nodes_returns_at_once_and_names_calls_still_running(local_env):
    import signal
    import threading

    group = HostGroup([LocalHost("quick"), LocalHost("slow")])

    def work(h):
        return h.run("true" if h.name == "quick" else "sleep 2").exit_code

    threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
    t = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        group.map(work, "working")
    assert time.monotonic() - t < 1.5  # not held until the slow node's command returns
    calls = group.begin(work)
    threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
    with pytest.raises(KeyboardInterrupt):
        calls.results("working")
    assert calls.pending() == ["slow"]  # still running: a command sent to a node cannot be recalled
    assert calls.wait(10) and calls.pending() == []
    assert calls.results("working") == {"quick": 0, "slow": 0}


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"LABKIT_SSH_USER": "root@evil -p 22"}, "LABKIT_SSH_USER: expected a user name"),
        ({"LABKIT_SSH_USER": "-oProxyCommand=x"}, "LABKIT_SSH_USER: expected a user name"),
        ({"LABKIT_SSH_PORT": "22; id"}, "LABKIT_SSH_PORT: expected a port number"),
    ],
)
def test_ssh_settings_from_the_environment_are_checked_like_recipe_values(env, message):
    from labkit.errors import LabkitError
    from labkit.nodes import SshOptions

    with pytest.raises(LabkitError, match=message):
        SshOptions.from_env(env)
    assert SshOptions.from_env({"LABKIT_SSH_USER": "kilork", "LABKIT_SSH_PORT": "2222"}).port == 2222
