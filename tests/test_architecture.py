"""The layers point one way: a module imports only what sits below it (docs/architecture.md).

Every ``import`` of an ``evalledger`` module anywhere in the package (at the top of a
module, inside a function, or for type checking only: each is a dependency) is read
from the source and checked against the layer map below, which is the one in
docs/architecture.md. A layer may import itself and any layer of a lower rank, never
one of its own rank or above, except the few imports named in ``EXCEPTIONS``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import evalledger

PACKAGE = Path(evalledger.__file__).parent

DOMAIN = {"errors", "_values", "_text", "_files", "_lazy", "_gc", "_version", "statuses", "options",
          "hosts"}
# The rank of each layer: lower layers never import higher ones.
RANKS = {
    "domain": 0,  # values, statuses, options, liveness, file safety, the error root
    "ledger": 1,
    "pricing": 2, "suite": 2, "agents": 2,
    "projections": 3,
    "importers": 4, "executor": 4,
    "app": 5,
    "cli": 6, "viewer": 6,
    "__init__": 7,  # the package's top: the public names, loaded on first use
}
# Imports that point sideways on purpose, each with why.
EXCEPTIONS = {
    ("app._reports", "viewer"):
        "the HTML report is the viewer's own page rendered offline; imported only "
        "when one is written",
    ("cli._view", "viewer"): "`evalledger view` starts the viewer",
    ("cli._report", "viewer"): "`report --format html` is the viewer's page",
}


def _layer(module: str) -> str:
    """``evalledger.cli._run`` -> ``cli``; ``evalledger.hosts`` -> ``domain``."""
    parts = module.split(".")
    if len(parts) == 1:
        return "__init__"
    return "domain" if parts[1] in DOMAIN else parts[1]


def _imports(root: Path, path: Path) -> list[tuple[str, str, int]]:
    """(importing module, imported evalledger module, line) for each import in ``path``."""
    module = ".".join(path.relative_to(root.parent).with_suffix("").parts)
    module = module.removesuffix(".__init__")
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                targets = [".".join([*base, *([node.module] if node.module else [])])]
            else:
                targets = [node.module or ""]
        else:
            continue
        found += [(module, t, node.lineno) for t in targets
                  if t == "evalledger" or t.startswith("evalledger.")]
    return found


def upward_imports(root: Path = PACKAGE) -> list[str]:
    wrong = []
    for path in sorted(root.rglob("*.py")):
        for module, target, line in _imports(root, path):
            source, dest = _layer(module), _layer(target)
            if source == dest or RANKS[dest] < RANKS[source]:
                continue
            if (module.removeprefix("evalledger."), dest) in EXCEPTIONS:
                continue
            wrong.append(f"{module}:{line} imports {target} ({source} may not import {dest})")
    return wrong


def test_every_module_is_in_a_layer_of_the_map() -> None:
    layers = {_layer(".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts))
              for p in PACKAGE.rglob("*.py")}
    assert layers <= RANKS.keys(), layers - RANKS.keys()


def test_no_module_imports_a_layer_above_its_own() -> None:
    assert upward_imports() == []


def test_an_import_upward_or_sideways_is_named_wherever_it_is(tmp_path: Path) -> None:
    root = tmp_path / "evalledger"
    (root / "ledger").mkdir(parents=True)
    (root / "suite").mkdir()
    (root / "ledger" / "_store.py").write_text(
        "from evalledger.options import RunOptions\n"  # down: fine
        "def later():\n    from ..executor import run_batch\n")  # up, relative, in a function
    (root / "suite" / "_tasks.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    import evalledger.agents\n")  # sideways, for types only
    assert upward_imports(root) == [
        "evalledger.ledger._store:3 imports evalledger.executor (ledger may not import "
        "executor)",
        "evalledger.suite._tasks:3 imports evalledger.agents (suite may not import agents)",
    ]
