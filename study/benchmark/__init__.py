"""The tuning-cost benchmark: the whole study run in many cells (data sources, class counts, protocols, losses and
tuners), and a meta-verdict pooled over them.

The cells are declared in one file (presets/benchmark/full.yaml; quick.yaml for a short look). `study benchmark`
writes one folder per cell under benchmarks/cells/ with its params.yaml and a dvc.yaml generated from the
repository's, plan.json and the aggregate's own dvc.yaml, all in the benchmark's own DVC project (benchmarks/cells/,
so the repository's `dvc status` shows its own study alone; study/many_studies.py, which the class-count sweep
shares, writes and runs them), then runs `dvc repro` on the cells that are not finished and on the aggregate. A
cell is finished once its committed report is its current study's (`cell_finished`): its folder's reports/,
dvc.lock and params.yaml go into git, so that a fresh clone resumes without retraining it and the aggregate reads
only those files, and its stages are frozen, so that DVC keeps it as it is too. Cells of one configuration share
their untuned runs through DVC's run cache.

- `plan`: the declaration, its cells and their params;
- `pipelines`: the cells' folders, which cells are finished, and `dvc repro` over the rest;
- `cells`: one finished cell read from its committed files;
- `fingerprint`: what a finished cell's committed report was computed from, checked before the aggregate reads it;
- `meta`: the pooled numbers per loss and the tuners at equal device-seconds;
- `cost`: what the benchmark trained, in trainings, iterations and device-seconds, and what stopping at the plateau
  would have saved;
- `report`: sentences, forest plots, tables and the report itself.
"""

from study.benchmark.cells import OUTCOMES, cell_rows
from study.benchmark.meta import pooled_table, tuner_table
from study.benchmark.pipelines import (CELL_INPUTS, Benchmark, cell_finished, cells_to_run, default_locations,
                                       reproduce_benchmark, run_benchmark, write_benchmark)
from study.benchmark.plan import FULL_PLAN, QUICK_PLAN, BenchmarkPlan, Cell, load_plan, planned_runs
from study.benchmark.report import aggregate_benchmark, lead_sentence

__all__ = ["CELL_INPUTS", "FULL_PLAN", "OUTCOMES", "QUICK_PLAN", "Benchmark", "BenchmarkPlan", "Cell",
           "aggregate_benchmark", "cell_finished", "cell_rows", "cells_to_run", "default_locations",
           "lead_sentence", "load_plan", "planned_runs", "pooled_table",
           "reproduce_benchmark", "run_benchmark", "tuner_table", "write_benchmark"]
