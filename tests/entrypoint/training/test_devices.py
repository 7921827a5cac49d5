"""entrypoint.training.devices: the GPU policies (collective x dtype, gpuMemory, the CUDA JIT
cache), pure, with a stand-in for TensorFlow's tf.config; the trainer's use of them in-process
with real TensorFlow on CPU is in test_tf_pieces.py."""

from __future__ import annotations

import ctypes
from types import SimpleNamespace

import pytest
from workers import run_trainer

from entrypoint import loglines
from entrypoint.training import devices
from entrypoint.training.config import ConfigError, check

GIB = 1024**3


# -- allReduceDtype x collective ------------------------------------------------------------


def test_nccl_with_bfloat16_is_refused_by_the_config_check_naming_both_keys_and_the_fix():
    with pytest.raises(ConfigError) as err:
        check({"collective": "nccl", "allReduceDtype": "bfloat16"})
    assert str(err.value) == (
        "training config: allReduceDtype: bfloat16 with collective: nccl (set in the config): TensorFlow's NCCL "
        "all-reduce has no bfloat16; set allReduceDtype: float16 (NCCL) or collective: ring"
    )


@pytest.mark.parametrize(
    ("collective", "dtype"), [("nccl", "float16"), ("nccl", "float32"), ("ring", "bfloat16"), ("auto", "bfloat16")]
)
def test_the_config_check_lets_every_other_pair_through(collective, dtype):
    assert check({"collective": collective, "allReduceDtype": dtype})["allReduceDtype"] == dtype


