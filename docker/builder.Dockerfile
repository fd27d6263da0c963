# A builder image: one CUDA version on one base, with a host compiler that version's nvcc
# accepts, and the factory itself. The default base is pypa's manylinux_2_28 image, so wheels
# built here run on glibc 2.28 and newer; any base laid out the same way works (BASE), such as
# the offline ones docker/make-debian-base.sh makes. Pin a base by digest with
# BASE=quay.io/pypa/manylinux_2_28_x86_64@sha256:...
#
# `factory images MATRIX` (and the docker runner, on first use) assembles the build context:
# this file, install-cuda.sh, requirements.txt (the running factory's dependencies, pinned),
# the host's CA certificates and the factory's package folder, and names the image after the CUDA version, the platform, the
# factory's version and a digest of that context.
ARG BASE=quay.io/pypa/manylinux_2_28_x86_64
FROM ${BASE}

# major.minor of the toolkit
ARG CUDA_VERSION=13.0
# the PyPI wheels that make this toolkit (CUDA 13 and newer); empty: NVIDIA's RHEL 8 repository
ARG CUDA_PACKAGES=""
# a gcc-toolset this nvcc accepts, where the base's own compiler is too new for it
ARG GCC_TOOLSET=""
# the CPython the factory runs on (a manylinux image's layout)
ARG PYTHON=/opt/python/cp311-cp311/bin/python3.11

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# The certificates the factory's host trusts (a company's TLS proxy, say), added to the base's
# own: downloads in the image and in its containers then work where the host's do.
COPY host-ca-certificates.crt /opt/kernel-wheel-factory/host-ca-certificates.crt
RUN own="$("${PYTHON}" -c 'import ssl; print(ssl.get_default_verify_paths().openssl_cafile)')" \
    && for bundle in "${own}" /etc/ssl/certs/ca-certificates.crt /etc/pki/tls/certs/ca-bundle.crt; do \
         if [ -f "${bundle}" ]; then cat "${bundle}"; break; fi; \
       done > /opt/kernel-wheel-factory/ca-certificates.crt \
    && cat /opt/kernel-wheel-factory/host-ca-certificates.crt \
       >> /opt/kernel-wheel-factory/ca-certificates.crt
ENV SSL_CERT_FILE=/opt/kernel-wheel-factory/ca-certificates.crt \
    PIP_CERT=/opt/kernel-wheel-factory/ca-certificates.crt
LABEL org.opencontainers.image.title="kernel-wheel-factory builder" \
      org.opencontainers.image.description="CUDA ${CUDA_VERSION} kernel builder on ${BASE}"

COPY install-cuda.sh /opt/kernel-wheel-factory/install-cuda.sh
RUN /opt/kernel-wheel-factory/install-cuda.sh

COPY requirements.txt /opt/kernel-wheel-factory/requirements.txt
RUN "${PYTHON}" -m venv /opt/kernel-wheel-factory/venv \
    && /opt/kernel-wheel-factory/venv/bin/pip install --quiet --no-cache-dir \
       --disable-pip-version-check -r /opt/kernel-wheel-factory/requirements.txt

COPY factory /opt/kernel-wheel-factory/src/factory
RUN site="$(/opt/kernel-wheel-factory/venv/bin/python -c \
        'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
    && echo /opt/kernel-wheel-factory/src > "${site}/kernel-wheel-factory.pth" \
    && /opt/kernel-wheel-factory/venv/bin/python -m factory --version \
    && mkdir -p /work/src \
    && chmod 0755 /work /work/src

ENV PATH=/opt/kernel-wheel-factory/bin:/opt/kernel-wheel-factory/venv/bin:${PATH} \
    CUDA_HOME=/usr/local/cuda \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /work
