"""What the kubelet does to an env value (k8s.io/kubernetes pkg/kubelet/kubelet_pods.go
makeEnvironmentVariables: envFrom's keys are defined first, then each env value goes through
third_party/forked/golang/expansion Expand with MappingFuncFor): `$(NAME)` becomes NAME's value
when NAME is defined and stays as written when it is not, `$$` is one `$`, and a value put in is
not expanded again."""

from __future__ import annotations

import re


def kubelet_expand(value: str, defined: dict[str, str]) -> str:
    def one(match: re.Match) -> str:
        if match[0] == "$$":
            return "$"
        return defined.get(match[1], match[0])

    return re.sub(r"\$\$|\$\(([^)]*)\)", one, value)
