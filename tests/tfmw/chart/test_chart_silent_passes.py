"""Values that used to render and then broke the run without a word are refused by `helm template`,
one line per problem naming the key, why, and the fix; the near misses still render.

- GPU workers without their memory and CPU (a BestEffort pod; /dev/shm unchecked),
- training.args the built-in trainer has no flag for (every worker exits 2 after the image pull),
- a mount over the image's Python or another path the launcher needs,
- environment variables that choose the GPUs a container sees.
"""

from __future__ import annotations

import argparse
import json
import re

import chartkit
import pytest

from entrypoint.training import __main__ as trainer_main

DEV = chartkit.overlay_path("dev")  # 2 workers x 1 GPU
PROD = chartkit.overlay_path("prod")  # 4 workers x 4 GPUs, /dev/shm 32Gi; it requires a digest
PROD_DIGEST = "image.digest=sha256:" + "a" * 64
LOCAL = chartkit.overlay_path("local")  # CPU workers
TEMPLATES = chartkit.CHART / "templates"


def chart_problems(error: str) -> list[str]:
    """validateValues' problems, one a line (the first rides on helm's `Error: ...: ` line)."""
    lines = [line for line in error.strip().splitlines() if line.strip() and not line.startswith("Use --debug")]
    prefix = "Error: execution error at (tf-multiworker/templates/statefulset.yaml:1:4): "
    assert lines[0].startswith(prefix), error
    return [lines[0][len(prefix) :], *lines[1:]]


def mount(path: str) -> tuple[str, ...]:
    return (
        "workers.extraVolumes[0].name=data",
        "workers.extraVolumes[0].emptyDir.medium=",
        "workers.extraVolumeMounts[0].name=data",
        f"workers.extraVolumeMounts[0].mountPath={path}",
    )


def env(name: str, value: str = "all", where: str = "workers.extraEnv[0]") -> tuple[str, ...]:
    return (f"{where}.name={name}", f"{where}.value={value}")


def sidecar(kind: str) -> tuple[str, ...]:
    return (f"workers.{kind}[0].name=helper", f"workers.{kind}[0].image=busybox")


GPU_RESOURCES = '(docs/chart.md, "GPUs and nodes")'
TRAINER = "the built-in trainer (python -m entrypoint.training)"
FLAGS = "its flags are --config PATH, --set KEY=VALUE"
MOUNT_FIX = "; choose a directory of its own (e.g. /shared, /data)"
UNSAFE = "or set security.allowUnsafe=true to do this on purpose (docs/security.md)"

