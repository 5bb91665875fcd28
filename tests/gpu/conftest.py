"""Tests under tests/gpu/ need a CUDA device: they are marked `gpu` and skipped, with the reason,
where rooflab.backends.selection.cuda_problem() finds none. Run them alone with `pytest -m gpu`."""

from pathlib import Path

import pytest

from rooflab.backends.base import FLUSH_BYTES_ENV
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


@pytest.fixture(scope="package", autouse=True)
def flush_by_its_rule():
    """A GPU's cold samples flush as rooflab sizes it (2x its L2, or from the L2's measured edge),
    not by the test suite's 8 MiB (tests/conftest.py, $ROOFLAB_FLUSH_BYTES): these tests judge
    cold figures and the flush's size, and a GPU's flush takes milliseconds. The measuring
    children the tests start inherit this."""
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv(FLUSH_BYTES_ENV, raising=False)
        yield


@pytest.fixture(scope="package")
def cuda(flush_by_its_rule):
    from rooflab.backends.cuda import CudaBackend

    return CudaBackend()
