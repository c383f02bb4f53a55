"""Hostile input to the advice (`study advise` and its Optuna callback): each damaged or mismatched input ends in one
AdviceError naming the argument or file, the problem and the fix, before any advice is given (tests/hostile_cases.md,
"The advice"). The finished study read is a copy of the committed default study (params.yaml, dvc.lock and its report
tables), damaged one way per case."""

import math
import shutil
from pathlib import Path

import pandas as pd
import pytest

from study.advice import AdviceCallback, AdviceError
from study.advice_evidence import report_evidence
from study.advice_inputs import read_prior_table

ROOT = Path(__file__).resolve().parents[1]
CELLS = ROOT / "reports" / "benchmark" / "tables" / "cells.csv"
REFERENCE = [(0.50, 0.48), (0.52, 0.50), (0.51, 0.49)]


def one_line(error: pytest.ExceptionInfo) -> str:
    message = str(error.value)
    assert "\n" not in message and "Traceback" not in message
    return message


@pytest.mark.parametrize("case, arguments, said", [
    ("CB1: a NaN val", {"reference": [(math.nan, 0.5), *REFERENCE]}, "reference[0] is (nan, 0.5)"),
    ("CB2: a NaN test", {"reference": [*REFERENCE, (0.5, math.nan)]}, "reference[3] is (0.5, nan)"),
    ("CB3: no runs", {"reference": []}, "reference holds 0 Fixed AdaCos run(s)"),
    ("CB7: a negative margin", {"reference": REFERENCE, "margin": -0.02}, "margin is -0.02"),
    ("CB10: alpha 0", {"reference": REFERENCE, "alpha": 0}, "alpha is 0"),
    ("CB11: alpha 1.5", {"reference": REFERENCE, "alpha": 1.5}, "alpha is 1.5"),
    ("CB15: the reference in percent", {"reference": [(50.0, 48.0), (52.0, 50.0), (51.0, 49.0)]}, "look like percent"),
    ("two runs, too few for the control's seed luck", {"reference": REFERENCE[:2]}, "needs at least 3"),
])
def test_the_callbacks_arguments_are_refused_naming_the_argument_and_the_fix(case, arguments, said):
    with pytest.raises(AdviceError) as error:
        AdviceCallback(budget=12, objective="map_at_r", **arguments)
    message = one_line(error)
    assert said in message and ("e.g." in message or "give" in message), message


@pytest.fixture
def finished(tmp_path):
    """A copy of the committed default study as `study advise --from report` reads it."""
    for name in ("params.yaml", "dvc.lock"):
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copytree(ROOT / "reports" / "tables", tmp_path / "reports" / "tables")
    return tmp_path


def evidence(root: Path):
    from study.config import load_params

    params = load_params(str(root / "params.yaml"))
    return report_evidence(root / "reports" / "tables", params.train.objective, params.search.n_trials)


def test_the_committed_study_is_read_whole(finished):
    read = evidence(finished)
    assert len(read.trials) and len(read.reference)


@pytest.mark.parametrize("alpha", ["-1", "0", "1.5", "nan"])
def test_ad1_the_commands_alpha_is_refused_naming_the_option(finished, alpha, monkeypatch, capsys):
    # In this process: the refusal is the command's parsing, not a process's start (the CLI's exit is tested by
    # the advice's other commands).
    from study.cli import main

    monkeypatch.chdir(finished)
    try:
        code = main(["advise", "--from", "report", "--prior", "none", f"--alpha={alpha}", "--json", "advice.json"])
    except SystemExit as stopped:  # argparse's own refusal
        code = stopped.code
    said = capsys.readouterr()
    assert code not in (0, None) and said.out == ""
    line = said.err.strip().splitlines()[-1]
    assert "--alpha" in line and "strictly between 0 and 1" in line, said.err
    assert not (finished / "advice.json").exists()


@pytest.mark.parametrize("case, key, value, said", [
    ("AD8: train.lr changed after the study", "lr", 0.5, "train.lr is 0.5"),
    ("AD14: train.objective changed after the study", "objective", "precision_at_1", "train.objective is"),
])
def test_params_changed_since_the_study_ran_are_named_with_the_fix(finished, case, key, value, said):
    params = finished / "params.yaml"
    text = params.read_text()
    old = next(line for line in text.splitlines() if line.startswith(f"  {key}:"))
    params.write_text(text.replace(old + "\n", f"  {key}: {value}\n", 1))
    with pytest.raises(AdviceError) as error:
        evidence(finished)
    message = one_line(error)
    assert "params.yaml changed since the study ran" in message and said in message
    assert "dvc repro" in message and "change params.yaml back" in message


