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
from typing import Any, ClassVar

from mechanisms.cost import epsilon_per_step, float_at_most
from mechanisms.errors import MechanismParameterError

__all__ = ["MECHANISMS", "CurveMechanism", "Mechanism", "StreamMechanism", "get", "metric_of",
           "names", "stream"]

CURVE_OUTPUTS = ("values", "segments", "curves")
STREAM_OUTPUTS = ("samples",)
#: The cost-from-output function of each kind (an entry's ``charge`` may name another).
_CHARGES = {"curves": "mechanisms.charges:curve_cost", "streams": "mechanisms.charges:wevent_cost"}


def _load(target: str) -> Callable[..., Any]:
    """The function named ``"module:function"`` (imported on first use)."""
    module, _, func = target.partition(":")
    return getattr(importlib.import_module(module), func)


@dataclass(frozen=True)
class _Entry:
    """What every registered mechanism declares (see the module docstring).

    Attributes:
        name: the name used everywhere (CLI, ledger entries, reports).
        notions: the privacy notions it offers (``gp``/``cgp``, or ``wevent``).
        metric: the metric of its guarantee (``l2``, ``dist_inf``, ``wevent``).
        summary: one line for the CLI help and the reports.
        options: the option names it accepts (anything else is refused); each is a
            keyword parameter of one of `option_targets` (a test checks it).
        outputs: the output tables a release of it writes.
        releasable: whether a release may charge it (False: evaluation only).
        charge: ``"module:function"`` of its actual cost from public parameters and
            what it published (`mechanisms.charges`); settle and `ledger verify
            --manifests` both call it.
    """

    kind: ClassVar[str]
    name: str
    notions: tuple[str, ...]
    metric: str
    summary: str
    options: tuple[str, ...]
    outputs: tuple[str, ...]
    releasable: bool = True
    charge: str = ""

    @property
    def charge_function(self) -> Callable[..., Any]:
        """The cost-from-output function (imported on first use)."""
        return _load(self.charge or _CHARGES[self.kind])

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

    @staticmethod
    def _positive(amount: Fraction) -> Fraction:
        if amount <= 0:
            raise MechanismParameterError("epsilon / rho must be > 0")
        return Fraction(amount)


@dataclass(frozen=True)
class CurveMechanism(_Entry):
    """A registered curve mechanism: ε-GP / ρ-CGP per curve.

    Attributes:
        target: ``"module:function"`` of the run function
            ``run(t, values, *, notion, amount, rng, frame, options)``.
        option_targets: ``"module:function"`` of the functions the run function
            passes the options to (their keyword parameters are the options).
        batch_target: ``"module:function"`` running a whole chunk of curves at
            once (None: the release calls `run` curve by curve).
    """

    kind: ClassVar[str] = "curves"
    target: str = ""
    option_targets: tuple[str, ...] = ()
    batch_target: str | None = None

    @property
    def run(self) -> Callable[..., Any]:
        """The run function (imported on first use)."""
        return _load(self.target)

    @property
    def run_batch(self) -> Callable[..., Any] | None:
        """The chunk-at-once run function, if the mechanism has a batched core."""
        return None if self.batch_target is None else _load(self.batch_target)

    @property
    def option_functions(self) -> tuple[Callable[..., Any], ...]:
        """The functions whose keyword parameters the options are (imported on use)."""
        return tuple(_load(t) for t in self.option_targets)

    def reservation(self, amount: Fraction, *, w: int | None = None) -> Fraction:
        """What one curve costs, from public parameters only: `amount` (ε or ρ)."""
        return self._positive(amount)


