"""AdaCos's fixed scale s_f = √2·ln(C−1), the one number the losses, the analysis and the reports all need.

It lives apart from study/losses.py so that the report stage, which only reads results, runs without importing
torch: that costs seconds at every start of a stage (tests/test_house.py checks it)."""

from __future__ import annotations

import math


def fixed_adacos_scale(num_classes: int) -> float:
    """AdaCos's fixed scale s_f = √2·ln(C−1) for C training classes."""
    if num_classes < 3:
        raise ValueError(
            f"AdaCos needs at least 3 training classes (s_f = √2·ln(C−1) is ≤ 0 for C={num_classes}); "
            "use more classes or another loss"
        )
    return math.sqrt(2.0) * math.log(num_classes - 1)
