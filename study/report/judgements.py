"""What an interval of method − Fixed AdaCos says against the margin, in words (study.benchmark.meta `judgement`)."""

JUDGEMENT_WORDS = {"better": "better by more than the margin", "worse": "worse by more than the margin",
                   "equivalent": "equivalent within the margin",
                   # the interval excludes zero but not the margin: the difference may lie on either side of it
                   "slightly better": "better (the interval excludes zero), not shown beyond the margin",
                   "slightly worse": "worse (the interval excludes zero), not shown beyond the margin",
                   "open": "not resolved: the interval covers zero and reaches beyond the margin",
                   "n/a": "not estimable (fewer than 3 sources)"}
