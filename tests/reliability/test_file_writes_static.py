"""Static check: every file `tasks/` and `flows/` write goes through `files/safe_files.py`.

A direct write (``Path.write_text``, ``open(p, "w")``, ``pq.write_table(t, p)``,
``df.to_parquet(p)``, ``fig.savefig(p)``, ``os.replace``...) would follow a planted
symlink, get the process umask instead of the documented modes, or appear
half-written; docs/files.md says how to write a file instead. The only modules
allowed to touch the file system directly are the safe-file modules
themselves; `ParquetWriter` and `savefig` are allowed only where they are given
a `NewFile` (`files/outputs.py::parquet_writer`, `reports/plots.py::_save`).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ALLOWED_MODULES = {"files/safe_files.py", "files/staging_dir.py", "files/staging_reaper.py"}
ALLOWED_CALLS = {("files/outputs.py", "ParquetWriter"), ("reports/plots.py", "savefig")}
WRITE_METHODS = {"write_text", "write_bytes", "touch", "to_parquet", "to_csv", "to_json",
                 "to_feather", "savefig", "ParquetWriter", "OSFile", "output_stream",
                 "write_feather", "symlink_to", "hardlink_to"}
OWNER_WRITES = {"os": {"open", "replace", "rename", "renames", "link", "symlink", "mkfifo",
                       "chmod"},
                "shutil": {"copyfile", "copy", "copy2", "copytree", "move"},
                "pq": {"write_table"}, "parquet": {"write_table"}}


def _writes_mode(call: ast.Call, method: bool) -> bool:
    modes = call.args[0:1] if method else call.args[1:2]
    modes = [*modes, *(k.value for k in call.keywords if k.arg == "mode")]
    return any(isinstance(m, ast.Constant) and isinstance(m.value, str)
               and set(m.value) & set("wax+") for m in modes)


def direct_writes(source: str, module: str) -> list[str]:
    """`line: call` of every direct file write in `source` (see the module docstring)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
        owner = f.value.id if isinstance(f, ast.Attribute) and isinstance(f.value,
                                                                           ast.Name) else ""
        bad = (
            (name in WRITE_METHODS and (module, name) not in ALLOWED_CALLS)
            or name in OWNER_WRITES.get(owner, ())
            or (name == "open" and owner != "os"
                and _writes_mode(node, method=isinstance(f, ast.Attribute)))
        )
        if bad:
            found.append(f"{node.lineno}: {ast.unparse(f)}")
    return found


def _modules() -> list[Path]:
    return sorted(p for d in ("tasks", "flows") for p in (REPO / d).rglob("*.py"))


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(REPO)))
def test_tasks_and_flows_write_files_only_through_safe_files(path):
    module = str(path.relative_to(REPO))
    if module in ALLOWED_MODULES:
        return
    found = direct_writes(path.read_text(encoding="utf-8"), module)
    assert not found, f"{module} writes files directly (use files/safe_files.py): {found}"


def test_the_checker_catches_direct_writes():
    bad = """
from pathlib import Path
import os, shutil
import pyarrow.parquet as pq
Path("r.md").write_text("x")
(out / "m.json").write_bytes(b"x")
open(path, "w").write("x")
open(path, mode="ab")
path.open("w")
pq.write_table(table, "v.parquet")
df.to_parquet("v.parquet")
df.to_csv(p)
fig.savefig("p.png")
os.replace(a, b)
os.open(p, os.O_CREAT)
shutil.copy2(a, b)
writer = pq.ParquetWriter("v.parquet", schema)
"""
    found = direct_writes(bad, "tasks/report.py")
    assert len(found) == 13, found
    good = """
open(path).read()
open(path, "rb")
path.read_bytes()
with NewFile(path) as fh:
    fh.write(b"x")
write_file(path, data)
"""
    assert direct_writes(good, "tasks/report.py") == []
    assert direct_writes("fig.savefig(fh)", "reports/plots.py") == []
