"""The verbs that change a deployed release's run in place, from the values it was deployed
with: `tfmw suspend` (stop the group at a checkpoint, remove its workers), `resume`, `retry`
(train a Failed run again from its last checkpoint), and `undeploy` (uninstall; the shared
storage is kept). Each refuses a cluster its environment is not meant for (deploy.context).
"""

from __future__ import annotations

import asyncio

from entrypoint.lifecycle import Phase
from tfmw.chart import helmkit
from tfmw.chart.helmkit import ToolError
from tfmw.deploy import helm as deploy_helm
from tfmw.deploy import observe, suspension, upgrade
from tfmw.deploy.release import (
    Release,
    check_context,
    helm_command,
    helm_failure,
    namespace_missing,
    recorded_objects,
    recorded_run,
    recorded_status,
    resolve,
    say,
)


def _guarded(rel: Release, verb: str) -> tuple[Release, str]:
    """(the release at its environment's target, pinned to the context checked, helm) once the
    context in use is the right one."""
    helm = helmkit.find_helm(rel.helm)
    rel, target = resolve(rel, helm)
    return check_context(rel, target, verb), helm


def _state(record: observe.RunRecord | None) -> str:
    return f"run {record.run_id} is {record.phase}" if record is not None else "its run is not recorded"


def suspend(rel: Release, options: upgrade.Upgrade) -> int:
    """Stop the group at a checkpoint and remove its workers; the run, its storage and the release stay."""
    rel, helm = _guarded(rel, "suspend")
    _, record, values = recorded_run(rel, helm)
    if record is not None and record.terminal:
        raise ToolError(
            f"run {record.run_id} of release {rel.name} already {record.phase}: nothing to suspend "
            "(its workers are released at the end of a run)",
            exit_code=3,
        )
    if values.get("suspend") is True or (record is not None and record.phase is Phase.SUSPENDED):
        raise ToolError(f"release {rel.name} is suspended already: `make resume` continues it", exit_code=3)
    say(f"suspending release {rel.name} in namespace {rel.namespace}: the group stops at its next checkpoint")
    done = suspension.suspend_and_wait(rel, helm, options, values)
    if not done.suspended:
        raise ToolError(
            f"release {rel.name} is at 0 workers, but its run was not recorded Suspended within {done.waited}s "
            f"({observe.run_summary(done.record, done.workers)}); `make status` tells more",
            exit_code=4,
        )
    say(f"suspended: {observe.run_summary(done.record, done.workers)}; `make resume` continues it")
    return 0


def resume(rel: Release, options: upgrade.Upgrade) -> int:
    """Bring a suspended run's workers back: the group goes on from its checkpoint."""
    rel, helm = _guarded(rel, "resume")
    _, record, values = recorded_run(rel, helm)
    if values.get("suspend") is not True:
        raise ToolError(f"release {rel.name} is not suspended ({_state(record)}): nothing to resume", exit_code=3)
    say(f"resuming release {rel.name} in namespace {rel.namespace}")
    return suspension.resume(rel, helm, options, values)


def retry(rel: Release, options: upgrade.Upgrade) -> int:
    """Train a Failed run again from its last checkpoint (a new pod template: training.retry + 1)."""
    rel, helm = _guarded(rel, "retry")
    _, record, values = recorded_run(rel, helm)
    if record is None or record.phase is not Phase.FAILED:
        raise ToolError(f"release {rel.name} has no Failed run to retry ({_state(record)})", exit_code=3)
    retried = int(((values.get("training") or {}).get("retry")) or 0) + 1
    state = record.state
    say(
        f"retrying run {record.run_id} ({state.reason}: {observe.shorten(state.message, 160)}) from its last "
        f"checkpoint, step {state.last_checkpoint_step or 0}: training.retry={retried}"
    )
    return asyncio.run(upgrade.run(rel, upgrade.with_values(rel, values, {"training.retry": retried}), helm, options))


def undeploy(rel: Release, timeout: str = "5m") -> int:
    """Uninstall the release; say what became of its shared storage."""
    rel, helm = _guarded(rel, "undeploy")

    async def uninstall() -> int:
        import pyhelm3

        cmd = helm_command(rel, helm)
        if await recorded_status(cmd, rel) is None:
            missing = namespace_missing(rel.namespace, rel.kube_context, rel.kubeconfig_env)
            if missing:
                raise ToolError(
                    f"{missing}: nothing to uninstall; check NAMESPACE= (`kubectl get namespaces` lists them)",
                    exit_code=3,
                )
            say(f"release {rel.name} is not installed in namespace {rel.namespace}: nothing to do")
            return 0
        objects = await recorded_objects(cmd, rel)
        major = helmkit.helm_major(helm)
        try:
            await cmd.run(deploy_helm.uninstall_args(major, rel.name, rel.namespace, timeout=timeout))
        except pyhelm3.errors.Error as exc:
            raise helm_failure(exc, "helm uninstall", rel.kube_context, rel.kubeconfig_env) from None
        say(f"uninstalled release {rel.name} from namespace {rel.namespace}")
        for line in deploy_helm.storage_after_uninstall(objects, rel.namespace):
            say(line)
        return 0

    return asyncio.run(uninstall())
