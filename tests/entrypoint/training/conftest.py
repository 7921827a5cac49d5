"""In-process TensorFlow in these tests runs quietly on one CPU thread: set before any test
module of this folder imports TensorFlow (pytest imports this conftest first)."""

import os

for key, value in {"OMP_NUM_THREADS": "1", "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": ""}.items():
    os.environ.setdefault(key, value)
