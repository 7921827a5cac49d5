"""The built-in trainer's config schema, as values.schema.json holds it for `training.config`.

The trainer's schema (entrypoint/training/schema.py) is the one source; values.schema.json
carries a copy under `definitions.trainingConfig`, applied to `training.config` when
`training.command` is the built-in trainer, so a plain `helm install` refuses a typo or a wrong
type too. The copy is derived, never edited by hand: a test compares it with this module's.

    python -m tfmw.chart.training_schema --write   # refresh the copy in values.schema.json
    python -m tfmw.chart.training_schema --check   # exit 1 if it is stale
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

from entrypoint.training.schema import SCHEMA
from tfmw import REPO

VALUES_SCHEMA = REPO / "charts" / "tf-multiworker" / "values.schema.json"
BUILTIN_TRAINER = ["python", "-m", "entrypoint.training"]


def derived() -> dict:
    """The trainer's schema without its own $schema and title (values.schema.json is draft-07,
    which every keyword the trainer's schema uses also is)."""
    schema = copy.deepcopy(SCHEMA)
    schema.pop("$schema", None)
    schema.pop("title", None)
    schema["description"] = (
        "The built-in trainer's config (entrypoint/training/schema.py; derived by tfmw.chart.training_schema)."
    )
    return schema


def applied(values_schema: dict) -> dict:
    """values.schema.json with the derived copy in place and applied to training.config."""
    out = copy.deepcopy(values_schema)
    out["definitions"]["trainingConfig"] = derived()
    training = out["properties"]["training"]
    training["if"] = {"properties": {"command": {"const": BUILTIN_TRAINER}}}
    training["then"] = {"properties": {"config": {"$ref": "#/definitions/trainingConfig"}}}
    return out


def text_of(schema: dict) -> str:
    return json.dumps(schema, indent=2) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="refresh values.schema.json")
    parser.add_argument("--check", action="store_true", help="exit 1 if values.schema.json is stale")
    parser.add_argument("--schema", default=str(VALUES_SCHEMA), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    path = Path(args.schema)
    current = path.read_text()
    wanted = text_of(applied(json.loads(current)))
    if args.write:
        path.write_text(wanted)
        return 0
    if current != wanted:
        print(
            f"{path}: training.config's schema is stale: python -m tfmw.chart.training_schema --write",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
