"""Small wheels and indexes made on the fly, and what a reader of an index could trip over."""

from __future__ import annotations

import hashlib
import json
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urljoin

from packaging.tags import parse_tag

from factory.index.update import update_index
from factory.wheel.assemble import CoreMetadata, write_wheel
from factory.wheel.inspect import Abi3Verdict, SharedObject, WheelReport
from factory.wheel.read import WheelFile


def make_wheel(files: Path, name: str, version: str, tag: str = "cp39-abi3-linux_x86_64",
               requires_python: str = ">=3.9", payload: str = "") -> Path:
    """A small valid wheel, as the factory writes them."""
    content = files.parent.parent / "wheel-content" / f"{name}-{version}"
    package = content / name.replace("-", "_")
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text(f"VERSION = {version!r}\n{payload}")
    metadata = CoreMetadata(name, version, f"{name} test wheel", requires_python,
                            ("torch",), "MIT", None)
    return write_wheel(content, files, metadata, tag, False, EPOCH)


class Links(HTMLParser):
    """Every <a> of a page, and the repository-version meta tag."""

    def __init__(self) -> None:
        super().__init__()
        self.anchors: list[dict[str, str | None]] = []
        self.meta: dict[str, str | None] = {}
        self.texts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.anchors.append(dict(attrs))
        if tag == "meta":
            attributes = dict(attrs)
            self.meta[attributes.get("name") or ""] = attributes.get("content")

    def handle_data(self, data: str) -> None:
        if self.anchors and data.strip():
            self.texts.append(data.strip())


def parse(path: Path) -> Links:
    links = Links()
    links.feed(path.read_text())
    return links


def check_page_links(out: Path, page: Path) -> list[str]:
    """Each file an HTML project page links: present, with the sha256 the link names, and its
    .metadata with the hash the data attributes name."""
    problems = []
    base = "file://" + str(page.parent) + "/"
    for anchor in parse(page).anchors:
        url, _, fragment = str(anchor["href"]).partition("#sha256=")
        target = Path(unquote(urljoin(base, url).removeprefix("file://")))
        if not target.is_file():
            problems.append(f"{page}: links missing {target}")
            continue
        if hashlib.sha256(target.read_bytes()).hexdigest() != fragment:
            problems.append(f"{page}: hash of {target.name} does not match")
        metadata = target.with_name(target.name + ".metadata")
        expected = (anchor.get("data-core-metadata") or "").removeprefix("sha256=")
        if not metadata.is_file() or hashlib.sha256(metadata.read_bytes()).hexdigest() != expected:
            problems.append(f"{page}: metadata of {target.name} missing or wrong")
    return problems


def check_json_links(page: Path) -> list[str]:
    problems = []
    for entry in json.loads(page.read_text())["files"]:
        target = Path(unquote(urljoin("file://" + str(page.parent) + "/", entry["url"])
                              .removeprefix("file://")))
        if not target.is_file():
            problems.append(f"{page}: links missing {target}")
        elif hashlib.sha256(target.read_bytes()).hexdigest() != entry["hashes"]["sha256"]:
            problems.append(f"{page}: hash of {target.name} does not match")
    return problems


def index_problems(out: Path) -> list[str]:
    """What a reader could trip over: a page that does not parse, a link to a missing file or
    one with the wrong hash, a root page linking a project whose pages are not there."""
    problems = []
    for page in out.rglob("index.*"):
        if page.parent == out or page.parent.name == "simple" or page.suffix not in (
                ".html", ".json") or ".factory" in page.parts:
            continue
        try:
            problems += (check_page_links(out, page) if page.suffix == ".html"
                         else check_json_links(page))
        except (OSError, ValueError, KeyError) as exc:
            problems.append(f"{page}: {exc!r}")
    for root in out.rglob("simple/index.html"):
        for anchor in parse(root).anchors:
            for name in ("index.html", "index.json"):
                if not (root.parent / unquote(str(anchor["href"])) / name).is_file():
                    problems.append(f"{root} links {anchor['href']}, which has no {name}")
    return problems


def small_index_files(out: Path) -> Path:
    """files/ of a small index: two cells of one kernel, a kernel of one cell, a pure-Python
    kernel."""
    files = out / "files"
    files.mkdir(parents=True)
    make_wheel(files, "img2gray", "1.0.0+cu130torch211")
    make_wheel(files, "img2gray", "1.0.0+cu130torch212")
    make_wheel(files, "Tiny_RMS", "0.2.0+cu130torch211", requires_python=">=3.9,<4")
    make_wheel(files, "noarch-kernel", "2.0.0", tag="py3-none-any")
    return out


EPOCH = 1767225600  # 2026-01-01


METADATA = CoreMetadata(name="tinygrad-rms", version="1.2.0+cu130torch211", summary="a kernel",
                        requires_python=">=3.9", requires=("torch==2.11.*", "einops"),
                        license="MIT", readme="# tinygrad-rms\n")


def indexed_with_a_log(out: Path) -> Path:
    """A small index with its pages, and a build log (which must stay home)."""
    small_index_files(out)
    update_index(out)
    (out / "logs").mkdir()
    (out / "logs" / "img2gray-cu130torch211-x86_64.log").write_text("nvcc ...\n")
    return out


NAME = "img2gray-1.0.0+cu130torch211-cp39-abi3-manylinux_2_28_x86_64.whl"
SO = SharedObject(
    path="img2gray/_img2gray_abcdef0.abi3.so", arch="x86_64", sass=("sm_80", "sm_90"),
    ptx=("compute_90",), needed=("libc10.so", "libtorch.so", "libcudart.so.13", "libc.so.6"),
    runpaths=(), symbol_versions={"GLIBC": "2.17"}, manylinux="manylinux_2_17",
    manylinux_glibc=(2, 17), abi3=Abi3Verdict(True, "3.9", "3.9", (), ()))


def report(name: str = NAME, **changes: Any) -> WheelReport:
    wheel = WheelFile(filename=name, name="img2gray", version="1.0.0+cu130torch211",
                      label="cu130torch211", tags=parse_tag(name[:-4].split("-", 2)[2]),
                      sha256="0" * 64, size=1, metadata=b"Name: img2gray\n", provenance=None)
    fields: dict[str, Any] = {"wheel": wheel, "metadata_name": "img2gray",
              "metadata_version": "1.0.0+cu130torch211", "requires_python": ">=3.9",
              "requires": ("torch==2.11.*",), "torch_requirement": "==2.11.*",
              "wheel_tags": ("cp39-abi3-manylinux_2_28_x86_64",), "files": (SO.path,),
              "record_problems": (), "shared_objects": (SO,), "kernel_metadata": None}
    return WheelReport(**(fields | changes))


GPU_FACTS: dict[str, Any] = {
             "python": "3.12.3", "implementation": "cpython", "abi": "cp312", "platform": "linux",
             "machine": "x86_64", "glibc": "2.39",
             "torch": {"version": "2.11.0+cu130", "cuda": "13.0", "cxx11_abi": True},
             "driver": {"cuda": "13.0", "gpus": [{"name": "NVIDIA H100 80GB HBM3", "sm": "9.0"}]}}


WHEEL: dict[str, Any] = {
         "filename": "img2gray-1.0.0+cu130torch211-cp39-abi3-manylinux_2_34_x86_64.whl",
         "torch": "==2.11.*", "gpu_code": ["compute_90", "sm_90"]}


CELL: dict[str, Any] = {"cuda": "13.0"}
