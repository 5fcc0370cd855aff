"""`kvwatch audit` against bad configuration, hostile engines and absurd answers.

The engines here are real HTTP servers on 127.0.0.1 written on sockets, so that each can
misbehave exactly: an endless body, a gzip bomb, a body trickled a byte a second, a 404 sent
late. Each must end within the timeout (plus a margin), with memory bounded by the 64 MB cap,
and become one readable line, never a traceback or a hang. Elapsed times are asserted only as
generous upper bounds (a guard against hanging); what decides is the reason given and how
much the client read.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
import tracemalloc
import zlib
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from collector.audit import AuditPolicy, Deployment, NodeFacts, Target, audit, judge_node
from collector.audit.live import fetch_facts
from tests.test_audit import run

MB = 1 << 20
CAP_MB = 64


def _closed_port() -> int:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = int(probe.getsockname()[1])
    probe.close()
    return port


# --- bad configuration: fail fast, naming the key -------------------------------------------


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://127.0.0.1:99999", "port '99999' is not a number from 1 to 65535"),
        ("http://127.0.0.1:-1", "port '-1' is not a number from 1 to 65535"),
        ("http://127.0.0.1:0", "port 0 is not a number from 1 to 65535"),
        ("http://127.0.0.1:1:1", "port '1:1' is not a number from 1 to 65535"),
        ("http://256.256.256.256", "Invalid IPv4 address"),
        ("http://[::1", "not a URL"),
        ("http://exa mple.com", "host contains a space"),
        ("http://xn--zz.com", "Invalid A-label"),
        ("http://127.0.0.1:30000/?x=1", "without ?query or #fragment"),
    ],
)
def test_malformed_endpoint_is_a_usage_error_naming_it(url: str, why: str) -> None:
    code, out, err = run("--endpoint", f"prefill-0={url}")
    assert (code, out) == (2, "")
    assert err == f"kvwatch audit: --endpoint 'prefill-0={url}': {err.split(': ', 2)[2]}"
    assert why in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:99999", "http://256.256.256.256", "http://127.0.0.1:1:1"]
)
def test_a_fetch_never_raises_for_a_bad_url(url: str) -> None:
    """A URL that skipped `parse_target` (the library API) is unreachable with a reason."""
    (facts,) = fetch_facts([Target("n", url)], timeout=2.0)
    assert facts.unreachable is not None
    assert facts.unreachable.endswith(f"(GET {url}/server_info)")


@pytest.mark.parametrize("value", ["inf", "1e309", "nan", "1e300", "3601"])
def test_timeout_must_be_finite_and_bounded(value: str) -> None:
    # A refused port: were the timeout accepted, the audit would end at once (not hang).
    code, out, err = run("--timeout", value, "--endpoint", f"n=http://127.0.0.1:{_closed_port()}")
    assert (code, out) == (2, "")
    assert err.startswith("kvwatch audit: --timeout ")
    with pytest.raises(ValueError, match="--timeout"):
        fetch_facts([Target("n", "http://127.0.0.1:1")], timeout=float(value))


# A healthy prefill's /server_info: alone, it passes the gate.
_PD_INFO: dict[str, object] = {
    "disaggregation_mode": "prefill",
    "disaggregation_enable_kv_checksum": True,
    "disaggregation_transfer_backend": "mooncake",
    "max_total_num_tokens": 2_400_000,
    "context_length": 1_048_576,
    "version": "0.5.23",
}


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("{url}", "{url}"),
        ("{url}", "HTTP://127.0.0.1:{port}/"),
        ("http://ops:pw@127.0.0.1:{port}", "{url}//"),
        ("http://127.0.0.1", "http://127.0.0.1:80/"),
        ("https://Engine.example", "https://engine.example:443"),
        ("http://[::1]:{port}", "http://[0:0::1]:{port}"),
        ("http://127.0.0.1:{port}", "http://[::ffff:127.0.0.1]:{port}"),  # blind review 58
    ],
)
def test_one_engine_given_under_two_node_names_is_a_usage_error(
    serve: Callable[[dict[str, Behaviour]], _RawServer], first: str, second: str
) -> None:
    """Blind review 46 D5: a runbook's copy-paste gave decode-0 the prefill's URL; the gate
    passed (exit 0) and no decode was audited. Refused as a node named twice is."""
    prefill = serve(_static({"/server_info": _PD_INFO}))
    port = prefill.url.rpartition(":")[2]
    urls = [u.format(url=prefill.url, port=port) for u in (first, second)]
    code, out, err = run("--endpoint", f"prefill-0={urls[0]}", "--endpoint", f"decode-0={urls[1]}")
    assert (code, out) == (2, "")
    shown = urls[0].rstrip("/").replace("ops:pw@", "***@")
    assert err == (
        "kvwatch audit: --endpoint gives one engine's URL to more than one node: prefill-0 "
        f"and decode-0 at {shown} (one engine is one node: give each node its own engine's "
        "URL)\n"
    )
    assert "pw" not in err


# --- hostile engines ------------------------------------------------------------------------


Behaviour = Callable[[socket.socket, "_RawServer"], None]
NOT_FOUND = b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


class _RawServer:
    """An HTTP/1.1 server on 127.0.0.1: `routes` maps a path to what the server does on a
    connection asking for it; other paths get a 404. `sent` counts body bytes sent."""

    def __init__(self, routes: dict[str, Behaviour]) -> None:
        self.routes = routes
        self.sent = 0
        self.stop = threading.Event()
        self._lock = threading.Lock()
        self._conns: list[socket.socket] = []
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self._listener.settimeout(0.05)
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def count(self, n: int) -> None:
        with self._lock:
            self.sent += n

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except (TimeoutError, OSError):
                continue
            self._conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(10)
        try:
            request = b""
            while b"\r\n\r\n" not in request:
                chunk = conn.recv(4096)
                if not chunk:
                    return
                request += chunk
            path = request.split(b" ", 2)[1].decode()
            behaviour = self.routes.get(path)
            if behaviour is None:
                conn.sendall(NOT_FOUND)
            else:
                behaviour(conn, self)
        except OSError:
            pass  # the client hung up: what it is expected to do
        finally:
            conn.close()

    def close(self) -> None:
        self.stop.set()
        self._thread.join(timeout=2)
        for conn in self._conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()
        self._listener.close()


@pytest.fixture
def serve() -> Iterator[Callable[[dict[str, Behaviour]], _RawServer]]:
    started: list[_RawServer] = []

    def start(routes: dict[str, Behaviour]) -> _RawServer:
        server = _RawServer(routes)
        started.append(server)
        return server

    try:
        yield start
    finally:
        for server in started:
            server.close()


def endless(conn: socket.socket, server: _RawServer) -> None:
    """A 200 with no length whose body never ends (stopping, as a safety net, at 512 MB)."""
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n")
    chunk = b"A" * MB
    while server.sent < 512 * MB and not server.stop.is_set():
        conn.sendall(chunk)
        server.count(len(chunk))


def trickle(conn: socket.socket, server: _RawServer) -> None:
    """A 200 announcing 100 bytes, then sending one a second."""
    conn.sendall(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"
    )
    for _ in range(100):
        conn.sendall(b"{")
        server.count(1)
        if server.stop.wait(1.0):
            return


def late_404(conn: socket.socket, server: _RawServer) -> None:
    """A 404, after 1.6 s."""
    server.stop.wait(1.6)
    conn.sendall(NOT_FOUND)


@pytest.fixture(scope="module")
def gzip_bomb() -> bytes:
    """One gzip member inflating to 256 MB of zeros (about 260 KB on the wire)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = bytes(MB)
    return b"".join(packer.compress(zeros) for _ in range(256)) + packer.flush()


