# The offline builder base (see make-debian-base.sh): a debootstrapped Debian root with the
# tools a manylinux image has for building, where a manylinux image keeps them.
ARG ROOTFS=kernel-wheel-factory/base:rootfs-bookworm
FROM ${ROOTFS}

ARG MIRROR=http://deb.debian.org/debian
ENV DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y -q --no-install-recommends build-essential ca-certificates curl git \
       make patchelf unzip xz-utils zlib1g-dev libssl-dev libffi-dev libbz2-dev liblzma-dev \
       libsqlite3-dev \
    && rm -rf /var/lib/apt/lists/*

# CPythons from Debian's own source tarballs, each checked against its sha256, installed where
# manylinux images keep them (/opt/python/cpXY-cpXY): 3.11 (bookworm's) runs the factory and
# builds kernel-builder kernels; 3.13 (trixie's) is a second interpreter for per-Python wheels.
# (Debian's archive holds no 3.12 source any more.)
ARG PYTHONS="3.11.2:gz:2411c74bda5bbcfcddaf4531f66d1adc73f247f529aee981b029513aefdbf849 3.13.5:xz:93e583f243454e6e9e4588ca2c2662206ad961659863277afcdb96801647d640"
WORKDIR /tmp/python
# hadolint ignore=DL3003
RUN for entry in ${PYTHONS}; do \
      version="${entry%%:*}"; rest="${entry#*:}"; compression="${rest%%:*}"; sum="${rest#*:}"; \
      series="${version%.*}"; tag="cp$(echo "${series}" | tr -d .)"; \
      tarball="python${series}_${version}.orig.tar.${compression}"; \
      curl -fsSLO "${MIRROR}/pool/main/p/python${series}/${tarball}" \
      && echo "${sum}  ${tarball}" | sha256sum --check --quiet \
      && mkdir "src-${version}" && tar xf "${tarball}" -C "src-${version}" --strip-components=1 \
      && (cd "src-${version}" \
          && ./configure --quiet --prefix="/opt/python/${tag}-${tag}" --with-ensurepip=install \
          && make --quiet -j"$(nproc)" >/dev/null \
          && make --quiet install >/dev/null) \
      && "/opt/python/${tag}-${tag}/bin/python${series}" -c "import ssl, sqlite3, lzma, bz2, ctypes, zlib" \
      && ln -s "python${series}" "/opt/python/${tag}-${tag}/bin/python" \
      || exit 1; \
    done \
    && rm -rf /tmp/python
WORKDIR /
