"""A failed attempt's fingerprint from its output (entrypoint.crashprint), and telling two attempts' output apart."""

from __future__ import annotations

from entrypoint.crashprint import CrashPrint, fingerprint, mask, same


def feed(lines, printed=None):
    printed = printed or CrashPrint()
    for line in lines:
        printed.feed(line)
    return printed


# TensorFlow 2.21's own output for a tf.function that reads past the end of its dataset (captured)
TUTORIAL_TRACEBACK = [
    "I0000 00:00:1796597241.400877    2389 cudart_stub.cc:31] Could not find cuda drivers on your machine.",
    "E0000 00:00:1796597248.297221    2389 cuda_platform.cc:52] failed call to cuInit: UNKNOWN ERROR (303)",
    "Traceback (most recent call last):",
    '  File "/tmp/oor.py", line 7, in <module>',
    "    step(ds)",
    '  File "/venv/lib/python3.11/site-packages/tensorflow/python/eager/execute.py", line 53, in quick_execute',
    "    tensors = pywrap_tfe.TFE_Py_Execute(ctx._handle, device_name, op_name,",
    "  ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
    "tensorflow.python.framework.errors_impl.OutOfRangeError: Graph execution error:",
    "",
    "Detected at node IteratorGetNext defined at (most recent call last):",
    '  File "/tmp/oor.py", line 7, in <module>',
    "",
    '  File "/tmp/oor.py", line 5, in step',
    "",
    "End of sequence",
    "\t [[{{node IteratorGetNext}}]] [Op:__inference_step_10]",
]


def test_a_graph_errors_fingerprint_is_its_class_and_the_cause_below_it():
    printed = feed(TUTORIAL_TRACEBACK)
    assert printed.exception == "tensorflow.python.framework.errors_impl.OutOfRangeError: End of sequence"


def test_the_last_traceback_wins_and_a_chained_one_gives_its_own_line():
    printed = feed(
        [
            "Traceback (most recent call last):",
            '  File "a.py", line 1, in <module>',
            "KeyError: 'x'",
            "",
            "During handling of the above exception, another exception occurred:",
            "",
            "Traceback (most recent call last):",
            '  File "a.py", line 3, in <module>',
            "ValueError: no x in the config",
        ]
    )
    assert printed.exception == "ValueError: no x in the config"


def test_a_line_that_only_mentions_an_error_is_no_exception_but_the_last_error_line():
    printed = feed(["epoch 1", "ERROR: cannot reach the data server", "retrying later"])
    assert printed.exception is None
    assert printed.error_line == "ERROR: cannot reach the data server"


def test_an_exception_named_outside_a_traceback_is_an_error_line():
    assert feed(["ValueError: boom", "done"]).error_line == "ValueError: boom"
    assert feed(["errors_impl loaded"]).error_line == ""


def test_the_trainers_error_line_gives_its_text():
    printed = feed(["tfmw error retryable=false worker=0 DataError: data.path: a.npz is corrupt"])
    assert printed.error_line == "DataError: data.path: a.npz is corrupt"


def test_fingerprint_is_the_exception_else_the_ending_and_the_error_line():
    assert fingerprint("KeyError: 'x'", "training exited with 1", "ERROR: y") == "KeyError: 'x'"
    assert fingerprint(None, "training exited with 1", "ERROR: y") == "training exited with 1: ERROR: y"
    assert fingerprint(None, "training exited with 1") == "training exited with 1"


def test_same_ignores_addresses_and_times_but_not_the_words():
    assert same("RuntimeError: <obj at 0x7f01>", "RuntimeError: <obj at 0x7f99>")
    assert not same("KeyError: 'a'", "KeyError: 'b'")
    assert not same("KeyError: 'a'", None)


def test_two_runs_of_the_same_code_print_the_same_masked_lines():
    assert mask("2026-12-06 22:18:34.123456: I tensorflow/x.cc:12] started") == mask(
        "2026-12-07 01:02:03.999999: I tensorflow/x.cc:12] started"
    )
    assert mask("I0000 00:00:1765059514.1   4242 agent.cc:472] Shutdown.") == "Shutdown."
    assert mask("3/10 ━━━━ 1s 12ms/step - loss: 0.2345") == mask("3/10 ━━━━ 2s 15ms/step - loss: 0.2346")
    assert mask("Epoch 3/10") != mask("Epoch 4/10")  # a counter is progress, not noise


def test_an_attempt_that_prints_nothing_new_is_told_from_one_that_does():
    first = feed(TUTORIAL_TRACEBACK + ["Epoch 1/10", "loss: 0.5"])
    again = feed([line.replace("1796597", "1796600").replace("2389", "5151") for line in TUTORIAL_TRACEBACK])
    assert not again.new_since(first)
    further = feed(TUTORIAL_TRACEBACK + ["Epoch 2/10"])
    assert further.new_since(first)
    assert first.new_since(None)


def test_a_checkpoint_is_progress():
    assert feed(["tfmw checkpoint saved step=100 path=/ckpt/ckpt-2"]).checkpointed
    assert not feed(["saving checkpoint"]).checkpointed


def test_output_too_varied_to_hold_counts_as_new():
    first = feed([f"line {n}" for n in range(5)], CrashPrint(distinct_lines=3))
    again = feed(["line 0"], CrashPrint(distinct_lines=3))
    assert again.new_since(first)  # in doubt: new output, the launcher restarts as before
