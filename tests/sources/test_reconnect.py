"""Reconnection as a policy: backoff delays, the ReconnectingSource state machine, and the spec fields.

The state machine runs here on a scripted in-memory source (no OpenCV, no network); the same
machine against a real RTSP server is in test_live_sources.py.
"""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from edge_sdk.core.errors import SourceError
from edge_sdk.core.results import Frame, FrameMeta
from edge_sdk.core.status import StatusEvent, StatusKind
from edge_sdk.sources.backoff import BackoffPolicy
from edge_sdk.sources.base import Source
from edge_sdk.sources.image_folder import ImageFolderSource
from edge_sdk.sources.reconnecting import ReconnectingSource, SourceState
from edge_sdk.sources.registry import create_source
from edge_sdk.sources.spec import BufferPolicy, ReconnectSpec, SourceSpec
from edge_sdk.sources.synthetic import PanZoomSource
from edge_sdk.sources.video_file import VideoFileSource

QUICK = BackoffPolicy(initial_delay=0.001, max_delay=0.001, jitter=0.0)
"""Waits too short to notice: these tests are about what happens, not when."""

REFUSE = -1
"""A session whose open() fails."""


@dataclass
class ScriptedSource(Source):
    """A live stand-in that follows a script of sessions, one per open().

    A session is REFUSE (open raises SourceError), or a number of frames to deliver before the
    next read raises SourceError (the stream is lost); `end_after_last` makes the last session end
    with None instead.
    """

    sessions: list[int]
    end_after_last: bool = False
    name: str = "scripted"
    is_live: bool = True
    opens: int = 0
    _session: int = -1
    _left: int = 0
    _inner_index: int = 0
    closed: list[int] = field(default_factory=list)

    def open(self) -> None:
        self._session = self.opens
        self.opens += 1
        if self._session >= len(self.sessions) or self.sessions[self._session] == REFUSE:
            raise SourceError(f"scripted refusal #{self.opens}")
        self._left = self.sessions[self._session]
        self._inner_index = 0  # like a fresh capture: the inner index starts again at 0

    def read(self) -> Frame | None:
        if self._left == 0:
            if self.end_after_last and self._session == len(self.sessions) - 1:
                return None
            raise SourceError(f"scripted loss in session {self._session}")
        self._left -= 1
        image = np.full((4, 6, 3), self._session, dtype=np.uint8)
        meta = FrameMeta(self.name, self._inner_index, 0.0, 6, 4)
        self._inner_index += 1
        return Frame(meta, image)

    def close(self) -> None:
        self.closed.append(self._session)


def kinds(events: list[StatusEvent]) -> list[StatusKind]:
    return [e.kind for e in events]


# --- BackoffPolicy -----------------------------------------------------------------------------------


def test_backoff_policy_when_attempts_grow_doubles_the_delay_until_the_cap() -> None:
    # given the defaults without jitter
    policy = BackoffPolicy(jitter=0.0)

    # when
    delays = [policy.delay(attempt) for attempt in range(1, 9)]

    # then
    assert delays == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0, 10.0], "0.5 s doubling, capped at 10 s"
    assert policy.delay(100_000) == 10.0, "a source retrying for days still waits the cap, no float overflow"


def test_backoff_policy_when_jitter_is_set_spreads_delays_around_the_base_but_never_past_the_cap() -> None:
    # given
    policy = BackoffPolicy(initial_delay=1.0, max_delay=6.0, multiplier=3.0, jitter=0.2)
    rng = random.Random(7)

    # when
    samples = {attempt: [policy.delay(attempt, rng) for _ in range(200)] for attempt in (1, 2, 3)}

    # then
    for attempt, base in ((1, 1.0), (2, 3.0), (3, 6.0)):
        assert all(base * 0.8 <= d <= min(base * 1.2, 6.0) for d in samples[attempt]), (
            f"attempt {attempt}: every delay stays within 20% of {base} s and under the 6 s cap"
        )
        assert len(set(samples[attempt])) > 1, f"attempt {attempt}: jitter really varies the delay"


def test_backoff_policy_when_max_attempts_is_set_allows_exactly_that_many() -> None:
    # given
    limited, forever = BackoffPolicy(max_attempts=3), BackoffPolicy(max_attempts=None)

    # when / then
    assert [limited.allows(n) for n in (1, 2, 3, 4)] == [True, True, True, False], "three attempts, not a fourth"
    assert forever.allows(10**9), "max_attempts=None retries forever"


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        pytest.param({"initial_delay": 0}, "initial_delay > 0", id="zero-initial"),
        pytest.param({"initial_delay": 5, "max_delay": 1}, "max_delay >= initial_delay", id="cap-below-start"),
        pytest.param({"multiplier": 0.5}, "multiplier >= 1", id="shrinking"),
        pytest.param({"max_attempts": 0}, "max_attempts >= 1", id="zero-attempts"),
        pytest.param({"jitter": 1.5}, "jitter between 0 and 1", id="jitter-too-big"),
    ],
)
def test_backoff_policy_when_values_are_invalid_says_what_it_expected(kwargs: dict[str, float], expected: str) -> None:
    # when / then
    with pytest.raises(ValueError, match=expected):
        BackoffPolicy(**kwargs)  # type: ignore[arg-type]


