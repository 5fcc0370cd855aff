"""`/server_info`, `/v1/models`, `/v1/loads`, `/model_info` JSON → one server_info event."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collector.events import parse_iso_time
from collector.sglang.outcome import ParseOutcome
from collector.sglang.server_info import detect_endpoint, normalise_endpoint, parse_server_info

GOLDEN = Path(__file__).parent / "testdata" / "golden" / "server_info"
CASES = sorted(p.name.removesuffix(".expected.json") for p in GOLDEN.glob("*.expected.json"))


def _load(case: str) -> tuple[bytes, dict[str, Any]]:
    return (GOLDEN / f"{case}.json").read_bytes(), json.loads(
        (GOLDEN / f"{case}.expected.json").read_text()
    )


def test_every_endpoint_has_a_golden() -> None:
    assert {
        "server_info_prefill_0_5_19",
        "server_info_unified_fallback",
        "server_info_decode_0_5_23",
        "v1_models",
        "v1_loads",
        "model_info",
    } <= set(CASES)


def _expected(golden: dict[str, Any]) -> list[dict[str, Any]]:
    event_time = golden.get("event_time", golden["time"])
    return [
        {
            "kind": "server_info",
            "node": golden["node"],
            "time": event_time,
            "source": golden["source"],
            **entry,
        }
        for entry in golden["events"]
    ]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("named", [False, True], ids=["detected", "named"])
def test_golden(case: str, named: bool) -> None:
    doc, golden = _load(case)
    out = parse_server_info(
        doc,
        node=golden["node"],
        source=golden["source"],
        time=parse_iso_time(golden["time"]),
        endpoint=golden["endpoint"] if named else None,
    )
    assert [e.to_json_dict() for e in out.events] == _expected(golden)
    assert out.dropped == golden["dropped"]


def test_str_bytes_and_dict_inputs_agree() -> None:
    doc, _ = _load("v1_loads")
    results = [
        parse_server_info(form, node="n", source="s", time=1.0).events[0].fields
        for form in (doc, doc.decode(), json.loads(doc))
    ]
    assert results[0] == results[1] == results[2]
    assert results[0]["max_total_num_tokens"] == 679936


@pytest.mark.parametrize(
    ("endpoint", "key"),
    [
        ("/server_info", "server_info"),
        ("/get_server_info", "server_info"),
        ("server_info", "server_info"),
        ("/v1/models", "v1_models"),
        ("/v1/models/glm-5.3", "v1_models"),
        ("http://decode-0:30000/v1/loads?format=json&include=core", "v1_loads"),
        ("/v1/loads/", "v1_loads"),
        ("/get_model_info", "model_info"),
        ("/metrics", None),
        ("", None),
    ],
)
def test_normalise_endpoint(endpoint: str, key: str | None) -> None:
    assert normalise_endpoint(endpoint) == key


@pytest.mark.parametrize(
    ("doc", "endpoint", "reason"),
    [
        (b"# TYPE sglang_num_running_reqs gauge\n", None, "not_json"),
        (b"\xff\xfe{", None, "not_json"),
        ("[1, 2]", None, "not_json_object"),
        ('"server_info"', None, "not_json_object"),
        ("{}", None, "unrecognised_document"),
        ('{"hello": "world"}', None, "unrecognised_document"),
        ('{"version": "0.5.23"}', "/metrics", "unknown_endpoint"),
        ('{"version": "0.5.23"}', "/v1/loads", "missing_field"),
        ('{"object": "list", "data": []}', None, "missing_field"),
        ('{"object": "list", "data": [1, "x"]}', "/v1/models", "missing_field"),
    ],
)
def test_bad_documents_are_counted_drops(
    doc: str | bytes, endpoint: str | None, reason: str
) -> None:
    out = parse_server_info(doc, node="n", source="s", time=None, endpoint=endpoint)
    assert out.events == []
    assert out.dropped == {reason: 1}


def test_wrong_types_read_as_unknown_not_as_errors() -> None:
    doc = {
        "max_total_num_tokens": "681280",
        "context_length": 1.5,
        "tp_size": True,
        "page_size": float("nan"),
        "dp_size": 10**400,
        "disaggregation_mode": "None",
        "disaggregation_enable_kv_checksum": "yes",
        "version": 5,
        "internal_states": "not a list",
    }
    (event,) = parse_server_info(doc, node="n", source="s", time=None).events
    assert event.fields["max_total_num_tokens"] == 681280
    assert event.fields["context_len"] is None
    assert event.fields["tp_size"] is None
    assert event.fields["page_size"] is None
    assert event.fields["dp_size"] == 10**400
    assert event.fields["disaggregation_mode"] is None
    assert event.fields["role"] == "unified"
    assert event.fields["kv_checksum"] is True
    assert event.fields["version"] is None


def test_the_smallest_dp_rank_s_pool_is_the_node_s_pool() -> None:
    # The top-level figure is one rank's; a long prompt routed to the rank with less room
    # overflows that rank's pool. Read as 2,040,000, a rank of 681,280 passed the pool check.
    doc = {
        "disaggregation_mode": "prefill",
        "max_total_num_tokens": 2_040_000,
        "context_length": 1_048_576,
        "internal_states": [
            {"dp_rank": 0, "memory_usage": {"token_capacity": 2_040_000}},
            {"dp_rank": 1, "memory_usage": {"token_capacity": 681_280}},
        ],
    }
    (event,) = parse_server_info(doc, node="n", source="s", time=None).events
    assert event.fields["max_total_num_tokens"] == 681_280
    assert event.fields["max_total_num_tokens_by_dp_rank"] == {"0": 2_040_000, "1": 681_280}


def test_detect_endpoint() -> None:
    assert detect_endpoint({"loads": []}) == "v1_loads"
    assert detect_endpoint({"object": "model", "id": "m", "max_model_len": 8}) == "v1_models"
    assert detect_endpoint({"internal_states": []}) == "server_info"
    assert detect_endpoint({"is_generation": True}) == "model_info"
    assert detect_endpoint({"version": "0.5.23", "disaggregation_mode": "null"}) == "server_info"
    assert detect_endpoint({"version": "0.5.23"}) is None


# --- fetched over real HTTP --------------------------------------------------------------


class _Engine(BaseHTTPRequestHandler):
    """Serves the golden documents at the paths SGLang serves them."""

    routes = {
        "/server_info": "server_info_prefill_0_5_19",
        "/v1/models": "v1_models",
        "/v1/loads": "v1_loads",
    }

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        case = self.routes.get(self.path.split("?", 1)[0])
        if case is None:
            self.send_error(404)
            return
        body = (GOLDEN / f"{case}.json").read_bytes()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        return


@pytest.fixture
def engine_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Engine)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_fetched_documents_merge_into_pool_versus_context(engine_url: str) -> None:
    merged: dict[str, Any] = {}
    with httpx.Client(timeout=5.0) as client:
        for path in ("/server_info", "/v1/models", "/v1/loads?include=core,disagg"):
            url = engine_url + path
            response = client.get(url)
            response.raise_for_status()
            out = parse_server_info(
                response.content, node="prefill-0", source=url, time=1793000000.0, endpoint=url
            )
            assert out.dropped == {}
            for key, value in out.events[0].fields.items():
                if value is not None and key != "endpoint":
                    merged.setdefault(key, value)
    assert merged["version"] == "0.5.19"
    assert merged["role"] == "prefill"
    assert merged["max_total_num_tokens"] == 681280
    assert merged["context_len"] == 1048576
    assert merged["max_total_num_tokens"] < merged["context_len"]


# --- properties ----------------------------------------------------------------------------

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)
_KEYS = st.sampled_from(
    [
        "loads",
        "object",
        "data",
        "id",
        "max_model_len",
        "internal_states",
        "memory_usage",
        "token_capacity",
        "max_total_num_tokens",
        "version",
        "disaggregation_mode",
        "disaggregation",
        "mode",
        "dp_rank",
        "memory",
        "timestamp",
        "environ",
        "env_vars",
        "SGLANG_DISAGGREGATION_DEFERRED_DECODE_KV_RELEASE_TIMEOUT",
        "is_generation",
        "tp_size",
    ]
)
_SHAPED = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.sampled_from(["list", "model"]),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(_KEYS, children, max_size=5),
    max_leaves=25,
)
_ENDPOINTS = st.sampled_from([None, "/server_info", "/v1/models", "/v1/loads", "/model_info", "x"])


def _one_outcome(out: ParseOutcome) -> bool:
    return len(out.events) + out.dropped_total == 1


@settings(max_examples=300, deadline=None)
@given(st.text() | st.binary(), _ENDPOINTS)
def test_random_text_and_bytes_never_raise(doc: str | bytes, endpoint: str | None) -> None:
    assert _one_outcome(parse_server_info(doc, node="n", source="s", time=None, endpoint=endpoint))


@settings(max_examples=300, deadline=None)
@given(_JSON | _SHAPED, _ENDPOINTS)
def test_random_json_never_raises(value: Any, endpoint: str | None) -> None:
    doc = json.dumps(value)
    out = parse_server_info(doc, node="n", source="s", time=None, endpoint=endpoint)
    assert _one_outcome(out)
    if isinstance(value, dict):
        out = parse_server_info(value, node="n", source="s", time=None, endpoint=endpoint)
        assert _one_outcome(out)
    for event in out.events:
        json.dumps(event.to_json_dict())


@pytest.mark.parametrize(
    ("context_length", "limit", "pool", "context_len"),
    [
        # Unset flag, the context binds the limit: 1,048,576 - 6 (healthy, audit V's case).
        (None, 1_048_570, 2_040_000, 1_048_576),
        # Unset flag, the pool binds it (the incident's prefill): the context is only known to
        # be at least the pool.
        (None, 681_274, 681_280, None),
        # A stated flag is the context, whatever the limit says.
        (131_072, 1_048_570, 2_040_000, 131_072),
        (None, None, 2_040_000, None),
        # A limit no engine has: its "context" would pass any pool.
        (None, 0, 2_040_000, None),
        (None, -5, 2_040_000, None),
    ],
)
def test_an_unset_context_flag_is_read_from_the_prompt_limit(
    context_length: int | None, limit: int | None, pool: int, context_len: int | None
) -> None:
    """SGLang takes prompts up to min(context - 1, pool - 1) - 5 tokens (the reference's
    refusals table): a limit more than 6 below the pool is the context's."""
    document = {
        "version": "0.5.23",
        "context_length": context_length,
        "max_req_input_len": limit,
        "max_total_num_tokens": pool,
        "disaggregation_mode": "decode",
    }
    outcome = parse_server_info(
        document, node="decode-0", source="decode-0.server_info.json", time=None
    )
    assert outcome.events[0].fields["context_len"] == context_len


