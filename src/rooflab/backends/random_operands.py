"""Seeded random GEMM inputs built from element indices, for numpy and CuPy alike (`xp`).

Both backends take their operands from here, so one seed gives the same matrices on the CPU and
on the GPU. The CUDA backend makes them on the device, where a matrix of 8192 x 8192 takes
milliseconds instead of seconds on the host, and without cuRAND (one library fewer that a GPU
machine must have). Each element is a pure function of (seed, stream, index) through SplitMix64.

Magnitudes lie in [0.5, 1) with random signs, so there are no zeros (which run faster than real
data and hide unwritten outputs) and no exact cancellations to zero.
"""

from __future__ import annotations

__all__ = ["random_nonzero"]

_GOLDEN = 0x9E3779B97F4A7C15
_MIX_1 = 0xBF58476D1CE4E5B9
_MIX_2 = 0x94D049BB133111EB
_MASK_64 = (1 << 64) - 1


def _splitmix64(xp, state):
    """One SplitMix64 output per uint64 element (integer arithmetic wraps modulo 2^64)."""
    z = state
    z = (z ^ (z >> xp.uint64(30))) * xp.uint64(_MIX_1)
    z = (z ^ (z >> xp.uint64(27))) * xp.uint64(_MIX_2)
    return z ^ (z >> xp.uint64(31))


def random_nonzero(xp, shape: tuple[int, ...], seed: int, stream: int = 0):
    """float64 array of `shape`: |value| in [0.5, 1), sign random; `stream` separates operands."""
    if seed < 0 or stream < 0:
        raise ValueError(f"seed and stream must be non-negative, got {seed} and {stream}")
    count = 1
    for extent in shape:
        count *= int(extent)
    base = ((seed * 0x100000001B3) ^ (stream * _GOLDEN) ^ 0xD1B54A32D192ED03) & _MASK_64
    index = xp.arange(1, count + 1, dtype=xp.uint64)
    bits = _splitmix64(xp, index * xp.uint64(_GOLDEN) + xp.uint64(base))
    unit = (bits >> xp.uint64(11)).astype(xp.float64) * (2.0**-53)  # [0, 1), 53 random bits
    magnitude = 0.5 + 0.5 * unit  # [0.5, 1)
    negative = (bits & xp.uint64(1)) == xp.uint64(1)  # the lowest bit, unused by `unit`
    return xp.where(negative, -magnitude, magnitude).reshape(shape)
