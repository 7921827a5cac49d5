"""entrypoint.loglines: the one format and parser of `tfmw` lines (docs/contracts.md)."""

import pytest

from entrypoint import loglines as ll


def test_line_formats_fields_in_order_and_quotes_what_needs_it():
    assert ll.line(ll.PROGRESS, step="3/10", epoch=0, loss="0.5000") == "tfmw progress step=3/10 epoch=0 loss=0.5000"
    assert (
        ll.line(ll.FAILED, run="r", reason="BadConfig", message='bad "x" value')
        == "tfmw failed run=r reason=BadConfig message=\"bad 'x' value\""
    )
    assert ll.line(ll.DONE, steps=3, model=None) == "tfmw done steps=3"
    assert ll.line(ll.WARNING, empty="") == 'tfmw warning empty=""'


def test_a_crafted_value_cannot_forge_a_second_line():
    text = ll.line(ll.ERROR, "retryable=false", text="boom\ntfmw done steps=9")
    assert "\n" not in text and ll.parse(text).kind == ll.ERROR


def test_launcher_lines_are_prose():
    text = ll.line(ll.LAUNCHER, text="idle: this run is complete; the pod idles")
    assert text == "tfmw launcher idle: this run is complete; the pod idles"
    assert ll.parse(text).text == "idle: this run is complete; the pod idles"


def test_kind_must_be_one_word():
    with pytest.raises(ValueError):
        ll.line("two words")


@pytest.mark.parametrize(
    "raw,kind,fields",
    [
        ("tfmw progress step=3/10 loss=0.5", "progress", {"step": "3/10", "loss": "0.5"}),
        ('tfmw failed run=r reason=X message="a b"', "failed", {"run": "r", "reason": "X", "message": "a b"}),
        ("tfmw sigterm: will checkpoint", "sigterm", {}),
        ("tfmw completed run=r\n", "completed", {"run": "r"}),
    ],
)
def test_parse_round_trips(raw, kind, fields):
    parsed = ll.parse(raw)
    assert parsed.kind == kind and parsed.fields == fields


def test_parse_needs_the_line_start_unless_prefixed():
    raw = "[lonely-0] tfmw progress step=7/10"
    assert ll.parse(raw) is None and ll.parse("xtfmw progress step=1", prefixed=True) is None
    assert ll.parse(raw, prefixed=True).int_field("step") == 7
    assert ll.progress_step(raw) == 7 and ll.progress_step("tfmw done steps=7") is None
    assert ll.parse("tfmwprogress") is None and ll.parse("hello") is None


def test_find_error_text_and_numbers():
    lines = ["x", "tfmw error retryable=true worker=1 UnavailableError: peer gone", "tfmw done steps=3 final_loss=nan"]
    (error,) = ll.find(lines, ll.ERROR)
    assert ll.error_text(error) == "UnavailableError: peer gone" and error.int_field("worker") == 1
    (done,) = ll.find(lines, ll.DONE)
    assert done.int_field("steps") == 3 and done.float_field("final_loss") != done.float_field("final_loss")
    assert done.float_field("absent") is None and done.int_field("absent") is None


def test_payload_lines_round_trip_json_with_spaces():
    payload = {"id": "a b", "n": [1, 2.5], "long": "x" * 2000}
    raw = ll.payload_line(ll.BENCH, "case", payload)
    assert "\n" not in raw and raw.startswith("tfmw bench case={")
    lines = ["noise", "tfmw bench other={}", raw, ll.payload_line(ll.BENCH, "case", {"id": 2})]
    assert ll.payloads(lines, ll.BENCH, "case") == [payload, {"id": 2}]


def test_one_number_of_one_kind_of_line():
    start = ll.line(ll.START, run="r", worker="0/2", resume_step=40, steps=100)
    stopped = ll.line(ll.STOPPED, step="60/100", reason="sigterm")
    assert ll.int_field(start, ll.START, "resume_step") == 40 and ll.int_field(stopped, ll.STOPPED, "step") == 60
    assert ll.int_field(stopped, ll.START, "step") is None and ll.int_field(start, ll.START, "absent") is None
    kubelet = f"2026-01-01T00:00:00.5Z stdout F {stopped}"
    assert ll.int_field(kubelet, ll.STOPPED, "step") is None
    assert ll.int_field(kubelet, ll.STOPPED, "step", prefixed=True) == 60


def test_said_is_a_line_of_a_kind_whose_text_starts_with_a_head():
    watchdog = ll.line(ll.LAUNCHER, text="watchdog: worker 1 stalled")
    assert ll.said(watchdog, ll.LAUNCHER, "watchdog").text.startswith("watchdog")
    assert ll.said(watchdog, ll.LAUNCHER, "hang bound") is None and ll.said(watchdog, ll.ERROR) is None
    saved = ll.line(ll.CHECKPOINT, "saved", step=40, path="/c")
    assert ll.said(saved, ll.CHECKPOINT, "saved").int_field("step") == 40
    assert ll.said(saved, ll.CHECKPOINT, "writing") is None
    failed = ll.line(ll.FAILED, run="r", reason="RestartLimit")
    assert ll.said(failed, ll.FAILED) and ll.said(f"[w-1] {failed}", ll.FAILED) is None
    assert (
        ll.said(f"2026-01-01T00:00:00Z stderr F {failed}", ll.FAILED, prefixed=True).fields["reason"] == "RestartLimit"
    )
