# The offline builder base (see make-debian-base.sh): a debootstrapped Debian root with the
# tools a manylinux image has for building, where a manylinux image keeps them.
ARG ROOTFS=kernel-wheel-factory/base:bullseye-rootfs
FROM ${ROOTFS}

ARG PYTHON_VERSION=3.11.2
ARG MIRROR=http://deb.debian.org/debian
ENV DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y -q --no-install-recommends build-essential ca-certificates curl git \
       make patchelf unzip xz-utils zlib1g-dev libssl-dev libffi-dev libbz2-dev liblzma-dev \
       libsqlite3-dev \
    && rm -rf /var/lib/apt/lists/*

# CPython from Debian's own source tarball of the 3.11 series (bookworm's python3.11).
WORKDIR /tmp/python
RUN curl -fsSLO "${MIRROR}/pool/main/p/python3.11/python3.11_${PYTHON_VERSION}.orig.tar.gz" \
    && tar xf "python3.11_${PYTHON_VERSION}.orig.tar.gz" --strip-components=1 \
    && ./configure --quiet --prefix=/opt/python/cp311-cp311 --with-ensurepip=install \
    && make --quiet -j"$(nproc)" >/dev/null \
    && make --quiet install >/dev/null \
    && /opt/python/cp311-cp311/bin/python3.11 -c "import ssl, sqlite3, lzma, bz2, ctypes, zlib" \
    && ln -s python3.11 /opt/python/cp311-cp311/bin/python \
    && rm -rf /tmp/python
WORKDIR /
