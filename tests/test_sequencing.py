"""SourceSequencer: exactly-once, in-order rows per source despite loss, re-sends and restarts."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from edge_runtime.agents.leaf.core.sequencing import SourceSequencer


def rows(start: int, n: int) -> np.ndarray:
    return np.arange(start, start + n, dtype=float).reshape(n, 1)


def applied(blocks: list[np.ndarray]) -> list[int]:
    return [int(v) for block in blocks for v in block[:, 0]]


def test_duplicates_and_overlaps_are_applied_once() -> None:
    seq = SourceSequencer()
    out = (
        seq.offer("s", 0, rows(0, 5), 0.0)
        + seq.offer("s", 3, rows(3, 4), 0.0)
        + seq.offer("s", 0, rows(0, 2), 0.0)
    )
    assert applied(out) == list(range(7))
    assert seq.duplicates == 4
    assert seq.last == {"s": 6}


def test_rows_after_a_gap_wait_for_the_resend_and_come_out_in_order() -> None:
    seq = SourceSequencer()
    out = seq.offer("s", 0, rows(0, 3), 0.0)
    out += seq.offer("s", 5, rows(5, 2), 0.0)  # 3 and 4 lost by the broker
    assert applied(out) == [0, 1, 2]
    assert seq.held_rows == 2
    out += seq.offer("s", 3, rows(3, 2), 0.0)  # the publisher re-sends them
    out += seq.offer("s", 5, rows(5, 2), 0.0)  # and what followed
    assert applied(out) == list(range(7))
    assert seq.gap_rows == 0 and seq.held_rows == 0


def test_a_gap_never_filled_is_given_up_after_the_timeout_and_counted() -> None:
    now = [0.0]
    seq = SourceSequencer(gap_timeout_s=5.0)
    seq.offer("s", 0, rows(0, 2), now[0])
    assert seq.offer("s", 6, rows(6, 2), now[0]) == []
    now[0] = 4.9
    assert seq.expire(now[0]) == []
    now[0] = 5.0
    assert applied(seq.expire(now[0])) == [6, 7]
    assert seq.gap_rows == 4


def test_holding_more_than_the_bound_gives_the_gap_up_at_once() -> None:
    seq = SourceSequencer(max_held_rows=3)
    seq.offer("s", 0, rows(0, 1), 0.0)
    assert seq.offer("s", 5, rows(5, 2), 0.0) == []
    assert applied(seq.offer("s", 7, rows(7, 2), 0.0)) == [5, 6, 7, 8]
    assert seq.gap_rows == 4


def test_a_restored_source_waits_for_the_rows_after_its_checkpoint() -> None:
    seq = SourceSequencer()
    seq.restore({"s": 9})
    assert seq.offer("s", 12, rows(12, 1), 0.0) == []
    assert applied(seq.offer("s", 10, rows(10, 2), 0.0)) == [10, 11, 12]


def test_a_new_source_starts_at_0_so_a_lost_first_batch_is_a_gap_not_a_duplicate() -> None:
    clock = [0.0]
    seq = SourceSequencer(gap_timeout_s=10.0)
    assert seq.offer("t", 2, rows(2, 2), clock[0]) == []  # held: rows 0 and 1 are missing
    assert seq.held_sources() == ["t"]
    assert applied(seq.offer("t", 0, rows(0, 2), clock[0])) == [0, 1, 2, 3]  # the re-send fills it
    assert seq.gap_rows == 0 and seq.duplicates == 0


def test_a_source_that_really_starts_later_is_released_after_the_gap_timeout() -> None:
    clock = [0.0]
    seq = SourceSequencer(gap_timeout_s=10.0)
    assert seq.offer("t", 500, rows(500, 2), clock[0]) == []
    clock[0] = 10.0
    assert applied(seq.expire(clock[0])) == [500, 501]
    assert seq.gap_rows == 500


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 40), st.integers(1, 5)), min_size=1, max_size=40),
    st.randoms(use_true_random=False),
)
def test_any_delivery_with_a_full_resend_at_the_end_applies_every_row_once_in_order(
    chunks: list[tuple[int, int]], rnd
) -> None:
    seq = SourceSequencer(max_held_rows=10_000)
    seq.restore({"s": -1})
    out: list[np.ndarray] = []
    for start, n in chunks:  # arbitrary loss, duplication and order
        out += seq.offer("s", start, rows(start, n), 0.0)
    top = max(start + n for start, n in chunks)
    for start in range(top):  # the publisher re-sends everything, in order
        out += seq.offer("s", start, rows(start, 1), 0.0)
    assert applied(out) == list(range(top))
    assert seq.gap_rows == 0
