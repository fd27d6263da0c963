"""Positions of keys in TOML and YAML, so every error can point at its line."""

from __future__ import annotations

from pathlib import Path

import pytest

from factory.config.nodes import load_toml, load_yaml
from factory.errors import ConfigError


def test_toml_lines_of_tables_keys_and_list_items(tmp_path: Path) -> None:
    path = tmp_path / "x.toml"
    path.write_text('[a]\nx = [ "1", "2",\n  # note\n  "3", [4, 5],\n  {q = 1} ]\n'
                    'y = """\nz = 3\n"""\nw.v = "k" # comment\n\n["quoted.key"]\nn = 1\n')
    root = load_toml(path)
    a = root.mapping()["a"]
    items = a.mapping()["x"].list()
    assert [item.line for item in items] == [2, 2, 4, 4, 5]
    assert items[2].key == "a.x[2]"
    assert a.mapping()["y"].line == 6
    assert a.mapping()["w"].mapping()["v"].line == 9
    assert root.mapping()["quoted.key"].mapping()["n"].line == 12
    assert "z" not in a.mapping()  # inside a multi-line string, not a key


def test_yaml_keeps_lines_and_source_text(tmp_path: Path) -> None:
    path = tmp_path / "x.yaml"
    path.write_text("torch: [2.10, 2.9]\ncuda:\n  13.0:\n    sms: [9.0]\n")
    root = load_yaml(path)
    torch = root.mapping()["torch"].list()
    assert [node.scalar_text() for node in torch] == ["2.10", "2.9"]  # YAML reads 2.1 and 2.9
    cuda = root.mapping()["cuda"].mapping()
    assert list(cuda) == ["13.0"] and cuda["13.0"].line == 3
    assert cuda["13.0"].mapping()["sms"].list()[0].scalar_text() == "9.0"


def test_yaml_duplicate_keys_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "x.yaml"
    path.write_text("torch: [2.11]\ncuda: {}\ntorch: [2.10]\n")
    with pytest.raises(ConfigError) as caught:
        load_yaml(path)
    assert caught.value.render().endswith("x.yaml:3: torch: duplicate key")


def test_unknown_key_suggests_the_closest(tmp_path: Path) -> None:
    path = tmp_path / "x.yaml"
    path.write_text("kernls: []\n")
    with pytest.raises(ConfigError) as caught:
        load_yaml(path).table(["kernels", "torch"])
    assert "x.yaml:1: kernls: unknown key (did you mean 'kernels'?)" in caught.value.render()
