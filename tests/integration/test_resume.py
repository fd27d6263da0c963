"""Builds that always finish, with real compilers, on a kernel of nine small units
(tests/fixtures/many-units): a build killed half way resumes with only the missing units, a
changed file recompiles its unit alone, a damaged cache entry is compiled again, builds sharing
the object cache at once both succeed, the time limit stops compiling cleanly, and three shard
jobs plus a link give the wheel one build gives."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest

from factory.compile.pool import grace_for
from factory.outputs.files import file_sha256
from factory.pipeline.options import object_key
from factory.trust.keys import object_cache_key, sign

from ..support.factory import cache_env, run_factory, write
from ..support.plans import many_units_project as project

pytestmark = pytest.mark.slow

BINDING = "torch-ext/torch_binding.cpp"
UNITS = {BINDING, *(f"csrc/part{n}.cu" for n in range(8))}
CELL = "many-units/cu130torch211/x86_64"




def build_args(folder: Path, out: str, objects: Path, *more: str | Path) -> list[str | Path]:
    return ["build", folder / "matrix.yaml", "--out", folder / out, "--object-cache", objects,
            *more]


def log_of(folder: Path, out: str) -> str:
    (log,) = (folder / out / "logs").glob("*.log")
    return log.read_text()


def units(log: str, how: str) -> set[str]:
    """The units a build log says were compiled ("compiled") or taken from the cache."""
    pattern = r"^   (\S+): compiled in .*kept in the object cache$" if how == "compiled" \
        else r"^   (\S+): from the object cache$"
    return set(re.findall(pattern, log, re.M))


def wheel_sha(folder: Path, out: str) -> str:
    (wheel,) = (folder / out / "files").glob("*.whl")
    return file_sha256(wheel)


def shared_object(folder: Path, out: str) -> str:
    """The name of the wheel's shared object: <op namespace>.abi3.so."""
    (wheel,) = (folder / out / "files").glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".abi3.so")]
    return name


@pytest.fixture(scope="module")
def cold(tmp_path_factory: pytest.TempPathFactory, factory_cache: Path) -> tuple[Path, str]:
    """One build of the fixture from an empty object cache: its folder, wheel and objects."""
    folder = tmp_path_factory.mktemp("cold")
    project(folder)
    result = run_factory(*build_args(folder, "out", folder / "objects"),
                         env=cache_env(factory_cache))
    assert result.exit == 0, result.stdout + result.stderr
    log = log_of(folder, "out")
    assert units(log, "compiled") == UNITS and "compiling 9 of 9 unit(s), 0 from" in log
    assert "units: 9 compiled, 0 from the object cache" in result.stdout
    return folder, wheel_sha(folder, "out")


def warm_copy(cold_folder: Path, folder: Path) -> Path:
    """A project whose object cache holds the cold build's objects."""
    project(folder)
    shutil.copytree(cold_folder / "objects", folder / "objects")
    return folder / "objects"


def test_a_build_killed_half_way_resumes_with_only_the_missing_units(tmp_path: Path,
        cold: tuple[Path, str], factory_cache: Path) -> None:
    _, expected = cold
    project(tmp_path)
    objects = tmp_path / "objects"
    argv = [sys.executable, "-m", "factory",
            *map(str, build_args(tmp_path, "first", objects, "--jobs", "1"))]
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               env={**cache_env(factory_cache), "PATH": "/usr/bin:/bin"})
    logs = tmp_path / "first" / "logs"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and process.poll() is None:
        found = list(logs.glob("*.log")) if logs.is_dir() else []
        if found and len(units(found[0].read_text(), "compiled")) >= 4:
            process.send_signal(signal.SIGKILL)
            break
        time.sleep(0.05)
    process.wait()
    assert process.returncode == -signal.SIGKILL, "the build ended before it could be killed"
    done = units(log_of(tmp_path, "first"), "compiled")
    assert 4 <= len(done) < 9

    again = run_factory(*build_args(tmp_path, "second", objects),
                        env=cache_env(factory_cache))
    assert again.exit == 0, again.stdout + again.stderr
    log = log_of(tmp_path, "second")
    assert units(log, "cached") == done
    assert units(log, "compiled") == UNITS - done
    assert f"compiling {9 - len(done)} of 9 unit(s), {len(done)} from the object cache" in log
    assert wheel_sha(tmp_path, "second") == expected


