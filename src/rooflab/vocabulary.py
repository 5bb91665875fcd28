"""The words every layer shares, defined once: the cache states a measurement is taken in, and how
a counter replay's cache control pairs with them. Strings underneath (a StrEnum), so they are
stored, printed and compared as the words themselves."""

from __future__ import annotations

from enum import StrEnum


class CacheState(StrEnum):
    WARM = "warm"  # the same inputs re-run: steady-state reuse of whatever the caches hold
    COLD = "cold"  # the caches evicted before each sample (outside the timed region)


CACHE_STATES = tuple(CacheState)

# Nsight Compute's --cache-control of a replay -> the cache state of the timing it pairs with, and
# the words stored with a point: a flushed replay counts cold traffic, a no-flush replay warm.
NCU_PAIRINGS = {
    "all": (CacheState.COLD, "flushed replay ↔ cold timing"),
    "none": (CacheState.WARM, "no-flush replay ↔ warm timing"),
}
