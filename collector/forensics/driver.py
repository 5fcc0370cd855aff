"""`kvwatch forensics`: the live pipeline fed from files, ending in a report instead of pages.

Events come from `events_in_time_order` (every node merged into one timeline, as a sidecar would
see them) and go through the same `DetectionPipeline` the sidecar runs. Alongside, the driver
keeps only what the report needs, in bounded memory: the findings, the exposed requests, a capped
sample of request timings for the prefill-speed plot, deferred-release outcomes in bins that fit
the span, and the joined requests streamed to Parquet in batches.
"""

from __future__ import annotations

import io
import json
import math
import os
import sys
import time
from collections import Counter, defaultdict, deque
from collections.abc import Callable, Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Final, TextIO

from collector import __version__
from collector.batch_gc import batch_gc_schedule
from collector.events import Event, iso_time, parse_iso_time
from collector.files import EXPORT_NAME, dated_by_file_time, regular_files, whole_document
from collector.forensics.parquet import RequestParquetWriter
from collector.forensics.plot_data import LearnedFloor, PlotData, TimingPoint
from collector.forensics.progress import Progress
from collector.forensics.refusals import FILE_NAME as REFUSAL_LIST_NAME
from collector.forensics.refusals import RefusalListWriter
from collector.forensics.report import (
    ConfigGap,
    Sayer,
    abort_signals_line,
    ambiguous_refusals_line,
    answering_not_judged,
    archives_line,
    canary_unnamed_line,
    caught_line,
    client_lines_line,
    config_gaps,
    csv_files_line,
    decode_apart_line,
    decode_ended_early_line,
    detector_errors_line,
    exposure_periods,
    exposure_status,
    exposure_window,
    held_at_cap_line,
    info_kinds,
    judged_line,
    late_lines_line,
    log_zones_line,
    merged_logs_line,
    newest_first_line,
    nodes_not_judged_line,
    not_judged_reason,
    outcome_unknown_line,
    passed_over_line,
    pd_role_missing_line,
    per_response,
    periods_line,
    pool_unknown_line,
    possibly_exposed_line,
    prefill_unknown_line,
    prefill_unread_line,
    prefill_untold_line,
    prompts_answered,
    race_unjudged_line,
    refused_without_decode_line,
    repeated_lines_line,
    request_logs_apart_line,
    status_line,
    timing_only_line,
    unattributed_exports_line,
    undated_line,
    unread_line,
    write_findings_csv,
    write_html,
    write_markdown,
)
from collector.parse import ParseStats
from collector.sglang.log_clock import zone_name
from collector.shown_text import clipped, printable_lines
from collector.spill import ChainedStages, KindFilter, Stage, parallel_events_in_time_order
from collector.state.config_timeline import (
    PD_ROLES,
    TIMELINE_KINDS,
    TIMELINE_METRIC_SIGNALS,
    ConfigTimeline,
)
from collector.state.ledger import LedgerConfig, request_key
from collector.state.lost_transfers import LostTransfers
from collector.state.node_windows import BATCH_KINDS, NodeWindowAggregator
from collector.state.prefill_traffic import PrefillTraffic
from collector.state.request_record import RequestRecord, SideRecord
from collector.state.request_sides import REQUEST_SIDE, RequestSideAssembler
from detectors.context import DetectionContext
from detectors.exposure import exposed_response
from detectors.finding import SEVERITY_RANK, Finding
from detectors.impossibly_fast_prefill import (
    QUEUED_SOURCES,
    ImpossiblyFastPrefill,
    ImpossiblyFastPrefillConfig,
    decode_wait,
)
from detectors.over_length_answered import NO_PREFILL_NAMED, OverLengthAnswered
from detectors.pipeline import DetectionPipeline, PipelineConfig
from detectors.pool_below_context import PoolBelowContext
from detectors.pool_in_force import PREFILL_HOST_UNREAD
from detectors.rejected_then_served import UNKNOWN_OUTCOME
from detectors.telemetry_anomaly import TelemetryAnomalyConfig
from detectors.windows import CounterDeltas

SCHEMA_PATH = Path(__file__).with_name("schema.json")
MAX_TIMING_POINTS = 20_000
MAX_FINDINGS_KEPT = 200_000
# Refusals joined to no room held to be asked again at the end (`settle_refusals`); past this,
# each is counted when judged.
MAX_REFUSALS_HELD = 100_000
# A refusal line naming no request is its stub's when the stub ran on that node this close to it.
STUB_OF_REFUSAL_SECONDS: Final = 2
# Releases remembered to count a release logged by several TP ranks once (they log it together).
RECENT_RELEASES = 4096
# Logged releases that timed out or failed remembered per node and outcome, for what a counter
# sample adds to them (`_Evidence.release_sample`).
LOGGED_RELEASES = 4096
# Timeouts of transfers lost with their prefill held until the end to be told apart; past it,
# each counts as the race's at once.
MAX_LOST_TIMEOUTS = 100_000
# Deferred-release outcomes are counted in bins of the first of these widths (the detectors'
# 5-minute window) that keeps the span seen within MAX_DEFERRED_BINS bins: 5 minutes up to two
# days, then coarser, each width a multiple of the one before so that bins merge exactly.
DEFERRED_BIN_WIDTHS = (300.0, 900.0, 1800.0, 3600.0, 10800.0, 21600.0, 43200.0, 86400.0, 604800.0)
MAX_DEFERRED_BINS = 600


@dataclass
class ExposedRequest:
    rid: str | None
    bootstrap_room: str | None
    node: str | None
    time: float | None
    prompt_tokens: int | None
    cached_tokens: int | None = None
    prefill_node: str | None = None
    prefill_rid: str | None = None
    evidence: list[str] = field(default_factory=list)

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "rid": self.rid,
            "bootstrap_room": self.bootstrap_room,
            "node": self.node,
            "time": iso_time(self.time),
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "prefill_node": self.prefill_node,
            "prefill_rid": self.prefill_rid,
            "evidence": sorted(set(self.evidence)),
        }


