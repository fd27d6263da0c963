"""Every default the factory uses, in one place. Command-line options and matrix.yaml keys
override them; nothing else in the package hard-codes one of these values."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

# -- where things go ---------------------------------------------------------------------------

OUT = Path("index")
"""The output folder: wheels in files/, the index pages beside them."""

BUILD_ROOT = Path("/tmp/kernel-wheel-factory/build")
"""Where cells compile. A fixed path: nvcc writes the source's absolute path into the object,
so builds are reproducible only from the same folder."""
BUILD_ROOT_VARIABLE = "KERNEL_WHEEL_FACTORY_BUILD_ROOT"
"""Where cells compile when --build-root is not given: builds of one cell on one machine take
turns in its folder, so runs that should not wait for each other (CI jobs sharing a machine)
each name their own."""

CACHE_VARIABLE = "KERNEL_WHEEL_FACTORY_CACHE"
CACHE_FOLDER = "kernel-wheel-factory"
"""The cache: $KERNEL_WHEEL_FACTORY_CACHE, else $XDG_CACHE_HOME/kernel-wheel-factory, else
~/.cache/kernel-wheel-factory."""

# -- what gets built ---------------------------------------------------------------------------

LABEL_TEMPLATE = "cu{cuda}torch{torch}"
"""The local version label of a cell's wheels: img2gray-1.0.0+cu130torch211."""

STABLE_LABEL_TEMPLATE = "cu{cuda_major}.stable.torch{torch_major}.{torch_minor}"
"""The label of a stable-ABI kernel's wheel: the CUDA major it serves and the torch it was
built against (activation-0.1.0+cu13.stable.torch2.11). docs/concepts/stable-abi.md says why
it sorts below every per-torch label."""

CPU_LABEL_TEMPLATE = "cputorch{torch}"
"""The label of a CPU cell's wheel (`cpu:` in the matrix): the torch it was built against
(relu-1.0.0+cputorch211). It serves every build of that torch, CPU or CUDA."""

COMPRESS: Literal["size"] = "size"
"""How the GPU code nvcc embeds is compressed: smallest (docs/concepts/wheel-sizes.md has the
figures and the driver each mode needs)."""

PTX_FOR_NEWEST_SM = True
"""PTX for the newest SM of a CUDA version's list, so newer GPUs can JIT the kernel."""

RUNNER: Literal["auto"] = "auto"
"""local, docker, or docker when a daemon answers and the images can be had (auto)."""

BUILDER_BASE = "quay.io/pypa/manylinux_2_28_{arch}"
"""The builder images' base; {arch} stands for the platform."""

CELLS = 1
"""Cells built at once; their compilers share the machine's cores and memory."""

OBJECT_CACHE_FOLDER = "objects"
OBJECT_STORE_VARIABLE = "KERNEL_WHEEL_FACTORY_OBJECT_STORE"  # the remote object store's URL
"""The object cache, inside the cache folder (or --object-cache DIR)."""

OBJECT_CACHE_LIMIT = 20 * 2**30
"""The object cache's size; the least recently used objects go first beyond it."""

VERIFY_IMPORTED = 0.05
"""The share of a cell's units taken from imported objects (another machine's) that a build
compiles again to compare bytes (at least one): builds are reproducible, so a poisoned import
differs."""

DEPENDENCY_WHEEL_LIMITS = {"members": 50_000, "bytes": 1 << 30, "ratio": 100}
"""A C++ dependency's wheel (CUTLASS: about 3,000 headers, 60 MB unpacked) may unpack into at
most this many files and bytes, inflating at most this many times over."""

MAX_OBJECT_SIZE = 2 * 2**30
"""The largest object an import takes in (a big CUTLASS unit's object is tens of MiB)."""

MAX_RECORD_SIZE = 16 * 2**20
"""The largest object record or manifest the cache reads (they are a few KiB)."""

OBJECT_CACHE_MANIFEST_ENTRIES = 8
"""Input sets kept per compile command (one per version of its headers seen lately)."""

UNIT_MEMORY = {"cuda": 4 * 2**30, "cxx": 2 * 2**30}
"""The memory one compiler thread is assumed to take before a unit's peak has been measured:
nvcc takes 2 to 5 GB on a source that includes torch's headers, g++ 1 to 2 GB."""

