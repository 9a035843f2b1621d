"""The batched stream draw gives each report exactly the stream-by-stream draw's bytes.

The reference here is the path the chunk task took before it was batched:
for each segment of each stream, a fresh ChaCha20 generator keyed by
HMAC-SHA256(segment seed, "privpipe stream v1\\0" + stream id), the
randomizer's single-stream function on the segment's values, then the release
grid (2^-24 around 1/2, within the randomizer's public bound). The key is
derived here by hand, not through `tasks.continuation.stream_key`.
"""

import hashlib
import hmac
from fractions import Fraction

import numpy as np
import pytest

from mechanisms import registry
from mechanisms.cost import StepRun, float_at_most
from mechanisms.streams.piecewise import piecewise, piecewise_output_bound
from mechanisms.streams.square_wave import square_wave, square_wave_output_bound
from tasks.keyed_rng import rekey, release_generator
from tasks.privatize import MechanismRunError, StreamSpec, privatize_stream_chunk
from tasks.stage import SeededSegment, StreamChunk
from tasks.stream_draw import draw_stream_chunk

SINGLE = {"square_wave": (square_wave, square_wave_output_bound),
          "piecewise": (piecewise, piecewise_output_bound)}


def _key(seed: int, stream_id: str) -> int:
    mac = hmac.new(seed.to_bytes(32, "big"), b"privpipe stream v1\x00" + stream_id.encode(),
                   hashlib.sha256)
    return int.from_bytes(mac.digest(), "big")


def _reference(chunk: StreamChunk, mechanism: str, eps_step: Fraction) -> np.ndarray:
    """Stream by stream, segment by segment, each from a fresh keyed generator."""
    run, bound_of = SINGLE[mechanism]
    e0 = float_at_most(eps_step)
    bound = bound_of(e0) + 2.0**-24
    out = []
    for s, segs in enumerate(chunk.segments):
        a, b = chunk.offsets[s], chunk.offsets[s + 1]
        steps, values = chunk.steps[a:b], chunk.values[a:b]
        for g in segs:
            sel = (steps >= g.first_step) & (steps <= g.last_step)
            y = run(values[sel], epsilon_per_step=e0,
                    rng=release_generator(_key(g.seed, chunk.stream_ids[s])))
            y = np.rint(np.clip(y - 0.5, -bound, bound) / 2.0**-24) * 2.0**-24
            out.append(y + 0.5)  # bound is far from a grid edge here: no second clip needed
    return np.concatenate(out)