def _halved(table: pd.DataFrame) -> pd.DataFrame:
    return table.iloc[: len(table) // 2]


def _nan(table: pd.DataFrame) -> pd.DataFrame:
    column = "test_value" if "test_value" in table else "val_score"
    return table.assign(**{column: [math.nan, *table[column].iloc[1:]]})


def _percent(table: pd.DataFrame) -> pd.DataFrame:
    columns = [c for c in table.columns if c in ("value", "test_value", "val_score") or c.startswith("test_")]
    return table.assign(**{c: table[c] * 100 for c in columns if pd.api.types.is_numeric_dtype(table[c])})


@pytest.mark.parametrize("case, file, damage, said", [
    ("AD10a: landscape.csv halved", "landscape.csv", _halved, "landscape.csv"),
    ("AD10b: landscape.csv with a NaN", "landscape.csv", _nan, "landscape.csv"),
    ("AD10e: landscape.csv ×100", "landscape.csv", _percent, "landscape.csv"),
    ("AD10g: run_scores.csv ×100", "run_scores.csv", _percent, "run_scores.csv"),
    ("AD10c: an empty landscape.csv", "landscape.csv", lambda t: t.iloc[:0], "landscape.csv"),
    ("AD10d: no ArcFace trials", "landscape.csv", lambda t: t.assign(loss="cosface"), "no ArcFace trials"),
    ("AD10f: no Fixed AdaCos runs", "run_scores.csv", lambda t: t[t["method"] != "fixed_adacos"],
     "no fixed_adacos runs"),
])
def test_a_damaged_report_table_is_named_with_the_fix_before_any_advice(finished, case, file, damage, said):
    path = finished / "reports" / "tables" / file
    damage(pd.read_csv(path)).to_csv(path, index=False)
    with pytest.raises(AdviceError) as error:
        evidence(finished)
    message = one_line(error)
    assert said in message and ("git checkout --" in message or "dvc repro" in message), message


@pytest.mark.parametrize("case, damage, said", [
    ("AD7a: cut mid-line", lambda text: text[: len(text) // 2], "ends mid-line"),
    ("AD7d: empty", lambda text: "", "is empty"),
    ("AD7c: without its source column", lambda text: pd.read_csv(pd.io.common.StringIO(text)).drop(
        columns="source").to_csv(index=False), "lacks the column(s) source"),
    ("AD7b: NaN standard errors", lambda text: pd.read_csv(pd.io.common.StringIO(text)).assign(
        relative_se=math.nan).to_csv(index=False), "relative_se is not a number"),
    ("AD7b: zero standard errors", lambda text: pd.read_csv(pd.io.common.StringIO(text)).assign(
        relative_se=0.0).to_csv(index=False), "relative_se"),
    ("AD7e: scaled ×100", lambda text: pd.read_csv(pd.io.common.StringIO(text)).assign(
        relative=lambda t: t["relative"] * 100, relative_se=lambda t: t["relative_se"] * 100).to_csv(index=False),
     "--prior"),
])
def test_a_damaged_prior_is_named_with_the_fix(tmp_path, case, damage, said):
    path = tmp_path / "cells.csv"
    path.write_text(damage(CELLS.read_text()))
    with pytest.raises(AdviceError) as error:
        read_prior_table(path, "map_at_r")
    message = one_line(error)
    assert said in message and str(path) in message and "--prior none" in message, message


def test_one_split_with_two_fixed_adacos_runs_is_not_judged_and_names_runs_seeds():
    """Two runs leave the control's seed luck without a variance (its jackknife needs three): a one-split study
    with two Fixed AdaCos runs once crashed in a root finder ("The function value at x=nan is NaN")."""
    from study.advice import Evidence, NotYetJudged, Prior, advise

    trials = pd.DataFrame({"split": 0, "val": [0.80, 0.82, 0.84, 0.83], "test": [0.81, 0.80, 0.85, 0.82],
                           "seconds": 1.0})
    reference = pd.DataFrame({"split": 0, "val": [0.90, 0.87], "test": [0.93, 0.89], "seconds": 1.0})
    with pytest.raises(NotYetJudged) as error:
        advise(Evidence(trials, reference, (0,), 4, "accuracy"), 0.02, Prior.flat("accuracy"))
    message = one_line(error)
    assert "3 in all at least (have 2)" in message and "add seeds to runs.seeds" in message