MEMORY_HEADROOM = 0.9
"""The share of the memory free when a build starts that its compilers may take."""

UNIT_SECONDS = {"base": 40.0, "per_arch": 20.0, "per_kib": 0.5}
"""A unit's compile time before it has been measured: torch's headers take most of a unit's
time, then each arch; bigger sources take longer. Only used to split cells across jobs and to
start the longest units first."""

TIME_LIMIT_GRACE = (0.1, 20 * 60)
"""How long compilers running at --time-limit may take to finish before they are stopped: this
share of the limit, at most this many seconds. No unit starts unless its estimate ends before
the limit, so only a unit that runs over its estimate needs the grace."""

MAX_CELLS_PER_JOB = 8
"""Cells per CI job of `factory plan`."""

RUNS_ON = {"x86_64": "ubuntu-24.04", "aarch64": "ubuntu-24.04-arm"}
"""The GitHub Actions runner of a job, by platform."""

CROSS_BUILT = {"aarch64": "x86_64"}

# cuTile-Python: the CUDA major its kernels run on, and the oldest compute capability its
# assembler (tileiras 13.2-13.4) compiles for; each build asks tileiras for its own list.
CUTILE_CUDA_MAJOR = 13
CUTILE_MIN_SM = 8
"""The platforms whose cells `cross: true` builds on a machine of another (cross-compiled), and
that machine's platform."""

RUNNER_CORES = 4
"""The cores of one such runner (GitHub's standard Linux runners of public repositories), for
`factory plan --split-after`."""

# -- serving and publishing --------------------------------------------------------------------

SERVE_HOST = "127.0.0.1"
SERVE_PORT = 8000

PARALLEL_TRANSFERS = 8
"""Downloads of a merge, uploads to S3, at once."""

WORKFLOW_REPOSITORY = "kernel-wheel-factory/kernel-wheel-factory"
"""The GitHub repository of the factory's action and reusable workflow, as the workflow
`factory init --github` writes names it (with the tag of this version)."""

TORCH_INDEX = "https://pypi.org/simple/"
"""Where `torch: {latest: N}` finds torch releases."""

NAME_INDEX = "https://pypi.org/simple/"
HUB_URL = "https://huggingface.co"  # where a Hub repo id's page is
# The oldest `kernels` loader that reads metadata.json as the factory writes it (kernels-minver,
# provenance, kernel-depends): a loader refuses a variant that asks for a newer one than it is.
KERNELS_MINVER = "0.17.0"
"""The public index whose projects a kernel's distribution name must not clash with (name-clash:
in matrix.yaml); NAME_INDEX_VARIABLE replaces it (an organisation's mirror), `off` turns the
check off."""

NAME_INDEX_VARIABLE = "KERNEL_WHEEL_FACTORY_NAME_INDEX"

NAME_CHECK_TTL = 24 * 3600
"""How long, in seconds, an answer of the public index about a name is kept in the cache."""

INIT_WORKFLOW = Path(".github") / "workflows" / "wheels.yml"
"""The workflow `factory init --github` writes beside the matrix: a caller of the factory's
reusable workflow."""

NEWEST_TORCHES = 2
"""How many of the newest torch releases `factory init` covers."""

# -- time-outs, in seconds ---------------------------------------------------------------------

DOCKER_ANSWER_TIMEOUT = 20
"""How long `docker version` may take before the daemon counts as not answering."""

DOCKER_STOP_TIMEOUT = 30
"""How long a stopped docker command may take to end before it is killed."""

DOCKER_CALL_TIMEOUT = 900
"""How long any other docker command may take (inspecting, starting a container, copying a
kernel's sources in or its wheels and objects out) before it is killed."""

DOCKER_PULL_TIMEOUT = 2 * 3600
"""How long pulling an image may take (NVIDIA's PyTorch images are over 10 GB)."""

REGISTRY_TIMEOUT = 60
"""One request to a registry or its index."""

DOWNLOAD_TIMEOUT = 120
"""One read of a published index or one of its wheels (index --merge URL)."""

PAGE_DEADLINE = 300
"""The longest one page of a registry's index (read before and after `factory publish`
uploads) may take to arrive whole, redirects included, however steadily it trickles in."""

