"""The `large` preset (face scale on a GPU): what it sets, and the whole pipeline through it at a tiny size on the CPU
(a timm backbone, an own folder split by identity, each method's rate chosen early)."""

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from study.presets import build_preset, write_params
from study.results import runs_dir
from study.sources import load_dataset
from tests.conftest import copy_study, pipeline_commands, run_stages


def test_large_is_face_scale_on_a_gpu_and_takes_the_users_folder():
    params = build_preset("large", ["data.dataset=folder:/data/faces"])
    assert params.data.dataset == "folder:/data/faces" and params.data.protocol == "open"
    assert params.data.image_size == 112 and len(params.data.split_seeds()) == 3
    assert (params.model.name, params.model.embedding_size, params.model.pretrained) == ("timm/resnet50", 512, True)
    assert params.train.amp and params.train.device == "auto" and params.train.objective == "map_at_r"
    assert len(params.train.learning_rates) == 3 and params.train.choose_at == 0.3


def identity_folder(root, identities: int = 20, per_identity: int = 8):
    """A user's own folder, one sub-folder per identity: glyphs as 28×28 PNGs."""
    glyphs = load_dataset(f"glyphs:{identities}:{per_identity}")
    for index, (image, label) in enumerate(zip(glyphs.images.numpy(), glyphs.labels)):
        folder = root / f"person{label:03d}"
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.asarray(image[0], dtype=np.uint8)).save(folder / f"{index}.png")
    return root


@pytest.mark.slow
def test_the_large_preset_runs_end_to_end_at_a_tiny_size_on_the_cpu(tmp_path):
    root = copy_study(tmp_path / "study")
    faces = identity_folder(tmp_path / "faces")
    # The preset as it ships, but for what a CPU test can afford: timm's own tiny test ResNet without weights (a
    # ResNet's blocks at a 30th of resnet18's weights, 8x faster here), 32 px, one split,
    # Fixed AdaCos beside tuned ArcFace, at the declared length (its barely trained runs would train again at 2x
    # and 4x). Its models score 0 on some metrics (TAR at FAR 1e-3), where a margin of "2% of score" is none: the
    # report says so rather than failing.
    params = build_preset("large", [f"data.dataset=folder:{faces}", "data.image_size=32", "data.seeds=[0]",
                                    "model.name=timm/test_resnet", "model.embedding_size=32", "model.pretrained=false",
                                    "train.batch_size=16", "train.epochs=2", "train.num_workers=0",
                                    "train.device=cpu", "train.parallel=1", "search.n_trials=2",
                                    "runs.methods=[fixed_adacos]", "runs.plateau_cap=1"])
    write_params(params, root / "params.yaml", "large")
    # Every stage in one process, as `dvc repro` would run them: what is tested is the preset, not DVC (test_pipeline).
    run_stages(root, pipeline_commands(root), timeout=1200)
    tried = pd.read_csv(root / runs_dir("fixed_adacos", 0) / "learning_rates.csv")
    assert set(tried["lr"]) == set(params.train.learning_rates) and tried["iterations"].nunique() == 1
    kept = pd.read_csv(root / runs_dir("fixed_adacos", 0) / "runs.csv")
    assert kept["iterations"].min() > tried["iterations"].max()  # the chosen rate trained on past the choice
    report = (root / "reports" / "report.md").read_text()
    assert "timm/test_resnet" in report and "at 30% of the length" in report
