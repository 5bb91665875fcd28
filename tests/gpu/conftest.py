"""Tests under tests/gpu/ need a CUDA device: they are marked `gpu` and skipped, with the reason,
where rooflab.backends.selection.cuda_problem() finds none. Run them alone with `pytest -m gpu`."""

from pathlib import Path

import pytest

from rooflab.backends.selection import cuda_problem

HERE = Path(__file__).resolve().parent
_problem: list[str | None] = []


def _cuda_problem() -> str | None:
    if not _problem:
        _problem.append(cuda_problem())
    return _problem[0]


def pytest_collection_modifyitems(config, items):
    for item in items:
        if HERE not in Path(str(item.fspath)).resolve().parents:
            continue
        item.add_marker(pytest.mark.gpu)
        problem = _cuda_problem()
        if problem is not None:
            item.add_marker(pytest.mark.skip(reason=f"no usable CUDA device: {problem}"))


@pytest.fixture(scope="session")
def cuda():
    from rooflab.backends.cuda import CudaBackend

    return CudaBackend()
