"""The root of a cross-compiled cell comes only from a Debian archive whose signature holds: a
stand-in archive is served here (its InRelease clear-signed by a key made for the test with
real gpg, its Packages.xz and .deb files made as Debian's tools make them), then tampered with
as a hostile mirror would. Every tampering ends with one line and nothing taken; the genuine
archive is unpacked, its absolute links kept inside the root."""

from __future__ import annotations

import gzip
import hashlib
import io
import lzma
import os
import re
import subprocess
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from factory import defaults
from factory.errors import BuildError
from factory.sources.debian import (
    DEBIAN_KEYRING_VARIABLE,
    DEBIAN_MIRROR_VARIABLE,
    debian_archive,
    unpack_packages,
)
from factory.system.machine import Machine, read_machine

from ..support.servers import static_server
from ..support.system import debian_package

SUITE = "bookworm"


def ar(members: dict[str, bytes]) -> bytes:
    """An ar archive, the container of a .deb (ar's common format: a 60-byte header per file)."""
    out = bytearray(b"!<arch>\n")
    for name, data in members.items():
        out += (f"{name + '/':<16}{0:<12}{0:<6}{0:<6}{0o100644:<8o}{len(data):<10}`\n").encode()
        out += data + (b"\n" if len(data) % 2 else b"")
    return bytes(out)


def tar_gz(members: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for info, data in members:
            archive.addfile(info, io.BytesIO(data) if data is not None else None)
    return buffer.getvalue()


def regular(name: str, data: bytes, mode: int = 0o644) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), mode
    return info, data


def link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info, None


def deb(package: str, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    control = tar_gz([regular("./control", f"Package: {package}\nVersion: 1.0\n"
                                           "Architecture: arm64\n".encode())])
    return ar({"debian-binary": b"2.0\n", "control.tar.gz": control,
               "data.tar.gz": tar_gz(members)})


@dataclass
class Mirror:
    root: Path  # what is served
    gnupg: Path
    keyring: Path  # the test key's public keyring, as a user of a private archive gives it
    debs: dict[str, bytes]

    def publish(self, *, sign: bool = True, index: bytes | None = None,
                filenames: dict[str, str] | None = None) -> None:
        """Write the archive: pool/ files, the suite's Packages.xz and its signed InRelease."""
        paragraphs = []
        for package, data in self.debs.items():
            filename = (filenames or {}).get(package, f"pool/main/{package}_1.0_arm64.deb")
            target = self.root / filename
            if ".." not in filename:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
            paragraphs.append(f"Package: {package}\nVersion: 1.0\nArchitecture: arm64\n"
                              f"Filename: {filename}\nSize: {len(data)}\n"
                              f"SHA256: {hashlib.sha256(data).hexdigest()}\n")
        packages = index if index is not None else lzma.compress("\n".join(paragraphs).encode())
        dists = self.root / "dists" / SUITE
        (dists / "main" / "binary-arm64").mkdir(parents=True, exist_ok=True)
        (dists / "main" / "binary-arm64" / "Packages.xz").write_bytes(packages)
        release = (f"Origin: Test\nSuite: stable\nCodename: {SUITE}\nSHA256:\n"
                   f" {hashlib.sha256(packages).hexdigest()} {len(packages)} "
                   "main/binary-arm64/Packages.xz\n")
        (dists / "Release").write_text(release)
        inrelease = dists / "InRelease"
        inrelease.unlink(missing_ok=True)
        if sign:
            gpg(self.gnupg, "--clearsign", "--output", str(inrelease), str(dists / "Release"))
        else:
            inrelease.write_text(release)


def debian_keyring() -> None:
    if not Path("/usr/share/keyrings/debian-archive-keyring.gpg").is_file():
        pytest.fail("this test needs Debian's archive keys: apt-get install "
                    "debian-archive-keyring")


def gpg(home: Path, *args: str) -> str:
    done = subprocess.run([debian_package("gpg", "gpg"), "--homedir", str(home), "--batch",
                           "--pinentry-mode", "loopback", "--passphrase", "", *args],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def new_key(home: Path, user: str) -> Path:
    """A signing key made in `home`; its public keyring, as gpgv reads it."""
    home.mkdir(mode=0o700)
    gpg(home, "--quick-gen-key", user, "ed25519", "sign", "1d")
    keyring = home / "public.gpg"
    gpg(home, "--output", str(keyring), "--export", user)
    return keyring


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path, Path]]:
    """The archive's key (its home and keyring) and a stranger's home; the agents gpg started
    for them are stopped after the module's tests."""
    folder = tmp_path_factory.mktemp("keys")
    keyring = new_key(folder / "archive", "Test Archive <archive@example.invalid>")
    new_key(folder / "stranger", "Stranger <stranger@example.invalid>")
    yield folder / "archive", keyring, folder / "stranger"
    for home in ("archive", "stranger"):
        subprocess.run([debian_package("gpg", "gpgconf"), "--homedir", str(folder / home),
                        "--kill", "gpg-agent"], capture_output=True, timeout=60, check=False)


