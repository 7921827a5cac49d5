"""A Helm post-renderer (stdin: the rendered manifests; stdout: them changed) that sets
environment variables on every container of the release's StatefulSet: how a test gives the
pods a test hook (docs/failure-model.md "Test hook") the chart itself refuses to set
(workers.extraEnv rejects TFMW_* names). Usage: postrender_env.py NAME=VALUE ..."""

from __future__ import annotations

import sys

import yaml


def add_env(manifests: str, pairs: list[str]) -> str:
    env = [dict(zip(("name", "value"), pair.split("=", 1), strict=True)) for pair in pairs]
    docs = [doc for doc in yaml.safe_load_all(manifests) if doc]
    for doc in docs:
        if doc.get("kind") == "StatefulSet":
            for container in doc["spec"]["template"]["spec"]["containers"]:
                container["env"] = [*container.get("env", []), *env]
    return yaml.safe_dump_all(docs, sort_keys=False)


if __name__ == "__main__":
    sys.stdout.write(add_env(sys.stdin.read(), sys.argv[1:]))
