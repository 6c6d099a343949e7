"""Which code computed a cache: a sha256 a cache is keyed by, so that changed code computes it again.

A cache of values peftviz's code computes (the estimates' draws, the α sweep's rows) holds for the
code that computed them only. `code_identity(roots)` is a sha256 over the source of the modules
`roots` name and of every peftviz module those import, at any depth, lazy imports inside functions
too (read with `ast` from the files, nothing imported), in the order of their names. Editing any of
that code, even a comment, changes the identity, and a cache keyed by it is computed again: nobody
has to remember to bump a format number by hand. A file's format number stays for its layout.
Libraries (numpy, scipy, torch) are not in it: their versions are the environment's, not the code's.

The identity is computed once per process (the files are read once): the code of a running process
does not change under it.
"""

from __future__ import annotations

import ast
import functools
import hashlib
from pathlib import Path

import peftviz

PACKAGE = "peftviz"


def module_file(name: str, package_root: Path | None = None) -> Path | None:
    """The source file of the peftviz module `name` (a module or a package's __init__.py), or None."""
    parts = name.split(".")
    if parts[0] != PACKAGE:
        return None
    folder = (package_root or Path(peftviz.__file__).parent).joinpath(*parts[1:])
    return next((path for path in (folder.with_suffix(".py"), folder / "__init__.py") if path.is_file()), None)


def _imported(tree: ast.AST, module: str, is_package: bool, package_root: Path) -> set[str]:
    """The peftviz modules a module's code imports: `import a.b`, `from a.b import c` (c itself where
    it is a module), relative imports resolved against `module`."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")[: len(module.split(".")) - node.level + is_package]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                found.add(submodule if module_file(submodule, package_root) else base)
    return {name for name in found if module_file(name, package_root)}


def modules_reached(roots: tuple[str, ...], package_root: Path | None = None) -> dict[str, Path]:
    """Every peftviz module the `roots` are or import, at any depth: name -> its file, by name."""
    package_root = package_root or Path(peftviz.__file__).parent
    reached: dict[str, Path] = {}
    waiting = list(roots)
    while waiting:
        name = waiting.pop()
        path = module_file(name, package_root)
        if name in reached or path is None:
            continue
        reached[name] = path
        tree = ast.parse(path.read_bytes(), filename=str(path))
        waiting += sorted(_imported(tree, name, path.name == "__init__.py", package_root))
    return dict(sorted(reached.items()))


@functools.cache
def code_identity(roots: tuple[str, ...], extra: str = "") -> str:
    """`source_digest` of `modules_reached(roots)` and `extra` (e.g. one function's source), once per process."""
    return source_digest(modules_reached(roots), extra)


def source_digest(modules: dict[str, Path], extra: str = "") -> str:
    """sha256 over the source bytes of `modules` (name -> file), each after its name and length, then `extra`."""
    digest = hashlib.sha256()
    for name, path in sorted(modules.items()):
        source = path.read_bytes()
        digest.update(f"{name}\0{len(source)}\0".encode() + source)
    digest.update(extra.encode())
    return digest.hexdigest()