def test_endless_body_stops_at_the_cap(
    serve: Callable[[dict[str, Behaviour]], _RawServer],
) -> None:
    """It answered, too much: unusable, not unreachable (blind review 46 D6: "unreachable:
    oversized answer")."""
    server = serve({"/server_info": endless})
    started = time.monotonic()
    code, out, _ = run("--timeout", "20", "--endpoint", f"n={server.url}")
    elapsed = time.monotonic() - started
    url = f"{server.url}/server_info"
    assert out.splitlines()[0] == (
        f"n  unknown  FAIL  unusable: answered more than {CAP_MB} MB, the most the audit reads "
        f"(GET {url})"
    )
    assert code == 1
    # The client hung up at the cap: what the server got out is the cap plus socket buffers,
    # not whatever the timeout let through (a loopback carries gigabytes in 20 s).
    assert CAP_MB * MB <= server.sent < (CAP_MB + 48) * MB
    assert elapsed < 20


def test_a_length_over_the_cap_is_refused_before_reading_and_said_as_answered(
    serve: Callable[[dict[str, Behaviour]], _RawServer],
) -> None:
    """A Content-Length over the cap ends the exchange at the headers; the endpoint answered
    (blind review 46 D6: "unreachable: oversized answer"), on a passing node's line too."""

    def huge(conn: socket.socket, server: _RawServer) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (CAP_MB * MB + 1))

    server = serve({**_static({"/server_info": _PD_INFO}), "/metrics": huge})
    (result,) = audit(targets=[Target("prefill-0", server.url)], timeout=5).results
    assert result.status != "FAIL"  # UNKNOWN only for want of a decode audited beside it
    assert result.notes[-1] == (
        f"endpoints: metrics: answered more than {CAP_MB} MB, the most the audit reads (GET "
        f"{server.url}/metrics)"
    )
    assert server.sent == 0


