"""The report of a learning-curve cell (benchmarks/long_training.py): every method's val and test objective against
iterations, the plateau rule per method, each ArcFace − each AdaCos along the iterations with its interval, and one
sentence per pair saying whether and when AdaCos overtakes ArcFace."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from study.analysis.convergence import PLATEAU_RISE, plateau_table
from study.analysis.learning_curves import crossover, difference_curve, learning_curves_table
from study.benchmark.meta import RELATIVE_MARGIN
from study.report.palette import drawing_order, styles_of
from study.report.plotting import band, new_figure, plain_log_ticks, save_figure
from study.results import write_bytes

ADACOS = ("fixed_adacos", "dynamic_adacos")
ARCFACE = ("arcface_tuned", "arcface_default")
NAMES = {"fixed_adacos": "Fixed AdaCos", "dynamic_adacos": "Dynamic AdaCos", "arcface_tuned": "tuned ArcFace",
         "arcface_default": "ArcFace at its defaults (s = 64, m = 0.5)", "softmax": "softmax", "p2sgrad": "P2SGrad"}


def read_runs(cell: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The finished runs' summaries and histories (a run whose summary is missing is unfinished and left out)."""
    summaries = [json.loads(path.read_text()) for path in sorted((cell / "runs").glob("*.json"))]
    if not summaries:
        raise SystemExit(f"{cell / 'runs'} holds no finished run yet; train them first (benchmarks/long_training.py)")
    histories = [pd.read_csv(cell / "runs" / f"{s['method']}_split{s['split']}_seed{s['seed']}.csv") for s in summaries]
    return pd.DataFrame(summaries), pd.concat(histories, ignore_index=True)


def overtaking_sentence(adacos: str, arcface: str, result: dict, reference_score: float) -> str:
    """Whether and when `adacos` overtakes `arcface` on test, from `crossover` of arcface − adacos."""
    first, last = NAMES[adacos], NAMES[arcface]
    end = (f"at {result['last_iteration']:,.0f} iterations {last} − {first} is {result['difference_at_end']:+.4f} "
           f"[{result['low_at_end']:+.4f}, {result['high_at_end']:+.4f}] "
           f"({100 * result['difference_at_end'] / reference_score:+.1f}% of {first}'s score)")
    crossed = math.isfinite(result["crossover"])
    if result["ahead_at_end"] == "reference":
        if not crossed:
            return (f"{first} is ahead of {last} from the first evaluation on, and significantly from iteration "
                    f"{result['high']:,.0f}: it needs no late overtaking; {end}.")
        return (f"{first} overtakes {last} at iteration {result['crossover']:,.0f} (the crossover lies after "
                f"{result['low']:,.0f}, where {last} was last significantly ahead, and {first} is significantly ahead "
                f"from {result['high']:,.0f} on); {end}.")
    if result["ahead_at_end"] == "method":
        return (f"{first} does not overtake {last}: {last} ends significantly ahead"
                + (f", from iteration {result['crossover']:,.0f} on" if crossed else "") + f"; {end}.")
    return (f"Neither {first} nor {last} is significantly ahead at the end"
            + (f" (their mean curves last cross at iteration {result['crossover']:,.0f})" if crossed else "")
            + f"; {end}.")


def _figure(curves: pd.DataFrame, differences: pd.DataFrame, reference_score: float, path: Path) -> None:
    figure, (scores, gaps) = new_figure(ncols=2, size=(11, 4.2))
    methods = drawing_order(list(dict.fromkeys(curves["method"])))
    styles = styles_of(methods)
    for method in methods:
        runs = curves[curves["method"] == method].groupby("iteration")["test"]
        mean, low, high = runs.mean(), runs.min(), runs.max()
        style = styles[method]
        scores.plot(mean.index, mean.to_numpy(), color=style.colour, linestyle=style.linestyle, marker=style.marker,
                    markersize=3, label=NAMES.get(method, method))
        band(scores, mean.index, low.to_numpy(), high.to_numpy(), style)
    scores.set(xscale="log", xlabel="training iteration", ylabel="test MAP@R (mean; band: every run)",
               title="Test score along training")
    for method in drawing_order(list(dict.fromkeys(differences["method"]))):
        rows, style = differences[differences["method"] == method], styles[method]
        gaps.plot(rows["iteration"], rows["difference"], color=style.colour, linestyle=style.linestyle,
                  marker=style.marker, markersize=3, label=NAMES.get(method, method))
        band(gaps, rows["iteration"], rows["low"], rows["high"], style)
    margin = RELATIVE_MARGIN * reference_score
    gaps.axhspan(-margin, margin, color="0.85", zorder=0, label=f"±{100 * RELATIVE_MARGIN:.0f}% of Fixed AdaCos")
    gaps.axhline(0, color="0.3", linewidth=0.8)
    gaps.set(xscale="log", xlabel="training iteration", ylabel="method − Fixed AdaCos, test MAP@R (95% interval)",
             title="Difference to Fixed AdaCos along training")
    for ax in (scores, gaps):
        plain_log_ticks(ax.xaxis)
    handles, labels = scores.get_legend_handles_labels()
    figure.legend(handles, labels, loc="lower center", ncols=3, frameon=False)
    figure.subplots_adjust(bottom=0.3)
    save_figure(figure, path, dpi=120)


