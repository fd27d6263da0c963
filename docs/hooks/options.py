"""MkDocs hook: the option reference page gets its table from the settings' own list."""

from __future__ import annotations

from typing import Any

from factory.pipeline.options import option_reference

MARKER = "<!-- factory-options -->"


def on_page_markdown(markdown: str, **_: Any) -> str:
    return markdown.replace(MARKER, option_reference()) if MARKER in markdown else markdown
