#!/usr/bin/env bash
# Make a local builder base image from a Debian release, for machines that cannot pull
# quay.io/pypa/manylinux_2_28_*: debootstrap a minimal root, import it into docker, then add what
# the manylinux images provide for a build, in the same places: gcc and g++, make, git, patchelf,
# and CPython 3.11 and 3.13 at /opt/python/cp311-cp311 and cp313-cp313 (built from Debian's
# source tarballs, the same on every release). Wheels built on it carry the manylinux tag of the release's glibc:
# bullseye (2.31, the default) for CUDA 13 builders, trixie (2.41) for CUDA 12.4 ones, since
# trixie's non-free nvidia-cuda-toolkit is a CUDA 12.4 toolkit that install-cuda.sh can use.
#
#   docker/make-debian-base.sh [SUITE] [IMAGE]   (default: bullseye kernel-wheel-factory/base:SUITE)
#
# Needs root (debootstrap), docker, and Debian's mirror (MIRROR, default deb.debian.org).
set -euo pipefail

suite="${1:-bullseye}"
image="${2:-kernel-wheel-factory/base:${suite}}"
mirror="${MIRROR:-http://deb.debian.org/debian}"
here="$(cd "$(dirname "$0")" && pwd)"

for tool in debootstrap docker tar; do
    command -v "$tool" >/dev/null || { echo "error: $tool is needed (apt-get install $tool)" >&2; exit 2; }
done

root="$(mktemp -d "/tmp/kwf-${suite}.XXXXXX")"
trap 'rm -rf "$root"' EXIT
echo "debootstrap $suite into $root ..."
debootstrap --variant=minbase "$suite" "$root" "$mirror" >"$root.log" 2>&1 \
    || { tail -5 "$root.log" >&2; exit 1; }
rm -f "$root.log"
raw="${image}-rootfs"
tar -C "$root" -c . | docker import - "$raw" >/dev/null
echo "imported $raw; adding the build tools and CPython 3.11 and 3.13 ..."
docker build --quiet --tag "$image" --build-arg "ROOTFS=$raw" \
    --build-arg "MIRROR=$mirror" \
    --file "$here/debian-base.Dockerfile" "$here" >/dev/null
docker image rm "$raw" >/dev/null
echo "made $image: $(docker run --rm "$image" sh -c 'ldd --version | head -1; /opt/python/cp311-cp311/bin/python -V; /opt/python/cp313-cp313/bin/python -V')"
