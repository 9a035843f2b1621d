"""Quasi-periodic physiological streams cut from the bundled ECG (held-out style).

The CPR paper builds its periodic streams by repeating a real segment with a
little jitter (Sec. IV-A; spec §3, "CPR datasets"). These generators do the
same with real heartbeats of MIT-BIH record 208 (``ecg_mitbih208.npz``, see
``SOURCES.md``): the 100 Hz lead is cut into beats at its R peaks (onset a
fixed fraction of the RR interval before each peak), and a beat is resampled
to the requested period. Record 208 has frequent ventricular ectopic beats,
so the beat shapes differ a lot from one beat to the next (sharp QRS
spikes, inverted complexes): a harder, spikier signal than the electricity
segments of `data.synthetic.periodic_stream`.

- `ecg_beat_stream`: one seeded beat repeated with Gaussian jitter (the
  paper's construction; P = 40, 25 repeats by default).
- `ecg_rhythm_stream`: consecutive real beats, each resampled to the same
  period, with jitter (beat-to-beat variation, still one period).

Both are min-max normalised to [0, 1] with the stream's own range, clipped
after jitter, and return the stream columns of `data.loaders`.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pandas as pd
from scipy import signal

from data.loaders import ECG_FILE

#: beats start this fraction of the preceding RR interval before their R peak
_ONSET = 0.35


@lru_cache(maxsize=1)
def _beats_100hz() -> tuple[tuple[np.ndarray, ...], int]:
    with np.load(ECG_FILE) as z:
        sig = np.asarray(z["ecg_100hz"], dtype=np.float64)
        fs = int(z["fs"])
    # R peaks of either polarity (208 has inverted ectopic complexes): peaks of
    # |x − median| at least 0.3 s apart and above its 90th percentile
    mag = np.abs(sig - np.median(sig))
    peaks, _ = signal.find_peaks(mag, height=np.percentile(mag, 90), distance=int(0.3 * fs))
    beats = []
    for a, b in zip(peaks[:-1], peaks[1:], strict=True):
        rr = int(b - a)
        if not int(0.35 * fs) <= rr <= int(1.6 * fs):
            continue  # a missed or doubled detection, not one beat
        start = a - int(round(_ONSET * rr))
        if start < 0 or start + rr > sig.size:
            continue
        beats.append(sig[start : start + rr].copy())
    return tuple(beats), fs


def ecg_beats() -> list[np.ndarray]:
    """The beats of the bundled ECG record, in mV, each one RR interval long.

    Returns:
        A list of 1-D arrays (100 Hz samples), in recording order.
    """
    return [b.copy() for b in _beats_100hz()[0]]


def _resample(beat: np.ndarray, period: int) -> np.ndarray:
    src = np.linspace(0.0, 1.0, beat.size, endpoint=False)
    dst = np.linspace(0.0, 1.0, period, endpoint=False)
    return np.interp(dst, src, beat)


def _frame(x: np.ndarray, period: int, rng: np.random.Generator, jitter: float,
           user: str) -> pd.DataFrame:
    span = x.max() - x.min()
    x = (x - x.min()) / span if span > 0 else np.full(x.size, 0.5)
    x = np.clip(x + rng.normal(0.0, jitter, x.size), 0.0, 1.0)
    df = pd.DataFrame({"user_id": user, "stream_id": "ecg",
                       "t": np.arange(x.size, dtype=np.int64), "value": x})
    df.attrs["period"] = period
    return df


def _check(n_periods: int, period: int, jitter: float) -> None:
    if n_periods < 1 or period < 2 or not jitter >= 0:
        raise ValueError("n_periods must be >= 1, period >= 2 and jitter >= 0")


def ecg_beat_stream(n_periods: int = 25, period: int = 40, *, seed: int,
                    jitter: float = 0.01) -> pd.DataFrame:
    """One real heartbeat, resampled to `period` steps, repeated with jitter.

    Args:
        n_periods: number of repeats (25).
        period: the beat's length in steps after resampling (40).
        seed: generator seed (which beat, and the jitter).
        jitter: standard deviation of the Gaussian jitter (after normalising).

    Returns:
        ``user_id`` (``ecg_beat``), ``stream_id`` (``ecg``), ``t`` (step), ``value``
        in [0, 1]; the period is in ``df.attrs["period"]``.
    """
    _check(n_periods, period, jitter)
    rng = np.random.default_rng(seed)
    beats = _beats_100hz()[0]
    beat = _resample(beats[int(rng.integers(0, len(beats)))], period)
    return _frame(np.tile(beat, n_periods), period, rng, jitter, "ecg_beat")


def ecg_rhythm_stream(n_periods: int = 25, period: int = 40, *, seed: int,
                      jitter: float = 0.01) -> pd.DataFrame:
    """`n_periods` consecutive real heartbeats, each resampled to `period` steps.

    Args:
        n_periods: number of beats (25).
        period: steps per beat after resampling (40).
        seed: generator seed (the first beat, and the jitter).
        jitter: standard deviation of the Gaussian jitter (after normalising).

    Returns:
        ``user_id`` (``ecg_rhythm``), ``stream_id`` (``ecg``), ``t``, ``value`` in [0, 1];
        the period is in ``df.attrs["period"]``.
    """
    _check(n_periods, period, jitter)
    rng = np.random.default_rng(seed)
    beats = _beats_100hz()[0]
    if n_periods > len(beats):
        raise ValueError(f"the record has {len(beats)} beats, fewer than n_periods")
    first = int(rng.integers(0, len(beats) - n_periods + 1))
    x = np.concatenate([_resample(b, period) for b in beats[first : first + n_periods]])
    return _frame(x, period, rng, jitter, "ecg_rhythm")
