"""The training loop on real data: accuracy reached, divergence kept, callback stops, determinism, checkpoints."""

import math
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import study.training as training
from study import cli
from study.config import ModelConfig, TrainConfig
from study.losses import LOSSES
from study.sources import load_dataset
from study.splits import split_dataset
from study.training import build_modules, evaluate, load_checkpoint, save_checkpoint, train

MLP = ModelConfig(name="mlp", embedding_size=32)
# Val every 40 iterations and the last weights kept: these tests are about the loop itself (the log-spaced schedule
# and early stopping, the shipped defaults, are tests/test_learning_curves.py's).
FAST = TrainConfig(epochs=8, batch_size=64, lr=0.01, eval_every=40, eval_points=None, checkpoint="last", device="cpu")
HISTORY_KEYS = {"iteration", "epoch", "train_loss", "s", "theta_med_deg", "cos_target_mean", "cos_nontarget_mean",
                "accuracy", "precision_at_1", "r_precision", "map_at_r", "seconds"}


@pytest.fixture(scope="module")
def digits():
    return split_dataset(load_dataset("digits"), "closed", (0.6, 0.2, 0.2), seed=0)


LOSS_SETTINGS = [("softmax", {}), ("normface", {"s": 16.0}), ("cosface", {"s": 30.0, "m": 0.2}),
                 ("arcface", {"s": 30.0, "m": 0.3}), ("sphereface", {"s": 30.0, "m": 1.5}), ("fixed_adacos", {}),
                 ("dynamic_adacos", {}), ("p2sgrad", {})]


@pytest.mark.slow
@pytest.mark.parametrize("loss_name, hyperparameters", LOSS_SETTINGS)
def test_every_loss_reaches_90_percent_test_accuracy_on_digits(digits, loss_name, hyperparameters):
    result = train(digits, loss_name=loss_name, hyperparameters=hyperparameters, model_config=MLP, config=FAST,
                   progress=False)
    assert result.status == "completed", result.reason
    test = evaluate(result.model, result.loss, digits, "test", FAST, torch.device("cpu"))
    assert test["accuracy"] >= 0.90, (loss_name, test)
    assert HISTORY_KEYS <= set(result.final)
    assert result.history[0]["iteration"] == 0 and result.final["iteration"] == result.iterations


@pytest.mark.slow
def test_the_class_weights_are_trained_with_the_backbone(digits, monkeypatch):
    """The slip of one reference implementation: W left out of the optimiser stays at its random start."""
    real_build, initial = training.build_modules, {}

    def build_and_remember(*args, **kwargs):
        model, loss = real_build(*args, **kwargs)
        initial["weight"] = loss.weight.detach().clone()
        return model, loss

    monkeypatch.setattr(training, "build_modules", build_and_remember)
    result = train(digits, loss_name="fixed_adacos", model_config=MLP, config=FAST.replace(epochs=1), progress=False)
    change = (result.loss.weight.detach() - initial["weight"]).norm() / initial["weight"].norm()
    assert change > 0.01


def test_all_losses_are_covered_by_the_accuracy_test():
    assert {name for name, _ in LOSS_SETTINGS} == set(LOSSES)


@pytest.mark.slow
def test_a_non_finite_loss_stops_the_run_as_diverged_and_keeps_the_history(digits, monkeypatch):
    real_build = training.build_modules

    def build_with_a_loss_that_blows_up(*args, **kwargs):
        model, loss = real_build(*args, **kwargs)
        real_forward, calls = loss.forward, {"n": 0}

        def forward(embeddings, labels):
            calls["n"] += 1
            value = real_forward(embeddings, labels)
            return value * math.nan if calls["n"] == 45 else value

        loss.forward = forward
        return model, loss

    monkeypatch.setattr(training, "build_modules", build_with_a_loss_that_blows_up)
    result = train(digits, loss_name="arcface", hyperparameters={"s": 30.0, "m": 0.3}, model_config=MLP,
                   config=FAST.replace(eval_every=20), progress=False)
    assert result.status == "diverged"
    assert "iteration 45" in result.reason and "nan" in result.reason
    # It is seen at the next evaluation (iteration 60), which is not made: the weights are no longer finite.
    assert result.iterations == 60
    assert [row["iteration"] for row in result.history] == [0, 20, 40]


def test_the_callback_sees_each_evaluation_and_can_stop_the_run(digits):
    seen = []

    def stop_at_60(row):
        seen.append(row["iteration"])
        return row["iteration"] >= 60

    result = train(digits, loss_name="fixed_adacos", model_config=MLP, config=FAST.replace(eval_every=20),
                   callback=stop_at_60, progress=False)
    assert result.status == "stopped" and result.iterations == 60
    assert seen == [0, 20, 40, 60]


def test_a_run_waiting_costs_wall_seconds_not_cpu_seconds(digits):
    # The callback sleeps at each evaluation, as a run does when the machine's other load holds the core: the wall
    # seconds take the sleep, the CPU time of one thread cannot (it gains at most a second per second, and a sleeping
    # thread none), so the CPU time stays below the wall seconds less the sleep.
    naps = []

    def nap(row):
        time.sleep(0.3)
        naps.append(0.3)
        return False

    result = train(digits, loss_name="fixed_adacos", model_config=MLP, config=FAST.replace(eval_every=20, threads=1),
                   callback=nap, progress=False)
    slept = sum(naps)
    assert len(naps) >= 3 and result.seconds >= slept
    assert 0 < result.cpu_seconds <= result.seconds - 0.9 * slept


