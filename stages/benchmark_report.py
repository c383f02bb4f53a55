"""DVC stage `aggregate` of the tuning-cost benchmark (`study benchmark` writes it into <out>/dvc.yaml and runs it in
<out>): every cell's committed report pooled into the meta-verdict, forest plots, tables and a report."""

import argparse
import sys

from stages import begin
from study.benchmark import aggregate_benchmark
from study.benchmark.fingerprint import CellReportError
from study.benchmark.pipelines import read_plan_file
from study.interruptions import Interrupted, ends_as_interrupted


def main() -> None:
    """Read the arguments DVC's command gives and write the benchmark's report; a cell that cannot be pooled ends it
    in one line, and Ctrl-C or SIGTERM in one line saying the previous report is as it was."""
    begin()
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--plan", default="plan.json", help="the cells, as `study benchmark` wrote them")
    parser.add_argument("--report-dir", required=True, help="where the report, tables and figures go")
    parser.add_argument("--label", default=".", help="the benchmark's folder as the report names it")
    parser.add_argument("--dpi", type=int, default=120)
    args = parser.parse_args()
    with ends_as_interrupted():
        try:
            read_plan_file(args.plan)  # a cell listed twice, none, or longer_of in a cycle: before a cell is read
        except ValueError as error:
            sys.exit(f"benchmark report not written: {error}")
        try:
            written = aggregate_benchmark(args.plan, args.report_dir, label=args.label, dpi=args.dpi)
        except CellReportError as error:
            sys.exit(f"benchmark report not written: {error}")
        except Interrupted as interruption:  # before its swap (study.report.writer.write_staged says otherwise)
            interruption.kept = interruption.kept or f"nothing in {args.report_dir} was changed"
            raise
    print(f"benchmark report written: {', '.join(str(path) for path in written.values())}")


if __name__ == "__main__":
    main()