def test_gzip_bomb_is_inflated_only_up_to_the_cap(
    serve: Callable[[dict[str, Behaviour]], _RawServer], gzip_bomb: bytes
) -> None:
    """Said as the endless body is (blind review 46 D6: "unreachable: oversized answer")."""

    def bomb(conn: socket.socket, server: _RawServer) -> None:
        conn.sendall(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\n"
            b"Content-Length: %d\r\n\r\n" % len(gzip_bomb)
        )
        conn.sendall(gzip_bomb)
        server.count(len(gzip_bomb))

    server = serve({"/server_info": bomb})
    tracemalloc.start()
    try:
        started = time.monotonic()
        report = audit(targets=[Target("n", server.url)], timeout=20)
        elapsed = time.monotonic() - started
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    (result,) = report.results
    url = f"{server.url}/server_info"
    assert result.reasons == [
        f"unusable: answered more than {CAP_MB} MB, the most the audit reads (GET {url})"
    ]
    # Inflated whole, the 256 MB would be held; stopped at the cap, 64 MB and a step are.
    assert peak < CAP_MB * MB * 3 // 2
    assert elapsed < 20


def test_trickled_body_ends_at_the_deadline(
    serve: Callable[[dict[str, Behaviour]], _RawServer],
) -> None:
    server = serve({"/server_info": trickle})
    started = time.monotonic()
    report = audit(targets=[Target("n", server.url)], timeout=1.5)
    elapsed = time.monotonic() - started
    (result,) = report.results
    (reason,) = result.reasons
    url = f"{server.url}/server_info"
    assert reason.startswith("unreachable: answer not complete within 1.5 s (")
    assert reason.endswith(f" bytes of the body read) (GET {url})")
    assert server.sent < 10
    assert elapsed < 1.5 + 3


def test_one_deadline_covers_the_alias_after_a_late_404(
    serve: Callable[[dict[str, Behaviour]], _RawServer],
) -> None:
    """/server_info answers 404 after 1.6 s and /get_server_info trickles: the node's 2 s
    deadline covers both requests (a deadline per request would take 3.6 s)."""
    server = serve({"/server_info": late_404, "/get_server_info": trickle})
    started = time.monotonic()
    report = audit(targets=[Target("n", server.url)], timeout=2.0)
    elapsed = time.monotonic() - started
    (result,) = report.results
    (reason,) = result.reasons
    assert reason.startswith("unreachable: answer not complete within 2 s (")
    assert reason.endswith(f"(GET {server.url}/get_server_info)")
    assert elapsed < 3.2


def test_unsupported_content_encoding_is_named(
    serve: Callable[[dict[str, Behaviour]], _RawServer],
) -> None:
    def brotli(conn: socket.socket, server: _RawServer) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Encoding: br\r\nContent-Length: 3\r\n\r\nabc")

    def bad_gzip(conn: socket.socket, server: _RawServer) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 3\r\n\r\nabc")

    server = serve({"/server_info": brotli, "/v1/models": bad_gzip})
    (facts,) = fetch_facts([Target("n", server.url)], timeout=5)
    assert facts.endpoint_errors["server_info"] == (
        f"answer in an unsupported Content-Encoding 'br' (GET {server.url}/server_info)"
    )
    assert facts.endpoint_errors["v1_models"] == (
        f"answer not valid gzip or deflate (GET {server.url}/v1/models)"
    )


def test_gzip_answer_within_the_cap_is_read(
    serve: Callable[[dict[str, Behaviour]], _RawServer],
) -> None:
    info: dict[str, object] = {
        "disaggregation_mode": "prefill",
        "disaggregation_enable_kv_checksum": True,
        "max_total_num_tokens": 2_400_000,
        "version": "0.5.23",
    }
    models: dict[str, object] = {
        "object": "list",
        "data": [{"id": "m", "max_model_len": 1_048_576}],
    }

    def answer(document: dict[str, object]) -> Behaviour:
        body = zlib.compress(json.dumps(document).encode(), wbits=16 + zlib.MAX_WBITS)

        def send(conn: socket.socket, server: _RawServer) -> None:
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n"
                % len(body)
                + body
            )

        return send

    server = serve({"/server_info": answer(info), "/v1/models": answer(models)})
    decode = serve(
        {
            "/server_info": answer(info | {"disaggregation_mode": "decode"}),
            "/v1/models": answer(models),
        }
    )
    prefill, _ = audit(
        targets=[Target("prefill-0", server.url), Target("decode-0", decode.url)]
    ).results
    assert prefill.status == "PASS"
    assert prefill.reasons[0] == "pool 2,400,000 >= context 1,048,576"


# --- absurd values --------------------------------------------------------------------------


def _info(directory: Path, node: str, document: dict[str, object]) -> None:
    path = directory / f"{node}@20260908T130000Z.server_info.json"
    path.write_text(json.dumps(document))


@pytest.mark.parametrize(
    ("value", "shown"),
    [(-1, "-1"), (0, "0"), (1e308, "1e+308"), (10**13, "10,000,000,000,000")],
)
def test_absurd_pool_and_context_are_unknown_not_passed(
    tmp_path: Path, value: float, shown: str
) -> None:
    _info(
        tmp_path,
        "n-0",
        {"disaggregation_mode": "null", "max_total_num_tokens": value, "context_length": value},
    )
    code, out, _ = run(str(tmp_path))
    assert out.splitlines()[0] == (
        f"n-0  unified  UNKNOWN  pool value {shown} not plausible, context value {shown} not "
        f"plausible"
    )
    assert code == 3  # could not be checked: the gate fails closed
    code, _, _ = run("--strict", str(tmp_path))
    assert code == 1