GENUINE = {
    "libdemo1": [regular("./usr/lib/aarch64-linux-gnu/libdemo.so.1", b"\x7fELF demo"),
                 link("./usr/lib/aarch64-linux-gnu/libdemo.so", "libdemo.so.1")],
    # an absolute link, as some packages ship them: the root stands for /
    "demo-python": [regular("./usr/bin/python3.11", b"#!demo\n", 0o755),
                    link("./usr/bin/python3", "/usr/bin/python3.11")],
}


@pytest.fixture
def mirror(keys: tuple[Path, Path, Path], tmp_path: Path,
           monkeypatch: pytest.MonkeyPatch) -> Iterator[Mirror]:
    home, keyring, _ = keys
    served = tmp_path / "served"
    served.mkdir()
    with static_server(served) as url:
        monkeypatch.setenv(DEBIAN_MIRROR_VARIABLE, url)
        monkeypatch.setenv(DEBIAN_KEYRING_VARIABLE, str(keyring))
        yield Mirror(served, home, keyring,
                     {package: deb(package, members) for package, members in GENUINE.items()})


def unpacked(tmp_path: Path) -> tuple[Path, list[str]]:
    root = tmp_path / "root"
    root.mkdir(exist_ok=True)
    return root, unpack_packages(debian_archive(read_machine(os.environ)), "arm64", list(GENUINE),
                                 root)


def refused(tmp_path: Path) -> str:
    with pytest.raises(BuildError) as raised:
        unpacked(tmp_path)
    message = str(raised.value)
    assert "\n" not in message
    return message


def test_a_signed_archive_is_unpacked_and_its_absolute_links_stay_inside(mirror: Mirror,
        tmp_path: Path) -> None:
    mirror.publish()
    root, taken = unpacked(tmp_path)
    assert taken == ["libdemo1 1.0", "demo-python 1.0"]
    assert (root / "usr/lib/aarch64-linux-gnu/libdemo.so").read_bytes() == b"\x7fELF demo"
    python = root / "usr" / "bin" / "python3"
    assert os.readlink(python) == "python3.11"
    assert python.resolve() == (root / "usr" / "bin" / "python3.11").resolve()


def test_an_unsigned_inrelease_is_refused(mirror: Mirror, tmp_path: Path) -> None:
    mirror.publish(sign=False)
    message = refused(tmp_path)
    assert message.endswith("InRelease is not signed by the archive: a good signature by no "
                            f"key of {mirror.keyring}; nothing was unpacked")
    assert not any((tmp_path / "root").iterdir())


def test_an_inrelease_signed_by_another_key_is_refused(mirror: Mirror,
                                                       keys: tuple[Path, Path, Path],
                                                       tmp_path: Path) -> None:
    mirror.gnupg = keys[2]
    mirror.publish()
    assert "is not signed by the archive" in refused(tmp_path)
    assert not any((tmp_path / "root").iterdir())


