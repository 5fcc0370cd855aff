"""`kvwatch audit`: the pre-rollout gate, over hand-written logs and snapshots and live engines.

Expected lines are written by hand from the incident's numbers and the gate's policy
(pool 681,280 < context 1,048,576 is 367,296 tokens, 35% of the window; PD below 0.5.21 fails).
Live engines are real HTTP servers on 127.0.0.1 serving saved documents; the hanging target is
a real socket that accepts and never answers.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from collector.audit import (
    AuditPolicy,
    Deployment,
    NodeFacts,
    Target,
    add_audit_arguments,
    audit,
    parse_target,
    run_audit,
)
from collector.audit.facts import ChecksumEvidence
from collector.audit.policy import CheckResult, NodeResult, engine_check, judge_node
from tests.test_unread_input import _past_path_max

DATA = Path(__file__).parent / "testdata" / "audit"

VERSION_UNKNOWN_LOGS = (
    "engine version unknown (logs do not carry it: save /server_info next to the logs or audit "
    "with --endpoint)"
)
CHECKSUM_UNKNOWN = (
    "KV checksum setting unknown (not stated by server_args or /server_info; engines before "
    "0.5.21 have none)"
)
EXPOSED_THEN = "responses served under it may be exposed (kvwatch forensics names them)"
EARLIER_PREFILL = (
    "an earlier configuration failed until 2026-09-09 19:40:00 UTC: pool 681,280 < context "
    "1,048,576 (35% of the window cannot fit), engine 0.5.19 < 0.5.20 (over-length leak path "
    f"open); {EXPOSED_THEN}"
)
EARLIER_DECODE = (
    "an earlier configuration failed until 2026-09-09 19:40:03 UTC: engine 0.5.19 < 0.5.20 "
    f"(over-length leak path open); {EXPOSED_THEN}"
)

EARLIER_BOTH = (
    "earlier configurations of 2 of 2 nodes failed (prefill-0, decode-0): run kvwatch "
    "forensics over the time they ran"
)

# The healthy deployment known without its logs (live, or from /server_info alone): whether the
# checksum verifies shows only in the logs.
_CHECKSUM_ON = "KV checksum on (verification shows only in the logs: audit them too)"
HEALTHY_WITHOUT_LOGS = [
    f"prefill-0  prefill  PASS  pool 2,040,000 >= context 1,048,576; engine 0.5.23; {_CHECKSUM_ON}",
    f"decode-0   decode   PASS  pool 2,400,000 >= context 1,048,576; engine 0.5.23; {_CHECKSUM_ON}",
    "verdict: PASS - all 2 nodes passed",
]


def run(*argv: str) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser(prog="kvwatch audit")
    add_audit_arguments(parser)
    out, err = io.StringIO(), io.StringIO()
    code = run_audit(parser.parse_args(list(argv)), out, err)
    return code, out.getvalue(), err.getvalue()


def lines(text: str) -> list[str]:
    return text.splitlines()


# --- logs and snapshots ---------------------------------------------------------------------


def test_incident_pair_fails_with_the_numbers() -> None:
    code, out, err = run(str(DATA / "incident"))
    assert lines(out) == [
        "prefill-0  prefill  FAIL  pool 681,280 < context 1,048,576 (35% of the window cannot "
        "fit); engine 0.5.19 < 0.5.20 (over-length leak path open)",
        "decode-0   decode   FAIL  engine 0.5.19 < 0.5.20 (over-length leak path open)",
        "verdict: FAIL - 2 of 2 nodes failed (prefill-0, decode-0); do not roll out",
    ]
    assert code == 1
    assert err == ""


def test_trace_exports_beside_the_logs_add_no_node(tmp_path: Path) -> None:
    """Spans state no configuration and name servers by service and host (`sglang-prefill`):
    audited, each would be one more node of unknown configuration beside the real ones."""
    for path in (DATA / "incident").iterdir():
        (tmp_path / path.name).write_bytes(path.read_bytes())
    span = {
        "traceId": "7872549b202cc6208dd4b27cba5a87ec",
        "spanId": "07af29ca7111370b",
        "name": "prefill Req d9c878df",
        "startTimeUnixNano": "1788674420000000000",
        "endTimeUnixNano": "1788674421535749888",
        "attributes": [
            {"key": "rid", "value": {"stringValue": "d9c878dfe96cf4c5b31439ac796b33c1"}},
            {"key": "module", "value": {"stringValue": "sglang::request"}},
        ],
    }
    export = {"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}
    (tmp_path / "otel_trace.json").write_text(json.dumps(export) + "\n")
    assert run(str(tmp_path)) == run(str(DATA / "incident"))


def test_logs_alone_say_the_version_is_unknown() -> None:
    logs = sorted(str(p) for p in (DATA / "incident").glob("*.log"))
    code, out, _ = run(*logs)
    assert lines(out) == [
        "prefill-0  prefill  FAIL     pool 681,280 < context 1,048,576 (35% of the window "
        f"cannot fit); {VERSION_UNKNOWN_LOGS}; {CHECKSUM_UNKNOWN}",
        f"decode-0   decode   UNKNOWN  {VERSION_UNKNOWN_LOGS}; {CHECKSUM_UNKNOWN}",
        "verdict: FAIL - 1 of 2 nodes failed (prefill-0), 1 unknown (decode-0); do not roll out",
    ]
    assert code == 1


def test_healthy_long_context_deployment_passes() -> None:
    code, out, _ = run(str(DATA / "healthy"))
    assert lines(out) == [
        "prefill-0  prefill  PASS  pool 2,040,000 >= context 1,048,576; engine 0.5.23; "
        "KV checksum on, no skips in the logs",
        "decode-0   decode   PASS  pool 2,400,000 >= context 1,048,576; engine 0.5.23; "
        "KV checksum on, no skips in the logs",
        "verdict: PASS - all 2 nodes passed",
    ]
    assert code == 0
    # --strict changes nothing when everything passes.
    assert run("--strict", str(DATA / "healthy"))[0] == 0


def test_checksum_on_but_skipped_fails_the_decode_node() -> None:
    code, out, _ = run(str(DATA / "checksum_skipped"))
    assert lines(out) == [
        "prefill-0  prefill  PASS  pool 2,040,000 >= context 1,048,576; engine 0.5.23; "
        "KV checksum on, no skips in the logs",
        "decode-0   decode   FAIL  KV checksum skipped for 1 prefill layout (0x9c1d44e2 vs this "
        "decode's 0x3b7a0f15): requests admitted unverified",
        "verdict: FAIL - 1 of 2 nodes failed (decode-0); do not roll out",
    ]
    assert code == 1


def test_checksum_on_one_side_only_fails_both_sides() -> None:
    code, out, _ = run(str(DATA / "one_side"))
    assert lines(out) == [
        "prefill-0  prefill  FAIL  KV checksum on one side only (1 metadata-buffer error in the "
        "logs: transfers unverified)",
        "decode-0   decode   FAIL  KV checksum off here, on for prefill-0 (one side only: "
        "transfers unverified)",
        "verdict: FAIL - 2 of 2 nodes failed (prefill-0, decode-0); do not roll out",
    ]
    assert code == 1


def test_restart_with_bigger_pool_is_judged_on_the_latest_config() -> None:
    code, out, _ = run(str(DATA / "restart"))
    assert lines(out) == [
        "prefill-0  prefill  PASS  pool 2,040,000 >= context 1,048,576; engine 0.5.23; "
        f"KV checksum on, no skips in the logs; {EARLIER_PREFILL}",
        "decode-0   decode   PASS  pool 2,400,000 >= context 1,048,576; engine 0.5.23; "
        f"KV checksum on, no skips in the logs; {EARLIER_DECODE}",
        f"verdict: PASS - all 2 nodes passed; {EARLIER_BOTH}",
    ]
    assert code == 0  # the rollout's verdict is the configuration in force


def test_version_reported_before_a_restart_is_not_trusted_after_it() -> None:
    folder = DATA / "restart"
    paths = sorted(str(p) for p in folder.iterdir() if "20260909T" not in p.name)
    code, out, _ = run(*paths)
    assert lines(out) == [
        "prefill-0  prefill  UNKNOWN  engine version unknown since the restart at 2026-09-09 "
        f"19:40:00 UTC (0.5.19 was reported before it); {EARLIER_PREFILL}",
        "decode-0   decode   UNKNOWN  engine version unknown since the restart at 2026-09-09 "
        f"19:40:03 UTC (0.5.19 was reported before it); {EARLIER_DECODE}",
        "verdict: UNKNOWN - no check failed, but 2 of 2 nodes could not be fully checked "
        "(prefill-0, decode-0); confirm before rolling out (exit 3; --allow-unknown: exit 0); "
        f"{EARLIER_BOTH}",
    ]
    assert code == 3  # nothing failed, but the gate cannot pass what it could not check
    allowed_code, _, _ = run("--allow-unknown", *paths)
    assert allowed_code == 0
    strict_code, strict_out, _ = run("--strict", *paths)
    assert strict_code == 1
    assert lines(strict_out)[-1].endswith(
        f"confirm before rolling out (--strict: exit 1); {EARLIER_BOTH}"
    )


def test_json_output_carries_every_check_with_its_evidence() -> None:
    code, out, _ = run("--json", str(DATA / "incident"))
    data = json.loads(out)
    assert code == 1
    assert data["verdict"] == "FAIL"
    assert data["exit_status"] == 1
    assert data["deployment"]["pd"] is True
    assert data["deployment"]["advertised_context"] == 1_048_576
    prefill, decode = data["nodes"]
    assert (prefill["node"], prefill["role"], prefill["status"]) == ("prefill-0", "prefill", "FAIL")
    pool = prefill["checks"][0]
    assert pool["check"] == "pool" and pool["status"] == "FAIL"
    assert pool["evidence"]["pool_tokens"] == 681_280
    assert pool["evidence"]["context_len"] == 1_048_576
    assert pool["evidence"]["gap_tokens"] == 367_296
    engine = prefill["checks"][1]
    assert engine["status"] == "FAIL" and engine["evidence"]["version"] == "0.5.19"
    assert prefill["config"]["max_total_num_tokens"] == 681_280
    assert decode["node"] == "decode-0" and decode["status"] == "FAIL"
    assert data["input"]["files"]["files"] == 4


def test_restart_json_keeps_the_earlier_configuration() -> None:
    data = json.loads(run("--json", str(DATA / "restart"))[1])
    prefill = data["nodes"][0]
    assert prefill["config"]["generation"] == 1
    assert prefill["config"]["since"] == "2026-09-09T19:40:00.000Z"
    (earlier,) = prefill["earlier"]
    assert earlier["status"] == "FAIL"
    assert earlier["config"]["max_total_num_tokens"] == 681_280
    assert earlier["config"]["version"] == "0.5.19"
    assert earlier["config"]["until"] == "2026-09-09T19:40:00.000Z"


# --- usage and input errors -----------------------------------------------------------------


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    code, out, err = run()
    assert (code, out) == (2, "")
    assert "--endpoint NODE=URL" in err
    code, _, err = run(str(tmp_path / "missing"))
    assert code == 2 and "no such file or folder" in err
    # A running engine's URL where files go (blind review 17): said how to audit it.
    code, _, err = run("http://127.0.0.1:30000")
    assert code == 2 and "is a URL" in err
    assert "--endpoint prefill-0=http://127.0.0.1:30000" in err
    code, _, err = run("--endpoint", "prefill-0")
    assert code == 2 and "expected NODE=URL" in err
    code, _, err = run("--endpoint", "p=ftp://host")
    assert code == 2 and "http://" in err
    code, _, err = run("--endpoint", "p=http://a:1", "--endpoint", "p=http://b:1")
    assert code == 2 and "names a node twice: p" in err
    code, _, err = run("--timeout", "0", "--endpoint", "p=http://a:1")
    assert code == 2 and "--timeout" in err


def test_nothing_to_audit_exits_2(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, err = run(str(empty))
    assert code == 2 and "no telemetry files" in err
    router = tmp_path / "router"
    router.mkdir()
    (router / "router.log").write_text(
        '[2026-04-05 20:02:51] INFO:     127.0.0.1:40052 - "POST /v1/chat/completions '
        'HTTP/1.1" 200 OK\n'
    )
    code, out, err = run(str(router))
    assert (code, out) == (2, "")
    assert "nothing to audit" in err


# --- policy ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "backend", "status", "reason"),
    [
        ("0.5.19", "mooncake", "FAIL", "engine 0.5.19 < 0.5.20 (over-length leak path open)"),
        ("0.5.20rc1", None, "FAIL", "engine 0.5.20rc1 < 0.5.20 (over-length leak path open)"),
        (
            "0.5.20",
            "mooncake",
            "FAIL",
            "engine 0.5.20 < 0.5.21 (abort race open, deferred KV release off by default)",
        ),
        ("0.5.21", "mori", "FAIL", "engine 0.5.21 < 0.5.22 with MORI (abort race open on MORI)"),
        (
            "0.5.21",
            "mooncake",
            "WARN",
            "engine 0.5.21 < 0.5.22 recommended (failed Mooncake sends confirmed as drained)",
        ),
        (
            "0.5.21",
            "nixl",
            "WARN",
            "engine 0.5.21 < 0.5.23 with NIXL (failed sends can be confirmed as drained)",
        ),
        (
            "0.5.22",
            "mori",
            "WARN",
            "engine 0.5.22 < 0.5.23 with MORI (failed sends can be confirmed as drained)",
        ),
        ("0.5.22", "mooncake_tcp", "PASS", "engine 0.5.22"),
        ("0.5.23", "nixl", "PASS", "engine 0.5.23"),
        ("v0.6.0", "mori", "PASS", "engine v0.6.0"),
        ("nightly", "mooncake", "UNKNOWN", "engine version 'nightly' not understood"),
    ],
)
def test_engine_version_policy(version: str, backend: str | None, status: str, reason: str) -> None:
    facts = NodeFacts("prefill-0", role="prefill", version=version, transfer_backend=backend)
    result = engine_check(facts, AuditPolicy(), pd=True)
    assert result is not None
    assert (result.status, result.reason) == (status, reason)


def test_version_policy_does_not_apply_outside_pd() -> None:
    facts = NodeFacts("solo", role="unified", version="0.5.19")
    result = engine_check(facts, AuditPolicy(), pd=False)
    assert result is not None and result.status == "PASS"
    assert engine_check(NodeFacts("solo", role="unified"), AuditPolicy(), pd=False) is None


def test_policy_rejects_unknown_keys_and_bad_versions() -> None:
    with pytest.raises(ValueError, match="extra"):
        AuditPolicy.model_validate({"pd_minimum": "0.5.21", "typo": 1})
    with pytest.raises(ValueError, match="not a version"):
        AuditPolicy(pd_minimum="latest")


def test_checksum_off_is_a_failure_unless_allowed() -> None:
    from collector.audit import judge_node

    facts = NodeFacts(
        "decode-0",
        role="decode",
        version="0.5.23",
        pool_tokens=2_400_000,
        context_len=1_048_576,
        kv_checksum=False,
        logs_read=True,
    )
    prefill = NodeFacts("prefill-0", role="prefill", kv_checksum=False, context_len=1_048_576)
    deployment = Deployment.of([facts, prefill])
    strict = judge_node(facts, deployment, AuditPolicy())
    assert strict.status == "FAIL"
    assert strict.reasons == ["KV checksum off (--disaggregation-enable-kv-checksum not set)"]
    lenient = judge_node(facts, deployment, AuditPolicy(checksum_off="WARN"))
    assert lenient.status == "WARN"


def _snapshot(directory: Path, node: str, role: str, *, checksum: bool) -> None:
    """A saved /server_info + /v1/models pair: engine 0.5.23, pool 2,400,000, context 1M."""
    stem = directory / f"{node}@20261101T100000Z"
    info = {
        "disaggregation_mode": role,
        "disaggregation_transfer_backend": "mooncake",
        "disaggregation_enable_kv_checksum": checksum,
        "max_total_num_tokens": 2_400_000,
        "version": "0.5.23",
    }
    models = {"object": "list", "data": [{"id": "m", "max_model_len": 1_048_576}]}
    (directory / f"{stem.name}.server_info.json").write_text(json.dumps(info))
    (directory / f"{stem.name}.v1_models.json").write_text(json.dumps(models))


def test_checksum_is_compared_only_with_nodes_that_exchange_kv(tmp_path: Path) -> None:
    # KV flows prefill -> decode only: decode-1 receives from prefill-0 (on), never from
    # decode-0, so decode-0's checksum being off is no failure of decode-1.
    _snapshot(tmp_path, "prefill-0", "prefill", checksum=True)
    _snapshot(tmp_path, "decode-0", "decode", checksum=False)
    _snapshot(tmp_path, "decode-1", "decode", checksum=True)
    code, out, _ = run(str(tmp_path))
    on = "KV checksum on (verification shows only in the logs: audit them too)"
    assert lines(out) == [
        "prefill-0  prefill  FAIL  KV checksum on here, off for decode-0 (one side only: "
        "transfers unverified)",
        "decode-0   decode   FAIL  KV checksum off here, on for prefill-0 (one side only: "
        "transfers unverified)",
        f"decode-1   decode   PASS  pool 2,400,000 >= context 1,048,576; engine 0.5.23; {on}",
        "verdict: FAIL - 2 of 3 nodes failed (prefill-0, decode-0); do not roll out",
    ]
    assert code == 1


def test_checksum_peers_by_role() -> None:
    nodes = [
        NodeFacts("prefill-0", role="prefill", kv_checksum=True),
        NodeFacts("prefill-1", role="prefill", kv_checksum=False),
        NodeFacts("decode-0", role="decode", kv_checksum=True),
        NodeFacts("unified-0", role="unified", kv_checksum=False),
    ]
    deployment = Deployment.of(nodes)
    assert deployment.kv_peers("prefill-0", "prefill") == {"decode-0"}
    assert deployment.kv_peers("decode-0", "decode") == {"prefill-0", "prefill-1"}
    assert deployment.kv_peers("unified-0", "unified") == frozenset()
    # Unknown role: judged as PD, the strictest case, so any PD node may be its peer.
    assert deployment.kv_peers("x", None) == {"prefill-0", "prefill-1", "decode-0"}


# --- live endpoints -------------------------------------------------------------------------


def _engine(documents: dict[str, Path]) -> type[BaseHTTPRequestHandler]:
    class Engine(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
            path = documents.get(self.path.split("?", 1)[0])
            if path is None:
                self.send_error(404)
                return
            body = path.read_bytes()
            kind = "text/plain; version=0.0.4" if path.suffix == ".prom" else "application/json"
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            return

    return Engine


class _Servers:
    def __init__(self) -> None:
        self._servers: list[ThreadingHTTPServer] = []

    def start(self, documents: dict[str, Path]) -> str:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _engine(documents))
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
        self._servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    def close(self) -> None:
        for server in self._servers:
            server.shutdown()
            server.server_close()


@pytest.fixture
def servers() -> Iterator[_Servers]:
    pool = _Servers()
    try:
        yield pool
    finally:
        pool.close()


@pytest.fixture
def hanging_url() -> Iterator[str]:
    """A target that accepts connections and never answers."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.05)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except (TimeoutError, OSError):
                continue
            held.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(timeout=2)
        for conn in held:
            conn.close()
        listener.close()


