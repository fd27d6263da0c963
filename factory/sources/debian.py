"""Packages of Debian's archive, unpacked into a root folder only once the archive's own
signature vouches for them (the root of a cross-compiled cell: toolchain/emulated.py).

The chain is apt's: the suite's InRelease is verified by gpgv (the verifier apt itself runs)
against the archive's keys, a signature counting only when its key's primary fingerprint is
one factory/data/debian.toml names; the suite's Packages.xz must have the size and SHA-256 the
signed text gives; each .deb must have the size and SHA-256 that index gives. Every download is
bounded in time and size, the index's decompression too; an unpacked member that would land
outside the root, or a link that would lead out of it, is refused. An absolute link is made
relative to the root, as the emulator reads it (its -L folder stands for /).
"""

from __future__ import annotations

import hashlib
import lzma
import os
import tarfile
import tempfile
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from .. import defaults
from ..errors import BuildError
from ..system.machine import DEBIAN_KEYRING_VARIABLE, DEBIAN_MIRROR_VARIABLE, Machine
from ..system.process import NotStarted, ProcessError, bounded_run
from ..trust.safety import leaves_root
from ..values.units import human_size

if TYPE_CHECKING:  # imported where used: a plan without cross cells reads no archive
    import requests

__all__ = ["Archive", "DEBIAN_KEYRING_VARIABLE", "DEBIAN_MIRROR_VARIABLE", "debian_archive",
           "unpack_packages"]

_INRELEASE_LIMIT = 16 * 2**20  # bookworm's is 150 KiB
_GPGV_TIMEOUT = 60


@dataclass(frozen=True)
class Archive:
    """A Debian archive and how its suite's signature is checked."""

    url: str
    suite: str
    keyring: Path
    # the primary keys whose signature counts; None: every key of the keyring (one the user
    # named for an archive of their own)
    fingerprints: frozenset[str] | None


def debian_archive(machine: Machine) -> Archive:
    """Debian's archive (factory/data/debian.toml), or the mirror and keyring the machine
    names."""
    with resources.as_file(resources.files("factory.data").joinpath("debian.toml")) as path:
        table = tomllib.loads(path.read_text())
    url = machine.debian_mirror or table["url"]
    keyring = machine.debian_keyring
    if keyring is not None:
        if not keyring.is_file():
            raise BuildError(f"${DEBIAN_KEYRING_VARIABLE} names {keyring}, which is not a file")
        return Archive(url.rstrip("/"), table["suite"], keyring, None)
    found = next((Path(name) for name in table["keyrings"] if Path(name).is_file()), None)
    if found is None:
        raise BuildError(f"checking Debian's archive needs its keys ({table['keyrings'][0]} is "
                         "missing): apt-get install debian-archive-keyring")
    return Archive(url.rstrip("/"), table["suite"], found,
                   frozenset(key["fingerprint"] for key in table["key"]))


def unpack_packages(archive: Archive, arch: str, names: Iterable[str],
                    root: Path) -> list[str]:
    """Unpack the packages `names` of the suite's main component for `arch` into `root`, each
    checked back to the suite's signature; "package version" of each."""
    import requests

    with requests.Session() as session:
        release = _signed_release(session, archive)
        paragraphs = _packages(session, archive, release, arch, list(names))
        for paragraph in paragraphs:
            _unpack(session, archive, paragraph, root)
    return [f"{paragraph['Package']} {paragraph['Version']}" for paragraph in paragraphs]


def _signed_release(session: requests.Session, archive: Archive) -> str:
    """The suite's InRelease, as the text its signature covers (gpgv's output, never the file
    read apart from it), once a trusted key has signed it."""
    url = f"{archive.url}/dists/{archive.suite}/InRelease"
    signed = _get(session, url, _INRELEASE_LIMIT)
    with tempfile.TemporaryDirectory(prefix="kwf-debian-") as scratch:
        given, text = Path(scratch) / "InRelease", Path(scratch) / "Release"
        given.write_bytes(signed)
        try:
            result = bounded_run(["gpgv", "--keyring", str(archive.keyring), "--status-fd", "1",
                                  "--output", str(text), str(given)], _GPGV_TIMEOUT)
        except NotStarted:
            raise BuildError("checking Debian's archive needs gpgv (apt-get install gpgv)") \
                from None
        except ProcessError:
            raise BuildError(f"gpgv did not check {url} in {_GPGV_TIMEOUT} s") from None
        signers = _good_signers(result.stdout)
        trusted = signers if archive.fingerprints is None else signers & archive.fingerprints
        if result.returncode != 0 or not trusted or not text.is_file():
            whose = (f"keys {', '.join(sorted(signers))}, none of them Debian's archive keys "
                     "in factory/data/debian.toml" if signers else "no key of "
                     f"{archive.keyring}")
            raise BuildError(f"{url} is not signed by the archive: a good signature by {whose}; "
                             "nothing was unpacked")
        return text.read_text(errors="replace")


def _good_signers(status: str) -> set[str]:
    """The primary fingerprints of the keys gpgv's status lines call good and valid: a
    GOODSIG (not an expired or revoked key's) whose VALIDSIG names the primary key last."""
    good, valid = set(), {}
    for line in status.splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[:2] == ["[GNUPG:]", "GOODSIG"]:
            good.add(fields[2].upper())
        elif len(fields) >= 12 and fields[:2] == ["[GNUPG:]", "VALIDSIG"]:
            valid[fields[2].upper()] = fields[11].upper()
    return {primary for signing, primary in valid.items()
            if any(signing.endswith(key) for key in good)}


