"""`factory init`: a first matrix.yaml for a kernel repo, from what the repo declares.

The matrix covers the newest torch releases the factory knows that the kernel accepts (its
torch minver/maxver, the release its stable ABI needs), the CUDA version of each release's
PyPI build, and for each CUDA version its default SMs that the kernel's cuda-capabilities
serve. The text is written here rather than dumped by a YAML library: the file is for people
to read and edit, and every choice carries a comment saying where it came from.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from .. import __version__, defaults
from ..config.spec import KernelSpec
from ..errors import ConfigError
from ..policy import TorchRelease, cuda_policy, torch_release, torch_releases
from ..policy.capabilities import Capability, loose_intersection
from ..values.versions import Version
from .cells import cuda_bounds_reason, stable_abi_reason, torch_bounds_reason
from .model import KindPlan

__all__ = ["Proposal", "propose", "render_matrix", "render_workflow"]


@dataclass(frozen=True)
class Proposal:
    """What `factory init` proposes for one kernel."""

    spec: KernelSpec
    torches: tuple[Version, ...]  # newest first
    cudas: tuple[tuple[Version, tuple[Version, ...], tuple[Version, ...]], ...]
    # (CUDA version, its SMs for this kernel, the torch releases PyPI builds with it)
    dropped: tuple[str, ...]  # CUDA versions left out, each with the reason
    skipped: tuple[str, ...] = ()  # CUDA versions whose cells the kernel fits none of, why

    @property
    def excluded(self) -> list[tuple[Version, Version]]:
        """(torch, CUDA) pairs PyPI has no torch for: left out rather than skipped."""
        return [(torch, cuda) for torch in self.torches for cuda, _, torches in self.cudas
                if torch not in torches]


def _declared(spec: KernelSpec) -> list[Capability] | None:
    """Every capability the kernel's CUDA sections declare; None when one declares none
    (that section is built for every SM of a cell)."""
    found: list[Capability] = []
    for section in spec.kernels:
        if section.backend != "cuda":
            continue
        if section.cuda_capabilities is None:
            return None
        found.extend(section.cuda_capabilities)
    if spec.noarch is not None:
        return list(spec.noarch.cuda_capabilities) or None
    return found or None


def _refusal(spec: KernelSpec, torch: Version) -> str | None:
    """Why the kernel has no wheel for this torch, by the planner's own rules."""
    return torch_bounds_reason(spec, torch) or stable_abi_reason(spec, torch)


def _chosen_torches(spec: KernelSpec, newest: int,
                    named: tuple[Version, ...]) -> list[TorchRelease]:
    releases = sorted(torch_releases().values(), key=lambda release: release.version,
                      reverse=True)
    known = ", ".join(str(release.version) for release in releases)
    for version in named:
        if torch_release(version) is None:
            raise ConfigError(f"--torch {version}: not a torch release the factory knows "
                              f"({known})")
    if named:
        for version in named:
            reason = _refusal(spec, version)
            if reason is not None:
                raise ConfigError(f"{spec.name} does not accept torch {version}: {reason}",
                                  file=spec.build_toml)
        return [release for release in releases if release.version in named]
    chosen = [release for release in releases if _refusal(spec, release.version) is None]
    chosen = chosen[:newest]
    if not chosen:
        raise ConfigError(f"{spec.name} accepts none of the torch releases the factory knows "
                          f"({known})", file=spec.build_toml)
    return chosen


def propose(spec: KernelSpec, newest: int = defaults.NEWEST_TORCHES,
            torches: tuple[Version, ...] = (), sms: tuple[Version, ...] = ()) -> Proposal:
    """The newest `newest` torch releases the kernel accepts (or the `torches` named) and the
    CUDA cells for them: each CUDA version's default SMs (or the `sms` named that it can
    compile) that the kernel's capabilities serve."""
    chosen = _chosen_torches(spec, newest, torches)
    declared = _declared(spec)
    by_cuda: dict[Version, list[Version]] = {}
    for release in chosen:
        by_cuda.setdefault(release.pypi_cuda, []).append(release.version)
    cudas, dropped, skipped = [], [], []
    for cuda, versions in sorted(by_cuda.items(), reverse=True):
        policy = cuda_policy(cuda)
        assert policy is not None  # torch.toml names only CUDA versions cuda.toml knows
        reason = cuda_bounds_reason(spec, cuda)
        if reason is not None:
            dropped.append(f"CUDA {cuda}: {reason}")
            continue
        wanted = [sm for sm in policy.sms if sm in sms] if sms else list(policy.default)
        if not wanted:
            dropped.append(f"CUDA {cuda}: none of the SMs named is one it can compile for")
            continue
        served = tuple(sm for sm in wanted
                       if declared is None or loose_intersection(declared, [sm]))
        if not served:  # the kernel fits no cell: kept, so that the plan says why it is skipped
            which = "none of the SMs named" if sms else "none of its default SMs"
            capabilities = " ".join(str(cap) for cap in declared or ())
            skipped.append(f"CUDA {cuda}: the kernel's cuda-capabilities ({capabilities}) "
                           f"serve {which} ({' '.join(map(str, wanted))}); its cells are "
                           "planned as skipped, with that reason")
            served = tuple(wanted)
        cudas.append((cuda, served, tuple(versions)))
    if not cudas:
        raise ConfigError(f"{spec.name}: no CUDA version fits ({'; '.join(dropped)})",
                          file=spec.build_toml)
    kept = {torch for _, _, versions in cudas for torch in versions}
    return Proposal(spec, tuple(release.version for release in chosen
                                if release.version in kept), tuple(cudas), tuple(dropped),
                    tuple(skipped))