def planned(folder: Path, objects: Path, factory_cache: Path) -> dict[str, Any]:
    """What `factory plan` says of the cell: its units, those the object cache holds, and
    what is left to compile."""
    done = run_factory("plan", folder / "matrix.yaml", "--object-cache", objects,
                       env=cache_env(factory_cache))
    assert done.exit == 0, done.stderr
    cell: dict[str, Any] = json.loads(done.stdout)["cells"][CELL]
    return cell


def test_changing_one_file_recompiles_that_unit_alone(tmp_path: Path, cold: tuple[Path, str],
                                                      factory_cache: Path) -> None:
    cold_folder, expected = cold
    objects = warm_copy(cold_folder, tmp_path)
    held = planned(tmp_path, objects, factory_cache)
    assert set(held["held"]) == UNITS and held["left"] == {"units": 0, "core_seconds": 0}
    unchanged = run_factory(*build_args(tmp_path, "out", objects), env=cache_env(factory_cache))
    assert unchanged.exit == 0 and wheel_sha(tmp_path, "out") == expected
    assert units(log_of(tmp_path, "out"), "cached") == UNITS
    assert "units: 0 compiled, 9 from the object cache" in unchanged.stdout

    part = tmp_path / "many-units" / "csrc" / "part3.cu"
    os.utime(part, (time.time(), time.time()))  # touched, the same bytes: nothing to compile
    touched = run_factory(*build_args(tmp_path, "touched", objects),
                          env=cache_env(factory_cache))
    assert touched.exit == 0 and units(log_of(tmp_path, "touched"), "cached") == UNITS

    part.write_text(part.read_text() + "// a change\n")
    # the plan foresees what the build below compiles
    held = planned(tmp_path, objects, factory_cache)
    assert set(held["held"]) == UNITS - {"csrc/part3.cu", BINDING}
    assert held["left"]["units"] == 2 and held["units"] == 9
    changed = run_factory(*build_args(tmp_path, "changed", objects),
                          env=cache_env(factory_cache))
    assert changed.exit == 0, changed.stdout + changed.stderr
    log = log_of(tmp_path, "changed")
    # the changed unit, and the binding: the op namespace it registers (and the object
    # carries) is made from the source's revision, which the change made new
    assert units(log, "compiled") == {"csrc/part3.cu", BINDING}
    assert units(log, "cached") == UNITS - {"csrc/part3.cu", BINDING}
    assert shared_object(tmp_path, "changed") != shared_object(tmp_path, "out")


