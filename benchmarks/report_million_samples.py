"""The report on a store holding 1,000,000 samples: build time and page size.

    python benchmarks/report_million_samples.py [--samples 1000000]

Writes one GEMM run with `--samples` samples (the same synthetic run as ingest_samples.py: 200
configurations x 2 cache states), ingests it, then times `build_report` next to a reference
measured in the same run: DuckDB computing the per-configuration quantiles the distribution chart
needs, over the same samples, and says where the report's time goes: drawing each chart again
(vl-convert: the SVG, then the PNG from it) in the same process. Targets: report under 3 s,
index.html under 10 MB. Exit status 1 if one is missed.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ingest_samples import write_gemm_run
from smoke import add_smoke, seconds, verdict

from rooflab.report import build_report
from rooflab.store import ingest, query

TARGET_S, TARGET_HTML_BYTES = 3.0, 10_000_000
QUANTILES_SQL = """
    SELECT config_id, cache_state, min(seconds), quantile_cont(seconds, [0.25, 0.5, 0.75]),
           max(seconds)
    FROM samples GROUP BY config_id, cache_state
"""


def drawing_seconds(specs: dict) -> tuple[float, float]:
    """vl-convert's time for every chart's SVG, and for its PNG from that SVG (as build_report)."""
    import vl_convert as vlc

    from rooflab.report.build import vl_version

    version, svg_s, png_s = vl_version(), 0.0, 0.0
    for spec in specs.values():
        svg_seconds, drawn = seconds(vlc.vegalite_to_svg, spec, vl_version=version)
        svg_s += svg_seconds
        png_s += seconds(vlc.svg_to_png, drawn, scale=2)[0]
    return svg_s, png_s


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=1_000_000)
    add_smoke(parser)
    args = parser.parse_args()
    if args.smoke:
        args.samples = 10_000
    with tempfile.TemporaryDirectory() as folder:
        results, db = Path(folder) / "results", Path(folder) / "rooflab.duckdb"
        write_gemm_run(results, args.samples)
        ingest(db, results)
        reference_s, _ = seconds(query, db, QUANTILES_SQL)
        report_s, report = seconds(build_report, db, Path(folder) / "report")
        html_bytes = report.index.stat().st_size
        svg_s, png_s = drawing_seconds(report.specs)
    ok = report_s < TARGET_S and html_bytes < TARGET_HTML_BYTES
    print(f"samples in the store        {args.samples:,}")
    print(f"build_report                {report_s:7.2f} s   (target < {TARGET_S:.0f} s)")
    print(
        f"DuckDB quantiles reference  {reference_s:7.2f} s   report / reference = "
        f"{report_s / reference_s:.1f}"
    )
    print(
        f"  drawing the {len(report.specs)} charts again: SVG {svg_s:.2f} s, PNG from it "
        f"{png_s:.2f} s; the rest (queries, specs, page) about {report_s - svg_s - png_s:.2f} s"
    )
    print(f"index.html                  {html_bytes / 1e6:7.2f} MB  (target < 10 MB)")
    return verdict(ok, args.smoke)


if __name__ == "__main__":
    sys.exit(main())