@dataclass(frozen=True)
class StreamMechanism(_Entry):
    """A registered stream mechanism: a per-sample randomizer at ε/w per step (w-event LDP).

    Every sample of a stream, in [0, 1] after the domain's public range, is
    randomized independently at ε₀ = ε/w (`mechanisms.cost.epsilon_per_step`),
    so any w consecutive steps cost at most ε by sequential composition.

    Attributes:
        randomize: ``"module:function"`` of the randomizer
            ``f(x, *, epsilon_per_step: float, rng) -> reports`` (ε₀-LDP per value).
        from_uniforms: ``"module:function"`` of the same randomizer with its
            draws given, ``f(x, u, *, epsilon_per_step: float) -> reports``, u of
            shape (uniforms, *x.shape): ``randomize(x, rng=g)`` equals
            ``from_uniforms(x, g.random((uniforms, n)))`` value for value, so a
            chunk of streams is randomized in one call (`run_uniforms`).
        uniforms: the rows of `u`: uniforms the randomizer draws per value.
        estimate: ``"module:function"`` of the de-biasing
            ``f(y, *, epsilon_per_step: float) -> unbiased estimates of x``.
        output_bound: ``"module:function"`` of ``f(ε₀) -> B``: every report lies
            in [0.5 − B, 0.5 + B] (the release grid's bound).
        worst_variance: ``"module:function"`` of ``f(ε₀) -> max_x Var[x̂ | x]``.
        reconstructions: the post-processings a release of it may run
            (``"cpr"`` reads Square Wave reports; ``"none"``).
        label: a short name of its reports in evaluation tables (``"SW"``).
        title: its name in the reports' prose (``"Square Wave"``).
    """

    kind: ClassVar[str] = "streams"
    randomize: str = ""
    from_uniforms: str = ""
    uniforms: int = 1
    estimate: str = ""
    output_bound: str = ""
    worst_variance: str = ""
    reconstructions: tuple[str, ...] = ("none",)
    label: str = ""
    title: str = ""

    def run(self, values: Any, *, epsilon_per_step: Fraction, rng: Any) -> Any:
        """Randomize one stream's samples (values in [0, 1]) at the exact ε₀ = ε/w.

        Privacy: each report is ε₀-LDP for its step; ε₀ is rounded down to a
        float (`float_at_most`) so the float randomizer never spends more than
        the ledger reserved. Cost: ε₀ per sample.
        """
        return _load(self.randomize)(values, epsilon_per_step=float_at_most(epsilon_per_step),
                                     rng=rng)

    def run_uniforms(self, values: Any, u: Any, *, epsilon_per_step: Fraction) -> Any:
        """Randomize samples from given uniforms `u` (`uniforms` rows) at the exact ε₀ = ε/w.

        The randomizer of `run` with its draws made by the caller (each
        stream's from its own keyed generator, `tasks.stream_draw`). Privacy:
        ε₀-LDP per report (ε₀ rounded down, `float_at_most`) as long as the
        uniforms are fresh keyed draws; cost ε₀ per sample.
        """
        return _load(self.from_uniforms)(values, u,
                                         epsilon_per_step=float_at_most(epsilon_per_step))

    def estimator(self, y: Any, *, epsilon_per_step: float) -> Any:
        """Unbiased estimates of the inputs of reports `y` (post-processing, free)."""
        return _load(self.estimate)(y, epsilon_per_step=epsilon_per_step)

    def bound(self, epsilon_per_step: float) -> float:
        """B such that every report lies in [0.5 − B, 0.5 + B] at ε₀ (public)."""
        return float(_load(self.output_bound)(epsilon_per_step))

    def variance(self, epsilon_per_step: float) -> float:
        """Worst-case variance of one de-biased report at ε₀ (public)."""
        return float(_load(self.worst_variance)(epsilon_per_step))

    def check_reconstruct(self, reconstruct: str) -> None:
        """Refuse a reconstruction this mechanism's reports do not support."""
        if reconstruct not in self.reconstructions:
            raise MechanismParameterError(
                f"reconstruct must be {' or '.join(repr(r) for r in self.reconstructions)} "
                f"for mechanism {self.name!r}")

    def reservation(self, amount: Fraction, *, w: int | None = None) -> Fraction:
        """What one step costs, from public parameters only: ε/w (ε per window of w steps)."""
        amount = self._positive(amount)
        if w is None or w < 1:
            raise MechanismParameterError("a w-event mechanism needs w >= 1")
        return epsilon_per_step(amount, w)