def _closed_port() -> int:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = int(probe.getsockname()[1])
    probe.close()
    return port


HEALTHY = DATA / "healthy"


def test_live_healthy_deployment_passes(servers: _Servers) -> None:
    prefill = servers.start(
        {
            "/server_info": HEALTHY / "prefill-0@20261102T090000Z.server_info.json",
            "/v1/models": HEALTHY / "prefill-0@20261102T090000Z.v1_models.json",
        }
    )
    decode = servers.start(
        {
            "/server_info": HEALTHY / "decode-0@20261102T090000Z.server_info.json",
            "/metrics": HEALTHY / "decode-0@20261102T091500Z.metrics.prom",
        }
    )
    code, out, _ = run("--endpoint", f"prefill-0={prefill}", "--endpoint", f"decode-0={decode}/")
    assert lines(out) == HEALTHY_WITHOUT_LOGS
    assert code == 0


def test_live_incident_node_fails_and_hanging_node_is_unreachable(
    servers: _Servers, hanging_url: str
) -> None:
    live = DATA / "live"
    prefill = servers.start(
        {
            "/server_info": live / "prefill-0.server_info.json",
            "/v1/models": live / "prefill-0.v1_models.json",
            "/metrics": live / "prefill-0.metrics.prom",
        }
    )
    started = time.monotonic()
    code, out, _ = run(
        "--timeout",
        "0.5",
        "--endpoint",
        f"prefill-0={prefill}",
        "--endpoint",
        f"decode-1={hanging_url}",
    )
    elapsed = time.monotonic() - started
    assert lines(out) == [
        "prefill-0  prefill  FAIL  pool 681,280 < context 1,048,576 (35% of the window cannot "
        "fit); engine 0.5.20 < 0.5.21 (abort race open, deferred KV release off by default)",
        f"decode-1   unknown  FAIL  unreachable: no answer within 0.5 s (GET {hanging_url}"
        "/server_info)",
        "verdict: FAIL - 2 of 2 nodes failed (prefill-0, decode-1); do not roll out",
    ]
    assert code == 1
    # All four endpoints are asked at once: the hang costs one timeout, not four.
    assert 0.5 <= elapsed < 1.8


