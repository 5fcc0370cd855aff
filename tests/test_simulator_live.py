"""Live mode through real HTTP on 127.0.0.1: the leak, its fixes, and the abort race."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from simulator.latency import LatencyModel
from simulator.live import LiveDeployment
from simulator.scenario import Scenario, apply_overrides, load_scenario

TESTDATA = Path(__file__).parent / "testdata" / "simulator"
VICTIMS = ("MARK-5eed0001c0ffee01", "MARK-5eed0002c0ffee02")
OVER_LENGTH = "[[pad 900000]] Summarise everything above. [[reply 24]]"
OVER_LENGTH_TOKENS = 4 + 900000 + 3 + 2  # template + pad + 3 words + tail


def chat(client: httpx.Client, url: str, content: str, **extra: Any) -> httpx.Response:
    body: dict[str, Any] = {
        "model": "GLM-5.3",
        "messages": [{"role": "user", "content": content}],
        "max_tokens": 256,
    }
    body.update(extra)
    return client.post(url + "/v1/chat/completions", json=body)


def reply_text(resp: httpx.Response) -> str:
    return str(resp.json()["choices"][0]["message"]["content"])


def log(live: LiveDeployment, node: str) -> str:
    live.sink.flush()
    return (live.log_dir / f"{node}.log").read_text()


def incident(version: str) -> Scenario:
    sc = load_scenario("incident-replay-small")
    return apply_overrides(
        sc, {"deployment.prefill.version": version, "deployment.decode.version": version}
    )


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=60) as c:
        yield c


def send_victims_then_over_length(live: LiveDeployment, client: httpx.Client) -> httpx.Response:
    for marker in VICTIMS:
        resp = chat(client, live.router_url, f"Keep {marker} safe. [[pad 3000]] [[reply 30]]")
        assert resp.status_code == 200
        assert marker in reply_text(resp)  # an honest reply echoes its own prompt
    return chat(client, live.router_url, OVER_LENGTH)


def test_refused_over_length_request_gets_200_with_an_earlier_requests_marker(
    tmp_path: Path, client: httpx.Client
) -> None:
    with LiveDeployment(incident("0.5.19"), log_dir=tmp_path, speed=200) as live:
        resp = send_victims_then_over_length(live, client)
        assert resp.status_code == 200
        body = resp.json()
        assert body["usage"]["prompt_tokens"] == OVER_LENGTH_TOKENS
        assert any(m in reply_text(resp) for m in VICTIMS), reply_text(resp)[:200]
        prefill, decode = log(live, "prefill-0"), log(live, "decode-0")

    # prefill refused it (and its own Finish says abort with a 1-token prompt) ...
    refusal = re.search(
        rf"Input length \({OVER_LENGTH_TOKENS} tokens\) exceeds the maximum allowed length "
        r"\(681274 tokens\)\. Use a shorter input or enable --allow-auto-truncate\., "
        r"self\.rid='([0-9a-f]{32})'",
        prefill,
    )
    assert refusal is not None
    p_rid = refusal.group(1)
    p_finish = next(x for x in prefill.splitlines() if "Finish:" in x and f"'id': '{p_rid}'" in x)
    room = re.search(r"bootstrap_room=(\d+)", p_finish).group(1)  # type: ignore[union-attr]
    assert "'type': 'abort'" in p_finish and "'prompt_tokens': 1," in p_finish
    # ... and decode answered the same room successfully, under its own rid, impossibly fast
    d_rid = body["id"]
    assert d_rid != p_rid
    d_finish = next(x for x in decode.splitlines() if "Finish:" in x and f"'id': '{d_rid}'" in x)
    assert f"bootstrap_room={room}," in d_finish
    assert f"'prompt_tokens': {OVER_LENGTH_TOKENS}," in d_finish
    ttft = float(re.search(r"'first_token_latency': ([0-9.e-]+)", d_finish).group(1))  # type: ignore[union-attr]
    sc = load_scenario("incident-replay-small")
    floor = LatencyModel.from_specs(sc.model, sc.hardware).prefill_floor_s(OVER_LENGTH_TOKENS, 0)
    # A tenth of the physical floor is no prefill at all (an honest one takes the floor or
    # more); a hundredth was a few milliseconds of real time at speed 200 and failed when the
    # machine was busy (1.49 s against 1.40 s logged).
    assert ttft < floor / 10
    assert re.search(r'"POST /v1/chat/completions HTTP/1.1" 200 OK', decode)


@pytest.mark.parametrize(("version", "status"), [("0.5.20", 500), ("0.5.21", 400), ("0.5.23", 400)])
def test_fixed_engines_refuse_the_same_traffic(
    tmp_path: Path, client: httpx.Client, version: str, status: int
) -> None:
    with LiveDeployment(incident(version), log_dir=tmp_path, speed=200) as live:
        resp = send_victims_then_over_length(live, client)
        decode = log(live, "decode-0")
    assert resp.status_code == status
    assert not any(m in resp.text for m in VICTIMS)
    if version == "0.5.20":
        # bootstrapped, then retired: decode's transfer fails
        assert "Decode transfer failed for request rank=0" in decode
    else:
        # refused before bootstrap: no transfer at all, decode answers with the refusal
        assert "Decode transfer failed" not in decode
        assert "'status_code': 400, 'err_type': 'BadRequestError'" in decode


# -- the abort race -----------------------------------------------------------------------
MARK_A = "MARK-a1a1a1a1a1a1a1a1"
MARK_B = "MARK-b2b2b2b2b2b2b2b2"


def abort_race(
    tmp_path: Path, client: httpx.Client, *, delay_s: float, checksum: bool
) -> tuple[httpx.Response, str]:
    """A is aborted mid-transfer, its drain ack is lost, and its in-flight writes land
    `delay_s` later; B is sent right after A's pages are released (30 s hold) and gets them."""
    sc = apply_overrides(
        load_scenario(TESTDATA / "abort-race-live.yaml"),
        {"deployment.prefill.kv_checksum": checksum, "deployment.decode.kv_checksum": checksum},
    )
    with LiveDeployment(sc, log_dir=tmp_path, speed=40) as live:
        fault = {"abort_at_fraction": 0.5, "late_write_delay_s": delay_s, "ack_lost": True}
        a = chat(
            client, live.router_url, f"Keep {MARK_A} [[pad 40000]] [[reply 200]]", sim_fault=fault
        )
        assert a.status_code == 499  # the client went away mid-transfer
        metrics_url = live.urls["decode-0"] + "/metrics"
        deadline = time.monotonic() + 20
        while 'outcome="timeout"' not in client.get(metrics_url).text:
            assert time.monotonic() < deadline, "deferred release never timed out"
            time.sleep(0.01)
        b = chat(client, live.router_url, f"Keep {MARK_B} [[pad 200000]] [[reply 200]]")
        decode = log(live, "decode-0")
    assert re.search(
        r"Deferred KV release for room \d+ timed out after 30\.0s without a full drain ack "
        r"from prefill; releasing anyway\.",
        decode,
    )
    return b, decode


