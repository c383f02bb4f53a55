"""What several test modules share: a copy of the study's code in a fresh git checkout, for DVC to run."""

import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STUDY_FILES = ["dvc.yaml", "params.yaml", "stages", "study", ".dvc/config", ".dvc/plots", ".dvcignore",
               "reports/plots_template.html"]


def copy_study(root: Path, names=STUDY_FILES) -> Path:
    """The study's code (and the shipped params.yaml) copied into `root`, made a git repository."""
    for name in names:
        source, target = REPO / name, root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, target)
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    return root
