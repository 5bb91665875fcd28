"""The report on a store of 1,000 runs over 100 sweeps: build time and the largest image.

    python benchmarks/report_many_runs.py [--runs 1000] [--sweeps 100]

Writes the runs as a CPU campaign keeps them (benchmarks/many_runs.py: one ceilings run, each
sweep rerun runs / sweeps times, 3 shapes x 2 cache states each), runs the roofline step and
ingest, then times `build_report` next to a reference measured in the same run: the report of a
small store (one run of each of 6 sweeps, as many as the report draws one by one), so the ratio
says what the history costs, whatever this machine's speed. Targets: report under 10 s, every PNG
at most 4096 px on a side and 4 MB. Exit status 1 if one is missed.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from many_runs import MAX_PNG_BYTES, MAX_PNG_SIDE_PX, build_many_runs_store, png_size
from smoke import add_smoke, seconds, verdict

from rooflab.report import build_report

TARGET_S = 10.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--sweeps", type=int, default=100)
    add_smoke(parser)
    args = parser.parse_args()
    small = (6, 6)  # the reference's runs and sweeps
    if args.smoke:
        args.runs, args.sweeps, small = 12, 3, (2, 2)
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        setup_s, db = seconds(build_many_runs_store, root / "many", args.runs, args.sweeps)
        small_db = build_many_runs_store(root / "small", *small)
        build_report(small_db, root / "warm-up")  # vl-convert's first call starts its engine
        reference_s, _ = seconds(build_report, small_db, root / "small-report")
        report_s, report = seconds(build_report, db, root / "report")
        images = [
            (png_size(p), p.stat().st_size, p.name) for p in report.files if p.suffix == ".png"
        ]
        html_bytes = report.index.stat().st_size
    (width, height), png_bytes, name = max(images, key=lambda image: max(image[0]))
    heaviest = max(size for _, size, _ in images)
    side_ok = all(max(dims) <= MAX_PNG_SIDE_PX for dims, _, _ in images)
    bytes_ok = heaviest <= MAX_PNG_BYTES
    ok = report_s < TARGET_S and side_ok and bytes_ok
    print(f"store                        {args.runs:,} runs over {args.sweeps} sweeps "
          f"(written, analysed and ingested in {setup_s:.1f} s)")  # fmt: skip
    print(f"build_report                 {report_s:7.2f} s   (target < {TARGET_S:.0f} s)")
    print(
        f"small store's report         {reference_s:7.2f} s   report / reference = "
        f"{report_s / reference_s:.2f}"
    )
    print(f"charts                       {len(report.charts)}")
    print(
        f"largest image                {name}: {width} x {height} px, {png_bytes / 1e6:.2f} MB "
        f"(target <= {MAX_PNG_SIDE_PX} px a side)"
    )
    print(
        f"heaviest image               {heaviest / 1e6:.2f} MB "
        f"(target <= {MAX_PNG_BYTES / 1e6:g} MB)"
    )
    print(f"index.html                   {html_bytes / 1e6:7.2f} MB")
    return verdict(ok, args.smoke)


if __name__ == "__main__":
    sys.exit(main())
