"""A PEP 517 build's compiles served by the object cache, from inside the build.

The compiler wrapper (rewrite.py run as a program) calls `compile_unit` for each command of the
build. A command that compiles one source to one object (`-c src.cu -o obj.o`) is a unit: the
wrapper asks the factory's broker (a Unix socket, cells/broker.py) for the input
sets seen for its command, takes the object of the first set whose files still have those
hashes, and otherwise compiles, hashes what the compiler read (its dependency file) and hands
the object over. Any other command (a link, `--version`, a preprocessing run) runs as written;
a compile the cache cannot key (a response file, several sources, no output named) runs as
written too and the broker is told why, so the build's log says it per unit.

The wrapper runs inside the build's confinement, as the project's own code does: it never holds
the cache's key and never writes into the cache. The broker signs and keeps what it is given,
under an identity that names the project's source, so that what one project's build hands over
is only ever served to builds of that same project.

This module is the standard library only, as rewrite.py is (it runs in the project's build
environment, which does not hold the factory); the factory imports its protocol and its
dependency-file reader from here.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import struct
import subprocess
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence
    from typing import Any, BinaryIO

__all__ = ["DATE_MARKER", "ENVIRONMENT", "NESTED", "WORK", "Unit", "compile_unit", "plan",
           "read_depfile", "receive", "receive_payload", "send"]

WORK = "$WORK"  # the build folder, in the input paths the broker keeps
DATE_MARKER = "$SOURCE_DATE_EPOCH"  # an input set's entry for a unit whose files name a date
NESTED = "KERNEL_WHEEL_FACTORY_NESTED_COMPILE"  # nvcc running the host compiler under it
# What the compilers read of the environment besides their arguments: part of a unit's identity.
ENVIRONMENT = ("PATH", "CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH", "GCC_EXEC_PREFIX",
               "COMPILER_PATH", "NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS", "NVCC_CCBIN",
               "LD_PRELOAD", "LD_LIBRARY_PATH")
SOURCE_SUFFIXES = (".c", ".cc", ".cp", ".cpp", ".cxx", ".c++", ".C", ".CPP", ".cu")
_DATES = (b"__DATE__", b"__TIME__", b"__TIMESTAMP__")
_OUTPUT = ("-o", "--output-file")
_DEPFILE = ("-MF", "--dependency-output")
_TARGET = ("-MT", "-MQ")
_ALL_DEPS = ("-MD", "--generate-dependencies-with-compile")
_USER_DEPS = ("-MMD", "--generate-nonsystem-dependencies-with-compile")
# Flags whose next argument is a file that is neither the source nor the object.
_FILE_VALUES = ("-include", "-imacros", "--pre-include", "-x", "--x", *_DEPFILE, *_TARGET)
# What the cache cannot key: files read that no dependency file lists, files written besides the
# object, output that is not one object.
_REFUSED = {"-E": "it only preprocesses", "-S": "it writes assembly",
            "-M": "it only lists dependencies", "-MM": "it only lists dependencies",
            "-save-temps": "it keeps intermediate files", "--keep": "it keeps intermediate files",
            "-keep": "it keeps intermediate files", "--options-file": "it reads an options file",
            "-optf": "it reads an options file", "-fplugin": "it loads a compiler plugin",
            "-specs": "it reads a specs file", "-B": "it names other compiler programs",
            "-fprofile-use": "it reads a profile", "-time": "it writes a timing file",
            "--time": "it writes a timing file", "-": "it reads its source from stdin"}
_HEADER = struct.Struct(">I")
MAX_HEADER = 16 * 2**20
_CHUNK = 2**20
_TIMEOUT = 600.0  # a broker that has not answered by then is not there
_CONNECT_PATIENCE = 30.0  # seconds a wrapper waits for room in the broker's queue


class Unit:
    """One compile of one source to one object: the source and object as the command names
    them, the dependency file the build asked for (None: none), and the arguments that run it
    (a dependency file of every header asked for, the factory's own where the build wants
    none)."""

    __slots__ = ("depfile", "output", "own_depfile", "run", "source")

    def __init__(self, source: str, output: str, depfile: str | None, run: list[str],
                 own_depfile: bool) -> None:
        self.source, self.output, self.depfile = source, output, depfile
        self.run, self.own_depfile = run, own_depfile


def _value(args: Sequence[str], index: int, names: Sequence[str]) -> tuple[str, int] | None:
    """The value of the flag at `index` when it is one of `names` (`-o x`, `-o=x`, `-ox` for
    one-letter flags): (value, arguments it took); None otherwise."""
    arg = args[index]
    for name in names:
        if arg == name:
            return (args[index + 1], 2) if index + 1 < len(args) else ("", 1)
        if arg.startswith(name + "="):
            return arg[len(name) + 1:], 1
        if len(name) == 2 and arg.startswith(name) and len(arg) > 2 and name != "-M":
            return arg[2:], 1
    return None


def plan(args: Sequence[str]) -> Unit | str | None:
    """The unit a compiler command is; None when it compiles nothing (a link, a version query:
    not the cache's business); why not, when it compiles but cannot be keyed."""
    if not any(arg in ("-c", "--compile") for arg in args):
        return None
    sources: list[str] = []
    outputs: list[str] = []
    depfile: str | None = None
    deps = ""
    run: list[str] = []
    index = 0
    while index < len(args):
        arg = args[index]
        if arg.startswith("@"):
            return "it reads a response file"
        refused = _REFUSED.get(arg.partition("=")[0])
        if refused is not None:
            return refused
        output = _value(args, index, _OUTPUT)
        named = _value(args, index, _DEPFILE) if output is None else None
        if output is not None or named is not None:
            value, taken = output or named  # type: ignore[misc]
            if output is not None:
                outputs.append(value)
            else:
                depfile = value
            run.extend(args[index:index + taken])
            index += taken
            continue
        if arg in _FILE_VALUES and index + 1 < len(args):
            run.extend(args[index:index + 2])
            index += 2
            continue
        if arg in _ALL_DEPS or arg in _USER_DEPS:
            deps = arg
            run.append("-MD" if arg in _USER_DEPS else arg)  # every header, system ones too
        else:
            if not arg.startswith("-") and arg.endswith(SOURCE_SUFFIXES):
                sources.append(arg)
            run.append(arg)
        index += 1
    if len(sources) != 1:
        return f"it compiles {len(sources)} sources in one command"
    if len(outputs) != 1 or not outputs[0]:
        return "it names no single object file (-o)"
    if deps and not depfile:
        return "its dependency file is not named (-MF)"
    own = not deps
    if own:
        depfile = outputs[0] + ".factory.d"
        run += ["-MD", "-MF", depfile]
    return Unit(sources[0], outputs[0], depfile, run, own)


_DEPFILE_TOKEN = re.compile(r"(?:\\.|[^\s\\])+")


def read_depfile(text: str, cwd: str) -> list[str]:
    """The files a Makefile-style dependency file (`obj: a.cu b.h \\`) lists, absolute, in
    order, each once."""
    files: list[str] = []
    seen_target = False
    for token in _DEPFILE_TOKEN.findall(text.replace("\\\n", " ")):
        name = re.sub(r"\\(.)", r"\1", token).replace("$$", "$")
        if not seen_target:
            seen_target = name.endswith(":")
            continue
        if name == ":" or name.endswith(":"):  # another rule's target (-MP's phony ones)
            continue
        path = os.path.join(cwd, name)  # as the compiler opened it (no `..` folded)
        if path not in files:
            files.append(path)
    return files


# -- the protocol: a 4-byte length and a JSON header, then the payload the header's size says ---

def send(connection: socket.socket, header: dict[str, Any], payload: BinaryIO | None = None,
         size: int = 0) -> None:
    data = json.dumps(header).encode()
    connection.sendall(_HEADER.pack(len(data)) + data)
    if payload is not None:
        left = size
        while left:
            chunk = payload.read(min(_CHUNK, left))
            if not chunk:
                raise OSError("the payload ended early")
            connection.sendall(chunk)
            left -= len(chunk)


def _exactly(connection: socket.socket, size: int) -> bytes:
    return b"".join(receive_payload(connection, size))


def receive(connection: socket.socket, limit: int = MAX_HEADER) -> dict[str, Any]:
    """A header, at most `limit` bytes of JSON object."""
    (size,) = _HEADER.unpack(_exactly(connection, _HEADER.size))
    if size > limit:
        raise OSError(f"a header of {size} bytes is over the limit")
    header = json.loads(_exactly(connection, size))
    if not isinstance(header, dict):
        raise OSError("a header that is not an object")
    return header


def receive_payload(connection: socket.socket, size: int) -> Iterator[bytes]:
    """The payload after a header, in chunks."""
    while size:
        part = connection.recv(min(size, _CHUNK))
        if not part:
            raise OSError("the connection closed early")
        size -= len(part)
        yield part


# -- the wrapper's side -------------------------------------------------------------------------

class _Broker:
    def __init__(self, address: str) -> None:
        self.address = address

    def ask(self, header: dict[str, Any], payload: str | None = None, size: int = 0,
            wait: bool = False) -> tuple[dict[str, Any], socket.socket]:
        """The broker's answer to `header`, and the connection (`wait`: for as long as the
        broker takes to answer, a turn to compile)."""
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        connection.settimeout(_TIMEOUT)
        try:
            _connect(connection, self.address)
            if wait:
                connection.settimeout(None)
            if payload is None:
                send(connection, header)
            else:
                with open(payload, "rb") as handle:
                    send(connection, {**header, "size": size}, handle, size)
            return receive(connection), connection
        except BaseException:
            connection.close()
            raise


def _connect(connection: socket.socket, address: str) -> None:
    """Connect to the broker. A Unix socket whose queue of connections waiting to be accepted
    is full refuses more at once (EAGAIN) rather than waiting: the many compiles a build tool
    starts in the same moment try again for a while, so that none is compiled without the
    cache only because its neighbours asked first."""
    deadline = time.monotonic() + _CONNECT_PATIENCE
    pause = 0.005
    while True:
        try:
            connection.connect(address)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise
            time.sleep(pause)
            pause = min(pause * 2, 0.2)


class _Hashes:
    def __init__(self) -> None:
        self.known: dict[str, tuple[str, bool] | None] = {}

    def of(self, path: str) -> tuple[str, bool] | None:
        """sha256 of a file and whether it names a date macro; None when it cannot be read."""
        if path not in self.known:
            try:
                with open(path, "rb") as handle:
                    data = handle.read()
                self.known[path] = (hashlib.sha256(data).hexdigest(),
                                    any(macro in data for macro in _DATES))
            except OSError:
                self.known[path] = None
        return self.known[path]


def _real(path: str, work: str) -> str:
    return work + path[len(WORK):] if path.startswith(WORK) else path


def _normal(path: str, work: str) -> str:
    return WORK + path[len(work):] if path == work or path.startswith(work + "/") else path


def _matches(inputs: list[list[str]], work: str, hashes: _Hashes) -> bool:
    for path, digest in inputs:
        if path == DATE_MARKER:
            if digest != os.environ.get("SOURCE_DATE_EPOCH", ""):
                return False
            continue
        found = hashes.of(_real(path, work))
        if found is None or found[0] != digest:
            return False
    return True


def _write_object(connection: socket.socket, size: int, output: str) -> None:
    temporary = f"{output}.{os.getpid()}.factory-tmp"
    try:
        with open(temporary, "wb") as handle:
            for chunk in receive_payload(connection, size):
                handle.write(chunk)
        os.replace(temporary, output)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def _write_depfile(unit: Unit, inputs: list[list[str]], work: str) -> None:
    """The dependency file the build asked for, as the compiler would have written it (the
    files the cached object was made from)."""
    if unit.depfile is None or unit.own_depfile:
        return
    def escaped(name: str) -> str:
        return name.replace("\\", "\\\\").replace(" ", "\\ ").replace("$", "$$")
    files = [_real(path, work) for path, _ in inputs if path != DATE_MARKER]
    with open(unit.depfile, "w", encoding="utf-8", errors="surrogateescape") as handle:
        handle.write(escaped(unit.output) + ":" + "".join(f" \\\n  {escaped(name)}"
                                                           for name in files) + "\n")


def _take_first(broker: _Broker, request: dict[str, Any], unit: Unit, work: str,
                hashes: _Hashes, entries: list[dict[str, Any]]) -> bool:
    """The object of the first of `entries` whose files are unchanged, written where the
    command would write it; whether there was one."""
    for entry in entries:
        if not _matches(entry["inputs"], work, hashes):
            continue
        answer, connection = broker.ask({"op": "take", "object": entry["object"], **request})
        with connection:
            if not answer.get("ok"):
                continue
            _write_object(connection, int(answer["size"]), unit.output)
        _write_depfile(unit, entry["inputs"], work)
        return True
    return False


class Late(Exception):
    """The broker said the unit may not start: the build's time limit would end it."""


class Foreign(Exception):
    """The broker said another shard compiles the unit (--unit-shard)."""


def _stand_in(output: str) -> int:
    """An empty file where an object or linked library would be (another shard's unit, a unit
    past the time limit, a shard build's link): the build goes on to its end, what it compiled
    is in the cache, and what it links is thrown away."""
    with open(output, "wb"):
        pass
    return 0


def _output(args: Sequence[str]) -> str | None:
    """The file a command writes (-o), if it names one."""
    for index in range(len(args)):
        found = _value(args, index, _OUTPUT)
        if found is not None:
            return found[0] or None
    return None


def _from_cache(broker: _Broker, request: dict[str, Any], unit: Unit, work: str,
                hashes: _Hashes) -> dict[str, Any] | None:
    """None when the object came from the cache, else what the broker said of the unit; Late
    when it may not be compiled."""
    found, connection = broker.ask({"op": "find", **request})
    connection.close()
    if _take_first(broker, request, unit, work, hashes, found.get("entries", [])):
        return None
    if found.get("remote"):  # the input sets of the store shared by machines, too
        shared, connection = broker.ask({"op": "find", "remote": True, **request})
        connection.close()
        if _take_first(broker, request, unit, work, hashes, shared.get("entries", [])):
            return None
    if found.get("mine") is False:  # another shard compiles it: a stand-in for the link
        _tell(broker, {"op": "foreign", **request})
        raise Foreign
    if found.get("start") is False:
        _tell(broker, {"op": "late", **request})
        raise Late
    return found


def _turn(broker: _Broker, request: dict[str, Any], bounded: bool = True
          ) -> socket.socket | None:
    """In a build whose compiles the broker orders: wait for this one's turn, and hold it while
    the connection returned stays open (Late: the time limit would end it, for a `bounded`
    unit). A broker that cannot be asked lets it run at once."""
    try:
        answer, connection = broker.ask({"op": "start", "bounded": bounded, **request},
                                        wait=True)
    except (OSError, ValueError) as exc:
        print(f"kernel-wheel-factory: the object cache did not answer ({exc}); compiling",
              file=sys.stderr)
        return None
    if answer.get("late"):
        connection.close()
        raise Late
    return connection


def _inputs(unit: Unit, cwd: str, work: str, hashes: _Hashes) -> list[list[str]] | str:
    """What the compiler read, each with its sha256 (a unit whose files name a date gets the
    source's time as an input too); why not, when a file cannot be read."""
    assert unit.depfile is not None
    try:
        with open(os.path.join(cwd, unit.depfile), encoding="utf-8",
                  errors="surrogateescape") as handle:
            files = read_depfile(handle.read(), cwd)
    except OSError:
        return "the compiler wrote no dependency file"
    inputs: list[list[str]] = []
    dated = False
    for path in files:
        found = hashes.of(path)
        if found is None:
            return f"it read {path}, which cannot be read again"
        inputs.append([_normal(path, work), found[0]])
        dated = dated or found[1]
    if dated:
        inputs.append([DATE_MARKER, os.environ.get("SOURCE_DATE_EPOCH", "")])
    return sorted(inputs)


def compile_unit(settings: dict[str, Any], real: str, args: list[str]) -> int:
    """Run one compiler command with the object cache: the exit status to leave with."""
    unit = plan(args)
    nested = bool(os.environ.get(NESTED))
    if unit is None and settings.get("shard") and not nested:
        output = _output(args)
        if output is not None:  # a shard build links nothing
            return _stand_in(output)
    if unit is None or nested:
        os.execvp(real, [real, *args])
    cwd = os.getcwd()
    work = settings["work"]
    broker = _Broker(settings["broker"])
    source = unit.source if isinstance(unit, Unit) else \
        next((arg for arg in args if arg.endswith(SOURCE_SUFFIXES)), "")
    request: dict[str, Any] = {
        "argv": [real, *args], "cwd": cwd, "source": _normal(os.path.join(cwd, source), work),
        "env": {name: os.environ.get(name) for name in ENVIRONMENT}}
    if isinstance(unit, str):
        return _unkeyed(broker, request, unit, real, args)
    hashes = _Hashes()
    turn = None
    try:
        found = _from_cache(broker, request, unit, work, hashes)
        if found is None:
            return 0
        if found.get("gate"):
            turn = _turn(broker, request)
    except (Foreign, Late) as left:
        # a stand-in, so that the build tool goes on to the units after it (served from the
        # cache, or short enough to end in time); the factory throws away what it links
        if isinstance(left, Late):
            print(f"kernel-wheel-factory: {unit.source} not compiled: the build's time limit "
                  "would end it (the next build compiles it)", file=sys.stderr)
        _write_depfile(unit, [[request["source"], ""]], work)
        return _stand_in(unit.output)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"kernel-wheel-factory: the object cache did not answer ({exc}); compiling",
              file=sys.stderr)
        broker = None  # type: ignore[assignment]
    started = time.monotonic()
    try:
        status = subprocess.call([real, *unit.run], env={**os.environ, NESTED: "1"})
    finally:
        if turn is not None:
            turn.close()  # the next compile may start
    if status == 0 and broker is not None:
        _hand_over(broker, request, unit, work, hashes, time.monotonic() - started)
    _remove_own_depfile(unit, cwd)
    return status