class _Evidence:
    """What the driver keeps besides the pipeline: bounded, report-shaped."""

    def __init__(
        self,
        parquet: RequestParquetWriter | None,
        long_prompt_tokens: int = ImpossiblyFastPrefillConfig().critical_min_uncached_tokens,
        refusal_list: RefusalListWriter | None = None,
    ) -> None:
        self.findings: list[Finding] = []
        self.findings_dropped: Counter[str] = Counter()
        self.exposed: dict[str, ExposedRequest] = {}
        self.timing: list[TimingPoint] = []
        self._timing_stride = 1
        self._timing_seen = 0
        # bin start -> outcome -> count, `deferred_bin_seconds` wide; the first and last bin
        # starts seen, to widen the bins (merging them) when the span outgrows the cap.
        self.deferred: dict[float, Counter[str]] = {}
        self.deferred_bin_seconds = DEFERRED_BIN_WIDTHS[0]
        self._deferred_span: tuple[float, float] | None = None
        self._recent_releases: dict[tuple[str, str, str], None] = {}
        # The first and last deferred release that timed out, as logged (not their bins).
        self.timeout_span: tuple[float, float] | None = None
        # What decode's release counters counted (`sglang:decode_deferred_kv_release_total`):
        # series -> its increases so far, and the increases' reader (resets are restarts).
        self._release_counts: dict[tuple[str, str, str, str], float] = {}
        self._release_deltas = CounterDeltas()
        # (node, outcome) -> when its logged releases timed out or failed, lately (each once).
        self._logged_releases: dict[tuple[str, str], deque[float]] = {}
        # kind ("timeout": logged, "counted": decode's counters) -> node -> the first and last
        # time it was seen: whether the race went on to the end of a node's logs is told from
        # these, counters included (blind review 34 D2: a storm seen only in /metrics).
        self.race_spans: dict[str, dict[str, tuple[float, float]]] = {}
        # Timeouts of holds whose transfer decode lost with its prefill (node, room, time),
        # told apart once the whole input is read (`settle_lost_transfers`): a restart of that
        # prefill may be read after them.
        self._lost_timeouts: list[tuple[str, str, float]] = []
        # node -> prefill node -> the timeouts of transfers lost to that prefill's restart.
        self.restart_timeouts: dict[str, Counter[str]] = {}
        self.parquet = parquet
        # Every one of `refused_without_decode`, listed (the summary names a few).
        self.refusal_list = refusal_list
        # A prompt this long, answered, is the incident's when prefill did not compute it: the
        # timing detector's critical length (`critical_min_uncached_tokens`), as configured.
        self.long_prompt_tokens = long_prompt_tokens
        self.records = 0
        self.prefill_traffic = PrefillTraffic()
        # (node, role) of the sides some request was judged on: from any source.
        self.judged_sides: set[tuple[str, str | None]] = set()
        # Of those, the servers known from trace spans alone (`service@host`).
        self.traced_nodes: set[str] = set()
        # Requests known only from request-metric exports no node could be found for.
        self.unattributed = 0
        # Exposure findings made while their request was judged (`record`), not yet noted.
        self._judged_with_record: set[int] = set()
        # Requests exposed by a finding made after their row was written (a KV canary
        # violation is attributed once the requests in flight have ended): Parquet key ->
        # detectors, for `RequestParquetWriter.close`.
        self.exposed_later: dict[str, set[str]] = {}
        # Refused requests decode received and logged no end for (`UNKNOWN_OUTCOME`).
        self.refused_outcome_unknown = 0
        # Answers of prompts a prefill pool in force could not take, no line naming the
        # prefill node they met (`NO_PREFILL_NAMED`).
        self.prefill_node_unknown = 0
        # ... and those that met a prefill host no log read announced (`PREFILL_HOST_UNREAD`).
        self.prefill_host_unread = 0
        self._prefill_host_unread_seen: set[tuple[str | None, str | None, str | None]] = set()
        # PD requests (a room) judged; the nodes of each role; and the requests prefill refused
        # (or ran as one-token stubs) of which no decode side was read, a few rooms named.
        self.pd_requests = 0
        # PD requests prefill served (not refused) of which no decode node read logged anything,
        # and a few of their rooms (`decode_unread_line`).
        self.prefill_alone = 0
        self.prefill_alone_rooms: list[str] = []
        self.pd_nodes: dict[str, set[str]] = {"prefill": set(), "decode": set()}
        # Decode answers of long prompts with no prefill side and no timing (no finish line,
        # no span: decode's time stats alone), a few rids named: with prefill's logs missing,
        # nothing judges them (blind review 12f: "judged by their timing alone" over answers
        # that had none).
        self.untimed_long_answers = 0
        self.untimed_long_rids: list[str] = []
        self.refused_without_decode = 0
        self.refused_without_decode_rooms: list[str] = []
        # Of those, the ones no line named by room (a prefill refusal by rid alone: SGLang's
        # default logging), a few rids named; and when the refusals of both kinds came.
        self.refused_without_decode_rids: list[str] = []
        # Refusals whose answer is one of several exposed answers of its length
        # (`settle_refusals`).
        self.refused_matched_ambiguously = 0
        self.refused_without_room = 0
        self.refused_first: float | None = None
        self.refused_last: float | None = None
        # `(node, time) -> bool`: the node's release refuses for good (set by `run_forensics`
        # from the pipeline): its refusals by rid alone reach no decode node.
        self.refusal_final: Callable[[str, float | None], bool] | None = None
        # Whether every decode node of a prefill node's deployment in force at a time states a
        # context shorter than a prompt (`over_decode_context`); set by the run.
        self.over_decode_context: Callable[[str, int | None, float | None], bool] | None = None
        self.refused_over_decode_context = 0
        # Refusals no line joined to a room, on a release not known to refuse for good when
        # judged: (node, time, rid, request time, the rooms its answer is among:
        # `RequestRecord.contended_rooms`), asked again once the whole input is read
        # (`settle_refusals`).
        self._refused_alone_held: list[
            tuple[str, float | None, str | None, float | None, tuple[str, ...], int | None, str]
        ] = []
        # PD one-token stubs by node and second, a refusal line naming no request each may be
        # the refusal of (`settle_refusals`); at most `MAX_REFUSALS_HELD` in all.
        self._stubs: dict[str, Counter[int]] = {}
        self._stubs_kept = 0
        # Prefill node -> (time, decode answered with success) of its refusals decode logged:
        # what its release does with them when no snapshot tells the release.
        self.refusals_decoded: dict[str, list[tuple[float, bool]]] = {}
        self._refusals_decoded_kept = 0

    def finding(self, finding: Finding) -> None:
        if len(self.findings) < MAX_FINDINGS_KEPT or finding.severity != "info":
            self.findings.append(finding)
        else:
            self.findings_dropped[finding.detector] += 1
        if finding.evidence.get("decode_outcome") == UNKNOWN_OUTCOME:
            self.refused_outcome_unknown += 1
        basis = finding.evidence.get("pool_basis")
        if basis == NO_PREFILL_NAMED:
            self.prefill_node_unknown += 1
        elif basis == PREFILL_HOST_UNREAD:
            # Once per request: its answer may be too long and too fast both.
            answer = (finding.bootstrap_room, finding.node, finding.rid)
            if answer not in self._prefill_host_unread_seen:
                self._prefill_host_unread_seen.add(answer)
                self.prefill_host_unread += 1
        if finding.exposure:
            self._exposed_entry(finding).evidence.append(finding.detector)
            if id(finding) in self._judged_with_record:
                self._judged_with_record.discard(id(finding))
            else:
                key = request_key(finding.bootstrap_room, finding.node, finding.rid)
                self.exposed_later.setdefault(key, set()).add(finding.detector)

    def _exposed_entry(self, finding: Finding) -> ExposedRequest:
        key = exposed_response(finding)
        entry = self.exposed.get(key)
        if entry is None:
            evidence = finding.evidence
            # Filled from the request itself when it is judged (`record`); a finding made
            # later carries the same details in its evidence.
            entry = self.exposed[key] = ExposedRequest(
                finding.rid,
                finding.bootstrap_room,
                finding.node,
                finding.time,
                _int(evidence.get("prompt_tokens")),
                _int(evidence.get("cached_tokens")),
                _text(evidence.get("prefill_node")),
                _text(evidence.get("prefill_rid")),
            )
        return entry

    def record(self, record: RequestRecord, findings: list[Finding]) -> None:
        # Called from inside the pipeline, before the driver notes these findings: the entry
        # is made here, so the request's details reach it (the findings then add their names).
        self.records += 1
        self.prefill_traffic.note(record)
        if any(side.node == EXPORT_NAME for side in record.sides):
            self.unattributed += 1
        # A refusal alone (`_claim_refusal`) is no sign that its node logs its requests.
        self.judged_sides.update(
            (side.node, side.role) for side in record.sides if not side.refusal_only
        )
        self.traced_nodes.update(side.node for side in record.sides if side.traced_only)
        room = record.bootstrap_room
        if room is not None:
            self._pd_request(record, room)
        elif self._refused_alone(record):
            self.pd_requests += 1
            self.pd_nodes["prefill"].add(record.sides[0].node)
            side = record.sides[0]
            if len(self._refused_alone_held) < MAX_REFUSALS_HELD:
                when = record.began
                self._refused_alone_held.append(
                    (
                        side.node,
                        side.last_time,
                        side.rid,
                        when,
                        record.contended_rooms,
                        record.prompt_tokens,
                        _refusal(side),
                    )
                )
            else:
                self._refused_without_decode(record, rid=side.rid)
        exposing = [f for f in findings if f.exposure]
        exposed_by = [f.detector for f in exposing]
        self._judged_with_record.update(id(f) for f in exposing)
        serving = record.serving
        prefill = record.prefill
        if exposing:
            entry = self._exposed_entry(exposing[0])
            if serving is not None:
                entry.rid, entry.node = serving.rid, serving.node
                entry.time = serving.sent_time or serving.finished_time or entry.time
            entry.prompt_tokens = record.prompt_tokens or entry.prompt_tokens
            entry.cached_tokens = record.cached_tokens
            if prefill is not None:
                entry.prefill_node, entry.prefill_rid = prefill.node, prefill.rid
        self._sample_timing(record, bool(exposed_by))
        if (
            prefill is None
            and serving is not None
            and not exposed_by
            and _untimed_long(serving, self.long_prompt_tokens)
        ):
            self.untimed_long_answers += 1
            if serving.rid and len(self.untimed_long_rids) < _NAMED_UNTIMED:
                self.untimed_long_rids.append(serving.rid)
        if self.parquet is not None:
            self.parquet.add(record, exposed_by)

    def _pd_request(self, record: RequestRecord, room: str) -> None:
        self.pd_requests += 1
        decode_seen = False
        for side in record.sides:
            nodes = self.pd_nodes.get(side.role or "")
            if nodes is not None:
                nodes.add(side.node)
                decode_seen = decode_seen or side.role == "decode"
        # A one-token stub is what 0.5.19 makes of a prompt it refused, with or without the
        # refusal line (audit Y); without decode's side, nothing says the prompt was longer.
        prefill = record.prefill
        refused = prefill is not None and (
            prefill.stub
            or (record.prefill_refused and prefill.reject_reason not in _TOKENIZER_REFUSALS)
        )
        if refused and not decode_seen:
            self._refused_without_decode(record, room=room)
        elif prefill is not None and not decode_seen:
            self.prefill_alone += 1
            if len(self.prefill_alone_rooms) < 3:
                self.prefill_alone_rooms.append(room)
        if refused and decode_seen and prefill is not None:
            at = prefill.first_time if prefill.first_time is not None else record.began
            if at is not None and self._refusals_decoded_kept < MAX_REFUSALS_HELD:
                self._refusals_decoded_kept += 1
                self.refusals_decoded.setdefault(prefill.node, []).append((at, record.served))
        if prefill is not None and prefill.stub and self._stubs_kept < MAX_REFUSALS_HELD:
            at = prefill.first_time if prefill.first_time is not None else prefill.last_time
            if at is not None:
                self._stubs.setdefault(prefill.node, Counter())[math.floor(at)] += 1
                self._stubs_kept += 1

    def _refused_alone(self, record: RequestRecord) -> bool:
        """A PD prefill's refusal no line joined to a room (`RequestLedger._refusal_alone`), on a
        release that may still hand it to decode (before 0.5.20, or one no input tells)."""
        if len(record.sides) != 1:
            return False
        side = record.sides[0]
        if side.role != "prefill" or not side.refusal_only:
            return False
        if side.reject_reason in _TOKENIZER_REFUSALS:
            return False
        final = self.refusal_final
        return final is None or not final(side.node, side.last_time)

    def settle_refusals(self) -> None:
        """The refusals held by `record`, asked again at the end of the input: a `/server_info`
        saved after the logs, dated by its file, tells the release late, and on one that
        refuses for good they are no request decode may have answered.

        Why: blind review 9a, 0.5.20 to 0.5.23 deployments with a small prefill pool and their
        `/server_info` saved after the logs: NOT JUDGED, exit 2, over refusals the engine had
        made for good."""
        held, self._refused_alone_held = self._refused_alone_held, []
        final = self.refusal_final
        exposed_rooms = {entry.bootstrap_room for entry in self.exposed.values()}
        for node, at, rid, when, rooms, prompt_tokens, refusal in held:
            if rooms and exposed_rooms.issuperset(rooms):
                # Several answers of its length could be its, each named exposed: its answer is
                # one of them, not missing (blind review 49 D3: "NO DECODE SIDE: 5" beside the
                # 5 exposures they stood for). One request, counted once.
                self.refused_matched_ambiguously += 1
                self.records -= 1
                self.pd_requests -= 1
                continue
            if rid is None and self._stub_of(node, at):
                # The refusal of a stub this run judged by its room (a 2025 refusal line names
                # no rid): one request, counted once (blind review 37 D4: 28 leaks named, and
                # 28 more "refused ... joined to no decode answer", 691 requests of 663).
                self.records -= 1
                self.pd_requests -= 1
                continue
            if final is None or not final(node, at):
                self._count_refused_without_decode(
                    when, rid=rid, node=node, prompt_tokens=prompt_tokens, refusal=refusal
                )

    def _stub_of(self, node: str, at: float | None) -> bool:
        """Whether a stub on `node` near `at` is left to claim a refusal (and claim it)."""
        stubs = self._stubs.get(node)
        if stubs is None or at is None:
            return False
        second = math.floor(at)
        for near in range(second - STUB_OF_REFUSAL_SECONDS, second + STUB_OF_REFUSAL_SECONDS + 1):
            if stubs.get(near, 0) > 0:
                stubs[near] -= 1
                return True
        return False

    def _refused_without_decode(
        self, record: RequestRecord, *, room: str | None = None, rid: str | None = None
    ) -> None:
        prefill = record.prefill or record.sides[0]
        self._count_refused_without_decode(
            record.began,
            room=room,
            rid=rid if rid is not None else prefill.rid,
            node=prefill.node,
            prompt_tokens=record.prompt_tokens,
            refusal=_refusal(prefill),
        )

    def _count_refused_without_decode(
        self,
        when: float | None,
        *,
        room: str | None = None,
        rid: str | None = None,
        node: str | None = None,
        prompt_tokens: int | None = None,
        refusal: str | None = None,
    ) -> None:
        over = self.over_decode_context
        if over is not None and node is not None and over(node, prompt_tokens, when):
            # Decode's tokenizer refused it before any line names it: no answer is missing
            # (blind review 62 J1: a context capped on decode, 27 such refusals said as "no
            # decode side", whose answers might have leaked).
            self.refused_over_decode_context += 1
            return
        self.refused_without_decode += 1
        if self.refusal_list is not None:
            self.refusal_list.add(
                when,
                node=node,
                room=room,
                rid=rid,
                prompt_tokens=prompt_tokens,
                refusal=refusal,
            )
        if room is not None and len(self.refused_without_decode_rooms) < 3:
            self.refused_without_decode_rooms.append(room)
        if room is None:
            self.refused_without_room += 1
            if rid is not None and len(self.refused_without_decode_rids) < 3:
                self.refused_without_decode_rids.append(rid)
        if when is not None:
            first, last = self.refused_first, self.refused_last
            self.refused_first = when if first is None else min(first, when)
            self.refused_last = when if last is None else max(last, when)

    def _sample_timing(self, record: RequestRecord, exposed: bool) -> None:
        prompt = record.prompt_tokens
        serving = record.serving
        if not prompt or serving is None:
            return
        seconds = _fastest_timing(record, serving)
        if seconds is None:
            return
        uncached = max(prompt - (record.cached_tokens or 0), 1)
        point = TimingPoint(prompt, uncached, seconds / uncached, exposed)
        if exposed:
            self.timing.append(point)
            return
        self._timing_seen += 1
        if self._timing_seen % self._timing_stride:
            return
        self.timing.append(point)
        if len(self.timing) > MAX_TIMING_POINTS:
            # Halve the honest sample and take every other point from now on: bounded, even.
            self._timing_stride *= 2
            self.timing = [p for i, p in enumerate(self.timing) if p.exposed or i % 2 == 0]

    def release_counter(
        self,
        event: Event,
        scraped_before: float | None = None,
        started_before: float | None = None,
    ) -> None:
        """A sample of decode's deferred-release counter: its increase since the series' last.
        Logs at ERROR show no timeout (a WARNING): the counters are then all there is (blind
        review: "0 timed out" beside a storm found in them). `scraped_before`: the node's last
        scrape before this one (`ConfigTimeline.scraped_before`), from which a series new now
        counted, by the detectors' rule (`CounterDeltas.delta`): a node whose earlier scrapes
        held no release series at all had its first storm's timeouts taken as a baseline
        (blind review 44 D1); `started_before`: the node's last start-up, from which every
        series counted again (blind review 51 D2)."""
        labels = event.get("labels") or {}
        value = event.get("value")
        if not isinstance(labels, dict) or not isinstance(value, int | float):
            return
        series = f"{event.node}|{sorted(labels.items())}"
        before = self._release_deltas.last.get(series)
        since = before[1] if before is not None else scraped_before or started_before
        increase = self._release_deltas.delta(
            series,
            float(value),
            event.time,
            absent_since=scraped_before,
            started_at=started_before,
        )
        if increase > 0:
            # Ranks of one DP group count the same releases: each counted once, as the detector
            # does (the largest of them), summed over DP groups.
            key = (
                event.node,
                str(labels.get("outcome", "")),
                str(labels.get("dp_rank", "")),
                series,
            )
            self._release_counts[key] = self._release_counts.get(key, 0.0) + increase
            if key[1] in ("timeout", "error") and increase > self._logged_since(
                event.node, key[1], since, event.time
            ):
                # More than the lines showed since the sample before: a sign the lines missed,
                # dated at this sample. No more, it is those lines' (dated as logged): blind
                # review 53 D3, a timeout logged 35 min before the end counted again at the
                # last scrape read as the race going on to the end.
                self._race_seen("counted", event.node, event.time)

    def _logged_since(
        self, node: str, outcome: str, since: float | None, until: float | None
    ) -> int:
        """How many of `node`'s logged releases of `outcome` came after `since` (all of those
        remembered when not known), up to `until`."""
        times = self._logged_releases.get((node, outcome)) or ()
        return sum(
            1
            for when in times
            if (since is None or when > since) and (until is None or when <= until)
        )

    def _race_seen(self, kind: str, node: str | None, when: float | None) -> None:
        if when is None or node is None:
            return
        spans = self.race_spans.setdefault(kind, {})
        span = spans.get(node)
        spans[node] = (when, when) if span is None else (min(span[0], when), max(span[1], when))

    def release_counted(self, only: str | None = None) -> dict[str, int]:
        """Outcome -> releases decode's counters counted (`only` that node's), each DP group
        once."""
        groups: dict[tuple[str, str, str], float] = {}
        for (node, outcome, dp, _), total in self._release_counts.items():
            if only is None or node == only:
                groups[(node, outcome, dp)] = max(groups.get((node, outcome, dp), 0.0), total)
        counted: Counter[str] = Counter()
        for (_, outcome, _), total in groups.items():
            counted[outcome] += round(total)
        return dict(sorted((k, v) for k, v in counted.items() if v))

    def _timed_out(self, node: str, when: float) -> None:
        span = self.timeout_span
        self.timeout_span = (
            (when, when) if span is None else (min(span[0], when), max(span[1], when))
        )
        self._race_seen("timeout", node, when)

    def settle_lost_transfers(self, ctx: DetectionContext) -> None:
        """Once the whole input is read: the timeouts of holds whose transfer was lost to a
        prefill seen starting again are a restart's (`collector.state.lost_transfers`), the
        rest signs of the race like any timeout. A node's counters counted a restart's
        timeouts too: where they counted no more than those, they are no sign either."""
        lost, self._lost_timeouts = self._lost_timeouts, []
        for node, room, when in lost:
            prefill = ctx.lost.to_restart(room, ctx.timeline)
            if prefill is None:
                self._timed_out(node, when)
            else:
                self.restart_timeouts.setdefault(node, Counter())[prefill] += 1
        counted = self.race_spans.get("counted") or {}
        for node, prefills in self.restart_timeouts.items():
            told = self.release_counted(node)
            if node in counted and set(told) <= {"timeout", "drained"}:
                if told.get("timeout", 0) <= sum(prefills.values()):
                    del counted[node]

    def deferred_release(self, event: Event, lost: LostTransfers) -> None:
        when = event.time
        if when is None:
            return
        # Every TP rank may log the same release: count it once, as the detector does.
        room = event.get("bootstrap_room")
        outcome = str(event.get("outcome"))
        if room is not None:
            key = (event.node, str(room), outcome)
            if key in self._recent_releases:
                return
            self._recent_releases[key] = None
            if len(self._recent_releases) > RECENT_RELEASES:
                del self._recent_releases[next(iter(self._recent_releases))]
        if outcome in ("timeout", "error"):
            logged = self._logged_releases.get((event.node, outcome))
            if logged is None:
                logged = self._logged_releases[(event.node, outcome)] = deque(
                    maxlen=LOGGED_RELEASES
                )
            logged.append(when)
        if outcome == "timeout" and room is not None and lost.gone(room):
            if len(self._lost_timeouts) < MAX_LOST_TIMEOUTS:
                self._lost_timeouts.append((event.node, str(room), when))
            else:
                self._timed_out(event.node, when)
        elif outcome == "timeout":
            self._timed_out(event.node, when)
        width = self.deferred_bin_seconds
        start = when - when % width
        span = self._deferred_span
        if span is None:
            self._deferred_span = (start, start)
        elif not span[0] <= start <= span[1]:
            first, last = min(span[0], start), max(span[1], start)
            if last - first >= MAX_DEFERRED_BINS * width:
                # Too many bins for the span: the next width that fits, old bins merged into it.
                while last - first >= MAX_DEFERRED_BINS * width:
                    width = next((w for w in DEFERRED_BIN_WIDTHS if w > width), 2 * width)
                    first, last = first - first % width, last - last % width
                merged: dict[float, Counter[str]] = {}
                for old, counts in self.deferred.items():
                    merged.setdefault(old - old % width, Counter()).update(counts)
                self.deferred, self.deferred_bin_seconds = merged, width
                start = when - when % width
            self._deferred_span = (first, last)
        self.deferred.setdefault(start, Counter())[outcome] += 1


