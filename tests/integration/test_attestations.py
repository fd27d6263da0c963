"""PEP 740 attestations, with real ones: pypi-attestations' own sdist on PyPI carries wheels and
sdists that were published to PyPI with their provenance (a CircleCI-signed wheel, the
project's own GitHub-signed release). Checked offline by `factory attest --check`: a good one
is accepted, a tampered one and one of another publisher than the matrix pins are refused in
one line; the index links a provenance file exactly where one lies beside a wheel (read by
pypi-simple, a real client of the simple API); and signing, with no OIDC identity here, goes as
far as it can and says so in one line."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from pypi_simple import ProjectPage

from factory.attest import AttestationRefused, check_provenance
from factory.attest.sign import BUILD_TYPE, slsa_predicate

from ..support.factory import REPO, run_factory, snapshot, write
from ..support.servers import static_server

pytestmark = pytest.mark.network

RELEASE = "pypi_attestations-0.0.30"
WHEEL = "circleci_sign_publish_example-0.0.1.dev137-py3-none-any.whl"
PLAIN = "rfc8785-0.1.2-py3-none-any.whl"  # published with no provenance file beside it here
SDIST = "pypi_attestations-0.0.19.tar.gz"  # signed in GitHub Actions by its release.yml
MATRIX = (f'kernels: [{{path: {REPO / "examples" / "img2gray"}}}]\ntorch: ["2.11"]\n'
          'cuda: {"13.0": {sms: ["9.0"]}}\n')


@pytest.fixture(scope="module")
def assets(factory_cache: Path) -> Path:
    """The test assets of pypi-attestations' sdist, downloaded from PyPI once."""
    folder = factory_cache / "attestation-assets" / RELEASE
    if not (folder / f"{WHEEL}.provenance").is_file():
        download = folder.parent / "download"
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary",
                        ":all:", "-q", "-d", str(download), "pypi-attestations==0.0.30"],
                       check=True)
        with tarfile.open(download / f"{RELEASE}.tar.gz") as archive:
            members = [m for m in archive.getmembers()
                       if m.name.startswith(f"{RELEASE}/test/assets/") and m.isfile()]
            archive.extractall(download, members=members, filter="data")
        shutil.rmtree(folder, ignore_errors=True)
        (download / RELEASE / "test" / "assets").rename(folder)
    return folder


@pytest.fixture
def index(tmp_path: Path, assets: Path) -> Path:
    """An index of two real wheels, one with its published provenance beside it."""
    write(tmp_path / "matrix.yaml", MATRIX)
    files = tmp_path / "out" / "files"
    files.mkdir(parents=True)
    for name in (WHEEL, f"{WHEEL}.provenance", PLAIN):
        shutil.copy(assets / name, files / name)
    done = run_factory("index", "--out", tmp_path / "out", cwd=tmp_path)
    assert done.exit == 0, done.stderr
    return tmp_path


def test_the_index_links_a_provenance_file_exactly_where_one_exists(index: Path) -> None:
    """By full URL, as PEP 740 asks: so only once `factory attest --url` says where the index
    is served (with no identity here, nothing is signed on the way)."""
    pages = {}
    for url in (None, "https://kernels.example.org/cu130/"):
        if url is not None:
            done = run_factory("attest", "matrix.yaml", "--out", "out", "--url", url, cwd=index)
            assert done.exit == 0, done.stdout + done.stderr
        for project, filename in (("circleci-sign-publish-example", WHEEL), ("rfc8785", PLAIN)):
            folder = index / "out" / "simple" / project
            page = json.loads((folder / "index.json").read_text())
            for parsed in (ProjectPage.from_json_data(page, base_url=f"{url}simple/x/"),
                           ProjectPage.from_html(project, (folder / "index.html").read_text(),
                                                 base_url=f"{url}simple/x/")):
                (package,) = parsed.packages
                assert package.filename == filename
                pages[url, filename] = package.provenance_url
    assert pages == {(None, WHEEL): None, (None, PLAIN): None,
                     ("https://kernels.example.org/cu130/", WHEEL):
                         f"https://kernels.example.org/cu130/files/{WHEEL}.provenance",
                     ("https://kernels.example.org/cu130/", PLAIN): None}
    refused = run_factory("attest", "matrix.yaml", "--out", "out", "--url",
                          "http://kernels.example.org/", cwd=index)
    assert refused.exit == 2 and refused.stderr.strip() == (
        "error: --url: 'http://kernels.example.org/' is not where an index is served: an "
        "https:// URL (or http:// on this machine), with no query, fragment or credentials")


