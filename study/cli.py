"""The `study` command: one training run from the shell, a worker that joins a study's searches and runs, the speed bench,
the class-count sweep, the tuning-cost benchmark, presets, a study's price before it trains and the advice on a
running study."""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path

from study import __version__


def _known_names() -> str:
    from study.losses import LOSSES
    from study.models import model_names
    from study.sources import SOURCES

    return (
        f"losses:   {', '.join(LOSSES)}\n"
        f"models:   {', '.join(model_names())}, timm/<model_name>\n"
        f"datasets: {', '.join(source.usage for source in SOURCES.values())}"
    )


def _train_command(args: argparse.Namespace) -> int:
    import pandas as pd

    from study.config import DataConfig, ModelConfig, TrainConfig
    from study.sources import load_dataset
    from study.splits import split_dataset
    from study.training import evaluate, resolve_device, train

    hyperparameters = {}
    if args.s is not None:
        hyperparameters["s"] = args.s
    if args.m is not None and args.m_degrees is not None:
        raise ValueError("give the margin once: --m (radians) or --m-degrees, not both")
    if args.m is not None:
        hyperparameters["m"] = args.m
    if args.m_degrees is not None:
        if args.loss == "sphereface":
            raise ValueError("SphereFace's m multiplies the angle and has no unit: give --m (≥ 1), not --m-degrees")
        hyperparameters["m"] = math.radians(args.m_degrees)
    data_config = DataConfig.from_dict({"dataset": args.dataset, "protocol": args.protocol, "seed": args.seed,
                                        "image_size": args.image_size}, "data")
    model_config = ModelConfig.from_dict({"name": args.model, "embedding_size": args.embedding_size}, "model")
    objective = args.objective or ("accuracy" if args.protocol == "closed" else "map_at_r")
    train_config = TrainConfig.from_dict({
        "epochs": args.epochs, "batch_size": args.batch_size, "lr": args.lr, "optimizer": args.optimizer,
        "device": args.device, "seed": args.seed, "amp": args.amp, "checkpoint": args.checkpoint,
        # --eval-every asks for the fixed schedule: it replaces the log-spaced one
        **({"eval_every": args.eval_every, "eval_points": None} if args.eval_every else {"eval_points": args.eval_points}),
        "max_iterations": args.max_iterations, "objective": objective}, "train")

    if args.save:
        _check_writable(Path(args.save))  # before training, not after an hour of it
    sets = split_dataset(load_dataset(data_config.dataset, cache_dir=data_config.cache_dir), data_config.protocol,
                         data_config.fractions, seed=data_config.seed)
    print(f"{data_config.dataset} ({data_config.protocol}): " +
          ", ".join(f"{k} {len(v)} images / {v.num_classes} classes" for k, v in sets.items()), file=sys.stderr)
    result = train(sets, loss_name=args.loss, hyperparameters=hyperparameters, model_config=model_config,
                   config=train_config, image_size=data_config.image_size)
    history = pd.DataFrame(result.history)
    shown = ["iteration", "epoch", "train_loss", "s", "theta_med_deg", objective, "seconds"]
    print(history[[c for c in shown if c in history]].to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    print(f"\nstatus: {result.status}{' (' + result.reason + ')' if result.reason else ''}; "
          f"{result.iterations} iterations in {result.seconds:.1f} s on {result.device}")
    if args.save:  # saved before the test evaluation, so nothing after training can lose the model
        _save_or_keep(result, Path(args.save), loss=args.loss, hyperparameters=hyperparameters,
                      model=model_config.to_dict(), num_classes=sets["train"].num_classes)
    if result.status != "diverged":
        test = evaluate(result.model, result.loss, sets, "test", train_config, resolve_device(train_config.device),
                        data_config.image_size, full=True)
        print("test metrics:")
        print(json.dumps({k: round(v, 4) for k, v in test.items()}, indent=2))
    return 0 if result.status != "diverged" else 1


def _check_writable(path: Path) -> None:
    """Raise, naming the fix, when a checkpoint cannot be written at `path`."""
    folder = path.parent
    if path.is_dir():
        raise ValueError(f"--save {path} is a folder; give a file name, e.g. --save {path / 'model.pt'}")
    if not folder.is_dir():
        raise FileNotFoundError(f"--save {path}: the folder {folder} does not exist; create it (mkdir -p {folder}) "
                                "or save elsewhere")
    try:
        tempfile.TemporaryFile(dir=folder).close()
    except OSError as error:
        raise PermissionError(f"--save {path}: cannot write in {folder} ({error.strerror}); save elsewhere") from None


def _save_or_keep(result, path: Path, **metadata) -> None:
    """Save the checkpoint at `path`; should that fail, in the temporary folder instead, and say where."""
    from study.training import save_checkpoint

    try:
        save_checkpoint(result, path, **metadata)
    except (OSError, RuntimeError) as error:  # torch reports a failed write (a full disk) as a RuntimeError
        kept = Path(tempfile.mkdtemp(prefix="study-")) / path.name
        save_checkpoint(result, kept, **metadata)
        raise RuntimeError(f"could not write the checkpoint {path} ({error}); the trained model is kept in {kept}: "
                           f"move it where you want it") from None
    print(f"checkpoint written to {path}", file=sys.stderr)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the `study` command."""
    parser = argparse.ArgumentParser(
        prog="study",
        description="Metric-learning loss study: is AdaCos worth it, or should you tune ArcFace?",
        epilog="What exists:\n" + _known_names() + "\n\nThe whole study runs with `dvc repro`; this command runs its pieces.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"study {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    train = commands.add_parser("train", help="train and evaluate one run; prints metrics and its history",
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    train.add_argument("--dataset", default="mnist5k", help="dataset spec (default: mnist5k)")
    train.add_argument("--protocol", choices=["closed", "open"], default="closed")
    train.add_argument("--image-size", type=int, default=None, help="resize side for image folders")
    train.add_argument("--model", default="cnn", help="backbone name (default: cnn)")
    train.add_argument("--embedding-size", type=int, default=64)
    train.add_argument("--loss", default="arcface", help="loss name (default: arcface)")
    train.add_argument("--s", type=float, default=None, help="scale, for normface / cosface / arcface / sphereface")
    train.add_argument("--m", type=float, default=None, help="margin: radians for cosface / arcface, an angle multiplier ≥ 1 for sphereface")
    train.add_argument("--m-degrees", type=float, default=None, help="margin in degrees, converted to radians")
    train.add_argument("--epochs", type=int, default=5)
    train.add_argument("--batch-size", type=int, default=128)
    train.add_argument("--lr", type=float, default=1e-3)
    train.add_argument("--optimizer", default="adam")
    train.add_argument("--max-iterations", type=int, default=None)
    train.add_argument("--eval-every", type=int, default=None,
                       help="val every N iterations (default: about 20 log-spaced evaluations, the last among them)")
    train.add_argument("--eval-points", type=int, default=20, help="log-spaced val evaluations (default 20)")
    train.add_argument("--checkpoint", choices=("best_val", "last"), default="best_val",
                       help="the weights a run ends with: the best by val (early stopping, the default) or the last")
    train.add_argument("--objective", default=None, help="val metric to track (default: accuracy if closed, map_at_r if open)")
    train.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda, cuda:N")
    train.add_argument("--amp", action="store_true", help="mixed precision on GPU")
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--save", default=None, help="write a checkpoint of the trained model here")
    train.set_defaults(handler=_train_command)

    preset = commands.add_parser("preset", help="set params.yaml to a preset (a published setup, a dataset), "
                                                "changing only the keys that differ and keeping its comments")
    preset.add_argument("name", nargs="?", help="the preset; `default` restores the embedded default study")
    preset.add_argument("--set", dest="assignments", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="change a key on top of the preset, e.g. --set data.dataset=folder:/data/faces")
    preset.add_argument("--output", default="params.yaml", help="where to write (default: params.yaml)")
    preset.add_argument("--list", action="store_true", help="list the presets")
    preset.set_defaults(handler=_preset_command)

    worker = commands.add_parser(
        "worker", help="join a study's searches and final runs from another process or machine",
        description="Serves the searches of params.yaml (until each has its n_trials), then the final runs that a "
                    "`runs` or `tuned` stage has queued. Workers share the journal file on one machine, or the "
                    "database in search.storage across machines; a dead worker's trial is retried. A worker whose "
                    "prepared data or params differ from a study's is refused its trials, with what differs.")
    worker.add_argument("--loss", action="append", default=None,
                        help="serve only this loss's search (repeatable; default: every loss of search.losses)")
    worker.add_argument("--serve", choices=["all", "search", "runs"], default="all",
                        help="what to serve (default: all, the searches first)")
    worker.add_argument("--params", default="params.yaml", help="the study's params file (default: params.yaml)")
    worker.add_argument("--cells", metavar="FOLDER", default=None,
                        help="serve every unfinished cell of the benchmark in FOLDER (e.g. benchmarks/cells) in turn, "
                             "instead of one study: with search.storage one database, workers on many machines share "
                             "the benchmark; each cell needs its prepared data here")
    worker.add_argument("--trials", type=int, default=None, help="stop after this many trials (default: until the budget is met)")
    worker.add_argument("--threads", type=int, default=None,
                        help="torch threads of this process: workers on one machine share its cores, so give each "
                             "about cores ÷ workers (default: train.threads)")
    worker.set_defaults(handler=_worker_command)

    bench = commands.add_parser(
        "bench", help="measure the suite's speed on one device: loss heads, training loop, packed trials, backbones",
        description="Times, side by side in one run: every loss head against plain normalised-softmax cross-entropy "
                    "and pytorch-metric-learning's ArcFace; train() against a bare PyTorch loop; trials per hour with "
                    "K runs packed on the device (train.parallel); and each backbone's images per second. Prints a "
                    "table and writes JSON named after the device and date.")
    bench.add_argument("--quick", action="store_true", help="smaller sizes and fewer repeats (its measured time is in docs/running.md)")
    bench.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda, cuda:N")
    bench.add_argument("--out", default="benchmarks/results", help="where the JSON goes (default: benchmarks/results)")
    bench.set_defaults(handler=_bench_command)

    sweep = commands.add_parser(
        "sweep", help="run the whole study at several training class counts C through DVC and show how the verdict "
                      "moves with C",
        description="Writes, for every C, <out>/C<C>/params.yaml and a dvc.yaml generated from the repository's, and "
                    "<out>/dvc.yaml whose `aggregate` stage reads every C's report; then runs `dvc repro` on them. "
                    "DVC skips every stage that is up to date: a finished C costs nothing on a rerun, a change to the "
                    "report reruns only the report stages and the aggregate, and a failed stage keeps every finished "
                    "one. Run it inside the study's git + DVC checkout.")
    sweep.add_argument("--classes", type=int, nargs="+", required=True, metavar="C",
                       help="training class counts, e.g. --classes 10 30 100")
    sweep.add_argument("--preset", default="glyphs-sweep", help="the preset every C starts from (default: glyphs-sweep)")
    sweep.add_argument("--set", dest="assignments", action="append", default=[], metavar="SECTION.KEY=VALUE",
                       help="change a key on top of the preset, e.g. --set train.epochs=3")
    sweep.add_argument("--dataset-template", default=None, metavar="SPEC",
                       help="data.dataset of every C: with {total}, generated at the class count that gives C "
                            "training classes (e.g. 'glyphs:{total}:40'); without it, e.g. 'folder:/data/faces', "
                            "data.classes keeps that many of its classes (default: the preset's dataset, a glyphs "
                            "spec with {total})")
    sweep.add_argument("--out", default="sweeps", help="one folder per C is made here, and the sweep's own dvc.yaml "
                                                       "(default: sweeps; it must not be git-ignored: DVC refuses "
                                                       "pipelines there)")
    sweep.add_argument("--report-dir", default="reports/sweep", help="where the aggregate goes (default: reports/sweep)")
    sweep.set_defaults(handler=_sweep_command)

    benchmark = commands.add_parser(
        "benchmark", help="run the tuning-cost benchmark (the whole study in many cells: data sets, class counts, "
                          "losses, tuners) through DVC and pool its meta-verdict",
        description="Writes one folder per cell (<out>/<cell>/params.yaml and a dvc.yaml generated from the "
                    "repository's), <out>/plan.json and <out>/dvc.yaml whose `aggregate` stage pools every cell's "
                    "committed report; then runs `dvc repro` on the cells that are not finished, and on the "
                    "aggregate. An interrupted run resumes where it stopped; a finished cell (its reports/, dvc.lock "
                    "and params.yaml, committed to git) is never retrained, even on a fresh clone. Run it inside the "
                    "study's git + DVC checkout.")
    benchmark.add_argument("--quick", action="store_true",
                           help="the quick variant (presets/benchmark/quick.yaml; its measured time is in "
                                "docs/running.md) in benchmarks/quick, reported in reports/benchmark-quick")
    benchmark.add_argument("--plan", default=None, metavar="FILE",
                           help="the cells' declaration (default: presets/benchmark/full.yaml, or quick.yaml)")
    benchmark.add_argument("--out", default=None, help="one folder per cell is made here (default: benchmarks/cells, "
                                                       "or benchmarks/quick; it must not be git-ignored)")
    benchmark.add_argument("--report-dir", default=None,
                           help="where the meta-verdict goes (default: reports/benchmark, or reports/benchmark-quick)")
    benchmark.add_argument("--rerun", nargs="+", default=[], metavar="CELL",
                           help="hand finished cells back to DVC (their changed code or params rerun); 'all' for "
                                "every cell")
    benchmark.add_argument("--add", default=None, metavar="NAME",
                           help="declare your own data as a new configuration (its own source) in the plan, with "
                                "--set data.dataset=... and any other keys, then run what is unfinished")
    benchmark.add_argument("--set", dest="assignments", action="append", default=[], metavar="KEY=VALUE",
                           help="with --add: a params key of the new configuration, e.g. data.dataset=folder:/data")
    benchmark.add_argument("--list", action="store_true",
                           help="list the cells, their planned trainings and whether each is finished; run nothing")
    benchmark.add_argument("--report-only", action="store_true",
                           help="train nothing: pool the cells finished so far into the report (the others named "
                                "there as declared but not finished)")
    benchmark.set_defaults(handler=_benchmark_command)

    plan = commands.add_parser(
        "plan", help="what the study of params.yaml will cost before it trains: its trainings, and from a short "
                     "calibration on its device its device-time and wall-clock (what `dvc repro`'s validate prints)",
        description="Checks params.yaml as the validate stage does, then times a calibration at the study's real "
                    "sizes on its device (a few dozen training steps and one evaluation of each kind) and prices the "
                    "whole design: device-time, wall-clock with train.parallel runs at once, and beyond an hour on a "
                    "CPU or a day on a GPU a cheaper design that asks the same question (study/price.py). Writes "
                    "nothing.")
    plan.add_argument("--params", default="params.yaml", help="the study's params file (default: params.yaml)")
    plan.set_defaults(handler=_plan_command)

    advise = commands.add_parser(
        "advise", help="on a running or finished study: does tuning ArcFace pay over Fixed AdaCos here, and may the "
                       "search stop? (reads its storage, or its committed report tables)",
        description="Reads the study of params.yaml in this folder: its storage (the journal or search.storage) while "
                    "it runs, or its reports/tables once finished. Prints what to use now; tuned ArcFace − Fixed "
                    "AdaCos for a search of search.n_trials trials, with an interval valid however often it is read; "
                    "what 5, 10 and 20 more trials are expected to add and cost; and whether to stop. The method and "
                    "its error rates: study/advice.py, docs/usage.md.")
    advise.add_argument("--prior", default="reports/benchmark/tables/cells.csv", metavar="CELLS_CSV",
                        help="the benchmark whose pooled cells are the prior (default: the committed one), or 'none'")
    advise.add_argument("--prior-regime", choices=("converged", "short"), default="converged",
                        help="which of the benchmark's cells make the prior: those trained to convergence (default: "
                             "users train until the model stops improving) or the short regime's")
    advise.add_argument("--from", dest="source", choices=("auto", "storage", "report"), default="auto",
                        help="where the evidence is read: the study's storage, its reports/tables, or (auto) the "
                             "storage when it holds the searches, else the report")
    advise.add_argument("--alpha", type=float, default=0.05, help="each error rate's bound (default 0.05)")
    advise.add_argument("--json", default=None, metavar="FILE", help="also write the advice as JSON here")
    advise.set_defaults(handler=_advise_command)
    return parser


def _preset_command(args: argparse.Namespace) -> int:
    from study.presets import apply_params, build_preset, preset_names

    if args.list or not args.name:
        print("\n".join(["default"] + preset_names()))
        return 0
    existed = Path(args.output).is_file()
    changed = apply_params(build_preset(args.name, args.assignments), args.output, " ".join([args.name, *(
        f"--set {a}" for a in args.assignments)]))
    if not existed:
        print(f"{args.output} written from preset {args.name}; run `dvc repro` to run the study", file=sys.stderr)
    elif changed:
        print(f"{args.output}: {', '.join(changed)} set from preset {args.name} (its comments and other keys kept); "
              "run `dvc repro` to run the study", file=sys.stderr)
    else:
        print(f"{args.output} already holds preset {args.name}; nothing changed", file=sys.stderr)
    return 0


def _plan_command(args: argparse.Namespace) -> int:
    from study.price import process_age, say_before_training
    from study.validation import validate_study

    started = process_age()  # this process's start, its imports included: what each stage and packed worker pays
    params, cost = validate_study(args.params)  # a ConfigError (a ValueError) is said in one line by main()
    print(f"{args.params} passed; the study makes {cost.said()}", flush=True)
    say_before_training(params, started, out=sys.stdout)
    return 0


def _worker_command(args: argparse.Namespace) -> int:
    """`study worker`: serve a study's searches, then its queued final runs, from another process or machine.

    It needs the study's checkout with the prepared data (`dvc repro prepare` or `dvc pull`) and the same
    params.yaml (a worker whose data or params differ from a study's is refused its trials); a shared database
    in search.storage lets it run on another machine. Each study's params pass the validate stage's checks first.
    """
    from functools import partial

    from study.benchmark.pipelines import cells_to_serve

    for flag, value, meaning in (("--threads", args.threads, "torch threads of this process, e.g. --threads 2, or "
                                  "leave it out for train.threads"),
                                 ("--trials", args.trials, "trials to serve before it stops, e.g. --trials 10, or "
                                  "leave it out to serve until the budget is met")):
        if value is not None and value < 1:  # checked before any study is opened or a cell listed
            raise ValueError(f"{flag} {value}: give a whole number of at least 1, the {meaning}")
    if args.cells is not None:
        roots = cells_to_serve(Path(args.cells))
        if not roots:
            return 0
    else:
        roots = [Path(args.params).resolve().parent]

    from study.config import ConfigError
    from study.runs import serve_queued_runs
    from study.search import serve_searches
    from study.interruptions import ends_as_interrupted
    from study.validation import validate_study
    from study.workers import serve_study

    def with_threads(params):
        # Several workers on one machine share its cores.
        return params if args.threads is None else params.replace(train=params.train.replace(threads=args.threads))

    def services(params):
        unknown = sorted(set(args.loss or ()) - set(params.search.losses))
        if unknown:
            raise ValueError(f"{', '.join(unknown)} not searched in {args.params}; search.losses is "
                             f"{list(params.search.losses)}")
        searches = partial(serve_searches, losses=args.loss)
        return ([searches] if args.serve in ("all", "search") else []) + (
            [serve_queued_runs] if args.serve in ("all", "runs") else [])

    refused = []
    # Ctrl-C or SIGTERM: its running trial failed as interrupted (queued again), one line, exit status 128 + signal.
    with ends_as_interrupted():
        for root in roots:
            path = root / Path(args.params).name if args.cells else Path(args.params)
            try:  # as its validate stage checks them: a params.yaml edited since is never served unchecked
                params = validate_study(path, with_threads)[0]
            except ConfigError as error:
                if args.cells is None:
                    raise
                problems = "".join(f"\n  {line}" for line in str(error).splitlines())
                print(f"cell {root.name}: skipped, its {path.name} has problems (`study benchmark` writes it again "
                      f"from the plan):{problems}", file=sys.stderr, flush=True)
                refused.append(root.name)
                continue
            if args.cells is not None:
                print(f"cell {root.name}: serving its searches and queued final runs", file=sys.stderr, flush=True)
            serve_study(params, root, services(params), args.trials)  # a storage fault: one line naming the fix
    return 2 if refused else 0


def _bench_command(args: argparse.Namespace) -> int:
    from study.bench import checked_out_dir, format_table, run_bench, write_results

    out = checked_out_dir(args.out)  # before the minutes of measuring, not after them
    results = run_bench(quick=args.quick, device_name=args.device,
                        log=lambda line: print(f"measuring {line}", file=sys.stderr, flush=True))
    print(format_table(results))
    print(f"\nwritten to {write_results(results, out)}", file=sys.stderr)
    return 0


def _sweep_command(args: argparse.Namespace) -> int:
    from study.sweep import run_sweep

    written = run_sweep(args.classes, args.preset, args.assignments, args.dataset_template, args.out, args.report_dir)
    print("\n".join(str(path) for path in written.values()))
    return 0


def _benchmark_command(args: argparse.Namespace) -> int:
    from study.benchmark import default_locations, load_plan, run_benchmark
    from study.benchmark.pipelines import cells_to_run, kept_trainings, lock_short_of_its_report, plain_params

    plan, out, report_dir = default_locations(args.quick)
    plan, out, report_dir = args.plan or plan, args.out or out, args.report_dir or report_dir
    if args.add:
        from study.benchmark.plan import add_configuration

        entry = add_configuration(plan, args.add, args.assignments)
        print(f"{plan}: added {entry['name']} ({entry['dataset']}, C = {entry['train_classes']} training classes)",
              file=sys.stderr)
    elif args.assignments:
        raise ValueError("--set goes with --add NAME (a new configuration); to change every cell, edit the plan")
    if args.list:
        declared = load_plan(plan)
        pending = set(cells_to_run(declared, out, args.rerun))
        problems = declared.data_problems(out)
        width = max(len("cell"), *(len(cell.name) for cell in declared.cells))
        print(f"{'cell':{width}} {'source':14} {'trainings':>9} {'iterations':>10}  state")
        for cell in declared.cells:
            facts = cell.facts(Path(out) / cell.name)  # a finished cell's iterations where its source is absent here
            iterations = "?" if facts["iterations"] is None else f"{facts['iterations']:,}"
            state = "finished"
            if cell.name in pending:  # a cell run on several machines in turn: what its storage holds so far
                kept = kept_trainings(Path(out) / cell.name)
                state = "to run" if kept is None else f"to run; {kept.of(facts['planned_runs'])}"
                cut = lock_short_of_its_report(Path(out) / cell.name, plain_params(cell.params))
                state += f"; {cut}" if cut else ""
            print(f"{cell.name:{width}} {facts['source']:14} {facts['planned_runs']:9} {iterations:>10}  {state}"
                  f"{f'; {problems[cell.name]}' if cell.name in problems else ''}")
        return 0
    written = run_benchmark(plan, out, report_dir, args.rerun, report_only=args.report_only)
    print("\n".join(str(path) for path in written.values()))
    return 0


def _advise_command(args: argparse.Namespace) -> int:
    from study.advice import AdviceError, Prior, advise, benchmark_prior
    from study.advice_evidence import report_evidence, study_evidence
    from study.config import METRIC_KIND
    from study.config import load_params
    from study.results import JOURNAL, REPORT_DIR, write_json
    from study.storage import open_storage

    params = load_params()
    objective = params.train.objective
    margin = params.analysis.score_share(METRIC_KIND[objective])
    if not math.isfinite(margin):
        raise AdviceError(f"the advice reads its margin as a share of the score: set analysis.equivalence_margin."
                          f"{METRIC_KIND[objective]} to e.g. '2% of score' (it is "
                          f"{params.analysis.equivalence_margin[METRIC_KIND[objective]]!r})")
    prior = Prior.flat(objective) if args.prior == "none" else \
        benchmark_prior(args.prior, objective, regime=args.prior_regime)
    evidence, best = None, ""
    if args.source in ("auto", "storage") and (params.search.storage or Path(JOURNAL).is_file()):
        evidence, best = study_evidence(params, open_storage(params.search, JOURNAL))
    if args.source == "report" or args.source == "auto" and (evidence is None or evidence.trials.empty):
        tables = REPORT_DIR / "tables"
        if not (tables / "landscape.csv").is_file():
            raise AdviceError(f"no evidence: neither a storage with the study's searches nor {tables}/landscape.csv; "
                              f"run `dvc repro` (or `study worker`) first")
        evidence = report_evidence(tables, objective, params.search.n_trials)
    elif evidence is None:
        raise AdviceError(f"no storage: {JOURNAL} is missing and search.storage is not set; run `dvc repro` first")
    advice = advise(evidence, margin, prior, args.alpha, best=best)
    print("\n".join(advice.lines()))
    if args.json:
        write_json(advice.as_dict(), args.json)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `study` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    try:
        return args.handler(args)
    except (ValueError, RuntimeError, OSError) as error:
        print(f"study: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C is an interruption, not a crash: no traceback, the status of SIGINT
        print("study: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
