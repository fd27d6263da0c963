"""A real browser (Debian's chromium driven by Playwright) opening the browse page on a
phone's screen."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from .factory import REPO
from .system import debian_package

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page, Response

ARTIFACTS = REPO / "test-artifacts"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=debian_package("chromium",
                                                                             "chromium"),
                                              args=["--no-sandbox", "--disable-gpu"])
        yield chromium
        chromium.close()


def open_page(browser: Browser, url: str) -> tuple[Page, list[str]]:
    page = browser.new_page(viewport={"width": 390, "height": 844})  # a phone
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    # every request the page makes is answered (the favicon too): no 404 in its console
    page.on("response", lambda response: _failed(response, errors))
    page.goto(url)
    page.wait_for_selector("body[data-ready=true]")
    return page, errors


def _failed(response: Response, errors: list[str]) -> None:
    if response.status >= 400:
        errors.append(f"{response.status} {response.url}")


def shot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)
    assert (ARTIFACTS / f"{name}.png").stat().st_size > 10_000


def text(page: Page, selector: str) -> str:
    """The text of the first element `selector` finds; it must be there."""
    found = page.text_content(selector)
    assert found is not None, f"nothing on the page matches {selector}"
    return found