def test_the_deferred_release_setting_is_read_from_each_rank_s_env_vars() -> None:
    """Audit V: with `SGLANG_EXPOSE_OWN_ENV_VARS=1`, 0.5.19 lists its variables only under
    `internal_states[i].env_vars`, where the setting was never looked for."""
    document = {
        "version": "0.5.19",
        "max_total_num_tokens": 2_400_000,
        "disaggregation_mode": "decode",
        "internal_states": [
            {
                "env_vars": {
                    "SGLANG_DISAGGREGATION_DEFERRED_DECODE_KV_RELEASE": "false",
                    "SGLANG_DISAGGREGATION_DEFERRED_DECODE_KV_RELEASE_TIMEOUT": "45.0",
                }
            }
        ],
    }
    fields = parse_server_info(document, node="decode-0", source="s.json", time=None).events[0]
    assert (fields.get("deferred_release"), fields.get("deferred_release_timeout")) == (False, 45.0)


def test_a_saved_v1_loads_is_dated_by_its_own_timestamp_not_its_file() -> None:
    """A copy's modification time (the day of the inquiry, months on) dated the engine's figures
    and stretched what the logs cover to that day (blind review)."""
    doc = json.dumps(
        {"timestamp": "2026-09-09T08:05:00+00:00", "version": "0.5.19", "loads": [{"dp_rank": 0}]}
    )
    mtime = 1_796_000_000.0  # 2026-12-01, when the file was copied
    (event,) = parse_server_info(
        doc, node="d", source="d/v1_loads.json", time=mtime, file_dated=True
    ).events
    assert event.time == 1_788_941_100.0  # 2026-09-09T08:05:00Z
    # A time from the saved name (`@20260909T080600Z`) is the saver's, and stays.
    (named,) = parse_server_info(doc, node="d", source="d@x.json", time=1_788_941_160.0).events
    assert named.time == 1_788_941_160.0


