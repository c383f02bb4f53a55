"""DVC stage `aggregate` of a class-count sweep (`study sweep` writes it into <out>/dvc.yaml and runs it in <out>):
every C's study in one table, one figure and a report with the trend, read from the files the stage declares as deps."""

import argparse

from stages import begin
from study.sweep import aggregate_sweep


def main() -> None:
    begin()
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--classes", type=int, nargs="+", required=True, help="the class counts, one folder C<C> each")
    parser.add_argument("--report-dir", required=True, help="where the table, figure and reports go")
    parser.add_argument("--label", default=".", help="the sweep's folder as the report names it")
    parser.add_argument("--dpi", type=int, default=120)
    args = parser.parse_args()
    written = aggregate_sweep(args.classes, ".", args.report_dir, label=args.label, dpi=args.dpi)
    print(f"sweep report written: {', '.join(str(path) for path in written.values())}")


if __name__ == "__main__":
    main()