# --- ReconnectingSource state machine ---------------------------------------------------------------


def test_reconnecting_source_when_the_stream_breaks_reopens_and_keeps_one_index_sequence() -> None:
    # given a source that loses its stream twice and is refused a few times in between
    inner = ScriptedSource([3, REFUSE, 2, REFUSE, REFUSE, 4], end_after_last=True)
    events: list[StatusEvent] = []
    source = ReconnectingSource(inner, QUICK, on_status=events.append)

    # when
    with source:
        frames = list(source)

    # then
    assert [f.meta.index for f in frames] == list(range(9)), "3 + 2 + 4 frames, indexed 0..8 across reconnects"
    assert [int(f.image[0, 0, 0]) for f in frames] == [0, 0, 0, 2, 2, 5, 5, 5, 5], (
        "frames come from the sessions that opened, in order"
    )
    assert kinds(events) == [
        StatusKind.SOURCE_CONNECTED,
        StatusKind.SOURCE_LOST,
        StatusKind.SOURCE_RECONNECTING,
        StatusKind.SOURCE_RECONNECTING,
        StatusKind.SOURCE_RECONNECTED,
        StatusKind.SOURCE_LOST,
        StatusKind.SOURCE_RECONNECTING,
        StatusKind.SOURCE_RECONNECTING,
        StatusKind.SOURCE_RECONNECTING,
        StatusKind.SOURCE_RECONNECTED,
        StatusKind.SOURCE_ENDED,
    ], "each loss is reported once, each wait once, each recovery once, and the end"
    attempts = [e.data["attempt"] for e in events if e.kind is StatusKind.SOURCE_RECONNECTING]
    assert attempts == [1, 2, 1, 2, 3], "attempts count up per outage and start again after frames flowed"
    recovered = [e.data["attempts"] for e in events if e.kind is StatusKind.SOURCE_RECONNECTED]
    assert recovered == [2, 3], "a reconnect reports how many attempts it took"
    assert source.state is SourceState.ENDED, "a genuine end is ENDED, not a loss"
    assert all(e.subject == "scripted" for e in events), "events name the source"


def test_reconnecting_source_when_attempts_run_out_reports_failed_and_raises_source_error() -> None:
    # given a source that never opens, allowed three retries
    inner = ScriptedSource([REFUSE] * 10)
    events: list[StatusEvent] = []
    source = ReconnectingSource(inner, BackoffPolicy(0.001, 0.001, jitter=0.0, max_attempts=3), on_status=events.append)

    # when
    with source, pytest.raises(SourceError) as caught:
        source.read()

    # then
    assert kinds(events) == [StatusKind.SOURCE_RECONNECTING] * 3 + [StatusKind.SOURCE_FAILED], (
        "three announced retries, then one FAILED"
    )
    assert events[-1].data["attempts"] == 3, "FAILED says how many attempts were made"
    assert inner.opens == 4, "the first try plus three retries"
    assert "scripted refusal #4" in str(caught.value), "the error carries the last cause"
    assert source.state is SourceState.FAILED
    with pytest.raises(SourceError):
        source.read()  # a failed source stays failed rather than pretending to have ended


def test_reconnecting_source_when_opened_but_no_frame_comes_counts_an_attempt_not_a_connection() -> None:
    # given a first session that opens and then delivers nothing, and a second that works
    inner = ScriptedSource([0, 2], end_after_last=True)
    events: list[StatusEvent] = []
    source = ReconnectingSource(inner, QUICK, on_status=events.append)

    # when
    with source:
        frames = list(source)

    # then
    assert len(frames) == 2, "the second session's frames arrive"
    assert kinds(events) == [StatusKind.SOURCE_RECONNECTING, StatusKind.SOURCE_CONNECTED, StatusKind.SOURCE_ENDED], (
        "an open without a frame is neither 'connected' nor 'lost': only a retry"
    )
    assert events[1].data["attempts"] == 1, "CONNECTED says it took one retry"


def test_reconnecting_source_when_stop_is_already_set_returns_none_without_reading() -> None:
    # given
    stop = threading.Event()
    stop.set()
    inner = ScriptedSource([5])
    source = ReconnectingSource(inner, QUICK, stop=stop)

    # when
    with source:
        frame = source.read()

    # then
    assert frame is None, "a stopped source gives no more frames"


