"""Helpers shared by the ingestion tests."""

import csv
from pathlib import Path

import pytest

from schemas.policy import Domain, parse_policy

# curves domains declare what they release outside the noise
PUBLIC = {"public": {"duration": True, "points": True}}


def make_domain(**keys) -> Domain:
    """A domain from policy keys, validated by the real policy loader."""
    base = {"kind": "curves", **PUBLIC, "notion": "gp", "cap": "1"}
    if keys.get("kind") == "streams":
        base = {"kind": "streams", "notion": "wevent", "cap": "1", "w": 3,
                "value_range": [0.0, 100.0]}
    base.update(keys)
    return parse_policy({"domains": {"d": base}}).domain("d")


def write_csv(path: Path, header: list[str], rows: list[list[object]]) -> Path:
    """Write a CSV with the csv module (quoting as needed)."""
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)
    return path


@pytest.fixture
def curves_domain() -> Domain:
    return make_domain()
