"""No function in the product folders is over 80 lines, but declared numeric kernels.

A function's length runs from its ``def`` line to its last line, docstring
included (decorators not counted). Functions are named ``path::qualname``
(``ingest/batch.py::_Batch.__init__``; a nested function as
``outer.inner``). A function that must stay long goes in `NUMERIC_KERNELS`
with the reason; both declared lists are checked to be still needed, so they
cannot go stale.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PRODUCT_FOLDERS = ("privpipe", "flows", "tasks", "ledger", "schemas", "ingest", "mechanisms",
                   "reports", "files")
MAX_LINES = 80

#: "path::function" -> why this one numeric kernel reads best as one function
NUMERIC_KERNELS: dict[str, str] = {}

def _lengths(tree: ast.AST, path: str) -> dict[str, int]:
    """``{"path::qualname": lines}`` of every function in `tree`."""
    out: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = prefix + child.name
                if not isinstance(child, ast.ClassDef):
                    out[f"{path}::{name}"] = child.end_lineno - child.lineno + 1
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(tree, "")
    return out


def _product_functions() -> dict[str, int]:
    out: dict[str, int] = {}
    for folder in PRODUCT_FOLDERS:
        if not (ROOT / folder).is_dir():
            continue
        for p in sorted((ROOT / folder).rglob("*.py")):
            rel = p.relative_to(ROOT).as_posix()
            out.update(_lengths(ast.parse(p.read_text(encoding="utf-8")), rel))
    return out


FUNCTIONS = _product_functions()
CHECKED = sorted(set(FUNCTIONS) - set(NUMERIC_KERNELS))


@pytest.mark.parametrize("name", CHECKED)
def test_function_is_at_most_80_lines(name):
    path, function = name.split("::")
    length = FUNCTIONS[name]
    assert length <= MAX_LINES, (
        f"{path}:{function}:{length} is over {MAX_LINES} lines: split it into named steps, "
        "or declare it in NUMERIC_KERNELS with the reason")


def test_declared_long_functions_are_still_long():
    # a declared entry whose function is gone or now short must leave the list
    for name in NUMERIC_KERNELS:
        assert name in FUNCTIONS, f"{name} no longer exists: remove it from the declared list"
        assert FUNCTIONS[name] > MAX_LINES, (
            f"{name} is {FUNCTIONS[name]} lines now: remove it from the declared list")


def test_the_walk_sees_the_product_and_measures_def_to_last_line():
    assert {n.split("/")[0] for n in FUNCTIONS} >= {"flows", "ingest", "mechanisms"}
    assert "mechanisms/reconstruct/period.py::detect_period_details" in FUNCTIONS
    assert "ingest/batch.py::_Batch.__init__" in FUNCTIONS
    body = "\n".join(f"    x{i} = {i}" for i in range(79))
    src = textwrap.dedent('''\
        class C:
            @property
            def f(self):
                """Doc."""
        ''') + textwrap.indent(body, "    ") + "\n"
    lengths = _lengths(ast.parse(src + "\n\ndef h():\n    def inner():\n        pass\n"), "m.py")
    assert lengths == {"m.py::C.f": 81, "m.py::h": 3, "m.py::h.inner": 2}
