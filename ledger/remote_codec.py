"""The JSON codec of the ledger service (`flows.ledger_server`, `ledger.remote`).

Every value the ledger operations exchange is encoded as plain JSON with a
small set of tags, and decoded back into the exact Python types:

- ``{"$frac": "p/q"}``: an exact `fractions.Fraction` (never a float);
- ``{"$tuple": [...]}``: a tuple; ``{"$map": [[key, value], ...]}``: a dict
  whose keys are not all strings; ``{"$dt": "ISO 8601"}``: a datetime;
  ``{"$date": "YYYY-MM-DD"}``: a date; ``{"$dec": "1.25"}``: a Decimal;
- ``{"$rows": {"type": NAME, "columns": {field: [...]}}}``: a list of two or
  more records of one type, column by column (each column checked at once);
  a column whose values repeat is sent as
  ``{"$dict": {"values": [distinct...], "codes": [int...]}}`` (row i is
  ``values[codes[i]]``), and one whose rows are all one value as
  ``{"$repeat": {"value": V, "count": N}}`` (both only inside ``$rows``): each
  distinct value is encoded, decoded and type-checked once, so a shared `Cost`
  or amount costs one value on the wire, not one per row; what a column stands
  for once expanded is capped (`_MAX_EXPANDED`);
- ``{"$f8": BASE64}`` / ``{"$i8": BASE64}``: a one-dimensional numpy array of
  little-endian float64 / int64 (a stream's values and steps for
  ``range_fingerprints``), its bytes in standard base64 (strict: the length a
  multiple of 8 bytes), decoded read-only; every other array travels as a list;
- ``{"$type": NAME, "fields": {...}}``: one of the record dataclasses named
  in `RECORDS` (requests, decisions, settlements, costs, heads, reports,
  filters, summaries, policy domains), and nothing else.

Decoding is strict: an unknown tag, an unknown record name, an unknown or
missing field, a field of the wrong primitive type (str/int/bool/Fraction),
or a malformed fraction raises `CodecError`; nothing is ever unpickled or
evaluated. Floats round-trip exactly (``json`` writes their shortest repr).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import functools
import json
import operator
from datetime import date, datetime
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from typing import Any

import numpy as np

from ledger import heads, summaries, watermark
from ledger.filters import Filter
from ledger.records import (
    Decision,
    Request,
    ReserveResult,
    Settlement,
    SignedHead,
    VerifyReport,
)
from mechanisms.cost import Cost, CostItem, StepRun, WEventCost
from schemas.errors import BadInputError
from schemas.policy import Domain, Policy, Public

#: The record types the wire carries, by name.
RECORDS: dict[str, type] = {cls.__name__: cls for cls in (
    Request, Decision, ReserveResult, Settlement, SignedHead, VerifyReport, Filter,
    heads.PlainHead, summaries.Spread, summaries.DomainBudget, watermark.StreamClaim,
    watermark.StreamRange, Cost, CostItem, StepRun, WEventCost, Domain, Public, Policy)}

_MAX_DEPTH = 64
_MAX_FRACTION_DIGITS = 4000


class CodecError(BadInputError):
    """A message of the ledger service that is not valid (HTTP 400 on the server)."""


def encode(value: Any) -> Any:
    """`value` as JSON-ready data with the tags of the module docstring.

    Raises:
        CodecError: a type the wire does not carry.
    """
    if value is None or isinstance(value, (bool, str, int, float)):
        return value
    if isinstance(value, Fraction):
        return {"$frac": f"{value.numerator}/{value.denominator}"}
    if isinstance(value, np.generic):
        return encode(value.item())
    if isinstance(value, np.ndarray):
        tag = _ARRAY_TAGS.get(value.dtype.str if value.ndim == 1 else "")
        if tag is not None:
            return {tag: base64.b64encode(value.tobytes()).decode("ascii")}
        return [encode(v) for v in value.tolist()]
    if isinstance(value, list) and len(value) > 1 and _same_record(value):
        names = _shape(type(value[0]))[0]
        return {"$rows": {"type": type(value[0]).__name__,
                          "columns": {k: _column(list(map(operator.attrgetter(k), value)))
                                      for k in names}}}
    if isinstance(value, (list, tuple)):
        items = [encode(v) for v in value]
        return items if isinstance(value, list) else {"$tuple": items}
    if isinstance(value, dict):
        if all(isinstance(k, str) and not k.startswith("$") for k in value):
            return {k: encode(v) for k, v in value.items()}
        return {"$map": [[encode(k), encode(v)] for k, v in value.items()]}
    if isinstance(value, datetime):
        return {"$dt": value.isoformat()}
    if isinstance(value, date):
        return {"$date": value.isoformat()}
    if isinstance(value, Decimal):
        return {"$dec": str(value)}
    if dataclasses.is_dataclass(value) and RECORDS.get(type(value).__name__) is type(value):
        return {"$type": type(value).__name__,
                "fields": {k: encode(getattr(value, k)) for k in _shape(type(value))[0]}}
    raise CodecError(f"the ledger service cannot carry a {type(value).__name__}")


def _column(values: list[Any]) -> Any:
    """One ``$rows`` column: ``$repeat``, ``$dict`` (at most half its rows distinct) or a list.

    ``$repeat`` when every row is one value. Values are the same when they are one
    object, or equal and of one exact type among str, int, bool, None and Fraction
    (never floats: -0.0 == 0.0), so the decoded column holds values of the types
    and amounts sent.
    """
    types = set(map(type, values))
    # the distinct objects, first seen first
    objects = list(dict(zip(map(id, values), values, strict=True)).values())
    distinct, codes_of = objects, None
    if types <= _BY_VALUE and (len(objects) * 2 <= len(values) or Fraction not in types):
        # equal values of one type are one value (hashing each distinct object once)
        keys = (objects if len(types) == 1
                else list(zip(map(type, objects), objects, strict=True)))
        first = dict(zip(keys, objects, strict=True))
        distinct, codes_of = list(first.values()), keys
    if len(distinct) * 2 > len(values):
        return values if types <= _PLAIN else [encode(v) for v in values]
    if len(distinct) == 1:
        return {"$repeat": {"value": encode(values[0]), "count": len(values)}}
    position = {id(v): i for i, v in enumerate(objects)}
    codes = list(map(position.__getitem__, map(id, values)))
    if codes_of is not None:  # object -> its value's index among the distinct values
        index = {k: i for i, k in enumerate(first)}
        codes = list(map(list(map(index.__getitem__, codes_of)).__getitem__, codes))
    return {"$dict": {"values": [encode(v) for v in distinct], "codes": codes}}


def _same_record(values: list[Any]) -> bool:
    """Whether every item is a record of one registered type (sent column by column)."""
    cls = type(values[0])
    return RECORDS.get(cls.__name__) is cls and set(map(type, values)) == {cls}


def dumps(value: Any) -> bytes:
    """`encode(value)` as compact UTF-8 JSON."""
    return json.dumps(encode(value), separators=(",", ":"), allow_nan=True).encode("utf-8")


def loads(body: bytes) -> Any:
    """Decode a message written by `dumps` into the exact types (strict, see the module).

    Raises:
        CodecError: not UTF-8 JSON, or a value the module docstring refuses.
    """
    try:
        raw = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise CodecError(f"not a JSON message: {err}") from None
    return decode(raw)


def _fraction(text: Any) -> Fraction:
    if not isinstance(text, str) or len(text) > _MAX_FRACTION_DIGITS:
        raise CodecError("a $frac must be a string p/q")
    num, sep, den = text.partition("/")
    if not sep or not _is_int(num) or not den.isdigit() or int(den) == 0:
        raise CodecError(f"malformed fraction {text[:40]!r}")
    return Fraction(int(num), int(den))


def _array(tag: str, body: Any) -> np.ndarray:
    """A ``$f8`` / ``$i8`` array: strict base64 of whole 8-byte items, read-only."""
    try:
        raw = base64.b64decode(body, validate=True) if isinstance(body, str) else None
    except (ValueError, binascii.Error):
        raw = None
    if raw is None or len(raw) % 8:
        raise CodecError(f"a {tag} array is the base64 of whole 8-byte items")
    return np.frombuffer(raw, dtype=ARRAY_DTYPES[tag])


def _is_int(text: str) -> bool:
    return text.removeprefix("-").isdigit()


def _tagged(tag: str, body: Any, depth: int) -> Any:
    if tag == "$frac":
        return _fraction(body)
    if tag == "$rows":
        return _rows(body, depth)
    if tag in ARRAY_DTYPES:
        return _array(tag, body)
    if tag == "$tuple" and isinstance(body, list):
        return tuple(decode(v, depth + 1) for v in body)
    if tag == "$map" and isinstance(body, list):
        if not all(isinstance(p, list) and len(p) == 2 for p in body):
            raise CodecError("a $map is a list of [key, value] pairs")
        return {decode(k, depth + 1): decode(v, depth + 1) for k, v in body}
    try:
        if tag == "$dt" and isinstance(body, str):
            return datetime.fromisoformat(body)
        if tag == "$date" and isinstance(body, str):
            return date.fromisoformat(body)
        if tag == "$dec" and isinstance(body, str):
            return Decimal(body)
    except (ValueError, InvalidOperation):
        raise CodecError(f"malformed {tag} value") from None
    raise CodecError(f"unknown or malformed tag {tag!r}")


def decode(raw: Any, depth: int = 0) -> Any:
    """Decode JSON data (`json.loads` output) into the exact types (strict).

    Raises:
        CodecError: see the module docstring.
    """
    if depth > _MAX_DEPTH:
        raise CodecError("message nested too deeply")
    if raw is None or isinstance(raw, (bool, str, int, float)):
        return raw
    if isinstance(raw, list):
        if set(map(type, raw)) <= _PLAIN:
            return raw
        return [decode(v, depth + 1) for v in raw]
    if not isinstance(raw, dict):
        raise CodecError(f"unexpected JSON value {type(raw).__name__}")
    if "$type" in raw:
        return _record(raw, depth)
    tags = [k for k in raw if k.startswith("$")]
    if tags:
        if len(raw) != 1:
            raise CodecError("a tagged value has exactly one key")
        return _tagged(tags[0], raw[tags[0]], depth)
    return {k: decode(v, depth + 1) for k, v in raw.items()}


ARRAY_DTYPES = {"$f8": np.dtype("<f8"), "$i8": np.dtype("<i8")}
"""The array tags and the numpy dtype each stands for."""
_ARRAY_TAGS = {d.str: tag for tag, d in ARRAY_DTYPES.items()}
_PRIMITIVES = {"str": str, "int": int, "bool": bool, "Fraction": Fraction}
_PLAIN = frozenset({str, int, float, bool, type(None)})
_BY_VALUE = frozenset({str, int, bool, type(None), Fraction})
_MAX_EXPANDED = 512 * 2**20
"""The most bytes a ``$dict`` column may stand for once expanded (its rows' values as
JSON): the default request cap, so a repeated value cannot make the ledger do more
work than the largest plain body would."""


@functools.cache
def _rule(cls: type, name: str, hint: str) -> tuple[tuple[type, ...] | None, bool]:
    """(allowed types or None for a composite field, whether null is allowed) of a field."""
    options = [h.strip() for h in hint.split("|")]
    nullable = "None" in options
    if not all(o in _PRIMITIVES or o == "None" for o in options):
        return None, True  # a composite field: its own constructor and the ledger's checks decide
    allowed = tuple(_PRIMITIVES[o] for o in options if o != "None")
    if Fraction in allowed:
        allowed += (int,)
    if cls is Request and name == "amount":  # documented: Fraction, int, float or text
        allowed = (Fraction, int, float, str)
    return allowed, nullable


def _check_field(cls: type, name: str, hint: str, value: Any) -> None:
    """Refuse a value whose type contradicts a plain annotation (str, int, bool, Fraction)."""
    allowed, nullable = _rule(cls, name, hint)
    if value is None:
        if not nullable:
            raise CodecError(f"{cls.__name__}.{name} must not be null")
        return
    if allowed is None:
        return
    if not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):
        raise CodecError(f"{cls.__name__}.{name} must be {hint}, not {type(value).__name__}")


@functools.cache
def _shape(cls: type) -> tuple[dict[str, str], frozenset[str]]:
    """(field name -> annotation text, required field names) of a record type."""
    known = {f.name: str(f.type) for f in dataclasses.fields(cls) if f.init}
    required = frozenset(f.name for f in dataclasses.fields(cls) if f.init
                         and f.default is dataclasses.MISSING
                         and f.default_factory is dataclasses.MISSING)
    return known, required


def _record(raw: dict[str, Any], depth: int) -> Any:
    name, fields = raw.get("$type"), raw.get("fields")
    if len(raw) != 2 or not isinstance(fields, dict):
        raise CodecError("a record is {\"$type\": NAME, \"fields\": {...}}")
    cls, known = _record_fields(name, fields.keys())
    values = {}
    for k, v in fields.items():
        value = v if v is None or type(v) is str else decode(v, depth + 1)
        _check_field(cls, k, known[k], value)
        values[k] = value
    try:
        return cls(**values)
    except (TypeError, ValueError, AssertionError) as err:
        raise CodecError(f"invalid {name}: {err}") from None


def _record_fields(name: Any, given: Any) -> tuple[type, dict[str, Any]]:
    """The record class of `name` and its field types, `given` checked against its fields.

    Raises:
        CodecError: an unknown record type, an unknown field or a missing required one.
    """
    cls = RECORDS.get(name) if isinstance(name, str) else None
    if cls is None:
        raise CodecError(f"unknown record type {str(name)[:40]!r}")
    known, required = _shape(cls)
    unknown = given - known.keys()
    if unknown:
        raise CodecError(f"unknown field(s) of {name}: {', '.join(sorted(unknown))[:200]}")
    missing = required - given
    if missing:
        raise CodecError(f"missing field(s) of {name}: {', '.join(sorted(missing))}")
    return cls, known


def _dict_column(body: Any, depth: int) -> tuple[list[Any], list[Any]]:
    """(column, distinct values) of a ``$dict`` column, checked (strict, capped).

    Raises:
        CodecError: not ``{"values": [...], "codes": [int...]}``, a code out of
            range or not an int, or rows standing for more than `_MAX_EXPANDED` bytes.
    """
    if not (isinstance(body, dict) and set(body) == {"values", "codes"}
            and isinstance(body["values"], list) and isinstance(body["codes"], list)
            and body["values"] and body["codes"]):
        raise CodecError('a $dict column is {"values": [...], "codes": [int, ...]}')
    raw, codes = body["values"], body["codes"]
    if set(map(type, codes)) != {int} or min(codes) < 0 or max(codes) >= len(raw):
        raise CodecError(f"the codes of a $dict column must be ints in [0, {len(raw)})")
    weights = np.array([len(json.dumps(v)) + 1 for v in raw], dtype=np.float64)
    _check_expanded(float(np.bincount(codes, minlength=len(raw)) @ weights))
    values = [decode(v, depth + 1) for v in raw]
    return list(map(values.__getitem__, codes)), values


def _repeat_column(body: Any, depth: int) -> tuple[list[Any], list[Any]]:
    """(column, [its value]) of a ``$repeat`` column, checked (strict, capped).

    Raises:
        CodecError: not ``{"value": V, "count": int >= 1}``, or rows standing for
            more than `_MAX_EXPANDED` bytes.
    """
    if not (isinstance(body, dict) and set(body) == {"value", "count"}
            and type(body["count"]) is int and body["count"] >= 1):
        raise CodecError('a $repeat column is {"value": V, "count": N >= 1}')
    _check_expanded((len(json.dumps(body["value"])) + 1) * body["count"])
    value = decode(body["value"], depth + 1)
    return [value] * body["count"], [value]


def _check_expanded(size: float) -> None:
    """Refuse a column whose rows, expanded, stand for more than `_MAX_EXPANDED` bytes."""
    if size > _MAX_EXPANDED:
        raise CodecError(f"a column stands for more than {_MAX_EXPANDED} bytes of rows")


def _rows(body: Any, depth: int) -> list[Any]:
    """Records of one type sent column by column, checked column by column (strict)."""
    if not (isinstance(body, dict) and set(body) == {"type", "columns"}
            and isinstance(body["columns"], dict)):
        raise CodecError('$rows is {"type": NAME, "columns": {field: [values]}}')
    name, cols = body["type"], body["columns"]
    cls, known = _record_fields(name, cols.keys())
    decoded, kinds = {}, {}
    for k, v in cols.items():
        if isinstance(v, dict) and len(v) == 1 and ("$dict" in v or "$repeat" in v):
            form = _dict_column if "$dict" in v else _repeat_column
            decoded[k], kinds[k] = form(next(iter(v.values())), depth + 1)
        else:
            decoded[k] = kinds[k] = decode(v, depth + 1)
    lengths = {len(v) if isinstance(v, list) else -1 for v in decoded.values()}
    if len(lengths) != 1 or min(lengths) < 1:
        raise CodecError(f"the columns of {name} rows must be lists of one length")
    for k, col in kinds.items():
        allowed, nullable = _rule(cls, k, known[k])
        if allowed is None:
            continue
        permitted = set(allowed) | ({type(None)} if nullable else set())
        if not set(map(type, col)) <= permitted:
            bad = next(v for v in col if type(v) not in permitted)
            _check_field(cls, k, known[k], bad)
            raise CodecError(f"{name}.{k} must be {known[k]}, not {type(bad).__name__}")
    try:
        if decoded.keys() == known.keys():  # every field: positional, in field order
            return list(map(cls, *(decoded[k] for k in known)))
        names = list(decoded)
        return [cls(**dict(zip(names, row, strict=True)))
                for row in zip(*decoded.values(), strict=True)]
    except (TypeError, ValueError, AssertionError) as err:
        raise CodecError(f"invalid {name}: {err}") from None


def field_names(cls: type) -> list[str]:
    """The constructor fields of a record type (for documentation and tests)."""
    return [f.name for f in dataclasses.fields(cls) if f.init]


__all__ = ["ARRAY_DTYPES", "RECORDS", "CodecError", "decode", "dumps", "encode", "field_names",
           "loads"]
