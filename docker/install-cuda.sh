#!/usr/bin/env bash
# Install a builder image's CUDA toolkit and link it at /usr/local/cuda. builder.Dockerfile runs
# this with its build args in the environment:
#   CUDA_VERSION   major.minor, e.g. 13.0 or 12.8
#   CUDA_PACKAGES  the PyPI wheels that make the toolkit (CUDA 13 and newer)
#   GCC_TOOLSET    a gcc-toolset nvcc of this version accepts (RHEL bases): its gcc and g++
#                  come first on PATH, through /opt/kernel-wheel-factory/bin
#   PYTHON         the Python that installs PyPI wheels
# Without CUDA_PACKAGES the toolkit comes from NVIDIA's RHEL 8 repository (cuda-minimal-build
# and cudart-devel of that version), on RHEL-like bases such as manylinux_2_28.
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
else
    echo "error: CUDA ${CUDA_VERSION} is not on PyPI and comes from NVIDIA's RHEL 8 repository," \
        "but this base is not RHEL-like" >&2
    exit 2
fi

if [ -n "${GCC_TOOLSET:-}" ]; then
    toolset="/opt/rh/gcc-toolset-${GCC_TOOLSET}/root/usr/bin"
    for tool in gcc g++; do
        printf '#!/bin/sh\nexec %s/%s "$@"\n' "$toolset" "$tool" >"$bin/$tool"
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
