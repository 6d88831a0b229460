"""A private RTSP server for tests: Debian's rtsp-server-perl fed by imageio-ffmpeg's static ffmpeg.

rtsp-server-perl listens on two TCP ports: sources (publishers) ANNOUNCE/RECORD on `source_port`,
readers DESCRIBE/PLAY on `client_port`. It speaks RTP over UDP only (no TCP interleaving), so readers
must ask for `transport=udp`. Each stream and each reader takes two UDP ports counting up from the
RTP start port (20000 unless changed, see PERL_LAUNCHER).

What the fixture runs, on 127.0.0.1 only (R: the first of 64 free UDP ports):

    perl -e 'use RTSP::Server; $RTSP::Server::RTP_START_PORT = shift @ARGV; $| = 1;
             my $script = shift @ARGV; do $script; die $@ if $@;' \
        R /usr/bin/rtsp-server-perl --clientport C --serverport S --client_listen_address 127.0.0.1 \
        --source_listen_address 127.0.0.1 --rtp_start_port R --loglevel 4
    ffmpeg -re -stream_loop -1 -i VIDEO -an -c:v libx264 -preset ultrafast -tune zerolatency \
        -pix_fmt yuv420p -g 10 -f rtsp -rtsp_transport udp rtsp://127.0.0.1:S/PATH

and readers open rtsp://127.0.0.1:C/PATH over UDP. The fixture waits until a minimal reader of its
own (RtspProbe) receives RTP packets. The server keeps the mount of a publisher that died and
answers a new ANNOUNCE on it with 403, so a fresh stream needs a fresh server: restart().
"""

from __future__ import annotations

import contextlib
import random
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

SERVER_BINARY = "rtsp-server-perl"
RTP_PORT_SPAN = 64
"""UDP ports reserved for RTP/RTCP: 2 per published stream and 2 per reader, plenty for a test."""
START_TIMEOUT_S = 15.0
PERL_LAUNCHER = (
    "use RTSP::Server; $RTSP::Server::RTP_START_PORT = shift @ARGV; $| = 1; "
    "my $script = shift @ARGV; do $script; die $@ if $@;"
)
"""Runs the server script with RTP ports really starting at the first argument, and unbuffered logs.

`--rtp_start_port` alone is not enough: RTSP::Server::housekeeping() puts the counter back to the
package default 20000 whenever a connection closes while nothing is mounted (e.g. a readiness
probe), so two servers on one host (parallel test runs) would fight over UDP 20000 and up.
"""


def find_server_binary() -> str | None:
    return shutil.which(SERVER_BINARY) or next(
        (str(p) for p in (Path("/usr/bin") / SERVER_BINARY, Path("/usr/sbin") / SERVER_BINARY) if p.is_file()), None
    )


def find_ffmpeg() -> str | None:
    try:
        import imageio_ffmpeg
    except ImportError:
        return None
    try:
        return str(imageio_ffmpeg.get_ffmpeg_exe())
    except RuntimeError:
        return None


def free_tcp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def free_udp_range(span: int = RTP_PORT_SPAN, tries: int = 50) -> int:
    """An even port P such that P .. P+span-1 are all free for UDP on 127.0.0.1."""
    for _ in range(tries):
        start = random.randrange(30_000, 60_000 - span, 2)
        with contextlib.ExitStack() as stack:
            try:
                for port in range(start, start + span):
                    sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
                    sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return start
    raise RuntimeError(f"no run of {span} free UDP ports found on 127.0.0.1")


def port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


class RtspProbe:
    """A minimal RTSP reader over UDP (DESCRIBE, SETUP, PLAY, one RTP packet, TEARDOWN), so the fixture
    knows a reader would get video without depending on the OpenCV code under test."""

    def __init__(self, port: int, path: str, timeout: float):
        self.base = f"rtsp://127.0.0.1:{port}/{path}"
        self.port = port
        self.timeout = timeout
        self.cseq = 0

    def receives_rtp(self) -> bool:
        try:
            with contextlib.ExitStack() as stack:
                control = stack.enter_context(socket.create_connection(("127.0.0.1", self.port), self.timeout))
                rtp = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
                rtcp = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
                rtp.bind(("127.0.0.1", 0))
                rtp_port = rtp.getsockname()[1]
                rtcp.bind(("127.0.0.1", rtp_port + 1))
                status, _, sdp = self._request(control, "DESCRIBE", self.base, "Accept: application/sdp")
                track = re.search(r"^a=control:(\S+)", sdp, re.MULTILINE)
                if status != 200 or track is None:
                    return False
                url = track[1] if "://" in track[1] else f"{self.base}/{track[1]}"
                transport = f"Transport: RTP/AVP;unicast;client_port={rtp_port}-{rtp_port + 1}"
                status, headers, _ = self._request(control, "SETUP", url, transport)
                session = headers.get("session", "").split(";")[0]
                if status != 200 or not session:
                    return False
                status, _, _ = self._request(control, "PLAY", self.base, f"Session: {session}")
                if status != 200:
                    return False
                rtp.settimeout(self.timeout)
                packet = rtp.recv(2048)
                # rtsp-server-perl does not answer TEARDOWN: send it and go.
                control.sendall(f"TEARDOWN {self.base} RTSP/1.0\r\nCSeq: 9\r\nSession: {session}\r\n\r\n".encode())
                return len(packet) > 12  # an RTP header and some payload
        except OSError:
            return False

    def _request(self, control: socket.socket, method: str, url: str, header: str) -> tuple[int, dict[str, str], str]:
        self.cseq += 1
        control.sendall(f"{method} {url} RTSP/1.0\r\nCSeq: {self.cseq}\r\n{header}\r\n\r\n".encode("ascii"))
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = control.recv(4096)
            if not chunk:
                raise OSError("the server closed the RTSP connection")
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        length = int(headers.get("content-length", "0"))
        while len(body) < length:
            chunk = control.recv(4096)
            if not chunk:
                raise OSError("the server closed the RTSP connection")
            body += chunk
        fields = lines[0].split(" ", 2)
        status = int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else 0
        return status, headers, body.decode("latin-1")


