"""`factory attest MATRIX`: sign the published wheels (PEP 740), or check their attestations."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console

from .. import defaults
from ..outputs.layout import writable_folder
from .common import cache_dir, path_argument

__all__ = ["add", "run"]


def add(commands: Any) -> None:
    command = commands.add_parser(
        "attest", help="sign the published wheels (PEP 740), or check them",
        description="Sign each wheel in --out that has no provenance file yet with the OIDC "
                    "identity of this CI job (GitHub Actions: a job with permissions: id-token: "
                    "write), as MATRIX's publisher: key pins it, and write <wheel>.provenance "
                    "(linked from the index's pages) and <wheel>.publish.attestation (which "
                    "twine uploads). With no identity, nothing is signed and one line says so. "
                    "--check checks every wheel's attestations offline against the pinned "
                    "publisher instead.")
    command.add_argument("matrix", type=path_argument, metavar="MATRIX")
    command.add_argument("--out", type=path_argument, default=defaults.OUT,
                         help=f"output folder (default: {defaults.OUT})")
    command.add_argument("--url", default=None, metavar="URL",
                         help="where the index is served (https://HOST/PATH/): its pages link "
                              "each provenance file by full URL there, as PEP 740 asks")
    command.add_argument("--check", action="store_true",
                         help="check the attestations offline instead of signing")
    command.add_argument("--cache-dir", type=path_argument, default=None, metavar="DIR",
                         help="where sigstore's trust root is kept (default: the factory's "
                              "cache)")


def run(args: argparse.Namespace, console: Console) -> int:
    from ..pipeline.attest import AttestRequest, attest_outputs, check_outputs

    request = AttestRequest(args.matrix, args.out, cache_dir(args), args.url)
    if args.url is not None or not args.check:
        writable_folder(args.out, "--out", must_exist=True)
    if args.check:
        lines, refused = check_outputs(request)
        for line in lines:
            console.print(line, markup=False, soft_wrap=True)
        return 1 if refused else 0
    summary = attest_outputs(request,
                             lambda line: console.print(line, markup=False, soft_wrap=True))
    console.print(summary.describe(), markup=False, soft_wrap=True)
    return 0