def _restart_losses(evidence: _Evidence, pipeline: DetectionPipeline) -> dict[str, Any]:
    """Transfers decode lost with a prefill seen starting again, and the holds of them that
    timed out, by that prefill: a restart's, no sign of the race (blind review 35 D5)."""
    transfers = pipeline.context.lost.restarted(pipeline.timeline)
    timeouts: Counter[str] = Counter()
    for prefills in evidence.restart_timeouts.values():
        timeouts.update(prefills)
    return {
        "transfers": sum(transfers.values()),
        "timeouts": sum(timeouts.values()),
        "prefill_nodes": sorted(set(transfers) | set(timeouts)),
    }


def consumed(pipeline: DetectionPipeline, *, node_windows: bool = False) -> KindFilter:
    """The events the pipeline reads (its timeline, its ledger, its detectors, by kind and for
    metrics by signal). The rest are counted by the parser but never need their fields extracted
    or their way to the judging process. With `node_windows`, batch lines are folded into
    per-window partials in the workers and never shipped themselves. With a ledger reading
    sides, request lines are folded into sides in the workers and shipped only when a detector
    reads them too (and time stats when they tell a role: `RequestSideAssembler`)."""
    kinds = set(TIMELINE_KINDS) | set(pipeline.ledger.accepted_kinds) | {"deferred_release"}
    if pipeline.ledger.config.input == "sides":
        kinds.discard("request_time_stats")
    signals: set[str] | None = set(TIMELINE_METRIC_SIGNALS)
    for det in pipeline.detectors:
        kinds |= det.consumed_kinds
        if "metric" in det.event_kinds:
            if det.metric_signals is None:
                signals = None
            elif signals is not None:
                signals |= det.metric_signals
    if node_windows:  # what a detector reads of them, the workers ship (`prefill_hit`)
        kinds -= BATCH_KINDS
    return KindFilter(frozenset(kinds), frozenset(signals) if signals is not None else None)


def _for_workers(config: PipelineConfig) -> PipelineConfig:
    """The ledger reads sides and the window anomaly detector per-window partials, both built
    by the parsing workers, so that request and batch lines never leave the workers (same
    records and features, tested equal)."""
    ledger = config.ledger.model_copy(update={"input": "sides"})
    config = config.model_copy(update={"ledger": ledger})
    if "telemetry_anomaly" in config.disabled:
        return config
    detectors = dict(config.detectors)
    detectors["telemetry_anomaly"] = {
        **detectors.get("telemetry_anomaly", {}),
        "input": "node_windows",
    }
    # The partials say which nodes logged in each window: the storm detectors count only the
    # windows someone reported in.
    for storm in ("deferred_release_timeouts", "transfer_failure_storm"):
        detectors[storm] = {**detectors.get(storm, {}), "reported_windows": True}
    return config.model_copy(update={"detectors": detectors})


def _anomaly_window(config: PipelineConfig) -> float | None:
    if "telemetry_anomaly" in config.disabled:
        return None
    params = TelemetryAnomalyConfig.model_validate(config.detectors.get("telemetry_anomaly", {}))
    return float(params.window_seconds)


