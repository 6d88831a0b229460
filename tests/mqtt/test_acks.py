"""AckBook: acknowledgements meet their waiters whether they arrive before or after the wait starts."""

from __future__ import annotations

import threading

from edge_sdk.mqtt.acks import AckBook


def test_ack_book_when_the_ack_arrives_before_the_claim_still_delivers_it() -> None:
    # given
    book: AckBook[str] = AckBook()
    book.record(7, "ok")

    # when
    value = book.claim(7, timeout=1.0)

    # then
    assert value == "ok", "an early acknowledgement is kept for its caller"
    assert len(book) == 0, "a claimed acknowledgement is forgotten"


def test_ack_book_when_the_ack_arrives_from_another_thread_wakes_the_claim() -> None:
    # given
    book: AckBook[str] = AckBook()
    timer = threading.Timer(0.05, book.record, args=(3, "late"))

    # when
    timer.start()
    value = book.claim(3, timeout=10.0)

    # then
    assert value == "late", "the waiting caller gets the acknowledgement recorded on another thread"


def test_ack_book_when_ignored_drops_the_ack_whether_it_came_before_or_after() -> None:
    # given
    book: AckBook[str] = AckBook()
    book.record(1, "early")

    # when
    book.ignore(1)
    book.ignore(2)
    book.record(2, "late")

    # then
    assert len(book) == 0, "acknowledgements nobody waits for are not kept"


def test_ack_book_when_claim_times_out_returns_none_and_later_ack_is_dropped() -> None:
    # given
    book: AckBook[str] = AckBook()

    # when
    value = book.claim(9, timeout=0.01)
    book.record(9, "too late")

    # then
    assert value is None, "a timed-out claim returns None"
    assert len(book) == 0, "the late acknowledgement is dropped, not kept forever"


def test_ack_book_when_the_connection_is_lost_forgets_qos0_ids_but_waits_for_queued_ones() -> None:
    # given one QoS 0 and one QoS 1 publish nobody waits for
    book: AckBook[str] = AckBook()
    book.ignore(1, lost_with_connection=True)
    book.ignore(2, lost_with_connection=False)

    # when
    book.connection_lost()

    # then
    assert not book.wait_until_settled(0.01), "the QoS 1 message is still outstanding"
    book.record(2, "ok")
    assert book.wait_until_settled(0.01), "once it is acknowledged nothing is outstanding"
    assert len(book) == 0, "the lost QoS 0 id is forgotten"