def _list(items: tuple[Version, ...] | list[str]) -> str:
    return json.dumps([str(item) for item in items])


def render_matrix(proposal: Proposal, kind: KindPlan, kernel_path: str,
                  pythons: tuple[Version, ...] = (), follow: bool = False) -> str:
    """matrix.yaml's text for the proposal of a project of `kind`; `kernel_path` is relative
    to the matrix's folder, `pythons` the CPythons of a per-Python project (default: the
    factory's list). With `follow`, the torch releases and CUDA versions are not listed but
    followed: the newest releases on PyPI, each with its build's CUDA version (the proposal's
    SMs for all)."""
    spec = proposal.spec
    lines = [f"# {spec.name}: written by `factory init` (kernel-wheel-factory {__version__}) "
             f"from its {kind.describe(spec)}.",
             "# `factory plan` lists the cells; `factory build` builds them. Edit freely.",
             "kernels:",
             f"  - path: {json.dumps(kernel_path)}"]
    if spec.static_version is not None:
        lines.append(f"    # version: {spec.static_version} (read from the project's files)")
    else:
        lines.append("    version: 0.1.0          # the wheels' version (or tag the repo "
                     "vX.Y.Z and drop this)")
    torches = ", ".join(map(str, proposal.torches))
    lines += ["", f"torch: {{latest: {len(proposal.torches)}}}   # the newest torch releases on "
                  f"PyPI, pinned by `factory lock` (now {torches})" if follow else
              f"torch: {_list(proposal.torches)}   # torch releases the kernel accepts "
              "(PyPI's builds)", ""]
    if kind.own_python and not kind.abi3(spec):
        lines += [f"python: {_list(pythons)}   # a wheel for each CPython" if pythons else
                  "# python: [\"3.11\", \"3.12\", \"3.13\"]   # a wheel per CPython "
                  "(default: the Python the factory runs on)", ""]
    if follow:
        every = tuple(sorted({sm for _, listed, _ in proposal.cudas for sm in listed}))
        cudas = ", ".join(str(cuda) for cuda, _, _ in proposal.cudas)
        lines.append(f"cuda: {{follow: torch, sms: {_list(every)}}}   # each torch with its "
                     f"PyPI build's CUDA (now {cudas})")
        return _stable_note(lines, spec)
    lines.append("cuda:")
    for cuda, sms, built in proposal.cudas:
        builds = " and ".join(str(torch) for torch in built)
        lines += [f"  \"{cuda}\":                      # PyPI's torch {builds} is built "
                  f"with it",
                  f"    sms: {_list(sms)}"]
    for reason in proposal.dropped:
        lines.append(f"  # left out: {reason}")
    for reason in proposal.skipped:
        lines.append(f"  # the kernel fits no cell of {reason}")
    if proposal.excluded:
        lines += ["", "exclude:                       # PyPI has no torch for these pairs "
                  "(add torch-index under cuda: to build them)"]
        lines += [f"  - {{torch: \"{torch}\", cuda: \"{cuda}\"}}"
                  for torch, cuda in proposal.excluded]
    return _stable_note(lines, spec)


def _stable_note(lines: list[str], spec: KernelSpec) -> str:
    if spec.torch is not None and spec.torch.stable_abi_for("cuda") is not None:
        lines += ["", "# The kernel declares torch's stable ABI: each CUDA version gets one "
                  "wheel that serves",
                  "# every torch release from the one it names (see stable-label)."]
    return "\n".join(lines) + "\n"


def render_workflow(matrix: str, commit: str, release: str) -> str:
    """A caller of the factory's reusable workflow for the matrix at `matrix` (relative to
    the repo root): wheels on every push to main, every Monday, and on demand. It pins the
    workflow by `commit`, naming the `release` in a comment."""
    return f"""\
# Wheels for every cell of {matrix}, published to GitHub Pages (written by `factory init`).
name: wheels
on:
  push:
    branches: [main]
  schedule:
    - cron: "17 4 * * 1"
  workflow_dispatch:  # the run form builds the cell these name (blank: any)
    inputs: {{kernel: {{}}, torch: {{}}, cuda: {{}}, python: {{}}}}
permissions: {{contents: read, pages: write, id-token: write}}
jobs:
  wheels:
    uses: {defaults.WORKFLOW_REPOSITORY}/.github/workflows/kernel-wheels.yml@{commit}  # {release}
    with:
      matrix: {matrix}
"""