def test_absurd_values_in_a_prom_snapshot_are_unknown(tmp_path: Path) -> None:
    (tmp_path / "n-0@20260908T130000Z.prom").write_text(
        'sglang:max_total_num_tokens{engine_type="unified",tp_rank="0"} 0\n'
        'sglang:context_len{engine_type="unified",tp_rank="0"} 0\n'
    )
    code, out, _ = run(str(tmp_path))
    assert out.splitlines()[0] == (
        "n-0  unified  UNKNOWN  pool value 0 not plausible, context value 0 not plausible"
    )
    assert code == 3  # could not be checked: the gate fails closed


def test_an_absurd_context_is_not_the_deployments_advertised_context(tmp_path: Path) -> None:
    common: dict[str, object] = {
        "disaggregation_transfer_backend": "mooncake",
        "disaggregation_enable_kv_checksum": True,
        "version": "0.5.23",
    }
    _info(
        tmp_path,
        "prefill-0",
        {
            **common,
            "disaggregation_mode": "prefill",
            "max_total_num_tokens": 2_400_000,
            "context_length": 1_048_576,
        },
    )
    _info(
        tmp_path,
        "decode-0",
        {
            **common,
            "disaggregation_mode": "decode",
            "max_total_num_tokens": 2_400_000,
            "context_length": 10**13,
        },
    )
    code, out, _ = run(str(tmp_path))
    assert out.splitlines()[:2] == [
        "prefill-0  prefill  PASS     pool 2,400,000 >= context 1,048,576; engine 0.5.23; KV "
        "checksum on (verification shows only in the logs: audit them too)",
        "decode-0   decode   UNKNOWN  context value 10,000,000,000,000 not plausible",
    ]
    assert code == 3  # could not be checked: the gate fails closed


def test_facts_built_by_hand_are_checked_too() -> None:
    facts = NodeFacts("n", role="unified", pool_tokens=-1, context_len=-1)
    result = judge_node(facts, Deployment.of([facts]), AuditPolicy())
    assert result.status == "UNKNOWN"
    assert result.reasons == ["pool value -1 not plausible, context value -1 not plausible"]
    assert Deployment.of([NodeFacts("n", context_len=10**13)]).advertised_context is None


@pytest.mark.parametrize(("mode", "shown"), [(5, "5"), ([1], "[1]"), ({}, "{}"), (True, "true")])
def test_wrong_typed_mode_is_an_unknown_role_not_unified(
    tmp_path: Path, mode: object, shown: str
) -> None:
    # Checksum off: judged as PD (unknown role), that fails; misread as unified, it passed.
    _info(
        tmp_path,
        "n-0",
        {
            "disaggregation_mode": mode,
            "disaggregation_enable_kv_checksum": False,
            "max_total_num_tokens": 2_400_000,
            "context_length": 1_048_576,
            "version": "0.5.23",
        },
    )
    code, out, _ = run(str(tmp_path))
    assert out.splitlines()[0] == (
        f"n-0  unknown  FAIL  role unknown (disaggregation_mode {shown} not understood): judged "
        f"as PD; KV checksum off (--disaggregation-enable-kv-checksum not set)"
    )
    assert code == 1


def test_null_mode_is_still_unified(tmp_path: Path) -> None:
    _info(
        tmp_path,
        "n-0",
        {
            "disaggregation_mode": "null",
            "max_total_num_tokens": 2_400_000,
            "context_length": 1_048_576,
            "version": "0.5.23",
        },
    )
    code, out, _ = run(str(tmp_path))
    assert (
        out.splitlines()[0]
        == "n-0  unified  PASS  pool 2,400,000 >= context 1,048,576; engine 0.5.23"
    )
    assert code == 0


def test_wrong_typed_mode_in_v1_loads_is_an_unknown_role(tmp_path: Path) -> None:
    loads = {
        "loads": [{"dp_rank": 0, "max_total_num_tokens": 2_400_000}],
        "disaggregation": {"mode": 5},
    }
    (tmp_path / "n-0@20260908T130000Z.v1_loads.json").write_text(json.dumps(loads))
    _, out, _ = run(str(tmp_path))
    assert out.startswith(
        "n-0  unknown  UNKNOWN  role unknown (disaggregation_mode 5 not understood)"
    )


def _static(documents: dict[str, dict[str, object]]) -> dict[str, Behaviour]:
    def answer(document: dict[str, object]) -> Behaviour:
        body = json.dumps(document).encode()

        def send(conn: socket.socket, server: _RawServer) -> None:
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
                b"Connection: close\r\n\r\n" % len(body) + body
            )

        return send

    return {path: answer(document) for path, document in documents.items()}


