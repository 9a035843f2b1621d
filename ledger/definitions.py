"""A domain's whole definition as canonical JSON, and back.

The ledger stores every field of `schemas.policy.Domain` (whatever fields it
has: a field added to the policy later is covered without a change here) in
the sealed domain row and in each policy entry of the chain, so the ledger's
MAC-checked row is the complete source of truth for a release.

Encoding: `dataclasses.asdict` (less the fields added later and left at their
default, `schemas.policy.definition_fields`), then canonical JSON (sorted keys, no spaces)
with Fractions as ``"p/q"`` text and tuples as lists. Decoding rebuilds each
field from its declared type (Fraction, tuples, nested dataclasses such as
`Public`, optional values); a field missing from an older text takes the
field's default, except a streams domain's ``wevent_budget``: a definition
stored before that key existed was charged per stream and is read as
``per_stream`` (`ledger.wevent_budget.LEGACY`).
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from fractions import Fraction
from typing import Any

from ledger.entries import canonical_json
from ledger.errors import LedgerIntegrityError
from ledger.wevent_budget import with_legacy_reading
from schemas.policy import Domain, definition_fields


def encode(domain: Domain) -> str:
    """The canonical JSON of every field of `domain`."""
    return canonical_json(definition_fields(domain), "domain definition")


def _convert(value: Any, hint: Any) -> Any:
    """`value` (decoded JSON) as an instance of the type `hint`."""
    if value is None:
        return None
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(hint):
            if arg is not type(None):
                return _convert(value, arg)
    if origin is tuple:
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_convert(v, args[0]) for v in value)
        return tuple(_convert(v, a) for v, a in zip(value, args, strict=True))
    if hint is Fraction:
        return Fraction(value)
    if dataclasses.is_dataclass(hint):
        return _build(hint, value)
    if hint is float and isinstance(value, int):
        return float(value)
    return value


def _build(cls: type, data: dict[str, Any]) -> Any:
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ValueError(f"unknown fields {', '.join(unknown)}")
    return cls(**{k: _convert(v, hints[k]) for k, v in data.items()})


def decode(text: str, name: str) -> Domain:
    """The `Domain` a definition text describes.

    Raises:
        LedgerIntegrityError: the text is not a definition of this privpipe's
            `Domain` (fields it does not know, wrong types).
    """
    try:
        data = json.loads(text)
        domain = _build(Domain, with_legacy_reading(data))
    except (ValueError, TypeError) as err:
        raise LedgerIntegrityError(
            f"the stored definition of domain {name!r} cannot be read: {err}") from None
    if domain.name != name:
        raise LedgerIntegrityError(
            f"the stored definition of domain {name!r} names domain {domain.name!r}")
    return domain
