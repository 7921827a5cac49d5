"""The envFrom probe's parse (entrypoint/envfrom.py): which reserved names an envFrom Secret or
ConfigMap defined, from the probe as the kubelet expanded it (kubeletkit.kubelet_expand)."""

from __future__ import annotations

import pytest
from kubeletkit import kubelet_expand

from entrypoint import envfrom

NAMES = ["TFMW_PORT", "TF_CONFIG", "TFMW_NO_API_SERVER"]


def test_the_kubelet_rule_as_this_test_has_it():
    assert kubelet_expand("a=$(A) b=$(B) $$(A)", {"A": "1"}) == "a=1 b=$(B) $(A)"
    assert kubelet_expand("$(A)", {"A": "$(B)", "B": "2"}) == "$(B)"  # not expanded again


def test_no_envfrom_key_among_the_names_is_no_collision():
    probe = envfrom.probe_value(NAMES)
    assert envfrom.collisions(kubelet_expand(probe, {"WANDB_API_KEY": "k", "OTHER": "$(TFMW_PORT)"})) == []


def test_each_defined_name_is_a_collision_in_the_probes_order_even_an_empty_value():
    probe = kubelet_expand(envfrom.probe_value(NAMES), {"TF_CONFIG": '{"cluster": {}}', "TFMW_PORT": ""})
    assert envfrom.collisions(probe) == ["TFMW_PORT", "TF_CONFIG"]


def test_a_value_holding_the_separators_and_another_names_part_hides_nothing():
    # The values hold the separators and look like other names' parts: TFMW_PORT, not defined,
    # keeps its own part as rendered, so it is not named.
    value = "x|TFMW_PORT=1|TFMW_NO_API_SERVER=|,TF_CONFIG"
    probe = kubelet_expand(envfrom.probe_value(NAMES), {"TF_CONFIG": value, "TFMW_NO_API_SERVER": "1|"})
    assert envfrom.collisions(probe) == ["TF_CONFIG", "TFMW_NO_API_SERVER"]


@pytest.mark.parametrize("probe", [None, "", "no separator at all", "|"])
def test_no_probe_or_one_without_names_is_no_collision(probe):
    assert envfrom.collisions(probe) == []


def test_the_refusal_names_the_keys_never_their_values():
    line = envfrom.refusal(["TFMW_PORT", "TF_CONFIG"])
    assert "keys TFMW_PORT, TF_CONFIG, reserved by the chart" in line and "\n" not in line
    assert "workers.extraEnvFrom" in line and "prefix" in line


def test_the_refusal_keeps_the_charts_values_and_drops_what_the_chart_never_sets():
    env = {"TFMW_PORT": "2222", "TF_CONFIG": "{}", "TFMW_NO_API_SERVER": "1", "TFMW_NAMESPACE": "ml"}
    assert envfrom.trusted(env, ["TFMW_PORT", "TF_CONFIG", "TFMW_NO_API_SERVER"]) == {
        "TFMW_PORT": "2222",  # the chart's own (env wins over envFrom)
        "TFMW_NAMESPACE": "ml",
    }
