"""DVC stage `report`: the analysis of the search and the evaluated runs, rendered to reports/."""

import hashlib
import json
import platform
import subprocess
import sys

import pandas as pd

from stages import begin
from study.analysis import analyse_study
from study.analysis.design import independent_splits
from study.config import load_params
from study.environment import installed_version, lock_status, machine_summary
from study.learning_rates import chosen_words
from study.report import UnwritableReportFolder, check_writable, write_report
from study.results import EVALUATION_DIR, REPORT_DIR, prepared_dir, read_csv, read_json, search_dir

PACKAGES = ("torch", "torchvision", "timm", "optuna", "scikit-learn", "numpy", "pandas", "seaborn", "dvc")


def git_revision() -> str:
    """The commit, marked `-dirty` when tracked code or params differ from it.

    The pipeline's own outputs (dvc.lock, reports/) are left out of that check: DVC rewrites them during
    `dvc repro` itself, so a committed report would otherwise always call its own rerun dirty.
    """
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], capture_output=True, text=True, check=True).stdout.strip()

    try:
        commit = git("rev-parse", "--short", "HEAD")
        changed = git("status", "--porcelain", "--untracked-files=no", "--", ":(top)", ":(top,exclude)dvc.lock",
                      f":(top,exclude){REPORT_DIR.as_posix()}")
    except (OSError, subprocess.CalledProcessError):
        return "not a git checkout"
    return f"{commit}-dirty" if changed else commit


def environment(params, devices) -> dict:
    """What the reproducibility footer records: code revision, params hash, versions (and whether they are the
    lock's), devices, and the CPU, torch's kernels and C library of the machine that wrote the report."""
    revision = git_revision()
    params_hash = hashlib.sha256(json.dumps(params.to_dict(), sort_keys=True, default=list).encode()).hexdigest()
    versions = {package: installed_version(package) for package in PACKAGES}
    return {"git_revision": revision, "params_sha256": params_hash[:16], "python": platform.python_version(),
            "packages": ", ".join(f"{k} {v}" for k, v in versions.items()), "lock": lock_status(),
            "devices": ", ".join(sorted(set(devices))), "machine": f"{platform.machine()} {platform.system()}",
            # What moves a CPU study's last digits between machines (README: reproducibility).
            "cpu": machine_summary()}


def main() -> None:
    begin()
    params = load_params(build_losses=False)  # validate built the losses; the report needs no torch
    try:
        check_writable(REPORT_DIR)  # before the analysis: a folder that refuses the report stops the stage at once
        report(params)
    except UnwritableReportFolder as error:
        sys.exit(f"report: {error}")


def report(params) -> None:
    """The analysis of the study's tables, written to REPORT_DIR."""
    splits = params.data.split_seeds()
    manifests = [read_json(prepared_dir(split) / "manifest.json", "prepare") for split in splits]
    manifest = manifests[0] | {"split_seeds": list(splits),
                               "train_classes": [m["splits"]["train"]["num_classes"] for m in manifests]}
    # search.stop_early: where the rounds stopped and why (written by the search stage).
    stopped = [search_dir(loss, splits[0]).parent / "advice.json" for loss in params.search.losses]
    manifest["advice"] = next((read_json(path, "search") for path in stopped if path.is_file()), None)
    trials = pd.concat([read_csv(search_dir(loss, split) / "trials.csv", f"search@{loss}")
                        for loss in params.search.losses for split in splits], ignore_index=True)
    runs = read_csv(EVALUATION_DIR / "runs.csv", "evaluate")
    history = read_csv(EVALUATION_DIR / "history.csv", "evaluate")
    if params.train.learning_rates:
        manifest["learning_rates"] = chosen_words(runs, params.train.learning_rates, params.train.choose_at)
    analysis = analyse_study(trials, runs, history, params.train.objective, params.analysis,
                             manifest["splits"]["train"]["num_classes"], sampler=params.search.sampler,
                             independent_splits=independent_splits(manifest))
    devices = list(runs["device"].dropna().astype(str)) + list(trials["device"].dropna().astype(str))
    written = write_report(analysis, params, manifest, environment(params, devices), REPORT_DIR)
    print(f"report written: {', '.join(str(path) for path in written.values())}")


if __name__ == "__main__":
    main()
