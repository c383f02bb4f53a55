"""Cheaper studies, measured on real cells: each headline cell rerun from scratch with the levers the stages have
(presets/benchmark/levers.yaml: every untuned method's rates chosen by val at 30% of the length, the search's trials
by successive halving) against its committed twin, which trained every rate and every trial to the end. The twins
share every other key, the sampler seed included, so the search draws the same (s, m) points at the same seeds.

Per cell: what each trained, in iterations (both counted alike) and in seconds (the twins ran months apart under other
loads, so only the iterations compare cleanly); where the search and the rates chose as at the end; each method −
Fixed AdaCos in both, and whether the rerun's tuned ArcFace − Fixed AdaCos lies inside the committed cell's 95%
interval. Then the converged headline's cost projected from the per-cell ratios (a projection, labelled so).

    study benchmark --plan presets/benchmark/levers.yaml --out benchmarks/levers --report-dir reports/benchmark-levers
    python benchmarks/levers.py    # writes benchmarks/results/levers.md and its tables
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from study.benchmark.card import pct, pct_interval  # noqa: E402
from study.benchmark.cost import span  # noqa: E402
from study.report.formats import method_name  # noqa: E402
from study.results import write_bytes  # noqa: E402

TITLE = "Choosing rates and trials early, on headline cells rerun from scratch: what it saves and what it changes"
COMMITTED = (REPO / "benchmarks" / "cells", REPO / "reports" / "benchmark" / "tables")
RERUN = (REPO / "benchmarks" / "levers", REPO / "reports" / "benchmark-levers" / "tables")
OUT = REPO / "benchmarks" / "results"
SEARCHED = "arcface_tuned"
LOSS = SEARCHED.removesuffix("_tuned")


@functools.cache  # each table is read once, though the cost, the choices and the differences all ask for it
def table(path: Path) -> pd.DataFrame:
    return pd.read_csv(path)


def trials(cells: Path, cell: str) -> pd.DataFrame:
    """Every trial of the cell's search of the tuned loss: split, trial, (s, m), its state, iterations and whether val
    selected it."""
    landscape = table(cells / cell / "reports" / "tables" / "landscape.csv")
    return landscape[landscape["loss"] == LOSS]


def chosen_rates(cells: Path, cell: str) -> pd.DataFrame:
    """The rate each untuned method's final runs kept, per class split."""
    scores = table(cells / cell / "reports" / "tables" / "run_scores.csv")
    untuned = scores[scores["method"] != SEARCHED]
    return untuned.groupby(["method", "split"], as_index=False)["lr"].first()


def choices(cell: str) -> pd.DataFrame:
    """Where the rerun chose what its twin chose at the end: the search's selected trial per split, and each untuned
    method's rate per split."""
    at_end, early = trials(COMMITTED[0], cell), trials(RERUN[0], cell)
    picked = [frame[frame["best"].astype(bool)].set_index("split")["trial"] for frame in (at_end, early)]
    search = pd.DataFrame({"cell": cell, "choice": "search trial", "method": SEARCHED, "at_end": picked[0],
                           "early": picked[1]}).rename_axis("split").reset_index()
    rates = chosen_rates(COMMITTED[0], cell).merge(chosen_rates(RERUN[0], cell), on=["method", "split"],
                                                   suffixes=("_end", "_early"))
    rates = pd.DataFrame({"cell": cell, "choice": "learning rate", "method": rates["method"], "split": rates["split"],
                          "at_end": rates["lr_end"], "early": rates["lr_early"]})
    both = pd.concat([search, rates], ignore_index=True)
    return both.assign(same=both["at_end"] == both["early"])


def cost(cell: str) -> dict:
    """What the twins trained: iterations and seconds, the search's and the rest's (final and tuned runs)."""
    row = {"cell": cell}
    for name, (cells, tables) in (("end", COMMITTED), ("early", RERUN)):
        costs = table(tables / "costs.csv").set_index("cell").loc[cell]
        search = trials(cells, cell)
        row.update({f"search_iterations_{name}": int(search["iterations"].sum()),
                    f"iterations_{name}": float(costs["iterations_trained"]),
                    f"seconds_{name}": float(costs["seconds"]),
                    f"search_seconds_{name}": float(costs["search_seconds"]),
                    f"pruned_{name}": int((search["state"] == "PRUNED").sum()), "trials": len(search)})
    for name in ("end", "early"):
        row[f"finals_iterations_{name}"] = row[f"iterations_{name}"] - row[f"search_iterations_{name}"]
    row["search_ratio"] = row["search_iterations_early"] / row["search_iterations_end"]
    row["finals_ratio"] = row["finals_iterations_early"] / row["finals_iterations_end"]
    row["cell_ratio"] = row["iterations_early"] / row["iterations_end"]
    row["seconds_ratio"] = row["seconds_early"] / row["seconds_end"]
    return row


def differences(cell: str) -> pd.DataFrame:
    """Each method − Fixed AdaCos in % of Fixed AdaCos's score, at the end and early, with their 95% intervals."""
    frames = []
    for name, (_, tables) in (("end", COMMITTED), ("early", RERUN)):
        rows = table(tables / "cells.csv").query("cell == @cell")
        share = rows["reference_test_mean"]
        frames.append(pd.DataFrame({"method": rows["method"], f"relative_{name}": rows["difference"] / share,
                                    f"low_{name}": rows["low"] / share, f"high_{name}": rows["high"] / share}))
    both = frames[0].merge(frames[1], on="method").assign(cell=cell)
    return both.assign(inside=both["relative_early"].between(both["low_end"], both["high_end"]))


