"""Class-count sweep: the whole study at several training class counts C, and how the verdict moves with C.

Each C gets a folder (`sweeps/C<C>/`) holding its own params.yaml and a dvc.yaml generated from the
repository's (the same stages, commands, params and outs, the code deps taken from the repository root),
in the sweep's own DVC project (`sweeps/`, so the repository's `dvc status` shows its own study alone). A second
pipeline, `sweeps/dvc.yaml`, holds one stage, `aggregate`, whose declared deps are the files of every C's study
that the aggregate reads: reports/metrics.json, reports/tables/differences.csv, data/prepared/manifest.json and
results/search/<loss>/best.json. It writes one table, one figure and a report with a trend sentence computed from
the numbers. study/many_studies.py, which the tuning-cost benchmark shares, writes and runs them.

`dvc repro` runs them all: DVC skips every stage whose command, deps and params did not change, so a
finished C costs nothing, a change to the report's code reruns only each C's `report` stage and the
aggregate, and a failed stage leaves every finished one in place.

- `pipelines`: the class counts and the sweep's studies;
- `aggregate`: the table, the trend sentences, the figure and the report.
"""

from study.sweep.aggregate import aggregate_sweep, class_count_table, trend_sentences, write_sweep_report
from study.sweep.pipelines import (AGGREGATE_MODULES, Sweep, SweepError, class_count_dir, class_count_params,
                                   default_dataset_template, run_sweep, total_classes_for, write_sweep)

__all__ = ["AGGREGATE_MODULES", "Sweep", "SweepError", "aggregate_sweep", "class_count_dir", "class_count_params",
           "class_count_table", "default_dataset_template", "run_sweep", "total_classes_for", "trend_sentences",
           "write_sweep", "write_sweep_report"]
