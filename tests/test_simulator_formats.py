"""Golden tests: the simulator's log lines and metrics against the telemetry reference.

Expected lines are the reference's own samples (tests/testdata/simulator/reference_samples.txt,
copied by hand) or, where the reference gives only a format string, written out by hand here.
"""

from __future__ import annotations

import calendar
import json
from pathlib import Path

import pytest

from simulator.engine import EngineProfile
from simulator.scenario import ModelSpec, RoleSpec
from simulator.telemetry.logfmt import LogFormat
from simulator.telemetry.metrics import NodeMetrics
from simulator.telemetry.server_info import LoadView, server_args, server_info

SAMPLES = Path(__file__).parent / "testdata" / "simulator" / "reference_samples.txt"


def _samples() -> dict[str, str]:
    out: dict[str, str] = {}
    for line in SAMPLES.read_text().splitlines():
        if line and not line.startswith("#"):
            name, text = line.split("\t", 1)
            out[name] = text
    return out


REF = _samples()


def at(stamp: str) -> float:
    """`2026-11-02 10:15:07` (UTC) -> epoch seconds."""
    date, clock = stamp.split(" ")
    y, mo, d = (int(x) for x in date.split("-"))
    h, mi, s = (int(x) for x in clock.split(":"))
    return float(calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0)))


def fmt(version: str, tp: int = 8, dp: int = 1, ep: int = 1) -> LogFormat:
    return LogFormat(EngineProfile.for_version(version), tp_size=tp, dp_size=dp, ep_size=ep)


def message(line: str) -> str:
    return line.split("] ", 1)[1]


def test_capacity_line_matches_reference_sample() -> None:
    line = fmt("0.5.23", tp=1).capacity(
        at("2026-04-05 16:48:19"),
        max_total_num_tokens=20480,
        chunked_prefill_size=8192,
        max_prefill_tokens=16384,
        max_running_requests=128,
        context_len=32768,
        available_gpu_mem=101.90,
    )
    assert line == REF["capacity"] + "\n"


def test_decode_batch_line_matches_reference_sample() -> None:
    line = fmt("0.5.23", tp=8, dp=8, ep=8).decode_batch(
        at("2026-11-02 10:15:07"),
        running=48,
        tokens=212480,
        usage=0.59,
        prealloc_usage=0.07,
        prealloc_req=3,
        transfer_req=5,
        gen_throughput=2311.45,
        queue=0,
    )
    assert line == REF["decode_batch"] + "\n"


def test_decode_time_stats_match_reference_sample() -> None:
    line = fmt("0.5.23").req_stats_decode(
        at("2026-11-02 10:15:09"),
        rid="4f1c...",
        room=8360203925601259718,
        input_len=4096,
        cached_input_len=0,
        output_len=512,
        bootstrap_ms=1.20,
        alloc_wait_ms=0.35,
        transfer_ms=88.41,
        queue_ms=0.52,
        forward_ms=9123.77,
        entry_time=1793614509.118,
    )
    assert message(line) == REF["req_time_stats_decode"] + "\n"


def test_access_line_matches_reference_sample() -> None:
    line = fmt("0.5.23").access(
        at("2026-04-05 20:02:51"), "127.0.0.1:40052", "POST", "/v1/chat/completions", 200
    )
    assert line == REF["access"] + "\n"


def test_decode_transfer_failed_matches_real_sample() -> None:
    line = fmt("0.5.19").decode_transfer_failed(
        at("2025-11-05 16:39:09"),
        "78fde411d57a4d7791b63963eac74968",
        4793981895866140836,
        "Aborted by AbortReq.",
    )
    assert line == REF["decode_transfer_failed"] + "\n"


def test_checksum_mismatch_matches_reference_sample() -> None:
    line = fmt("0.5.23", dp=8, ep=8).checksum_mismatch(
        at("2026-11-02 10:16:40"), "7c2e9d0b5a4f4c1e", 2170015846053279415, 0x5E1A03C7, 0x5E1A03C6
    )
    assert message(line) == REF["checksum_mismatch"] + "\n"


def test_deferred_release_timeout_matches_reference_sample() -> None:
    line = fmt("0.5.23", dp=8, ep=8).deferred_release_timeout(
        at("2026-11-02 10:17:05"), 4699239566385471430, 30.0
    )
    assert line == REF["deferred_release_timeout"] + "\n"


