"""DVC stage `prepare`: load the dataset named in params, check its images, split it by the protocol once per class
split (data.seeds), check each training split, and write each with a manifest.

Validate has checked all of this already; what prepare still finds (a dataset that changed since, say) ends it with
one line per problem, naming its key or file and the fix, not a traceback."""

import sys

from stages import begin
from study.config import DataConfig, load_params
from study.results import prepared_dir
from study.sources import ImageSet, load_dataset
from study.splits import save_splits
from study.validation import DataProblem, check_images, check_training_split, planned_splits


def main() -> None:
    begin()
    params = load_params()
    try:
        prepare(params)
    except ValueError as problem:  # DataProblem, ConfigError, unreadable images: each line names its key or file
        sys.exit(f"prepare: {problem}")


def prepare(params) -> None:
    """Every class split of the source, checked and written to its folder."""
    data = params.data
    source, fallback_reason, image_set = load_source(data)
    check_images(image_set, source)  # image files are otherwise first decoded in training
    for split in data.split_seeds():
        split_params = params.for_split(split)
        splits = planned_splits(image_set, data, split)
        check_training_split(splits["train"], split_params, source)
        # The manifest records which source was asked for and which was used, so the report can say it.
        save_splits(splits, prepared_dir(split), source=source, protocol=data.protocol, seed=split,
                    fractions=data.fractions, requested_source=data.dataset, fallback_reason=fallback_reason,
                    classes_kept=data.classes)
        for name, part in splits.items():
            print(f"split {split}, {name}: {len(part)} images, {part.num_classes} classes")


def load_source(data: DataConfig) -> tuple[str, str | None, ImageSet]:
    """The source read (data.dataset, or data.fallback where the dataset cannot be had), why the fallback was used, and
    its images; a DataProblem names the key whose source fails."""
    try:
        return data.dataset, None, load_dataset(data.dataset, cache_dir=data.cache_dir)
    except (RuntimeError, FileNotFoundError) as error:  # unavailable: the fallback is read, where there is one
        if data.fallback is None:
            raise DataProblem(f"data.dataset: {error}") from None
        reason = str(error)
    except (ValueError, OSError) as error:
        raise DataProblem(f"data.dataset: {error}") from None
    print(f"{data.dataset} is unavailable, using data.fallback={data.fallback}: {reason}", file=sys.stderr)
    try:
        return data.fallback, reason, load_dataset(data.fallback, cache_dir=data.cache_dir)
    except (ValueError, RuntimeError, OSError) as error:
        raise DataProblem(f"data.fallback: {error}") from None


if __name__ == "__main__":
    main()
