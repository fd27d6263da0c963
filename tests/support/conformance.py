"""A build.toml as the `kernels` loader's own parser reads it (kernels 0.17's Rust core:
`kernels._rust.Build`), beside the factory's reading: whether each takes the file, and for a
file both take, the backends and each backend's kernel dependencies.

`python -m tests.support.conformance FOLDER...` compares every build.toml below the folders (a
checkout of kernels-community, kernels' examples) and prints one line per file and a count;
the suite runs the same comparison on the build.toml files it keeps.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from factory.config.buildtoml import read_build_toml
from factory.errors import ConfigError

# kernel-builder's documentation spells [torch-noarch]'s arch keys in kebab-case; the loader's
# parser takes only the snake_case its code reads. The factory takes both.
DOCUMENTED = ("Unknown field cuda-capabilities", "Unknown field rocm-archs")


@dataclass(frozen=True)
class Reading:
    """What one parser made of a build.toml: None where it refused it (then `refusal`)."""

    backends: tuple[str, ...] | None
    depends: dict[str, tuple[str, ...]]  # backend -> "repo-id@version" or "repo-id#revision"
    refusal: str = ""
    dialect: int | None = None  # the factory's: which of kernel-builder's formats it is


@dataclass(frozen=True)
class Comparison:
    folder: Path
    kernels: Reading
    factory: Reading

    @property
    def legacy(self) -> bool:
        """A format kernels 0.17 no longer reads (kernel-builder's first two, with no
        backends), which the factory still builds as written; or a key in the spelling
        kernel-builder's documentation gives, which the loader's parser does not take."""
        return self.kernels.backends is None and self.factory.backends is not None and (
            (self.factory.dialect or 0) <= 2 or
            any(words in self.kernels.refusal for words in DOCUMENTED))

    @property
    def differences(self) -> list[str]:
        theirs, ours = self.kernels, self.factory
        if theirs.backends is None or ours.backends is None:
            if self.legacy and ours.backends is not None:
                return []
            if (theirs.backends is None) != (ours.backends is None):
                return [f"kernels {'refuses' if theirs.backends is None else 'takes'} it "
                        f"({theirs.refusal or 'read'}), the factory "
                        f"{'refuses' if ours.backends is None else 'takes'} it "
                        f"({ours.refusal or 'read'})"]
            return []
        found = []
        if sorted(theirs.backends) != sorted(ours.backends):
            found.append(f"backends: kernels {sorted(theirs.backends)}, factory "
                         f"{sorted(ours.backends)}")
        for backend in sorted(set(theirs.backends)):
            if sorted(theirs.depends.get(backend, ())) != sorted(ours.depends.get(backend, ())):
                found.append(f"kernel-depends of {backend}: kernels "
                             f"{sorted(theirs.depends.get(backend, ()))}, factory "
                             f"{sorted(ours.depends.get(backend, ()))}")
        return found


def kernels_reading(folder: Path) -> Reading:
    from kernels._rust import Build  # the loader's own parser

    try:
        build = Build.open(folder)
    except ValueError as exc:
        return Reading(None, {}, str(exc).splitlines()[0])
    backends = tuple(str(backend).lower() for backend in build.general.backends)
    depends = {}
    for backend in build.general.backends:
        named = []
        for depend in build.all_kernel_depends(backend):
            version = depend.version
            named.append(f"{depend.repo_id}@{version.version}" if hasattr(version, "version")
                         else f"{depend.repo_id}#{version.revision}")
        depends[str(backend).lower()] = tuple(named)
    return Reading(backends, depends)


def factory_reading(folder: Path) -> Reading:
    try:
        spec = read_build_toml(folder)
    except ConfigError as exc:
        return Reading(None, {}, str(exc))
    depends = {backend: tuple(f"{depend.repo_id}@{depend.version}" if depend.version is not None
                              else f"{depend.repo_id}#{depend.revision}"
                              for depend in spec.kernel_depends_for(backend))
               for backend in spec.backends}
    return Reading(tuple(spec.backends), depends, dialect=spec.dialect)


def compare(folder: Path) -> Comparison:
    return Comparison(folder, kernels_reading(folder), factory_reading(folder))


def main(folders: list[str]) -> int:
    compared = [compare(path.parent) for folder in folders
                for path in sorted(Path(folder).rglob("build.toml"))]
    differing = 0
    for each in compared:
        differences = each.differences
        differing += bool(differences)
        state = "differs: " + "; ".join(differences) if differences else \
            "an older format or the documented spelling (kernels refuses it, the factory " \
            "reads it)" if each.legacy else \
            "both refuse it" if each.factory.backends is None else "same"
        print(f"{each.folder}: {state}")
    legacy = sum(each.legacy for each in compared)
    print(f"{len(compared)} build.toml: {len(compared) - differing} read alike "
          f"({legacy} of them refused by kernels 0.17 as an older format or for the "
          f"documented spelling), {differing} differ")
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