def test_files_of_a_node_whose_endpoint_hangs_are_still_judged_and_said(hanging_url: str) -> None:
    """An endpoint that timed out dropped the node's logs given beside it: the line said only
    "unreachable", and what the logs showed (a pool below context) was lost (review)."""
    logs = sorted((DATA / "incident").glob("*.log"))
    code, out, _ = run(
        "--timeout", "0.5", "--endpoint", f"prefill-0={hanging_url}", *map(str, logs)
    )
    (prefill,) = [line for line in lines(out) if line.startswith("prefill-0")]
    assert prefill.startswith(
        f"prefill-0  prefill  FAIL     unreachable: no answer within 0.5 s (GET {hanging_url}"
        "/server_info); its files say: FAIL pool 681,280 < context 1,048,576 (35% of the "
        "window cannot fit); "
    )
    assert code == 1
    report = audit(logs, [parse_target(f"prefill-0={hanging_url}")], timeout=0.5)
    (node,) = [n for n in report.to_json_dict()["nodes"] if n["node"] == "prefill-0"]
    assert [c["check"] for c in node["checks"]] == ["reachable"]
    (files,) = node["earlier"]
    assert files["status"] == "FAIL" and files["checks"][0]["evidence"]["pool_tokens"] == 681_280


def test_live_refused_connection_is_unreachable() -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    report = audit(targets=[Target("decode-0", url)], timeout=2.0)
    (result,) = report.results
    assert result.status == "FAIL"
    assert result.reasons == [f"unreachable: connection refused (GET {url}/server_info)"]
    assert report.exit_status == 1


