"""DVC stage `aggregate` of the tuning-cost benchmark (`study benchmark` writes it into <out>/dvc.yaml and runs it in
<out>): every cell's committed report pooled into the meta-verdict, forest plots, tables and a report."""

import argparse

from study.benchmark import aggregate_benchmark


def main() -> None:
    """Read the arguments DVC's command gives and write the benchmark's report."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--plan", default="plan.json", help="the cells, as `study benchmark` wrote them")
    parser.add_argument("--report-dir", required=True, help="where the report, tables and figures go")
    parser.add_argument("--label", default=".", help="the benchmark's folder as the report names it")
    parser.add_argument("--dpi", type=int, default=120)
    args = parser.parse_args()
    written = aggregate_benchmark(args.plan, args.report_dir, label=args.label, dpi=args.dpi)
    print(f"benchmark report written: {', '.join(str(path) for path in written.values())}")


if __name__ == "__main__":
    main()
