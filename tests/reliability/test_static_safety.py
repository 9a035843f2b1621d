"""Static checks: SQL is parameterised; noise generators are seeded from the ledger only.

SQL: every `execute`/`executemany`/`sql`/`query` call in `ledger/` and `ingest/`
gets a constant statement, a constant template `.format`-ed with constants, or
an f-string whose every interpolation is a quoting helper (`quote_ident`,
`quote_literal`, `int`) or one of the reviewed fragments below (each built only
from constants and quoting helpers; a new one fails this test until reviewed).
`%` formatting of SQL is never allowed. Values always go in as `?` parameters.

RNG: no module under `mechanisms/`, `tasks/` or `flows/` calls
`np.random.default_rng()` without a seed, or any global `np.random.*` sampler.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SQL_METHODS = {"execute", "executemany", "sql", "query", "_query"}
QUOTERS = {"quote_ident", "quote_literal", "q", "int"}
# (file, interpolated source) -> why it is not attacker-controlled
REVIEWED = {
    ("ledger/summaries.py", "query"): "one of the module's constant SQL texts, passed by callers",
    ("ledger/audit_data.py", "sql"): "_rows(con, sql): every caller passes a string literal",
    ("ledger/audit_views.py", "sql"): "_rows(con, sql): a module constant (string literals and "
                                      "_FILTER, itself literal; values are ? parameters)",
    ("ledger/audit_views.py", "_MARKS"): "a module constant of string literals only",
    ("ledger/entries.py", "select"): "CAST expressions over the constant ENTRY_COLUMNS",
    ("ledger/settle.py", "_LOOKUP"): "a module constant of string literals only",
    ("ledger/verify.py", "_CHAIN_SQL"): "_chain_sql(): constants and HASHED_COLUMNS only",
    ("ledger/verify.py", "_BALANCE_SQL"): "a module constant of string literals only",
    ("ledger/verify.py", "cols"): "', '.join(domain_mac_columns(v)) or a constant column list",
    ("ledger/schema.py", "cols"): "', '.join(domain_mac_columns(v)): constant column names",
    ("ledger/storage.py", "cols"): "', '.join of constant column names (domain MAC columns)",
    ("ingest/source.py", "self.relation"): "built by _attach from quote_ident/quote_literal",
    ("ingest/source.py", "relation"): "returned by _attach (quote_ident/quote_literal)",
    ("ingest/source.py", "rel"): "read_csv/read_parquet(quote_literal(path)) subquery",
    ("ingest/plan.py", "', '.join(aggs)"): "aggregates over quote_ident(column)",
    ("ingest/plan.py", "src.relation"): "OpenedSource.relation (see source.py)",
    ("ingest/defaults.py", "aggs"): "aggregates over quote_ident(column)",
    ("ingest/defaults.py", "src.relation"): "OpenedSource.relation (see source.py)",
    ("ingest/plan.py", "lat"): "lat = q(domain.lat_column), quote_ident of the column",
    ("ingest/rows.py", "plan.sql"): "_select_sql: quote_ident of every column name",
    ("ingest/rows.py", "plan.typed_sql"): "_select_sql over OpenedSource.typed_csv",
    ("ingest/plan.py", "head"): "OpenedSource.relation LIMIT a module constant",
    ("ingest/plan.py", "where"): "_check_text_columns: constant SQL around quote_ident(column)",
    ("ingest/plan.py", "relation"): "OpenedSource.typed_csv: quote_literal of path, types",
    ("ingest/source.py", "sql"): "OpenedSource.query(sql): each caller's SQL is checked here",
    ("ingest/source.py", "src.relation"): "OpenedSource.relation (built by _attach)",
    ("ingest/check.py", "src.relation"): "OpenedSource.relation (see source.py)",
    # ledger.filters.Filter.where: "col = ?" / "created_at >= CAST(? AS TIMESTAMP)" over
    # constant column names and a constant alias; the values go in as parameters
    ("ledger/audit_data.py", "cond"): "Filter.where(): constant SQL, values as ? parameters",
    ("ledger/history.py", "cond"): "Filter.where(): constant SQL, values as ? parameters",
    ("ledger/queries.py", "cond"): "Filter.where() (+ constant EXISTS around another one)",
    ("ledger/queries.py", "ent"): "Filter.where('e'): constant SQL, values as ? parameters",
    ("ledger/queries.py", "rel"): "Filter.where('r') + ' AND r.release_id = ?'",
    ("ledger/queries.py", "spent"): "'a.spent' or a constant subquery (the time is a ?)",
    ("ledger/queries.py", "cap"): "'a.cap' or a constant subquery (the time is a ?)",
    ("ledger/queries.py", "sql"): "EXPORTS[what]: module constants; `what` checked first",
    # ATTACH and COPY FROM DATABASE take no parameters: a literal and an identifier, each
    # quoted by doubling its quote character (the backup's own temporary path, the
    # database name DuckDB reports)
    ("ledger/backup.py", "quoted"): "str(tmp) with ' doubled: one SQL string literal",
    ("ledger/backup.py", "db.replace(chr(34), chr(34) * 2)"): "current_database(), \" doubled",
}
RNG_ALLOWED = {"default_rng", "Generator", "SeedSequence", "PCG64", "PCG64DXSM", "Philox",
               "SFC64", "MT19937", "BitGenerator"}


def _py_files(*dirs: str) -> list[Path]:
    return sorted(p for d in dirs for p in (REPO / d).rglob("*.py"))


def _is_const_str(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def _is_constant_name(node: ast.AST) -> bool:
    name = node.id if isinstance(node, ast.Name) else (
        node.attr if isinstance(node, ast.Attribute) else "")
    return bool(name) and name.lstrip("_").isupper()


def _is_const_join(node: ast.AST) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "join" and _is_const_str(node.func.value)
            and len(node.args) == 1 and _is_constant_name(node.args[0]))


def _is_const_value(v: ast.AST) -> bool:
    return (_is_const_str(v) or _is_const_join(v)
            or isinstance(v, ast.JoinedStr) and all(_is_const_str(x) for x in v.values))


def _const_names(scope: ast.AST) -> set[str]:
    """Names whose every assignment in `scope` is a constant SQL fragment.

    Constant fragments: string literals, f-strings without interpolation,
    `", ".join(SOME_CONSTANT)`, and loop variables over an UPPERCASE constant
    (`for ddl in TABLES:`).
    """
    assigned: dict[str, list[bool]] = {}
    for n in ast.walk(scope):
        if isinstance(n, ast.Assign):
            for t in n.targets:
                if isinstance(t, ast.Name):
                    assigned.setdefault(t.id, []).append(_is_const_value(n.value))
        elif isinstance(n, ast.For) and isinstance(n.target, ast.Name):
            assigned.setdefault(n.target.id, []).append(_is_constant_name(n.iter))
    return {k for k, oks in assigned.items() if all(oks)}


def _sql_problems(path: Path) -> list[str]:
    rel = str(path.relative_to(REPO))
    tree = ast.parse(path.read_text(), filename=rel)
    parent = {c: n for n in ast.walk(tree) for c in ast.iter_child_nodes(n)}
    module_consts = _const_names(tree)
    problems = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in SQL_METHODS and node.args):
            continue
        scope = node
        while scope in parent and not isinstance(scope, ast.FunctionDef | ast.AsyncFunctionDef):
            scope = parent[scope]
        consts = _const_names(scope) if scope is not tree and scope in parent else module_consts
        arg = node.args[0]
        where = f"{rel}:{node.lineno}"
        if _is_const_str(arg) or (isinstance(arg, ast.Name) and arg.id in consts):
            continue
        if isinstance(arg, ast.BinOp) and isinstance(arg.op, ast.Mod):
            problems.append(f"{where}: SQL built with % formatting")
        elif isinstance(arg, ast.Call) and isinstance(arg.func, ast.Attribute) \
                and arg.func.attr == "format":
            ok = (isinstance(arg.func.value, ast.Name) and arg.func.value.id in consts
                  and not arg.args and all(_is_const_str(k.value) for k in arg.keywords))
            if not ok:
                problems.append(f"{where}: SQL built with .format() of non-constants")
        elif isinstance(arg, ast.JoinedStr):
            for v in arg.values:
                if not isinstance(v, ast.FormattedValue):
                    continue
                e = v.value
                if isinstance(e, ast.Call) and isinstance(e.func, ast.Name) \
                        and e.func.id in QUOTERS:
                    continue
                if isinstance(e, ast.Name) and e.id in consts:
                    continue
                src = ast.unparse(e)
                if (rel, src) not in REVIEWED:
                    problems.append(f"{where}: unreviewed interpolation {{{src}}} in SQL")
        elif (rel, ast.unparse(arg)) in REVIEWED:
            continue
        elif isinstance(arg, ast.Name | ast.Attribute | ast.BinOp):
            problems.append(f"{where}: SQL from a non-constant expression {ast.unparse(arg)}")
    return problems


@pytest.mark.parametrize("path", _py_files("ledger", "ingest"),
                         ids=lambda p: str(p.relative_to(REPO)))
def test_sql_is_parameterised(path):
    assert _sql_problems(path) == []


def test_the_sql_checker_catches_injection_patterns(tmp_path, monkeypatch):
    code = ("def f(con, user):\n"
            "    con.execute(f\"SELECT * FROM entries WHERE user_id = '{user}'\")\n"
            "    con.execute(\"SELECT * FROM t WHERE u = '%s'\" % user)\n"
            "    con.execute(\"SELECT {x}\".format(x=user))\n"
            "    con.execute(\"SELECT ?\", [user])\n")
    tree_path = tmp_path / "ledger" / "probe.py"
    tree_path.parent.mkdir()
    tree_path.write_text(code)
    monkeypatch.setattr(__import__(__name__), "REPO", tmp_path)
    problems = _sql_problems(tree_path)
    assert len(problems) == 3, problems


def _rng_problems(path: Path) -> list[str]:
    rel = str(path.relative_to(REPO))
    problems = []
    for node in ast.walk(ast.parse(path.read_text(), filename=rel)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        chain = ast.unparse(node.func)
        parts = chain.split(".")
        if len(parts) >= 3 and parts[-2] == "random" and parts[0] in ("np", "numpy"):
            name = parts[-1]
            if name not in RNG_ALLOWED:
                problems.append(f"{rel}:{node.lineno}: global numpy sampler {chain}()")
            elif name == "default_rng" and (
                    not node.args and not node.keywords
                    or node.args and isinstance(node.args[0], ast.Constant)
                    and node.args[0].value is None):
                problems.append(f"{rel}:{node.lineno}: unseeded {chain}()")
    return problems


@pytest.mark.parametrize("path", _py_files("mechanisms", "tasks", "flows"),
                         ids=lambda p: str(p.relative_to(REPO)))
def test_no_unseeded_or_global_numpy_randomness(path):
    assert _rng_problems(path) == []


def test_the_rng_checker_catches_unseeded_generators(tmp_path, monkeypatch):
    probe = tmp_path / "mechanisms" / "probe.py"
    probe.parent.mkdir()
    probe.write_text("import numpy as np\n"
                     "a = np.random.default_rng()\n"
                     "b = np.random.normal(0, 1)\n"
                     "c = np.random.default_rng(None)\n"
                     "d = np.random.default_rng(1234)\n")
    monkeypatch.setattr(__import__(__name__), "REPO", tmp_path)
    assert len(_rng_problems(probe)) == 3


def test_release_noise_is_seeded_from_the_ledger_hmac():
    # the only generators tasks/ create are the keyed ChaCha20 generators of
    # tasks/keyed_rng.py, keyed with the chunk's seeds, which the flow fills from
    # Ledger.noise_seed (HMAC of the key)
    uses = []
    for path in _py_files("tasks"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and ast.unparse(node.func).endswith(
                    ("default_rng", "release_generator", "ChaCha")):
                uses.append((path.name, ast.unparse(node)))
    assert uses, "tasks/ must create the release generators"
    assert not [u for u in uses if "default_rng" in u[1]], uses
    assert {u[1] for u in uses if u[0] == "privatize.py"} == {"release_generator(seeds[u])"}
    assert ("keyed_rng.py", "ChaCha(key=seed, counter=0, rounds=20)") in uses
