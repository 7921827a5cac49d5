"""The pod environment contract is declared once (entrypoint/settings.py ENV): the schema, the
refusal's words, the defaults and the names `workers.extraEnv` may not set are derived from it,
and the chart's list of reserved names is the same list."""

from __future__ import annotations

import re

from repo import REPO

from entrypoint import settings

VALIDATE_ENV = REPO / "charts" / "tf-multiworker" / "templates" / "_validate_env.tpl"
STATEFULSET = REPO / "charts" / "tf-multiworker" / "templates" / "statefulset.yaml"


def chart_env() -> list[str]:
    line = next(line for line in VALIDATE_ENV.read_text().splitlines() if "$chartEnv := list" in line)
    return re.findall(r'"([A-Z_]+)"', line)


def test_the_chart_reserves_exactly_the_names_the_entrypoint_declares_as_the_charts():
    assert sorted(chart_env()) == sorted(settings.CHART_ENV)


def test_every_variable_the_chart_renders_is_declared():
    rendered = set(re.findall(r"- name: (TFMW_[A-Z_]+)", STATEFULSET.read_text()))
    assert rendered and rendered <= {var.name for var in settings.ENV}, rendered - {v.name for v in settings.ENV}


def test_schema_words_and_defaults_come_from_the_one_declaration():
    names = [var.name for var in settings.ENV]
    assert len(names) == len(set(names))
    assert list(settings.ENV_SCHEMA["properties"]) == names == list(settings.WHAT) == list(settings.DEFAULTS)
    loaded = settings.load_settings(
        {"TFMW_POD_NAME": "t-0", "TFMW_NAMESPACE": "n", "TFMW_SERVICE": "s", "TFMW_REPLICAS": "2"}
    )
    assert loaded.port == int(settings.DEFAULTS["TFMW_PORT"])
    assert loaded.peer_timeout_seconds == int(settings.DEFAULTS["TFMW_PEER_TIMEOUT_SECONDS"])
    assert loaded.max_restarts == int(settings.DEFAULTS["TFMW_MAX_RESTARTS"])
    assert loaded.same_error_limit == int(settings.DEFAULTS["TFMW_SAME_ERROR_LIMIT"]) == 2
