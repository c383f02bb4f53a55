"""`study bench` at toy sizes: what it measures and writes, checked for structure and sense, never for speed."""

import json
from pathlib import Path

import optuna
import pytest
import torch
import torch.nn.functional as F

from study import bench
from study.cli import main
from study.config import StudyParams, load_params
from study.losses import LOSSES
from study.models import model_names
from study.sources import load_dataset
from study.splits import split_dataset
from study.training import evaluation_schedule

optuna.logging.set_verbosity(optuna.logging.WARNING)
REPO = Path(__file__).resolve().parents[1]

TOY = bench.Sizes(classes=20, embedding=8, batch=16, repeats=1, loop_steps=6, packings=(1,), trials_per_run=1,
                  backbone_batch=4, fusions=(1, 3))


@pytest.fixture(scope="module")
def results():
    params = StudyParams.from_dict({
        "data": {"dataset": "digits", "protocol": "closed"}, "model": {"name": "mlp", "embedding_size": 16},
        "train": {"epochs": 1, "batch_size": 128, "eval_every": 4, "device": "cpu", "objective": "accuracy"}})
    digits = split_dataset(load_dataset("digits"), "closed", (0.6, 0.2, 0.2), seed=0)
    return bench.run_bench(device_name="cpu", sizes=TOY, setup=(params, digits), log=lambda _: None)


@pytest.mark.slow
def test_every_loss_head_is_timed_against_the_plain_one(results):
    heads = results["loss_heads"]
    assert (heads["classes"], heads["embedding"], heads["batch"]) == (20, 8, 16)
    pml = [] if heads["note"] else [bench.PML_ARCFACE]
    assert list(heads["times"]) == [bench.PLAIN, *LOSSES, *pml]
    assert heads["times"][bench.PLAIN]["ratio"] == 1.0
    assert all(row["ms"] > 0 and row["ratio"] > 0 for row in heads["times"].values())
    if pml:
        assert heads["times"][bench.PML_ARCFACE]["ratio_to_pml"] == 1.0
        arcface = heads["times"]["arcface"]
        assert arcface["ratio_to_pml"] == pytest.approx(arcface["ratio"] / heads["times"][bench.PML_ARCFACE]["ratio"])


def test_the_plain_head_is_cross_entropy_over_scaled_cosines():
    head = bench.PlainCosineHead(5, 3, s=10.0)
    embeddings, labels = torch.randn(7, 3), torch.tensor([0, 1, 2, 3, 4, 0, 1])
    cosines = (embeddings / embeddings.norm(dim=1, keepdim=True)) @ (head.weight / head.weight.norm(dim=1,
                                                                                               keepdim=True)).T
    logits = 10.0 * cosines
    by_hand = (logits.exp().sum(1).log() - logits[torch.arange(7), labels]).mean()
    assert head(embeddings, labels).item() == pytest.approx(by_hand.item(), rel=1e-5)
    assert head(embeddings, labels).item() == pytest.approx(F.cross_entropy(logits, labels).item(), rel=1e-6)


@pytest.mark.slow
def test_the_other_figures_have_their_parts(results):
    loop = results["training_loop"]
    assert loop["train_its"] > 0 and loop["bare_its"] > 0
    assert loop["ratio"] == pytest.approx(loop["train_its"] / loop["bare_its"]) and loop["steps"] == 6
    packed = results["trials_per_hour"]
    assert list(packed) == ["K=1"] and packed["K=1"]["trials"] == 1 and packed["K=1"]["ratio"] == 1.0
    assert packed["K=1"]["running_seconds"] <= packed["K=1"]["seconds"]
    assert list(results["backbones"]["images_per_second"]) == model_names()
    fused = results["fused_runs"]["speeds"]
    assert list(fused) == ["K=1", "K=3"] and all(row["separate_steps"] > 0 and row["fused_steps"] > 0
                                                 for row in fused.values())
    assert fused["K=3"]["ratio"] == pytest.approx(fused["K=3"]["fused_steps"] / fused["K=3"]["separate_steps"])


def test_channels_last_is_timed_for_a_convolutional_model_and_not_for_one_without():
    params = StudyParams.from_dict({"model": {"name": "cnn", "embedding_size": 8},
                                    "train": {"batch_size": 8, "device": "cpu"}})
    digits = split_dataset(load_dataset("digits"), "closed", (0.6, 0.2, 0.2), seed=0)
    speeds = bench.channels_last_speed(params, digits, 1, torch.device("cpu"))
    assert speeds["channels_first"] > 0 and speeds["ratio"] == pytest.approx(speeds["channels_last"]
                                                                            / speeds["channels_first"])
    mlp = params.replace(model=params.model.replace(name="mlp"))
    assert bench.channels_last_speed(mlp, digits, 1, torch.device("cpu")) == {}


