"""A domain's public units: its recorded definition, lon/lat support, step times, value range.

Pure functions of the policy's domain (public parameters): the manifest's
``policy`` record, whether released metres map back to lon/lat, each step's
time in the domain's time unit, and [0, 1]-normalised stream values back in
the declared range. Used by the release's unit outputs (`tasks.user_units`)
and by the reports.
"""

from __future__ import annotations

import hashlib
import json
from fractions import Fraction
from typing import Any

import numpy as np

from schemas.policy import Domain, definition_fields

__all__ = ["domain_record", "lonlat_supported", "stream_time", "to_value_range"]


def _plain(value: Any) -> Any:
    if isinstance(value, Fraction):
        return str(value)
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def domain_record(dom: Domain) -> dict[str, Any]:
    """The domain's public definition as recorded in a manifest, with its SHA-256 digest.

    The digest is over the canonical JSON of every field of the domain (cap,
    notion, units, w, projection, reference latitude, value range, ...), so two
    releases with the same digest ran under exactly the same policy domain.
    """
    fields = {k: _plain(v) for k, v in definition_fields(dom).items()}
    fields["units_label"] = dom.units_label()
    text = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return {"definition": fields, "digest": hashlib.sha256(text.encode("utf-8")).hexdigest()}


def lonlat_supported(projection: str | None, ref_lat: float | None) -> bool:
    """Whether released metres can be mapped back to lon/lat with public parameters only."""
    return projection == "mercator" or (projection == "equirectangular" and ref_lat is not None)


def stream_time(steps: np.ndarray, definition: dict[str, Any]) -> np.ndarray | None:
    """Each step's time in the domain's time unit (None when the unit is ``step``)."""
    step = definition.get("step")
    if definition.get("time_unit") == "step" or step is None:
        return None
    return np.asarray(steps, dtype=np.float64) * float(step)


def to_value_range(v: np.ndarray, value_range: Any) -> np.ndarray:
    """[0, 1]-normalised values back to the declared range [low, high]."""
    lo, hi = float(value_range[0]), float(value_range[1])
    return lo + np.asarray(v, dtype=np.float64) * (hi - lo)
