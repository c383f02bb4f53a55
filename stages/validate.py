"""DVC stage `validate`, first of all: params.yaml checked whole, before any stage deletes an output to rerun; says
what the study will cost, in trainings and, from a short calibration on the device (study/price.py), in time, and
warns of what it does not refuse (study/cautions.py). The price and the warnings go to the terminal only: the stage's
output stays the same bytes for the same params."""

import sys

from stages import begin
from study.config import ConfigError
from study.dvc_changes import after_refusal
from study.price import process_age, say_before_training
from study.results import write_bytes
from study.validation import VALIDATED, VALIDATED_TEXT, link_source, validate_study


def main() -> None:
    begin()
    started = process_age()  # this stage's start, its imports included: what every stage and packed worker pays
    try:
        params, cost = validate_study()
    except ConfigError as error:
        problems = "".join(f"  {line}\n" for line in str(error).splitlines())
        sys.exit(f"params.yaml has problems:\n{problems}{after_refusal()}")  # and what DVC changed before
    print(f"params.yaml passed; the study makes {cost.said()}", flush=True)
    say_before_training(params, started)
    link_source(params.data)
    write_bytes(VALIDATED_TEXT.encode(), VALIDATED)


if __name__ == "__main__":
    main()
