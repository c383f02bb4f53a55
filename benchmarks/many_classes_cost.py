"""The cost of the `large` preset at many classes on one device: its price before training (study/price.py, as `study
plan` gives it) beside a real run's steps on the rendered data, for a cell at 10,000 classes and more.

The `large` preset (timm's ResNet-50 from scratch here: no weights are fetched, 112 px, 512-d, batch 128, bf16 on a
GPU) on `strokes`, the synthetic source with as many classes as asked that needs no fonts: Noto's CJK fonts (93 MB)
do not travel to a lent GPU machine with the checkout (64 MB a call), and the price's calibration draws random pixels
of the source's size whatever the source. The real run trains `--steps` steps of Fixed AdaCos on the first class
split, and its seconds a step (training alone) are set beside the calibration's.

    python benchmarks/many_classes_cost.py                                     # strokes:10000:20 on cuda, 300 steps
    python benchmarks/many_classes_cost.py --spec strokes:40:5 --device cpu --steps 20 --set data.image_size=32

It prints the price and the measured step, and appends one row to benchmarks/results/many_classes_cost.csv (or the
file `--out` names): the device, the spec, the training classes, the price's step, start, evaluations, device time a
training and for the whole study, and the real run's step.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from study.environment import cpu_model  # noqa: E402
from study.presets import build_preset  # noqa: E402
from study.price import price_study, train_sizes, training_seconds  # noqa: E402
from study.progress import duration  # noqa: E402
from study.sources import load_dataset  # noqa: E402
from study.splits import class_split  # noqa: E402
from study.training import evaluation_schedule, planned_iterations, resolve_device, train  # noqa: E402

OUT = REPO / "benchmarks" / "results" / "many_classes_cost.csv"


def device_name(device: str) -> str:
    resolved = resolve_device(device)
    if resolved.type == "cuda":
        import torch

        return f"cuda:{torch.cuda.get_device_name(resolved)}"
    return f"cpu:{cpu_model()}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spec", default="strokes:10000:20", help="the data source (default strokes:10000:20)")
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    parser.add_argument("--steps", type=int, default=300, help="steps of the real run (default 300)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="more params, as `study preset` takes them")
    parser.add_argument("--out", type=Path, default=OUT, help="the CSV the row is appended to")
    args = parser.parse_args()
    params = build_preset("large", [f"data.dataset={args.spec}", f"train.device={args.device}",
                                    "model.pretrained=false", "data.seeds=[0]", *args.set])
    began = time.perf_counter()
    sizes = train_sizes(params)
    price = price_study(params, say=lambda line: print(line, flush=True))
    if isinstance(price, str):
        raise SystemExit(price)
    print("\n".join(price.lines()), flush=True)
    calibration = price.calibration
    length = planned_iterations(sizes[0], params.train)
    evaluations = len(evaluation_schedule(length, params.train)) + 1
    per_training = calibration.run_seconds(length, evaluations, final=True)
    print(f"price: a training of {length:,} steps and {evaluations} val evaluations about {duration(per_training)}",
          flush=True)

    data = params.data
    rendered = time.perf_counter()
    sets = class_split(load_dataset(data.dataset, cache_dir=data.cache_dir), data, data.split_seeds()[0])
    rendered = time.perf_counter() - rendered
    config = params.train.replace(max_iterations=args.steps, seed=0, eval_points=None, eval_every=args.steps,
                                  checkpoint="last")
    result = train(sets, loss_name="fixed_adacos", model_config=params.model, config=config,
                   image_size=data.image_size, progress=False)
    trained = training_seconds(result.history)
    step = (trained[result.iterations] - trained[0]) / max(result.iterations, 1)
    print(f"measured: {len(sets['train']):,} training images of {sets['train'].num_classes:,} classes rendered and "
          f"split in {rendered:.0f} s; {result.iterations} steps at {step * 1e3:.1f} ms a step (the price's "
          f"{calibration.step * 1e3:.1f} ms: {step / calibration.step:.2f}x); {result.cpu_seconds:.0f} s of CPU time "
          f"over {result.seconds:.0f} s", flush=True)
    row = {"date": datetime.date.today().isoformat(), "device": device_name(args.device), "spec": args.spec,
           "model": params.model.name, "image_size": data.image_size, "batch_size": params.train.batch_size,
           "amp": params.train.amp, "train_classes": sets["train"].num_classes, "train_images": len(sets["train"]),
           "test_images": len(sets["test"]), "price_step_ms": 1e3 * calibration.step,
           "price_start_s": calibration.start, "price_val_s": calibration.val,
           "price_full_test_s": calibration.full_test,
           "training_steps": length, "price_training_s": per_training, "price_study_device_s": price.device_seconds,
           "price_study_wall_s": price.wall_seconds[0], "measured_steps": result.iterations,
           "measured_step_ms": 1e3 * step, "measured_cpu_s": result.cpu_seconds, "measured_s": result.seconds,
           "render_s": rendered, "script_s": time.perf_counter() - began, "threads": os.cpu_count()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    frame = pd.DataFrame([row])
    if args.out.is_file():
        frame = pd.concat([pd.read_csv(args.out), frame], ignore_index=True)
    frame.to_csv(args.out, index=False)
    print(f"appended to {args.out}")


if __name__ == "__main__":
    main()