def test_the_trainer_refuses_nccl_with_bfloat16_in_one_line_exit_2_before_tensorflow(tmp_path):
    path = tmp_path / "training.yaml"
    path.write_text("collective: nccl\nallReduceDtype: bfloat16\n")
    result = run_trainer(["--config", str(path)], tmp_path=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [str(devices.refuse_bfloat16_over_nccl("set in the config"))]


def test_auto_picking_nccl_for_visible_gpus_refuses_bfloat16():
    with pytest.raises(ConfigError) as err:
        devices.choose_collective("auto", "bfloat16", gpus=2)
    assert "(collective: auto picks NCCL: 2 GPU(s) visible)" in str(err.value)
    assert "set allReduceDtype: float16 (NCCL) or collective: ring" in str(err.value)


@pytest.mark.parametrize(
    ("choice", "dtype", "gpus", "chosen"),
    [
        ("auto", "bfloat16", 0, "ring"),  # CPU: RING takes bfloat16
        ("auto", "float16", 1, "nccl"),
        ("auto", "float32", 1, "nccl"),
        ("ring", "bfloat16", 4, "ring"),
        ("nccl", "float16", 1, "nccl"),
    ],
)
def test_choose_collective(choice, dtype, gpus, chosen):
    assert devices.choose_collective(choice, dtype, gpus) == chosen


def test_nccl_without_gpus_is_still_refused():
    with pytest.raises(ConfigError, match="collective: nccl needs GPUs but none are visible; use auto or ring"):
        devices.choose_collective("nccl", "float32", 0)


# -- gpuMemory ------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["0", "1.5", "-0.5", "half", "true", "'0.5'"])
def test_a_bad_gpu_memory_is_refused_naming_the_key_and_the_choices(value, tmp_path):
    path = tmp_path / "training.yaml"
    path.write_text(f"gpuMemory: {value}\n")
    with pytest.raises(ConfigError) as err:
        from entrypoint.training.config import resolve

        resolve(str(path), [])
    assert str(err.value).startswith("training config: gpuMemory: ")
    assert str(err.value).endswith("must be all, growth, or a fraction of each GPU's memory > 0 and <= 1")


@pytest.mark.parametrize("value", ["all", "growth", 0.45, 1])
def test_gpu_memory_accepts_all_growth_and_a_fraction(value):
    assert check({"gpuMemory": value})["gpuMemory"] == value


def test_gpu_memory_defaults_to_tensorflows_whole_gpu():
    assert check({})["gpuMemory"] == "all"


def test_a_fraction_is_that_share_of_each_total_in_mib():
    assert devices.memory_limits_mib(0.45, [16 * GIB, 80 * GIB]) == [7372, 36864]
    assert devices.memory_limits_mib("growth", [None]) is None
    assert devices.memory_limits_mib("all", []) is None


def test_a_fraction_of_an_unknown_total_is_refused_in_one_line():
    with pytest.raises(ConfigError) as err:
        devices.memory_limits_mib(0.45, [16 * GIB, None])
    assert str(err.value) == (
        "training config: gpuMemory: 0.45 needs GPU 1's total memory, which could not be read "
        "(libcuda's cuDeviceTotalMem); use gpuMemory: growth or all"
    )


class FakeConfig:
    """The part of tf.config that devices.apply touches, recording the calls."""

    def __init__(self, gpus: int):
        self.gpus = [SimpleNamespace(name=f"/physical_device:GPU:{i}") for i in range(gpus)]
        self.calls: list = []
        self.experimental = SimpleNamespace(
            set_memory_growth=lambda gpu, on: self.calls.append(("growth", gpu.name, on)),
            get_device_details=lambda gpu: {"device_name": "NVIDIA L4"},
        )
        self.LogicalDeviceConfiguration = lambda memory_limit: memory_limit

    def list_physical_devices(self, kind):
        assert kind == "GPU"
        return self.gpus

    def set_logical_device_configuration(self, gpu, logical):
        self.calls.append(("limit", gpu.name, logical))


def fake_tf(gpus: int):
    return SimpleNamespace(config=FakeConfig(gpus))


def config_with(memory):
    return check({"gpuMemory": memory})


def test_growth_is_set_on_every_visible_gpu():
    tf = fake_tf(2)
    fields = devices.apply(tf, config_with("growth"), {"CUDA_CACHE_PATH": "/c"}, total_of=lambda i: None)
    assert tf.config.calls == [("growth", "/physical_device:GPU:0", True), ("growth", "/physical_device:GPU:1", True)]
    assert fields == {"visible": 2, "names": "NVIDIA L4,NVIDIA L4", "memory": "growth", "cache": "/c"}


def test_a_fraction_sets_one_logical_device_per_gpu_with_its_limit():
    tf = fake_tf(2)
    fields = devices.apply(tf, config_with(0.5), {"CUDA_CACHE_PATH": "/c"}, total_of=lambda i: (i + 1) * 8 * GIB)
    assert tf.config.calls == [("limit", "/physical_device:GPU:0", [4096]), ("limit", "/physical_device:GPU:1", [8192])]
    assert fields["memory"] == "0.5(limit_mib=4096,8192)"


def test_all_changes_nothing_and_no_gpu_changes_nothing():
    tf = fake_tf(1)
    assert devices.apply(tf, config_with("all"), {}, total_of=lambda i: None)["memory"] == "all"
    tf_cpu = fake_tf(0)
    fields = devices.apply(tf_cpu, config_with(0.5), {}, total_of=lambda i: None)
    assert tf.config.calls == [] and tf_cpu.config.calls == []
    assert fields == {"visible": 0, "names": None, "memory": "0.5", "cache": None}


def test_a_fraction_with_an_unknown_total_is_refused_before_any_setting():
    tf = fake_tf(1)
    with pytest.raises(ConfigError, match="gpuMemory: 0.45 needs GPU 0's total memory"):
        devices.apply(tf, config_with(0.45), {}, total_of=lambda i: None)
    assert tf.config.calls == []


def test_device_total_reads_libcuda_and_is_none_without_it():
    def missing(name):
        raise OSError(f"{name}: cannot open shared object file")

    assert devices.device_total_bytes(0, load=missing) is None

    class FakeCuda:
        def cuInit(self, flags):
            return 0

        def cuDeviceGetCount(self, count):
            ctypes.cast(count, ctypes.POINTER(ctypes.c_int)).contents.value = 1
            return 0

        def cuDeviceGet(self, device, index):
            return 0

        def cuDeviceTotalMem_v2(self, total, device):
            ctypes.cast(total, ctypes.POINTER(ctypes.c_size_t)).contents.value = 24 * GIB
            return 0

    assert devices.device_total_bytes(0, load=lambda name: FakeCuda()) == 24 * GIB
    assert devices.device_total_bytes(1, load=lambda name: FakeCuda()) is None  # only one visible


# -- the CUDA JIT cache and the lines ---------------------------------------------------------


def test_the_first_compile_is_said_when_gpus_are_visible_and_the_cache_is_empty(tmp_path):
    cache = tmp_path / "cuda"
    environ = {"CUDA_CACHE_PATH": str(cache)}
    assert devices.first_compile_notice(1, environ) == (
        f"first CUDA kernels may be JIT-compiled: can take minutes; cache at {cache} (empty)"
    )
    cache.mkdir()
    assert devices.first_compile_notice(1, environ) is not None
    (cache / "index").write_text("x")
    assert devices.first_compile_notice(1, environ) is None  # kernels cached by an earlier start
    assert devices.first_compile_notice(0, {"CUDA_CACHE_PATH": str(tmp_path / "none")}) is None  # CPU
    assert devices.first_compile_notice(1, {"CUDA_CACHE_PATH": str(tmp_path / "x"), "CUDA_CACHE_DISABLE": "1"}) is None


def test_the_cache_defaults_to_the_drivers_place_under_home():
    assert devices.cuda_cache_dir({"HOME": "/home/tfmw"}) == "/home/tfmw/.nv/ComputeCache"
    assert devices.cuda_cache_dir({"HOME": "/h", "CUDA_CACHE_PATH": "/w/cuda"}) == "/w/cuda"


def test_set_up_logs_one_gpus_line_and_the_cache_warning(tmp_path):
    lines: list[str] = []
    environ = {"CUDA_CACHE_PATH": str(tmp_path / "cuda")}
    devices.set_up(fake_tf(1), config_with("growth"), environ, lines.append)
    assert lines[0] == f'tfmw gpus visible=1 names="NVIDIA L4" memory=growth cache={tmp_path / "cuda"}'
    assert loglines.parse(lines[0]).fields["memory"] == "growth"
    assert loglines.parse(lines[1]).kind == loglines.WARNING
    assert lines[1].startswith("tfmw warning first CUDA kernels may be JIT-compiled: can take minutes; cache at ")
    cpu: list[str] = []
    devices.set_up(fake_tf(0), config_with("all"), environ, cpu.append)
    assert cpu == ["tfmw gpus visible=0 memory=all"]
