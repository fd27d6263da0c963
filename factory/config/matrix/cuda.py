"""matrix.yaml's cuda: each CUDA version with its SMs, or follow: torch."""

from __future__ import annotations

from pathlib import Path

from ... import defaults
from ...policy import CudaPolicy, cuda_policies, cuda_policy, cuda_releases, known_sms
from ...policy.capabilities import Capability, check_supported
from ...values.versions import Version, major_minor, parse_release
from ..model import CudaEntry, FollowCuda
from ..nodes import Node
from .fields import local_folder, nonempty_list, read_torch_index

__all__ = ["read_cuda_entries", "read_follow"]


def read_follow(node: Node) -> FollowCuda:
    """cuda: {follow: torch, sms: [...], ptx: true}."""
    fields = node.table(["follow", "sms", "ptx"], required=["follow"])
    if fields["follow"].str() != "torch":
        raise fields["follow"].error("the only thing CUDA versions can follow is torch "
                                     "(follow: torch)")
    sms = None
    if "sms" in fields:
        sms = []
        for item in nonempty_list(fields["sms"]):
            text = item.scalar_text()
            try:
                capability = Capability.parse(text)
            except ValueError as exc:
                raise item.error(str(exc)) from None
            if capability.variant or capability.ptx or not capability.is_known:
                raise item.error(f"'{text}' is not an SM like 9.0 (known: "
                                 f"{', '.join(str(sm) for sm in known_sms())})")
            sms.append(capability.base)
    return FollowCuda(tuple(sms) if sms is not None else None,
                      fields["ptx"].bool() if "ptx" in fields else defaults.PTX_FOR_NEWEST_SM,
                      node.line)


def read_cuda_entries(node: Node, base: Path) -> tuple[CudaEntry, ...]:
    if not isinstance(node.value, dict):
        raise node.error("expected a table of CUDA versions, e.g.  "
                         "cuda: {\"13.0\": {sms: [\"9.0\"]}}")
    entries: list[CudaEntry] = []
    for text, item in node.mapping().items():
        try:
            version = parse_release(text)
        except ValueError as exc:
            raise item.error(str(exc)) from None
        if len(version.release) < 2:
            raise item.error(f"give CUDA as major.minor (e.g. 13.0), got '{version}'")
        policy = cuda_policy(version)
        if policy is None:
            oldest = cuda_policies()[0].since
            raise item.error(f"CUDA {version} is too old: the factory builds with CUDA {oldest} "
                             "and newer")
        if major_minor(version) not in cuda_releases():
            known = cuda_releases()
            raise item.error(f"CUDA {version} is not a CUDA release the factory knows (known: "
                             f"{', '.join(str(release) for release in known)})")
        if any(major_minor(entry.version) == major_minor(version) for entry in entries):
            raise item.error(f"CUDA {major_minor(version)} is listed twice")
        settings = {} if item.value is None else item.table(["sms", "ptx", "home", "torch-index"])
        sms = policy.default
        if "sms" in settings:
            sms = _sms(settings["sms"], policy, version)
        home = None
        if "home" in settings:
            home = local_folder(settings["home"], settings["home"].nonempty_str(), base)
            if not (home / "bin" / "nvcc").is_file():
                raise settings["home"].error(f"no CUDA toolkit at '{settings['home'].str()}' "
                                             "(expected bin/nvcc there)")
        index = read_torch_index(settings["torch-index"]) if "torch-index" in settings else None
        entries.append(CudaEntry(version, tuple(sms),
                                 settings["ptx"].bool() if "ptx" in settings
                                 else defaults.PTX_FOR_NEWEST_SM,
                                 home, index, item.line))
    if not entries:
        raise node.error("must list at least one CUDA version")
    return tuple(entries)


def _sms(node: Node, policy: CudaPolicy, cuda: Version) -> tuple[Version, ...]:
    sms: list[Version] = []
    for item in nonempty_list(node):
        text = item.scalar_text()
        try:
            capability = Capability.parse(text)
        except ValueError as exc:
            raise item.error(str(exc)) from None
        if capability.ptx:
            raise item.error(f"'{text}': PTX is added for the newest SM of the list by itself "
                             "(set ptx: false to leave it out)")
        if capability.variant:
            raise item.error(f"'{text}': arch- and family-specific variants belong in a kernel's "
                             "cuda-capabilities; list plain SMs here")
        problem = check_supported(capability, policy, cuda)
        if problem:
            raise item.error(problem)
        if capability.base in sms:
            raise item.error(f"SM {capability.base} is listed twice")
        sms.append(capability.base)
    return tuple(sorted(sms))