def _unkeyed(broker: _Broker, request: dict[str, Any], why: str, real: str,
             args: list[str]) -> int:
    """A compile the cache cannot key: the broker told why, then run as written (in its turn,
    where the broker orders the compiles: the build needs it whatever the time limit)."""
    said = _tell(broker, {"op": "skip", "why": why, **request})
    if not said.get("gate"):
        os.execvp(real, [real, *args])
    turn = _turn(broker, request, bounded=False)
    try:
        return subprocess.call([real, *args])
    finally:
        if turn is not None:
            turn.close()


def _hand_over(broker: _Broker, request: dict[str, Any], unit: Unit, work: str,
               hashes: _Hashes, seconds: float) -> None:
    """The object a compile of `seconds` made, with the inputs the compiler read, to the
    broker; or why it cannot be kept."""
    cwd = request["cwd"]
    inputs = _inputs(unit, cwd, work, _Hashes())  # read afresh: as the compiler read them
    if not isinstance(inputs, str) and not _unchanged(inputs, work, hashes):
        inputs = "a file it read changed while it compiled"
    if isinstance(inputs, str):
        _tell(broker, {"op": "skip", "why": inputs, **request})
        return
    output = os.path.join(cwd, unit.output)
    try:
        size = os.path.getsize(output)
    except OSError:
        _tell(broker, {"op": "skip", "why": "the compiler wrote no object", **request})
        return
    _tell(broker, {"op": "store", "inputs": inputs, "seconds": round(seconds, 3), **request},
          output, size)


def _unchanged(inputs: list[list[str]], work: str, before: _Hashes) -> bool:
    """Whether every input hashed before the compile (to look for its object) still has that
    hash: a file changed meanwhile may have been read in either version."""
    for path, digest in inputs:
        real = _real(path, work)
        if real in before.known:
            earlier = before.known[real]
            if earlier is None or earlier[0] != digest:
                return False
    return True


def _remove_own_depfile(unit: Unit, cwd: str) -> None:
    if unit.own_depfile:
        try:
            os.unlink(os.path.join(cwd, unit.depfile or ""))
        except OSError:
            pass


def _tell(broker: _Broker, header: dict[str, Any], payload: str | None = None,
          size: int = 0) -> dict[str, Any]:
    """Hand the broker a note or an object, and what it answered; a broker gone costs nothing
    but the caching."""
    try:
        answer, connection = broker.ask(header, payload, size)
        connection.close()
        return answer
    except (OSError, ValueError) as exc:
        print(f"kernel-wheel-factory: the object cache did not answer ({exc})", file=sys.stderr)
        return {}
