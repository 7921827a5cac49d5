"""Load an exported model in a fresh process and measure its accuracy on held-out files.

    python -m entrypoint.training.evaluate MODEL_DIR DATA_PATH [--format npz|tfrecord] [--min-accuracy 0.9]

Prints `tfmw eval accuracy=<f> examples=<n> model=<path>`; exits 1 if below --min-accuracy.
"""

from __future__ import annotations

import argparse
import os
import sys

from .. import loglines

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")


BATCH = 256  # examples per prediction batch


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m entrypoint.training.evaluate")
    parser.add_argument("model")
    parser.add_argument("data", help="directory or glob of held-out files")
    parser.add_argument("--format", choices=["npz", "tfrecord"], default="npz")
    parser.add_argument("--min-accuracy", type=float, default=None)
    args = parser.parse_args(argv)
    if not os.path.isdir(args.model):
        print(f"evaluate: model {args.model} is not a SavedModel directory", file=sys.stderr)
        return 2

    import numpy as np
    import tf_keras as keras

    from .config import ConfigError
    from .data import build_input

    # batchSizePerReplica: the batch read below, checked against the examples' size by build_input.
    config = {
        "data": {
            "source": "files",
            "path": os.path.abspath(args.data),
            "format": args.format,
            "numClasses": 2,
            "shuffleBuffer": 0,
        },
        "seed": 0,
        "batchSizePerReplica": BATCH,
        "gradientAccumulationSteps": 1,  # one batch at a time
    }
    try:
        spec = build_input(config, "/", 1, 0)
    except ConfigError as err:
        print(str(err), file=sys.stderr)
        return 2
    ds = spec.dataset_fn(BATCH, 0).take(-(-spec.examples_per_worker // BATCH))
    model = keras.models.load_model(args.model, compile=False)
    correct = total = 0
    # The pipeline repeats; count each held-out example exactly once.
    for x, y in ds.unbatch().take(spec.examples_per_worker).batch(BATCH):
        predicted = np.argmax(model.predict(x, verbose=0), axis=1)
        correct += int(np.sum(predicted == y.numpy()))
        total += int(y.shape[0])
    accuracy = correct / max(total, 1)
    print(loglines.line(loglines.EVAL, accuracy=f"{accuracy:.4f}", examples=total, model=args.model), flush=True)
    if args.min_accuracy is not None and accuracy < args.min_accuracy:
        print(f"evaluate: accuracy {accuracy:.4f} is below --min-accuracy {args.min_accuracy}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
