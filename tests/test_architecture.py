"""The arrows of docs/design.md hold: flows -> tasks -> reports -> files -> core.

The core is ``mechanisms``, ``ledger``, ``schemas`` and ``ingest``. Walks the
AST of every Python file (so imports inside functions, ``try`` blocks and
``importlib.import_module("...")`` / ``__import__("...")`` calls with literal
names count too; only an ``if TYPE_CHECKING:`` block, which is never run, is
skipped) and checks:

- ``mechanisms/`` imports numpy, scipy, the standard library and itself only;
  in particular never prefect, duckdb, pandera, matplotlib or pandas;
- the core never imports ``flows``, ``tasks``, ``reports`` or ``files``;
- ``files/`` (safe files, staging, release directories) never imports
  ``flows``, ``tasks`` or ``reports``;
- ``reports/`` (rendering) never imports ``flows`` or ``tasks``: tasks gather
  the data, reports render it;
- ``tasks/`` never imports ``flows``;
- ``privpipe/`` (the analyst's `Session`) is the topmost layer: it may import
  ``flows`` and everything below; nothing imports it.
"""

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FORBIDDEN_IN_CORE = {"prefect", "duckdb", "pandera", "matplotlib", "pandas"}
ALLOWED_IN_CORE = {"numpy", "scipy", "mechanisms"} | set(sys.stdlib_module_names) | {
    "__future__"}
ORCHESTRATION = {"flows", "tasks", "reports", "files", "privpipe"}
CORE = ("mechanisms", "ledger", "schemas", "ingest")


def imported_modules(source: str, package: str) -> set[str]:
    """Top-level names of every module `source` imports (relative ones resolved to `package`)."""
    tree = ast.parse(source)
    for node in ast.walk(tree):  # type-only imports never run: drop them
        if isinstance(node, ast.If) and getattr(node.test, "id", getattr(
                node.test, "attr", None)) == "TYPE_CHECKING":
            node.body = []
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                out.add(package)
            elif node.module:
                out.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
            if name in ("import_module", "__import__") and node.args and isinstance(
                    node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                out.add(node.args[0].value.lstrip(".").split(".")[0] or package)
    return out


def _files(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def _imports(path: Path) -> set[str]:
    package = path.relative_to(ROOT).parts[0]
    return imported_modules(path.read_text(encoding="utf-8"), package)


def test_helper_sees_every_kind_of_import():
    src = (
        "import numpy as np\nimport pandas.core\nfrom duckdb import connect\n"
        "from . import cost\ndef f():\n    import prefect\n"
        "try:\n    import matplotlib.pyplot\nexcept ImportError:\n    pass\n"
        "import importlib\nimportlib.import_module('pandera.pandas')\n__import__('flows.cli')\n"
        "if TYPE_CHECKING:\n    import tasks.x\n"
    )
    assert imported_modules(src, "mechanisms") == {
        "numpy", "pandas", "duckdb", "mechanisms", "prefect", "matplotlib", "importlib",
        "pandera", "flows"}


def test_core_files_exist():
    assert _files("mechanisms"), "mechanisms/ has no Python files"


@pytest.mark.parametrize("path", _files("mechanisms"), ids=lambda p: str(p.relative_to(ROOT)))
def test_mechanisms_are_pure(path):
    mods = _imports(path)
    assert not mods & FORBIDDEN_IN_CORE, f"{path} imports {sorted(mods & FORBIDDEN_IN_CORE)}"
    assert mods <= ALLOWED_IN_CORE, f"{path} imports {sorted(mods - ALLOWED_IN_CORE)}"


@pytest.mark.parametrize(
    "path",
    [p for pkg in CORE for p in _files(pkg)],
    ids=lambda p: str(p.relative_to(ROOT)))
def test_lower_layers_never_import_orchestration(path):
    bad = _imports(path) & ORCHESTRATION
    assert not bad, f"{path} imports {sorted(bad)}: the arrows point flows -> tasks -> core"


@pytest.mark.parametrize("path", _files("files"), ids=lambda p: str(p.relative_to(ROOT)))
def test_files_never_import_tasks_reports_or_flows(path):
    bad = _imports(path) & {"flows", "tasks", "reports"}
    assert not bad, f"{path} imports {sorted(bad)}"


@pytest.mark.parametrize("path", _files("reports"), ids=lambda p: str(p.relative_to(ROOT)))
def test_reports_render_only(path):
    bad = _imports(path) & {"flows", "tasks"}
    assert not bad, f"{path} imports {sorted(bad)}: tasks gather the data, reports render it"


def test_every_product_folder_is_checked():
    folders = {p.name for p in ROOT.iterdir() if (p / "__init__.py").exists()}
    assert folders <= set(CORE) | {"flows", "tasks", "reports", "files", "data", "privpipe"}, (
        folders)
    for pkg in ("reports", "files", "tasks", "privpipe"):
        assert _files(pkg), f"{pkg}/ has no Python files"


@pytest.mark.parametrize("path", _files("tasks"), ids=lambda p: str(p.relative_to(ROOT)))
def test_tasks_never_import_flows(path):
    assert "flows" not in _imports(path), f"{path} imports flows"


@pytest.mark.parametrize(
    "path",
    [p for pkg in (*CORE, "files", "reports", "tasks", "flows", "data") for p in _files(pkg)],
    ids=lambda p: str(p.relative_to(ROOT)))
def test_nothing_imports_the_topmost_layer(path):
    assert "privpipe" not in _imports(path), f"{path} imports privpipe (the topmost layer)"