def test_live_answers_override_the_logs_of_the_same_node(servers: _Servers) -> None:
    live = DATA / "live"
    prefill = servers.start({"/server_info": live / "prefill-0.server_info.json"})
    logs = sorted((DATA / "incident").glob("*.log"))
    report = audit(logs, [parse_target(f"prefill-0={prefill}")])
    by_node = {r.node: r for r in report.results}
    assert by_node["prefill-0"].reasons == [
        "pool 681,280 < context 1,048,576 (35% of the window cannot fit)",
        "engine 0.5.20 < 0.5.21 (abort race open, deferred KV release off by default)",
    ]
    assert by_node["decode-0"].status == "UNKNOWN"
    assert report.exit_status == 1


def test_building_the_parser_stays_cheap() -> None:
    """The `kvwatch` parser is built for every command; it must not import httpx or pydantic."""
    code = (
        "import sys; from collector.audit import add_audit_arguments; "
        "heavy = [m for m in ('httpx', 'pydantic') if m in sys.modules]; "
        "sys.exit(1 if heavy else 0)"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def _model_snapshot(
    directory: Path, node: str, role: str, *, model: str | None, pool: int, context: int
) -> None:
    """Saved /server_info + /v1/models of an engine 0.5.23 serving `model` (None: a
    /server_info alone, naming no model)."""
    stem = f"{node}@20261101T100000Z"
    info: dict[str, Any] = {
        "disaggregation_mode": role,
        "disaggregation_transfer_backend": "mooncake",
        "disaggregation_enable_kv_checksum": True,
        "max_total_num_tokens": pool,
        "version": "0.5.23",
    }
    (directory / f"{stem}.server_info.json").write_text(
        json.dumps(info if model is None else {**info, "served_model_name": model})
    )
    if model is not None:
        card = {"id": model, "object": "model", "max_model_len": context}
        models = {"object": "list", "data": [card]}
        (directory / f"{stem}.v1_models.json").write_text(json.dumps(models))


def test_each_model_s_nodes_are_judged_against_that_model_s_context(tmp_path: Path) -> None:
    """Two deployments audited from one case folder: a 131,072-token model's prefill pool of
    400,000 holds its own context, whatever the other model advertises. Before, it failed
    "pool 400,000 < context 1,048,576 advertised by big-decode"."""
    for node, role, model, pool, context in (
        ("big-prefill", "prefill", "glm", 681_280, 1_048_576),
        ("big-decode", "decode", "glm", 2_400_000, 1_048_576),
        ("small-prefill", "prefill", "qwen", 400_000, 131_072),
        ("small-decode", "decode", "qwen", 400_000, 131_072),
    ):
        _model_snapshot(tmp_path, node, role, model=model, pool=pool, context=context)
    code, out, _ = run(str(tmp_path))
    verdicts = {line.split()[0]: line.split()[2] for line in lines(out)[:-1]}
    assert verdicts == {
        "big-prefill": "FAIL",
        "big-decode": "PASS",
        "small-prefill": "PASS",
        "small-decode": "PASS",
    }
    assert "pool 681,280 < context 1,048,576" in out and "advertised by" not in out
    assert code == 1

    # A node whose model nothing names is judged against every node: the strictest case.
    _model_snapshot(tmp_path, "unnamed-prefill", "prefill", model=None, pool=400_000, context=0)
    _, out, _ = run(str(tmp_path))
    assert "unnamed-prefill  prefill  FAIL  pool 400,000 < context 1,048,576 advertised by" in out


# --- input the gate could not read ----------------------------------------------------------


def _case_with(tmp_path: Path, source: Path) -> Path:
    case = tmp_path / "case"
    shutil.copytree(source, case)
    return case


def test_a_folder_it_could_not_list_fails_the_gate_closed_whatever_allow_unknown(
    tmp_path: Path,
) -> None:
    """Audit Q: the prefill log it could not read left the node out, and `--allow-unknown`
    passed the gate over the node it never saw."""
    case = _case_with(tmp_path, DATA / "healthy")
    _past_path_max(case)
    code, out, _ = run("--allow-unknown", str(case))
    assert code == 3
    passed_over, verdict = lines(out)[-2:]
    # The folder named by its two ends: nested past the system's limit, it is 4,000 characters.
    assert passed_over.startswith(f"PASSED OVER: 1 folder could not be listed ({str(case)[:40]}")
    assert passed_over.endswith("); what it holds is not in the verdicts.")
    assert len(passed_over) < 300 and "…" in passed_over
    assert verdict == (
        "verdict: UNKNOWN - no check failed, but input could not be read (PASSED OVER); confirm "
        "before rolling out (exit 3, whatever --allow-unknown: make it readable or leave it out)"
    )
    code, out, _ = run("--json", str(case))
    data = json.loads(out)
    assert (code, data["verdict"], data["exit_status"]) == (3, "UNKNOWN", 3)
    assert data["passed_over"].startswith("PASSED OVER: 1 folder could not be listed")
    assert run("--strict", str(case))[0] == 1


def test_a_failing_gate_still_fails_and_says_what_it_passed_over(tmp_path: Path) -> None:
    case = _case_with(tmp_path, DATA / "incident")
    _past_path_max(case)
    code, out, _ = run(str(case))
    assert code == 1
    assert lines(out)[-2].startswith(f"PASSED OVER: 1 folder could not be listed ({str(case)[:40]}")
    assert lines(out)[-1].startswith("verdict: FAIL - 2 of 2 nodes failed")


def test_a_link_to_nowhere_fails_closed(tmp_path: Path) -> None:
    """A node's log linked into a volume that is not mounted is a node no check ran on: said,
    and the gate cannot pass (review: "PASS - all 2 nodes passed" under the PASSED OVER line,
    exit 0). It was said and passed before, as holding no file that could have been read."""
    case = _case_with(tmp_path, DATA / "healthy")
    (case / "prefill-1.log").symlink_to(tmp_path / "lost-mount" / "prefill-1.log")
    code, out, _ = run(str(case))
    assert code == 3
    assert lines(out)[-2] == (
        f"PASSED OVER: 1 link leads nowhere or in a loop ({case / 'prefill-1.log'}); what it "
        "holds is not in the verdicts."
    )
    assert lines(out)[-1].startswith(
        "verdict: UNKNOWN - no check failed, but input could not be read (PASSED OVER)"
    )
    assert run("--allow-unknown", str(case))[0] == 3


@pytest.mark.parametrize(
    ("damage", "reason"),
    [("cut", "truncated_gzip"), ("corrupt", "corrupt_gzip")],
)
def test_an_archive_not_read_whole_fails_closed(tmp_path: Path, damage: str, reason: str) -> None:
    """Review: a third node whose only log was a cut or corrupt `.gz` vanished from the gate,
    "all 2 nodes passed", exit 0, where forensics said the file was not read whole."""
    case = _case_with(tmp_path, DATA / "healthy")
    packed = gzip.compress((DATA / "incident" / "prefill-0.log").read_bytes())
    if damage == "cut":
        packed = packed[:150]
    else:
        packed = packed[:10] + bytes(b ^ 0x5A for b in packed[10:60]) + packed[60:]
    (case / "prefill-1.log.1.gz").write_bytes(packed)
    _fails_closed_not_read_whole(case, reason, case / "prefill-1.log.1.gz")


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("prefill-1-logs.tar.gz", "1 archive was not opened"),
        ("prefill-1-logs.zip", "1 archive was not opened"),
        ("prefill-1.csv", "1 CSV export was not read"),
    ],
)
def test_a_bundle_or_export_not_opened_fails_closed(tmp_path: Path, name: str, said: str) -> None:
    """Blind review 58 D1: a third node's failing logs in a `.tar.gz` or `.zip` beside two
    passing nodes: "PASS - all 2 nodes passed", exit 0, where forensics said ARCHIVES."""
    case = _case_with(tmp_path, DATA / "healthy")
    assert run(str(case))[0] == 0
    (case / name).write_bytes(gzip.compress((DATA / "incident" / "prefill-0.log").read_bytes()))
    code, out, _ = run("--allow-unknown", str(case))
    assert code == 3
    assert lines(out)[-2] == (
        f"PASSED OVER: {said} ({case / name}): extract archives and pass the folders; what "
        "they hold is not in the verdicts."
    )
    assert lines(out)[-1].startswith("verdict: UNKNOWN")


