"""`factory serve FOLDER`: an output folder's indexes over HTTP on this machine."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError
from ..index.serve import IndexServer, make_server

__all__ = ["Serving", "open_server"]


@dataclass(frozen=True)
class Serving:
    """A server bound and ready to serve: its address, and the cells' index labels."""

    server: IndexServer
    host: str
    port: int
    labels: tuple[str, ...]


def open_server(folder: Path, host: str, port: int, per_client: int | None) -> Serving:
    """A server of `folder` listening on host:port (port 0: any free one)."""
    if not folder.is_dir():
        raise ConfigError("no such folder", file=folder)
    try:
        server = make_server(folder, host, port, per_client=per_client)
    except OSError as exc:
        raise ConfigError(f"cannot listen on {host}:{port} ({exc.strerror})",
                          key="--port") from None
    bound_host, bound = server.server_address[:2]
    labels = tuple(sorted(p.parent.name for p in folder.glob("*/simple") if p.is_dir()))
    return Serving(server, str(bound_host), int(bound), labels)