def test_debians_own_keys_refuse_a_mirror_signed_by_any_other(mirror: Mirror, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a keyring of the user's, only Debian's archive keys count."""
    debian_keyring()
    monkeypatch.delenv(DEBIAN_KEYRING_VARIABLE)
    mirror.publish()
    assert "is not signed by the archive" in refused(tmp_path)


def test_a_replaced_package_index_is_refused(mirror: Mirror, tmp_path: Path) -> None:
    """A mirror that swaps Packages.xz (its own hashes for its own debs) after signing."""
    mirror.publish()
    mirror.debs["demo-python"] = deb("demo-python", [regular("./usr/bin/python3.11", b"evil")])
    signed = (mirror.root / "dists" / SUITE / "InRelease").read_bytes()
    mirror.publish(sign=False)
    (mirror.root / "dists" / SUITE / "InRelease").write_bytes(signed)
    # the swapped index is refused by its hash, or, where it came out longer than the signed
    # one (its debs' sizes and hashes differ), cut off as it arrives
    message = refused(tmp_path)
    assert "Packages.xz does not have the size and SHA-256 its signed release gives it" in \
        message or re.search(r"/Packages\.xz sends more than \d+ bytes: the archive's signed "
                             r"index gives it less", message), message
    assert not any((tmp_path / "root").iterdir())


def test_a_replaced_package_is_refused(mirror: Mirror, tmp_path: Path) -> None:
    mirror.publish()
    evil = deb("demo-python", [regular("./usr/bin/python3.11", b"#!evil\n", 0o755)])
    (mirror.root / "pool/main/demo-python_1.0_arm64.deb").write_bytes(evil)
    assert "demo-python_1.0_arm64.deb does not have the size and SHA-256 the signed index " \
        "gives it" in refused(tmp_path)
    assert not (tmp_path / "root" / "usr" / "bin").exists()


@pytest.mark.parametrize("member", ["parent", "link-out", "hardlink-out"])
def test_a_package_reaching_outside_the_root_is_refused(mirror: Mirror, tmp_path: Path,
                                                        member: str) -> None:
    """Signed or not, a member that would land outside the root, or a link leading out of it
    that something would then write through, is refused in one line."""
    outside = tmp_path / "outside"
    cases: dict[str, list[tuple[tarfile.TarInfo, bytes | None]]] = {
               "parent": [regular("../../outside/evil", b"x")],
               "link-out": [link("./usr/lib/python3", "../../../outside")],
               "hardlink-out": [link("./usr/lib/evil", "../../outside/evil", tarfile.LNKTYPE)],
               }
    mirror.debs["demo-python"] = deb("demo-python", cases[member])
    mirror.publish()
    message = refused(tmp_path)
    assert "demo-python_1.0_arm64.deb holds" in message and "outside the root folder" in message
    assert not outside.exists()


def test_an_absolute_member_name_lands_inside_the_root(mirror: Mirror, tmp_path: Path) -> None:
    """tarfile's filter takes the leading / off, as dpkg reads it: under the root."""
    mirror.debs["demo-python"] = deb("demo-python", [regular("/etc/evil", b"x")])
    mirror.publish()
    root, _ = unpacked(tmp_path)
    assert (root / "etc" / "evil").read_bytes() == b"x"


def test_a_file_name_outside_the_archive_is_refused(mirror: Mirror, tmp_path: Path) -> None:
    mirror.publish(filenames={"demo-python": "../../etc/passwd"})
    assert "the file name '../../etc/passwd', outside the archive" in refused(tmp_path)


def test_a_package_index_that_inflates_past_its_bound_is_refused(mirror: Mirror, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A signed index of 2 MiB of zeros, xz-compressed to a few hundred bytes: read no further
    than the bound."""
    monkeypatch.setattr(defaults, "DEBIAN_INDEX_LIMIT", 2**20)
    mirror.publish(index=lzma.compress(bytes(2 * 2**20)))
    assert "Packages.xz inflates past 1.0 MiB" in refused(tmp_path)


def test_a_package_larger_than_its_index_says_is_not_read_past_it(mirror: Mirror,
        tmp_path: Path) -> None:
    mirror.publish()
    (mirror.root / "pool/main/libdemo1_1.0_arm64.deb").write_bytes(
        gzip.compress(b"") + bytes(4 * 2**20))
    assert "libdemo1_1.0_arm64.deb sends more than" in refused(tmp_path)


@pytest.mark.network
def test_debians_own_archive_is_signed_by_its_keys(tmp_path: Path) -> None:
    """The real bookworm InRelease, checked with the machine's Debian keyring."""
    import requests

    from factory.sources.debian import _signed_release

    debian_keyring()
    with requests.Session() as session:
        text = _signed_release(session, debian_archive(Machine()))
    assert f"Codename: {SUITE}" in text and "main/binary-arm64/Packages.xz" in text