INDEX_DEADLINE = 1800
"""The longest reading another server's whole simple index may take (index --merge URL,
--new URL, the torch releases of `latest:`), every page of it together."""

NAME_CHECK_DEADLINE = 120
"""The longest the name-clash lookup against the public index may take, all names together."""

DOWNLOAD_DEADLINE = 3600
"""The longest one wheel downloaded from another server may take to arrive whole."""

DEBIAN_DEADLINE = 600
"""The longest one file of Debian's archive (its signed index, its package list, a .deb of a
few MiB) may take to arrive whole: a mirror that drips a byte at a time is given up on, not
waited for an hour.
"""

DEBIAN_INDEX_LIMIT = 256 * 2**20
"""The most bytes a Debian suite's package index may inflate to (bookworm's arm64 one is about
50 MiB); more is refused, not read into memory."""

PAGE_LIMIT = 64 * 2**20
"""The most bytes one page of another server's simple index may have (a root page listing
100,000 projects is a few MiB); more is refused, not read into memory."""

DOWNLOAD_LIMIT = 4 * 2**30
"""The most bytes one wheel downloaded from another server (index --merge URL, a registry's
copy read back by publish) may have: a file that goes on past it is refused, not stored."""

SERVE_IDLE_TIMEOUT = 30
"""`factory serve` closes a connection that sends nothing for this long."""

SERVE_HEADER_TIMEOUT = 20
"""`factory serve` closes a connection whose request line and headers take longer than this
to arrive, however steadily they trickle in."""

SERVE_WORKERS = 1024
"""Connections `factory serve` handles at once (a thread each, most of them waiting on a slow
client); one more is answered 503 at once."""

SERVE_PER_CLIENT = 32
"""Connections one client address may hold at once (pip and uv open a few): one more from it
is answered 503 at once, so one slow or greedy client cannot take the workers from others."""

LOG_OUTPUT_LIMIT = 256 * 2**20
"""The most a command whose output goes to a cell's log may print (a compiler, an install, a
kernel's tests); one that goes on is stopped."""

TOOL_TIMEOUT = 600
"""A quick tool the factory asks something (git's answers, c++filt, abi3audit, a version)."""

GIT_FETCH_TIMEOUT = 3600
"""A git clone or fetch of a kernel repository (its submodules included)."""

STEP_TIMEOUT = 3 * 3600
"""One step of a build the factory runs in the log: an install into a torch environment,
building CPython, auditwheel, linking."""

COMPILER_TIMEOUT = 4 * 3600
"""One compiler run of the compile pool, whatever --time-limit says (a big template instance
takes tens of minutes; hours mean it hangs)."""

PROBE_OUTPUT_LIMIT = 4 * 2**20
"""The most a probe of an interpreter or an image may print (its answer is a few KiB)."""

DOCTOR_TIMEOUT = 300
"""`factory doctor --python`: how long the report in that interpreter may take (it may read an
index over the network)."""

COMPILER_PROBE_TIMEOUT = 120
"""Asking the host compiler what it does (its version, linking a one-line shared object)."""

TEST_TIMEOUT = 3600.0
"""How long a kernel's own tests may run against one wheel before the cell fails; a kernel's
`tests: {timeout: ...}` in matrix.yaml sets its own."""

TEST_BUDGET = 600.0
"""When matrix.yaml chooses none of a kernel's tests: every test function runs once, then its
other cases run, in a seeded order, until this many seconds have passed (`tests: {budget:
...}` sets another)."""

TEST_SEED = 0
"""The seed of that order: the same cases in the same order on every run."""

TESTS_REQUIRED = False
"""Whether a wheel whose tests could not run (no tests/ folder, an environment that could not
be made, nothing collected) is kept from the index; `tests: {required: true}` in matrix.yaml
or --require-tests asks for it."""

LISTING_RETRIES = (0, 1, 2, 4, 8, 15)
"""Pauses before each read of a registry's index that should list a new upload (registries
behind a cache show new files late)."""


def host_platform() -> str:
    """This machine's platform, the default of matrix.yaml's `platforms`."""
    import platform

    machine = platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)


def host_python() -> str:
    """The factory's own CPython as major.minor: what a PEP 517 project is built with when the
    matrix names no `python:` list."""
    import sys

    return f"{sys.version_info.major}.{sys.version_info.minor}"
