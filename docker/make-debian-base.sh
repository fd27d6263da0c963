#!/usr/bin/env bash
# Make a local builder base image from a Debian release, for machines that cannot pull
# quay.io/pypa/manylinux_2_28_*: debootstrap a minimal root, import it into docker, then add what
# the manylinux images provide for a build, in the same places: gcc and g++, make, git, patchelf,
# and CPython 3.11 and 3.13 at /opt/python/cp311-cp311 and cp313-cp313 (the same releases on every
# suite: the suite's own packages where it has that release, as bookworm has 3.11.2, else built
# from Debian's source tarballs; PYTHONS="3.11" makes only those named). Wheels built on it carry the manylinux tag its
# glibc and libstdc++ allow, and its g++ decides which torch releases it can compile for:
#   bookworm (the default; glibc 2.36, g++ 12)  every torch the factory knows, CUDA 13 builders
#   bullseye (glibc 2.31, g++ 10)               torch 2.13 and older only: g++ 10 gives no full
#                                               C++20 (__cplusplus 201709L), which torch 2.14's
#                                               headers require; the factory skips such cells
#   trixie (glibc 2.41)                         CUDA 12.4 builders: its non-free
#                                               nvidia-cuda-toolkit is a toolkit install-cuda.sh
#                                               can use
# (Debian has no g++ 11 or newer for bullseye: the widest tag that builds torch 2.14 and newer
# from Debian's packages is bookworm's.) Safe to run twice at once.
#
#   [PYTHONS="3.11 3.13"] docker/make-debian-base.sh [SUITE] [IMAGE]
#                                                (default: bookworm kernel-wheel-factory/base:SUITE)
#
# Needs root (debootstrap), docker, and Debian's mirror (MIRROR, default deb.debian.org).
set -euo pipefail

suite="${1:-bookworm}"
image="${2:-kernel-wheel-factory/base:${suite}}"
mirror="${MIRROR:-http://deb.debian.org/debian}"
pythons="${PYTHONS:-3.11 3.13}"
here="$(cd "$(dirname "$0")" && pwd)"

for tool in debootstrap docker tar; do
    command -v "$tool" >/dev/null || { echo "error: $tool is needed (apt-get install $tool)" >&2; exit 2; }
done

root="$(mktemp -d "/tmp/kwf-${suite}.XXXXXX")"
# The imported root is named for this run alone, so two runs at once (for the same image or
# not) never remove what the other builds on; the last to finish tags the image.
raw="${image%%:*}:rootfs-${suite}-$(basename "$root" | cut -d. -f2)-$$"
trap 'rm -rf "$root" "$root.log"; docker image rm "$raw" >/dev/null 2>&1 || true' EXIT
echo "debootstrap $suite into $root ..."
debootstrap --variant=minbase "$suite" "$root" "$mirror" >"$root.log" 2>&1 \
    || { tail -5 "$root.log" >&2; exit 1; }
tar -C "$root" -c . | docker import - "$raw" >/dev/null
echo "imported $raw; adding the build tools and CPython $pythons ..."
docker build --quiet --tag "$image" --build-arg "ROOTFS=$raw" \
    --build-arg "MIRROR=$mirror" --build-arg "PYTHONS=$pythons" \
    --file "$here/debian-base.Dockerfile" "$here" >/dev/null
echo "made $image: $(docker run --rm "$image" sh -c 'ldd --version | head -1; for python in /opt/python/*/bin/python; do $python -V; done')"
