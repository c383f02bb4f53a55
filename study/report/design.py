"""The next study on the same data, in words: the trials, seeds and class splits study.analysis.design derives from
what this study measured, each with why."""

from __future__ import annotations

import study.report.formats as fmt


def next_design_sentence(facts: dict) -> str | None:
    """'A next study on these data, laid out from this one's numbers: 6 trials a split (...), 2 seeds a split (...)
    and 6 class splits ...'; None where no design was derived (one class split, or nothing searched)."""
    design = facts.get("next_design")
    if not design:
        return None
    trials, run = design["trials"], design["trials_run"]
    if design["search_still_gaining"]:
        searched = (f"at least the {run} trials a split this one ran (its search still gained more than the margin "
                    "with its last trial)")
    elif trials < run:
        searched = (f"{fmt.plural(trials, 'trial')} a split (a search of {trials} is expected to score within the "
                    f"margin of one of {run})")
    else:
        searched = f"{fmt.plural(trials, 'trial')} a split (fewer fall short of the search's score by the margin)"
    why = (f"its class split and search vary a split's mean {design['between_to_seed']:.1f} times as much as one seed "
           "does, and each split pays for a search" if design["between_to_seed"] > 0 else
           "beyond seed noise these splits and searches showed no spread of their own, so a seed costs less than a "
           "split")
    seeds = f"{design['seeds']} seeds a split ({why}: {design['seeds']} give the narrowest interval per training)"
    splits, proposed = design["splits"], design["proposed_splits"]
    this_one = f"this one: {fmt.plural(design['splits_run'], 'split')}, {design['trainings_run']:,}"
    if splits is None:
        resolved = "and no practical number of class splits resolves a difference of the size observed"
    elif proposed < splits:
        resolved = (f"and {proposed} class splits, all these classes make with disjoint test classes, short of the "
                    f"{splits} a difference of the size observed needs: {design['trainings']:,} trainings "
                    f"({this_one}); more classes, or another source, would settle it")
    else:
        resolved = (f"and {fmt.plural(splits, 'class split')} to resolve a difference of the size observed: "
                    f"{design['trainings']:,} trainings ({this_one})")
    return f"A next study on these data, from this one's point estimates: {searched}, {seeds} {resolved}."
