"""GPU workers. The CUDA JIT cache: CUDA_CACHE_PATH in a writable dir of the pod (an emptyDir, so
it survives a container restart), CUDA_CACHE_MAXSIZE at the driver's largest, a user's own
setting kept, nothing on CPU workers; `make local` maps the path to the pod's local folder. And
the trainer's GPU refusal that needs no GPU (bfloat16 over NCCL) already at `make template`."""

from __future__ import annotations

import pytest
from chartkit import env_of, find

from tfmw.chart import render as chart_render
from tfmw.chart.helmkit import ToolError
from tfmw.localrun.podspec import build_pods, find_workload

GPU = ("workers.gpus=1", "workers.resources.limits.memory=4Gi", "workers.resources.requests.memory=2Gi")
FOUR_GIB = str(4 * 1024**3)


def worker(objects) -> dict:
    return find(objects, "StatefulSet")[0]["spec"]["template"]["spec"]


def cuda_env(objects) -> dict:
    env = env_of(worker(objects)["containers"][0])
    return {name: item.get("value") for name, item in env.items() if name.startswith("CUDA_CACHE")}


def writable_mount(spec: dict, path: str) -> dict:
    """The volume mounted at the deepest mountPath that holds `path`."""
    mounts = [m for m in spec["containers"][0]["volumeMounts"] if path.startswith(m["mountPath"].rstrip("/") + "/")]
    mount = max(mounts, key=lambda m: len(m["mountPath"]))
    return next(v for v in spec["volumes"] if v["name"] == mount["name"])


def test_gpu_workers_keep_the_jit_cache_in_the_pods_writable_home(helm, render):
    objects = render(helm, sets=GPU)
    assert cuda_env(objects) == {"CUDA_CACHE_PATH": "/home/tfmw/.nv/ComputeCache", "CUDA_CACHE_MAXSIZE": FOUR_GIB}
    volume = writable_mount(worker(objects), "/home/tfmw/.nv/ComputeCache")
    assert "emptyDir" in volume and "medium" not in volume["emptyDir"]  # per pod, on disk, survives a restart


@pytest.mark.parametrize("limit,size", [("3Gi", "1610612736"), ("24Gi", FOUR_GIB), ("1e9", "500000000")])
def test_the_cache_fits_half_of_a_writable_dirs_size_limit(helm, render, limit, size):
    # A cache that outgrew its emptyDir's sizeLimit would get the pod evicted (values/dev.yaml: 3Gi).
    objects = render(helm, sets=(*GPU, f"writableDirsSizeLimit={limit}"))
    assert cuda_env(objects)["CUDA_CACHE_MAXSIZE"] == size


def test_without_a_writable_home_the_cache_goes_to_the_first_writable_dir(helm, render):
    objects = render(helm, sets=(*GPU, "writableDirs[0]=/scratch", "writableDirs[1]=/tmp"))
    assert cuda_env(objects)["CUDA_CACHE_PATH"] == "/scratch/.nv/ComputeCache"
    assert "emptyDir" in writable_mount(worker(objects), "/scratch/.nv/ComputeCache")


def test_cpu_workers_get_no_cuda_cache_env(helm, render):
    assert cuda_env(render(helm)) == {}


def test_a_users_own_cache_setting_is_kept_and_not_doubled(helm, render):
    objects = render(
        helm,
        sets=(*GPU, "workers.extraEnv[0].name=CUDA_CACHE_PATH", "workers.extraEnv[0].value=/data/cuda-cache"),
    )
    names = [e["name"] for e in worker(objects)["containers"][0]["env"]]
    assert names.count("CUDA_CACHE_PATH") == 1
    assert cuda_env(objects) == {"CUDA_CACHE_PATH": "/data/cuda-cache", "CUDA_CACHE_MAXSIZE": FOUR_GIB}


def test_make_local_puts_the_cache_in_each_pods_local_home(tmp_path):
    objects = chart_render.render("local", list(GPU), release="t", namespace="ns")
    pods = build_pods(find_workload(objects, "ns"), tmp_path)
    for pod in pods:
        assert pod.env["CUDA_CACHE_PATH"] == pod.env["HOME"] + "/.nv/ComputeCache"
        assert str(tmp_path) in pod.env["HOME"]
    assert len({pod.env["CUDA_CACHE_PATH"] for pod in pods}) == len(pods)  # per pod, as in the cluster


def test_make_template_refuses_bfloat16_over_nccl_before_anything_is_applied():
    with pytest.raises(ToolError) as err:
        chart_render.render(
            "local", ["training.config.collective=nccl", "training.config.allReduceDtype=bfloat16"], release="t"
        )
    assert str(err.value).startswith(
        "training.config.allReduceDtype: bfloat16 with collective: nccl (set in the config): TensorFlow's NCCL "
        "all-reduce has no bfloat16; set allReduceDtype: float16 (NCCL) or collective: ring"
    )
