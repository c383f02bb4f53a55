"""The published same-setup comparisons of ArcFace against AdaCos (`study.published.PUBLISHED_ARCFACE_ADACOS`) as a CSV:
numbers and their sources, one row each, no computation. tests/test_published.py checks that the committed file holds
exactly those data.

    python benchmarks/published_arcface_adacos.py [--out benchmarks/results/published_arcface_adacos.csv]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from study.analysis.published_comparisons import published_table

OUT = Path(__file__).resolve().parent / "results" / "published_arcface_adacos.csv"


def write_published_arcface_adacos(path: str | Path = OUT) -> Path:
    """Write the published comparisons to `path` (rewritten, never appended) and return it."""
    path = Path(path)
    published_table().to_csv(path, index=False)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    print(write_published_arcface_adacos(parser.parse_args().out))


if __name__ == "__main__":
    main()
