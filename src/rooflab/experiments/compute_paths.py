"""The compute ceilings' instruction paths: one FMA ceiling per dtype and vector path the backend
builds, and the check that no library GEMM beats the roof its dtype is judged against."""

from __future__ import annotations

from typing import NamedTuple

from rooflab.units import format_quantity
from rooflab.vocabulary import compute_path, fma_path_name


class FmaPath(NamedTuple):
    dtype: str
    isa: str | None  # None: the backend's one unnamed path (a GPU's FMA kernel)
    widest: bool  # the dtype's default roof

    @property
    def name(self) -> str:
        """The ceiling's name: fp64_fma (widest), fp64_fma_avx2."""
        return fma_path_name(self.dtype, self.isa, self.widest)

    @property
    def label(self) -> str:
        """For the progress line: fp64, or fp64 avx2."""
        return self.dtype if self.widest or self.isa is None else f"{self.dtype} {self.isa}"

    def config_id(self, round_index: int) -> str:
        """fma/fp64/round0 for a dtype's widest path, fma/fp64/avx2/round0 for a narrower one."""
        return f"fma/{self.label.replace(' ', '/')}/round{round_index}"


def fma_paths(dtypes, isas) -> list[FmaPath]:
    """A path per dtype and instruction path (isas widest first: the first is the dtype's roof)."""
    return [
        FmaPath(dtype, isa, widest=index == 0) for dtype in dtypes for index, isa in enumerate(isas)
    ]


def stream_sweeps(kernels, isas) -> list[tuple[str, str | None, str]]:
    """(kernel, isa, name) of each bandwidth sweep: every kernel at the widest path's width, and
    triad again at each narrower width (`triad_avx2`), since a level's best bandwidth need not
    come from the widest vectors (seen on a Xeon: L2 triad 6-10 % faster with 256-bit than with
    512-bit accesses, L1 40 % slower). A level's ceiling is its best kernel, as always."""
    sweeps = [(kernel, isas[0], kernel) for kernel in kernels]
    if "triad" in kernels:
        sweeps += [("triad", isa, f"triad_{isa}") for isa in isas[1:]]
    return sweeps


def beaten_roofs(ceilings: list[dict], backend: str) -> list[str]:
    """Flag each compute roof a library GEMM of the same dtype beats (a fault of the roof: the
    machine does more than it says), in place (`roof_beaten`, `roof_beaten_evidence`), and
    return a line per fault naming both figures. A library ceiling is compared with the roof its
    dtype's GEMMs are judged against (vocabulary.compute_path) only: a bf16 tensor GEMM above the
    fp32 FMA roof is another path, not a fault."""
    roofs: dict[str, dict] = {}  # a name may have several rows (library variants): the best
    for row in ceilings:
        if (
            row["kind"] == "compute"
            and row["value"] > roofs.get(row["name"], {"value": 0})["value"]
        ):
            roofs[row["name"]] = row
    for row in ceilings:
        row.setdefault("roof_beaten", False if row["kind"] == "compute" else None)
        row.setdefault("roof_beaten_evidence", None)
    lines = []
    for library in ceilings:
        roof = roofs.get(compute_path(backend, library["dtype"]) or "")
        if library["kind"] != "compute" or library["kernel"] == "fma_chains":
            continue  # FMA paths are roofs of their own (a narrower path is another roof)
        if roof is None or roof["name"] == library["name"]:
            continue
        if library.get("unit") != roof.get("unit") or library["value"] <= roof["value"]:
            continue
        rate = "op_rate" if roof.get("unit") == "OP/s" else "flop_rate"
        evidence = (
            f"{library['name']} ({library['kernel']}) "
            f"{format_quantity(library['value'], rate, 4)} > {roof['name']} "
            f"{format_quantity(roof['value'], rate, 4)}"
        )
        if roof["roof_beaten"]:
            roof["roof_beaten_evidence"] += f"; {evidence}"
        else:
            roof["roof_beaten"], roof["roof_beaten_evidence"] = True, evidence
        lines.append(
            f"roof beaten: {evidence}: a library call beats the {roof['name']} roof, so that "
            f"roof is below what this machine does (its {library['dtype']} points are judged "
            "against a ceiling the machine does not have)"
        )
    return lines
