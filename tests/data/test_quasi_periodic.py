"""ECG beat streams: real beats, known period, seeded, valid stream tables."""

import numpy as np
import pandas as pd
import pytest

from data import quasi_periodic as qp
from data.loaders import ECG_FILE
from ingest import scan
from tests.ingest.conftest import make_domain


def test_beats_are_one_rr_interval_of_the_record():
    beats = qp.ecg_beats()
    with np.load(ECG_FILE) as z:
        sig = np.asarray(z["ecg_100hz"], dtype=np.float64)
    # 5 min at 60-120 bpm: a few hundred beats, each 0.35-1.6 s at 100 Hz
    assert 300 <= len(beats) <= 600
    sizes = np.array([b.size for b in beats])
    assert sizes.min() >= 35 and sizes.max() <= 160
    # each beat is a contiguous piece of the record (found verbatim)
    for b in (beats[0], beats[len(beats) // 2], beats[-1]):
        starts = np.flatnonzero(sig == b[0])
        assert any(np.array_equal(sig[s:s + b.size], b) for s in starts)
    # one R peak (the largest deviation from the median) per beat, near the onset offset
    med = np.median(sig)
    peaks = [int(np.argmax(np.abs(b - med))) / b.size for b in beats]
    assert np.median(peaks) == pytest.approx(0.35 / 1.35, abs=0.1)


def test_beat_stream_repeats_one_beat_with_the_known_period():
    df = qp.ecg_beat_stream(25, 40, seed=5, jitter=0.0)
    assert df.attrs["period"] == 40 and len(df) == 1000
    v = df["value"].to_numpy()
    assert v.min() == 0.0 and v.max() == 1.0
    np.testing.assert_array_equal(v[:40], v[960:])
    j = qp.ecg_beat_stream(25, 40, seed=5, jitter=0.01)["value"].to_numpy()
    assert 0.005 < np.std(j - v) < 0.015
    pd.testing.assert_frame_equal(qp.ecg_beat_stream(seed=5), qp.ecg_beat_stream(seed=5))
    assert not np.array_equal(qp.ecg_beat_stream(seed=5, jitter=0.0)["value"],
                              qp.ecg_beat_stream(seed=6, jitter=0.0)["value"])
    assert scan(df, make_domain(kind="streams", value_range=[0.0, 1.0])).valid


def test_rhythm_stream_is_consecutive_beats():
    df = qp.ecg_rhythm_stream(10, 40, seed=2, jitter=0.0)
    v = df["value"].to_numpy().reshape(10, 40)
    assert df.attrs["period"] == 40
    assert not np.allclose(v[0], v[1])  # real beat-to-beat variation
    # every cycle correlates with its neighbour (same rhythm, same period)
    cors = [np.corrcoef(v[i], v[i + 1])[0, 1] for i in range(9)]
    assert np.median(cors) > 0.5
    with pytest.raises(ValueError):
        qp.ecg_rhythm_stream(10_000, 40, seed=0)
    with pytest.raises(ValueError):
        qp.ecg_beat_stream(25, 1, seed=0)
