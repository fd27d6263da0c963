"""Free-threaded CPython (3.14t): the matrix's value for it, what the doctor says of a wheel
for the other build, and the import gate's verdict when a module turns the GIL back on."""

from __future__ import annotations

import pytest

from factory import doctor
from factory.prove.load import LoadReport, load_problems
from factory.values.pythons import CPython

from ..support.wheels import CELL, GPU_FACTS, WHEEL


def test_a_cpython_is_written_as_the_matrix_writes_it_and_tagged_as_wheels_are() -> None:
    free = CPython.parse("3.14t")
    assert (str(free), free.series, free.interpreter_tag, free.abi_tag, free.describe()) == \
        ("3.14t", "3.14", "cp314", "cp314t", "free-threaded CPython 3.14t")
    plain = CPython.parse(" 3.14 ")
    assert (str(plain), plain.abi_tag, plain.describe()) == ("3.14", "cp314", "CPython 3.14")
    assert sorted([free, CPython.parse("3.15"), plain, CPython.parse("3.13t")]) == [
        CPython.parse("3.13t"), plain, free, CPython.parse("3.15")]
    assert str(CPython.parse("3.9")) == "3.9" and CPython.parse("3.10") > CPython.parse("3.9")


@pytest.mark.parametrize(("text", "expected"), [
    ("3.14x", "give a CPython as 3.N or, free-threaded, 3.Nt (e.g. 3.12, 3.14t), got '3.14x'"),
    ("3.14T", "got '3.14T'"), ("cp314t", "got 'cp314t'"), ("3.١٤", "got '3.١٤'"),
    ("3.12t", "CPython 3.12 has no free-threaded build (it starts with 3.13t)"),
])
def test_anything_else_is_refused_in_words(text: str, expected: str) -> None:
    with pytest.raises(ValueError) as raised:
        CPython.parse(text)
    assert expected in str(raised.value)


FREE = {**GPU_FACTS, "python": "3.14.4", "abi": "cp314t", "free_threaded": True}
PLAIN = {**GPU_FACTS, "python": "3.14.4", "abi": "cp314"}
FREE_WHEEL = {**WHEEL, "filename": "img2gray-1.0.0+cu132torch215-cp314-cp314t-"
                                   "manylinux_2_34_x86_64.whl",
              "torch": "==2.15.*"}


def test_the_doctor_matches_free_threaded_wheels_to_free_threaded_pythons() -> None:
    torch = {"version": "2.15.0+cu132", "cuda": "13.2", "cxx11_abi": True}
    driver = {"cuda": "13.2", "gpus": [{"name": "NVIDIA H100", "sm": "9.0"}]}
    free, plain = ({**facts, "torch": torch, "driver": driver} for facts in (FREE, PLAIN))
    cell = {**CELL, "cuda": "13.2"}
    abi3 = {**WHEEL, "filename": WHEEL["filename"].replace("torch211", "torch215"),
            "torch": "==2.15.*"}
    assert doctor.why_not(FREE_WHEEL, cell, free) == []
    assert doctor.why_not(abi3, cell, plain) == []
    assert doctor.why_not(FREE_WHEEL, cell, plain) == [
        "it is for a free-threaded CPython (cp314t), this is 3.14.4 with the GIL"]
    assert doctor.why_not(abi3, cell, free) == [
        "an abi3 wheel cannot be loaded by a free-threaded CPython (3.14.4t); it needs a "
        "cp314t wheel"]
    cp314 = {**abi3, "filename": abi3["filename"].replace("cp39-abi3", "cp314-cp314")}
    assert doctor.why_not(cp314, cell, free) == [
        "it is for CPython with the GIL (cp314), this is free-threaded 3.14.4t"]


def test_the_import_gate_fails_a_module_that_turns_the_gil_back_on_unless_declared() -> None:
    report = LoadReport("2.15.0+cu132", ("relu_scale",), (), free_threaded=True,
                        gil_enabled_by="relu_scale")
    (problem,) = load_problems(report)
    assert problem.startswith("import: loading relu_scale turned the GIL back on in "
                              "free-threaded CPython")
    assert "set needs-gil: true on the kernel in matrix.yaml" in problem
    assert load_problems(report, needs_gil=True) == []
    kept = LoadReport("2.15.0+cu132", ("img2gray",), (), free_threaded=True)
    assert load_problems(kept) == []
    assert LoadReport.from_json(report.to_json()) == report
    assert LoadReport.from_json(kept.to_json()) == kept
    assert "free_threaded" not in LoadReport("2.11.0", ("x",), ()).to_json()


def test_the_browse_page_shows_a_label_built_when_one_of_its_cells_is() -> None:
    """A label's cells (the abi3 one and a free-threaded one): built where any of them is,
    and the other that was skipped says why, in whichever order the build recorded them."""
    import json

    from factory.index.browse import browse_project
    from factory.index.records import CellOutcome

    built = CellOutcome("img2gray/cu132torch215/x86_64", "img2gray", "1.0.0", "2.15", "13.2",
                        "cu132torch215", "built", None, "img2gray-1.0.0+cu132torch215-cp39-"
                        "abi3-manylinux_2_34_x86_64.whl")
    skipped = CellOutcome("img2gray/cu132torch215/x86_64/cp315t", "img2gray", "1.0.0", "2.15",
                          "13.2", "cu132torch215", "skipped", "no free-threaded CPython 3.15t",
                          None)
    for order in ([built, skipped], [skipped, built]):
        (release,) = json.loads(browse_project("img2gray", [], order))["versions"]
        (cell,) = release["cells"]
        assert (cell["status"], cell["detail"]) == ("built", None)
        assert cell["others"] == [{"cell": skipped.cell, "status": "skipped",
                                   "detail": "no free-threaded CPython 3.15t"}]
