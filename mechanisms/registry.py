"""The mechanism registry: every mechanism privpipe can run, declared once.

Each entry says what a mechanism is (its name, the kind of data it takes, the
privacy notions it offers and the metric its guarantee is stated in), what a
release reserves for it from public parameters alone, which options it takes,
the function that runs it, and the output tables it writes. The CLI choices,
the task specs, the ledger requests, the ledger's metric check and the reports
all read this table; adding a mechanism is one module, one entry here and its
tests (``tests/privacy`` fails for a registered mechanism without a privacy test).

The run functions are named ``"module:function"`` and imported on first use,
so reading the registry (the CLI, the ledger) imports no numerics.

Metrics (the ``metric`` of a domain must equal the mechanism's):

- ``l2``: geo-privacy w.r.t. dist₂(q, q') = (∫‖q(t) − q'(t)‖² dt)^½ in the
  domain's value and time units;
- ``dist_inf``: geo-privacy w.r.t. dist_∞(q, q') = sup_t ‖q(t) − q'(t)‖ (the
  LY23 point baseline: point evaluations are not Lipschitz in L2, so no ε
  covers it on an ``l2`` domain);
- ``wevent``: ε-w-event LDP over a stream's steps, values in [0, 1] of the
  declared range.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from mechanisms.errors import MechanismParameterError

__all__ = ["MECHANISMS", "Mechanism", "get", "metric_of", "names"]

CURVE_OUTPUTS = ("values", "segments", "curves")
STREAM_OUTPUTS = ("samples",)


@dataclass(frozen=True)
class Mechanism:
    """One registered mechanism (see the module docstring).

    Attributes:
        name: the name used everywhere (CLI, ledger entries, reports).
        kind: ``"curves"`` or ``"streams"``.
        notions: the privacy notions it offers (``gp``/``cgp``, or ``wevent``).
        metric: the metric of its guarantee (``l2``, ``dist_inf``, ``wevent``).
        summary: one line for the CLI help and the reports.
        target: ``"module:function"`` of the run function.
        options: the option names it accepts (anything else is refused).
        outputs: the output tables a release of it writes.
        releasable: whether a release may charge it (False: evaluation only).
        batch_target: ``"module:function"`` running a whole chunk of curves at
            once (None: the release calls `run` curve by curve).
    """

    name: str
    kind: str
    notions: tuple[str, ...]
    metric: str
    summary: str
    target: str
    options: tuple[str, ...]
    outputs: tuple[str, ...]
    releasable: bool = True
    batch_target: str | None = None

    @property
    def run(self) -> Callable[..., Any]:
        """The run function (imported on first use)."""
        module, _, func = self.target.partition(":")
        return getattr(importlib.import_module(module), func)

    @property
    def run_batch(self) -> Callable[..., Any] | None:
        """The chunk-at-once run function, if the mechanism has a batched core."""
        if self.batch_target is None:
            return None
        module, _, func = self.batch_target.partition(":")
        return getattr(importlib.import_module(module), func)

    def check_options(self, options: Mapping[str, Any]) -> None:
        """Refuse option names this mechanism does not take (before any data is read)."""
        unknown = sorted(set(options) - set(self.options))
        if unknown:
            allowed = ", ".join(self.options) or "(none)"
            raise MechanismParameterError(
                f"mechanism {self.name!r} has no option {unknown[0]!r}; allowed: {allowed}")

    def check_notion(self, notion: str) -> None:
        """Refuse a notion this mechanism does not offer."""
        if notion not in self.notions:
            raise MechanismParameterError(
                f"mechanism {self.name!r} offers {' or '.join(self.notions)}, not {notion}")

    def reservation(self, amount: Fraction, *, w: int | None = None) -> Fraction:
        """What one item costs, from public parameters only.

        Curves: `amount` (ε or ρ) per curve. Streams: `amount`/w per step (ε per
        window of w steps), so any w consecutive steps cost at most `amount`.
        """
        if amount <= 0:
            raise MechanismParameterError("epsilon / rho must be > 0")
        if self.kind == "streams":
            if w is None or w < 1:
                raise MechanismParameterError("a w-event mechanism needs w >= 1")
            return Fraction(amount) / w
        return Fraction(amount)


_SEG_OPTIONS = ("basis", "degree", "reduce", "continuous", "beta", "max_level", "k1", "margin",
                "threshold")
_PP_OPTIONS = ("basis", "degree", "n_terms", "spacing", "first", "breakpoints", "sample_spacing",
               "kink_error", "edge_error", "ratios", "max_terms", "period", "noise")

MECHANISMS: dict[str, Mechanism] = {m.name: m for m in (
    Mechanism("privfuncseg", "curves", ("gp", "cgp"), "l2",
              "PrivFuncSeg/ReduceSeg: adaptive dyadic segments, one joint projection "
              "(paper Alg. 4/5, 8/9)",
              "mechanisms.curves.release:run_privfuncseg", _SEG_OPTIONS, CURVE_OUTPUTS,
              batch_target="mechanisms.curves.release:run_privfuncseg_batch"),
    Mechanism("project_and_privatize", "curves", ("gp", "cgp"), "l2",
              "Project-and-Privatize on a fixed basis (paper Alg. 2/6)",
              "mechanisms.curves.release:run_project_and_privatize", _PP_OPTIONS,
              CURVE_OUTPUTS),
    Mechanism("privfuncselect", "curves", ("gp", "cgp"), "l2",
              "PrivFuncSelect: private basis selection (paper Alg. 3/7)",
              "mechanisms.curves.release:run_privfuncselect",
              ("degree", "threshold", "beta"), CURVE_OUTPUTS),
    Mechanism("baseline", "curves", ("gp", "cgp"), "dist_inf",
              "LY23 point baseline: k points at ε/k each (dist_∞ guarantee only)",
              "mechanisms.curves.release:run_baseline", ("k", "smooth"), CURVE_OUTPUTS),
    Mechanism("square_wave", "streams", ("wevent",), "wevent",
              "Square Wave randomizer at ε/w per step (w-event LDP)",
              "mechanisms.streams.release:run_square_wave", (), STREAM_OUTPUTS),
)}


def names(kind: str | None = None, *, releasable_only: bool = True) -> tuple[str, ...]:
    """Registered mechanism names (of one kind), in registry order."""
    return tuple(n for n, m in MECHANISMS.items()
                 if (kind is None or m.kind == kind) and (m.releasable or not releasable_only))


def get(name: str, kind: str | None = None) -> Mechanism:
    """The entry of `name`; MechanismParameterError naming the choices otherwise."""
    m = MECHANISMS.get(name)
    if m is None or (kind is not None and m.kind != kind):
        raise MechanismParameterError(
            f"unknown {kind + ' ' if kind else ''}mechanism {name!r}; choose one of "
            f"{', '.join(names(kind))}")
    return m


def metric_of(name: str) -> str:
    """The metric of mechanism `name`'s guarantee (for the ledger's domain check)."""
    return get(name).metric
