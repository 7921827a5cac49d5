"""The fault harness's `suspend` scenario (tfmw.faults.disruptions) with the checked deploy steps
faked (no cluster): it sends tfmw.deploy.suspension to the harness's cluster through the
release's own kubeconfig, never through os.environ, and a refusal of the checked path is the
run's one-line reason."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from tfmw.chart.helmkit import ToolError
from tfmw.deploy.upgrade import Upgrade
from tfmw.faults import disruptions
from tfmw.faults import inject as fault_inject
from tfmw.faults import kube as fault_kube

KUBECONFIG = Path("/harness/cluster/kubeconfig")
REFUSAL = "release fault-suspend is not installed in namespace ns (deploy it with `make deploy ...`)"


class _Steps:
    """suspension.suspend_and_wait and suspension.resume, recording what each was given and the
    environment it ran in; `refuse`: the step that answers with the checked path's ToolError."""

    def __init__(self, refuse: str = ""):
        self.refuse = refuse
        self.calls: list[SimpleNamespace] = []

    def _step(self, name, rel, helm, options, **kwargs):
        self.calls.append(
            SimpleNamespace(name=name, rel=rel, helm=helm, options=options, env=dict(os.environ), **kwargs)
        )
        if name == self.refuse:
            raise ToolError(REFUSAL, exit_code=3)

    def suspend_and_wait(self, rel, helm, options, values=None, out=print):
        self._step("suspend", rel, helm, options)

    def resume(self, rel, helm, options, values=None, report=True, out=print):
        self._step("resume", rel, helm, options, report=report)


@pytest.fixture
def steps(monkeypatch):
    faked = _Steps()
    monkeypatch.setattr(disruptions.suspension, "suspend_and_wait", faked.suspend_and_wait)
    monkeypatch.setattr(disruptions.suspension, "resume", faked.resume)
    return faked


def harness_kube(pods: dict | None = None):
    return SimpleNamespace(kubeconfig=KUBECONFIG, helm_bin="/tools/helm", get=lambda path: (pods or {}).get(path))


@pytest.mark.parametrize("kubeconfig_env", ["/operators/kubeconfig", None], ids=["KUBECONFIG-set", "unset"])
def test_suspend_passes_the_harness_kubeconfig_and_never_changes_os_environ(steps, monkeypatch, kubeconfig_env):
    if kubeconfig_env is None:
        monkeypatch.delenv("KUBECONFIG", raising=False)
    else:
        monkeypatch.setenv("KUBECONFIG", kubeconfig_env)
    before = dict(os.environ)
    disruption = disruptions._suspend(harness_kube(), "ns", "fault-suspend", "/chart")
    disruption.give_back()
    disruption.give_back()  # idempotent: resumed once
    disruption.cleanup()
    assert dict(os.environ) == before
    assert [(c.name, c.env) for c in steps.calls] == [("suspend", before), ("resume", before)]
    for call in steps.calls:
        assert call.rel.kubeconfig == KUBECONFIG and call.rel.kubeconfig_env == str(KUBECONFIG)
        assert (call.rel.name, call.rel.namespace, call.rel.any_context) == ("fault-suspend", "ns", True)
        assert call.rel.chart_dir == Path("/chart") and call.helm == call.rel.helm == "/tools/helm"
    assert steps.calls[0].options == Upgrade() and steps.calls[1].options == Upgrade(wait=False)
    assert steps.calls[1].report is False  # the harness reports the run, not the release


def test_a_refused_suspend_is_the_faults_one_line_reason(steps):
    steps.refuse = "suspend"
    before = dict(os.environ)
    held: list = []
    with pytest.raises(fault_kube.FaultError) as err:
        fault_inject.inject(harness_kube(), "suspend", "ns", "w-1", held, release="fault-suspend")
    assert str(err.value) == f"suspend of w-1: {REFUSAL}"
    assert held == [] and dict(os.environ) == before