def write_long_cell_report(cell: Path, planned_runs: int) -> None:
    """Tables, figure and report.md of a learning-curve cell, from its finished runs."""
    summaries, history = read_runs(cell)
    curves = learning_curves_table(history, "map_at_r")
    methods = list(dict.fromkeys(summaries["method"]))
    plateau = plateau_table(curves, methods)
    differences = pd.concat([difference_curve(curves, method) for method in methods if method != "fixed_adacos"],
                            ignore_index=True)
    reference = summaries[summaries["method"] == "fixed_adacos"]["test_score"].mean()
    pairs = []
    for adacos in ADACOS:
        for arcface in ARCFACE:
            curve = difference_curve(curves, arcface, reference=adacos)
            if len(curve):
                pairs.append({"adacos": adacos, "arcface": arcface, **crossover(curve)})
    crossovers = pd.DataFrame(pairs)
    tables, figures = cell / "reports" / "tables", cell / "reports" / "figures"
    for name, frame in {"learning_curves": curves, "runs": summaries, "plateau": plateau,
                        "difference_curves": differences, "crossovers": crossovers}.items():
        write_bytes(frame.to_csv(index=False).encode(), tables / f"{name}.csv")
    _figure(curves, differences, reference, figures / "learning_curves.png")
    write_bytes(_markdown(summaries, plateau, crossovers, reference, planned_runs).encode(), cell / "reports" / "report.md")
    print(f"wrote {cell / 'reports'}: {len(summaries)} of {planned_runs} runs", flush=True)


def _markdown(summaries: pd.DataFrame, plateau: pd.DataFrame, crossovers: pd.DataFrame, reference: float,
              planned_runs: int) -> str:
    done = len(summaries)
    seconds = summaries["seconds"].to_numpy(dtype=float)
    evaluating = summaries["eval_seconds"].to_numpy(dtype=float)
    iterations = summaries["iterations"].to_numpy(dtype=float)
    lines = ["# Does AdaCos overtake ArcFace only after about 20,000 iterations?", "",
             f"Double MNIST at face-training scale (`compose:2:400:mnist5k`, open protocol, 50 training classes of "
             f"400 images), every method trained {iterations.max():,.0f} iterations (about 64 passes over the "
             f"training images), {done} of {planned_runs} planned runs finished"
             + ("" if done == planned_runs else " (a partial report: rerun benchmarks/long_training.py)") + ". "
             "Each run keeps the checkpoint val selects; test is scored at every evaluation and only reported. "
             "Tuned ArcFace takes each class split's (s, m) from mnist-pairs-open-c50-long's search (1,860 "
             "iterations): this cell runs no search.", "", "## The answer", ""]
    for row in crossovers.itertuples(index=False):
        lines.append("- " + overtaking_sentence(row.adacos, row.arcface, row._asdict(), reference))
    lines += ["", "Intervals: 95%, over the class splits' paired (split, seed) differences, never below the seed noise "
              "(`standard_error_floor`); the crossover's bracket reads one such interval per evaluation.", "",
              "## Convergence (the plateau rule of docs/analysis.md)", "",
              f"Converged: the mean best val so far rose by less than {100 * PLATEAU_RISE:.0f}% over the second half "
              "of training.", "",
              "| method | converged | runs meeting the rule | best val at half-way | at the end | rise | "
              "iteration val selected (median) |", "|---|---|---|---|---|---|---|"]
    for row in plateau.itertuples(index=False):
        lines.append(f"| {NAMES.get(row.method, row.method)} | {'yes' if row.converged else 'no'} | "
                     f"{row.runs_converged} of {row.runs} | {row.best_at_half:.4f} | {row.best_at_end:.4f} | "
                     f"{100 * row.rise:+.2f}% | {row.selected_iteration:,.0f} |")
    final = summaries.groupby("method")["test_score"].agg(["mean", "std", "count"])
    lines += ["", "## Test MAP@R of the checkpoint val selected", "", "| method | mean | sd | runs |", "|---|---|---|---|"]
    for method, row in final.iterrows():
        lines.append(f"| {NAMES.get(method, method)} | {row['mean']:.4f} | {row['std']:.4f} | {row['count']:.0f} |")
    per_iteration = np.sum(seconds - evaluating) / np.sum(iterations)
    lines += ["", "## Cost", "",
              f"On {summaries['device'].iloc[0]}, one process per core and one thread each: "
              f"{1000 * per_iteration:.1f} ms per training iteration without evaluation, "
              f"{1000 * np.sum(seconds) / np.sum(iterations):.1f} ms with the 21 log-spaced evaluations of val and "
              f"test; a run took {np.median(seconds) / 60:.1f} min (median).", "",
              "![Test score and difference to Fixed AdaCos along training](figures/learning_curves.png)", ""]
    return "\n".join(lines)
