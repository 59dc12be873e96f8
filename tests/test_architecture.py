"""The layers point one way: a module imports only what sits below it (docs/architecture.md).

Every ``import`` of an ``evalledger`` module anywhere in the package (at the top of a
module, inside a function, or for type checking only: each is a dependency) is read
from the source and checked against the layer map below, which is the one in
docs/architecture.md. A layer may import itself and any layer of a lower rank, never
one of its own rank or above, except the few imports named in ``EXCEPTIONS``.

The tests keep a rule of their own: no module imports a test module (``test_*.py``) or
a ``conftest.py``, not even in a program it hands another process; what they share
lives in helper modules beside them.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import evalledger

PACKAGE = Path(evalledger.__file__).parent

DOMAIN = {"errors", "_bounds", "_values", "_text", "_diffs", "_workspace_diff", "_files",
          "_lazy", "_gc", "_logs", "_version", "statuses", "options", "hosts"}
# The rank of each layer: lower layers never import higher ones.
RANKS = {
    "domain": 0,  # values, statuses, options, liveness, file safety, the error root
    "ledger": 1,
    "pricing": 2, "suite": 2, "agents": 2,
    "projections": 3,
    "importers": 4, "executor": 4,
    "render": 5,  # what the folds say: text, markdown, JUnit, the pages and the HTML report
    "app": 6,
    "cli": 7, "viewer": 7,
    "__init__": 8,  # the package's top: the public names, loaded on first use
}
# Imports that point sideways on purpose, each with why.
EXCEPTIONS = {
    ("cli._view", "viewer"): "`evalledger view` starts the viewer",
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


def test_rendering_sits_between_the_folds_and_the_application(tmp_path: Path) -> None:
    """A fold says nothing as text; rendering reads no ledger through the app and knows
    nothing of the viewer that shows its pages."""
    root = tmp_path / "evalledger"
    for folder in ("projections", "render", "app"):
        (root / folder).mkdir(parents=True)
    (root / "projections" / "_summary.py").write_text(
        "from evalledger.render import render_markdown\n")  # a fold that renders: up
    (root / "render" / "_html.py").write_text(
        "from evalledger.projections import RunSummary\n"  # down: fine
        "from evalledger.app import workspace_changes\n"  # a read: up
        "def later():\n    from evalledger.viewer import create_app\n")  # up
    (root / "app" / "_reports.py").write_text(
        "from evalledger.render import render_json\n"  # down: fine
        "def html():\n    from evalledger.viewer import create_app\n")  # up, even lazily
    assert upward_imports(root) == [
        "evalledger.app._reports:3 imports evalledger.viewer (app may not import viewer)",
        "evalledger.projections._summary:1 imports evalledger.render (projections may not "
        "import render)",
        "evalledger.render._html:2 imports evalledger.app (render may not import app)",
        "evalledger.render._html:4 imports evalledger.viewer (render may not import viewer)",
    ]


# -- the front ends ask through exported names -------------------------------------------

# The packages people and programs meet evalledger through: they use what the packages
# below them export, never a private module of theirs (``evalledger.app._repository``);
# the domain's shared helpers at the top (``evalledger._text``) are every layer's.
FRONTS = ("cli", "viewer")


def private_imports(root: Path = PACKAGE) -> list[str]:
    """Each import, in ``cli/`` and ``viewer/``, of another package's private module."""
    wrong = []
    for front in FRONTS:
        for path in sorted((root / front).glob("*.py")):
            for module, target, line in _imports(root, path):
                # evalledger.<package>._<module>: the shared helpers at the top
                # (``evalledger._text``) are every layer's.
                parts = target.split(".")
                if _layer(target) != front and any(p.startswith("_") for p in parts[2:]):
                    wrong.append(f"{module}:{line} imports {target}: import what "
                                 f"evalledger.{parts[1]} exports")
    return wrong


def test_the_front_ends_import_only_exported_names_of_other_packages() -> None:
    assert private_imports() == []


