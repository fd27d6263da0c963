"""Bad input through the `factory` command, run in-process: one line naming file, line and key,
exit status 2, and nothing written (the output folder stays byte for byte as it was, no cache
is made)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ..support.cli import GOOD_KERNEL, GOOD_MATRIX, SOURCES, assert_rejected
from ..support.factory import Result, make_kernel, snapshot, write

STABLE_KERNEL = GOOD_KERNEL.replace(
    '[kernel.demo]', '[torch.stable-abi]\ncuda = "2.11"\n\n[kernel.demo]').replace(
    "[general]", "[general]\nedition = 5")


def matrix_with(old: str, new: str) -> str:
    assert old in GOOD_MATRIX
    return GOOD_MATRIX.replace(old, new)


def kernel_with(old: str, new: str) -> str:
    assert old in GOOD_KERNEL
    return GOOD_KERNEL.replace(old, new)


CASES = {
    "broken YAML": (
        matrix_with('torch: ["2.11"]', 'torch: ["2.11"'), GOOD_KERNEL,
        "matrix.yaml:5: invalid YAML"),
    "unknown matrix key": (
        matrix_with("torch:", "torches:"), GOOD_KERNEL,
        "matrix.yaml:4: torches: unknown key (did you mean 'torch'?)"),
    "wrong type": (
        matrix_with('torch: ["2.11"]', 'torch: "2.11"'), GOOD_KERNEL,
        "matrix.yaml:4: torch: expected a list, got a string '2.11'"),
    "bad version string": (
        matrix_with('torch: ["2.11"]', 'torch: ["2.x"]'), GOOD_KERNEL,
        "matrix.yaml:4: torch[0]: '2.x' is not a version"),
    "torch that does not exist": (
        matrix_with('torch: ["2.11"]', 'torch: ["2.99"]'), GOOD_KERNEL,
        "matrix.yaml:4: torch[0]: torch 2.99 is not a PyTorch release the factory knows"),
    "sm_70 with CUDA 13": (
        matrix_with('sms: ["9.0"]', 'sms: ["7.0", "9.0"]'), GOOD_KERNEL,
        "matrix.yaml:7: cuda.13.0.sms[0]: CUDA 13.0 cannot compile for sm_70"),
    "empty SM list": (
        matrix_with('sms: ["9.0"]', "sms: []"), GOOD_KERNEL,
        "matrix.yaml:7: cuda.13.0.sms: must not be empty"),
    "unknown SM": (
        matrix_with('sms: ["9.0"]', 'sms: ["9.5"]'), GOOD_KERNEL,
        "matrix.yaml:7: cuda.13.0.sms[0]: CUDA 13.0 cannot compile for sm_95"),
    "CUDA too old": (
        matrix_with('"13.0":', '"11.8":'), GOOD_KERNEL,
        "matrix.yaml:6: cuda.11.8: CUDA 11.8 is too old"),
    "missing kernel folder": (
        matrix_with("path: demo", "path: nowhere"), GOOD_KERNEL,
        "matrix.yaml:2: kernels[0].path: kernel folder 'nowhere' does not exist"),
    "two source kinds": (
        matrix_with("path: demo", "path: demo\n    git: https://example.com/k.git"), GOOD_KERNEL,
        "matrix.yaml:2: kernels[0]: give exactly one of path: (a folder), git: (a repository "
        "URL) or hub: (a Hugging Face repo id), not path and git"),
    "git key on a hub source": (
        matrix_with("path: demo", "hub: org/demo\n    rev: v1"), GOOD_KERNEL,
        "matrix.yaml:3: kernels[0].rev: 'rev' belongs to git sources; a hub source takes "
        "revision, subdir, version"),
    "subdir outside the repo": (
        matrix_with("path: demo", "git: https://example.com/k.git\n    subdir: ../etc"),
        GOOD_KERNEL, "matrix.yaml:3: kernels[0].subdir: '../etc' must be a folder inside the "
        "repository"),
    "bad hub repo id": (
        matrix_with("path: demo", "hub: just-a-name"), GOOD_KERNEL,
        "matrix.yaml:2: kernels[0].hub: 'just-a-name' is not a Hugging Face repo id"),
    "bad git URL": (
        matrix_with("path: demo", "git: ftp://example.com/k.git"), GOOD_KERNEL,
        "matrix.yaml:2: kernels[0].git: 'ftp://example.com/k.git' is not a git URL"),
    "token in a git URL": (
        matrix_with("path: demo", "git: https://me:ghp_secret@example.com/k.git"), GOOD_KERNEL,
        "matrix.yaml:2: kernels[0].git: 'https://***@example.com/k.git' holds a password"),
    "bad git rev": (
        matrix_with("path: demo", "git: https://example.com/k.git\n    rev: main..dev"),
        GOOD_KERNEL, "matrix.yaml:3: kernels[0].rev: 'main..dev' is not a branch, tag or "
        "commit name"),
    "bad wheel version": (
        matrix_with("version: 1.0.0", "version: 1.0.0+cu130"), GOOD_KERNEL,
        "matrix.yaml:3: kernels[0].version: '1.0.0+cu130' has a local label"),
    "duplicate key": (
        GOOD_MATRIX + 'torch: ["2.12"]\n', GOOD_KERNEL,
        "matrix.yaml:8: torch: duplicate key"),
    "label placeholder": (
        GOOD_MATRIX + 'label: "cu{cuda}pt{pytorch}"\n', GOOD_KERNEL,
        "matrix.yaml:8: label: unknown placeholder '{pytorch}'"),
    "label collision": (
        matrix_with('torch: ["2.11"]', 'torch: ["2.11", "2.12"]') + 'label: "cu{cuda}"\n',
        GOOD_KERNEL, "matrix.yaml:8: label: the label template gives 'cu130' both for"),
    "torch version without index-only": (
        matrix_with('torch: ["2.11"]', 'torch: ["2.11", {version: "2.16"}]'), GOOD_KERNEL,
        "matrix.yaml:4: torch[1]: missing required key 'index-only'"),
    "index-only false": (
        matrix_with('torch: ["2.11"]', 'torch: ["2.11", {version: "2.16", index-only: false}]'),
        GOOD_KERNEL, "matrix.yaml:4: torch[1].index-only: a torch entry with a version is "
        "index-only"),
    "index-only torch listed twice": (
        matrix_with('torch: ["2.11"]', 'torch: ["2.11", {version: "2.11", index-only: true}]'),
        GOOD_KERNEL, "matrix.yaml:4: torch[1].version: torch 2.11 is listed twice"),
    "stable label with the CUDA minor": (
        GOOD_MATRIX + 'stable-label: "cu{cuda}.stable"\n', STABLE_KERNEL,
        "matrix.yaml:8: stable-label: '{cuda}' has no single value for a stable-ABI wheel"),
    "stable label sorting above the per-torch labels": (
        GOOD_MATRIX + 'stable-label: "cu{cuda_major}stable{torch}"\n', STABLE_KERNEL,
        "matrix.yaml:8: stable-label: the stable-label template gives 'cu13stable211', which "
        "sorts above the per-torch label 'cu130torch211'"),
    "stable label that is a per-torch label": (
        GOOD_MATRIX + 'label: "cu{cuda_major}torch{torch}"\n'
        'stable-label: "cu{cuda_major}torch{torch}"\n', STABLE_KERNEL,
        "matrix.yaml:9: stable-label: the stable-label template gives 'cu13torch211', a "
        "per-torch cell's label too"),
    "unknown compression": (
        GOOD_MATRIX + "compress: zstd\n", GOOD_KERNEL,
        "matrix.yaml:8: compress: unknown GPU code compression 'zstd' (known: size, balance, "
        "speed, none)"),
    "unknown compression of a kernel": (
        matrix_with("version: 1.0.0", "version: 1.0.0\n    compress: fast"), GOOD_KERNEL,
        "matrix.yaml:4: kernels[0].compress: unknown GPU code compression 'fast'"),
    "chosen tests outside tests/": (
        matrix_with("version: 1.0.0", "version: 1.0.0\n    tests: {paths: [../secret.py]}"),
        GOOD_KERNEL, "matrix.yaml:4: kernels[0].tests.paths[0]: '../secret.py' must be a path "
                     "inside the kernel's tests/ folder, relative to it"),
    "chosen tests that are an option": (
        matrix_with("version: 1.0.0", "version: 1.0.0\n    tests: {paths: [--pdb]}"),
        GOOD_KERNEL, "matrix.yaml:4: kernels[0].tests.paths[0]: '--pdb' is not a path or pytest "
                     "node id inside tests/"),
    "test keyword of two lines": (
        matrix_with("version: 1.0.0", 'version: 1.0.0\n    tests: {keyword: "a\\nb"}'),
        GOOD_KERNEL, "matrix.yaml:4: kernels[0].tests.keyword: the expression must be one line "
                     "of printable text"),
    "test timeout that is no duration": (
        matrix_with("version: 1.0.0", "version: 1.0.0\n    tests: {timeout: soon}"),
        GOOD_KERNEL, "matrix.yaml:4: kernels[0].tests.timeout: 'soon' is not a duration (e.g. "
                     "5h30m, 330m, 90s, 19800)"),
    "test requirement that is a URL": (
        matrix_with("version: 1.0.0", "version: 1.0.0\n    tests: {requires: "
                                      "['einops @ https://example.com/e.whl']}"),
        GOOD_KERNEL, "matrix.yaml:4: kernels[0].tests.requires[0]: name a project on the index, "
                     "not a URL"),
    "unknown key of tests": (
        matrix_with("version: 1.0.0", "version: 1.0.0\n    tests: {path: [a.py]}"),
        GOOD_KERNEL, "matrix.yaml:4: kernels[0].tests.path: unknown key (did you mean 'paths'?)"),
    "wheel size limit that is no size": (
        GOOD_MATRIX + "max-wheel-size: huge\n", GOOD_KERNEL,
        "matrix.yaml:8: max-wheel-size: 'huge' is not a size (e.g. 7G, 7.5GiB, 4096M), or one "
        "of pypi, github-release"),
    "cost book that is no folder": (
        GOOD_MATRIX + "costs: measured/\n", GOOD_KERNEL,
        "matrix.yaml:8: costs: 'measured/' is not a folder (a cost book: the <kernel>.json files "
        "of costs/ in an object cache, or of an --export-objects folder)"),
    "object store that is no store": (
        GOOD_MATRIX + "object-store: ftp://objects.example/cache\n", GOOD_KERNEL,
        "matrix.yaml:8: object-store: the object store's URL is not an object store: "
        "s3://BUCKET/PREFIX or redis://HOST:PORT/DB"),
    "object store with its password in the matrix": (
        GOOD_MATRIX + "object-store: redis://:hunter2@objects.example:6379/0\n", GOOD_KERNEL,
        "matrix.yaml:8: object-store: the object store's URL holds a password: give the "
        "store's URL with its password in $KERNEL_WHEEL_FACTORY_OBJECT_STORE (a secret), not "
        "here"),
    "exclude matching nothing": (
        GOOD_MATRIX + 'exclude:\n  - {torch: "2.12"}\n', GOOD_KERNEL,
        "matrix.yaml:9: exclude[0]: this exclude entry matches no cell"),
    "torch-index not a URL": (
        matrix_with('sms: ["9.0"]', 'sms: ["9.0"]\n    torch-index: download.pytorch.org'),
        GOOD_KERNEL, "matrix.yaml:8: cuda.13.0.torch-index: 'download.pytorch.org' is not"),
    "CUDA home without nvcc": (
        matrix_with('sms: ["9.0"]', 'sms: ["9.0"]\n    home: demo'), GOOD_KERNEL,
        "matrix.yaml:8: cuda.13.0.home: no CUDA toolkit at 'demo'"),
    "unknown runner": (
        GOOD_MATRIX + "runner: podman\n", GOOD_KERNEL,
        "matrix.yaml:8: runner: unknown runner 'podman' (known: local, docker, auto)"),
    "bad builder base": (
        GOOD_MATRIX + 'docker: {base: "Not An Image"}\n', GOOD_KERNEL,
        "matrix.yaml:8: docker.base: 'Not An Image' is not an image reference"),
    "unknown docker key": (
        GOOD_MATRIX + "docker: {image: debian}\n", GOOD_KERNEL,
        "matrix.yaml:8: docker.image: unknown key"),
    "broken TOML": (
        GOOD_MATRIX, kernel_with("[torch]", "[torch"),
        "demo/build.toml:7: invalid TOML"),
    "unknown build.toml key": (
        GOOD_MATRIX, kernel_with('src = ["csrc/demo.cu"]', 'sources = ["csrc/demo.cu"]'),
        "demo/build.toml:13: kernel.demo.sources: unknown key"),
    "missing src file": (
        GOOD_MATRIX, kernel_with('"csrc/demo.cu"', '"csrc/gone.cu"'),
        "demo/build.toml:13: kernel.demo.src[0]: file 'csrc/gone.cu' does not exist"),
    "src outside the repo": (
        GOOD_MATRIX, kernel_with('"csrc/demo.cu"', '"../../etc/passwd"'),
        "demo/build.toml:13: kernel.demo.src[0]: '../../etc/passwd' must be a path inside the "
        "kernel repo"),
    "include folder outside the repo": (
        GOOD_MATRIX, kernel_with('src = ["csrc/demo.cu"]', 'src = ["csrc/demo.cu"]\n'
                                 'include = ["csrc/../.."]'),
        "demo/build.toml:14: kernel.demo.include[0]: 'csrc/../..' must be a path inside the "
        "kernel repo"),
    "build.toml wrong type": (
        GOOD_MATRIX, kernel_with('src = ["csrc/demo.cu"]', 'src = "csrc/demo.cu"'),
        "demo/build.toml:13: kernel.demo.src: expected a list"),
    "build.toml missing key": (
        GOOD_MATRIX, kernel_with('depends = ["torch"]\n', ""),
        "demo/build.toml:10: kernel.demo: missing required key 'depends'"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input(project: Path, factory: Callable[..., Result], case: Any) -> None:
    matrix, build_toml, expected = CASES[case]
    make_kernel(project / "demo", build_toml, SOURCES, package="demo")
    write(project / "matrix.yaml", matrix)
    before = snapshot(project / "index")
    assert_rejected(project, factory("build", "matrix.yaml"), expected, before)


@pytest.mark.parametrize("args, expected", [
    (["build", "matrix.yaml", "--jobs", "0"], "argument --jobs: must be at least 1, got 0"),
    (["build", "matrix.yaml", "--verify-objects", "2"],
     "argument --verify-objects: '2' must be between 0 and 1 (0% and 100%)"),
    (["build", "matrix.yaml", "--verify-objects", "nan"],
     "argument --verify-objects: 'nan' must be between 0 and 1"),
    (["build", "matrix.yaml", "--verify-objects", "some"],
     "argument --verify-objects: 'some' is not a share (e.g. 0.1 or 10%)"),
    (["build", "matrix.yaml", "--jobs", "two"], "argument --jobs: 'two' is not a whole number"),
    (["build", "matrix.yaml", "--colour"], "unrecognized arguments: --colour"),
    (["build", "matrix.yaml", "--max-wheel-size", "lots"],
     "argument --max-wheel-size: 'lots' is not a size"),
    (["index", "--site-limit", "0"], "argument --site-limit: '0' is not a usable size"),
    (["build"], "the following arguments are required: MATRIX"),
    (["bild", "matrix.yaml"], "invalid choice: 'bild'"),
    (["build", "missing.yaml"], "missing.yaml: file not found"),
    (["build", "matrix.yaml", "--only", "nothing/*"],
     "--only: 'nothing/*' matches no cell (cells: demo/cu130torch211/"),
    (["build", "matrix.yaml", "--out", "matrix.yaml"],
     "matrix.yaml: --out: exists and is not a folder"),
    (["build", "matrix.yaml", "--build-root", "build"],
     "build: --build-root: must be an absolute path"),
    (["build", "matrix.yaml", "--build-root", "/proc/version/build"],
     "/proc/version/build: --build-root: cannot be made (Not a directory); pass --build-root DIR"),
    (["build", "matrix.yaml", "--runner", "podman"], "argument --runner: invalid choice: 'podman'"),
    (["build", "matrix.yaml", "--memory", "lots"],
     "argument --memory: 'lots' is not a size (e.g. 7G, 7.5GiB, 4096M)"),
    (["build", "matrix.yaml", "--memory", "0G"], "argument --memory: '0G' is not a usable size"),
    (["build", "matrix.yaml", "--time-limit", "soon"],
     "argument --time-limit: 'soon' is not a duration (e.g. 5h30m, 330m, 90s, 19800)"),
    (["build", "matrix.yaml", "--time-limit", "0"],
     "argument --time-limit: '0' must be between 1 second and a year"),
    (["build", "matrix.yaml", "--unit-shard", "4/3"],
     "argument --unit-shard: '4/3' is not a shard I/N with 1 <= I <= N <= 10000 (e.g. 1/4)"),
    (["build", "matrix.yaml", "--unit-shard", "1/99999999999999999999"],
     "argument --unit-shard: '1/99999999999999999999' is not a shard I/N with 1 <= I <= N <= "
     "10000"),
    (["build", "matrix.yaml", "--memory", "9" * 400], "is not a usable size"),
    (["build", "matrix.yaml", "--import-objects", "nowhere"],
     "nowhere: --import-objects: is not a folder (give a folder --export-objects wrote)"),
    (["build", "matrix.yaml", "--import-objects", "demo"],
     "demo: --import-objects: holds no objects (give a folder --export-objects wrote)"),
    (["build", "matrix.yaml", "--object-store", "redis://:hunter2@objects.example/0"],
     "argument --object-store: the URL holds a password: give the store's URL with its "
     "password in $KERNEL_WHEEL_FACTORY_OBJECT_STORE (a secret), not here"),
    (["build", "matrix.yaml", "--object-store", "s3://AKIAEXAMPLE:s3cretkey@bucket/objects"],
     "argument --object-store: the URL holds credentials: an s3:// store takes boto3's own "
     "(AWS_ACCESS_KEY_ID, ~/.aws), never the URL's"),
    (["build", "matrix.yaml", "--object-store", "s3://My_Bucket/objects"],
     "argument --object-store: the URL names no S3 bucket ('My_Bucket')"),
    (["build", "matrix.yaml", "--object-store", "/srv/objects"],
     "argument --object-store: the URL is not an object store"),
    (["build", "matrix.yaml", "--object-cache", "matrix.yaml"],
     "matrix.yaml: --object-cache: exists and is not a folder"),
    (["plan", "matrix.yaml", "--split-after", "4 hours"],
     "argument --split-after: '4 hours' is not a duration"),
    (["images"], "the following arguments are required: MATRIX"),
    (["inspect"], "the following arguments are required: WHEEL"),
    (["inspect", "matrix.yaml"], "matrix.yaml: not a .whl file"),
    (["inspect", "--json", "gone-1.0-py3-none-any.whl"],
     "gone-1.0-py3-none-any.whl: no such wheel"),
    (["verify", "matrix.yaml", "--build-root", "/tmp/x"], "matrix.yaml: not a .whl file"),
])
def test_bad_arguments(project: Path, factory: Callable[..., Result], args: Any,
                       expected: str) -> None:
    make_kernel(project / "demo", GOOD_KERNEL, SOURCES, package="demo")
    write(project / "matrix.yaml", GOOD_MATRIX)
    before = snapshot(project / "index")
    assert_rejected(project, factory(*args), expected, before)


@pytest.mark.parametrize("where", ["--runner", "matrix"])
def test_docker_runner_without_a_daemon(project: Path, factory: Callable[..., Result],
                                        where: str) -> None:
    make_kernel(project / "demo", GOOD_KERNEL, SOURCES, package="demo")
    write(project / "matrix.yaml", GOOD_MATRIX + ("runner: docker\n" if where == "matrix" else ""))
    before = snapshot(project / "index")
    args = ["--runner", "docker"] if where == "--runner" else []
    result = factory("build", "matrix.yaml", *args,
                     env={"DOCKER_HOST": "unix:///nonexistent.sock"})
    assert_rejected(project, result, "runner: the docker runner cannot be used: no docker daemon "
                    "answers (", before)


def test_chosen_tests_outside_the_tests_folder(project: Path,
                                              factory: Callable[..., Result]) -> None:
    """Said before anything is built (a long build would end with pytest finding nothing), with
    the path to write where the matrix gave it from the repository's root."""
    make_kernel(project / "demo", GOOD_KERNEL, SOURCES, package="demo")
    write(project / "demo" / "tests" / "test_demo.py", "def test_demo():\n    pass\n")
    before = snapshot(project / "index")
    for chosen, expected in (
            ("tests/test_demo.py::test_demo",
             "matrix.yaml:2: kernels[0].tests.paths: 'tests/test_demo.py::test_demo' is not in "
             "the kernel's tests/ folder: paths are relative to tests/, so write "
             "'test_demo.py::test_demo'"),
            ("../setup.py", "'../setup.py' must be a path inside the kernel's tests/ folder"),
            ("test_other.py", "kernels[0].tests.paths: 'test_other.py' is not in the kernel's "
                              "tests/ folder")):
        write(project / "matrix.yaml", GOOD_MATRIX.replace(
            "version: 1.0.0", f"version: 1.0.0\n    tests: {{paths: ['{chosen}']}}"))
        assert_rejected(project, factory("build", "matrix.yaml", "--test"), expected, before)
