"""LeafDelivery: a publisher forgets what is durable and re-sends only what may be lost."""

from __future__ import annotations

from edge_runtime.delivery import LeafDelivery
from edge_runtime.wire import ConfirmMessage

SRC = "replay:pi-01"


def confirm(
    ingested: int, durable: int, *, session: str = "s1", connection: int = 1, gap: int | None = None
) -> ConfirmMessage:
    return ConfirmMessage(
        node_id="pi-01",
        epoch="e",
        session=session,
        connection=connection,
        ingested={SRC: ingested},
        durable={SRC: durable},
        gaps={} if gap is None else {SRC: gap},
    )


def test_progress_in_one_session_re_sends_nothing_and_frees_the_durable_readings() -> None:
    d = LeafDelivery(sent=100)
    d.on_confirm(confirm(49, -1), SRC)
    d.on_confirm(confirm(99, 63), SRC)
    assert d.take_resend() is None
    assert (d.ingested, d.durable, d.unconfirmed()) == (99, 63, 36)


def test_a_reconnected_leaf_gets_everything_above_what_it_ingested() -> None:
    d = LeafDelivery(sent=100)
    d.on_confirm(confirm(49, 20), SRC)
    d.on_confirm(confirm(59, 20, connection=2), SRC)
    assert d.take_resend() == (60, 100)
    assert d.take_resend() is None  # once per request


def test_a_restarted_leaf_is_a_new_session_even_with_the_same_connection_count() -> None:
    d = LeafDelivery(sent=100)
    d.on_confirm(confirm(79, 49), SRC)  # checkpointed up to 49
    d.on_confirm(confirm(49, 49, session="s2"), SRC)  # restarted from that checkpoint
    assert d.take_resend() == (50, 100)


def test_a_reported_gap_is_re_sent_from_its_first_missing_reading_once() -> None:
    d = LeafDelivery(sent=100)
    d.on_confirm(confirm(9, -1), SRC)
    d.on_confirm(confirm(9, -1, gap=10), SRC)
    assert d.take_resend() == (10, 100)
    d.on_confirm(confirm(9, -1, gap=10), SRC)  # the same gap again: already re-sent
    assert d.take_resend() is None