#: Either kind of registry entry.
Mechanism = CurveMechanism | StreamMechanism

_SEG_OPTIONS = ("basis", "degree", "reduce", "continuous", "beta", "max_level", "k1", "margin",
                "threshold", "noise")
_PP_OPTIONS = ("basis", "degree", "n_terms", "spacing", "first", "breakpoints", "sample_spacing",
               "kink_error", "edge_error", "ratios", "max_terms", "noise")
_SW = "mechanisms.streams.square_wave"
_PM = "mechanisms.streams.piecewise"

MECHANISMS: dict[str, Mechanism] = {m.name: m for m in (
    CurveMechanism(
        "privfuncseg", ("gp", "cgp"), "l2",
        "PrivFuncSeg/ReduceSeg: adaptive dyadic segments, one joint projection "
        "(paper Alg. 4/5, 8/9)", _SEG_OPTIONS, CURVE_OUTPUTS,
        target="mechanisms.curves.release:run_privfuncseg",
        option_targets=("mechanisms.curves.segment:privfuncseg_batch",),
        batch_target="mechanisms.curves.release:run_privfuncseg_batch"),
    CurveMechanism(
        "project_and_privatize", ("gp", "cgp"), "l2",
        "Project-and-Privatize on a fixed basis (paper Alg. 2/6)", _PP_OPTIONS, CURVE_OUTPUTS,
        target="mechanisms.curves.release:run_project_and_privatize",
        option_targets=("mechanisms.curves.project_and_privatize:project_and_privatize",
                        "mechanisms.curves.bases:make_basis",
                        "mechanisms.curves.sinc_rule:sinc_basis_for_budget")),
    CurveMechanism(
        "privfuncselect", ("gp", "cgp"), "l2",
        "PrivFuncSelect: private basis selection (paper Alg. 3/7)",
        ("max_terms", "threshold1", "noise"), CURVE_OUTPUTS,
        target="mechanisms.curves.release:run_privfuncselect",
        option_targets=("mechanisms.curves.select:privfuncselect",)),
    CurveMechanism(
        "baseline", ("gp", "cgp"), "dist_inf",
        "LY23 point baseline: k points at ε/k each (dist_∞ guarantee only)",
        ("k", "smooth", "noise"),
        CURVE_OUTPUTS, target="mechanisms.curves.release:run_baseline",
        option_targets=("mechanisms.curves.baseline:baseline_points",)),
    StreamMechanism(
        "square_wave", ("wevent",), "wevent",
        "Square Wave randomizer at ε/w per step (w-event LDP)", (), STREAM_OUTPUTS,
        randomize=f"{_SW}:square_wave", from_uniforms=f"{_SW}:square_wave_from_uniforms",
        uniforms=1, estimate=f"{_SW}:square_wave_estimate",
        output_bound=f"{_SW}:square_wave_output_bound",
        worst_variance=f"{_SW}:square_wave_worst_variance", reconstructions=("cpr", "none"),
        label="SW", title="Square Wave"),
    StreamMechanism(
        "piecewise", ("wevent",), "wevent",
        "Piecewise Mechanism (Wang et al. ICDE'19) at ε/w per step (w-event LDP)", (),
        STREAM_OUTPUTS, randomize=f"{_PM}:piecewise",
        from_uniforms=f"{_PM}:piecewise_from_uniforms", uniforms=2,
        estimate=f"{_PM}:piecewise_estimate",
        output_bound=f"{_PM}:piecewise_output_bound",
        worst_variance=f"{_PM}:piecewise_worst_variance", reconstructions=("none",), label="PM",
        title="Piecewise Mechanism"),
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


def stream(name: str) -> StreamMechanism:
    """The stream entry of `name` (MechanismParameterError naming the choices otherwise)."""
    entry = get(name, "streams")
    assert isinstance(entry, StreamMechanism), "a streams entry is a StreamMechanism"
    return entry