def test_live_absurd_values_and_wrong_typed_mode(
    serve: Callable[[dict[str, Behaviour]], _RawServer],
) -> None:
    absurd = serve(
        _static(
            {
                "/server_info": {
                    "disaggregation_mode": "null",
                    "max_total_num_tokens": -1,
                    "context_length": -1,
                }
            }
        )
    )
    odd_mode = serve(
        _static(
            {
                "/server_info": {
                    "disaggregation_mode": [1],
                    "disaggregation_enable_kv_checksum": True,
                    "max_total_num_tokens": 2_400_000,
                    "version": "0.5.23",
                },
                "/v1/models": {"object": "list", "data": [{"id": "m", "max_model_len": 1_048_576}]},
            }
        )
    )
    code, out, _ = run("--endpoint", f"a={absurd.url}", "--endpoint", f"b={odd_mode.url}")
    assert out.splitlines()[:2] == [
        "a  unified  UNKNOWN  pool value -1 not plausible, context value -1 not plausible",
        "b  unknown  UNKNOWN  role unknown (disaggregation_mode [1] not understood): judged as PD",
    ]
    assert code == 3  # could not be checked: the gate fails closed


def test_live_absurd_pool_overrides_a_plausible_one_from_the_logs(
    tmp_path: Path, serve: Callable[[dict[str, Behaviour]], _RawServer]
) -> None:
    """The engine states its pool now: a value that cannot be right is not replaced by what
    an older file said."""
    _info(
        tmp_path,
        "n-0",
        {
            "disaggregation_mode": "null",
            "max_total_num_tokens": 2_400_000,
            "context_length": 1_048_576,
        },
    )
    server = serve(
        _static({"/server_info": {"disaggregation_mode": "null", "max_total_num_tokens": 0}})
    )
    (result,) = audit([tmp_path], [Target("n-0", server.url)]).results
    assert result.status == "UNKNOWN"
    assert result.reasons == ["pool value 0 not plausible"]


_RANKS_BESIDE_A_GARBLED_POOL: dict[str, object] = {
    "disaggregation_mode": "null",
    "max_total_num_tokens": -5,
    "context_length": 1_048_576,
    "internal_states": [{"dp_rank": 0, "memory_usage": {"token_capacity": 2_400_000}}],
}


def test_a_garbled_pool_beside_a_rank_s_plausible_one_is_said_not_judged(
    tmp_path: Path, serve: Callable[[dict[str, Behaviour]], _RawServer]
) -> None:
    """Blind review 58 D4: the rank's pool is the node's; the top-level -5 hid it (UNKNOWN),
    and a 1e300 went unsaid. Saved or live, it is now a note on the node's line."""
    _info(tmp_path, "n-0", _RANKS_BESIDE_A_GARBLED_POOL)
    server = serve(_static({"/server_info": _RANKS_BESIDE_A_GARBLED_POOL}))
    saved = audit([tmp_path]).results[0]
    live = audit(targets=[Target("n-0", server.url)], timeout=5).results[0]
    for result in (saved, live):
        assert result.facts.pool_tokens == 2_400_000
        assert result.status == "PASS"
        note = "pool value -5 not plausible: set aside, the plausible value is judged"
        assert note in result.reasons


def _page(body: bytes, content_type: bytes, status: bytes = b"200 OK") -> Behaviour:
    def send(conn: socket.socket, server: _RawServer) -> None:
        conn.sendall(
            b"HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
            % (status, content_type, len(body))
            + body
        )

    return send


def test_a_target_answering_nothing_an_engine_gives_fails_the_gate(
    serve: Callable[[dict[str, Behaviour]], _RawServer],
) -> None:
    # A login page on every path, and a router's own metrics: answers, but nothing was
    # checked, as for a target that did not answer at all. Both passed the gate (exit 0).
    login = _page(b"<html><body>Sign in</body></html>", b"text/html")
    portal = serve({path: login for path in ("/server_info", "/v1/models", "/metrics")})
    router_metrics = b'sgl_router_requests_total{route="/generate"} 12\n'
    router = serve({"/metrics": _page(router_metrics, b"text/plain; version=0.0.4")})
    # SMG, the gateway now (reference: `smg_*` metrics), proxies its workers' model list.
    models = json.dumps({"object": "list", "data": [{"id": "m", "max_model_len": 1_048_576}]})
    gateway = serve(
        {
            "/metrics": _page(b'smg_http_requests_total{method="POST"} 12\n', b"text/plain"),
            "/v1/models": _page(models.encode(), b"application/json"),
        }
    )
    # An empty JSON object on every path: JSON, but nothing an engine states (review: UNKNOWN).
    empty = _page(b"{}", b"application/json")
    blank = serve({path: empty for path in ("/server_info", "/v1/models", "/metrics")})
    code, out, _ = run(
        "--endpoint", f"p={portal.url}", "--endpoint", f"r={router.url}",
        "--endpoint", f"s={gateway.url}", "--endpoint", f"e={blank.url}",
    )  # fmt: skip
    by_node = {line.split()[0]: " ".join(line.split()) for line in out.splitlines()[:4]}
    portal_line, router_line, gateway_line, blank_line = (by_node[n] for n in "prse")
    assert blank_line.startswith("e unknown FAIL unusable: no SGLang engine answer (")
    assert "server_info: unparseable (no field an engine states)" in blank_line
    assert gateway_line == (
        "s unknown FAIL unusable: a router, not an engine: audit the engines behind it"
    )
    assert portal_line.startswith("p unknown FAIL unusable: no SGLang engine answer (")
    assert "server_info: unparseable (not_json)" in portal_line
    assert router_line == (
        "r unknown FAIL unusable: a router, not an engine: audit the engines behind it"
    )
    assert code == 1


