"""The launcher's reading of a command's raw output: \\r ends a line, the relay is unchanged, lines are capped."""

from __future__ import annotations

from entrypoint.outputlines import OutputLines


def feed_all(chunks, cap=64 * 1024):
    lines, relayed, texts = OutputLines(cap), b"", []
    for chunk in chunks:
        relay, got = lines.feed(chunk)
        relayed, texts = relayed + relay, texts + got
    relay, got = lines.finish()
    return relayed + relay, texts + got, lines


def test_a_carriage_return_ends_a_line_and_the_bytes_pass_unchanged():
    chunks = [b"\r 10%|#  ", b"| 1/10\r 20%|##  | 2/10", b"\r 30%|###", b" | 3/10\n", b"done\r\n"]
    relayed, texts, _ = feed_all(chunks)
    assert relayed == b"".join(chunks)
    assert texts == [" 10%|#  | 1/10", " 20%|##  | 2/10", " 30%|### | 3/10", "done"]


def test_an_unfinished_line_waits_for_its_end_so_nothing_lands_inside_it():
    lines = OutputLines()
    assert lines.feed(b"step 1\npartial") == (b"step 1\n", ["step 1"])
    assert lines.feed(b" line") == (b"", [])
    assert lines.feed(b"\n") == (b"partial line\n", ["partial line"])


def test_the_end_of_the_output_relays_an_unfinished_line():
    relayed, texts, _ = feed_all([b"a\nno newline at the end"])
    assert (relayed, texts) == (b"a\nno newline at the end", ["a", "no newline at the end"])


def test_a_line_past_the_cap_is_relayed_whole_and_read_up_to_the_cap():
    long_line = b"x" * 25
    chunks = [b"before\n", long_line[:10], long_line[10:], b"\nafter\n"]
    relayed, texts, lines = feed_all(chunks, cap=8)
    assert relayed == b"".join(chunks)  # never dropped from the relay
    assert texts == ["before", "x" * 8, "after"]
    assert lines.cut == 1


def test_a_long_line_in_one_chunk_is_cut_too():
    relayed, texts, lines = feed_all([b"y" * 20 + b"\rz\n"], cap=8)
    assert relayed == b"y" * 20 + b"\rz\n"
    assert texts == ["y" * 8, "z"]
    assert lines.cut == 1


def test_the_memory_held_for_an_unfinished_line_is_bounded_by_the_cap():
    lines = OutputLines(cap=8)
    relayed = b""
    for _ in range(100):
        relay, _texts = lines.feed(b"abcdef")
        relayed += relay
        assert len(lines._tail) <= 8 + 6
    assert len(relayed) >= 600 - 14 and lines.cut == 1  # one line, cut once


def test_multibyte_text_split_across_chunks_decodes_whole():
    bar = "█▌ 50%".encode()
    relayed, texts, _ = feed_all([bar[:2], bar[2:], b"\r"])
    assert relayed == bar + b"\r"
    assert texts == ["█▌ 50%"]