def test_a_model_that_cannot_be_fused_gives_no_fused_figure_and_says_so():
    params = StudyParams.from_dict({"model": {"name": "seed_cnn"}, "train": {"batch_size": 8, "device": "cpu"}})
    digits = split_dataset(load_dataset("digits"), "closed", (0.6, 0.2, 0.2), seed=0)
    assert bench.fused_speed(params, digits, (1, 2), 1, torch.device("cpu")) == {}


def test_the_figures_are_written_as_json_named_after_the_device_and_shown_as_a_table(results, tmp_path):
    path = bench.write_results(results, tmp_path)
    assert path.name == f"cpu-{results['date'][:10]}.json"
    written = json.loads(path.read_text())
    assert written["device"] == "cpu" and written["torch"] == torch.__version__ and written["cpu"]
    assert set(LOSSES) <= set(written["loss_heads"]["times"])
    table = bench.format_table(results)
    assert all(name in table for name in [*LOSSES, *model_names(), "train()", "K=1", "one fused model",
                                          "memory format"])


def test_train_is_evaluated_as_often_as_the_bare_loop():
    """The bare loop evaluates val at the start and the end; train() in the comparison must too, whatever the study's
    eval_points (its default, 20 log-spaced points, once gave train() about 21 evaluations against 2)."""
    shipped = load_params(str(REPO / "params.yaml")).train
    assert shipped.eval_points is not None  # the case that matters: a log-spaced schedule in the study's params
    config = bench.loop_config(shipped, 500, "cpu")
    assert evaluation_schedule(500, config) == {500}  # and iteration 0, which train() always evaluates
    assert (config.max_iterations, config.schedule, config.optimizer) == (500, "constant", "adam")


def test_the_bench_command_refuses_a_missing_device(capsys):
    if torch.cuda.is_available():
        pytest.skip("CUDA is present")
    assert main(["bench", "--quick", "--device", "cuda"]) == 2
    assert "CUDA is not available" in capsys.readouterr().err


def never_measured(*args, **kwargs):
    raise AssertionError("measured before its arguments were checked")


def test_the_bench_command_refuses_a_device_of_no_known_kind_in_one_line(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(bench, "bench_setup", never_measured)  # issue 55's BE2: torch's list of 18 device types
    monkeypatch.setattr(bench, "time_loss_heads", never_measured)
    assert main(["bench", "--quick", "--device", "tpu:7", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err == ("study: error: device 'tpu:7' is not one this suite trains on; use auto (CUDA "
                                       "when present), cpu, cuda, cuda:N or mps\n")


@pytest.mark.parametrize("out, said", [
    ("afile/sub", "--out afile/sub: afile is a file, so no folder can be made there; give a folder, e.g. --out "
                  "benchmarks/results"),
    ("afile", "--out afile: afile is a file, so no folder can be made there"),
])
def test_the_bench_command_checks_its_out_folder_before_measuring(monkeypatch, tmp_path, capsys, out, said):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("a file\n")
    monkeypatch.setattr(bench, "run_bench", never_measured)  # issue 55's BE4: 20 minutes, then no folder
    assert main(["bench", "--quick", "--device", "cpu", "--out", out]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"study: error: {said}") and error.count("\n") == 1, error
    assert (tmp_path / "afile").read_text() == "a file\n"


def shipped_params_made_small():
    """The shipped params.yaml with its study made small (16 glyph classes of 10 images, one epoch) and nothing
    else changed: data.seeds, the protocol, the objective, the model, the search and the runs as shipped."""
    params = load_params(str(REPO / "params.yaml"))
    assert params.data.dataset.startswith("glyphs:") and params.data.seeds is not None
    return params.replace(data=params.data.replace(dataset="glyphs:16:10"),
                          train=params.train.replace(epochs=1, eval_every=5))


@pytest.mark.slow
def test_study_bench_quick_runs_on_the_shipped_params(tmp_path, monkeypatch, capsys):
    """SLOW (about 20 s on 2 cores): `study bench --quick` on the shipped study at toy sizes, two runs packed (its
    workers serve one class split's study, as the search stage's do)."""
    setup, shipped = bench.bench_setup, shipped_params_made_small()
    monkeypatch.setattr(bench, "bench_setup", lambda device: setup(device, shipped))
    monkeypatch.setattr(bench, "bench_sizes", lambda quick, device: TOY.__class__(**{**vars(TOY), "packings": (1, 2)}))
    assert main(["bench", "--quick", "--device", "cpu", "--out", str(tmp_path)]) == 0, capsys.readouterr().err
    written = json.loads(next(tmp_path.glob("cpu-*-quick.json")).read_text())
    packed = written["trials_per_hour"]
    assert {name: row["trials"] for name, row in packed.items()} == {"K=1": 1, "K=2": 2}
    assert "K=2" in capsys.readouterr().out
