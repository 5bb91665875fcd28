"""Two imported profiles compared operator by operator (docs/imports.md): the operators of two
import runs paired by name, input shapes and dtype, each key's occurrences in a profile (one per
step of a training loop, per layer of the same shape) its samples, judged by
rooflab.comparison as any two runs' samples are. `rooflab compare` adds these rows to its own:
for two import runs named by id, or for `previous` and `latest`, each import's two newest runs
(the file changed and was read again)."""

from __future__ import annotations

import dataclasses
import json

from rooflab.comparison import MIN_EFFECT, compare_samples

# what the two profiles say about how they were recorded; a change is a changed condition
_PROVENANCE = ("tool_version", "device", "sha256")


def import_pairs(connection, baseline: str, candidate: str) -> list[tuple[str, str]]:
    """(baseline, candidate) import run ids: the two named, where both are import runs; for
    previous and latest, each import name's two newest runs."""
    runs = connection.execute(
        "SELECT run_id, sweep FROM runs WHERE kind = 'import' ORDER BY started_at, run_id"
    ).fetchall()
    named = {run_id for run_id, _ in runs}
    if baseline in named and candidate in named:
        return [(baseline, candidate)]
    if (baseline, candidate) != ("previous", "latest"):
        return []
    by_name: dict[str, list[str]] = {}
    for run_id, name in runs:
        by_name.setdefault(name, []).append(run_id)
    return [(ids[-2], ids[-1]) for _, ids in sorted(by_name.items()) if len(ids) > 1]


def _operators(connection, run_id: str) -> dict[str, tuple[str, list[float]]]:
    """key -> (its op, the time of each occurrence), the key `op dims dtype`."""
    rows = connection.execute(
        "SELECT op, input_dims, dtype, time_s FROM imported_operators "
        "WHERE run_id = ? AND time_s > 0 ORDER BY index",
        [run_id],
    ).fetchall()
    found: dict[str, tuple[str, list[float]]] = {}
    for op, dims, dtype, time_s in rows:
        shapes = json.dumps(json.loads(dims)) if dims else "[]"
        key = f"{op} {shapes}" + (f" {dtype}" if dtype else "")
        found.setdefault(key, (op, []))[1].append(time_s)
    return found


def _changed(connection, baseline: str, candidate: str) -> str | None:
    """What the two profiles' provenance says changed (tool version, device, file)."""
    sql = f"SELECT {', '.join(_PROVENANCE)} FROM imported_profiles WHERE run_id = ?"
    base, cand = (connection.execute(sql, [run_id]).fetchone() for run_id in (baseline, candidate))
    if base is None or cand is None:
        return None
    changes = [
        f"{name} {b} → {c}"
        for name, b, c in zip(_PROVENANCE, base, cand, strict=True)
        if b != c and name != "sha256"
    ]
    return "; ".join(changes) or None


def compare_imports(
    connection, baseline: str, candidate: str, min_effect: float = MIN_EFFECT
) -> list[dict]:
    """Every operator key in both profiles of each pair of import runs, judged: dicts with the
    run_comparisons columns (kind `import`)."""
    out = []
    for base_id, cand_id in import_pairs(connection, baseline, candidate):
        base_ops, cand_ops = _operators(connection, base_id), _operators(connection, cand_id)
        machine_id, backend = connection.execute(
            "SELECT machine_id, backend FROM runs WHERE run_id = ?", [cand_id]
        ).fetchone()
        changed = _changed(connection, base_id, cand_id)
        for key in sorted(base_ops.keys() & cand_ops.keys()):
            op, base_times = base_ops[key]
            compared = compare_samples(base_times, cand_ops[key][1], min_effect)
            out.append(
                {
                    "machine_id": machine_id,
                    "backend": backend,
                    "kind": "import",
                    "key": key,
                    "name": op,
                    "baseline_run_id": base_id,
                    "candidate_run_id": cand_id,
                    **dataclasses.asdict(compared),
                    "min_effect": min_effect,
                    "conditions_changed": changed,
                    "samples_verdict": compared.verdict,
                    "accuracy_changed": None,
                }
            )
    return out
