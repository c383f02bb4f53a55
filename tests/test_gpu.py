"""The GPU path, where a CUDA device is present: losses under bf16 autocast, training with train.amp on
device-resident batches, checkpoints written on the GPU and read on a CPU, packed runs on one device, and the
bench. Each is checked against the same computation in float32 on the CPU. Without CUDA the module is skipped.
"""

import math

import pytest
import torch

from study import bench, packing
from study.config import ModelConfig, StudyParams, TrainConfig
from study.losses import LOSSES, build_loss
from study.sources import load_dataset
from study.splits import batches, split_dataset
from study.training import build_modules, embed, evaluate, load_checkpoint, save_checkpoint, train

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="no CUDA device here: the GPU path is tested where one is present")

CUDA = torch.device("cuda")
MLP = ModelConfig(name="mlp", embedding_size=32)
FAST = TrainConfig(epochs=8, batch_size=64, lr=0.01, eval_every=40, eval_points=None, checkpoint="last", device="cuda")
HYPERPARAMETERS = {"normface": {"s": 16.0}, "cosface": {"s": 30.0, "m": 0.2}, "arcface": {"s": 30.0, "m": 0.3},
                   "sphereface": {"s": 30.0, "m": 1.5}}


@pytest.fixture(scope="module")
def digits():
    return split_dataset(load_dataset("digits"), "closed", (0.6, 0.2, 0.2), seed=0)


@pytest.mark.parametrize("name", LOSSES)
def test_every_loss_under_bf16_autocast_matches_float32_on_the_cpu(name):
    torch.manual_seed(0)
    reference = build_loss(name, 50, 16, **HYPERPARAMETERS.get(name, {}))
    on_gpu = build_loss(name, 50, 16, **HYPERPARAMETERS.get(name, {})).to(CUDA)
    on_gpu.load_state_dict(reference.state_dict())
    embeddings, labels = torch.randn(64, 16), torch.randint(50, (64,))
    cpu_embeddings = embeddings.clone().requires_grad_()
    expected = reference(cpu_embeddings, labels)
    expected.backward()
    gpu_embeddings = embeddings.to(CUDA).requires_grad_()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        value = on_gpu(gpu_embeddings.to(torch.bfloat16), labels.to(CUDA))  # as a bf16 backbone hands them over
    value.backward()
    # bf16 keeps 8 bits of mantissa: the embeddings' rounding bounds the agreement.
    assert value.dtype == torch.float32 and value.item() == pytest.approx(expected.item(), rel=2e-2)
    assert torch.isfinite(gpu_embeddings.grad).all()
    assert torch.allclose(gpu_embeddings.grad.cpu(), cpu_embeddings.grad, rtol=0.1, atol=2e-2 * cpu_embeddings.grad.abs().max())


def test_batches_stay_on_the_device(digits):
    images, labels = next(iter(batches(digits["train"], 32, device="cuda", shuffle=True,
                                       generator=torch.Generator().manual_seed(0))))
    assert images.device.type == "cuda" and labels.device.type == "cuda" and images.dtype == torch.float32


@pytest.mark.parametrize("amp", [False, True])
def test_training_on_the_gpu_reaches_the_accuracy_of_the_cpu(digits, amp):
    on_cpu = train(digits, loss_name="arcface", hyperparameters={"s": 30.0, "m": 0.3}, model_config=MLP,
                   config=FAST.replace(device="cpu"), progress=False)
    on_gpu = train(digits, loss_name="arcface", hyperparameters={"s": 30.0, "m": 0.3}, model_config=MLP,
                   config=FAST.replace(amp=amp), progress=False)
    assert on_gpu.status == "completed" and on_gpu.device.startswith("cuda:")
    cpu_test = evaluate(on_cpu.model, on_cpu.loss, digits, "test", FAST.replace(device="cpu"), torch.device("cpu"))
    gpu_test = evaluate(on_gpu.model, on_gpu.loss, digits, "test", FAST.replace(amp=amp), CUDA)
    assert gpu_test["accuracy"] >= 0.90
    assert abs(gpu_test["accuracy"] - cpu_test["accuracy"]) < 0.05


def test_a_checkpoint_written_on_the_gpu_loads_on_a_cpu_with_the_same_embeddings(digits, tmp_path):
    result = train(digits, loss_name="dynamic_adacos", model_config=MLP, config=FAST.replace(epochs=2),
                   progress=False)
    save_checkpoint(result, tmp_path / "run.pt", loss="dynamic_adacos", hyperparameters={})
    model, loss = build_modules(MLP, "dynamic_adacos", {}, digits["train"].num_classes,
                                tuple(digits["train"].images.shape[1:]))
    load_checkpoint(tmp_path / "run.pt", model, loss)
    assert loss.s.device.type == "cpu" and float(loss.s) == pytest.approx(float(result.loss.s.cpu()))
    on_gpu, _ = embed(result.model, digits["test"], FAST, CUDA)
    on_cpu, _ = embed(model, digits["test"], FAST.replace(device="cpu"), torch.device("cpu"))
    assert torch.allclose(on_gpu, on_cpu, atol=1e-4)


def test_auto_packs_four_runs_on_the_gpu():
    assert packing.runs_at_once(StudyParams.from_dict({"train": {"device": "auto"}}).train) == 4


def test_the_bench_measures_on_the_gpu(digits):
    params = StudyParams.from_dict({
        "data": {"dataset": "digits", "protocol": "closed"}, "model": {"name": "mlp", "embedding_size": 16},
        "train": {"epochs": 1, "batch_size": 128, "eval_every": 4, "device": "cuda", "objective": "accuracy"}})
    toy = bench.Sizes(classes=1000, embedding=64, batch=64, repeats=2, loop_steps=6, packings=(1,), trials_per_run=1,
                      backbone_batch=8)
    results = bench.run_bench(device_name="cuda", sizes=toy, setup=(params, digits), log=lambda _: None)
    assert results["device"].startswith("cuda:") and results["gpu"]
    assert all(math.isfinite(row["ms"]) and row["ms"] > 0 for row in results["loss_heads"]["times"].values())
