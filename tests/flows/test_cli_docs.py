"""The documentation in docs/ says what the code does.

Every policy example parses, the key table lists every key the parser accepts,
every input example validates, every command the operator docs list answers
--help, and every relative link of docs/ and the README resolves (on main the
README linked to ../shared/DESIGN.md, which a clone does not have).
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from flows.cli import app
from schemas.policy import _DOMAIN_KEYS, PUBLIC_KEYS, parse_policy

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
runner = CliRunner()


def _blocks(name: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", (DOCS / name).read_text(), re.S)


def test_every_policy_example_parses_and_every_key_is_documented():
    blocks = _blocks("policy.md", "toml")
    kinds = {d.kind for b in blocks for d in parse_policy(tomllib.loads(b)).domains.values()}
    assert kinds == {"curves", "streams"} and len(blocks) >= 4
    table = (DOCS / "policy.md").read_text()
    documented = set(re.findall(r"^\| `([a-z_]+)`(?:, `([a-z_]+)`)? \|", table, re.M))
    names = {n for pair in documented for n in pair if n}
    assert set(_DOMAIN_KEYS) | set(PUBLIC_KEYS) <= names, set(_DOMAIN_KEYS) - names


@pytest.mark.parametrize("index,kind", [(0, "curves"), (2, "streams")])
def test_input_examples_validate(tmp_path, index, kind):
    csv = tmp_path / "example.csv"
    csv.write_text(_blocks("inputs.md", "csv")[index])
    r = runner.invoke(app, ["validate", str(csv), "--kind", kind])
    assert r.exit_code == 0, r.output


def test_every_documented_command_answers_help():
    block = _blocks("operations.md", "text")[0]
    commands = set(re.findall(r"^privpipe ((?:release )?[a-z]+)", block, re.M)) - {"ledger"}
    ledger_part = block[block.index("privpipe ledger "):]
    commands |= {f"ledger {c}" for c in re.findall(r"(?:ledger|\|)\s+([a-z]+)", ledger_part)}
    commands |= {"ledger policy apply"}
    assert {"validate", "release curves", "release streams", "audit", "serve",
            "ledger init", "ledger export", "ledger verify"} <= commands, commands
    for cmd in sorted(commands):
        r = runner.invoke(app, [*cmd.split(), "--help"])
        assert r.exit_code == 0, (cmd, r.output)


def test_relative_links_resolve():
    for page in [*DOCS.glob("*.md"), REPO / "README.md"]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" in target:
                continue
            assert (page.parent / target).exists(), (page.name, target)


def test_every_page_of_docs_is_linked_from_the_index():
    index = (DOCS / "index.md").read_text()
    missing = [p.name for p in DOCS.glob("*.md") if p.name != "index.md"
               and f"]({p.name})" not in index]
    assert missing == [], f"link these from docs/index.md: {missing}"