def test_a_published_provenance_is_checked_offline_and_the_rest_said_unattested(
        index: Path) -> None:
    done = run_factory("attest", "matrix.yaml", "--out", "out", "--check", cwd=index)
    assert done.exit == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == [
        f"{WHEEL}: attested by CircleCI (pipeline_definition_id 8e4f8ab2-8d7c-4827-9f15-"
        "de076d6d647f, project_id fdd9283f-e619-46af-8f9c-851f7d3e8b2b, vcs_origin "
        "github.com/CircleCI-Public/sign-and-publish-examples, vcs_ref refs/heads/pypi): "
        "publish, checked offline",
        f"{PLAIN}: not attested (no provenance file)"]


def test_another_publisher_than_the_matrix_pins_is_refused_in_one_line(index: Path) -> None:
    write(index / "matrix.yaml", MATRIX + "publisher: {github: owner/kernels, workflow: "
                                          "release.yml}\n")
    done = run_factory("attest", "matrix.yaml", "--out", "out", "--check", cwd=index)
    assert done.exit == 1
    refused = [line for line in done.stdout.splitlines() if line.startswith("refused")]
    assert refused == [f"refused: {WHEEL}: an attestation is refused for github.com/owner/"
                       "kernels (release.yml): Verification failed: Certificate's OIDCIssuerV2 "
                       "does not match (got https://oidc.circleci.com, expected "
                       "https://token.actions.githubusercontent.com)"]


def test_a_github_release_is_accepted_for_its_publisher_and_refused_when_tampered(
        assets: Path, tmp_path: Path) -> None:
    from factory.config.publisher import Publisher

    data = (assets / SDIST).read_bytes()
    provenance = (assets / f"{SDIST}.provenance").read_bytes()
    digest = __import__("hashlib").sha256(data).hexdigest()
    pinned = Publisher("GitHub", "trailofbits/pypi-attestations", "release.yml")
    assert check_provenance(SDIST, digest, provenance, pinned, tmp_path) == (
        "attested by github.com/trailofbits/pypi-attestations (release.yml): publish, checked "
        "offline")
    tampered = __import__("hashlib").sha256(data + b"\0").hexdigest()
    with pytest.raises(AttestationRefused) as refused:
        check_provenance(SDIST, tampered, provenance, pinned, tmp_path)
    assert str(refused.value) == (f"{SDIST}: an attestation is refused for github.com/trailofbits"
                                  "/pypi-attestations (release.yml): Verification failed: "
                                  "subject does not match distribution digest")
    other = Publisher("GitHub", "trailofbits/pypi-attestations", "ci.yml")
    with pytest.raises(AttestationRefused, match=r"Verification failed: Certificate's Build "
                                                 r"Config URI does not match expected Trusted "
                                                 r"Publisher \(ci\.yml @ trailofbits/pypi-"
                                                 r"attestations\)$"):
        check_provenance(SDIST, digest, provenance, other, tmp_path)
    with pytest.raises(AttestationRefused, match="is not a PEP 740 provenance object"):
        check_provenance(SDIST, digest, b'{"version": 1}', pinned, tmp_path)
    assert list(tmp_path.glob("sigstore/cache/sigstore-python/tuf/*/trusted_root.json"))


