"""TensorFlow's pools sized to the container (entrypoint/training/threads.py): the CFS quota read
from cgroup v2 and v1 trees laid out as the kernel and a container runtime lay them out, the
smallest along the cgroup and its ancestors; a user's own TF_NUM_* variables kept."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from entrypoint.training.threads import cpu_quota, plan


def _write(path, text):
    path.mkdir(parents=True, exist_ok=True)
    for name, value in text.items():
        (path / name).write_text(value + "\n")


def test_v2_quota_is_the_smallest_along_the_cgroup_and_its_parents(tmp_path):
    _write(tmp_path, {})  # the root has no cpu.max
    _write(tmp_path / "kubepods" / "pod1", {"cpu.max": "300000 100000"})  # the pod: 3 CPUs
    _write(tmp_path / "kubepods" / "pod1" / "c1", {"cpu.max": "150000 100000"})  # the container: 1.5
    assert cpu_quota("0::/kubepods/pod1/c1\n", tmp_path) == 1.5
    _write(tmp_path / "kubepods" / "pod1" / "c1", {"cpu.max": "max 100000"})
    assert cpu_quota("0::/kubepods/pod1/c1\n", tmp_path) == 3.0


def test_v2_inside_a_cgroup_namespace_reads_the_mount_itself(tmp_path):
    _write(tmp_path, {"cpu.max": "100000 100000"})
    assert cpu_quota("0::/\n", tmp_path) == 1.0


def test_v1_container_mount_is_its_own_cgroup(tmp_path):
    """runc mounts the container's own cpu cgroup at /sys/fs/cgroup/cpu,cpuacct, while
    /proc/self/cgroup names the host's path, which is not below the mount."""
    _write(tmp_path / "cpu,cpuacct", {"cpu.cfs_quota_us": "50000", "cpu.cfs_period_us": "100000"})
    text = "12:memory:/kubepods/burstable/pod1/c1\n4:cpu,cpuacct:/kubepods/burstable/pod1/c1\n0::/\n"
    assert cpu_quota(text, tmp_path) == 0.5


def test_no_quota_anywhere_is_none(tmp_path):
    _write(tmp_path / "cpu,cpuacct" / "user", {"cpu.cfs_quota_us": "-1", "cpu.cfs_period_us": "100000"})
    _write(tmp_path / "cpu,cpuacct", {"cpu.cfs_quota_us": "-1", "cpu.cfs_period_us": "100000"})
    assert cpu_quota("4:cpu,cpuacct:/user\n0::/user\n", tmp_path) is None
    assert cpu_quota("", tmp_path) is None


@pytest.mark.parametrize(
    ("quota", "affinity", "usable"),
    [(None, 96, 96), (8.0, 96, 8), (1.5, 96, 2), (0.5, 96, 1), (16.0, 4, 4), (2.0, 2, 2)],
)
def test_every_pool_gets_the_cpus_the_quota_allows_rounded_up(quota, affinity, usable):
    chosen = plan({}, quota, affinity)
    assert (chosen.intra_op, chosen.inter_op, chosen.data) == (usable, max(2, usable), usable)
    assert (f"cpu quota {quota:g}" if quota else f"{affinity} schedulable cores") in plan({}, quota, affinity).why


def test_a_users_own_tensorflow_variables_are_kept():
    chosen = plan({"TF_NUM_INTRAOP_THREADS": "6"}, 2.0, 96)
    assert (chosen.intra_op, chosen.inter_op, chosen.data) == (None, 2, 2)
    assert "TF_NUM_INTRAOP_THREADS set by the user" in chosen.why


@pytest.mark.slow
@pytest.mark.beside  # nothing timed: it runs beside the cluster tests
def test_tensorflow_runs_with_the_sized_pools(tmp_path):
    """In a real TensorFlow: the sizes reach its context, and tf.data pipelines get the pool."""
    script = (
        "import os; os.environ['TF_CPP_MIN_LOG_LEVEL'] = '2'\n"
        "from entrypoint.training import threads, trainer\n"
        "import tensorflow as tf\n"
        "trainer.size_thread_pools(threads.ThreadPlan(3, 2, 3, 'test'))\n"
        "print('SIZES', tf.config.threading.get_intra_op_parallelism_threads(),"
        " tf.config.threading.get_inter_op_parallelism_threads())\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=os.getcwd())
    assert "SIZES 3 2" in proc.stdout, proc.stdout + proc.stderr
    assert "tfmw threads intra_op=3 inter_op=2 data=3 why=test" in proc.stdout