def _chunk(rng: np.random.Generator, n_streams: int = 40) -> StreamChunk:
    """Streams of 0 to 300 steps; every third continued (an earlier and a new segment)."""
    counts = rng.integers(0, 300, n_streams)
    counts[:3] = (0, 1, 257)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    steps = np.concatenate([np.arange(c, dtype=np.int64) + int(rng.integers(0, 1000))
                            for c in counts])
    segments = []
    for s, c in enumerate(counts):
        st = steps[offsets[s]:offsets[s + 1]]
        if c == 0:
            segments.append(())
        elif c > 3 and s % 3 == 0:
            cut = int(st[c // 2])
            segments.append((SeededSegment(int(st[0]), cut - 1, False, 2**255 + 7 * s),
                             SeededSegment(cut, int(st[-1]), True, 12345 + s)))
        else:
            segments.append((SeededSegment(int(st[0]), int(st[-1]), True, 2**200 + s),))
    users = tuple(f"u{s // 2}" for s in range(n_streams))  # two streams per user
    streams = tuple(f"s{s % 2}" for s in range(n_streams))
    return StreamChunk(0, users, streams, steps, rng.random(int(offsets[-1])), offsets,
                       tuple(segments))


@pytest.mark.parametrize("mechanism", sorted(SINGLE))
def test_a_chunk_draws_the_bytes_of_the_stream_by_stream_draw(mechanism):
    chunk = _chunk(np.random.default_rng(3))
    spec = StreamSpec(epsilon="5", w=5, mechanism=mechanism, reconstruct="none")
    res = privatize_stream_chunk(chunk, spec)
    y = res.tables["samples"].column("y").to_numpy()
    expected = _reference(chunk, mechanism, Fraction(1))
    assert y.size == chunk.steps.size
    np.testing.assert_array_equal(y.view(np.uint64), expected.view(np.uint64))
    np.testing.assert_array_equal(res.tables["samples"].column("step").to_numpy(), chunk.steps)


def test_only_new_segments_are_charged_with_their_runs():
    chunk = _chunk(np.random.default_rng(4), n_streams=7)
    spec = StreamSpec(epsilon="1/2", w=4, reconstruct="none")
    res = privatize_stream_chunk(chunk, spec)
    charged = {cost[1]: cost[2] for cost in res.costs}
    assert len(res.costs) == 6  # stream 0 has no steps, hence no segment
    for s in range(1, 7):
        new = [g for g in chunk.segments[s] if g.new]
        assert len(new) == 1
        key = f"stream:{chunk.stream_ids[s]}"
        cost = next(c[2] for c in res.costs if c[0] == chunk.user_ids[s] and c[1] == key)
        assert cost.epsilon == Fraction(1, 2) and cost.w == 4
        assert cost.runs == (StepRun(new[0].first_step, new[0].last_step + 1, Fraction(1, 8)),)
    assert charged  # every entry names the stream


def test_a_rekeyed_generator_keeps_nothing_of_its_previous_key():
    """Attack: leftovers (a buffered block, half a 64-bit word) leaking into the next stream."""
    gen = release_generator(99)
    for seed, n in [(5, 3), (2**256 - 1, 17), (0, 1), (2**255 + 3, 1001)]:
        gen.random(5)
        gen.integers(0, 2**32, 3, dtype=np.uint32)  # leaves half a word buffered
        fresh = release_generator(seed)
        rekey(gen, seed)
        np.testing.assert_array_equal(gen.random(n), fresh.random(n))
        assert str(gen.bit_generator.state) == str(fresh.bit_generator.state)


def test_rekey_refuses_other_generators_and_bad_seeds():
    with pytest.raises(ValueError, match="ChaCha"):
        rekey(np.random.default_rng(0), 1)
    with pytest.raises(ValueError, match="2\\^256"):
        rekey(release_generator(1), 2**256)


def test_the_same_stream_id_of_two_users_draws_two_keystreams():
    steps = np.arange(50, dtype=np.int64)
    chunk = StreamChunk(0, ("a", "b"), ("load", "load"), np.concatenate([steps, steps]),
                        np.full(100, 0.5), np.array([0, 50, 100]),
                        ((SeededSegment(0, 49, True, 11),), (SeededSegment(0, 49, True, 12),)))
    y = privatize_stream_chunk(chunk, StreamSpec(epsilon="1", w=1, reconstruct="none")
                               ).tables["samples"].column("y").to_numpy()
    assert not np.array_equal(y[:50], y[50:])


def _one_stream_chunk(segments: tuple[SeededSegment, ...], steps=None) -> StreamChunk:
    steps = np.arange(10, dtype=np.int64) if steps is None else steps
    return StreamChunk(0, ("u",), ("s",), steps, np.full(10, 0.5), np.array([0, 10]),
                       (segments,))


@pytest.mark.parametrize("segments, steps", [
    ((SeededSegment(0, 5, False, 1), SeededSegment(4, 9, True, 2)), None),  # overlap: twice
    ((SeededSegment(0, 3, False, 1), SeededSegment(5, 9, True, 2)), None),  # step 4 undrawn
    ((SeededSegment(0, 8, True, 1),), None),                                # step 9 undrawn
    ((), None),                                                             # nothing drawn
    ((SeededSegment(0, 9, True, 1), SeededSegment(20, 29, False, 2)), None),  # an empty one
    ((SeededSegment(1, 9, True, 1),), None),                                # step 0 undrawn
    ((SeededSegment(0, 9, True, 1),), np.array([0, 1, 2, 3, 5, 4, 6, 7, 8, 9])),  # unsorted
])
def test_a_plan_that_does_not_tile_the_steps_is_refused(segments, steps):
    entry = registry.stream("square_wave")
    with pytest.raises(AssertionError, match="this is a bug"):
        draw_stream_chunk(_one_stream_chunk(segments, steps), entry,
                          epsilon_per_step=Fraction(1), amount=Fraction(1), w=1)


def test_a_refused_value_names_its_own_stream():
    chunk = _chunk(np.random.default_rng(5), n_streams=6)
    bad = int(chunk.offsets[4]) + 2
    values = chunk.values.copy()
    values[bad] = 1.5
    chunk = StreamChunk(0, chunk.user_ids, chunk.stream_ids, chunk.steps, values, chunk.offsets,
                        chunk.segments)
    with pytest.raises(MechanismRunError) as info:
        privatize_stream_chunk(chunk, StreamSpec(epsilon="1", w=1, reconstruct="none"))
    assert (info.value.user_id, info.value.item_id) == (chunk.user_ids[4], chunk.stream_ids[4])
    assert "1.5" not in str(info.value)  # no raw value in the message
