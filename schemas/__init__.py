"""Pandera models and validated schemas of every table that enters privpipe.

- `schemas.samples`: curve and stream samples (`CurveSamples`, `StreamSamples`).
- `schemas.policy`: the TOML budget policy loader (`load_policy`, `Domain`).
- `schemas.policy_table`: the policy as a table (`PolicyTable`, `policy_table`).
- `schemas.problems`: pandera failures to `Problem` records without raw values.
- `schemas.errors`: the error family and exit codes.
"""

from importlib import import_module
from typing import Any

from schemas.errors import (
    EXIT_BAD_INPUT,
    EXIT_DENIED,
    EXIT_INTEGRITY,
    EXIT_INTERNAL,
    EXIT_OK,
    BadInputError,
    ParameterError,
    PolicyError,
    PrivpipeError,
    Problem,
    ValidationError,
)

# The pandera-based names load on first use (PEP 562): importing the error family
# (every CLI command does) must not import pandas and pandera.
_LAZY = {
    "Domain": "schemas.policy", "Policy": "schemas.policy", "load_policy": "schemas.policy",
    "parse_policy": "schemas.policy", "PolicyTable": "schemas.policy_table",
    "policy_table": "schemas.policy_table", "validate_policy_table": "schemas.policy_table",
    "problems_from_schema_errors": "schemas.problems", "CurveSamples": "schemas.samples",
    "StreamSamples": "schemas.samples", "curve_samples_schema": "schemas.samples",
    "stream_samples_schema": "schemas.samples",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'schemas' has no attribute {name!r}")


__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_DENIED",
    "EXIT_INTEGRITY",
    "EXIT_INTERNAL",
    "EXIT_OK",
    "BadInputError",
    "CurveSamples",
    "Domain",
    "ParameterError",
    "Policy",
    "PolicyError",
    "PolicyTable",
    "PrivpipeError",
    "Problem",
    "StreamSamples",
    "ValidationError",
    "curve_samples_schema",
    "load_policy",
    "parse_policy",
    "policy_table",
    "problems_from_schema_errors",
    "stream_samples_schema",
    "validate_policy_table",
]