def test_a_damaged_object_is_compiled_again_never_linked(tmp_path: Path, cold: tuple[Path, str],
                                                         factory_cache: Path) -> None:
    cold_folder, expected = cold
    objects = warm_copy(cold_folder, tmp_path)
    records = {json.loads(path.read_text())["source"]: path
               for path in (objects / "objects").glob("*/*.json")}
    damaged = records["csrc/part5.cu"].with_suffix(".o")
    data = bytearray(damaged.read_bytes())
    data[len(data) // 2] ^= 0xFF
    damaged.write_bytes(bytes(data))
    result = run_factory(*build_args(tmp_path, "out", objects), env=cache_env(factory_cache))
    assert result.exit == 0, result.stdout + result.stderr
    log = log_of(tmp_path, "out")
    assert "object cache: the entry" in log and "was damaged (sha256" in log
    assert units(log, "compiled") == {"csrc/part5.cu"}
    assert wheel_sha(tmp_path, "out") == expected


def test_builds_sharing_the_object_cache_at_once_all_succeed(tmp_path: Path, cold: tuple[Path, str],
        factory_cache: Path) -> None:
    """Three builds at once into one object cache: two of the cell in its usual build folder
    (one waits for the other's folder, then finds every object) and one in another folder
    (nvcc's objects depend on the folder: its entries are its own)."""
    _, expected = cold
    project(tmp_path)
    objects = tmp_path / "objects"
    roots = {"out1": [], "out2": [], "out3": ["--build-root", str(tmp_path / "elsewhere")]}
    runs = {out: subprocess.Popen([sys.executable, "-m", "factory",
                                   *map(str, build_args(tmp_path, out, objects, *more))],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  env={**cache_env(factory_cache), "PATH": "/usr/bin:/bin"})
            for out, more in roots.items()}
    outputs = {out: run.communicate(timeout=600)[0] for out, run in runs.items()}
    assert {out: run.returncode for out, run in runs.items()} == dict.fromkeys(roots, 0), outputs
    compiled = {out: units(log_of(tmp_path, out), "compiled") for out in roots}
    assert len(compiled["out1"]) + len(compiled["out2"]) == 9
    assert compiled["out3"] == UNITS
    assert wheel_sha(tmp_path, "out1") == wheel_sha(tmp_path, "out2") == expected


def test_the_time_limit_stops_compiling_and_the_next_build_continues(tmp_path: Path,
        cold: tuple[Path, str], factory_cache: Path) -> None:
    _, expected = cold
    project(tmp_path)
    objects = tmp_path / "objects"
    started = time.monotonic()
    limited = run_factory(*build_args(tmp_path, "out", objects, "--jobs", "1",
                                      "--time-limit", "4"), env=cache_env(factory_cache))
    assert limited.exit == 1 and time.monotonic() - started < 60
    assert "stopped at the time limit with" in limited.stdout, limited.stdout
    kept = units(log_of(tmp_path, "out"), "compiled")
    assert len(kept) < 9
    resumed = run_factory(*build_args(tmp_path, "out", objects), env=cache_env(factory_cache))
    assert resumed.exit == 0, resumed.stdout + resumed.stderr
    assert units(log_of(tmp_path, "out"), "compiled") == UNITS - kept
    assert wheel_sha(tmp_path, "out") == expected


def test_a_cost_book_kept_with_the_matrix_starts_nothing_that_cannot_finish(tmp_path: Path,
        cold: tuple[Path, str], factory_cache: Path) -> None:
    """A fresh machine with an empty object cache, and the matrix's own cost book (measured
    on a machine a thousand times slower): no unit's estimate fits a one-minute limit, so none
    starts and nothing is discarded."""
    folder, _ = cold
    project(tmp_path)
    measured = json.loads((folder / "objects" / "costs" / "many-units.json").read_text())
    assert len(measured) == 9
    slow = {key: {**cost, "seconds": cost["seconds"] * 1000} for key, cost in measured.items()}
    (tmp_path / "costs").mkdir()
    (tmp_path / "costs" / "many-units.json").write_text(json.dumps(slow))
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(matrix.read_text() + "costs: costs\n")
    started = time.monotonic()
    limited = run_factory(*build_args(tmp_path, "out", tmp_path / "fresh", "--jobs", "1",
                                      "--time-limit", "60"), env=cache_env(factory_cache))
    assert limited.exit == 1 and time.monotonic() - started < 60
    assert "stopped at the time limit with 0 of 9 unit(s) in the object cache (9 not started, " \
           "9 of them because their estimates end after the limit; 0.0 unit-minutes " \
           "discarded)" in " ".join(limited.stdout.split()), limited.stdout
    assert units(log_of(tmp_path, "out"), "compiled") == set()


def test_a_unit_stopped_at_the_time_limit_is_not_started_again_with_as_little_time(
        tmp_path: Path, cold: tuple[Path, str], factory_cache: Path) -> None:
    """The matrix's book says every unit takes a thousandth of a second, and the host compiler
    (a wrapper on PATH) takes 20 s more for each of the kernel's files: the first unit starts,
    runs past the limit and its grace and is stopped. The book keeps that it takes longer, so
    the same build again does not start it; once compiled, its measurement replaces the
    bound."""
    folder, _ = cold
    project(tmp_path)
    measured = json.loads((folder / "objects" / "costs" / "many-units.json").read_text())
    quick = {key: {**cost, "seconds": 0.001} for key, cost in measured.items()}
    (tmp_path / "costs").mkdir()
    (tmp_path / "costs" / "many-units.json").write_text(json.dumps(quick))
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(matrix.read_text() + "costs: costs\n")
    real = shutil.which("g++")
    assert real is not None
    write(tmp_path / "slow" / "g++", f"""
        #!/bin/sh
        case "$*" in *" -c "*many-units*) sleep 20;; esac
        exec {real} "$@"
    """)
    (tmp_path / "slow" / "g++").chmod(0o755)
    slow = {**cache_env(factory_cache), "PATH": f"{tmp_path / 'slow'}:{os.environ['PATH']}"}
    objects = tmp_path / "objects"
    limit = ("--jobs", "1", "--time-limit", "10")
    first = run_factory(*build_args(tmp_path, "out", objects, *limit), env=slow)
    assert first.exit == 1, first.stdout + first.stderr
    stopped = re.findall(r"^   (\S+): stopped at the time limit after (\d+) core-seconds; the "
                         r"cost book keeps that it takes longer$", log_of(tmp_path, "out"), re.M)
    assert len(stopped) == 1, log_of(tmp_path, "out")[-3000:]
    ((source, seconds),) = stopped
    book = json.loads((objects / "costs" / "many-units.json").read_text())
    bound = book[next(key for key in book if key.endswith(f"/{source}"))]
    # It started before the limit (no unit starts after it) and was stopped when the grace
    # past the limit ended: it ran for the grace at least, however late the machine's load
    # let it start; the book keeps what it ran.
    assert bound["at_least"] is True and bound["seconds"] >= grace_for(10)
    assert int(seconds) == round(bound["seconds"])

    again = run_factory(*build_args(tmp_path, "out", objects, *limit), env=slow)
    assert again.exit == 1, again.stdout + again.stderr
    log = log_of(tmp_path, "out")
    assert f"   {source}: not started, its estimate" in log, log[-3000:]
    assert f"   {source}: stopped at the time limit" not in log

    done = run_factory(*build_args(tmp_path, "out", objects), env=cache_env(factory_cache))
    assert done.exit == 0, done.stdout + done.stderr
    book = json.loads((objects / "costs" / "many-units.json").read_text())
    assert not [key for key, cost in book.items() if cost.get("at_least")]


def poison(store: Path, victim: str, donor: str, signed: bool = True) -> None:
    """Replace the object of unit `victim` by `donor`'s and hash its record again. `signed`:
    its mac made again too, as only a holder of the object cache's key can (a leaked CI
    secret): an entry that passes every check but a compile."""
    records = {json.loads(path.read_text())["source"]: path
               for path in (store / "objects").glob("*/*.json")}
    target = records[victim]
    data = json.loads(target.read_text())
    donor_object = records[donor].with_suffix(".o").read_bytes()
    target.with_suffix(".o").write_bytes(donor_object)
    data |= {"size": len(donor_object), "sha256": hashlib.sha256(donor_object).hexdigest()}
    if signed:
        data["mac"] = sign(object_cache_key(object_key()), target.stem, data["identity"],
                           data["size"], data["sha256"])
    target.write_text(json.dumps(data))


VICTIM, DONOR = "csrc/part5.cu", "csrc/part4.cu"


def test_an_entry_written_without_the_key_is_compiled_again(tmp_path: Path, cold: tuple[Path, str],
                                                            factory_cache: Path) -> None:
    """Anyone who can write the cache folder, but holds no key: the entry is not taken."""
    folder, expected = cold
    objects = warm_copy(folder, tmp_path)
    poison(objects, VICTIM, DONOR, signed=False)
    result = run_factory(*build_args(tmp_path, "out", objects), env=cache_env(factory_cache))
    assert result.exit == 0, result.stdout + result.stderr
    log = log_of(tmp_path, "out")
    assert "was not written under this cache's key (an entry made by another user, machine " \
           "or key); removed, the unit is compiled again" in log
    assert units(log, "compiled") == {VICTIM}
    assert wheel_sha(tmp_path, "out") == expected


def test_a_poisoned_cached_object_is_caught_before_publishing(tmp_path: Path,
        cold: tuple[Path, str], factory_cache: Path) -> None:
    folder, _ = cold
    objects = warm_copy(folder, tmp_path)
    poison(objects, VICTIM, DONOR)
    result = run_factory(*build_args(tmp_path, "out", objects, "--verify-objects", "1"),
                         env=cache_env(factory_cache))
    assert result.exit == 1
    assert f"{VICTIM}: the object cache gave an object that differs from the one compiled " \
           "again from the same inputs" in " ".join(result.stdout.split()), result.stdout
    assert not list((tmp_path / "out" / "files").glob("*.whl"))


def test_a_poisoned_imported_object_is_caught_by_default(tmp_path: Path, cold: tuple[Path, str],
                                                         factory_cache: Path) -> None:
    """A shard artifact from elsewhere whose one object is another unit's, its record hashed
    again: the import takes it (its hash matches its record), the build compiles it again."""
    folder, expected = cold
    objects = warm_copy(folder, tmp_path)
    artifact = tmp_path / "artifact"
    shutil.copytree(objects, artifact)
    poison(artifact, VICTIM, DONOR)
    for record in (objects / "objects").glob("*/*.json"):  # this machine lacks the victim
        if json.loads(record.read_text())["source"] == VICTIM:
            record.unlink()
            record.with_suffix(".o").unlink()
    result = run_factory(*build_args(tmp_path, "out", objects, "--import-objects", artifact),
                         env=cache_env(factory_cache))
    assert result.exit == 1
    assert "objects: took in 1 from" in result.stdout
    assert f"{VICTIM}: the object cache gave an object that differs" in \
        " ".join(result.stdout.split()), result.stdout
    assert not list((tmp_path / "out" / "files").glob("*.whl"))
    again = run_factory(*build_args(tmp_path, "out", objects), env=cache_env(factory_cache))
    assert again.exit == 0 and wheel_sha(tmp_path, "out") == expected  # the entry was replaced


def test_three_shard_jobs_and_a_link_give_the_unsplit_wheel(tmp_path: Path, cold: tuple[Path, str],
                                                            factory_cache: Path) -> None:
    _, expected = cold
    project(tmp_path)
    plan = run_factory("plan", tmp_path / "matrix.yaml", "--split-after", "60", "--cores", "4",
                       "--object-cache", tmp_path / "no-costs-yet")
    assert plan.exit == 0, plan.stderr
    (shards,) = [json.loads(plan.stdout)["shards"]]
    assert [shard["shard"] for shard in shards] == ["1/3", "2/3", "3/3"]
    assert {shard["cell"] for shard in shards} == {CELL}
    seen: set[str] = set()
    for shard in shards:  # each on a "machine" of its own: its own object cache
        number = shard["shard"][0]
        result = run_factory(*build_args(tmp_path, f"shard{number}",
                                         tmp_path / f"machine{number}",
                                         "--job", shard["job"], "--only", shard["cell"],
                                         "--unit-shard", shard["shard"], "--export-objects",
                                         tmp_path / shard["artifact"]),
                             env=cache_env(factory_cache))
        assert result.exit == 0, result.stdout + result.stderr
        compiled = units(log_of(tmp_path, f"shard{number}"), "compiled")
        assert len(compiled) == 3 and not compiled & seen
        seen |= compiled
        assert not list((tmp_path / f"shard{number}" / "files").glob("*.whl"))  # no link
    assert seen == UNITS
    # each shard's measurements travel in its artifact, to the job that links
    assert all(len(json.loads((tmp_path / shard["artifact"] / "costs" / "many-units.json")
                              .read_text())) == 3 for shard in shards)
    imports = [str(arg) for shard in shards
               for arg in ("--import-objects", tmp_path / shard["artifact"])]
    link = run_factory(*build_args(tmp_path, "link", tmp_path / "linker", *imports),
                       env=cache_env(factory_cache))
    assert link.exit == 0, link.stdout + link.stderr
    assert "objects: took in 3 from" in link.stdout
    assert "; 3 unit cost(s) for the cost book" in link.stdout
    assert len(json.loads((tmp_path / "linker" / "costs" / "many-units.json")
                          .read_text())) == 9
    # every object came from another machine: a share of them (at least one) is compiled
    # again and compared before anything is linked
    link_log = log_of(tmp_path, "link")
    assert "compiling 1 of 9 unit(s), 8 from the object cache" in link_log
    assert "compiled again, the same bytes as the object cache's" in link_log
    assert wheel_sha(tmp_path, "link") == expected
