"""The price before training (study/price.py) against a count by hand and against the stages' own measured time, and
validate's warnings (study/cautions.py): a scale far above s_f, a GPU that `device: auto` leaves unused."""

import math
import sys
import time

import pytest

from study.cautions import SCALE_CAUTION, gpu_fallback_caution, scale_cautions, scale_range_note
from study.config import StudyParams
from study.packing import WORKERS_JOIN_AFTER_SECONDS
from study.presets import write_params
from study.price import (BOUNDS, CALIBRATION_ITERATIONS, MAX_CALIBRATION_ITERATIONS, RUN_BOOKKEEPING,
                         SAY_PROGRESS_AFTER, WARM_UP, Calibration, block_wall, calibration_steps, duration,
                         native_shape, price_study, priced, process_age, rest_of_calibration, train_sizes)
from study.validation import study_cost

# The price of a study against its stages' measured time may be off by at most this factor either way. The price
# leaves out what is not training or evaluating (Optuna's bookkeeping, checkpoints, reading the prepared data), a
# share that is largest in a study as small as this one; the machine's other load moves both alike.
FACTOR = 1.5


def params_with(**sections) -> StudyParams:
    base = {"data": {"dataset": "digits", "protocol": "closed", "seeds": None},  # one class split: split 0
            "model": {"name": "mlp", "embedding_size": 16},
            "train": {"epochs": 2, "batch_size": 32, "device": "cpu", "lr": 0.01, "objective": "accuracy",
                      "threads": 1, "parallel": 1},
            "search": {"n_trials": 3},
            "runs": {"seeds": [0, 1], "methods": ["fixed_adacos", "softmax"]}}
    for name, values in sections.items():
        base[name] = {**base.get(name, {}), **values}
    return StudyParams.from_dict(base)


def calibration(**seconds) -> Calibration:
    values = {"device": "cpu", "threads": 1, "step": 0.01, "start": 0.5, "val": 0.1, "test": 0.2, "full_test": 1.0,
              "process_start": 5.0, "free_cores": 2, "load": 1.0,
              "iterations": 40, "seconds": 1.0, **seconds}
    return Calibration(**values)


def test_the_price_is_the_design_counted_by_hand():
    # 2 splits of 1,000 training images, batch 100: 10 steps an epoch, 10 epochs, 100 steps; val every 10 steps and
    # at 0: 11 evaluations. Search: 3 trials of 0.5 + 100 × 0.01 + 11 × 0.1 + 1.0 = 3.6 s. Final runs (2 methods
    # and the tuned loss, 2 seeds): 6 of 0.5 + 1.0 + 11 × (0.1 + 0.2) = 4.8 s. Evaluate: 6 × 1.0 s. Each run also
    # pays its bookkeeping.
    params = params_with(data={"seeds": [0, 1]}, train={"epochs": 10, "batch_size": 100, "eval_points": None,
                                                        "eval_every": 10})
    price = priced(params, calibration(), [1000, 1000], test_classes=10)
    per_split = 3 * (3.6 + RUN_BOOKKEEPING) + 6 * (4.8 + RUN_BOOKKEEPING) + 6 * 1.0
    assert price.device_seconds == pytest.approx(2 * per_split)
    assert price.search_seconds == pytest.approx(2 * 3 * (3.6 + RUN_BOOKKEEPING))
    # One run at a time: wall-clock is the device time and 7 process starts (prepare, search, 2 runs, tuned,
    # evaluate, report).
    assert price.wall_seconds == pytest.approx((2 * per_split + 7 * 5.0,) * 2)
    assert price.exact and not price.beyond_bound
    # Every kept run trained again at 2x (200 steps, 21 evaluations: 0.5 + 2 + 21 × 0.3 = 8.8 s) and 4x (400 steps,
    # 41 evaluations: 16.8 s), the worst case of runs.plateau_cap 4; none with a cap of 1.
    assert price.longer_seconds == pytest.approx(2 * 6 * (8.8 + 16.8 + 2 * RUN_BOOKKEEPING))
    assert "up to 4x (runs.plateau_cap)" in price.lines()[-1]
    never = priced(params.replace(runs=params.runs.replace(plateau_cap=1)), calibration(), [1000, 1000], 10)
    assert never.longer_seconds == 0 and len(never.lines()) == 2