def test_a_node_whose_log_states_no_configuration_is_passed_over(tmp_path: Path) -> None:
    """Blind review 58 D5: a third node whose log held `Decode batch` lines alone (its role,
    nothing the gate checks) was a line of unknowns, which --allow-unknown passed (exit 0)."""
    case = _case_with(tmp_path, DATA / "healthy")
    (batch,) = [
        line
        for line in (DATA / "healthy" / "decode-0.log").read_text().splitlines(keepends=True)
        if "Decode batch" in line
    ]
    (case / "decode-1.log").write_text(batch * 8)
    code, out, _ = run("--allow-unknown", str(case))
    assert code == 3
    assert not any(line.startswith("decode-1 ") for line in lines(out))
    assert lines(out)[-2] == (
        "PASSED OVER: decode-1: no engine configuration read (no server_args, capacity line, "
        "pool or context metric, /server_info): not judged."
    )


def _fails_closed_not_read_whole(case: Path, reason: str, path: Path) -> None:
    code, out, _ = run(str(case))
    assert code == 3
    assert lines(out)[-2] == (
        f"PASSED OVER: 1 file was not read whole ({reason} 1: {path}); "
        "what they held past the damage is not in the verdicts."
    )
    assert lines(out)[-1].startswith("verdict: UNKNOWN")


@pytest.mark.parametrize(
    "encode",
    [
        # Three bytes a character: no text form kvwatch reads (UTF-32 and UTF-16 are read).
        lambda text: b"".join(char.encode() + b"\0\0" for char in text if char.isascii()),
        lambda text: bytes(range(256)) * 40,  # not a log at all
    ],
    ids=["unread-wide-form", "binary"],
)
def test_a_log_read_as_junk_fails_closed(tmp_path: Path, encode: Callable[[str], bytes]) -> None:
    """Blind review 13e D1: a third node's log in an encoding not read (UTF-32 and BOM-less
    UTF-16-BE then, both read since) had every line dropped as binary, and the gate said "all
    2 nodes passed", exit 0."""
    case = _case_with(tmp_path, DATA / "healthy")
    assert run(str(case))[0] == 0
    log = (DATA / "incident" / "prefill-0.log").read_text()
    (case / "prefill-1.log").write_bytes(encode(log))
    _fails_closed_not_read_whole(case, "undecodable", case / "prefill-1.log")


def test_no_files_found_where_they_could_not_be_read_says_so(tmp_path: Path) -> None:
    case = tmp_path / "case"
    case.mkdir()
    _past_path_max(case, log="prefill-0.log")
    code, out, err = run(str(case))
    assert (code, out) == (2, "")
    said, passed_over = err.splitlines()
    assert said == f"kvwatch audit: no telemetry files found in {case}"
    assert passed_over.startswith(f"PASSED OVER: 1 folder could not be listed ({str(case)[:40]}")
    assert passed_over.endswith("); what it holds is not in the verdicts.")


def test_server_info_alone_states_the_context_through_the_prompt_limit(tmp_path: Path) -> None:
    """Audit V: /server_info leaves `context_length` null (the flag, unset), and a healthy
    deployment saved that way alone was UNKNOWN, "context unknown". Its `max_req_input_len`
    1,048,570 is 6 below the context wherever the pool is larger."""
    for saved in (DATA / "healthy").glob("*.server_info.json"):
        shutil.copy(saved, tmp_path / saved.name)
    code, out, _ = run(str(tmp_path))
    assert lines(out) == HEALTHY_WITHOUT_LOGS
    assert code == 0


