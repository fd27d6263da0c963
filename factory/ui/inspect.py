"""`factory inspect`: a wheel's report as tables for people, or as JSON for programs."""

from __future__ import annotations

from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from rich.console import Console
from rich.table import Table

from ..pipeline.inspect import Gated, Inspected, WheelOps
from ..values.units import human_size
from ..wheel.fatbin import describe_code_size
from ..wheel.inspect import REPORT_SCHEMA, WheelReport
from ..wheel.provenance import Provenance
from ..wheel.variant import property_lines

__all__ = ["print_report", "report_json"]


def report_json(inspected: list[Inspected]) -> dict[str, Any]:
    wheels = []
    for wheel in inspected:
        report, ops, digest = wheel.report, wheel.ops, wheel.gated
        entry = report.to_json()
        entry["problems"] = list(wheel.problems)
        if ops is not None:
            entry["ops"] = {"seen": ops.seen, "ops": [op.to_json() for op in ops.ops]}
        if digest is not None:
            entry["gated"] = {"cell": digest.cell, "sha256": digest.sha256,
                              "matches": digest.sha256 == report.sha256}
        wheels.append(entry)
    return {"schema": REPORT_SCHEMA, "wheels": wheels}


def print_report(wheel: Inspected, console: Console) -> None:
    """Print one wheel's report and the verdict pipeline/inspect.py came to."""
    report, ops, gated, problems = wheel.report, wheel.ops, wheel.gated, wheel.problems
    console.print(f"[bold]{report.file}[/bold]")
    console.print(_facts(report, gated))

    if report.shared_objects:
        table = Table(show_lines=False, pad_edge=False)
        for column in ("shared object", "GPU code", "DT_NEEDED", "symbols allow", "abi3"):
            table.add_column(column, overflow="fold")
        for so in report.shared_objects:
            versions = ", ".join(f"{family} {version}"
                                 for family, version in so.symbol_versions.items())
            code = "\n".join(describe_code_size(name, size) for name, size in so.gpu_sizes)
            table.add_row(f"{so.path}\n{human_size(so.size)}", code or "-",
                          "\n".join(so.needed) or "-", f"{so.manylinux}\n({versions})",
                          so.abi3.describe() if so.abi3 else "not an extension")
        console.print(table)

    _print_provenance(report.record, report.provenance, console)
    if ops is not None:
        _print_ops(ops, console)
    if problems:
        console.print(f"[red]checks: {len(problems)} problem(s)[/red]")
        for problem in problems:
            console.print(f"  - {problem}", markup=False)
    else:
        console.print("[green]checks: all passed[/green]")


def _facts(report: WheelReport, gated: Gated | None) -> Table:
    """The wheel's facts, one per row."""
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="dim")
    facts.add_column(overflow="fold")
    variant = report.wheel.variant
    label = f" (label {report.label})" if report.label and variant is None else ""
    facts.add_row("name", report.name)
    facts.add_row("version", f"{report.version}{label}")
    if variant is not None:
        facts.add_row("variant", f"{report.label} (PEP 825): " + ", ".join(
            property_lines(variant)))
    facts.add_row("tags", ", ".join(report.tags))
    facts.add_row("python", report.requires_python or "any")
    facts.add_row("torch", report.torch_requirement or "not required")
    others = [r for r in report.requires if not _names_torch(r)]
    if others:
        facts.add_row("requires", ", ".join(others))
    facts.add_row("size", f"{report.size:,} bytes ({human_size(report.size)}); "
                          f"{human_size(report.wheel.installed_size)} installed")
    facts.add_row("sha256", report.sha256)
    if gated is not None:
        facts.add_row("gated", f"sha256 {gated.sha256}, taken by cell {gated.cell} when it "
                               "packaged the wheel, before any of its code ran: "
                               + ("these bytes" if gated.sha256 == report.sha256 else
                                  "NOT these bytes"))
    if report.shared_objects:
        facts.add_row("SASS", " ".join(report.sass) or "none")
        facts.add_row("PTX", " ".join(report.ptx) or "none")
    return facts


def _print_ops(ops: WheelOps, console: Console) -> None:
    console.print(f"ops ({ops.seen}):", markup=False)
    if not ops.ops:
        console.print("  none registered")
        return
    table = Table(show_lines=False, pad_edge=False)
    for column in ("op", "kernels for", "torch.compile"):
        table.add_column(column, overflow="fold")
    for op in ops.ops:
        table.add_row(op.name, ", ".join(op.keys) or "-",
                      "ready (fake implementation)" if op.fake else
                      "[yellow]graph break: no fake implementation[/yellow]")
    console.print(table)


def _names_torch(requirement: str) -> bool:
    """Whether a Requires-Dist line is torch's own (torchao, torchvision are others)."""
    try:
        return canonicalize_name(Requirement(requirement).name) == "torch"
    except InvalidRequirement:
        return False


def _print_provenance(record: Provenance | None, raw: dict[str, Any] | None,
                      console: Console) -> None:
    if record is None:
        console.print("provenance: none recorded" if not raw else
                      "provenance: a record that is not of kernel-wheel-factory's schema")
        return
    source, cell, build = record.source, record.cell, record.build
    git = source.git
    git_text = (f", git {git.commit[:12]}{' with uncommitted changes' if git.dirty else ''}"
                if git else "")
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="dim")
    grid.add_column(overflow="fold")
    where = f"{source.kind} {source.location}"
    if source.subdir:
        where += f" ({source.subdir})"
    if source.revision:
        where += f" @ {source.revision}"
    grid.add_row("source", f"{where} (tree {source.tree_sha256[:12]}{git_text})")
    grid.add_row(record.kernel.project_file or "build.toml",
                 f"sha256 {record.kernel.build_toml_sha256}")
    if cell.get("torch"):
        python = f", CPython {cell['python']}" if cell.get("python") else ""
        stable = (f" (stable ABI {cell['stable_abi']}: serves torch{cell.get('torch_pin')})"
                  if cell.get("stable_abi") else "")
        grid.add_row("cell", f"{cell.get('id')}: torch {cell.get('torch')}{stable}, CUDA "
                             f"{cell.get('cuda')}, SMs {' '.join(cell.get('sms', []))}"
                             f"{' +PTX' if cell.get('ptx') else ''}, {cell.get('platform')}"
                             f"{python}")
    else:
        grid.add_row("cell", str(cell.get("id")))
    for path, codes in (record.gpu_code_found or {}).items():
        grid.add_row("GPU code", f"{path}: {' '.join(codes)} (as the project compiled it)")
    grid.add_row("toolchain", ", ".join(f"{name} {value}"
                                        for name, value in record.toolchain.items()))
    grid.add_row("factory", record.factory)
    where = f"in {build.root}"
    if build.builder:
        where += f" of a {build.builder} container"
    grid.add_row("built", f"{build.time} (source time), {where}")
    console.print("provenance:")
    console.print(grid)
