"""PEP 740 attestations of the wheels an index publishes.

Where a CI job has an OIDC identity (GitHub Actions gives one to a job with `id-token: write`),
`factory attest` signs each wheel of an output folder that has none yet: a publish attestation
(the form PyPI accepts, which twine uploads from <wheel>.publish.attestation) and an SLSA
provenance attestation whose predicate carries what the wheel's own provenance.json says of its
making (source, commit, cell, toolchain). Both go into <wheel>.provenance, a PEP 740 provenance
object naming the publisher, beside the wheel; the index links it from each page (the JSON
`provenance` key, the HTML `data-provenance` attribute) exactly where the file exists. Where no
identity exists, nothing is signed and one line says so: the wheels stay unattested, and the
browse page and doctor say that.

Checking needs no network: sigstore's trust root ships with it, and each attestation is
checked against the publisher a matrix pins (`publisher:`), else the one its bundle names.
pypi-attestations and sigstore do all the cryptography; the factory only chooses what is
signed and where the files go.
"""

from ..config.publisher import Publisher, read_publisher
from .check import AttestationRefused, check_index, check_provenance
from .sign import AttestSummary, attest_index

__all__ = ["AttestSummary", "AttestationRefused", "Publisher", "attest_index", "check_index",
           "check_provenance", "read_publisher"]
