"""What an interval of method − Fixed AdaCos says against the margin, in words (study.benchmark.meta `judgement`)."""

JUDGEMENT_WORDS = {"better": "better by more than the margin", "worse": "worse by more than the margin",
                   "equivalent": "equivalent within the margin", "slightly better": "better, by less than the margin",
                   "slightly worse": "worse, by less than the margin",
                   "open": "not resolved: the interval covers zero and reaches beyond the margin",
                   "n/a": "not estimable (fewer than 3 sources)"}
