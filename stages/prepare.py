"""DVC stage `prepare`: load the dataset named in params, split it by the protocol, write it with a manifest."""

from study.config import load_params
from study.data import load_dataset, save_splits, split_dataset
from study.results import PREPARED_DIR


def main() -> None:
    data = load_params().data
    image_set = load_dataset(data.dataset, cache_dir=data.cache_dir)
    splits = split_dataset(image_set, data.protocol, data.fractions, seed=data.seed)
    save_splits(splits, PREPARED_DIR, source=data.dataset, protocol=data.protocol, seed=data.seed,
                fractions=data.fractions)
    for name, split in splits.items():
        print(f"{name}: {len(split)} images, {split.num_classes} classes")


if __name__ == "__main__":
    main()