@pytest.mark.slow
def test_same_seed_same_run_other_seed_other_run_on_cpu(digits):
    config = FAST.replace(epochs=2, eval_every=10)
    runs = [train(digits, loss_name="dynamic_adacos", model_config=MLP, config=config.replace(seed=seed),
                  progress=False) for seed in (0, 0, 1)]
    strip = [[{k: v for k, v in row.items() if not k.endswith("seconds")} for row in run.history] for run in runs]
    assert strip[0] == strip[1]
    assert strip[0] != strip[2]


def test_a_run_until_the_rates_choice_is_the_full_runs_first_part_and_ends_with_val_there(digits):
    config = FAST.replace(epochs=3, eval_points=5, checkpoint="best_val", learning_rates=(0.003, 0.01), choose_at=0.3)
    total = training.planned_iterations(len(digits["train"]), config)
    choice = training.choice_iteration(total, config)
    assert choice == round(0.3 * total) and choice in training.evaluation_schedule(total, config)
    full, early = (train(digits, loss_name="dynamic_adacos", model_config=MLP, config=config, progress=False,
                         until_choice=until) for until in (False, True))
    strip = [[{k: v for k, v in row.items() if not k.endswith("seconds")} for row in run.history] for run in (full, early)]
    assert early.status == "completed" and early.iterations == choice and full.iterations == total
    assert strip[1] == strip[0][:len(strip[1])] and strip[1][-1]["iteration"] == choice
    # It ends with the weights val scored best so far: the full run's best val up to the choice, independently read.
    assert early.final["map_at_r"] == max(row["map_at_r"] for row in strip[0] if row["iteration"] <= choice)
    # Without a rate to choose (or with choose_at null) there is no such point, and such a run is refused.
    for other in (config.replace(learning_rates=None), config.replace(choose_at=None)):
        assert training.choice_iteration(total, other) is None
        with pytest.raises(ValueError, match="train.learning_rates and train.choose_at"):
            train(digits, loss_name="dynamic_adacos", model_config=MLP, config=other, progress=False, until_choice=True)


def test_checkpoint_restores_backbone_and_dynamic_scale(digits, tmp_path):
    config = FAST.replace(epochs=2)
    result = train(digits, loss_name="dynamic_adacos", model_config=MLP, config=config, progress=False)
    metadata = {"loss": "dynamic_adacos", "hyperparameters": {}, "model": MLP.to_dict(), "num_classes": 10}
    save_checkpoint(result, tmp_path / "run.pt", **metadata)
    model, loss = build_modules(MLP, "dynamic_adacos", {}, digits["train"].num_classes, (1, 8, 8))
    assert float(loss.s) != float(result.loss.s)
    assert load_checkpoint(tmp_path / "run.pt", model, loss) == metadata  # read with weights_only=True
    assert float(loss.s) == float(result.loss.s)
    device = torch.device("cpu")
    assert evaluate(model, loss, digits, "test", config, device) == evaluate(result.model, result.loss, digits,
                                                                             "test", config, device)


@pytest.mark.slow
def test_classifying_metrics_only_where_the_split_shares_the_training_classes(digits):
    """Under the open protocol no test class was trained on: argmax and 1-NN accuracy against the training
    classes are undefined there and left out, while retrieval and verification are measured."""
    open_split = split_dataset(load_dataset("digits"), "open", (0.5, 0.25, 0.25), seed=0)
    assert not set(open_split["test"].class_names) & set(open_split["train"].class_names)
    config = TrainConfig(epochs=1, batch_size=64, lr=0.01, eval_every=40, eval_points=None, device="cpu",
                         objective="map_at_r")
    device = torch.device("cpu")
    for sets, shares in ((open_split, False), (digits, True)):
        result = train(sets, loss_name="fixed_adacos", model_config=MLP, config=config)
        scores = evaluate(result.model, result.loss, sets, "test", config, device, full=True)
        assert ("accuracy" in scores) == shares and ("knn_accuracy" in scores) == shares
        assert {"map_at_r", "roc_auc", "verification_accuracy"} <= set(scores)


def test_a_checkpoint_holds_only_tensors_and_plain_data(digits, tmp_path):
    result = train(digits, loss_name="softmax", model_config=MLP, config=FAST.replace(max_iterations=1))
    with pytest.raises(TypeError, match="float32"):  # not plain data: weights_only loading would refuse it
        save_checkpoint(result, tmp_path / "run.pt", s=np.float32(1.0))
    assert not (tmp_path / "run.pt").exists()


def test_threads_sets_torchs_threads_only_when_given(digits, monkeypatch):
    calls = []
    monkeypatch.setattr(torch, "set_num_threads", calls.append)
    for threads in (None, 1):
        train(digits, loss_name="softmax", model_config=MLP, config=FAST.replace(max_iterations=1, threads=threads))
    assert calls == [1]


def test_study_train_keeps_the_model_when_its_checkpoint_cannot_be_written(tmp_path, monkeypatch, capsys):
    real_save, attempts = training.save_checkpoint, []

    def disk_full_once(result, path, **metadata):
        attempts.append(Path(path))
        if len(attempts) == 1:
            raise OSError(28, "No space left on device")
        real_save(result, path, **metadata)

    monkeypatch.setattr(training, "save_checkpoint", disk_full_once)
    code = cli.main(["train", "--dataset", "digits", "--model", "mlp", "--epochs", "1", "--max-iterations", "2",
                     "--device", "cpu", "--loss", "softmax", "--save", str(tmp_path / "model.pt")])
    message = capsys.readouterr().err
    assert code == 2 and "No space left on device" in message
    kept = attempts[1]
    assert str(kept) in message and kept.is_file() and kept.parent != tmp_path
    model, loss = build_modules(ModelConfig(name="mlp", embedding_size=64), "softmax", {}, 10, (1, 8, 8))
    assert load_checkpoint(kept, model, loss)["loss"] == "softmax"
    shutil.rmtree(kept.parent)