def test_a_mode_of_the_wrong_type_leaves_the_role_unknown() -> None:
    """Blind review 7: `"disaggregation_mode": ["decode"]` made a decode node unified."""
    for mode, role in ((["decode"], None), (5, None), (None, "unified"), ("null", "unified")):
        document = json.dumps({"version": "0.5.23", "disaggregation_mode": mode})
        info = parse_server_info(document, node="d0", source="d0.json", time=1.0)
        assert [e.get("role") for e in info.events] == [role], mode


def test_a_model_list_of_several_cards_advertises_the_largest_context() -> None:
    """Blind review 23: a `/v1/models` of two cards (1,048,576 and 2,097,152) was read as the
    first's context, and a 1.5M pool passed against it."""
    document = {
        "object": "list",
        "data": [
            {"id": "glm-5.3-lora", "object": "model", "max_model_len": 1_048_576},
            {"id": "glm-5.3", "object": "model", "max_model_len": 2_097_152},
            {"id": "no-length", "object": "model"},
        ],
    }
    outcome = parse_server_info(
        json.dumps(document).encode(), node="n", source="s", time=0.0, endpoint="v1_models"
    )
    (event,) = outcome.events
    assert (event.get("model"), event.get("context_len")) == ("glm-5.3", 2_097_152)


@pytest.mark.parametrize(
    ("stated", "read"),
    [(1_788_956_970.0, 1_788_956_970.0), (1_788_956_970, 1_788_956_970.0)]
    + [("1788956970.0", 1_788_956_970.0), ("2026-09-09T12:29:30Z", 1_788_956_970.0)]
    + [("2026-09-09T14:29:30+02:00", 1_788_956_970.0), ("2026-09-09 12:29:30Z", 1_788_956_970.0)]
    + [("2026-09-09T12:29:30", None), ("12:29:30Z", None), ("soon", None), ("nan", None)]
    + [(132.5, None), (True, None), (None, None), ("9" * 100, None)],
)
def test_the_startup_time_is_read_as_an_epoch_or_a_zoned_time(
    stated: object, read: float | None
) -> None:
    """The time the engine started dates a restart a later snapshot shows (blind review 59 J1:
    an ISO time was passed over, and the file's time dated the restart half an hour late); a
    figure that is no instant (a duration, a flag, a time of no zone or date) dates nothing."""
    document = json.dumps(
        {"version": "0.5.22", "max_total_num_tokens": 2_040_000, "startup_time": stated}
    )
    (event,) = parse_server_info(document, node="p", source="s.json", time=1.79e9).events
    assert event.fields.get("started_at") == read