def test_a_pool_sharded_over_dcp_ranks_passes_against_the_context(tmp_path: Path) -> None:
    """`--dcp-size 2` shards one request's KV over two ranks: the engine states it takes prompts
    up to 1,048,570 tokens, so the context fits, whatever the pool figure means on its
    release (per rank before 0.5.21, over the ranks since: audit T)."""
    saved = json.loads(
        (DATA / "healthy" / "prefill-0@20261102T090000Z.server_info.json").read_text()
    )
    saved.update(max_total_num_tokens=681_280, max_req_input_len=1_048_570, dcp_size=2)
    (tmp_path / "prefill-0@20261102T090000Z.server_info.json").write_text(json.dumps(saved))
    shutil.copy(
        DATA / "healthy" / "decode-0@20261102T090000Z.server_info.json",
        tmp_path / "decode-0@20261102T090000Z.server_info.json",
    )
    code, out, _ = run(str(tmp_path))
    assert lines(out)[0] == (
        "prefill-0  prefill  PASS  max_req_input_len 1,048,570 + 6 >= context 1,048,576; "
        f"engine 0.5.23; {_CHECKSUM_ON}"
    )
    assert code == 0


def test_a_decode_that_reads_signed_digests_behind_a_prefill_that_writes_none_fails(
    tmp_path: Path,
) -> None:
    """Audit T: a 0.5.23 decode skips, without a word, every digest without a layout signature,
    which is every digest a 0.5.22 prefill writes: the checksum is on on both sides and
    verifies nothing. The same pair on one release passes."""
    for node, version in (("prefill-0", "0.5.22"), ("decode-0", "0.5.23")):
        name = f"{node}@20261102T090000Z.server_info.json"
        saved = json.loads((DATA / "healthy" / name).read_text())
        saved.update(version=version)
        (tmp_path / name).write_text(json.dumps(saved))
    code, out, _ = run("--json", str(tmp_path))
    nodes = {n["node"]: n for n in json.loads(out)["nodes"]}
    (failed,) = [c for c in nodes["decode-0"]["checks"] if c["status"] == "FAIL"]
    assert failed["check"] == "checksum"
    assert failed["reason"].startswith("KV checksum cannot verify transfers from prefill-0")
    assert failed["evidence"]["unsigned_peers"] == ["prefill-0"]
    assert code == 1
    # Upgraded prefill: both sign, and nothing fails.
    name = "prefill-0@20261102T090000Z.server_info.json"
    shutil.copy(DATA / "healthy" / name, tmp_path / name)
    assert run(str(tmp_path))[0] == 0


def test_quiet_logs_of_a_release_that_logs_no_skips_are_not_said_to_show_verification() -> None:
    """Audit T: 0.5.21 and 0.5.22 log no skipped verification at all, so their quiet logs
    prove nothing; 0.5.23 logs every skip, and its quiet logs do."""
    from collector.audit.facts import Deployment, NodeFacts
    from collector.audit.policy import AuditPolicy, checksum_checks

    def passed(version: str) -> str:
        facts = NodeFacts(node="decode-0", role="decode", version=version, kv_checksum=True)
        facts.logs_read = True
        prefill = NodeFacts(node="prefill-0", role="prefill", version=version, kv_checksum=True)
        (result,) = checksum_checks(facts, Deployment.of([facts, prefill]), AuditPolicy())
        assert result.status == "PASS"
        return result.reason

    assert passed("0.5.22") == "KV checksum on (0.5.22 logs no skipped verification)"
    assert passed("0.5.23") == "KV checksum on, no skips in the logs"


@pytest.mark.parametrize(
    ("version", "changes", "verdict", "said"),
    [
        # Audit T: 0.5.21 on reports the pool over its dcp ranks ("The runner already reports
        # logical DCP capacity"), and states the limit that pool gives: the incident's gap.
        (
            "0.5.23",
            {"dcp_size": 8, "max_req_input_len": 681_274},
            "FAIL",
            "max_req_input_len 681,274 + 6 < context 1,048,576",
        ),
        # The same figures without the limit: the release says the pool counts the ranks.
        ("0.5.23", {"dcp_size": 8}, "FAIL", "pool 681,280 (over its 8 dcp ranks) < context"),
        # Before 0.5.21 the pool is one rank's: two of them hold the context.
        ("0.5.19", {"dcp_size": 2}, "PASS", "pool 681,280 x dcp 2 >= context 1,048,576"),
        # No release known: which it is cannot be told, and the gate does not pass on a guess.
        (None, {"dcp_size": 2}, "UNKNOWN", "pool 681,280 x dcp 2 (per rank, if before 0.5.21)"),
        # `--enable-kv-cache-sharding` (0.5.22 on) widens what the pool figure says; the
        # limit it states shows the context fits.
        (
            "0.5.23",
            {"enable_kv_cache_sharding": True, "max_req_input_len": 1_048_570},
            "PASS",
            "max_req_input_len 1,048,570 + 6 >= context",
        ),
        (
            "0.5.23",
            {"enable_kv_cache_sharding": True},
            "UNKNOWN",
            "widened by KV cache sharding",
        ),
    ],
)
def test_what_a_pool_holds_of_one_prompt_depends_on_the_release_and_its_sharding(
    tmp_path: Path, version: str | None, changes: dict[str, Any], verdict: str, said: str
) -> None:
    saved = json.loads(
        (DATA / "healthy" / "prefill-0@20261102T090000Z.server_info.json").read_text()
    )
    saved.update(max_total_num_tokens=681_280, max_req_input_len=None, version=version)
    saved.update(changes)
    (tmp_path / "prefill-0@20261102T090000Z.server_info.json").write_text(json.dumps(saved))
    shutil.copy(
        DATA / "healthy" / "decode-0@20261102T090000Z.server_info.json",
        tmp_path / "decode-0@20261102T090000Z.server_info.json",
    )
    _, out, _ = run("--json", str(tmp_path))
    (prefill,) = [n for n in json.loads(out)["nodes"] if n["node"] == "prefill-0"]
    (pool,) = [c for c in prefill["checks"] if c["check"] == "pool"]
    assert pool["status"] == verdict
    assert said in pool["reason"]


def test_a_failing_line_leads_with_what_fails_and_says_a_warning_is_one() -> None:
    """Review (abort race): "FAIL  engine 0.5.21 < 0.5.22 recommended (...); KV checksum off"
    read as if the upgrade, a WARN, blocked the rollout; upgrading alone would still fail."""
    checks = (
        CheckResult("pool", "PASS", "pool 1,500,000 >= context 262,144"),
        CheckResult("engine", "WARN", "engine 0.5.21 < 0.5.22 recommended"),
        CheckResult("checksum", "FAIL", "KV checksum off"),
    )
    result = NodeResult("decode-0", "decode", "FAIL", checks, (), NodeFacts("decode-0"))
    assert result.reasons == ["KV checksum off", "WARN: engine 0.5.21 < 0.5.22 recommended"]
    warned = NodeResult("decode-0", "decode", "WARN", checks[:2], (), NodeFacts("decode-0"))
    assert warned.reasons == ["engine 0.5.21 < 0.5.22 recommended"]


