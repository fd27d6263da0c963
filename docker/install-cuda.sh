#!/usr/bin/env bash
# Install a builder image's CUDA toolkit and link it at /usr/local/cuda. builder.Dockerfile runs
# this with its build args in the environment:
#   CUDA_VERSION   major.minor, e.g. 13.0 or 12.8
#   CUDA_PACKAGES  the PyPI wheels that make the toolkit (CUDA 13 and newer)
#   GCC_TOOLSET    the gcc major nvcc of this version accepts, where the base's own is newer
#                  (RHEL's gcc-toolset-N, or Debian's gcc-N): its gcc and g++ come first on
#                  PATH, through /opt/kernel-wheel-factory/bin
#   PYTHON         the Python that installs PyPI wheels
# Without CUDA_PACKAGES the toolkit comes from NVIDIA's RHEL 8 repository (cuda-minimal-build
# and cudart-devel of that version) on RHEL-like bases such as manylinux_2_28, or from Debian's
# non-free nvidia-cuda-toolkit on a Debian base whose release carries that version (trixie: 12.4;
# see make-debian-base.sh). Debian's toolkit brings the g++ its nvcc accepts (g++-13 for 12.4),
# which the factory picks by itself.
set -euo pipefail
: "${CUDA_VERSION:?CUDA_VERSION is needed}" "${PYTHON:?PYTHON is needed}"

major="${CUDA_VERSION%%.*}"
bin=/opt/kernel-wheel-factory/bin
mkdir -p "$bin"

if [ -n "${CUDA_PACKAGES:-}" ]; then
    target="/opt/cuda-${CUDA_VERSION}"
    read -r -a packages <<<"$CUDA_PACKAGES"
    "$PYTHON" -m pip install --quiet --no-cache-dir --disable-pip-version-check \
        --target "$target" "${packages[@]}"
    home="$target/nvidia/cu${major}"
    # The wheels ship libcudart.so.13, not the libcudart.so that -lcudart looks for.
    for library in "$home"/lib/lib*.so.*; do
        plain="${library%%.so.*}.so"
        [ -e "$plain" ] || ln -s "$(basename "$library")" "$plain"
    done
elif [ -f /etc/redhat-release ]; then
    arch="$(uname -m)"
    [ "$arch" = aarch64 ] && arch=sbsa
    dashed="${CUDA_VERSION/./-}"
    dnf install -y -q dnf-plugins-core
    dnf config-manager --add-repo \
        "https://developer.download.nvidia.com/compute/cuda/repos/rhel8/${arch}/cuda-rhel8.repo"
    dnf install -y -q "cuda-minimal-build-${dashed}" "cuda-cudart-devel-${dashed}" \
        ${GCC_TOOLSET:+"gcc-toolset-${GCC_TOOLSET}-gcc-c++"}
    dnf clean all
    home="/usr/local/cuda-${CUDA_VERSION}"
elif [ -f /etc/debian_version ] && command -v apt-get >/dev/null; then
    codename="$(sed -n "s/^VERSION_CODENAME=//p" /etc/os-release)"
    mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
    echo "deb ${mirror} ${codename} contrib non-free" \
        >/etc/apt/sources.list.d/kernel-wheel-factory-non-free.list
    apt-get update -q >/dev/null
    candidate="$(apt-cache policy nvidia-cuda-toolkit | sed -n 's/^ *Candidate: //p')"
    case "$candidate" in
        "${CUDA_VERSION}".*) ;;
        *) echo "error: Debian ${codename}'s nvidia-cuda-toolkit is ${candidate:-not there}," \
               "not CUDA ${CUDA_VERSION}" >&2
           exit 2 ;;
    esac
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        nvidia-cuda-toolkit ${GCC_TOOLSET:+"g++-${GCC_TOOLSET}"} >/dev/null
    rm -rf /var/lib/apt/lists/*
    # Debian's toolkit is part of /usr: nvcc in /usr/bin, headers in /usr/include, libcudart
    # in /usr/lib/<triplet>.
    home=/usr
else
    echo "error: CUDA ${CUDA_VERSION} is not on PyPI; it comes from NVIDIA's RHEL 8 repository" \
        "or Debian's nvidia-cuda-toolkit, and this base is neither RHEL-like nor Debian" >&2
    exit 2
fi

if [ -n "${GCC_TOOLSET:-}" ]; then
    for tool in gcc g++; do
        # RHEL's gcc-toolset, or Debian's versioned compiler (gcc-13, g++-13)
        target="/opt/rh/gcc-toolset-${GCC_TOOLSET}/root/usr/bin/${tool}"
        [ -x "$target" ] || target="/usr/bin/${tool}-${GCC_TOOLSET}"
        if [ ! -x "$target" ]; then
            echo "error: no ${tool} ${GCC_TOOLSET} for nvcc of CUDA ${CUDA_VERSION}" >&2
            exit 1
        fi
        printf '#!/bin/sh\nexec %s "$@"\n' "$target" >"$bin/$tool"
        chmod 0755 "$bin/$tool"
    done
fi

ln -sfn "$home" /usr/local/cuda
version="$(/usr/local/cuda/bin/nvcc --version | sed -n 's/.*release \([0-9]*\.[0-9]*\).*/\1/p')"
if [ "$version" != "$CUDA_VERSION" ]; then
    echo "error: installed nvcc is CUDA ${version:-unknown}, not ${CUDA_VERSION}" >&2
    exit 1
fi
echo "CUDA ${CUDA_VERSION}: $(/usr/local/cuda/bin/nvcc --version | tail -1)"