def test_choosing_the_rate_early_is_priced_as_every_rate_until_the_choice_and_the_chosen_one_to_the_end():
    # As above on one split, at 3 rates: val chooses at step 30 (0.3 × 100), after 4 evaluations (10, 20, 30 and 0).
    # Each of the 2 methods × 3 rates × 2 seeds: 0.5 + 30 × 0.01 + 4 × 0.3 = 2.0 s; then the chosen rate's 2 × 2 and
    # the tuned loss's 2 to the end at 4.8 s each (evaluations at 10, 20, 30, ..., 100 and 0).
    params = params_with(train={"epochs": 10, "batch_size": 100, "eval_points": None, "eval_every": 10,
                                "learning_rates": [0.003, 0.01, 0.03], "choose_at": 0.3})
    price = priced(params, calibration(), [1000], test_classes=10)
    finals = 12 * (2.0 + RUN_BOOKKEEPING) + 6 * (4.8 + RUN_BOOKKEEPING)
    assert price.device_seconds == pytest.approx(3 * (3.6 + RUN_BOOKKEEPING) + finals + 6 * 1.0)
    whole = priced(params.replace(train=params.train.replace(choose_at=None)), calibration(), [1000], test_classes=10)
    assert whole.device_seconds == pytest.approx(3 * (3.6 + RUN_BOOKKEEPING) + 14 * (4.8 + RUN_BOOKKEEPING) + 6.0)


def test_runs_at_once_divide_the_wall_clock_after_their_workers_start():
    assert block_wall(12, 10.0, 1, 1, 5.0) == 120.0
    join = WORKERS_JOIN_AFTER_SECONDS
    # the stage trains while its worker joins and starts
    assert block_wall(12, 10.0, 2, 2, 5.0) == pytest.approx((120 + join + 5) / 2)
    assert block_wall(2, 10.0, 2, 2, 5.0) == join + 5 + 10  # the worker's join and start, then its one run
    assert block_wall(2, 5.0, 2, 2, 5.0) == 10.0  # both runs begun before the worker is ready: the stage's own time
    assert block_wall(2, 2.0, 2, 2, 5.0) == join + 5  # ... and then it waits for the worker, which only exits
    assert block_wall(12, 10.0, 1, 2, 5.0) == 125.0  # a worker that only takes turns: its start is paid, no gain
    # On a GPU, runs at once are from as fast as one alone to no faster: a range (runs of a minute, which workers join).
    params = params_with(train={"parallel": 4, "threads": 1})
    price = priced(params, calibration(device="cuda:NVIDIA H200", step=1.0), [1000], test_classes=10)
    fast, slow = price.wall_seconds
    assert fast < slow and slow == pytest.approx(price.device_seconds + 7 * 5.0)
    # On a CPU whose other load leaves one core free, two packed runs only take turns: as one at a time.
    packed = params_with(train={"parallel": 2, "threads": 1})
    busy = priced(packed, calibration(free_cores=1), [1000], test_classes=10)
    assert busy.wall_seconds[0] == pytest.approx(busy.device_seconds + 7 * 5.0 + 4 * 5.0)  # and 4 workers' starts
    assert "taking turns on 1 free core(s)" in busy.lines()[1]
    idle = priced(packed, calibration(free_cores=2), [1000], test_classes=10)
    assert idle.wall_seconds[0] < busy.wall_seconds[0] and "taking turns" not in idle.lines()[1]


def test_beyond_the_bound_it_names_a_cheaper_design_of_the_same_question():
    params = params_with(data={"seeds": [0, 1, 2, 3]}, train={"epochs": 100, "batch_size": 10},
                         search={"n_trials": 12},
                         runs={"methods": ["fixed_adacos", "dynamic_adacos", "p2sgrad", "softmax"]})
    slow = calibration()
    price = priced(params, slow, [1000] * 4, test_classes=500)
    assert price.beyond_bound and price.bound == BOUNDS["cpu"]
    changes, says = price.cheaper
    assert "-S 'runs.methods=[fixed_adacos]'" in changes and "data.seeds" in changes
    changed = params.replace(runs={**params.runs.to_dict(), "methods": ["fixed_adacos"]},
                             data={**params.data.to_dict(), "seeds": [0, 1]})
    if "search.n_trials" in changes:
        n_trials = int(changes.split("search.n_trials=")[1].split("'")[0])
        changed = changed.replace(search={**changed.search.to_dict(), "n_trials": n_trials})
    assert priced(changed, slow, [1000] * 2, test_classes=500).wall_seconds[0] <= BOUNDS["cpu"]
    assert "gives up" in says and "price: beyond 60.0 min on cpu" in "\n".join(price.lines())
    # With few test classes a split, the splits stay; beyond what any cut reaches, it says so.
    few = priced(params, slow, [1000] * 4, test_classes=20)
    assert few.cheaper is None or "data.seeds" not in few.cheaper[0]
    hopeless = priced(params, calibration(step=10.0), [1000] * 4, test_classes=500)
    assert hopeless.cheaper is None and "no design of the same question fits" in hopeless.lines()[-1]


