"""entrypoint.training.devices against the real TensorFlow on CPU (slow: imports TF): the calls it
makes exist under the names it uses, and with no GPU visible nothing is set and the line says so.
What only a GPU shows (growth, a memory limit, NCCL) is `make gpu-check` (docs/image.md)."""

from __future__ import annotations

import pytest
import tensorflow as tf

from entrypoint.training import devices
from entrypoint.training.config import check

pytestmark = pytest.mark.slow


def test_the_tf_calls_devices_makes_exist_in_this_tensorflow():
    for call in (
        tf.config.list_physical_devices,
        tf.config.experimental.set_memory_growth,
        tf.config.experimental.get_device_details,
        tf.config.set_logical_device_configuration,
    ):
        assert callable(call)
    assert tf.config.LogicalDeviceConfiguration(memory_limit=1024).memory_limit == 1024


@pytest.mark.parametrize("memory", ["growth", 0.45])
def test_on_cpu_nothing_is_set_and_the_line_says_no_gpu(memory, tmp_path):
    lines: list[str] = []
    fields = devices.set_up(tf, check({"gpuMemory": memory}), {"CUDA_CACHE_PATH": str(tmp_path)}, lines.append)
    assert fields["visible"] == 0
    assert lines == [f"tfmw gpus visible=0 memory={memory}"]  # no JIT warning without a GPU
    assert not tf.config.list_logical_devices("GPU")
