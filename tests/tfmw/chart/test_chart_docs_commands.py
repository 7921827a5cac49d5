"""The `helm install` line docs/from-runai.md gives for a Run:ai submission renders, and
renders what the page's table says it maps to (two one-GPU workers on Run:ai's scheduler in
the project's queue, running the script itself)."""

from __future__ import annotations

import re
import shlex

import chartkit
import yaml

PAGE = chartkit.REPO / "docs" / "from-runai.md"


def helm_install_lines(text: str) -> list[list[str]]:
    """Each `helm install` command of the page's sh blocks, its continuation lines joined."""
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        for command in block.replace("\\\n", " ").splitlines():
            words = shlex.split(command, comments=True)
            if words[:2] == ["helm", "install"]:
                commands.append(words)
    return commands


def test_the_reader_joins_continuation_lines_and_skips_other_commands():
    text = "```sh\nrunai submit-dist tf\nhelm install a charts/x \\\n  --set 'b={c,d}'  # note\n```\n"
    assert helm_install_lines(text) == [["helm", "install", "a", "charts/x", "--set", "b={c,d}"]]


def test_the_runai_page_helm_install_line_renders_the_mapped_job():
    [words] = helm_install_lines(PAGE.read_text())
    assert words[3] == "charts/tf-multiworker"
    args = ["template", words[2], str(chartkit.CHART), *words[4:]]
    result = chartkit.run_helm(chartkit.helm4(), args)
    assert result.returncode == 0, result.stderr
    objects = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
    sts = chartkit.one(objects, "StatefulSet")
    pod = sts["spec"]["template"]
    worker = pod["spec"]["containers"][0]
    assert sts["metadata"]["namespace"] == "runai-team-a"
    assert sts["spec"]["replicas"] == 2  # --workers=2
    assert worker["resources"]["limits"]["nvidia.com/gpu"] == 1  # -g 1
    assert pod["spec"]["schedulerName"] == "runai-scheduler"
    assert pod["metadata"]["labels"]["kai.scheduler/queue"] == "team-a"
    assert worker["command"] == ["python", "-m", "entrypoint", "run", "--"]
    assert worker["args"] == ["python", "/app/train.py"]  # the script itself, no launch.sh
    assert worker["image"] == "registry.example.com/team-a/mnist:v1"
    env = {e["name"]: e.get("value") for e in worker["env"]}
    assert env["TFMW_ON_SUCCESS"] == "scaleToZero"  # completion releases the GPUs (shared storage)