def test_the_image_size_comes_from_the_spec_where_validate_holds_stand_ins():
    from study.validation import planned_source

    for spec, shape in (("glyphs:20:4", (28, 28)), ("glyphs:20:4:32", (32, 32)), ("compose:2:4:mnist5k", (28, 56)),
                        ("digits", (8, 8))):
        stand_in = planned_source(params_with(data={"dataset": spec}).data)[1]
        assert native_shape(spec, stand_in, None) == shape, spec
    assert duration(42) == "42 s" and duration(600) == "10.0 min" and duration(7200) == "2.0 h"
    assert 0 < process_age() < 24 * 3600


@pytest.mark.slow  # 10 s on an idle 2-core CPU: the calibration, then 9 runs
def test_the_price_lies_within_its_factor_of_the_stages_measured_time(tmp_path, monkeypatch):
    """A tiny study priced, then run by its stages' own code in this process, one run at a time (no process or
    worker starts, which the price counts apart): its measured seconds against the price's device-seconds."""
    from stages import evaluate, prepare, runs, search

    # 224 steps a run, so that training, which the price measures, outweighs the bookkeeping, which it takes as a
    # constant (RUN_BOOKKEEPING, measured on a loaded machine: about twice an idle one's); 9 runs, 6 test evaluations.
    params = params_with(train={"epochs": 8})
    write_params(params, tmp_path / "params.yaml", "test")
    monkeypatch.chdir(tmp_path)
    priced_at = price_study(params, process_start=0.0)
    prepare.main()
    began = time.perf_counter()
    monkeypatch.setattr(sys, "argv", ["search", "--loss", "arcface"])
    search.main()
    for argv in (["--method", "fixed_adacos"], ["--method", "softmax"], ["--tuned", "arcface"]):
        monkeypatch.setattr(sys, "argv", ["runs", *argv])
        runs.main()
    evaluate.main()
    measured = time.perf_counter() - began
    ratio = measured / priced_at.device_seconds
    print(f"measured {measured:.1f} s, priced {priced_at.device_seconds:.1f} s: {ratio:.2f}×")
    assert 1 / FACTOR <= ratio <= FACTOR, (measured, priced_at)


def test_a_fixed_scale_far_above_s_f_is_warned_of_and_the_search_range_stated_against_it():
    params = params_with(runs={"methods": ["fixed_adacos", "arcface_default"],
                               "fixed": {"arcface_default": {"loss": "arcface", "s": 64.0, "m": 0.5}}})
    s_f = math.sqrt(2) * math.log(92 - 1)  # arcface-pytorch #38's 92 classes: 64 is 10× s_f
    (line,) = scale_cautions(params, 92)
    assert line.startswith("runs.fixed.arcface_default.s: 64 is 10.0× s_f") and f"{s_f:.2f}" in line
    # At face-recognition scale (MS1M's 85,742 identities) 64 is 4× s_f: no warning; the bound sits at 8×.
    assert scale_cautions(params, 85_742) == []
    assert 64 > SCALE_CAUTION * math.sqrt(2) * math.log(287 - 1) and 64 <= SCALE_CAUTION * math.sqrt(2) * math.log(288)
    assert scale_cautions(params, 288) == [] and len(scale_cautions(params, 287)) == 1
    # ArcFace at its own default s (64) counts too; a method not run is not warned of.
    default = params_with(runs={"methods": ["fixed_adacos", "plain"], "fixed": {"plain": {"loss": "arcface"}}})
    assert len(scale_cautions(default, 10)) == 1
    assert scale_cautions(params_with(runs={"methods": ["fixed_adacos"]}), 10) == []
    note = scale_range_note(params, 80)
    assert note.startswith("search.s_range [1, 128] is 0.16–21× s_f") and "6.18 at C = 80" in note
    beyond = params_with(search={"s_range": [60.0, 128.0]})
    assert any(line.startswith("search.s_range: [60, 128] lies wholly beyond") for line in scale_cautions(beyond, 20))


def test_device_auto_on_the_cpu_of_a_machine_with_an_nvidia_gpu_is_warned_of(tmp_path):
    device_file = tmp_path / "nvidia0"
    device_file.touch()
    line = gpu_fallback_caution("auto", cuda_available=lambda: False, device_files=(str(device_file),),
                                driver=lambda: "550.54.15")
    assert line.startswith("train.device: auto trains on the CPU, but this machine has an NVIDIA GPU")
    assert "driver 550.54.15" in line and "train.device: cpu" in line
    import torch

    if torch.version.cuda:
        assert f"CUDA {torch.version.cuda}" in line
    # No sign of a GPU, a GPU torch uses, or a device asked for by name: nothing to say.
    assert gpu_fallback_caution("auto", cuda_available=lambda: False, device_files=(str(tmp_path / "none"),),
                                driver=lambda: None) is None
    assert gpu_fallback_caution("auto", cuda_available=lambda: True, device_files=(str(device_file),)) is None
    assert gpu_fallback_caution("cpu", cuda_available=lambda: False, device_files=(str(device_file),)) is None