def test_a_node_whose_server_info_failed_says_so_and_fails_closed(
    serve: Callable[[dict[str, Behaviour]], _RawServer],
) -> None:
    # /server_info answers 500, /metrics is fine: pool and context are known, the version is
    # not. The line says why; the gate does not pass it.
    metrics = (
        b'sglang:max_total_num_tokens{engine_type="prefill",tp_rank="0"} 2400000\n'
        b'sglang:context_len{engine_type="prefill",tp_rank="0"} 1048576\n'
    )
    server = serve(
        {
            "/server_info": _page(b"Internal Server Error", b"text/plain", b"500 Internal"),
            "/metrics": _page(metrics, b"text/plain; version=0.0.4"),
        }
    )
    code, out, _ = run("--endpoint", f"prefill-0={server.url}")
    line = " ".join(out.splitlines()[0].split())
    assert line.startswith("prefill-0 prefill UNKNOWN ")
    assert "endpoints: " in line and "server_info: HTTP 500" in line
    assert code == 3
    code, _, _ = run("--allow-unknown", "--endpoint", f"prefill-0={server.url}")
    assert code == 0


def test_a_target_answering_404_everywhere_is_unusable_naming_each_path(
    serve: Callable[[dict[str, Behaviour]], _RawServer],
) -> None:
    """Review: a host answering 404 on every path was "unreachable", naming only the last
    path tried for /server_info. It answered: the wrong service, or the wrong port."""
    nothing = serve({})
    code, out, _ = run("--endpoint", f"n={nothing.url}")
    line = " ".join(out.splitlines()[0].split())
    assert line == (
        f"n unknown FAIL unusable: HTTP 404 (GET {nothing.url}/server_info, "
        f"{nothing.url}/get_server_info)"
    )
    assert code == 1


def test_an_address_whose_endpoints_state_two_releases_is_judged_by_the_older(
    serve: Callable[[dict[str, Behaviour]], _RawServer],
) -> None:
    """A Service in front of a rolling upgrade: `/server_info` from a 0.5.23 engine, `/v1/loads`
    from a 0.5.19 one. Blind review 6a: PASS on "engine 0.5.23"."""
    info = {
        "disaggregation_mode": "decode",
        "disaggregation_enable_kv_checksum": True,
        "disaggregation_transfer_backend": "mooncake",
        "max_total_num_tokens": 2_040_000,
        "context_length": 1_048_576,
        "version": "0.5.23",
    }
    loads = {"version": "0.5.19", "loads": [{"dp_rank": 0, "num_reqs": 0}]}
    mixed = serve(_static({"/server_info": info, "/v1/loads": loads}))
    code, out, _ = run("--endpoint", f"decode-0={mixed.url}")
    line = out.splitlines()[0]
    assert "FAIL" in line and "engine 0.5.19" in line
    assert "the endpoints state 0.5.23 and 0.5.19" in line
    assert code == 1
    same = serve(_static({"/server_info": info, "/v1/loads": {**loads, "version": "0.5.23"}}))
    code, out, _ = run("--endpoint", f"decode-0={same.url}")
    assert "more than one engine" not in out


def _redirect(location: str) -> Behaviour:
    def send(conn: socket.socket, server: _RawServer) -> None:
        conn.sendall(
            b"HTTP/1.1 302 Found\r\nLocation: %s\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            % location.encode()
        )

    return send


def test_a_redirect_is_said_with_where_it_points_and_not_followed(
    serve: Callable[[dict[str, Behaviour]], _RawServer],
) -> None:
    """Blind review 46 D6: a 302 to another engine was "unusable: HTTP 302", saying neither
    that it redirects, nor where, nor that the gate does not follow it. Said now, the
    Location's credentials masked, with the URL to give when it is the same endpoint."""
    engine = serve(_static({"/server_info": _PD_INFO}))
    elsewhere = engine.url.replace("http://", "http://ops:pw@")
    proxy = serve({"/server_info": _redirect(f"{elsewhere}/server_info")})
    portal = serve({"/server_info": _redirect("/login?next=/server_info")})
    code, out, _ = run("--endpoint", f"prefill-0={proxy.url}", "--endpoint", f"p={portal.url}")
    by_node = {line.split()[0]: " ".join(line.split()) for line in out.splitlines()[:2]}
    masked = engine.url.replace("http://", "http://***@")
    assert by_node["prefill-0"] == (
        f"prefill-0 unknown FAIL unusable: HTTP 302, a redirect to {masked}/server_info (GET "
        f"{proxy.url}/server_info); redirects are not followed: if that is the engine, give "
        f"--endpoint NODE={masked}"
    )
    assert by_node["p"] == (
        f"p unknown FAIL unusable: HTTP 302, a redirect to {portal.url}/login?next=/server_info "
        f"(GET {portal.url}/server_info); redirects are not followed"
    )
    assert "pw" not in out
    assert code == 1