def _packages(session: requests.Session, archive: Archive, release: str, arch: str,
              names: list[str]) -> list[dict[str, str]]:
    """The index paragraphs of `names`, from a Packages.xz the signed release vouches for."""
    from debian.deb822 import Packages, Release

    fields = Release(release)
    if fields.get("Suite") != archive.suite and fields.get("Codename") != archive.suite:
        raise BuildError(f"{archive.url}'s signed release is of {fields.get('Codename')!r}, "
                         f"not {archive.suite}: nothing was unpacked")
    member = f"main/binary-{arch}/Packages.xz"
    listed = next((entry for entry in fields.get("SHA256", []) if entry["name"] == member), None)
    if listed is None:
        raise BuildError(f"{archive.url}'s signed release lists no {member}")
    url = f"{archive.url}/dists/{archive.suite}/{member}"
    compressed = _get(session, url, int(listed["size"]))
    _check(url, compressed, listed["sha256"], int(listed["size"]), "its signed release")
    text = _inflate(url, compressed, defaults.DEBIAN_INDEX_LIMIT).decode(errors="replace")
    wanted = set(names)
    found = {}
    for paragraph in Packages.iter_paragraphs(text.splitlines(keepends=True), use_apt_pkg=False):
        if paragraph.get("Package") in wanted and paragraph["Package"] not in found:
            found[paragraph["Package"]] = dict(paragraph)
    missing = sorted(wanted - set(found))
    if missing:
        raise BuildError(f"Debian {archive.suite} {arch} has no package {', '.join(missing)} "
                         f"({url})")
    return [found[name] for name in names]


def _inflate(url: str, data: bytes, limit: int) -> bytes:
    """`data` decompressed, refused once it would pass `limit` bytes."""
    inflater = lzma.LZMADecompressor()
    try:
        text = inflater.decompress(data, max_length=limit + 1)
    except lzma.LZMAError as exc:
        raise BuildError(f"{url} is not an xz file ({exc})") from None
    if len(text) > limit or not inflater.eof:
        raise BuildError(f"{url} inflates past {human_size(limit)} (or ends early): no index "
                         "of a suite is that big; nothing was unpacked")
    return text


def _unpack(session: requests.Session, archive: Archive, paragraph: dict[str, str],
            root: Path) -> None:
    from debian.debfile import DebError, DebFile

    where = PurePosixPath(paragraph.get("Filename", ""))
    if leaves_root(str(where)) or not where.parts:
        raise BuildError(f"Debian's index gives {paragraph['Package']} the file name "
                         f"{str(where)!r}, outside the archive; nothing was unpacked")
    url = f"{archive.url}/{where}"
    size = int(paragraph["Size"])
    data = _get(session, url, size)
    _check(url, data, paragraph["SHA256"], size, "the signed index")
    with tempfile.NamedTemporaryFile(suffix=".deb") as handle:
        handle.write(data)
        handle.flush()
        try:
            with DebFile(handle.name).data.tgz() as members:
                members.extractall(root, filter=_inside(root, url))
        except (DebError, OSError, ValueError, tarfile.TarError) as exc:
            raise BuildError(f"{url} cannot be unpacked into {root}: "
                             f"{type(exc).__name__}: {exc}") from None


def _inside(root: Path, url: str):  # type: ignore[no-untyped-def]
    """tarfile's "data" filter (nothing lands outside `root`, no link leads out of it, no
    device files), with an absolute link first made relative to the root: the emulator reads
    /usr/lib/x inside the root, and the host must too."""
    def check(member: tarfile.TarInfo, destination: str) -> tarfile.TarInfo:
        if member.issym() and member.linkname.startswith("/"):
            name = member.name[2:] if member.name.startswith("./") else member.name
            here = PurePosixPath(name).parent
            relative = os.path.relpath(member.linkname.lstrip("/") or ".", here.as_posix())
            member = member.replace(linkname=relative, deep=False)
        try:
            return tarfile.data_filter(member, destination)
        except tarfile.FilterError as exc:
            raise BuildError(f"{url} holds {member.name!r}, which would reach outside the root "
                             f"folder ({type(exc).__name__}); nothing of it is used") from None

    return check


def _check(url: str, data: bytes, sha256: str, size: int, by: str) -> None:
    if len(data) != size or hashlib.sha256(data).hexdigest() != sha256.lower():
        raise BuildError(f"{url} does not have the size and SHA-256 {by} gives it; nothing "
                         "was unpacked")


def _get(session: requests.Session, url: str, limit: int) -> bytes:
    """`url`'s body, within defaults.DEBIAN_DEADLINE and at most `limit` bytes."""
    import requests

    from .http import Overrun, read_body, within

    def fetch() -> bytes:
        with session.get(url, stream=True, timeout=defaults.DOWNLOAD_TIMEOUT) as response:
            response.raise_for_status()
            return read_body(response, limit, "the archive's signed index gives it less")

    try:
        return within(defaults.DEBIAN_DEADLINE, fetch, url)
    except Overrun as exc:
        raise BuildError(str(exc)) from None
    except requests.RequestException as exc:
        raise BuildError(f"cannot fetch {url} ({type(exc).__name__}: "
                         f"{' '.join(str(exc).split())[:200]})") from None