def test_kv_canary_violation_first_line_matches_and_details_follow_unprefixed() -> None:
    text = fmt("0.5.22").kv_canary_violation(
        at("2026-11-02 10:18:12"),
        launch_tag="TAIL_K_FULL",
        slot_idx=18433,
        position=511,
        token=1024,
        stored_hash=0xDEADBEEF,
        expected_aux=0xCAFEF00D,
        total_violations=1,
        step=77,
    )
    lines = text.splitlines()
    assert lines[0] == REF["kv_canary_violation"]
    assert lines[1] == (
        "KV cache canary violation detected (kernel_kind=TAIL_K_FULL, slot_idx=18433, position=511)"
    )
    assert lines[2].startswith("canary_kind:       ")
    assert lines[3].startswith("  fail_reasons: ")
    assert lines[-1] == "  total_violations=1 ring_overflow=False step_when_pumped=77"
    assert all(not line.startswith("[") for line in lines[1:])


# Lines for which the reference gives a format string only; expected values written by hand.
HAND_WRITTEN = [
    (
        "input_too_long",
        lambda f, t: f.input_too_long(t, 742492, 681274, "410d0ad20a575ce6df51118222fddefc"),
        "0.5.19",
        "[2026-09-08 12:15:39 TP0] Input length (742492 tokens) exceeds the maximum allowed "
        "length (681274 tokens). Use a shorter input or enable --allow-auto-truncate., "
        "self.rid='410d0ad20a575ce6df51118222fddefc'",
    ),
    (
        "pool_below_context",
        lambda f, t: f.pool_below_context(t, 681280, 1048576),
        "0.5.21",
        "[2026-09-08 12:15:39 TP0] KV pool holds 681280 tokens, fewer than --context-length "
        "1048576. One full-length request cannot fit, so long requests will be refused or "
        "truncated at serving time.",
    ),
    (
        "prefill_batch_0_5_23",
        lambda f, t: f.prefill_batch(
            t,
            new_seq=1,
            new_token=158,
            cached_token=0,
            usage=0.08,
            running=1,
            queue=0,
            pending_token=0,
            bootstrap_req=2,
            inflight_req=1,
            throughput=559.53,
        ),
        "0.5.23",
        "[2026-09-08 12:15:39 TP0] Prefill batch, #new-seq: 1, #new-token: 158, "
        "#cached-token: 0, token usage: 0.08, #running-req: 1, #queue-req: 0, "
        "#pending-token: 0, #bootstrap-req: 2, #inflight-req: 1, #optimistic-req: 0, "
        "cuda graph: False, input throughput (token/s): 559.53",
    ),
    (
        "prefill_batch_0_5_19",
        lambda f, t: f.prefill_batch(
            t,
            new_seq=1,
            new_token=158,
            cached_token=0,
            usage=0.08,
            running=0,
            queue=0,
            pending_token=0,
            bootstrap_req=2,
            inflight_req=1,
            throughput=559.53,
        ),
        "0.5.19",
        "[2026-09-08 12:15:39 TP0] Prefill batch, #new-seq: 1, #new-token: 158, "
        "#cached-token: 0, token usage: 0.08, #running-req: 0, #queue-req: 0, "
        "#prealloc-req: 2, #inflight-req: 1, cuda graph: False, input throughput (token/s): "
        "559.53",
    ),
    (
        "kv_allocated_mla_new",
        lambda f, t: f.kv_allocated(t, 2040000, "torch.bfloat16", 22.91, None),
        "0.5.22",
        "[2026-09-08 12:15:39 TP0] KV Cache is allocated. dtype: torch.bfloat16, "
        "#tokens: 2040000, KV size: 22.91 GB",
    ),
    (
        "kv_allocated_old",
        lambda f, t: f.kv_allocated(t, 681280, "torch.bfloat16", 3.83, 3.83),
        "0.5.19",
        "[2026-09-08 12:15:39 TP0] KV Cache is allocated. #tokens: 681280, K size: 3.83 GB, "
        "V size: 3.83 GB",
    ),
    (
        "lost_connection",
        lambda f, t: f.lost_connection(t, "10.0.1.10:8998", 3),
        "0.5.22",
        "[2026-09-08 12:15:39 TP0] Lost connection with prefill instance "
        "(bootstrap_addr: 10.0.1.10:8998), 3 requests affected",
    ),
    (
        "metadata_corruption",
        lambda f, t: f.metadata_corruption(t, "abc", 11, 22, 5),
        "0.5.22",
        "[2026-09-08 12:15:39 TP0] Context corruption detected: Request abc (bootstrap_room=11) "
        "received metadata from bootstrap_room=22. Metadata buffer index: 5. This indicates "
        "metadata buffer index collision.",
    ),
    (
        "checksum_skipped",
        lambda f, t: f.checksum_skipped(t, 0x1A2B3C4D, 0x0000BEEF),
        "0.5.22",
        "[2026-09-08 12:15:39 TP0] KV checksum skipped: prefill layout signature 0x1a2b3c4d "
        "differs from this decode's 0x0000beef (TP width, PP stage, or page size); its requests "
        "are admitted unverified.",
    ),
    (
        "prefill_bootstrap_failed",
        lambda f, t: f.prefill_bootstrap_failed(
            t, "ab12", 77, "Request 77 timed out after 300.0s in KVPoll.Bootstrapping"
        ),
        "0.5.22",
        "[2026-09-08 12:15:39 TP0] Prefill bootstrap failed for request rank=0 req.rid='ab12' "
        "req.bootstrap_room=77 with exception KVTransferError(bootstrap_room=77): Request 77 "
        "timed out after 300.0s in KVPoll.Bootstrapping",
    ),
    (
        "decode_handshake_failed",
        lambda f, t: f.decode_handshake_failed(t, "cd34", 78, "Aborted by AbortReq."),
        "0.5.22",
        "[2026-09-08 12:15:39 TP0] Decode handshake failed for request rank=0 "
        "decode_req.req.rid='cd34' decode_req.req.bootstrap_room=78 with exception "
        "KVTransferError(bootstrap_room=78): Aborted by AbortReq.",
    ),
    (
        "waiting_advice",
        lambda f, t: f.waiting_advice(t),
        "0.5.22",
        "[2026-09-08 12:15:39 TP0] Some requests fail to receive KV Cache transfer done signal "
        "after bootstrapping. If a greater mean TTFT is acceptable, you can 'export "
        "SGLANG_DISAGGREGATION_WAITING_TIMEOUT=600' (10 minutes) to relax the timeout "
        "condition. ",
    ),
    (
        "decode_stats_old_form",
        lambda f, t: f.req_stats_decode(
            t,
            rid="r1",
            room=9,
            input_len=10,
            cached_input_len=0,
            output_len=4,
            bootstrap_ms=1.2,
            alloc_wait_ms=0.35,
            transfer_ms=88.41,
            queue_ms=0.52,
            forward_ms=100.0,
            entry_time=1788869739.5,
        ),
        "0.5.19",
        "[2026-09-08 12:15:39 TP0] ReqTimeStats(rid=r1, bootstrap_room=9, input_len=10, "
        "cached_input_len=0, output_len=4, type=decode): prealloc_queue_duration(1.55ms) = "
        "alloc_wait(0.35ms) + bootstrap(1.20ms) + other(0.00ms); transfer_duration=88.41ms, "
        "queue_duration=0.52ms, forward_duration=100.00ms, entry_time=1788869739.500",
    ),
    (
        "uvicorn_running",
        lambda f, t: f.uvicorn(t, "Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)"),
        "0.5.22",
        "[2026-09-08 12:15:39] INFO:     Uvicorn running on http://0.0.0.0:30000 "
        "(Press CTRL+C to quit)",
    ),
    (
        "ready",
        lambda f, t: f.ready(t),
        "0.5.19",
        "[2026-09-08 12:15:39] The server is fired up and ready to roll!",
    ),
]