@pytest.mark.slow  # two calibrations: 10-15 s on the loaded 2-core CPU
def test_validate_prints_the_price_to_the_terminal_only_and_study_plan_prints_it_too(tmp_path, monkeypatch, capsys):
    import stages.validate
    import study.price as price_module
    from study import cli
    from study.validation import VALIDATED, VALIDATED_TEXT

    write_params(params_with(), tmp_path / "params.yaml", "test")
    monkeypatch.chdir(tmp_path)
    # In the suite's long-lived worker the process's age is minutes, not a stage's start: a stage's few seconds here.
    for module in (stages.validate, price_module):  # the stage's name for it, and the one `study plan` imports
        monkeypatch.setattr(module, "process_age", lambda: 4.0)
    stages.validate.main()
    said = capsys.readouterr()
    assert said.out.startswith("params.yaml passed; the study makes 9 trainings") and "price" not in said.out
    # The price's own lines; a calibration slowed by a loaded machine also says how it goes ("price: calibrating").
    price = [line for line in said.err.splitlines() if line.startswith("price: ") and "calibrating" not in line]
    assert len(price) == 3 and price[0].startswith("price: calibrated on cpu in "), said.err
    assert " of device time (the searches " in price[1] and "of wall-clock with one run at a time" in price[1]
    assert (tmp_path / VALIDATED).read_bytes() == VALIDATED_TEXT.encode()  # the same bytes, whatever the price

    assert cli.main(["plan"]) == 0
    planned = capsys.readouterr().out.splitlines()
    assert planned[0].startswith("params.yaml passed; the study makes 9 trainings")
    lines = [line for line in planned if line.startswith("price: ") and "calibrating" not in line]
    assert len(lines) == 3 and lines[0].startswith("price: calibrated on cpu") and " of device time " in lines[1], \
        planned
    assert "trains them again at twice the length, up to 4x (runs.plateau_cap)" in lines[2]


def test_a_slow_calibration_says_what_its_first_run_measured_and_how_long_the_rest_will_take():
    # Val at 0 and at step 10: 2.0 s, then 2.5 s more; 0.8 s a step. The rest: 40 steps (32 s), val at 0, 10,
    # half-way and the end (4 × 2.5 s) and two test evaluations (2 × 3.0 s).
    history = [{"iteration": 0, "seconds": 2.0, "eval_seconds": 2.0},
               {"iteration": 10, "seconds": 12.5, "eval_seconds": 4.5}]
    line = rest_of_calibration(history, first_seconds=95.0, step=0.8, full_test=3.0, iterations=40, device="cpu")
    assert line == ("price: calibrating on cpu: its first run of 10 steps took 1.6 min (a step 0.8 s, a val "
                    "evaluation 2.5 s, a test 3.0 s); the rest, 40 steps and 6 evaluations, about 48.0 s more")


@pytest.mark.parametrize("after, said", [(0.0, 1), (SAY_PROGRESS_AFTER, 0)])
def test_only_a_calibration_slower_than_its_bound_says_so_and_its_price_follows(monkeypatch, after, said):
    import study.price

    monkeypatch.setattr(study.price, "SAY_PROGRESS_AFTER", after)
    params = params_with()
    heard = []
    price = price_study(params, process_start=0.0, say=heard.append)
    assert len(heard) == said and all(line.startswith("price: calibrating on cpu: its first run of 10 ")
                                      for line in heard)
    assert price.calibration.iterations >= 40 and len(price.lines()) >= 2
    # The rest it announced is the run the calibration then made.
    assert all(f"the rest, {price.calibration.iterations} steps and 6 evaluations" in line for line in heard)


def test_the_calibration_trains_at_most_a_tenth_of_the_study_and_a_shorter_one_is_priced_from_its_first_run():
    # At 2 ms a step a second is 500 steps, cut to MAX_CALIBRATION_ITERATIONS; a study of 1,000 iterations allows 100
    # of them; one of 399, fewer than CALIBRATION_ITERATIONS: no second run.
    assert calibration_steps(0.002) == MAX_CALIBRATION_ITERATIONS == 400
    assert calibration_steps(0.002, 1_000) == 100 and calibration_steps(0.5, 1_000) == CALIBRATION_ITERATIONS == 40
    assert calibration_steps(0.002, 399) == WARM_UP
    # One epoch of digits' 898 training images at 32 a batch: 28 steps a run, 9 runs, 252 iterations in all.
    params = params_with(train={"epochs": 1})
    assert study_cost(params, train_sizes(params)).iterations == 252
    price = price_study(params, process_start=0.0)
    assert price.calibration.iterations == WARM_UP and price.device_seconds > 0
    assert "(10 steps, as the study is shorter than a calibration)" in price.lines()[0]
