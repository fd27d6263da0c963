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

# CPythons where manylinux images keep them (/opt/python/cpXY-cpXY): 3.11 (bookworm's) runs the
# factory and builds kernel-builder kernels; 3.13 (trixie's) is a second interpreter for
# per-Python wheels. (Debian's archive holds no 3.12 source any more.) Each is the same release on
# every Debian suite: where the suite packages that very release (bookworm's python3.11 is 3.11.2)
# it is installed from the suite's packages, a minute's work, and the prefix is a virtual
# environment of it with pip, as a manylinux image's interpreter has; otherwise it is built from
# Debian's source tarball, checked against its sha256. PYTHONS names the series wanted; the table below
# says which release each is.
ARG PYTHONS="3.11 3.13"
ARG RELEASES="3.11.2:gz:2411c74bda5bbcfcddaf4531f66d1adc73f247f529aee981b029513aefdbf849 3.13.5:xz:93e583f243454e6e9e4588ca2c2662206ad961659863277afcdb96801647d640"
WORKDIR /tmp/python
# hadolint ignore=DL3003,DL3008
RUN for series in ${PYTHONS}; do \
      entry="$(printf '%s\n' ${RELEASES} | grep "^${series}\.")" \
        || { echo "no release of CPython ${series} is known here" >&2; exit 1; }; \
      version="${entry%%:*}"; rest="${entry#*:}"; compression="${rest%%:*}"; sum="${rest#*:}"; \
      tag="cp$(echo "${series}" | tr -d .)"; prefix="/opt/python/${tag}-${tag}"; \
      apt-get update -q >/dev/null; \
      packaged="$(apt-cache policy "python${series}" | awk '/Candidate:/ {print $2}')"; \
      if [ "${packaged%%-*}" = "${version}" ]; then \
        apt-get install -y -q --no-install-recommends "python${series}" "python${series}-dev" \
            "python${series}-venv" >/dev/null \
        && "/usr/bin/python${series}" -m venv "${prefix}" || exit 1; \
      else \
        tarball="python${series}_${version}.orig.tar.${compression}"; \
        curl -fsSLO "${MIRROR}/pool/main/p/python${series}/${tarball}" \
        && echo "${sum}  ${tarball}" | sha256sum --check --quiet \
        && mkdir "src-${version}" && tar xf "${tarball}" -C "src-${version}" --strip-components=1 \
        && (cd "src-${version}" \
            && ./configure --quiet --prefix="${prefix}" --with-ensurepip=install \
               --disable-test-modules \
            && make --quiet -j"$(nproc)" >/dev/null \
            && make --quiet install >/dev/null) || exit 1; \
      fi; \
      "${prefix}/bin/python${series}" -c "import ssl, sqlite3, lzma, bz2, ctypes, zlib, venv, ensurepip" \
      && "${prefix}/bin/python${series}" -m pip --version >/dev/null \
      && [ "$("${prefix}/bin/python${series}" -c 'import platform; print(platform.python_version())')" = "${version}" ] \
      && ln -sf "python${series}" "${prefix}/bin/python" \
      || exit 1; \
    done \
    && rm -rf /tmp/python /var/lib/apt/lists/*
WORKDIR /