@dataclass(frozen=True)
class WorkerStages:
    """Stage factory for the parsing workers, on each node's logs: its request lines folded
    into sides and, when the window detector runs, its per-window partials."""

    ledger: LedgerConfig
    window_seconds: float | None

    def __call__(self, key: tuple[str, str]) -> ChainedStages | None:
        if not key[1].startswith("log"):
            return None
        stages: list[Stage] = []
        if self.window_seconds is not None:
            stages.append(NodeWindowAggregator(self.window_seconds))
        cfg = self.ledger
        # A side still open a fifth of the join window after its last line goes to the judge as
        # it stands (its later lines follow as another part): a decode writing a long answer
        # is then known to be in flight before the ledger would give up waiting for it.
        in_flight = min(cfg.max_open_seconds, cfg.join_window_seconds / 5)
        stages.append(RequestSideAssembler(cfg.settle_seconds, in_flight, cfg.max_entries))
        return ChainedStages(stages)


def _int(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _text(value: Any) -> str | None:
    return str(value) if value is not None else None


@dataclass
class ForensicsResult:
    summary: dict[str, Any]
    outputs: dict[str, Path]
    seconds: float


def _total_bytes(paths: Iterable[str]) -> int:
    """The bytes the progress bar counts up to (what discovery counts, it counts again)."""
    total = 0
    for raw in paths:
        root = Path(raw)
        files = regular_files(root, Counter()) if root.is_dir() else [root]
        for path in files:
            try:
                if path.is_file():
                    total += path.stat().st_size
            except OSError:
                continue
    return total


@batch_gc_schedule()
def run_forensics(
    paths: list[str],
    out_dir: Path,
    *,
    json_path: Path | None = None,
    config: PipelineConfig | None = None,
    progress_stream: TextIO | None = None,
    write_parquet: bool = True,
    workers: int | None = None,
    log_date: float | None = None,
) -> ForensicsResult:
    """Read everything under `paths`, judge it, write the reports into `out_dir` (`log_date`:
    see `parse.streams_of`)."""
    started = time.perf_counter()
    out_dir.mkdir(parents=True, exist_ok=True)
    outputs: dict[str, Path] = {}
    parquet = RequestParquetWriter(out_dir / "requests.parquet") if write_parquet else None
    config = _for_workers(config or PipelineConfig())
    timing = ImpossiblyFastPrefillConfig.model_validate(
        config.detectors.get(ImpossiblyFastPrefill.name, {})
    )
    refusal_list = RefusalListWriter(out_dir / REFUSAL_LIST_NAME)
    evidence = _Evidence(parquet, timing.critical_min_uncached_tokens, refusal_list)
    window_seconds = _anomaly_window(config)
    pipeline = DetectionPipeline(config, on_record=evidence.record)
    evidence.refusal_final = pipeline.refusal_final
    evidence.over_decode_context = partial(over_decode_context, pipeline.timeline)
    stats = ParseStats()
    progress = Progress(_total_bytes(paths), progress_stream)
    stats.progress = progress.advance
    process = pipeline.process
    note_finding = evidence.finding
    wanted = consumed(pipeline, node_windows=window_seconds is not None)
    events = parallel_events_in_time_order(
        paths,
        stats,
        wanted,
        workers=workers,
        progress=progress.advance,
        stage_factory=WorkerStages(config.ledger, window_seconds),
        log_date=log_date,
    )
    # What the input covers: from its first time to its last, leaving out documents saved
    # without a date in their name, which only the file's time dates (saved at the inquiry,
    # one stretched "logs cover" by months).
    first_time: float | None = None
    last_time: float | None = None
    # Per node, the first and last moment of the requests it logged, and how many it logged
    # (`_decode_apart`, `_decode_ended_early`).
    request_spans: dict[str, list[float]] = {}
    # The span of whole documents' times (snapshots), the cover when no line, span or window was
    # read.
    documents: tuple[float, float] | None = None
    # Per node, the requests it logged in each minute (`_decode_ended_early`: traffic shares).
    request_minutes: dict[str, Counter[int]] = defaultdict(Counter)
    finished = False
    try:
        for event in events:
            when = event.time  # in time order: the source is looked at when time moves on
            earliest = when
            if event.kind == REQUEST_SIDE:
                # Shipped once its lines have settled: their own times are what is covered
                # (exports or spans alone began it at their first request's end + 5 s), from
                # its arrival (a span's start is before its own time, its end).
                side = event.fields["side"]
                when = side.last_time if side.last_time is not None else when
                earliest = min(
                    (t for t in (side.first_time, side.received_time) if t is not None),
                    default=when,
                )
                if when is not None and earliest is not None:
                    span = request_spans.get(event.node)
                    if span is None:
                        request_spans[event.node] = [earliest, when, 1.0]
                    else:
                        span[0], span[1] = min(span[0], earliest), max(span[1], when)
                        span[2] += 1.0
                    request_minutes[event.node][int(when // 60)] += 1
            elif event.kind == "request_trace":  # a span covers its start to its end (its time)
                start = event.fields.get("start")
                if isinstance(start, float) and when is not None and start < when:
                    earliest = start
            if (
                when is not None
                and earliest is not None
                and (
                    first_time is None
                    or earliest < first_time
                    or last_time is None
                    or when > last_time
                )
                and not dated_by_file_time(event.source)
            ):
                if whole_document(event.source):
                    # A snapshot tells a configuration, not what was served: the logs' span
                    # is what the verdict covers, the snapshots' only without any (blind
                    # review 65 D3: a snapshot half an hour before the first log line widened
                    # "the logs cover", over leaks no line read).
                    documents = (
                        (earliest, when)
                        if documents is None
                        else (min(documents[0], earliest), max(documents[1], when))
                    )
                else:
                    first_time = earliest if first_time is None else min(first_time, earliest)
                    last_time = when if last_time is None else max(last_time, when)
            if event.kind == "deferred_release":
                evidence.deferred_release(event, pipeline.context.lost)
            elif event.kind == "metric" and event.get("signal") == "deferred_release_total":
                timeline = pipeline.context.timeline
                scraped = timeline.scraped_before(event.node, event.time)
                start_up = timeline.last_start_up(event.node, event.time)
                evidence.release_counter(event, scraped, start_up)
            for finding in process(event):
                note_finding(finding)
        for finding in pipeline.finish():
            note_finding(finding)
        evidence.settle_refusals()
        evidence.settle_lost_transfers(pipeline.context)
        if stats.line_span is not None:  # lines no detector took still show what is covered
            first, last = stats.line_span
            first_time = first if first_time is None else min(first, first_time)
            last_time = last if last_time is None else max(last, last_time)
        if first_time is None and documents is not None:
            first_time, last_time = documents
        finished = True
    finally:
        progress.close()
        if parquet is not None and finished:
            parquet.close(exposed_later=evidence.exposed_later)
        elif parquet is not None:  # stopped (Ctrl-C, SIGTERM, a failed worker)
            parquet.abandon()
        if finished:
            refusal_list.close()
        else:
            refusal_list.abandon()
    if pipeline.timeline.implausible_tokens:  # a pool of -5, 1e300: taken as unknown
        stats.dropped["implausible_token_count"] += pipeline.timeline.implausible_tokens
    stats.finished = time.perf_counter()
    if parquet is not None:
        outputs["parquet"] = parquet.path
    if refusal_list.path is not None:
        outputs["refusals"] = refusal_list.path
    summary = build_summary(paths, stats, pipeline, evidence)
    # Lines are stamped to the second, a request's answer to the millisecond it was sent: the
    # logs cover the exposures they date (blind review 9b: the last one 0.8 s after "the end").
    for key in ("first", "last"):
        at = parse_iso_time(summary["exposure"].get(key))
        if at is not None:
            first_time = at if first_time is None else min(first_time, at)
            last_time = at if last_time is None else max(last_time, at)
    summary["input"]["decode_apart"] = _decode_apart(request_spans, pipeline)
    summary["input"]["decode_ended_early"] = _decode_ended_early(
        request_spans, request_minutes, pipeline
    )
    summary["input"]["first_time"] = iso_time(first_time)
    summary["input"]["last_time"] = iso_time(last_time)
    outcomes: Counter[str] = Counter()
    for counts in evidence.deferred.values():
        outcomes.update(counts)
    timeouts = evidence.timeout_span
    summary["abort_signals"] = {
        "deferred_release_outcomes": dict(sorted(outcomes.items())),
        "transfer_failure_lines": stats.events.get("transfer_failed", 0),
        # When the race ran: the first and the last timeout as logged (bin edges read as a
        # storm going on to the end of the logs, review).
        "timeouts_between": (
            [iso_time(timeouts[0]), iso_time(timeouts[1])] if timeouts is not None else None
        ),
        "deferred_release_counted": evidence.release_counted(),
        "seen_by_node": {
            kind: {node: [iso_time(a), iso_time(b)] for node, (a, b) in sorted(spans.items())}
            for kind, spans in sorted(evidence.race_spans.items())
        },
        "restart_losses": _restart_losses(evidence, pipeline),
    }
    errors = pipeline.stats.errors
    if errors:
        sites = pipeline.stats.error_sites
        summary["detector_errors"] = {
            name: {"count": count, "first": sites.get(name, "unknown error")}
            for name, count in sorted(errors.items())
        }
    summary["exposure"]["periods"] = exposure_periods(summary)
    summary["verdict"] = verdict(summary)
    summary["outputs"] = {}
    plot_data = _plot_data(pipeline, evidence, summary)
    outputs["html"] = out_dir / "report.html"
    outputs["markdown"] = out_dir / "report.md"
    outputs["csv"] = out_dir / "findings.csv"
    outputs["json"] = json_path or (out_dir / "forensics.json")
    summary["outputs"] = {name: str(path) for name, path in outputs.items()}
    try:
        write_html(outputs["html"], summary, plot_data)
        write_markdown(outputs["markdown"], summary)
        write_findings_csv(outputs["csv"], summary["findings"])
        outputs["json"].parent.mkdir(parents=True, exist_ok=True)
        outputs["json"].write_text(
            json.dumps(summary, indent=2, allow_nan=False, default=_json_default)
        )
    except OSError as exc:  # a full disk, a --json of /dev/full: said, not a traceback
        raise OutputError(f"{exc.filename or out_dir}: {exc.strerror or exc}") from exc
    return ForensicsResult(summary, outputs, time.perf_counter() - started)


def _decode_apart(
    spans: dict[str, list[float]], pipeline: DetectionPipeline
) -> list[dict[str, Any]]:
    """Decode nodes whose requests span no moment any prefill node's requests do: their
    answers were judged by the prefill configuration last logged before them, and nothing of
    prefill's (a refusal, a timing) could be joined to them.

    Why: blind review 18, a prefill log of the day before decode's: every answer judged by a
    pool a day old, and the report read as if the logs covered both days."""
    roles = {node: _last_role(pipeline, node) for node in spans}
    prefills = {node: span[:2] for node, span in spans.items() if roles[node] == "prefill"}
    if not prefills:
        return []
    apart = []
    for node, (first, last, _) in sorted(spans.items()):
        if roles[node] != "decode":
            continue
        if any(start <= last and first <= end for start, end in prefills.values()):
            continue
        apart.append(
            {
                "node": node,
                "first": iso_time(first),
                "last": iso_time(last),
                "prefill": {
                    name: [iso_time(start), iso_time(end)]
                    for name, (start, end) in sorted(prefills.items())[:PREFILLS_LISTED]
                },
                "prefill_nodes": len(prefills),
            }
        )
    return apart


# A decode node's request lines ending this long before its deployment's prefill nodes' do is
# said: the responses it gave after are in no verdict.
ENDED_EARLY_SECONDS: Final = 900.0
# ... and that many times the node's own pace between request lines: at a Poisson pace the
# chance of such a silence is e^-5, under 1% (blind review 57 D3: 2,000 decode nodes answering
# three requests a day each, every one said to have ended early).
ENDED_EARLY_PACES: Final = 5.0
# The hours before and after a decode node's last request line whose traffic shares tell a
# swap from a cut log, and the prefill requests in each it takes to tell them.
SHARE_MINUTES: Final = 60
SHARE_REQUESTS: Final = 20
# Prefill nodes named in one decode node's entry (the rest counted): one entry listing every
# prefill node made the JSON grow with the square of the nodes (157 MB for 2,000 pairs).
PREFILLS_LISTED: Final = 3


def _decode_ended_early(
    spans: dict[str, list[float]],
    minutes: dict[str, Counter[int]],
    pipeline: DetectionPipeline,
) -> list[dict[str, Any]]:
    """Decode nodes whose request lines end `ENDED_EARLY_SECONDS` before those of a prefill node
    of their deployment, when no decode node of it started after and the others did not take
    over its share: prefill went on handing it requests whose answers no line read tells.

    Why: blind review 34 (D6), a decode log cut 40 minutes before prefill's, 22 of 33 exposures
    and 150 timeouts after its end, and nothing said that decode's lines had stopped. A
    blue/green swap, the new decode started minutes before the old one drained, is no cut log
    (blind review 62 D6)."""
    timeline = pipeline.timeline
    roles = {node: _last_role(pipeline, node) for node in spans}
    early = []
    for node, (first, last, count) in sorted(spans.items()):
        config = timeline.current(node)
        if roles[node] != "decode" or config is None:
            continue
        pace = (last - first) / (count - 1) if count > 1 else math.inf
        quiet = max(ENDED_EARLY_SECONDS, ENDED_EARLY_PACES * pace)
        deployment = set(timeline.nodes_with_model(config.model))
        later = {
            other: spans[other][1]
            for other in deployment
            if roles.get(other) == "prefill" and spans[other][1] - last > quiet
        }
        successor = any(
            c.since is not None and c.since > last
            for other in deployment
            if other != node and roles.get(other) == "decode"
            for c in timeline.history(other)
        )
        swapped = successor or _share_taken_over(node, last, deployment, roles, minutes)
        if later and not swapped:
            early.append(
                {
                    "node": node,
                    "last": iso_time(last),
                    "prefill": {
                        name: iso_time(end)
                        for name, end in sorted(later.items(), key=lambda kv: (-kv[1], kv[0]))[
                            :PREFILLS_LISTED
                        ]
                    },
                    "prefill_nodes": len(later),
                }
            )
    return early


def _share_taken_over(
    node: str,
    last: float,
    deployment: AbstractSet[str],
    roles: dict[str, str | None],
    minutes: dict[str, Counter[int]],
) -> bool:
    """Whether the deployment's other decode nodes answered, in the hour after `node`'s last
    request line, at least half the share of prefill's requests `node` had answered in the
    hour before: prefill handed them its traffic, so `node` was swapped out, not cut short.

    Every PD request has a prefill and a decode side; the ratio of decode's to prefill's
    per hour cancels whatever each side leaves unlogged. A cut log leaves the others'
    ratio short by the node's whole share. Too few of prefill's requests to tell
    (`SHARE_REQUESTS`) is no takeover."""
    cut = int(last // 60)
    before, after = range(cut - SHARE_MINUTES, cut), range(cut + 1, cut + 1 + SHARE_MINUTES)

    def count(nodes: Iterable[str], span: range) -> int:
        return sum(minutes[n][m] for n in nodes if n in minutes for m in span)

    prefills = [n for n in deployment if roles.get(n) == "prefill"]
    others = [n for n in deployment if n != node and roles.get(n) == "decode"]
    prefill_before, prefill_after = count(prefills, before), count(prefills, after)
    own = count([node], before)
    if min(prefill_before, prefill_after) < SHARE_REQUESTS or not own:
        return False
    answered_before = own + count(others, before)
    share = own / answered_before
    ratio_before = answered_before / prefill_before
    ratio_after = count(others, after) / prefill_after
    return ratio_after >= ratio_before * (1 - share / 2)


def _refusals_decoded(
    evidence: _Evidence, node: str, history: list[Any], index: int
) -> dict[str, Any]:
    """`refusals_decoded` of a node's configuration `index` ({} when decode logged none of
    its refusals): how many decode answered, how many not, from its start to the next.

    Why: blind review 38 D5, a restart onto a release that refuses for good, with no snapshot
    to tell the release: 21 over-length prompts refused and every one aborted by decode over
    7 h, and the status said "Not over"."""
    seen = evidence.refusals_decoded.get(node)
    if not seen:
        return {}
    since = history[index].since
    start = since if since is not None and index > 0 else -math.inf
    following = history[index + 1].since if index + 1 < len(history) else None
    end = following if following is not None else math.inf
    answered = unanswered = 0
    for at, served in seen:
        if start <= at < end:
            answered += served
            unanswered += not served
    if not answered and not unanswered:
        return {}
    return {"refusals_decoded": {"answered": answered, "unanswered": unanswered}}


def _last_role(pipeline: DetectionPipeline, node: str) -> str | None:
    """The role a node's latest configuration that states one gives it."""
    return next((c.role for c in reversed(pipeline.timeline.history(node)) if c.role), None)


def verdict(summary: dict[str, Any]) -> dict[str, Any]:
    """The run's answer for a machine, as the terminal and the reports word it: whether it found
    exposed responses, found none, or could not tell (NOT JUDGED); and, where it found some,
    whether it was still going on when the logs end (`exposure_status`). Why: a gate read
    `exposure.count` 0 of a NOT JUDGED run as an all-clear (blind review 18)."""
    if summary["exposure"]["count"]:
        status, said = exposure_status(summary)
        answer = {"outcome": "exposed", "status": status, "said": said}
        # The list is a floor when the race ran where no canary watched (blind review 35 D2:
        # 11 named, 66 exposed, and nothing a machine reads said so).
        # So is it when a canary violation's victim could not be named (blind review 36), and
        # when only timing named exposures (blind review 61 D5).
        if unnamed := "; ".join(
            said
            for said in (
                race_unjudged_line(summary),
                canary_unnamed_line(summary),
                timing_only_line(summary),
            )
            if said
        ):
            answer["unnamed"] = unnamed
        return answer
    if reason := not_judged_reason(summary):
        return {"outcome": "not_judged", "status": None, "said": reason}
    if answering_not_judged(summary):
        return {
            "outcome": "none_found_in_judged",
            "status": None,
            "said": "no exposed responses found in the requests judged; some answering nodes "
            "were not judged",
        }
    return {"outcome": "none_found", "status": None, "said": judged_line(summary)}


class OutputError(Exception):
    """An output of the run could not be written (the reading and judging were done)."""


def _json_default(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return str(value)


def _clean(value: Any) -> Any:
    """Evidence values that JSON cannot carry (NaN, inf) become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def _possible(findings: list[Finding], named: set[str | None]) -> dict[str, int]:
    """Findings that list the requests one of which was hit (a KV canary violation with several
    in flight): how many, and how many answered responses they list that are not named above,
    the ones a responder must check next."""
    groups = 0
    answered: set[tuple[Any, Any, Any]] = set()
    for finding in findings:
        candidates = finding.evidence.get("candidates") if finding.severity != "info" else None
        if not candidates:
            continue
        groups += 1
        for c in candidates:
            room, rid = c.get("bootstrap_room"), c.get("rid")
            if c.get("served") and (room or rid) not in named:
                answered.add((room, c.get("node"), rid))
    return {"groups": groups, "responses": len(answered)}


def _without_superseded(findings: list[Finding]) -> list[Finding]:
    """`findings` less those a more severe finding of the same detector says of the same
    subject (node, request) from the same moment.

    Why: live, a condition is paged as it is known and escalated as more is (a pool below the
    context is a warning until a snapshot tells the release, then critical), but a report read
    afterwards that lists both says "the engine version is not known yet" beside the finding
    that names it (blind review 18)."""
    worst: dict[tuple[Any, ...], int] = {}
    for finding in findings:
        key = _subject(finding)
        worst[key] = max(worst.get(key, -1), SEVERITY_RANK.get(finding.severity, 0))
    return [
        f
        for f in findings
        # An exposure names a response, a list of candidates the ones possibly hit, and a
        # violation's `in_flight` 0 that none could be named: what else was said of the
        # moment never stands for them.
        if f.exposure
        or "candidates" in f.evidence
        or "in_flight" in f.evidence
        or SEVERITY_RANK.get(f.severity, 0) >= worst[_subject(f)]
    ]


def _subject(finding: Finding) -> tuple[Any, ...]:
    return (finding.detector, finding.node, finding.time, finding.rid, finding.bootstrap_room)


def _started_unread(timeline: ConfigTimeline, node: str, told: float | None) -> dict[str, Any]:
    """The first start of another node of `node`'s deployment after anything read last told of
    `node` ({} when none): from then on its configuration is carried forward, not known.

    Why: blind review 30a, a prefill known from one snapshot 3.3 hours before the deployment
    restarted with a bigger pool read as "still in force when the logs end", and the verdict
    "Not over"."""
    config = timeline.current(node)
    if told is None or config is None:
        return {}
    starts = [
        (c.since, other, c.generation > 0)
        for other in timeline.nodes_with_model(config.model)
        if other != node
        for c in timeline.history(other)
        if c.since is not None
        and c.since > told
        and (c.generation > 0 or not timeline.began_mid_run(other))
    ]
    if not starts:
        return {}
    when, other, restart = min(starts)
    return {"unread_since": {"time": iso_time(when), "node": other, "restart": restart}}


def _outgrew(pipeline: DetectionPipeline, node: str) -> dict[str, Any]:
    """When `node`'s last configuration was first read prefilling whole a prompt beyond its
    pool ({} when it was not): the node restarted with a bigger pool its logs do not show, by
    then at the latest.

    Why: blind review 53 D1, a `.gz` cut short lost a prefill's restart onto a bigger pool, and
    the verdict said it "still ran a pool below the context" at the end."""
    config = pipeline.timeline.current(node)
    if config is None:
        return {}
    det = _over_length(pipeline)
    at = det.outgrown_at(node, config.generation) if det is not None else None
    return {"outgrown": {"time": iso_time(at)}} if at is not None else {}


def _answered_before_start(pipeline: DetectionPipeline, node: str) -> dict[str, Any]:
    """How many answers came before `node`'s logs begin with its start-up ({} when none): the
    process that prefilled them is not in the logs, so they were judged by no pool.

    Why: blind review 59 D1, a prefill restarted onto a pool over the context a minute after
    a leaked answer; that answer was judged by no pool, and the all-clear said nothing of it."""
    det = _over_length(pipeline)
    count = det.answered_before_start(node) if det is not None else 0
    return {"answered_before_start": count} if count else {}


def over_decode_context(
    timeline: ConfigTimeline, prefill: str, prompt: int | None, when: float | None
) -> bool:
    """Whether every decode node of `prefill`'s deployment in force at `when` states a context
    shorter than `prompt` (and one does): decode's tokenizer refuses such a prompt with a 400
    before any KV is read or any request line written."""
    config = timeline.config_at(prefill, when)
    if prompt is None or config is None:
        return False
    contexts = [
        c.context_len for c in timeline.configs_at(when, config.model) if c.role == "decode"
    ]
    return bool(contexts) and all(c is not None and c < prompt for c in contexts)


def _capped(pipeline: DetectionPipeline, node: str) -> dict[str, Any]:
    """When `node`'s last configuration's pool gap closed by a context capped on the decode
    nodes answering its requests ({} when it did not).

    Why: blind review 62 J1, a context capped on decode only, below the prefill's pool: its
    tokenizer refused every over-length prompt, and the status said "Not over"."""
    config = pipeline.timeline.current(node)
    det = next((d for d in pipeline.detectors if isinstance(d, PoolBelowContext)), None)
    if config is None or det is None:
        return {}
    capped = det.capped_at(node, config.generation)
    if capped is None:
        return {}
    when, by = capped
    return {"capped": {"time": iso_time(when), "by": by}}


def _over_length(pipeline: DetectionPipeline) -> OverLengthAnswered | None:
    """The run's `over_length_answered`, whose held answers tell what a node's configuration
    did not judge (None when it is not run)."""
    return next((d for d in pipeline.detectors if isinstance(d, OverLengthAnswered)), None)


def _replaced(
    pipeline: DetectionPipeline,
    traffic: PrefillTraffic,
    node: str,
    told: float | None,
    one_model: bool,
) -> dict[str, Any]:
    """Of a prefill node whose log ends before the others: the nodes of its deployment that
    took its requests after its last line, when it took none ({} else). Its configuration
    then held no more: the node was gone (`collector.state.prefill_traffic`). `one_model`:
    every node whose model a line states serves the same one."""
    timeline = pipeline.timeline
    config = timeline.current(node)
    if told is None or config is None or _last_role(pipeline, node) != "prefill":
        return {}
    roles: dict[str, list[str]] = {"prefill": [], "decode": []}
    deployment = timeline.nodes_with_model(config.model)
    if one_model and config.model is not None:
        # Nodes whose model no line read states (logs begun mid-run, a pod's start-up lines
        # rotated away) beside one model's: that deployment's.
        deployment += timeline.nodes_with_model(None)
    for other in deployment:
        role = _last_role(pipeline, other)
        if role in roles:
            roles[role].append(other)
    pairs = pipeline.context.pairs

    def went_to(decode: str, host: str, port: int | None, when: float) -> str | None:
        """The node that had announced `host` then, unless `decode`'s answers naming it met
        another's request lines: a pod replaced at one address whose start-up lines were
        not kept announced nothing."""
        owner = timeline.bootstrap_node(host, port, when)
        met = pairs.met_by(decode, host)
        if not met or owner in met:
            return owner
        return next(iter(met)) if len(met) == 1 else None

    found = traffic.replaced(node, told, roles["prefill"], roles["decode"], went_to)
    if found is None:
        return {}
    by, first = found
    return {"replaced": {"time": iso_time(first), "by": by}}


def build_summary(
    paths: list[str], stats: ParseStats, pipeline: DetectionPipeline, evidence: _Evidence
) -> dict[str, Any]:
    exposed = sorted(evidence.exposed.values(), key=lambda e: (e.time or 0.0, e.rid or ""))
    times = [e.time for e in exposed if e.time is not None]
    evidence.findings = pipeline.revised(evidence.findings)
    findings = _without_superseded(
        sorted(
            evidence.findings, key=lambda f: (f.time if f.time is not None else -1.0, f.detector)
        )
    )
    # What every output says, the findings plot too (it drew the superseded warnings beside
    # the criticals that replaced them: "warning (4)" over a report of 0 warnings).
    evidence.findings = findings
    by_severity: Counter[str] = Counter(f.severity for f in findings)
    nodes: dict[str, Any] = {}
    configs = map(pipeline.timeline.current, pipeline.timeline.nodes())
    one_model = len({c.model for c in configs if c is not None} - {None}) <= 1
    for node in pipeline.timeline.nodes():
        history = pipeline.timeline.history(node)
        told = pipeline.timeline.last_told(node)
        nodes[node] = {
            "role": _last_role(pipeline, node),
            **({"traced_only": True} if pipeline.timeline.traced_only(node) else {}),
            "last_read": iso_time(told),
            **(
                _replaced(pipeline, evidence.prefill_traffic, node, told, one_model)
                or _outgrew(pipeline, node)
                or _capped(pipeline, node)
                or _started_unread(pipeline.timeline, node, told)
            ),
            **_answered_before_start(pipeline, node),
            "config": [
                {
                    "time": iso_time(c.since),
                    "max_total_num_tokens": c.pool_tokens,
                    "dcp_size": c.dcp_size,
                    # The engine's own prompt limit, when it stated one (`/server_info`, a
                    # truncation warning): what the prompts were judged against.
                    "max_req_input_len": c.max_req_input_len,
                    "prompt_capacity": c.prompt_pool,
                    "context_len": c.context_len,
                    "role": c.role,
                    "version": c.version,
                    "kv_checksum": c.kv_checksum,
                    "transfer_backend": c.transfer_backend,
                    "kv_canary": c.kv_canary,
                    **_refusals_decoded(evidence, node, history, index),
                }
                for index, c in enumerate(history)
            ],
        }
    read = stats.to_json_dict()
    return {
        "schema_version": 1,
        "generated_by": f"kvwatch {__version__} forensics",
        "exposure": {
            "requests": [e.to_json_dict() for e in exposed],
            "first": iso_time(min(times)) if times else None,
            "last": iso_time(max(times)) if times else None,
            "count": len(exposed),
            "undated": len(exposed) - len(times),
            "possible": _possible(findings, {e.bootstrap_room or e.rid for e in exposed}),
        },
        "findings": [_clean(f.to_json_dict()) for f in findings],
        "findings_by_severity": {s: by_severity.get(s, 0) for s in SEVERITY_RANK},
        "nodes": nodes,
        "input": {
            "paths": [str(p) for p in paths],
            "files": read["files"],
            "bytes": read["bytes"],
            "lines": read["lines"],
            "events_by_kind": read["events_by_kind"],
            "unclassified_engine_lines": read["unclassified_engine_lines"],
            "unclassified_other_lines": read["unclassified_other_lines"],
            "noise_by_category": read["noise_by_category"],
            "dropped_by_reason": read["dropped_by_reason"],
            **({"dropped_files": read["dropped_files"]} if "dropped_files" in read else {}),
            **({"undated_request_lines": n} if (n := stats.undated_requests) else {}),
            "log_utc_offsets": {
                node: [zone_name(zone) for zone in zones]
                for node, zones in sorted(stats.log_zones.items())
            },
            # Of the logs that gave events: a router's lines are noise, however stamped (blind
            # review 29a: "the log stamps of smg-router carry no zone").
            "log_zone_unknown": sorted(n for n in stats.zone_unknown if stats.node_events.get(n)),
            "log_zone_by_startup": {
                node: zone_name(zone) for node, zone in sorted(stats.zone_by_startup.items())
            },
            "log_zone_aligned": {
                node: {"offset": zone_name(zone), "against": against, "against_known": known}
                for node, (zone, against, known) in sorted(stats.zone_aligned.items())
            },
            "log_clock_skews": {
                node: {"seconds": round(seconds, 1), "against": against, "tied": tied}
                for node, (seconds, against, tied) in sorted(stats.clock_skews.items())
            },
            "log_clock_steps": {
                node: {"seconds": round(seconds, 1), "at": iso_time(at)}
                for node, (seconds, at) in sorted(stats.clock_steps.items())
            },
            "log_clock_fell_back": {
                node: [iso_time(at) for at in times]
                for node, times in sorted(stats.clock_fell_back.items())
            },
            "log_clock_offsets": [
                {"node": node, "ahead_of": other, "seconds": round(seconds, 1)}
                for (node, other), seconds in sorted(stats.clock_offsets.items())
            ],
            "merged_logs": dict(sorted(stats.merged_logs.items())),
            "logs_of_both_roles": logs_of_both_roles(pipeline.timeline),
            "newest_first_logs": list(stats.newest_first_logs),
            "repeated_lines": {
                path: {"lines": lines, "earlier": earlier}
                for path, (lines, earlier) in sorted(stats.repeated_lines.items())
            },
            "seconds": read["seconds"],
            "mb_per_second": read["mb_per_second"],
        },
        "requests": {
            "total": evidence.records,
            "unattributed_exports": evidence.unattributed,
            "late_lines": pipeline.ledger.stats.late_events - pipeline.ledger.stats.late_spans,
            "late_lines_by_node": dict(sorted(pipeline.ledger.stats.late_nodes.items())),
            "repeated_lines_by_node": dict(sorted(pipeline.ledger.stats.repeated_nodes.items())),
            "refused_outcome_unknown": evidence.refused_outcome_unknown,
            "prefill_node_unknown": evidence.prefill_node_unknown,
            "prefill_host_unread": evidence.prefill_host_unread,
            "nodes_not_judged": nodes_not_judged(
                stats, nodes, evidence.judged_sides, evidence.traced_nodes
            ),
            "pd_role_missing": pd_role_missing(evidence, nodes, pipeline.timeline),
            "refused_without_decode": {
                "count": evidence.refused_without_decode,
                "rooms": list(evidence.refused_without_decode_rooms),
                "rids": list(evidence.refused_without_decode_rids),
                "without_room": evidence.refused_without_room,
                "first": iso_time(evidence.refused_first),
                "last": iso_time(evidence.refused_last),
                "csv": _path_or_none(evidence.refusal_list),
            },
            "refusals_matched_ambiguously": evidence.refused_matched_ambiguously,
            "refused_over_decode_context": evidence.refused_over_decode_context,
            "prefill_alone": {
                "count": evidence.prefill_alone,
                "of": evidence.pd_requests,
                "rooms": list(evidence.prefill_alone_rooms),
            },
            "received_only": pipeline.ledger.stats.received_let_go,
            "judged_at_cap": pipeline.ledger.stats.evicted,
            "parquet": str(evidence.parquet.path) if evidence.parquet is not None else None,
        },
    }


# Refusals of the tokenizer, before any bootstrap: decode's tokenizer refuses the same request,
# and no stub is made. The leak's refusals are the scheduler's.
_TOKENIZER_REFUSALS: Final = frozenset(
    {"context_length", "context_length_with_output", "no_bootstrap_room"}
)


# Rids named of the long answers no timing judges.
_NAMED_UNTIMED: Final = 3


def _path_or_none(refusal_list: RefusalListWriter | None) -> str | None:
    path = refusal_list.path if refusal_list is not None else None
    return str(path) if path is not None else None


def _refusal(prefill: SideRecord) -> str:
    """How prefill turned the request away, as `refused_without_decode.csv` says it: the
    refusal's reason, else the one-token stub 0.5.19 makes of a prompt it refused."""
    if prefill.reject_reason:
        return prefill.reject_reason
    return "refused" if prefill.rejected else "one-token stub"


def _untimed_long(serving: SideRecord, long_prompt_tokens: int) -> bool:
    """A decode answer to a long prompt that states no time to its first token or its end."""
    return (
        serving.role == "decode"
        and serving.delivered
        and (serving.prompt_length or 0) >= long_prompt_tokens
        and serving.first_token_latency is None
        and serving.e2e_latency is None
        and serving.trace_ttft is None
        and decode_wait(serving.durations) is None
    )


# A prefill and a decode engine starting this close together in one node's log: one file of
# both engines' lines, not a host redeployed from one role to the other.
BOTH_ROLES_SECONDS: Final = 600.0


def logs_of_both_roles(timeline: ConfigTimeline) -> dict[str, dict[str, str | None]]:
    """Node -> when a prefill and a decode engine started in its one log, within
    `BOTH_ROLES_SECONDS` of each other: a file of several engines' lines that no name leading
    each line tells apart, read as one node whose pools and roles are the two engines' mixed
    (blind review 44 D3: said to lack prefill's logs, which it held; the reference incident so
    merged was "stopped" by the decode start that closed prefill's pool gap)."""
    found: dict[str, dict[str, str | None]] = {}
    for node in timeline.nodes():
        starts = [
            (config.since, config.role)
            for config in timeline.history(node)
            if config.since is not None and config.role in PD_ROLES
        ]
        for (first, role), (then, other) in zip(starts, starts[1:], strict=False):
            if role != other and then - first <= BOTH_ROLES_SECONDS:
                found[node] = {str(role): iso_time(first), str(other): iso_time(then)}
                break
    return found


def pd_role_missing(
    evidence: _Evidence, nodes: dict[str, Any], timeline: ConfigTimeline
) -> dict[str, Any] | None:
    """The half of a PD deployment none of whose nodes is in the input, beside the other's
    (None when both are, or neither). Without decode, no response a client got was read, and
    whether decode answered what prefill refused (on releases before 0.5.20 it did, from
    stale pages) cannot be told; without prefill, no refusal and no prefill pool is seen, and
    decode's answers are judged by their timing alone (audit R: one half's logs alone gave
    "no exposed responses found" over a 912,384-token answer). A server only trace spans name
    is listed as the node read it stands for, when that is certain (blind review 29b: SGLang's
    default service name listed decode-0 twice, once as `sglang-decode@host`)."""
    if not evidence.pd_requests:
        return None
    present: dict[str, set[str]] = {role: set() for role in evidence.pd_nodes}
    seen: list[tuple[str, str | None]] = [
        (node, role) for role, found in evidence.pd_nodes.items() for node in found
    ]
    seen += [(node, (info or {}).get("role")) for node, info in nodes.items()]
    for node, role in seen:
        if role in present:
            present[role].add(timeline.traced_stand_in(node) or node)
    missing = [role for role, found in present.items() if not found]
    if len(missing) != 1:
        return None
    (role,) = missing
    other = "decode" if role == "prefill" else "prefill"
    return {
        "role": role,
        "present": sorted(present[other]),
        "requests": evidence.pd_requests,
        "refused": evidence.refused_without_decode,
        "refused_rooms": list(evidence.refused_without_decode_rooms),
        "refused_rids": list(evidence.refused_without_decode_rids),
        "untimed_long": evidence.untimed_long_answers,
        "untimed_long_rids": list(evidence.untimed_long_rids),
    }


# Lines that show a node ran requests (access lines do not: scrapes and health probes), and
# lines that name a request to judge.
_SERVING_KINDS: Final = ("decode_batch", "prefill_batch")
_REQUEST_LINE_KINDS: Final = ("request_received", "request_finished", "request_time_stats")


def nodes_not_judged(
    stats: ParseStats,
    nodes: dict[str, Any],
    judged_sides: AbstractSet[tuple[str, str | None]],
    traced: AbstractSet[str] = frozenset(),
) -> list[dict[str, Any]]:
    """Nodes whose logs show them running requests (batch lines) but name none, or engines
    seen only in their snapshots, and on which no request was judged from any other source:
    their responses are missing from every verdict (SGLang logs requests only with
    `--log-requests`; a case folder may lack a node's log). Said, since "no exposed
    responses" over eight nodes of which one logged its requests is one node's all-clear.
    None are named when requests were judged from request-metric exports no node could be found
    for, or from trace spans of servers no log names (a span names its server
    `<service.name>@<host>`; `--otlp-service-name decode-0` names the log's `decode-0`): those
    may be any node's.

    A row names, as `request_logs`, the request-log files of its role that were judged under
    names of their own (`--log-requests-target DIR` names them for the host, not as the engine's
    log is), when there are as many of those as nodes of the role not judged: the requests they
    hold are most likely the nodes' own."""
    judged = {node for node, _ in judged_sides}
    if EXPORT_NAME in judged:
        return []
    for server in traced:
        service = server.partition("@")[0]
        if service not in stats.node_events:
            return []
        judged.add(service)
    out = []
    for node in sorted({*stats.node_events, *nodes} - set(traced)):
        role = (nodes.get(node) or {}).get("role")
        kinds = stats.node_events.get(node)
        if kinds is None:
            # An engine seen only in its snapshots (its log missing from the case folder) is
            # said when other nodes' logs were read: a router or an unknown service is not.
            if (
                node not in judged
                and node in stats.snapshot_nodes
                and role in _ENGINE_ROLES
                and stats.node_events
            ):
                out.append({"node": node, "role": role, "batch_lines": 0, "snapshots_only": True})
            continue
        serving = {kind: kinds[kind] for kind in _SERVING_KINDS if kinds[kind]}
        if not serving or node in judged or any(kinds[kind] for kind in _REQUEST_LINE_KINDS):
            continue
        row = {"node": node, "role": role, "batch_lines": sum(serving.values())}
        if kinds["request_rejected"]:
            # Its refusals were read and judged (SGLang logs them whatever the flags).
            row["refusals"] = kinds["request_rejected"]
        out.append(row)
    unmatched = [n for n in stats.node_events if n not in stats.snapshot_nodes and n in judged]
    for row in out:
        if row.get("snapshots_only"):
            # Its log may be among them, under another name (blind review 33, D8).
            role = row["role"]
            logs = sorted(n for n in unmatched if (nodes.get(n) or {}).get("role") == role)
            if logs:
                row["logs_unmatched"] = logs
    return _with_request_logs(out, stats, nodes, judged_sides)


def _with_request_logs(
    rows: list[dict[str, Any]],
    stats: ParseStats,
    nodes: dict[str, Any],
    judged_sides: AbstractSet[tuple[str, str | None]],
) -> list[dict[str, Any]]:
    """`rows`, each naming the request-log files judged in its role (`nodes_not_judged`):
    nodes with request lines and no engine line of their own (no batch line, no role from a
    start-up line)."""
    logs_by_role: dict[str, set[str]] = {}
    for node, role in judged_sides:
        kinds = stats.node_events.get(node)
        if (
            role is None
            or kinds is None
            or (nodes.get(node) or {}).get("role") is not None
            or any(kinds[kind] for kind in _SERVING_KINDS)
        ):
            continue
        logs_by_role.setdefault(role, set()).add(node)
    for role, logs in logs_by_role.items():
        of_role = [row for row in rows if row["role"] == role and not row.get("snapshots_only")]
        if of_role and len(logs) >= len(of_role):
            for row in of_role:
                row["request_logs"] = sorted(logs)
    return rows


_ENGINE_ROLES: Final = frozenset({"prefill", "decode", "unified"})


# Exposed responses further apart than this are shaded as separate spans on the time plots:
# one band from the first to the last drew exposure through lulls and downtimes.
EXPOSURE_GAP_SECONDS = 3600.0


def exposure_spans(times: list[float]) -> list[tuple[float, float]]:
    """The exposed responses' times as spans, split where an hour passes without one.

    >>> exposure_spans([10.0, 0.0, 7200.0, 9000.0])
    [(0.0, 10.0), (7200.0, 9000.0)]
    """
    spans: list[tuple[float, float]] = []
    for when in sorted(times):
        if spans and when - spans[-1][1] <= EXPOSURE_GAP_SECONDS:
            spans[-1] = (spans[-1][0], when)
        else:
            spans.append((when, when))
    return spans


# The GPUs a prefill is drawn on in the timing plot's one physical floor line (a node's own
# tp_size judges its requests).
_PLOTTED_GPUS: Final = 8


def _plot_data(
    pipeline: DetectionPipeline, evidence: _Evidence, summary: dict[str, Any]
) -> PlotData:
    floor = None
    per_pair = 0.0
    floor_assumes = ""
    learned: list[LearnedFloor] = []
    for det in pipeline.detectors:
        if isinstance(det, ImpossiblyFastPrefill):
            # One token makes one pair (itself), two make three: the weights' part per token
            # and attention's per pair, from the floor itself.
            one, two = det.physical_floor(1, _PLOTTED_GPUS), det.physical_floor(2, _PLOTTED_GPUS)
            per_pair = two - 2 * one
            floor = one - per_pair
            learned = _learned_floors(det)
            cfg = det.config
            floor_assumes = (
                f"{cfg.model_active_params / 1e9:g}B active parameters, "
                f"{cfg.attention_layers} full-attention layers of width "
                f"{cfg.attention_width} on {_PLOTTED_GPUS} GPUs of "
                f"{cfg.gpu_peak_flops / 1e12:g} TFLOP/s (model_active_params, "
                "attention_layers, attention_width, gpu_peak_flops)"
            )
    pools: dict[str, list[tuple[float, int | None, int | None]]] = {}
    # A configuration in force from the start (`parse._from_start`) is drawn from the first line.
    start = parse_iso_time(summary["input"].get("first_time"))
    # The gaps as the reports say them: a pool only a stated limit implies, a context read on
    # another node of the deployment or only bounded by a refused prompt (the plot showed no
    # pool, or a pool with no context, beside a report saying the gap).
    gaps: dict[tuple[str, str | None], ConfigGap] = {
        (gap.node, gap.since): gap for gap in config_gaps(summary)
    }
    context_floors: set[int] = set()
    for node in pipeline.timeline.nodes():
        for config in pipeline.timeline.history(node):
            since = config.since if config.since is not None else start
            if since is None:
                continue
            pool, context = config.pool_tokens, config.context_len
            gap = gaps.get((node, iso_time(config.since)))
            if gap is not None:
                pool, context = pool if pool is not None else gap.pool, context or gap.context
                if gap.context_floor and config.context_len is None:
                    context_floors.add(gap.context)
            pools.setdefault(node, []).append((since, pool, context))
    times = [e.time for e in evidence.exposed.values() if e.time is not None]
    return PlotData(
        timing=evidence.timing,
        floor_seconds_per_token=floor,
        floor_seconds_per_pair=per_pair,
        floor_assumes=floor_assumes,
        findings=[(f.time, f.severity, f.detector) for f in evidence.findings if f.time],
        learned_floors=learned,
        deferred_outcomes={h: dict(c) for h, c in evidence.deferred.items()},
        deferred_bin_seconds=evidence.deferred_bin_seconds,
        transfer_failures=summary["abort_signals"]["transfer_failure_lines"],
        pools=pools,
        context_floors=sorted(context_floors),
        exposure_spans=exposure_spans(times),
        end_time=pipeline.now,
    )


def _fastest_timing(record: RequestRecord, serving: SideRecord) -> float | None:
    """The request's fastest timing, the plot's y: each is an upper bound on the prefill's
    compute, so the fastest is what a floor judges (prefill's own forward time when it ran
    once, its span's, the answer's time to first token, else its end-to-end time). Before, the
    plot drew time to first token alone, and a leak found by prefill's 21 ms forward time
    stood far above the floor that found it (audit R)."""
    found = []
    for side in record.sides:
        if side.role == "prefill":
            if not side.attempts:
                found.append(side.durations.get("forward_duration"))
            found.append(side.trace_prefill_seconds)
    found.append(serving.time_to_first_token)
    if not any(seconds is not None and seconds > 0 for seconds in found):
        found.append(serving.end_to_end)
    timed = [s for s in found if s is not None and s > 0 and math.isfinite(s)]
    return min(timed) if timed else None


# The learned floors drawn beside the timings (the plot's y), a node's first of these it has
# one for: a prefill node's own forward time or span, else a serving node's time to first token.
_PLOTTED_SOURCES = ("prefill_forward", "trace_prefill", "first_token_latency", "trace_ttft")


def _learned_floors(det: ImpossiblyFastPrefill) -> list[LearnedFloor]:
    """The floors `det` learned from the nodes' own timings, as they stand at the end of the
    run (the safety factor applied): the lines the fast replies were judged by, one a node
    (`_PLOTTED_SOURCES`), as a prompt with nothing cached meets them band after band. Drawn
    whether or not `learn` is on: floors loaded from a saved state judge just the same."""
    cfg = det.config
    if not det.is_fitted:
        return []
    fitted: dict[str, dict[str, list[tuple[float, float, float, float]]]] = {}
    latest: dict[tuple[str, str], float] = {}
    for key, bands in det.models_.items():
        # `node|source`, then `|model|tp` when the node's regime is known (before, such keys
        # were read as a source named after the TP size, and no learned floor was drawn).
        node, _, rest = key.partition("|")
        source = rest.partition("|")[0]
        if source not in _PLOTTED_SOURCES:
            continue
        lines = []
        for band, model in sorted(bands.items()):
            line = model.judged_line(source in QUEUED_SOURCES)
            if line is not None:
                # Band `b` holds contexts from 2**(b-1): an uncached prompt of 2**b tokens on.
                lines.append((float(2**band if band else 0), *line, model.rate))
        if not lines:
            continue
        # A node that ran several models keeps the floor of the one it ran last.
        fits = [m.last_fit for m in bands.values() if m.last_fit is not None]
        fitted_at = max(fits, default=-math.inf)
        if fitted_at >= latest.get((node, source), -math.inf):
            latest[(node, source)] = fitted_at
            fitted.setdefault(node, {})[source] = lines
    floors = []
    for node, by_source in sorted(fitted.items()):
        source = next(s for s in _PLOTTED_SOURCES if s in by_source)
        scale = cfg.learned_scale(source)  # the floor its timings are judged by
        (start, intercept, slope, rate), *longer = by_source[source]
        floors.append(
            LearnedFloor(
                node,
                source,
                intercept / scale,
                slope / scale,
                cfg.learned_min_uncached_tokens,
                from_tokens=start,
                rate=rate / scale,
                longer=tuple((s, i / scale, k / scale, r / scale) for s, i, k, r in longer),
            )
        )
    return floors


def print_outcome(result: ForensicsResult, out: TextIO) -> None:
    """The terminal summary: what was found, the window, the config gap, where the report is;
    nothing the logs chose (a rid, a name) written as a control character."""
    text = io.StringIO()
    _write_outcome(result, text)
    out.write(printable_lines(text.getvalue()))


def _write_outcome(result: ForensicsResult, out: TextIO) -> None:
    summary = result.summary
    exposure = summary["exposure"]
    severities: dict[str, int] = dict(summary["findings_by_severity"])
    data = summary["input"]
    # The whole run, report included (the JSON's `input.seconds` is the reading alone).
    out.write(
        f"read {data['files']:,} files, {data['bytes'] / 1e6:,.1f} MB, {data['lines']:,} lines; "
        f"the whole run took {result.seconds:.1f} s "
        f"({data['bytes'] / 1e6 / max(result.seconds, 1e-9):,.0f} MB/s end to end)\n"
    )
    if data.get("first_time"):
        out.write(f"logs cover {data['first_time']} .. {data['last_time']}\n")
    if exposure["count"]:
        noun = "response" if exposure["count"] == 1 else "responses"
        out.write(
            f"EXPOSED: {exposure['count']:,} {noun}{prompts_answered(exposure)} probably "
            f"carried another request's data, {exposure_window(exposure, ' .. ')}\n"
        )
        out.write(f"STATUS: {status_line(summary)}\n")
        if unnamed := summary["verdict"].get("unnamed"):
            out.write(f"NOT ALL NAMED: {unnamed}\n")
        if periods := periods_line(summary):
            out.write(f"PERIODS: {periods}\n")
        for req in exposure["requests"][:5]:
            out.write(
                f"  {req['time'] or 'time unknown'}  {req['node']}  "
                f"rid={clipped(str(req['rid']))}  "
                f"room={req['bootstrap_room']}  "
                f"prompt={req['prompt_tokens']}  [{', '.join(req['evidence'])}]\n"
            )
        if exposure["count"] > 5:
            out.write(f"  ... {exposure['count'] - 5:,} more in the report\n")
    else:
        if reason := not_judged_reason(summary):
            out.write(f"NOT JUDGED: {reason}\n")
        elif answering_not_judged(summary):
            out.write(
                "no exposed responses found in the requests judged (NOT JUDGED NODES below)\n"
            )
        else:
            out.write(f"no exposed responses found ({judged_line(summary)})\n")
    out.write(
        f"findings: {severities.get('critical', 0):,} critical{per_response(summary)}, "
        f"{severities.get('warning', 0):,} warning, {severities.get('info', 0):,} info"
        f"{info_kinds(summary)}\n"
    )
    if possibly := possibly_exposed_line(summary):
        out.write(f"POSSIBLY EXPOSED: {possibly}\n")
    # What the input itself says, each said only when it applies.
    for label, said in (
        ("", caught_line),
        ("", abort_signals_line),
        ("LOG CLOCKS: ", log_zones_line),
        ("MERGED LOGS: ", merged_logs_line),
        ("DETECTOR ERRORS: ", detector_errors_line),
        ("UNREAD: ", unread_line),
        ("PASSED OVER: ", passed_over_line),
        ("UNDATED: ", _beside_exposures(undated_line)),
        ("OUTCOME UNKNOWN: ", _beside_exposures(outcome_unknown_line)),
        ("PREFILL UNKNOWN: ", _beside_exposures(prefill_unknown_line)),
        ("PREFILL UNREAD: ", _beside_exposures(prefill_unread_line)),
        ("PREFILL UNTOLD: ", _beside_exposures(prefill_untold_line)),
        ("HALF MISSING: ", _beside_exposures(pd_role_missing_line)),
        ("NO DECODE SIDE: ", _beside_exposures(refused_without_decode_line)),
        ("REFUSALS UNPAIRED: ", ambiguous_refusals_line),
        ("ARCHIVES: ", archives_line),
        ("CSV FILES: ", csv_files_line),
        ("CLIENT LINES: ", client_lines_line),
        ("NEWEST FIRST: ", newest_first_line),
        ("REPEATED LINES: ", repeated_lines_line),
        ("LATE LINES: ", late_lines_line),
        ("HELD AT CAP: ", held_at_cap_line),
        ("NOT JUDGED NODES: ", nodes_not_judged_line),
        ("REQUEST LOGS APART: ", request_logs_apart_line),
        ("LOGS APART: ", decode_apart_line),
        ("DECODE ENDED EARLY: ", decode_ended_early_line),
        ("EXPORTS: ", unattributed_exports_line),
        ("POOL UNKNOWN: ", pool_unknown_line),
    ):
        line = said(summary)
        if line:
            out.write(f"{label}{line}\n")
    for gap in config_gaps(summary):
        out.write(
            f"config gap: {gap.node} ({gap.role}) {gap.pool_said()} < {gap.context_said} "
            f"{gap.period()}\n"
        )
    for name, path in result.outputs.items():
        out.write(f"{name:>8}: {path}\n")


def _beside_exposures(said: Sayer) -> Sayer:
    """`said`, only when exposures were found all the same: without them the verdict line
    (NOT JUDGED) says it."""

    def beside(summary: dict[str, Any]) -> str:
        return said(summary) if summary["exposure"]["count"] else ""

    return beside


def stderr_is_terminal() -> bool:
    return sys.stderr.isatty() and os.environ.get("TERM") != "dumb"