@pytest.mark.parametrize(
    ("name", "build", "version", "expected"), HAND_WRITTEN, ids=[h[0] for h in HAND_WRITTEN]
)
def test_hand_written_formats(name: str, build: object, version: str, expected: str) -> None:
    assert callable(build)
    line = build(fmt(version), at("2026-09-08 12:15:39"))
    assert line == expected + "\n"


def test_rank_prefix_follows_version_and_parallelism() -> None:
    t = at("2026-09-08 12:15:39")
    assert fmt("0.5.19", tp=1).sched(t, "x") == "[2026-09-08 12:15:39 TP0] x\n"
    assert fmt("0.5.23", tp=1).sched(t, "x") == "[2026-09-08 12:15:39] x\n"
    assert fmt("0.5.23", tp=8, dp=8, ep=8).sched(t, "x") == "[2026-09-08 12:15:39 DP0 TP0 EP0] x\n"
    ms = LogFormat(EngineProfile.for_version("0.5.22"), tp_size=8, log_ms=True)
    assert ms.sched(t + 0.25, "x") == "[2026-09-08 12:15:39.250 TP0] x\n"


def test_server_args_repr_changes_with_version() -> None:
    model = ModelSpec()
    for version, head in (
        ("0.5.19", "server_args=ServerArgs(model_path="),
        ("0.5.23", "server_args={'model_path': "),
    ):
        spec = RoleSpec(version=version, max_total_num_tokens=1000, context_len=2000)
        args = server_args(spec, "prefill", model, host="0.0.0.0", port=30000, seed=1)
        line = fmt(version).server_args(at("2026-09-08 12:15:39"), args)
        assert message(line).startswith(head)
        assert "disaggregation_mode='prefill'" in line or "'disaggregation_mode': 'prefill'" in line


