"""What DVC changed in the workspace before the validate stage ran, said when validate refuses the params.

`dvc repro` runs validate first and deletes nothing before it (validate's own output persists). `dvc exp run` does
more before any stage runs (measured with DVC 3.67, dvc/repo/experiments): `-S` writes its values into params.yaml
through DVC's YAML writer, which rewrites the whole file's layout (inline lists as block lists, nulls left blank),
and the executor's `dvc checkout --force` removes every output DVC had linked that no stage of the new pipeline
declares: with `search.losses: [arcfce]`, the outputs of search@arcface and tuned@arcface. `after_refusal` says
which of these happened and how to undo them.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import yaml

from study.plain_yaml import read_yaml

# DVC sets these in the environment of the stages `dvc exp run` runs: the baseline commit, and the repository's root
# (the workspace, unless the experiment runs in a temporary copy: --temp or the queue).
EXPERIMENT = "DVC_EXP_BASELINE_REV"
DVC_ROOT = "DVC_ROOT"
PIPELINE, LOCK, PARAMS = Path("dvc.yaml"), Path("dvc.lock"), Path("params.yaml")
_INTERPOLATION = re.compile(r"\$\{\s*([\w.]+)\s*\}")


def stage_names(pipeline: dict, params: dict) -> set[str] | None:
    """The stages `pipeline` has with `params` (raw, unvalidated), a foreach stage as `name@item`; None where a
    foreach cannot be read."""
    names = set()
    for name, stage in (pipeline.get("stages") or {}).items():
        if "foreach" not in stage:
            names.add(name)
            continue
        items = stage["foreach"]
        found = _INTERPOLATION.fullmatch(items) if isinstance(items, str) else None
        if found:
            items = params
            for key in found.group(1).split("."):
                items = items.get(key) if isinstance(items, dict) else None
        if isinstance(items, dict):
            items = list(items)
        if not isinstance(items, list):
            return None
        names |= {f"{name}@{item}" for item in items}
    return names


def _read_yaml(path: Path) -> dict:
    try:
        return read_yaml(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError):
        return {}


def dropped_outputs(root: Path) -> list[str]:
    """Outputs dvc.lock records for stages the current params no longer have that are gone from the workspace and
    held by DVC's cache: what `dvc exp run`'s checkout removed, and `dvc checkout` brings back."""
    names = stage_names(_read_yaml(root / PIPELINE), _read_yaml(root / PARAMS))
    if names is None:
        return []
    gone = [(out["path"], out.get("md5")) for stage, entry in (_read_yaml(root / LOCK).get("stages") or {}).items()
            if stage not in names for out in entry.get("outs") or [] if not (root / out["path"]).exists()]
    if not gone:
        return []
    try:
        from dvc.repo import Repo

        with Repo(str(root)) as repo:
            return [path for path, md5 in gone if md5 and repo.cache.repo.exists(md5)]
    except Exception:  # noqa: BLE001 - no DVC project or cache to ask: nothing it could have removed
        return []


def params_changed_since_commit(root: Path) -> bool:
    """Whether params.yaml differs from the commit the workspace is on (False outside git)."""
    done = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", str(PARAMS)], cwd=root, capture_output=True)
    return done.returncode == 1


def after_refusal(root: Path = Path(".")) -> str:
    """The sentence that ends validate's refusal: what DVC changed in the workspace before this stage ran (nothing,
    under `dvc repro`), and how to undo it."""
    root = Path(root).resolve()
    if not os.environ.get(EXPERIMENT):
        return "No other stage ran and no output was deleted; fix the above and run `dvc repro` again."
    if Path(os.environ.get(DVC_ROOT, root)).resolve() != root:
        return ("No other stage ran; this experiment ran in a temporary copy (`dvc exp run --temp` or the queue), so "
                "your workspace is as it was. Fix the value and run the experiment again.")
    rewritten, removed = params_changed_since_commit(root), dropped_outputs(root)
    if not rewritten and not removed:
        return ("No other stage ran, params.yaml is the committed one and no output was deleted; fix the above and "
                "run `dvc exp run` again.")
    done, undo = [], []
    if rewritten:
        done.append("wrote the -S values into params.yaml and rewrote the whole file's layout (inline lists as "
                    "block lists, nulls left blank)")
        undo.append("git checkout params.yaml")
    if removed:
        done.append(f"removed {' and '.join(removed)} from the workspace (its `dvc checkout --force` drops the "
                    "outputs of stages these params no longer have; DVC's cache still holds them)")
        undo.append("dvc checkout")
    caveat = (" (git checkout also drops any change to params.yaml you had not committed: `git diff params.yaml` "
              "shows what it holds now)" if rewritten else "")
    return (f"No other stage ran, but `dvc exp run` had already changed the workspace before this stage: it "
            f"{'; and it '.join(done)}. To get back where you were: `{' && '.join(undo)}`{caveat}; then run the "
            "experiment again with a value that passes.")
