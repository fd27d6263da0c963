"""Compile a cuTile project's declared kernels ahead of time; run by the interpreter of the
project's build environment (cuda-tile and its tileiras installed), never imported by the
factory.

    python export.py REQUEST.json

The request names the unpacked wheel (`content`, importable), the loader module's file, the
SMs to compile for, the assembler cuTile will find on PATH (its version line and the SMs it
compiles for, as the factory asked it) and the declared kernels with their signatures. For
each kernel it writes, into <its top-level package>/_kwf_cutile, a cubin per signature and SM
and the signature's Tile IR bytecode, and a manifest.json per package; the loader module is
copied beside each package's __init__.py. What it did goes to the request's `result` file as
JSON. A problem the project can fix is one line on stderr beginning with "error:" and exit
status 3.
"""

import hashlib
import importlib
import importlib.metadata
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any


class Refused(Exception):
    pass


def _loader(path):
    spec = importlib.util.spec_from_file_location("_kwf_cutile_loader", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _first_line(error):
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0]


def export(request):
    content = Path(request["content"])
    sys.path.insert(0, str(content))
    loader = _loader(request["loader"])
    assembler, supported = request["assembler"], request["supported"]
    wanted = request["sms"]
    missing = [sm for sm in wanted if sm not in supported]
    if missing:
        raise Refused(f"tileiras ({assembler}) cannot compile for {', '.join(missing)}; it "
                      f"compiles for {', '.join(supported)}")
    manifests: dict[str, dict[str, Any]] = {}
    counts = {"signatures": 0, "cubins": 0}
    for declared in request["kernels"]:
        kernel, function = _kernel(declared["function"])
        key = f"{function.__module__}:{function.__qualname__}"
        top = function.__module__.split(".")[0]
        if not (content / top / "__init__.py").is_file():
            raise Refused(f"{declared['function']}: {top} is not a package of the wheel (the "
                          "loader needs an __init__.py to go in)")
        manifest = manifests.setdefault(top, {"format": loader.FORMAT, "sms": wanted,
                                              "kernels": {}})
        entries = manifest["kernels"].setdefault(key, [])
        for parameters in declared["signatures"]:
            entries.append(_compiled(declared["function"], kernel, function, parameters,
                                     loader, content / top / loader.FOLDER, wanted))
            counts["signatures"] += 1
            counts["cubins"] += len(wanted)
    for top, manifest in manifests.items():
        folder = content / top / loader.FOLDER
        (folder / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True)
                                              + "\n", encoding="utf-8")
        (content / top / f"{request['module']}.py").write_bytes(
            Path(request["loader"]).read_bytes())
    return {"assembler": assembler, "supported": supported,
            "cuda_tile": importlib.metadata.version("cuda-tile"),
            "packages": sorted(manifests), **counts}


def _kernel(declared):
    """The @ct.kernel a declared `module:attribute` names, and its Python function."""
    import cuda.tile as ct

    module_name, _, attribute = declared.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as error:
        raise Refused(f"{declared}: importing {module_name} failed: "
                      f"{_first_line(error)}") from None
    kernel = getattr(module, attribute, None)
    if not isinstance(kernel, ct.kernel):
        raise Refused(f"{declared} is not a @ct.kernel (found {type(kernel).__name__})")
    return kernel, kernel._annotated_function.pyfunc


def _compiled(declared, kernel, function, parameters, loader, folder, wanted):
    """One declared signature of a kernel compiled into `folder`: its Tile IR bytecode and a
    cubin per SM; its manifest entry."""
    from cuda.tile._compile import compile_tile
    from cuda.tile.compilation import export_kernel

    try:
        signature = loader.signature_of(parameters).with_mangled_symbol(function.__name__)
    except (TypeError, ValueError) as error:
        raise Refused(f"{declared}: a declared signature does not fit the kernel: "
                      f"{_first_line(error)}") from None
    name = hashlib.sha256(signature.symbol.encode()).hexdigest()[:20]
    shown = signature.symbol
    try:
        made = compile_tile(kernel._annotated_function, (signature,), sm_arch=None,
                            compiler_options=kernel._compiler_options,
                            return_bytecode=True, return_cubin=False)
    except Exception as error:
        raise Refused(f"{declared}: {shown} does not compile: {_first_line(error)}") from None
    if made.library_lifecycle_providers:
        raise Refused(f"{declared}: {shown} links tile libraries with a life cycle of their "
                      "own, which a shipped cubin cannot set up")
    (folder / "tileir").mkdir(parents=True, exist_ok=True)
    tileir = f"tileir/{name}.tileirbc"
    (folder / tileir).write_bytes(bytes(made.bytecode))
    cubins = {}
    for sm in wanted:
        (folder / sm).mkdir(parents=True, exist_ok=True)
        target = f"{sm}/{name}.cubin"
        try:
            export_kernel(kernel, [signature], str(folder / target), gpu_code=sm,
                          output_format="cubin")
        except Exception as error:
            raise Refused(f"{declared}: {shown} does not compile for {sm}: "
                          f"{_first_line(error)}") from None
        cubins[sm] = target
    return {"symbol": signature.symbol, "parameters": parameters, "cubins": cubins,
            "tileir": tileir}


def main():
    request = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    try:
        result = export(request)
    except Refused as refused:
        print(f"error: {refused}", file=sys.stderr)
        return 3
    Path(request["result"]).write_text(json.dumps(result) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