def test_a_private_import_of_another_package_is_named(tmp_path: Path) -> None:
    root = tmp_path / "evalledger"
    for folder in ("cli", "viewer", "app"):
        (root / folder).mkdir(parents=True)
    (root / "cli" / "_show.py").write_text(
        "from evalledger.app import load_summary\n"  # exported: fine
        "from ._common import pass_settings\n"  # its own package's: fine
        "def later():\n    from evalledger.app._repository import load_summary_page\n")
    (root / "viewer" / "_app.py").write_text("import evalledger.ledger._queries\n")
    (root / "app" / "_run.py").write_text("from evalledger.ledger._store import Ledger\n")
    assert private_imports(root) == [
        "evalledger.cli._show:4 imports evalledger.app._repository: import what "
        "evalledger.app exports",
        "evalledger.viewer._app:1 imports evalledger.ledger._queries: import what "
        "evalledger.ledger exports"]


# -- the tests themselves: a test module is never a library --------------------------------

TESTS = Path(__file__).resolve().parent


def _module_file(root: Path, module: str) -> Path | None:
    """The file of ``module`` (``tests.cli.helpers``) under ``root``'s parent, if any."""
    path = root.parent.joinpath(*module.split("."))
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imported(tree: ast.AST, package: str | None, first_line: int
              ) -> Iterator[tuple[str, int]]:
    """(module or name imported, line) for each import in ``tree``, and in each program
    it holds as a string (one another process runs: ``python -c``, where there is no
    ``package`` to import relative to)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                if package is None:
                    continue  # relative to nothing: it fails where it runs
                parts = package.split(".")
                base = ".".join([*parts[: len(parts) - node.level + 1],
                                 *([node.module] if node.module else [])])
            targets = [base, *(f"{base}.{alias.name}" for alias in node.names)]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and "import" in node.value:
            try:
                program = ast.parse(node.value)
            except SyntaxError:
                continue  # prose, not a program
            yield from _imported(program, None, first_line + node.lineno - 1)
            continue
        else:
            continue
        yield from ((target, first_line + node.lineno - 1) for target in targets)


def imports_of_test_modules(root: Path = TESTS) -> list[str]:
    """Each import, anywhere under ``root``, of a test module (``test_*.py``) or of a
    ``conftest.py``: in a module's code (at its top or in a function) or in a program it
    hands another process as a string. What tests share lives in helper modules;
    fixtures pytest shares stay in a conftest, which pytest loads and nobody imports."""
    wrong: set[tuple[str, int, str]] = set()
    for path in sorted(root.rglob("*.py")):
        module = ".".join(path.relative_to(root.parent).with_suffix("").parts)
        package = module.removesuffix(".__init__") if path.name == "__init__.py" \
            else module.rpartition(".")[0]
        for target, line in _imported(ast.parse(path.read_text(encoding="utf-8")), package, 1):
            found = _module_file(root, target)
            if found is not None and (found.name.startswith("test_")
                                      or found.name == "conftest.py"):
                wrong.add((str(path.relative_to(root.parent)), line, target))
    return [f"{where}:{line} imports {target}" for where, line, target in sorted(wrong)]


def test_no_test_module_or_conftest_is_imported_by_another_module() -> None:
    assert imports_of_test_modules() == []


def test_an_import_of_a_test_module_is_named_wherever_it_is(tmp_path: Path) -> None:
    # A tree of its own name: the programs below, read in this file too, name none of ours.
    root = tmp_path / "checks"
    (root / "cli").mkdir(parents=True)
    for name in ("__init__.py", "conftest.py", "helpers.py", "cli/__init__.py",
                 "cli/conftest.py", "cli/test_run.py", "cli/builders.py"):
        (root / name).write_text("")
    (root / "cli" / "test_show.py").write_text(
        "from .builders import test_data\n"  # a helper module: fine, whatever its names
        "from ..helpers import wait\n"  # fine
        "from .test_run import make_run\n"  # a test module, relative
        "from . import conftest\n"  # a conftest, as a name of its package
        "def later():\n    import checks.conftest\n"  # in a function
        "PROGRAM = '''\nimport sys\nfrom checks.cli.test_run import make_run\n'''\n")  # -c
    assert imports_of_test_modules(root) == [
        "checks/cli/test_show.py:3 imports checks.cli.test_run",
        "checks/cli/test_show.py:4 imports checks.cli.conftest",
        "checks/cli/test_show.py:6 imports checks.conftest",
        "checks/cli/test_show.py:9 imports checks.cli.test_run",
    ]