# case -> (overlay, --set items, the problems' starts (in order), text every problem carries)
REFUSED = {
    # GPU workers' resources
    "gpu-resources-null": (
        DEV,
        ("workers.resources=null",),
        ["workers.resources is empty with workers.gpus=1: the pod would get only the GPU limit (BestEffort"],
        "set requests.cpu, requests.memory (at least 2Gi) and limits.memory (at least 2Gi + "
        "workers.shm.sizeLimit=4Gi) " + GPU_RESOURCES,
    ),
    "gpu-resources-null-prod": (
        PROD,
        (PROD_DIGEST, "workers.resources=null"),
        ["workers.resources is empty with workers.gpus=4: "],
        "limits.memory (at least 2Gi + workers.shm.sizeLimit=32Gi)",
    ),
    "gpu-memory-1Mi": (
        DEV,
        ("workers.resources.limits.memory=1Mi", "workers.resources.requests.memory=1Mi", "workers.shm.enabled=false"),
        [
            "workers.resources.limits.memory=1Mi with workers.gpus=1 is below 2Gi: ",
            "workers.resources.requests.memory=1Mi with workers.gpus=1 is below 2Gi, ",
        ],
        GPU_RESOURCES,
    ),
    "gpu-memory-limit-under-shm-plus-floor": (
        PROD,
        (PROD_DIGEST, "workers.resources.limits.memory=33Gi", "workers.resources.requests.memory=33Gi"),
        ["workers.resources.limits.memory=33Gi with workers.gpus=4 is below 2Gi + workers.shm.sizeLimit=32Gi: "],
        "/dev/shm, which counts against the limit; raise the limit",
    ),
    "gpu-memory-limit-unset": (
        DEV,
        ("workers.resources.limits.memory=null",),
        ["workers.resources.limits.memory is not set with workers.gpus=1: "],
        "set it to at least 2Gi + workers.shm.sizeLimit=4Gi",
    ),
    "gpu-memory-unset": (
        DEV,
        ("workers.resources.limits.memory=null", "workers.resources.requests.memory=null"),
        [
            "workers.resources.limits.memory is not set with workers.gpus=1: ",
            "workers.resources.requests.memory is not set with workers.gpus=1: ",
        ],
        GPU_RESOURCES,
    ),
    "gpu-cpu-request-unset": (
        DEV,
        ("workers.resources.requests.cpu=null", "workers.resources.limits.cpu=null"),
        ["workers.resources.requests.cpu is not set with workers.gpus=1: a GPU worker needs a CPU request"],
        GPU_RESOURCES,
    ),
    # training.args against the built-in trainer's flags
    "args-unknown-flag": (
        DEV,
        ("training.args={--epochs,5}",),
        [f"training.args[0]=--epochs: {TRAINER} has no flag --epochs, so every worker would exit 2 on it; {FLAGS}"],
        "set training.command",
    ),
    "args-unknown-flag-prod": (
        PROD,
        (PROD_DIGEST, "training.args={--steps=5}"),
        [f"training.args[0]=--steps=5: {TRAINER} has no flag --steps"],
        "e.g. --set steps=100",
    ),
    "args-abbreviated": (DEV, ("training.args={--conf,c.yaml}",), ["training.args[0]=--conf: "], "write --config"),
    "args-ambiguous": (DEV, ("training.args={--s,x}",), ["training.args[0]=--s: "], "write --set or --shared-dir"),
    "args-positional": (DEV, ("training.args={10}",), [f"training.args[0]=10: {TRAINER} takes no positional"], FLAGS),
    "args-set-without-key-value": (
        DEV,
        ("training.args={--set,steps}",),
        ["training.args[1]=steps: --set takes KEY=VALUE"],
        "e.g. steps=100",
    ),
    "args-inline-set-without-key-value": (
        DEV,
        ("training.args={--set=steps}",),
        ["training.args[0]=--set=steps: --set takes KEY=VALUE"],
        "",
    ),
    "args-value-missing": (
        DEV,
        ("training.args={--set}",),
        ["training.args ends with --set, which takes a value (KEY=VALUE)"],
        "",
    ),
    "args-with-the-evaluator": (
        DEV,
        ("evaluator.enabled=true", "training.args={--set,steps=5}"),
        ["training.args has --set with evaluator.enabled=true: the evaluator reads training.config alone"],
        "put the settings in training.config",
    ),
    # mounts over the image's paths
    "mount-usr-local": (
        DEV,
        mount("/usr/local"),
        ["workers.extraVolumeMounts[0].mountPath=/usr/local: a volume there would hide /usr/local/bin "],
        MOUNT_FIX,
    ),
    "mount-usr-local-prod": (
        PROD,
        (PROD_DIGEST, *mount("/usr/local")),
        ["workers.extraVolumeMounts[0].mountPath=/usr/local: a volume there would hide "],
        MOUNT_FIX,
    ),
    "mount-inside-site-packages": (
        DEV,
        mount("/usr/local/lib/python3.11/site-packages/entrypoint"),
        [
            "workers.extraVolumeMounts[0].mountPath=/usr/local/lib/python3.11/site-packages/entrypoint: a volume "
            "there would shadow or hide part of /usr/local/lib (the image's Python"
        ],
        MOUNT_FIX,
    ),
    "mount-linker-list": (
        DEV,
        mount("/etc/ld.so.conf.d"),
        ["workers.extraVolumeMounts[0].mountPath=/etc/ld.so.conf.d: a volume there would hide /etc/ld.so.conf.d "],
        MOUNT_FIX,
    ),
    "mount-lib64": (DEV, mount("/lib64"), ["workers.extraVolumeMounts[0].mountPath=/lib64: a volume there"], ""),
    "storage-at-usr-local-lib": (
        DEV,
        ("storage.mountPath=/usr/local/lib",),
        ["storage.mountPath=/usr/local/lib: a volume there would hide /usr/local/lib "],
        MOUNT_FIX,
    ),
    "writable-dir-usr-bin": (
        DEV,
        ("writableDirs={/tmp,/usr/bin}",),
        ["writableDirs[1]=/usr/bin: a volume there would hide /usr/bin "],
        MOUNT_FIX,
    ),
    # the variables that choose the GPUs a container sees
    "env-nvidia-visible-devices": (
        DEV,
        env("NVIDIA_VISIBLE_DEVICES"),
        ["workers.extraEnv[0].name=NVIDIA_VISIBLE_DEVICES: the device plugin sets it "],
        UNSAFE,
    ),
    "env-nvidia-visible-devices-prod": (
        PROD,
        (PROD_DIGEST, *env("NVIDIA_VISIBLE_DEVICES")),
        ["workers.extraEnv[0].name=NVIDIA_VISIBLE_DEVICES: "],
        UNSAFE,
    ),
    "env-nvidia-visible-devices-cpu-workers": (
        LOCAL,
        env("NVIDIA_VISIBLE_DEVICES"),
        ["workers.extraEnv[0].name=NVIDIA_VISIBLE_DEVICES: "],
        "GPUs to a worker that asked for none",
    ),
    "env-cuda-visible-devices": (
        DEV,
        env("CUDA_VISIBLE_DEVICES", "GPU-1"),
        ["workers.extraEnv[0].name=CUDA_VISIBLE_DEVICES: the container sees exactly the GPUs workers.gpus allocates"],
        UNSAFE,
    ),
    "env-sidecar": (
        DEV,
        (*sidecar("sidecars"), *env("NVIDIA_VISIBLE_DEVICES", where="workers.sidecars[0].env[0]")),
        ["workers.sidecars[0].env[0].name=NVIDIA_VISIBLE_DEVICES: "],
        UNSAFE,
    ),
    "env-init-container": (
        DEV,
        (*sidecar("initContainers"), *env("CUDA_VISIBLE_DEVICES", "GPU-1", where="workers.initContainers[0].env[0]")),
        ["workers.initContainers[0].env[0].name=CUDA_VISIBLE_DEVICES: "],
        UNSAFE,
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_refused_in_one_line_naming_the_key(helm, case):
    overlay, sets, starts, carries = REFUSED[case]
    problems = chart_problems(chartkit.template_error(helm, [overlay], sets=sets))
    assert len(problems) == len(starts), problems
    for problem, start in zip(problems, starts, strict=True):
        assert problem.startswith(start), problem
        assert carries in problem, problem


def worker(objects: list[dict]) -> dict:
    return chartkit.one(objects, "StatefulSet")["spec"]["template"]["spec"]["containers"][0]


def test_cpu_workers_may_go_without_resources(helm):
    """The rule is for GPU workers: `make local` and a laptop cluster keep their choice."""
    assert "resources" not in worker(chartkit.template(helm, [LOCAL], sets=("workers.resources=null",)))


def test_a_gpu_worker_request_left_out_is_its_limit(helm):
    """As the API server does: a limit without a request is also the request."""
    resources = worker(chartkit.template(helm, [DEV], sets=("workers.resources.requests=null",)))["resources"]
    assert "requests" not in resources and resources["limits"]["memory"] == "16Gi"


def test_the_chart_defaults_fit_a_gpu_worker(helm):
    """4Gi limit = 2Gi + the default 1Gi /dev/shm with room; a 2Gi request; a CPU request."""
    assert worker(chartkit.template(helm, sets=("workers.gpus=1",)))["resources"]["limits"]["nvidia.com/gpu"] == 1


@pytest.mark.parametrize(
    "sets",
    [
        ("training.args={--set,steps=5,--set=model.name=mlp,--config,/opt/tf-multiworker/files/c.yaml}",),
        ("training.args={--config=/opt/tf-multiworker/files/c.yaml}",),
        ("training.command={python,/app/train.py}", "training.args={--epochs,5,--steps-per-epoch,10}"),
    ],
    ids=["trainer-flags", "inline-value", "own-command-unchecked"],
)
def test_args_the_trainer_takes_render_as_given(helm, sets):
    given = sets[-1].split("=", 1)[1].strip("{}").split(",")
    assert worker(chartkit.template(helm, [DEV], sets=sets))["args"][-len(given) :] == given


@pytest.mark.parametrize("path", ["/usr/local/nvidia", "/etc/ssl/certs/corp-ca.crt", "/data", "/var/data"])
def test_mounts_beside_the_image_paths_render(helm, path):
    mounts = worker(chartkit.template(helm, [DEV], sets=mount(path)))["volumeMounts"]
    assert {"name": "data", "mountPath": path} in mounts


def test_allow_unsafe_lets_the_gpu_variables_through(helm):
    sets = (
        "security.allowUnsafe=true",
        *env("NVIDIA_VISIBLE_DEVICES"),
        *env("CUDA_VISIBLE_DEVICES", "GPU-1", "workers.extraEnv[1]"),
    )
    names = chartkit.env_of(worker(chartkit.template(helm, [DEV], sets=sets)))
    assert names["NVIDIA_VISIBLE_DEVICES"]["value"] == "all" and names["CUDA_VISIBLE_DEVICES"]["value"] == "GPU-1"


def json_define(name: str, path) -> object:
    """A define whose body is JSON (the chart's lists the tests compare with their source)."""
    text = path.read_text()
    pattern = r'define "tf-multiworker\.' + re.escape(name) + r'" -}}(.*?){{- end }}'
    body = re.search(pattern, text, re.S)
    assert body, f"no define {name} in {path.name}"
    return json.loads(body.group(1))


def trainer_parser(monkeypatch) -> argparse.ArgumentParser:
    """The parser `python -m entrypoint.training` builds (its module imports no TensorFlow)."""
    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", lambda self, args=None, namespace=None: self)
    return trainer_main.parse_args([])


def test_the_charts_trainer_flags_are_the_trainers(monkeypatch):
    """Every option of the trainer's parser, with whether it takes a value: a flag added to the
    trainer without the chart knowing would be refused in training.args, one removed accepted."""
    parser = trainer_parser(monkeypatch)
    trainer = {option: action.nargs != 0 for action in parser._actions for option in action.option_strings}
    chart = json_define("trainerFlags", TEMPLATES / "_validate_containers.tpl")
    assert {flag: "value" in spec for flag, spec in chart.items()} == trainer
    assert not [action.dest for action in parser._actions if not action.option_strings]  # no positionals


@pytest.mark.parametrize("flag", sorted(json_define("trainerFlags", TEMPLATES / "_validate_containers.tpl")))
def test_each_flag_the_chart_owns_is_refused_saying_why(helm, flag):
    spec = json_define("trainerFlags", TEMPLATES / "_validate_containers.tpl")[flag]
    args = f"training.args={{{flag},x}}" if "value" in spec else f"training.args={{{flag}}}"
    if "owner" not in spec:
        assert chartkit.template(helm, [DEV], sets=(args.replace(",x}", ",k=v}"),))
        return
    problems = chart_problems(chartkit.template_error(helm, [DEV], sets=(args,)))
    assert problems == [f"training.args[0]={flag}: {spec['owner']}; remove it from training.args"]


def test_the_images_working_directory_is_an_image_path(helm):
    """The Dockerfile's WORKDIR holds the code of an image built on this one (docs/image.md)."""
    workdir = re.search(r"^WORKDIR\s+(\S+)", (chartkit.REPO / "Dockerfile").read_text(), re.M).group(1)
    assert workdir in [entry["path"] for entry in json_define("imagePaths", TEMPLATES / "_validate_mounts.tpl")]
    problems = chart_problems(chartkit.template_error(helm, [DEV], sets=mount(workdir)))
    assert problems == [
        f"workers.extraVolumeMounts[0].mountPath={workdir}: a volume there would hide {workdir} (the working "
        "directory, where an image built on this one keeps its code)" + MOUNT_FIX
    ]