def projection(ratios: pd.DataFrame) -> dict:
    """The converged headline's device time, committed and projected with the rerun cells' search and finals ratios
    (their smallest and largest): a projection, not a measurement."""
    costs = table(COMMITTED[1] / "costs.csv").query("headline")
    finals = costs["seconds"] - costs["search_seconds"]
    projected = [(costs["search_seconds"] * ratios["search_ratio"].agg(way) + finals * ratios["finals_ratio"].agg(way))
                 .sum() for way in ("min", "max")]
    return {"cells": len(costs), "committed_hours": costs["seconds"].sum() / 3600,
            "projected_low_hours": projected[0] / 3600, "projected_high_hours": projected[1] / 3600}


def write_summary(cells: list[str], out: Path) -> None:
    from study.report.document import Section, Table, render_markdown

    chosen = pd.concat([choices(cell) for cell in cells], ignore_index=True)
    costs = pd.DataFrame([cost(cell) for cell in cells])
    moved = pd.concat([differences(cell) for cell in cells], ignore_index=True)
    projected = projection(costs)
    write_bytes(chosen.to_csv(index=False).encode(), out / "levers_choices.csv")
    write_bytes(costs.to_csv(index=False).encode(), out / "levers_cost.csv")
    write_bytes(moved.to_csv(index=False).encode(), out / "levers_differences.csv")

    setup = (f"Cells: {', '.join(cells)}, each rerun from scratch with presets/benchmark/levers.yaml (rates chosen at "
             "30% of the length, search trials by successive halving) against the committed cell of the same name, "
             "which trained every rate and every trial to the end; the two differ in those two keys only.")
    searched, rates = (chosen[chosen["choice"] == kind] for kind in ("search trial", "learning rate"))
    answer = (f"The search selected the trial it selected at the end on {int(searched['same'].sum())} of "
              f"{len(searched)} class splits; val chose the rate it chose at the end on {int(rates['same'].sum())} of "
              f"{len(rates)} (method, class split) pairs. Against its twin, each cell trained: "
              + "; ".join(f"{row.cell} {row.cell_ratio:.2f}× the iterations (its search {row.search_ratio:.2f}×, "
                          f"{row.pruned_early} of {row.trials} trials stopped early; the final and tuned runs "
                          f"{row.finals_ratio:.2f}×)" for row in costs.itertuples())
              + ". In seconds, " + "; ".join(f"{row.cell} {row.seconds_early:,.0f} s against {row.seconds_end:,.0f} s"
                                             for row in costs.itertuples())
              + ": not comparable, as the twins trained under other loads and packing; the iterations are.")
    tuned = moved[moved["method"] == SEARCHED]
    verdict = ("Tuned ArcFace − Fixed AdaCos, committed → rerun: " + "; ".join(
        f"{row.cell} {pct(row.relative_end)} {pct_interval(row.low_end, row.high_end)} → {pct(row.relative_early)} "
        f"{pct_interval(row.low_early, row.high_early)}, {'inside' if row.inside else 'outside'} the committed interval"
        for row in tuned.itertuples()) + ".")
    hours = span([projected["projected_low_hours"], projected["projected_high_hours"]], "{:.1f}".format)
    project = (f"Projected, not measured: the {projected['cells']} converged headline cells took "
               f"{projected['committed_hours']:.1f} device-hours; with these cells' search and final-run ratios "
               f"applied to each cell's search and the rest, {hours} device-hours.")
    shown = pd.DataFrame({
        "cell": moved["cell"], "method": moved["method"].map(method_name),
        "− Fixed AdaCos at the end [95% CI]": [f"{pct(r.relative_end)} {pct_interval(r.low_end, r.high_end)}"
                                               for r in moved.itertuples()],
        "rerun early [95% CI]": [f"{pct(r.relative_early)} {pct_interval(r.low_early, r.high_early)}"
                                 for r in moved.itertuples()],
        "inside": ["yes" if inside else "no" for inside in moved["inside"]]})
    each = chosen.assign(method=chosen["method"].map(method_name), at_end=chosen["at_end"].map("{:g}".format),
                         early=chosen["early"].map("{:g}".format), same=chosen["same"].map({True: "yes", False: "no"}))
    each = each[["cell", "choice", "method", "split", "at_end", "early", "same"]].rename(
        columns={"at_end": "at the end", "early": "early"})
    sections = [Section("Setup", [setup]), Section("The answer", [answer, verdict, project]),
                Section("Every method", [Table(shown, "Each method − Fixed AdaCos on the cell's test objective, in % "
                                                      "of Fixed AdaCos's score.")]),
                Section("Each choice", [Table(each, "The search's selected trial and each untuned method's rate, per "
                                                    "cell and class split.")])]
    write_bytes(render_markdown(TITLE, sections).encode(), out / "levers.md")
    print(f"wrote {out / 'levers.md'}, levers_choices.csv, levers_cost.csv and levers_differences.csv", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cells", nargs="+", default=None,
                        help="rerun cells to compare (default: every cell of benchmarks/levers that has finished)")
    parser.add_argument("--out", type=Path, default=OUT, help="where the summary and its tables go")
    args = parser.parse_args()
    finished = pd.read_csv(RERUN[1] / "costs.csv")["cell"].tolist() if (RERUN[1] / "costs.csv").is_file() else []
    cells = args.cells or finished
    missing = [cell for cell in cells if cell not in finished]
    if not cells or missing:
        raise SystemExit(f"no finished rerun cell {', '.join(missing) or 'at all'} in {RERUN[1]}: run study benchmark "
                         "--plan presets/benchmark/levers.yaml --out benchmarks/levers --report-dir "
                         "reports/benchmark-levers first")
    write_summary(cells, args.out)


if __name__ == "__main__":
    main()
