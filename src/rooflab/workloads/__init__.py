"""Your own kernels on the Roofline: the public contract (docs/workloads.md).

    from rooflab import Workload

    def my_factory(params: dict, ctx) -> Workload:
        x = ctx.xp.asarray(ctx.rng.random(params["n"]), dtype=ctx.dtype)
        y = ctx.xp.empty_like(x)
        return Workload(run=lambda: ctx.xp.multiply(x, 2, out=y),
                        flops=params["n"], bytes=2 * x.nbytes)

A factory gets one case's params (one combination of the config's lists) and a `Context`, does
its allocation, and returns a `Workload`: `run()` is one call of the work with its arguments bound;
`flops` the useful FLOPs (the ledger's F), `bytes` the modelled bytes across the boundary named by
the memory level it is judged against (Q, cold cache); `executed_flops` what the implementation
really executes where that differs; `footprint` the bytes run() touches (its working set, apart
from the traffic ledger: which cache level holds it warm), where its `arrays` do not tell;
`check()` the largest relative error of run()'s output against a reference computed another way,
compared with `tolerance`; `arrays` the arrays run() touches, which a cold sample evicts (else the
caches are flushed by a buffer). rooflab times `run` with the
backend's timer and the usual discipline; nothing here imports numpy, numba or CuPy.
"""

from __future__ import annotations

import importlib
import itertools
import math
import numbers
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rooflab.vocabulary import too_many_points


class WorkloadError(ValueError):
    """A workload that cannot be measured as given: the message names it and the problem."""


@dataclass(frozen=True)
class Workload:
    run: Callable[[], object]
    flops: int
    bytes: int
    check: Callable[[], float] | None = None
    tolerance: float | None = None
    executed_flops: int | None = None
    # The arrays run() reads and writes: a cold sample evicts them from every cache level where
    # the backend can (the CPU's); without them, or elsewhere, the caches are flushed by a buffer.
    arrays: tuple = ()
    # The bytes run() touches (its working set, not its traffic): a warm point is judged against
    # the smallest cache level that holds them. None: the bytes of `arrays`, else `bytes`.
    footprint: int | None = None


@dataclass(frozen=True)
class Context:
    """What a factory gets beside its params: `xp` (numpy on the CPU backend, cupy on CUDA),
    `dtype` (the numpy dtype of the case's dtype name), `rng` (a numpy Generator seeded per case),
    `backend` ("cpu" or "cuda")."""

    xp: Any
    dtype: Any
    rng: Any
    backend: str


def load_entry(
    entry: str, name: str = "workload", path: Sequence[str] = ()
) -> Callable[[dict, Context], Workload]:
    """`package.module:function` imported, from the current directory and the folders of `path`
    (the config's workloads_path) as well as sys.path; one WorkloadError naming `name` and what
    to do when it cannot be."""
    module_name, _, function_name = entry.partition(":")
    if not module_name or not function_name:
        raise WorkloadError(f"{name}: entry {entry!r} is not 'package.module:function'")
    # after sys.path, not before: a user's folder never shadows an installed module
    folders = [os.getcwd(), *(os.path.abspath(folder) for folder in path)]
    sys.path.extend(folder for folder in folders if folder not in sys.path)
    try:
        module = importlib.import_module(module_name)
    except Exception as error:
        top = module_name.partition(".")[0]
        hint = (
            f"; rooflab looks in the current directory ({folders[0]}), the config's "
            f"workloads_path ({', '.join(folders[1:]) or 'none'}) and PYTHONPATH: put {top} "
            "in one of them, or name its folder in workloads_path"
            if isinstance(error, ModuleNotFoundError) and error.name == top
            else ""
        )
        raise WorkloadError(
            f"{name}: cannot import {module_name!r} ({type(error).__name__}: {error}){hint}"
        ) from None
    factory = getattr(module, function_name, None)
    if not callable(factory):
        raise WorkloadError(f"{name}: {module_name!r} has no function {function_name!r}")
    return factory