def test_late_write_before_the_release_timeout_is_harmless(
    tmp_path: Path, client: httpx.Client
) -> None:
    b, _ = abort_race(tmp_path, client, delay_s=10.0, checksum=False)
    assert b.status_code == 200
    assert MARK_B in reply_text(b) and MARK_A not in reply_text(b)


def test_late_write_after_the_release_timeout_corrupts_the_next_reply(
    tmp_path: Path, client: httpx.Client
) -> None:
    b, _ = abort_race(tmp_path, client, delay_s=40.0, checksum=False)
    assert b.status_code == 200
    assert MARK_A in reply_text(b)  # B's answer now carries A's data


def test_kv_checksum_catches_the_late_write(tmp_path: Path, client: httpx.Client) -> None:
    b, decode = abort_race(tmp_path, client, delay_s=40.0, checksum=True)
    assert b.status_code == 500
    assert MARK_A not in b.text
    receive = next(x for x in decode.splitlines() if "Receive:" in x and MARK_B in x)
    rid = re.search(r"rid='([0-9a-f]{32})'", receive).group(1)  # type: ignore[union-attr]
    room = re.search(r"bootstrap_room=(\d+)", receive).group(1)  # type: ignore[union-attr]
    assert re.search(
        rf"KV checksum mismatch req={rid} bootstrap_room={room} "
        r"expected=0x[0-9a-f]{8} got=0x[0-9a-f]{8}$",
        decode,
        re.M,
    )
    assert '"POST /v1/chat/completions HTTP/1.1" 500 Internal Server Error' in decode


def test_node_endpoints_report_configuration(tmp_path: Path, client: httpx.Client) -> None:
    with LiveDeployment(incident("0.5.19"), log_dir=tmp_path, speed=50) as live:
        p = live.urls["prefill-0"]
        info = client.get(p + "/server_info").json()
        assert info["version"] == "0.5.19"
        assert info["max_total_num_tokens"] == 681280
        assert info["max_req_input_len"] == 681274
        assert info["disaggregation_mode"] == "prefill"
        assert info["disaggregation_transfer_backend"] == "mooncake"
        assert "disaggregation_enable_kv_checksum" not in info  # 0.5.19 had no such flag
        assert client.get(p + "/v1/models").json()["data"][0]["max_model_len"] == 1048576
        loads = client.get(p + "/v1/loads").json()
        assert loads["loads"][0]["max_total_num_tokens"] == 681280
        assert client.get(p + "/health").status_code == 200
        metrics = client.get(p + "/metrics")
        assert metrics.headers["content-type"].startswith("text/plain")
        assert re.search(
            r'^sglang:max_total_num_tokens\{engine_type="prefill",model_name="GLM-5.3",'
            r'moe_ep_rank="0",pp_rank="0",tp_rank="0"\} 681280\.0$',
            metrics.text,
            re.M,
        )
        assert "sglang:decode_deferred_kv_release_total" not in metrics.text
        # an engine node called without the router's bootstrap fields refuses the request
        direct = chat(client, p, "hello [[reply 3]]")
        assert direct.status_code == 400
        assert "Disaggregated request received without bootstrap room id" in log(live, "prefill-0")


def test_stopping_answers_requests_still_waiting_for_the_engine_with_503(
    tmp_path: Path, client: httpx.Client, caplog: pytest.LogCaptureFixture
) -> None:
    # A request the engine will not finish for minutes, in flight when the deployment stops:
    # it gets an engine's "shutting down" answer, and no handler is cancelled (uvicorn logs
    # each cancelled one as "Exception in ASGI application" with a traceback).
    live = LiveDeployment(incident("0.5.23"), log_dir=tmp_path, speed=1).start()
    answers: list[httpx.Response] = []
    caller = threading.Thread(
        target=lambda: answers.append(
            chat(client, live.router_url, "Tell a long story. [[pad 2000]] [[reply 60000]]")
        )
    )
    with caplog.at_level("ERROR"):
        caller.start()
        time.sleep(1.0)
        live.stop()
        caller.join(timeout=30)
    assert [a.status_code for a in answers] == [503]
    assert "shutting down" in answers[0].text
    assert not [r for r in caplog.records if r.levelname == "ERROR"], caplog.text
