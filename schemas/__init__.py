"""Pandera models and validated schemas of every table that enters privpipe.

- `schemas.samples`: curve and stream samples (`CurveSamples`, `StreamSamples`).
- `schemas.policy`: the TOML budget policy loader (`load_policy`, `Domain`).
- `schemas.policy_table`: the policy as a table (`PolicyTable`, `policy_table`).
- `schemas.problems`: pandera failures to `Problem` records without raw values.
- `schemas.errors`: the error family and exit codes.
"""

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
from schemas.policy import Domain, Policy, load_policy, parse_policy
from schemas.policy_table import PolicyTable, policy_table, validate_policy_table
from schemas.problems import problems_from_schema_errors
from schemas.samples import (
    CurveSamples,
    StreamSamples,
    curve_samples_schema,
    stream_samples_schema,
)

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