def test_finish_record_carries_rid_room_and_meta_info() -> None:
    f = fmt("0.5.19")
    obj = f.gen_req_repr(
        rid="aa" * 16,
        text="hi",
        max_new_tokens=8,
        temperature=0.7,
        stream=False,
        bootstrap_host="10.0.1.10",
        bootstrap_port=8998,
        bootstrap_room=123,
        level=2,
    )
    meta = f.meta_info(
        rid="aa" * 16,
        finish_reason={"type": "length", "length": 8},
        prompt_tokens=5,
        completion_tokens=8,
        cached_tokens=0,
        e2e_latency=1.5,
        metrics={"first_token_latency": 0.2},
    )
    line = f.finish(at("2026-09-08 12:15:39"), obj, repr({"text": "ok", "meta_info": meta}))
    assert line.startswith("[2026-09-08 12:15:39] Finish: obj=GenerateReqInput(text='hi', ")
    assert f"rid='{'aa' * 16}'" in line and "bootstrap_room=123" in line
    assert "'prompt_tokens': 5" in line and "'total_retractions': 0" in line
    assert "'first_token_latency': 0.2" in line
    assert (
        fmt("0.5.23").meta_info(
            rid="x",
            finish_reason={},
            prompt_tokens=1,
            completion_tokens=0,
            cached_tokens=0,
            e2e_latency=0.0,
            metrics=None,
        )["num_retractions"]
        == 0
    )


def test_json_request_log_is_one_object_per_line() -> None:
    f = fmt("0.5.23")
    line = f.finish_json(
        at("2026-09-08 12:15:39"),
        "r1",
        {"rid": "r1", "bootstrap_room": 5},
        {"meta_info": {"id": "r1"}},
    )
    assert line.endswith("\n") and line.count("\n") == 1
    record = json.loads(line)
    assert record["event"] == "request.finished"
    assert record["timestamp"] == "2026-09-08T12:15:39.000Z"
    assert record["obj"]["bootstrap_room"] == 5


def _exposition(version: str) -> str:
    m = NodeMetrics(
        role="decode", profile=EngineProfile.for_version(version), model_name="deepseek-r1"
    )
    m.set("sglang:max_total_num_tokens", 360072.0)
    m.inc("sglang:decode_deferred_kv_release_total", 3.0, "timeout")
    return m.exposition().decode()


def test_metric_lines_match_reference_sample() -> None:
    lines = _exposition("0.5.23").splitlines()
    for key in ("metric_pool", "metric_pool_help", "metric_deferred", "metric_deferred_help"):
        assert REF[key] in lines
    assert not any(line.endswith("_created") or "_created{" in line for line in lines)


def test_old_engines_do_not_export_deferred_release_metrics() -> None:
    text = _exposition("0.5.21")
    assert "sglang:decode_deferred_kv_release" not in text
    assert "sglang:num_decode_deferred_kv_release_reqs" not in text
    assert "sglang:max_total_num_tokens{" in text


def test_prefill_does_not_export_ttft() -> None:
    m = NodeMetrics(role="prefill", profile=EngineProfile.for_version("0.5.23"), model_name="m")
    text = m.exposition().decode()
    assert "time_to_first_token" not in text
    assert "sglang:num_prefill_bootstrap_queue_reqs{" in text


def test_server_info_has_flags_only_for_versions_that_had_them() -> None:
    model = ModelSpec()
    load = LoadView(0, 0, 0, 0, 0.0, 0.0, 0.0)
    infos = {}
    for version in ("0.5.19", "0.5.22"):
        spec = RoleSpec(version=version, max_total_num_tokens=681280, context_len=1048576)
        args = server_args(spec, "prefill", model, host="0.0.0.0", port=30000, seed=1)
        infos[version] = server_info(
            args,
            spec,
            max_total_num_tokens=681280,
            startup_time=1.0,
            load=load,
            weight_gb=1.0,
            kv_gb=1.0,
            avail_gb=1.0,
        )
    assert "disaggregation_enable_kv_checksum" not in infos["0.5.19"]
    assert infos["0.5.22"]["disaggregation_enable_kv_checksum"] is False
    for info in infos.values():
        assert info["max_total_num_tokens"] == 681280
        assert info["max_req_input_len"] == 681274  # min(ctx - 1, pool - 1) - 5
        assert info["disaggregation_mode"] == "prefill"
        assert info["disaggregation_transfer_backend"] == "mooncake"
    assert infos["0.5.19"]["version"] == "0.5.19"
