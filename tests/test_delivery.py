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


def test_progress_is_a_reading_confirmed_for_the_first_time_never_a_repeat() -> None:
    d = LeafDelivery(sent=100)
    assert d.on_confirm(confirm(49, -1), SRC)
    assert not d.on_confirm(confirm(49, -1), SRC)  # the same again (a rejected re-send)
    assert d.on_confirm(confirm(49, 49), SRC)  # now durable too
    assert not d.on_confirm(confirm(19, 19, session="s2"), SRC)  # restarted: lower
    assert not d.on_confirm(confirm(49, 49, session="s2"), SRC)  # back where it was
    assert d.on_confirm(confirm(50, 49, session="s2"), SRC)


def test_after_the_publisher_reconnects_the_first_confirmation_is_news() -> None:
    d = LeafDelivery(sent=100)  # nothing confirmed yet when the broker went away
    d.reconnected()
    assert d.take_resend() == (0, 100)  # the re-send may reach no subscriber yet
    d.on_confirm(confirm(-1, -1), SRC)  # the leaf is back (its first confirmation)
    assert d.take_resend() == (0, 100)
    d.on_confirm(confirm(99, 99), SRC)
    assert d.take_resend() is None and d.unconfirmed() == 0


def test_resume_continues_after_what_the_leaf_ingested() -> None:
    d = LeafDelivery()
    d.on_confirm(confirm(149, 127), SRC)  # the earlier run's retained confirmation
    d.resume(400)
    assert (d.sent, d.skipped, d.durable, d.unconfirmed()) == (150, 150, 127, 22)
    fresh = LeafDelivery()
    fresh.resume(400)  # no confirmation: from the start
    assert (fresh.sent, fresh.skipped) == (0, 0)
    done = LeafDelivery()
    done.on_confirm(confirm(999, 999), SRC)
    done.resume(400)  # never beyond the readings there are
    assert (done.sent, done.durable) == (400, 399)