def _positive_int(value: object, what: str, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or int(value) <= 0:
        raise WorkloadError(f"{name}: {what} must be a positive integer, got {value!r}")
    return int(value)


def checked(workload: object, name: str) -> Workload:
    """The factory's result, refused in one line naming `name` unless it is a Workload with a
    callable `run`, positive integer `flops` and `bytes` (and `executed_flops`, `footprint` if
    given), and a `tolerance` > 0 wherever there is a `check`."""
    if not isinstance(workload, Workload):
        raise WorkloadError(
            f"{name}: the factory returned {type(workload).__name__}, not a rooflab.Workload"
        )
    if not callable(workload.run):
        raise WorkloadError(f"{name}: Workload.run is not callable")
    _positive_int(workload.flops, "flops", name)
    _positive_int(workload.bytes, "bytes", name)
    if workload.executed_flops is not None:
        _positive_int(workload.executed_flops, "executed_flops", name)
    if workload.footprint is not None:
        _positive_int(workload.footprint, "footprint", name)
    if not isinstance(workload.arrays, tuple | list):
        raise WorkloadError(
            f"{name}: Workload.arrays is a {type(workload.arrays).__name__}, not a tuple of arrays"
        )
    for index, array in enumerate(workload.arrays):
        if type(array).__module__.partition(".")[0] not in ("numpy", "cupy") or not hasattr(
            array, "nbytes"
        ):
            raise WorkloadError(
                f"{name}: Workload.arrays[{index}] is a {type(array).__name__}, "
                "not a numpy or CuPy array"
            )
    if workload.check is not None:
        if not callable(workload.check):
            raise WorkloadError(f"{name}: Workload.check is not callable")
        tolerance = workload.tolerance
        if not isinstance(tolerance, numbers.Real) or not (
            math.isfinite(tolerance) and tolerance > 0
        ):
            raise WorkloadError(f"{name}: a check needs a tolerance > 0, got {tolerance!r}")
    return workload


def check_error(workload: Workload, name: str) -> float | None:
    """The check's largest relative error, or None without a check; a check that raises or
    returns something that is not a finite number >= 0 is one WorkloadError."""
    if workload.check is None:
        return None
    try:
        error = workload.check()
    except Exception as failure:
        raise WorkloadError(f"{name}: check() raised {type(failure).__name__}: {failure}") from None
    try:
        error = float(error)
    except (TypeError, ValueError):
        raise WorkloadError(f"{name}: check() returned {error!r}, not a number") from None
    if not math.isfinite(error) or error < 0:
        raise WorkloadError(f"{name}: check() returned {error!r}, not a finite error >= 0")
    return error


@dataclass(frozen=True)
class Case:
    """One combination of a workload's params, in one dtype."""

    workload: str
    dtype: str
    params: dict

    @property
    def params_id(self) -> str:
        return "_".join(f"{key}{value}" for key, value in sorted(self.params.items())) or "default"

    @property
    def config_id(self) -> str:
        return f"{self.workload}/{self.dtype}/{self.params_id}"


def cases(name: str, params: Mapping[str, list], dtypes: list[str]) -> list[Case]:
    """Every combination of the params' lists, per dtype, in a stable order. Values that name the
    same case (`n: [256, "256"]`; YAML's `false` and `no`) are refused: their samples would be
    pooled into one point and their rows stored twice."""
    keys = sorted(params)
    for key in keys:
        seen: dict[str, object] = {}
        for value in params[key]:
            shown = f"{key}{value}"  # as in Case.params_id
            if shown in seen:
                raise WorkloadError(
                    f"{name}: params.{key}: values {seen[shown]!r} and {value!r} name the same "
                    f"case ({shown}); give each value once"
                )
            seen[shown] = value
    if len(set(dtypes)) != len(dtypes):
        raise WorkloadError(f"{name}: dtypes {list(dtypes)} name a dtype twice")
    refused = too_many_points(
        {f"params.{k}": len(params[k]) for k in keys} | {"dtypes": len(dtypes)}
    )
    if refused:
        raise WorkloadError(f"{name}: {refused}")
    return [
        Case(name, dtype, dict(zip(keys, values, strict=True)))
        for dtype in dtypes
        for values in itertools.product(*(params[key] for key in keys))
    ]


__all__ = [
    "Case",
    "Context",
    "Workload",
    "WorkloadError",
    "cases",
    "check_error",
    "checked",
    "load_entry",
]
