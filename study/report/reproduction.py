"""Seed 003's published numbers beside ours for the same setup, what its code computed, and how the data differ."""

from __future__ import annotations

import pandas as pd

from study.analysis import REPRODUCTION_SPREAD_STDS
from study.published import PublishedSetup
import study.report.formats as fmt
from study.report.document import Bullets, Section, Table


def reproduction_section(setup: PublishedSetup, reproduction: pd.DataFrame, manifest: dict) -> Section:
    """Published numbers beside ours for the same setup, what the published code computed, and how the data differ."""
    how = "; ".join(f"{evaluation} → our `{metric}`" for evaluation, metric in
                    dict.fromkeys(zip(reproduction["evaluation"], reproduction["metric"])))
    spread = f"mean ± {REPRODUCTION_SPREAD_STDS:g} std"
    blocks = [
        f"Seed 003 published test accuracies for {setup.description} ({setup.data}; {'; '.join(setup.protocol)}). "
        f"Each is set beside the run of ours that computes the same loss, as the mean ± std over our seeds (diverged "
        f"seeds left out) of the test metric that scores it the way seed 003 did ({how}), in percent. A published "
        f"number counts as within our seed-to-seed spread when it lies inside our {spread} (sample std over seeds); "
        "with fewer than two finished seeds there is no spread to judge by."]
    rows = []
    for row in reproduction.itertuples():
        ours = ("not run" if row.runs == 0 else "no finished seed" if row.seeds == 0 else
                f"{fmt.percent(row.mean_percent)} ± {fmt.percent(row.std_percent)} ({fmt.plural(row.seeds, 'seed')}"
                + (f", {row.at_chance} at chance" if row.at_chance else "") + ")")
        within = ("n/a (not run)" if row.runs == 0 else "n/a (fewer than 2 seeds)" if pd.isna(row.within_spread)
                  else "yes" if row.within_spread else "no")
        rows.append({"published as": row.published_label, "published (%)": fmt.percent(row.published_percent),
                     "our method": f"`{row.method}`", "scored by (ours)": f"{row.evaluation}: `{row.metric}`",
                     "ours (%, mean ± std)": ours, "ours − published (points)":
                     "n/a" if fmt.missing(row.difference_points) else f"{row.difference_points:+.2f}",
                     f"our spread ({spread})": "n/a" if fmt.missing(row.spread_low_percent) else
                     f"[{fmt.percent(row.spread_low_percent)}, {fmt.percent(row.spread_high_percent)}]",
                     "published within it": within})
    blocks.append(Table(pd.DataFrame(rows), f"Seed 003's published test accuracy against ours ({setup.name})"))

    judged = reproduction[reproduction["within_spread"].notna()]
    outside = judged[~judged["within_spread"].astype(bool)]
    sentence = (f"{len(judged) - len(outside)} of {len(judged)} published numbers that can be judged lie within our "
                f"spread" if len(judged) else "No published number can be judged against a spread of ours")
    if len(outside):
        sentence += "; outside it: " + ", ".join(
            f"{row.published_label} ({fmt.percent(row.published_percent)} published, {fmt.percent(row.mean_percent)} ours, "
            f"{row.difference_points:+.2f} points)" for row in outside.itertuples())
    sentences = [sentence + "."]
    collapsed = reproduction[reproduction["at_chance"] > 0]
    if len(collapsed):
        sentences.append("Some of our seeds ended at chance (test ROC AUC 0.5, a collapsed network) and widen our "
                         "spread: " + ", ".join(f"{row.published_label} {row.at_chance} of {row.runs}"
                                                 for row in collapsed.itertuples())
                         + "; a published number inside such a spread says little.")
    ranked = reproduction[reproduction["seeds"] > 0]
    if len(ranked) > 1:
        published_order = ranked.sort_values("published_percent", ascending=False, kind="stable")
        our_order = ranked.sort_values("mean_percent", ascending=False, kind="stable")
        same = list(published_order["method"]) == list(our_order["method"])
        sentences.append(f"Seed 003's order, best first: {', '.join(published_order['published_label'])}; ours: "
                         f"{', '.join(our_order['published_label'])}"
                         + (" (the same order)." if same else " (a different order)."))
    blocks.append(" ".join(sentences))

    computed = [f"**{result.label}** (published {result.accuracy_percent:.2f}): {result.computed}."
                for result in setup.results if result.computed]
    blocks += ["What seed 003's code really computed:", Bullets(computed)]

    splits = manifest.get("splits", {})
    counts = {name: entry.get("num_samples") for name, entry in splits.items()}
    total = sum(count for count in counts.values() if isinstance(count, int))
    classes = splits.get("train", {}).get("num_classes")
    ours = (f"{total:,} images: " + ", ".join(f"{count:,} {name}" for name, count in counts.items()
                                              if isinstance(count, int))
            + (f"; {classes} classes" if classes is not None else "")) if counts else "split sizes not recorded"
    source = manifest.get("source", "unknown")
    data = [f"Seed 003's numbers are on {setup.data}, with {setup.split}."]
    if manifest.get("fallback_reason"):
        reason = " ".join(str(manifest["fallback_reason"]).split()).rstrip(". ")  # one line, however it was wrapped
        data.append(f"This run used `{source}` ({ours}) because `{manifest.get('requested_source')}` could not be "
                    f"had: {reason}.")
    else:
        data.append(f"This run used `{source}` ({ours})" + (" as requested." if manifest.get("requested_source")
                                                             == source else "."))
    fractions = ", ".join(f"{f:g}" for f in manifest.get("fractions", []))
    if source in setup.same_data_sources:
        data.append(f"These are seed 003's images, but re-split by our prepare stage (train, val, test fractions "
                    f"{fractions or 'n/a'}) instead of {setup.split}, so the test images are not the same.")
    else:
        comparison = []
        train = counts.get("train")
        if setup.train_images and isinstance(train, int) and train:
            comparison.append(f"our training split has {train:,} images against its {setup.train_images:,}"
                              + (f" ({setup.train_images / train:.0f}× fewer)" if train < setup.train_images else ""))
        if total:
            comparison.append(f"{total:,} images and {classes if classes is not None else 'n/a'} classes in all "
                              f"against its {setup.images:,} and {setup.classes}")
        data.append("These are not the images seed 003 used, so the numbers are not expected to match exactly"
                    + (": " + "; ".join(comparison) if comparison else "") + ".")
    blocks += ["Data:", Bullets(data)]
    return Section("Reproduction", blocks)
