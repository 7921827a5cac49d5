"""Host-side CLI behind `make template / deploy / diff / status / logs / undeploy`.

    python -m tfmw.cli template --env prod                 # -> build/prod/manifests.yaml
    python -m tfmw.cli deploy   --env dev --set "workers.replicas=4 training.runId=run-7"
    python -m tfmw.cli diff     --env dev -f team.yaml --set-json 'workers.nodeSelector={"gpu":"a100"}'
    python -m tfmw.cli check    -f gitops/values.yaml [--env E] [--set ...]   # a GitOps pipeline's check
    python -m tfmw.cli status   [--release R] [--namespace N]
    python -m tfmw.cli logs     [--no-follow]
    python -m tfmw.cli undeploy
    python -m tfmw.cli import tfjob tfjob.yaml -o team.yaml   # a Kubeflow TFJob as a values overlay

This file only parses and dispatches: each verb's workflow is in tfmw.deploy (apply: template,
deploy, diff, check; inspect: status, logs; change: suspend, resume, retry, undeploy), on one release's
reach (deploy.release) and one checked, watched upgrade (deploy.upgrade); `import`'s is in
tfmw.imports (another platform's manifest as a values overlay).
Errors are one line on stderr with a non-zero exit (see helmkit.ToolError for the codes).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from tfmw.chart import render
from tfmw.chart.helmkit import ToolError
from tfmw.deploy import apply, change, inspect
from tfmw.deploy.release import Release
from tfmw.deploy.upgrade import Upgrade
from tfmw.imports import command as importing


def _release(args) -> Release:
    # `make deploy` with no ENV: the local overlay, and only to a local cluster (deploy.context)
    return Release(
        env=args.env or "local",
        env_named=args.env is not None,
        name=args.release,
        namespace=args.namespace,
        kube_context=args.kube_context,
        helm=args.helm,
        chart_dir=Path(args.chart),
        values_dir=Path(args.values_dir),
        any_context=getattr(args, "any_context", False),
    )


def _rendering(args) -> apply.Rendering:
    return apply.Rendering(
        tuple(args.set),
        tuple(args.set_file),
        args.kube_version,
        tuple(args.set_string),
        tuple(args.values),
        tuple(args.set_json),
    )


def _upgrade(args) -> Upgrade:
    return Upgrade(
        timeout=args.timeout,
        wait=not args.no_wait,
        rollback=not args.no_rollback,
        poll_seconds=args.poll_seconds,
        unschedulable_grace=args.unschedulable_grace,
    )


VERBS = {
    "template": lambda args: apply.template(_release(args), _rendering(args), args.output),
    "deploy": lambda args: apply.deploy(_release(args), _rendering(args), _upgrade(args), dry_run=args.dry_run),
    "diff": lambda args: apply.diff(_release(args), _rendering(args)),
    "check": lambda args: apply.check(_release(args), _rendering(args)),
    "status": lambda args: inspect.status(_release(args)),
    "logs": lambda args: inspect.logs(_release(args), follow=not args.no_follow, tail=args.tail),
    "suspend": lambda args: change.suspend(_release(args), _upgrade(args)),
    "resume": lambda args: change.resume(_release(args), _upgrade(args)),
    "retry": lambda args: change.retry(_release(args), _upgrade(args)),
    "undeploy": lambda args: change.undeploy(_release(args), timeout=args.timeout),
    "import": lambda args: importing.import_tfjob(
        args.file, args.output, args.training_command, check=not args.no_check, helm=args.helm
    ),
}


# ---------------------------------------------------------------- CLI


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="tfmw", description=__doc__.split("\n\n")[0])
    sub = top.add_subparsers(dest="command", required=True)

    def common(p: argparse.ArgumentParser, env_default: str = "local") -> None:
        p.add_argument(
            "--env",
            default=None,
            help="environment: the overlay values/<env>.yaml, whose `target` block names the release, "
            f"namespace and kube context (default: {env_default})",
        )
        p.add_argument("--release", default=None, help="helm release name (default: the overlay's target.release)")
        p.add_argument("--namespace", default=None, help="namespace (default: the overlay's target.namespace)")
        p.add_argument("--kube-context", default=None, help="kubeconfig context (default: current)")
        p.add_argument("--helm", default=None, help="helm binary (default: $HELM, .tools/bin/helm, PATH)")
        p.add_argument("--chart", default=str(render.CHART_DIR), help=argparse.SUPPRESS)
        p.add_argument("--values-dir", default=str(render.VALUES_DIR), help=argparse.SUPPRESS)

    def guarded(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--any-context",
            action="store_true",
            help="act on the kube context in use whatever the overlay's target.kubeContext says (another "
            "context, a local cluster only, or none), also with SET= or VALUES= changing it",
        )

    def rendering(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "-f",
            "--values",
            action="append",
            default=[],
            metavar="PATH[,PATH]",
            help="values files layered after the overlay, in the order given, before any --set* (repeatable; "
            "comma-separated ok)",
        )
        p.add_argument(
            "--set-json",
            dest="set_json",
            action="append",
            default=[],
            help="helm --set-json item, not split on spaces: 'a.b={\"x\": [1, 2]}' (several: k1=json1,k2=json2; "
            "repeatable)",
        )
        p.add_argument(
            "--set", action="append", default=[], help="helm --set items, space separated: 'a.b=1 c={x,y}' (repeatable)"
        )
        p.add_argument(
            "--set-string",
            dest="set_string",
            action="append",
            default=[],
            help="helm --set-string items, space separated: every value is text ('a.b=true c={x,5}') (repeatable)",
        )
        p.add_argument(
            "--set-file",
            dest="set_file",
            action="append",
            default=[],
            help="helm --set-file key=path items, e.g. 'training.files.main\\.py=main.py' (repeatable)",
        )
        p.add_argument(
            "--kube-version",
            default=render.DEFAULT_KUBE_VERSION,
            help="validate manifests against this Kubernetes version (default %(default)s)",
        )

    p = sub.add_parser("template", help="render ENV into build/<env>/manifests.yaml")
    common(p), rendering(p)
    p.add_argument("--output", default=None, help="write here instead of build/<env>/manifests.yaml")

    p = sub.add_parser("deploy", help="install or upgrade the release, wait for the workers")
    common(p), rendering(p), guarded(p)
    p.add_argument("--timeout", default="15m", help="helm --timeout (default %(default)s)")
    p.add_argument("--no-wait", action="store_true", help="return once submitted (implies --no-rollback)")
    p.add_argument("--no-rollback", action="store_true", help="keep a failed revision for debugging")
    p.add_argument(
        "--dry-run", action="store_true", help="validate and render, print the helm command and values; no cluster call"
    )
    p.add_argument(
        "--unschedulable-grace",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="stop when a worker pod stays Unschedulable this long with no autoscaler adding a node for it, or "
        "waits this long on its volume (default %(default)s; 0 waits for --timeout)",
    )
    p.add_argument("--poll-seconds", type=float, default=5.0, help=argparse.SUPPRESS)

    p = sub.add_parser("diff", help="rendered manifests vs. the release's recorded manifest")
    common(p), rendering(p)

    p = sub.add_parser(
        "check",
        help="every check template runs (values, training config, chart, strict manifests), nothing written, "
        "no cluster; no --env: the -f files alone (a GitOps repository's values)",
    )
    common(p, env_default="none: only the -f files over the chart's values.yaml"), rendering(p)

    p = sub.add_parser("status", help="release state and per-worker progress")
    common(p)

    p = sub.add_parser("logs", help="every worker's log, prefixed with its pod")
    common(p)
    p.add_argument("--no-follow", action="store_true", help="print what is there and exit")
    p.add_argument("--tail", type=int, default=-1, help="lines per pod to start with (-1: all)")

    def changing(p: argparse.ArgumentParser) -> None:
        p.add_argument("--timeout", default="15m", help="helm --timeout (default %(default)s)")
        p.add_argument("--unschedulable-grace", type=float, default=120.0, help=argparse.SUPPRESS)
        p.add_argument("--poll-seconds", type=float, default=5.0, help=argparse.SUPPRESS)
        p.set_defaults(no_wait=False, no_rollback=False)

    for name, text in (
        ("suspend", "stop the group at a checkpoint and remove its workers (suspend: true)"),
        ("resume", "bring a suspended run's workers back (suspend: false)"),
        ("retry", "train a Failed run again from its last checkpoint (training.retry + 1)"),
    ):
        p = sub.add_parser(name, help=text)
        common(p), guarded(p), changing(p)

    p = sub.add_parser("undeploy", help="uninstall the release (shared storage is kept)")
    common(p), guarded(p)
    p.add_argument("--timeout", default="5m")

    p = sub.add_parser("import", help="turn another platform's job manifest into a values overlay")
    kinds = p.add_subparsers(dest="kind", required=True)
    p = kinds.add_parser(
        "tfjob",
        help="a Kubeflow TFJob (kubeflow.org/v1) -> a values overlay; unmapped fields listed on stderr",
    )
    p.add_argument("file", help="the TFJob manifest (YAML; other documents in it are ignored, each said)")
    p.add_argument("-o", "--output", default=None, help="write the overlay here instead of stdout")
    p.add_argument(
        "--command",
        dest="training_command",
        default=None,
        metavar="CMD",
        help="what the image runs, as one shell-quoted string (e.g. 'python /app/train.py'): for a TFJob whose "
        "container names no command (its image's ENTRYPOINT/CMD); replaces the TFJob's command when it has one",
    )
    p.add_argument("--no-check", action="store_true", help="skip rendering the chart with the overlay (no helm)")
    p.add_argument("--helm", default=None, help="helm binary for the check (default: $HELM, .tools/bin/helm, PATH)")
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return VERBS[args.command](args)
    except ToolError as exc:
        print(f"tfmw {args.command}: error: {exc}", file=sys.stderr, flush=True)
        return exc.exit_code
    except BrokenPipeError:
        # the reader went away (`tfmw status | head`): stop quietly, as a shell tool does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except KeyboardInterrupt:
        print(
            f"tfmw {args.command}: interrupted (a helm operation may have been cut short: check `make status`)",
            file=sys.stderr,
        )
        return 130


if __name__ == "__main__":
    sys.exit(main())