class _Quiet(BaseHTTPRequestHandler):
    """A plain-HTTP server's answer to whatever it is sent (a TLS hello: a 400 page)."""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        return


@pytest.fixture
def plain_http() -> Iterator[Callable[[str], int]]:
    """Starts a plain-HTTP listener on 127.0.0.1 and gives its port: `http` answers as an HTTP
    server does (a 400 to a TLS hello), `closing` hangs up on every connection at once."""
    stops: list[Callable[[], None]] = []

    def start(kind: str) -> int:
        if kind == "http":
            server = ThreadingHTTPServer(("127.0.0.1", 0), _Quiet)
            server.daemon_threads = True
            threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
            stops.extend([server.shutdown, server.server_close])
            return int(server.server_address[1])
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        listener.settimeout(0.05)
        done = threading.Event()

        def hang_up() -> None:
            while not done.is_set():
                try:
                    conn = listener.accept()[0]
                except (TimeoutError, OSError):
                    continue
                # Read the ClientHello first: closed with it unread, the kernel resets the
                # connection, and the client sees a reset instead of the end of the stream.
                conn.settimeout(2)
                with contextlib.suppress(OSError):
                    conn.recv(65536)
                conn.close()

        thread = threading.Thread(target=hang_up, daemon=True)
        thread.start()
        stops.extend([done.set, lambda: thread.join(timeout=2), listener.close])
        return int(listener.getsockname()[1])

    try:
        yield start
    finally:
        for stop in stops:
            stop()


@pytest.mark.parametrize(
    ("kind", "openssl"),
    [("closing", "unexpected eof while reading"), ("http", "wrong version number")],
)
def test_https_to_a_plain_http_engine_says_the_tls_handshake_failed(
    plain_http: Callable[[str], int], kind: str, openssl: str
) -> None:
    """Blind review 46 D6: `https://` to a plain-HTTP engine failed with OpenSSL's words alone
    ("[ssl: unexpected_eof_while_reading] eof occurred in violation of protocol")."""
    url = f"https://127.0.0.1:{plain_http(kind)}"
    code, out, _ = run("--timeout", "5", "--endpoint", f"n={url}")
    assert out.splitlines()[0] == (
        f"n  unknown  FAIL  unreachable: TLS handshake failed ({openssl}): the server may not "
        f"speak HTTPS (try http://) (GET {url}/server_info)"
    )
    assert code == 1


# --- what the audit shows of an --endpoint: no credentials, no control characters -----------

SECRET = "s3cretpw"


def _with_credentials(url: str) -> str:
    return url.replace("http://", f"http://ops:{SECRET}@")


def test_credentials_in_an_endpoint_url_are_never_shown(
    serve: Callable[[dict[str, Behaviour]], _RawServer],
) -> None:
    """Blind review 23: `--endpoint n=http://user:pw@host` printed the password, five times
    with --json (its `sources`, its `endpoints`); kvwatch must not become the leak."""
    healthy = serve(
        _static(
            {
                "/server_info": {
                    "disaggregation_mode": "null",
                    "max_total_num_tokens": 2_400_000,
                    "context_length": 1_048_576,
                    "version": "0.5.23",
                }
            }
        )
    )
    down = f"http://127.0.0.1:{_closed_port()}"
    for extra in ((), ("--json",)):
        code, out, err = run(
            "--endpoint",
            f"up={_with_credentials(healthy.url)}",
            "--endpoint",
            f"down={_with_credentials(down)}",
            *extra,
        )
        assert code == 1  # the closed port fails the gate
        assert SECRET not in out + err
        assert "ops:" not in out + err
    # Where the URL is shown, its credentials are masked, not the URL dropped.
    assert f"http://***@{healthy.url.removeprefix('http://')}" in out
    code, out, err = run("--endpoint", f"n={_with_credentials('http://127.0.0.1:99999')}")
    assert code == 2 and "is not a number from 1 to 65535" in err and SECRET not in err


def test_control_characters_in_an_endpoint_name_are_escaped(
    serve: Callable[[dict[str, Behaviour]], _RawServer],
) -> None:
    """Blind review 23: a name holding an escape sequence and a newline printed a fake
    `fake  PASS` line; a name from a file was already escaped."""
    server = serve(_static({"/server_info": {"disaggregation_mode": "null"}}))
    code, out, err = run("--endpoint", f"evil\x1b[31m\nfake  PASS={server.url}")
    assert "\x1b" not in out + err
    assert not any(line.startswith("fake") for line in out.splitlines())
    assert "evil\\x1b[31m\\nfake  PASS" in out


