#!/usr/bin/env bash
# Make sure a docker engine answers here: install Debian's docker.io (and debootstrap, which
# make-debian-base.sh needs, bubblewrap, which confines setup.py builds on this machine, and
# the aarch64 cross compiler and qemu's user-mode emulator, which `cross: true` builds with)
# when they are missing, and start dockerd when none runs.
# For Debian machines, run as root (CI does; see .ci/run). Prints the engine's version.
set -euo pipefail

answers() { docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }

missing=()
command -v dockerd >/dev/null || missing+=(docker.io)
command -v debootstrap >/dev/null || missing+=(debootstrap)
command -v bwrap >/dev/null || missing+=(bubblewrap)
command -v aarch64-linux-gnu-g++ >/dev/null || missing+=(g++-aarch64-linux-gnu)
command -v qemu-aarch64-static >/dev/null || missing+=(qemu-user-static)
if ((${#missing[@]})); then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi
if ! answers; then
    nohup dockerd >/var/log/kernel-wheel-factory-dockerd.log 2>&1 &
    for _ in $(seq 60); do
        answers && break
        sleep 1
    done
fi
if ! answers; then
    echo "error: dockerd did not start; see /var/log/kernel-wheel-factory-dockerd.log" >&2
    exit 1
fi
echo "docker $(docker version --format '{{.Server.Version}}') answers"
