"""Write scikit-learn's bundled handwritten digits (8x8, 10 classes, offline) as training shards.

    python -m entrypoint.training.prepare_digits OUT_DIR [--shards 4] [--format npz|tfrecord]

Writes OUT_DIR/train/train-0000i-of-0000N.<ext> and OUT_DIR/test/test-00000-of-00001.<ext>
(a held-out, stratified 20% split with a fixed seed). Pixels are scaled to [0, 1]; each
example has shape (8, 8). Point the trainer at it with
`data: {source: files, path: OUT_DIR/train, format: <fmt>, numClasses: 10}`.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

from .. import loglines


def split_digits(test_fraction: float = 0.2, seed: int = 0):
    """(x_train, y_train, x_test, y_test), stratified per class, deterministic."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    rng = np.random.default_rng(seed)
    test_idx = []
    for label in np.unique(y):
        members = rng.permutation(np.flatnonzero(y == label))
        test_idx.extend(members[: int(round(len(members) * test_fraction))])
    test_mask = np.zeros(len(y), dtype=bool)
    test_mask[test_idx] = True
    order = rng.permutation(np.flatnonzero(~test_mask))
    return x[order], y[order], x[test_mask], y[test_mask]


def _write_npz(path: str, x, y) -> None:
    tmp = path + ".tmp.npz"
    np.savez(tmp, x=x, y=y)
    os.replace(tmp, path)


def _write_tfrecord(path: str, x, y) -> None:
    import tensorflow as tf

    tmp = path + ".tmp"
    shape = list(x.shape[1:])
    with tf.io.TFRecordWriter(tmp) as writer:
        for features, label in zip(x, y, strict=True):
            example = tf.train.Example(
                features=tf.train.Features(
                    feature={
                        "x": tf.train.Feature(float_list=tf.train.FloatList(value=features.reshape(-1).tolist())),
                        "y": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)])),
                        "shape": tf.train.Feature(int64_list=tf.train.Int64List(value=shape)),
                    }
                )
            )
            writer.write(example.SerializeToString())
    os.replace(tmp, path)


def write_shards(out_dir: str, name: str, x, y, shards: int, fmt: str) -> list[str]:
    os.makedirs(out_dir, exist_ok=True)
    writer = _write_npz if fmt == "npz" else _write_tfrecord
    paths = []
    for i in range(shards):
        path = os.path.join(out_dir, f"{name}-{i:05d}-of-{shards:05d}.{fmt}")
        writer(path, x[i::shards], y[i::shards])
        paths.append(path)
    return paths


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m entrypoint.training.prepare_digits", description=__doc__.split("\n")[0]
    )
    parser.add_argument("out_dir")
    parser.add_argument("--shards", type=int, default=4, help="number of training shards (default 4)")
    parser.add_argument("--format", choices=["npz", "tfrecord"], default="npz")
    parser.add_argument("--test-fraction", type=float, default=0.2)
    args = parser.parse_args(argv)
    if args.shards < 1:
        print(f"prepare_digits: --shards {args.shards}: must be at least 1", file=sys.stderr)
        return 2
    if not 0 < args.test_fraction < 1:
        print(f"prepare_digits: --test-fraction {args.test_fraction}: must be between 0 and 1", file=sys.stderr)
        return 2
    x_train, y_train, x_test, y_test = split_digits(args.test_fraction)
    write_shards(os.path.join(args.out_dir, "train"), "train", x_train, y_train, args.shards, args.format)
    write_shards(os.path.join(args.out_dir, "test"), "test", x_test, y_test, 1, args.format)
    print(
        loglines.line(
            "digits", train=len(y_train), test=len(y_test), shards=args.shards, format=args.format, out=args.out_dir
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
