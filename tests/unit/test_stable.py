"""Stable-ABI kernels, planned: one cell per CUDA major x platform built against the lowest
torch the matrix can build it with, whose wheel serves every cell of that CUDA major from that
torch on (index-only torches included); its pin, label and import guard."""

from __future__ import annotations

from packaging.version import Version

from factory.defaults import STABLE_LABEL_TEMPLATE
from factory.plan.labels import render_label
from factory.values.versions import parse_release


def test_labels_sort_as_the_readme_says() -> None:
    """The default stable-ABI label sorts below every per-torch label (pip takes a build for
    exactly the user's torch when an index lists both), and a newer torch's stable build
    above an older one's, 2.10 above 2.9 included."""
    def stable(torch: str) -> Version:
        return Version("1.0.0+" + render_label(STABLE_LABEL_TEMPLATE, parse_release(torch),
                                               parse_release("13.0")))

    assert str(stable("2.11")) == "1.0.0+cu13.stable.torch2.11"
    assert stable("2.11") < Version("1.0.0+cu130torch211") < Version("1.0.0+cu132torch213")
    assert stable("2.13") < Version("1.0.0+cu130torch211")
    assert stable("2.9") < stable("2.10") < stable("2.11") < stable("3.0")
    assert stable("2.13") < Version("1.0.1+cu13.stable.torch2.11")