def test_a_pd_role_on_one_endpoint_beats_null_on_another_live_as_from_files(
    tmp_path: Path, serve: Callable[[dict[str, Behaviour]], _RawServer]
) -> None:
    """Blind review 23: /server_info said `disaggregation_mode: "null"`, /metrics'
    `engine_type` and /v1/loads said prefill; live, the node was unified and only warned,
    while the same documents saved failed it as the incident's prefill (0.5.19, pool below
    context)."""
    info = {
        "disaggregation_mode": "null",
        "max_total_num_tokens": 681_280,
        "context_length": 1_048_576,
        "version": "0.5.19",
    }
    metrics = (
        b'sglang:max_total_num_tokens{engine_type="prefill",tp_rank="0"} 681280\n'
        b'sglang:context_len{engine_type="prefill",tp_rank="0"} 1048576\n'
    )
    loads = {
        "version": "0.5.19",
        "loads": [{"dp_rank": 0, "max_total_num_tokens": 681_280}],
        "disaggregation": {"mode": "prefill"},
    }
    server = serve(
        {
            "/server_info": _page(json.dumps(info).encode(), b"application/json"),
            "/metrics": _page(metrics, b"text/plain; version=0.0.4"),
            "/v1/loads": _page(json.dumps(loads).encode(), b"application/json"),
        }
    )
    live_code, live, _ = run("--endpoint", f"n-0={server.url}")
    # The same documents, saved together.
    _info(tmp_path, "n-0", info)
    (tmp_path / "n-0@20260908T130000Z.prom").write_bytes(metrics)
    (tmp_path / "n-0@20260908T130000Z.v1_loads.json").write_text(json.dumps(loads))
    files_code, saved, _ = run(str(tmp_path))
    assert live.split()[:3] == saved.split()[:3] == ["n-0", "prefill", "FAIL"]
    assert live_code == files_code == 1


def test_a_passing_node_whose_metrics_hang_says_so_on_its_line(
    serve: Callable[[dict[str, Behaviour]], _RawServer],
) -> None:
    """Blind review 23: a `/metrics` that never answered was not mentioned on a line that
    passed; what the alerts scrape is down. An endpoint the release lacks (a 404) stays unsaid."""
    info = json.dumps(
        {
            "disaggregation_mode": "prefill",
            "disaggregation_enable_kv_checksum": True,
            "max_total_num_tokens": 2_400_000,
            "context_length": 1_048_576,
            "version": "0.5.23",
        }
    ).encode()

    def hang(conn: socket.socket, server: _RawServer) -> None:
        server.stop.wait(5.0)

    routes = {"/server_info": _page(info, b"application/json")}
    decode = info.replace(b'"prefill"', b'"decode"')
    quiet = serve({"/server_info": _page(decode, b"application/json")})
    hung = serve({**routes, "/metrics": hang})
    code, out, _ = run(
        "--timeout", "0.5", "--endpoint", f"d0={quiet.url}", "--endpoint", f"p1={hung.url}"
    )
    lines = {line.split()[0]: " ".join(line.split()) for line in out.splitlines() if line}
    assert lines["d0"].startswith("d0 decode PASS ")
    assert "endpoints:" not in lines["d0"]
    assert lines["p1"].startswith("p1 prefill PASS ")
    assert f"endpoints: metrics: no answer within 0.5 s (GET {hung.url}/metrics)" in lines["p1"]
    assert code == 0


def test_a_metrics_page_with_a_line_not_in_the_exposition_format_is_said(
    serve: Callable[[dict[str, Behaviour]], _RawServer],
) -> None:
    """Blind review 46 (a note): a `/metrics` page holding a garbage line passed unsaid, where
    Prometheus fails the whole scrape on such a line (Debian's 2.42: the target down on
    `strconv.ParseFloat: parsing "is"`, no sample kept) and the alerts go blind."""
    page = (
        b"# TYPE sglang:num_running_reqs gauge\n"
        b'sglang:num_running_reqs{tp_rank="0"} 3\n'
        b"this is garbage\n"
    )
    server = serve({**_static({"/server_info": _PD_INFO}), "/metrics": _page(page, b"text/plain")})
    (result,) = audit(targets=[Target("prefill-0", server.url)], timeout=5).results
    assert result.notes[-1] == (
        "endpoints: metrics: 1 line not in the exposition format (a Prometheus scrape may fail "
        f"whole on one) (GET {server.url}/metrics)"
    )
    clean = serve(
        {**_static({"/server_info": _PD_INFO}), "/metrics": _page(page[:-16], b"text/plain")}
    )
    (result,) = audit(targets=[Target("prefill-0", clean.url)], timeout=5).results
    assert not any("metrics" in note for note in result.notes)