def test_corruptions_an_earlier_configuration_caught_are_said_on_the_node_s_line() -> None:
    """Review (abort race): 11 mismatches the checksum caught before a restart turned it off
    were only in --json, the earlier configuration having merely warned; forensics named 9
    responses exposed in the same files."""
    deployment = Deployment(pd=True, advertised_context=262_144, advertised_by="decode-0")
    common = {"node": "decode-0", "role": "decode", "version": "0.5.22", "pool_tokens": 1_500_000}
    common |= {"context_len": 262_144, "transfer_backend": "mooncake", "logs_read": True}
    before = NodeFacts(
        **common, kv_checksum=True, until=1789887900.0, evidence=ChecksumEvidence(mismatches=11)
    )
    now = NodeFacts(**common, kv_checksum=False, generation=1, since=1789887900.0)
    result = judge_node(now, deployment, AuditPolicy(), earlier=[(before, deployment)])
    assert result.reasons[-1] == (
        "an earlier configuration until 2026-09-20 07:05:00 UTC caught 11 KV checksum "
        "mismatches (corrupted transfers; kvwatch forensics names the responses exposed around "
        "them)"
    )
    quiet = NodeFacts(**common, kv_checksum=True, until=1789887900.0)
    assert not any(
        "caught" in r
        for r in judge_node(now, deployment, AuditPolicy(), earlier=[(quiet, deployment)]).reasons
    )


def test_an_earlier_failure_is_said_only_where_it_ended_and_as_exposing_only_where_it_could() -> (
    None
):
    """Blind review 45 D3: "an earlier configuration failed until 10:00: engine 0.5.19 ...;
    responses served under it may be exposed" of a decode that ran 0.5.19 after 10:00 too, and
    of a configuration whose only failure, the checksum off, exposes nothing."""
    deployment = Deployment(pd=True, advertised_context=1_048_576, advertised_by="decode-0")
    common = {"node": "decode-0", "role": "decode", "transfer_backend": "mooncake"}
    common |= {"context_len": 1_048_576, "logs_read": True, "kv_checksum": False}
    before = NodeFacts(**common, version="0.5.19", pool_tokens=2_040_000, until=1788256800.0)
    now = NodeFacts(**common, version="0.5.19", pool_tokens=2_040_000, generation=1)
    still = judge_node(now, deployment, AuditPolicy(), earlier=[(before, deployment)])
    assert still.status == "FAIL"
    assert not any("earlier configuration" in r for r in still.reasons)
    # Upgraded since: that failure ended, and such an engine could have exposed responses.
    fixed = replace(now, version="0.5.23")
    (said,) = [
        r
        for r in judge_node(
            fixed, deployment, AuditPolicy(), earlier=[(before, deployment)]
        ).reasons
        if "earlier configuration" in r
    ]
    assert said.startswith("an earlier configuration failed until 2026-09-01 10:00:00 UTC: engine")
    assert said.endswith(EXPOSED_THEN)
    # Only the checksum was off before, and it is on now: unverified, not exposed.
    off_before = replace(before, version="0.5.23")
    on_now = replace(fixed, kv_checksum=True)
    (said,) = [
        r
        for r in judge_node(
            on_now, deployment, AuditPolicy(), earlier=[(off_before, deployment)]
        ).reasons
        if "earlier configuration" in r
    ]
    assert "KV checksum off" in said and "exposed" not in said


@pytest.mark.parametrize(
    ("field", "prefill", "decode"),
    [("tp_size", 8, 4), ("pp_size", 2, 1), ("page_size", 64, 1)],
)
def test_a_checksum_between_kv_layouts_that_differ_verifies_nothing(
    tmp_path: Path, field: str, prefill: int, decode: int
) -> None:
    """Blind review 46 D1: a TP 8 prefill and a TP 4 decode, both 0.5.23 with the checksum on,
    passed with "KV checksum on, no skips in the logs". Decode skips a digest of another layout
    (TP width, PP stage, page size) and logs so once, after the first: a gate run before traffic
    sees no such line, but the configurations it reads already say it."""
    for path in (DATA / "healthy").iterdir():
        shutil.copy(path, tmp_path / path.name)
    for node, value in (("prefill-0", prefill), ("decode-0", decode)):
        saved = tmp_path / f"{node}@20261102T090000Z.server_info.json"
        saved.write_text(json.dumps(json.loads(saved.read_text()) | {field: value}))
    code, out, _ = run(str(tmp_path))
    prefill_line, decode_line, _ = lines(out)
    assert code == 1
    assert prefill_line.startswith(
        f"prefill-0  prefill  FAIL  KV checksum cannot verify transfers to decode-0 ({field} "
        f"{decode} there, {prefill} here)"
    )
    assert decode_line.startswith(
        f"decode-0   decode   FAIL  KV checksum cannot verify transfers from prefill-0 ({field} "
        f"{prefill} there, {decode} here)"
    )
    # The same layout on both sides, as the healthy pair states it: verified.
    for node in ("prefill-0", "decode-0"):
        saved = tmp_path / f"{node}@20261102T090000Z.server_info.json"
        saved.write_text(json.dumps(json.loads(saved.read_text()) | {field: prefill}))
    assert run(str(tmp_path))[0] == 0


def test_a_stated_prompt_limit_below_the_pool_and_the_context_fails_the_pool_check(
    tmp_path: Path,
) -> None:
    """Blind review 46 D2: a prefill stating `max_req_input_len` 681,274 beside its 2,040,000
    pool and a 1M context passed; it refuses a third of the window."""
    for path in (DATA / "healthy").iterdir():
        shutil.copy(path, tmp_path / path.name)
    saved = tmp_path / "prefill-0@20261102T090000Z.server_info.json"
    saved.write_text(json.dumps(json.loads(saved.read_text()) | {"max_req_input_len": 681_274}))
    code, out, _ = run(str(tmp_path))
    assert code == 1
    assert lines(out)[0].startswith(
        "prefill-0  prefill  FAIL  max_req_input_len 681,274 + 6 (pool 2,040,000) < context "
        "1,048,576 (35% of the window cannot fit)"
    )


def test_two_tiers_of_one_model_each_holding_its_own_context_pass(tmp_path: Path) -> None:
    """Blind review 46 D4: a 1M tier and a 512k tier of one model, each pool holding the
    context its nodes serve, failed each other: "pool 681,280 < context 1,048,576 advertised by
    a-decode-0". A node's own tokenizer refuses a prompt over its context (HTTP 400) before any
    scheduler sees it, so nothing is handed to decode; a pool under its own context still
    fails."""
    source = DATA / "healthy" / "prefill-0@20261102T090000Z.server_info.json"
    info = json.loads(source.read_text())

    def save(node: str, role: str, pool: int, context: int) -> None:
        states = [{"disaggregation_mode": role, "memory_usage": {"token_capacity": pool}}]
        document = info | {"disaggregation_mode": role, "max_total_num_tokens": pool}
        document |= {"context_length": context, "max_req_input_len": min(context, pool) - 6}
        document["internal_states"] = states
        saved = tmp_path / f"{node}@20261102T090000Z.server_info.json"
        saved.write_text(json.dumps(document))

    for tier, pool, context in (("a", 2_040_000, 1_048_576), ("b", 681_280, 524_288)):
        save(f"{tier}-prefill-0", "prefill", pool, context)
        save(f"{tier}-decode-0", "decode", pool, context)
    code, out, _ = run(str(tmp_path))
    assert code == 0, out
    said = {line.split()[0]: line for line in lines(out)}
    assert (
        "pool 681,280 >= context 524,288 (its own; 1,048,576 advertised by a-"
        in (said["b-prefill-0"])
    )
    # Tier B's prefill pool under its own context: the incident's gap, whatever tier A says.
    save("b-prefill-0", "prefill", 400_000, 524_288)
    code, out, _ = run(str(tmp_path))
    assert code == 1
    assert "b-prefill-0  prefill  FAIL  pool 400,000 < context 1,048,576" in out


