"""`factory serve [DIR]`: an output folder over HTTP for pip, uv and browsers."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from .. import defaults
from .common import path_argument, port

__all__ = ["add", "run"]


def add(commands: Any) -> None:
    serve = commands.add_parser(
        "serve", help="serve an output folder to pip, uv and browsers",
        description="Serve DIR over HTTP with PEP 691 content negotiation (JSON or HTML pages).")
    serve.add_argument("folder", type=path_argument, nargs="?", default=defaults.OUT, metavar="DIR",
                       help=f"the output folder (default: {defaults.OUT})")
    serve.add_argument("--host", default=defaults.SERVE_HOST,
                       help=f"address to listen on (default: {defaults.SERVE_HOST})")
    serve.add_argument("--port", type=port, default=defaults.SERVE_PORT,
                       help=f"port (default: {defaults.SERVE_PORT}; 0 picks a free one)")
    serve.add_argument("--per-client", type=_connections, default=defaults.SERVE_PER_CLIENT,
                       metavar="N",
                       help="connections one client address may hold at once (default: "
                            f"{defaults.SERVE_PER_CLIENT}; 0: no limit, behind a reverse proxy "
                            "whose connections all come from one address)")


def _connections(text: str) -> int:
    if not text.isdigit() or not 0 <= int(text) <= defaults.SERVE_WORKERS:
        raise argparse.ArgumentTypeError(
            f"'{text}' is not a number of connections (0 to {defaults.SERVE_WORKERS})")
    return int(text)


def run(args: argparse.Namespace, console: Console) -> int:
    from ..pipeline.serve import open_server

    folder: Path = args.folder
    serving = open_server(folder, args.host, args.port, args.per_client or None)
    base = f"http://{serving.host}:{serving.port}"
    console.print(f"Serving {folder.resolve()} at {base}/ (Ctrl-C to stop)", markup=False,
                  soft_wrap=True)
    for label in serving.labels:
        console.print(f"  pip install PACKAGE --extra-index-url {base}/{label}/simple",
                      markup=False, soft_wrap=True)
    sys.stdout.flush()
    with serving.server:
        serving.server.serve_forever()
    return 0