def test_reconnecting_source_when_the_status_callback_raises_keeps_delivering_frames() -> None:
    # given a status consumer that is broken
    def broken(event: StatusEvent) -> None:
        raise RuntimeError("dashboard down")

    source = ReconnectingSource(ScriptedSource([1, 1], end_after_last=True), QUICK, on_status=broken)

    # when
    with source:
        frames = list(source)

    # then
    assert len(frames) == 2, "a failing status callback must not take the camera down"


# --- create_source and SourceSpec -------------------------------------------------------------------


def test_create_source_when_synthetic_is_realtime_wraps_it_and_reports_its_end(tmp_path: Path) -> None:
    # given a short, fast realtime synthetic camera
    events: list[StatusEvent] = []
    spec = SourceSpec(uri="synthetic://?frames=3&size=16x12&fps=1000&realtime=true", name="sim")

    # when
    source = create_source(spec, tmp_path, on_status=events.append)
    with source:
        frames = list(source)

    # then
    assert isinstance(source, ReconnectingSource), "a realtime synthetic camera is live, so it is wrapped"
    assert isinstance(source.inner, PanZoomSource) and source.inner.is_live, "the inner source is the live camera"
    assert [f.meta.index for f in frames] == [0, 1, 2], "frames pass through with their indexes"
    assert kinds(events) == [StatusKind.SOURCE_CONNECTED, StatusKind.SOURCE_ENDED], "a finite camera ends, no retry"


def test_create_source_when_source_is_a_file_folder_or_offline_synthetic_leaves_it_unwrapped(
    tmp_path: Path, small_video: Path
) -> None:
    # given
    (tmp_path / "frames").mkdir()
    specs = {
        VideoFileSource: SourceSpec(uri=str(small_video)),
        ImageFolderSource: SourceSpec(uri="images://frames"),
        PanZoomSource: SourceSpec(uri="synthetic://?frames=2"),
    }

    # when
    sources = {kind: create_source(spec, tmp_path) for kind, spec in specs.items()}

    # then
    for kind, source in sources.items():
        assert type(source) is kind, f"{kind.__name__} is not live and comes back as itself"
        assert source.is_live is False, f"{kind.__name__} reads as fast as the pipeline takes frames"


def test_source_spec_when_reconnect_is_omitted_uses_half_a_second_doubling_to_ten_forever() -> None:
    # when
    policy = SourceSpec(uri="rtsp://cam/1").reconnect.policy()

    # then
    assert (policy.initial_delay, policy.max_delay, policy.multiplier) == (0.5, 10.0, 2.0), (
        "defaults: 0.5 s, doubling, capped at 10 s"
    )
    assert policy.max_attempts is None, "by default a camera is retried forever"


def test_source_spec_when_buffer_is_null_picks_latest_for_live_and_block_for_files() -> None:
    # given
    default, explicit = SourceSpec(uri="x.mp4"), SourceSpec(uri="x.mp4", buffer="latest")  # type: ignore[arg-type]

    # when / then
    assert default.buffer_policy(is_live=True) is BufferPolicy.LATEST, "a live camera drops old frames"
    assert default.buffer_policy(is_live=False) is BufferPolicy.BLOCK, "a file waits: nothing is dropped"
    assert explicit.buffer_policy(is_live=False) is BufferPolicy.LATEST, "an explicit buffer wins"


@pytest.mark.parametrize(
    ("reconnect", "named"),
    [
        pytest.param({"max_attempts": 0}, "max_attempts", id="zero-attempts"),
        pytest.param({"initial_delay": 5, "max_delay": 1}, "max_delay", id="cap-below-start"),
        pytest.param({"jitter": 2}, "jitter", id="jitter-too-big"),
        pytest.param({"retries": 3}, "retries", id="unknown-key"),
    ],
)
def test_source_spec_when_reconnect_is_invalid_rejects_it_naming_the_field(
    reconnect: dict[str, float], named: str
) -> None:
    # given what a pipeline file would hold
    data = {"uri": "rtsp://cam/1", "reconnect": reconnect}

    # when
    with pytest.raises(ValidationError) as caught:
        SourceSpec.model_validate(data)

    # then
    assert named in str(caught.value), f"the error names '{named}'"


def test_source_spec_when_reconnect_is_given_builds_that_policy() -> None:
    # when
    spec = SourceSpec.model_validate({"uri": "rtsp://cam/1", "reconnect": {"initial_delay": 1, "max_attempts": 5}})

    # then
    assert spec.reconnect == ReconnectSpec(initial_delay=1, max_attempts=5), "given fields are taken, others default"
    assert spec.reconnect.policy() == BackoffPolicy(initial_delay=1.0, max_attempts=5), "the spec becomes the policy"


def test_source_spec_when_buffer_is_unknown_rejects_it() -> None:
    # when / then
    with pytest.raises(ValidationError) as caught:
        SourceSpec(uri="x.mp4", buffer="oldest")  # type: ignore[arg-type]
    assert "buffer" in str(caught.value), "the error names the field"
