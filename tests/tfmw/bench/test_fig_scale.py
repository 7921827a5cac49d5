"""Figure 8's pure parts: the request kinds, the base's arithmetic, the table and the report's
text. No timing or rate is asserted: benchmarks are not tests (the request budget itself is
tested against the launcher in tests/entrypoint/test_lost_peers.py and test_resize.py)."""

from __future__ import annotations

import pytest

from tfmw.bench import fig_scale

P = fig_scale.Point


@pytest.mark.parametrize(
    ("method", "path", "what"),
    [
        ("GET", "/apis/apps/v1/namespaces/ml/statefulsets/train/scale", "GET scale"),
        ("PATCH", "/api/v1/namespaces/ml/configmaps/train-status", "PATCH configmap"),
        ("GET", "/api/v1/namespaces/ml/pods?labelSelector=a%3Db", "GET pods (list)"),
        ("GET", "/api/v1/namespaces/ml/pods/train-0", "GET pod"),
        ("POST", "/api/v1/namespaces/ml/events", "POST event"),
    ],
)
def test_requests_are_counted_by_kind(method, path, what):
    assert fig_scale.what_of(method, path) == what


def test_the_base_arithmetic_is_quadratic_in_lookups_and_linear_in_polls():
    p = fig_scale.base_arithmetic(1024, 30.0, 40.0)
    assert p.computed and p.code == "base"
    assert p.dns_start == p.dns_restart == 1024 * 1024
    assert p.steady_rps == pytest.approx(1024 / 5)
    # 3 reads per launcher, the size polls for the whole window, and 2(N-1) pod GETs per 5 s once stalled
    assert p.restart_rps == pytest.approx((3 * 1024 + 1024 / 5 * 40 + 2 * 1023 / 5 * 30) / 40)


def result() -> fig_scale.Result:
    points = [
        P("now", 16, 58, 58, 0.66, 4.1, 2.2, 1.2),
        P("now", 1024, 4090, 4090, 0.67, 90.0, 1.9, 0.9),
        P("base", 16, 256, 256, 3.2, 8.9, 2.2, 2.2),
        fig_scale.base_arithmetic(1024, 30.0, 40.0),
    ]
    return fig_scale.Result(points, 30.0, 40.0, "2f32168")


def test_rows_put_this_code_first_and_mark_the_computed_base():
    rows = fig_scale.table_rows(result())
    assert [r[:2] for r in rows] == [
        ["this code", "16"],
        ["this code", "1,024"],
        ["base 2f32168", "16"],
        ["base 2f32168 (computed)", "1,024"],
    ]
    assert rows[1][2:5] == ["4,090", "4,090", "0.67"]
    assert rows[3][6:] == ["-", "-"]  # memory and CPU are never computed


def test_report_says_the_targets_and_the_ratios():
    text = fig_scale.section(result(), fig_scale.table_rows(result()), fig_scale.HEADERS, "1 / 1 / 1")
    assert text.startswith("## Figure 8: the control path at 16 to 1,024 workers")
    assert "At 1,024 workers the whole release asks the API server 0.67 times a second" in text
    assert "target 4N = 4,096" in text
    assert "The base (2f32168) at 1,024: 205 requests a second in steady state (306x)" in text
    assert "from its code's arithmetic" in text
    assert "Measured side by side at 16 workers: 3.2 against 0.66 requests a second" in text


def test_plot_draws(tmp_path):
    fig_scale.plot(result(), tmp_path / "s.png", "test")
    assert (tmp_path / "s.png").stat().st_size > 1000


@pytest.mark.slow
def test_a_small_group_of_real_launchers_keeps_the_request_budget():
    """The harness itself, on 8 launchers of this code: every lookup and request is counted,
    and the budget of docs/contracts.md holds: the chief resolves every name, the others at
    most three; in steady state only the chief asks anything (its size, its status at a
    checkpoint, its own pod for the status fence)."""
    point = fig_scale.measure_one("now", fig_scale.REPO, 8, steady=5.0, restart=14.0, log=lambda line: None)
    expected = sum(len(set(fig_scale.needed(8, rank))) for rank in range(8))
    assert point.dns_start == point.dns_restart == expected
    assert set(point.requests) <= {"GET scale", "GET configmap", "PATCH configmap", "GET pod"}, point.requests
    assert point.requests.get("GET scale", 0) <= 1.0  # one poller (every 5 s, jittered), not eight