def test_signing_with_no_identity_goes_as_far_as_it_can_and_says_so(
        index: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("ACTIONS_ID_TOKEN_REQUEST_URL", "ACTIONS_ID_TOKEN_REQUEST_TOKEN",
                 "KERNEL_WHEEL_FACTORY_ID_TOKEN", "SIGSTORE_ID_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    before = snapshot(index / "out")
    done = run_factory("attest", "matrix.yaml", "--out", "out", cwd=index)
    assert done.exit == 0, done.stdout + done.stderr
    assert done.stdout.strip() == (
        "no OIDC identity token here (a GitHub Actions job with `permissions: id-token: "
        "write` has one): 1 wheel(s) left unattested")
    assert snapshot(index / "out") == before
    refused = run_factory("attest", "matrix.yaml", "--out", "out", cwd=index,
                          env={"KERNEL_WHEEL_FACTORY_ID_TOKEN": "not-a-jwt"})
    assert refused.exit == 1
    assert refused.stderr.startswith("error: the OIDC identity token is not one sigstore "
                                      "takes"), refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    assert snapshot(index / "out") == before


def test_the_slsa_predicate_carries_what_the_wheel_says_of_its_making() -> None:
    made = {"factory": "0.1.0", "kernel": {"name": "img2gray", "version": "1.0.0"},
            "source": {"kind": "git", "location": "https://example.org/img2gray.git",
                       "git": {"commit": "ab" * 20, "dirty": False}},
            "cell": {"id": "img2gray/cu130torch211/x86_64"},
            "toolchain": {"nvcc": "13.0.88", "torch": "2.11.0+cu130"}}
    predicate = slsa_predicate(made)
    definition = predicate["buildDefinition"]
    assert definition["buildType"] == BUILD_TYPE
    assert definition["externalParameters"]["cell"] == "img2gray/cu130torch211/x86_64"
    assert definition["internalParameters"]["toolchain"]["nvcc"] == "13.0.88"
    assert definition["resolvedDependencies"] == [
        {"uri": "https://example.org/img2gray.git", "digest": {"gitCommit": "ab" * 20}}]
    assert predicate["runDetails"]["builder"]["id"] == f"{BUILD_TYPE}:0.1.0"


def test_doctor_says_which_wheel_is_attested_and_checks_it_offline(index: Path) -> None:
    root = f"file://{index / 'out'}/"
    said = {}
    for project in ("circleci-sign-publish-example", "rfc8785"):
        done = run_factory("doctor", root, project, cwd=index)
        assert done.exit == 0, done.stdout + done.stderr
        said[project] = [line.strip() for line in done.stdout.splitlines()
                         if "attest" in line]
    assert said == {
        "circleci-sign-publish-example": [
            f"attested by CircleCI: checked offline ({root}files/{WHEEL}.provenance)"],
        "rfc8785": ["not attested: no CI identity signed it where it was published"]}
    # a provenance file that is not the wheel's: refused, in one line
    shutil.copy(index / "out" / "files" / f"{WHEEL}.provenance",
                index / "out" / "files" / f"{PLAIN}.provenance")
    assert run_factory("index", "--out", index / "out").exit == 0
    done = run_factory("doctor", root, "rfc8785", cwd=index)
    assert [line.strip() for line in done.stdout.splitlines() if "attest" in line] == [
        "attestation refused: Verification failed: subject does not match distribution name: "
        f"{WHEEL} != {PLAIN}"]


def test_twine_uploads_the_publish_attestations_beside_the_wheels() -> None:
    from factory.publish.registry import twine_settings

    assert twine_settings("http://127.0.0.1:1/", None, attestations=True).attestations
    assert not twine_settings("http://127.0.0.1:1/", None).attestations


def test_a_merge_keeps_the_provenance_a_wheel_was_published_with(index: Path) -> None:
    """From a folder (a build job's) and from a served index (the site already published):
    the provenance file comes along, byte for byte, and is never signed again."""
    published = (index / "out" / "files" / f"{WHEEL}.provenance").read_bytes()
    folder = run_factory("index", "--merge", index / "out", "--out", index / "from-folder")
    assert folder.exit == 0, folder.stderr
    assert (index / "from-folder" / "files" / f"{WHEEL}.provenance").read_bytes() == published
    assert not (index / "from-folder" / "files" / f"{PLAIN}.provenance").exists()
    with static_server(index / "out") as url:
        linked = run_factory("attest", "matrix.yaml", "--out", "out", "--url", url, cwd=index)
        assert linked.exit == 0, linked.stdout + linked.stderr
        site = run_factory("index", "--merge", url, "--out", index / "from-site")
        assert site.exit == 0, site.stderr
    assert (index / "from-site" / "files" / f"{WHEEL}.provenance").read_bytes() == published
    assert not (index / "from-site" / "files" / f"{PLAIN}.provenance").exists()
    page = json.loads((index / "from-site" / "simple" / "circleci-sign-publish-example" /
                       "index.json").read_text())
    assert "provenance" not in page["files"][0]  # linked once --url says where it is served