def test_a_checksum_with_no_node_of_the_other_role_audited_is_not_known_to_verify(
    tmp_path: Path,
) -> None:
    """Blind review 46 D3: a decode with the checksum on, audited without its prefills, passed:
    it verifies only if they run it too, which nothing audited states."""
    for path in (DATA / "healthy").iterdir():
        if path.name.startswith("decode-0"):
            shutil.copy(path, tmp_path / path.name)
    code, out, _ = run(str(tmp_path))
    assert (code, lines(out)[0]) == (
        3,
        "decode-0  decode  UNKNOWN  KV checksum on here, no prefill node audited (verified only "
        "if prefill runs it too: audit it with this node)",
    )


def test_a_node_whose_role_nothing_states_is_a_checksum_peer_not_an_absent_one(
    tmp_path: Path,
) -> None:
    """Blind review 46 F11: a decode audited beside `prefill-0`, whose saved /server_info states
    no disaggregation mode, said "no prefill node audited". That node may be its prefill: the
    decode's checksum verifies if that node runs it too, so its setting decides."""
    for path in (DATA / "healthy").iterdir():
        if path.name.startswith("decode-0"):
            shutil.copy(path, tmp_path / path.name)
    source = DATA / "healthy" / "prefill-0@20261102T090000Z.server_info.json"
    info = json.loads(source.read_text())
    info.pop("disaggregation_mode")
    for state in info["internal_states"]:
        state.pop("disaggregation_mode")
    saved = tmp_path / source.name
    saved.write_text(json.dumps(info))
    code, out, _ = run(str(tmp_path))
    said = {line.split()[0]: line for line in lines(out)}
    assert code == 3
    assert said["prefill-0"].startswith("prefill-0  unknown  UNKNOWN  role unknown")
    assert said["decode-0"].startswith("decode-0   decode   PASS  "), out
    # Its setting unstated too: the decode's line names it as the peer that decides.
    del info["disaggregation_enable_kv_checksum"]
    saved.write_text(json.dumps(info))
    code, out, _ = run(str(tmp_path))
    said = {line.split()[0]: line for line in lines(out)}
    assert code == 3
    assert "KV checksum on here, setting unknown for prefill-0" in said["decode-0"], out


def test_a_node_named_for_one_role_whose_engine_states_the_other_is_said() -> None:
    """Blind review 46 D5: `--endpoint decode-0=<the prefill's URL>` passed, the role column
    alone showing that no decode was audited."""
    deployment = Deployment(pd=True, advertised_context=1_048_576, advertised_by="decode-0")
    facts = {"role": "prefill", "version": "0.5.23", "pool_tokens": 2_040_000}
    facts |= {"context_len": 1_048_576, "kv_checksum": True}
    swapped = judge_node(NodeFacts("sglang-decode-0", **facts), deployment, AuditPolicy())
    assert "named as a decode node, its engine states prefill" in swapped.reasons
    for name in ("sglang-prefill-0", "node-7", "prefill-decode-pair"):
        result = judge_node(NodeFacts(name, **facts), deployment, AuditPolicy())
        assert not any("named as" in reason for reason in result.reasons)


def test_audit_help_says_what_each_exit_status_means() -> None:
    """Review: a gate is read by its exit status, and `--help` said none of them."""
    done = subprocess.run(
        [sys.executable, "-m", "collector.cli", "audit", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    said = " ".join(done.stdout.split())
    assert done.returncode == 0
    for status in (
        "0 every node passed",
        "1 a check failed",
        "2 usage error or nothing to audit",
        "3 no check failed but a node could not be fully checked",
    ):
        assert status in said


def test_a_log_in_a_format_not_read_fails_closed(tmp_path: Path) -> None:
    """Blind review 15: a third node's log in a shipper's JSON that kvwatch does not unwrap
    was only unclassified lines, and the gate passed the nodes it did read."""
    case = _case_with(tmp_path, DATA / "healthy")
    assert run(str(case))[0] == 0
    log = (DATA / "incident" / "prefill-0.log").read_text().splitlines()
    (case / "prefill-1.jsonl").write_text(
        "".join(
            json.dumps({"labels": {"pod": "prefill-1"}, "entry": line}) + "\n" for line in log * 2
        )
    )
    _fails_closed_not_read_whole(case, "unrecognised", case / "prefill-1.jsonl")


def _healthy_with(tmp_path: Path, decode_lines: list[str]) -> Path:
    tmp_path.mkdir()
    for path in (DATA / "healthy").iterdir():
        (tmp_path / path.name).write_bytes(path.read_bytes())
    with (tmp_path / "decode-0.log").open("a") as log:
        log.writelines(line + "\n" for line in decode_lines)
    return tmp_path


def _corruption(second: int, rank: int, room: int) -> str:
    return (
        f"[2026-11-02 09:16:{second:02d} TP{rank}] Context corruption detected: Request r{room} "
        f"(bootstrap_room={room}) received metadata from bootstrap_room={room + 1}. Metadata "
        "buffer index: 7. This indicates metadata buffer index collision."
    )


def test_metadata_corruptions_are_said_with_the_mismatches_caught(tmp_path: Path) -> None:
    """Blind review 28b: the node's line said its checksum mismatches and not the metadata of
    another room its decode received, the same race's other sign (one room a line per rank)."""
    corruptions = [_corruption(10, 0, 300), _corruption(10, 1, 300), _corruption(20, 0, 500)]
    mismatch = (
        "[2026-11-02 09:16:30 TP0] KV checksum mismatch req=7c2e bootstrap_room=900 "
        "expected=0x5e1a03c7 got=0x5e1a03c6"
    )
    code, out, _ = run(str(_healthy_with(tmp_path / "both", [*corruptions, mismatch])))
    (decode,) = [line for line in lines(out) if line.startswith("decode-0")]
    assert decode == (
        "decode-0   decode   WARN  1 KV checksum mismatch and 2 metadata corruptions caught "
        "(corrupted transfers: run kvwatch forensics)"
    )
    code, out, _ = run(str(_healthy_with(tmp_path / "alone", corruptions[:1])))
    (decode,) = [line for line in lines(out) if line.startswith("decode-0")]
    assert "WARN  1 metadata corruption caught" in decode
    assert code == 0