@dataclass
class RtspServer:
    """One server process and one looping publisher; stop(), then start() again keeps the same ports."""

    server_binary: str
    ffmpeg: str
    video: Path
    log_dir: Path
    path: str = "cam"
    client_port: int = field(default_factory=free_tcp_port)
    source_port: int = field(default_factory=free_tcp_port)
    rtp_start_port: int = field(default_factory=free_udp_range)
    _server: subprocess.Popen[bytes] | None = None
    _publisher: subprocess.Popen[bytes] | None = None
    _starts: int = 0

    def url(self, query: str = "transport=udp") -> str:
        """The reader URL; this server only does RTP over UDP."""
        return f"rtsp://127.0.0.1:{self.client_port}/{self.path}" + (f"?{query}" if query else "")

    @property
    def running(self) -> bool:
        return self._server is not None and self._server.poll() is None

    def start(self) -> None:
        """Start the server and the publisher; return once a reader's DESCRIBE gets 200."""
        self._starts += 1
        self._start_server()
        self._start_publisher()

    def _start_server(self) -> None:
        server_log = (self.log_dir / f"server-{self._starts}.log").open("wb")
        self._server = subprocess.Popen(
            [
                "perl",
                "-e",
                PERL_LAUNCHER,
                str(self.rtp_start_port),
                self.server_binary,
                "--clientport",
                str(self.client_port),
                "--serverport",
                str(self.source_port),
                "--client_listen_address",
                "127.0.0.1",
                "--source_listen_address",
                "127.0.0.1",
                "--rtp_start_port",
                str(self.rtp_start_port),
                "--loglevel",
                "4",
            ],
            stdin=subprocess.DEVNULL,
            stdout=server_log,
            stderr=subprocess.STDOUT,
        )
        server_log.close()
        self._wait_for(lambda: port_open(self.source_port) and port_open(self.client_port), "the server's ports")

    def _start_publisher(self) -> None:
        """Start ffmpeg publishing the video; return once a reader receives RTP packets.

        Only on a fresh server: rtsp-server-perl keeps the mount of a killed publisher and answers a
        second ANNOUNCE on it with 403, so a new stream needs a new server (see restart()).
        """
        publisher_log = (self.log_dir / f"publisher-{self._starts}.log").open("wb")
        self._publisher = subprocess.Popen(
            [
                self.ffmpeg,
                "-nostdin",
                "-hide_banner",
                "-loglevel",
                "warning",
                "-re",
                "-stream_loop",
                "-1",
                "-i",
                str(self.video),
                "-an",
                "-c:v",
                "libx264",
                "-preset",
                "ultrafast",
                "-tune",
                "zerolatency",
                "-pix_fmt",
                "yuv420p",
                "-g",
                "10",
                "-f",
                "rtsp",
                "-rtsp_transport",
                "udp",
                f"rtsp://127.0.0.1:{self.source_port}/{self.path}",
            ],
            stdin=subprocess.DEVNULL,
            stdout=publisher_log,
            stderr=subprocess.STDOUT,
        )
        publisher_log.close()
        probe = RtspProbe(self.client_port, self.path, timeout=1.0)
        self._wait_for(probe.receives_rtp, f"RTP packets of /{self.path} reaching a reader")

    def kill(self) -> None:
        """Take the server down hard (SIGKILL), publisher too, as a crashed camera server would go."""
        self._end(signal.SIGKILL)

    def stop(self) -> None:
        self._end(signal.SIGTERM)

    def restart(self) -> None:
        """Kill what is left and start both again on the same ports."""
        self.kill()
        self.start()

    def kill_publisher(self) -> None:
        """Only the publisher goes (SIGKILL): the server stays up, readers stop getting packets."""
        if self._publisher is not None:
            self._publisher.kill()
            self._publisher.wait(timeout=5)
            self._publisher = None

    def _end(self, sig: signal.Signals) -> None:
        for process in (self._publisher, self._server):
            if process is not None and process.poll() is None:
                process.send_signal(sig)
        for process in (self._publisher, self._server):
            if process is None:
                continue
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)
        self._publisher = self._server = None

    def _wait_for(self, ready: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            for process, name in ((self._server, "rtsp-server-perl"), (self._publisher, "ffmpeg publisher")):
                if process is not None and process.poll() is not None:
                    self.stop()
                    raise RuntimeError(
                        f"{name} exited with {process.returncode} while waiting for {what}; {self.logs()}"
                    )
            if ready():
                return
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"{what} was not ready within {START_TIMEOUT_S} s; {self.logs()}")

    def logs(self) -> str:
        texts = [f"{p.name}: {p.read_text(errors='replace')[-2000:]}" for p in sorted(self.log_dir.glob("*.log"))]
        return " | ".join(texts) or "no logs"
