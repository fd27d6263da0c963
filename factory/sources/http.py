"""Reading another server within bounds: a simple index's pages (PEP 503/691), the public
index's answers to the name-clash lookup, a published wheel.

requests bounds each read of a socket, not an answer: a server that sends one byte every few
seconds, or a page of gigabytes, keeps a plain `session.get` going for ever or fills memory.
BoundedSession is a requests session (pypi-simple and the factory's own reader take it as it
is) whose every answer arrives whole within the session's deadline and the body limit, or is
refused with one line; no library offers those two bounds over requests.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import requests

from .. import defaults
from ..errors import FactoryError
from ..values.units import human_size

__all__ = ["BoundedSession", "Overrun", "read_body", "within"]

_T = TypeVar("_T")


class Overrun(FactoryError, requests.RequestException):
    """An answer that went on past its deadline or its size bound (a RequestException too, so
    that every handler of a failed request gives it one line)."""


def within(seconds: float, work: Callable[[], _T], what: str) -> _T:
    """`work()`'s result, or Overrun once `seconds` have passed. The work runs in a thread of
    its own, left behind when it overruns: a socket read cannot be interrupted from outside, and
    the command that gives up on it ends with its error."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = work()
        except BaseException as exc:  # handed to the caller's thread below
            box["error"] = exc

    thread = threading.Thread(target=run, name="bounded-read", daemon=True)
    thread.start()
    thread.join(max(seconds, 0.0))
    if thread.is_alive():
        raise Overrun(f"{what} did not arrive whole within {seconds:.0f} s")
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]


def read_body(response: requests.Response, limit: int,
              why: str = "no page of an index is that big") -> bytes:
    """A streamed response's whole body, refused (saying `why`) once it goes on past `limit`
    bytes."""
    body = bytearray()
    for block in response.iter_content(1 << 16):
        body += block
        if len(body) > limit:
            response.close()
            raise Overrun(f"{response.url} sends more than {human_size(limit)}: {why}")
    return bytes(body)


class BoundedSession(requests.Session):
    """A session whose answers (redirects and all) arrive within `seconds` of its making (of
    each request's start, with `each`), each body at most `limit` bytes. A caller that streams
    (`stream=True`) reads the body itself, under its own bounds; its headers still arrive
    within the deadline."""

    def __init__(self, seconds: float, limit: int | None = None, each: bool = False) -> None:
        super().__init__()
        self.seconds = seconds
        self.limit = defaults.PAGE_LIMIT if limit is None else limit
        self.each = each
        self.deadline = time.monotonic() + seconds
        # a redirect's body is read (and dropped) by requests itself: bounded here first
        self.hooks["response"].append(self._bound_redirect)

    def _bound_redirect(self, response: requests.Response, **_: Any) -> requests.Response:
        if response.is_redirect and not getattr(response, "_content_consumed", True):
            response._content = read_body(response, self.limit)
        return response

    def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:
        left = self.seconds if self.each else self.deadline - time.monotonic()
        if left <= 0:
            raise Overrun(f"{request.url} did not arrive: the {self.seconds:.0f} s given to "
                          "reading this index had passed")
        timeout = kwargs.get("timeout")
        kwargs["timeout"] = left if timeout is None else min(
            timeout if isinstance(timeout, (int, float)) else max(timeout), left)
        streamed = kwargs.get("stream", False)
        kwargs["stream"] = True
        send = super().send

        def fetch() -> requests.Response:
            response = send(request, **kwargs)
            if not streamed:
                response._content = read_body(response, self.limit)
            return response

        return within(left, fetch, str(request.url))
