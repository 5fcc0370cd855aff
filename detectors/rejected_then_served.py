"""Rejected by prefill, answered by decode: the refusal that did not stop the answer.

Feeds the alert `KVWatchRejectedThenServed`.

Engines before 0.5.20 refused an over-length prompt on prefill (`Input length (N tokens)
exceeds the maximum allowed length` / `Request ... exceeds the maximum number of tokens`),
swapped it for a one-token stub and still sent that stub's KV to decode, which answered from
the rest of its reserved pages: other requests' KV. In the logs this is a refusal on prefill
(a `request_rejected`, an aborted finish with `prompt_tokens: 1`, or, with request logging off,
time stats of a one-token input for a room whose prompt decode logs as longer) and a successful
finish of the same `bootstrap_room` on decode. Critical and an exposure. If another prefill attempt
for the room succeeded, decode had real KV and nothing is raised.

A refusal whose room decode received and then logged no end for (no finish, no abort, no time
stats) is a warning, not an exposure: whether decode answered is not in the logs. A decode that
logs only the finishes slower than N ms (`SGLANG_LOG_REQUEST_EXCEEDED_MS`) leaves out exactly
the fast answers stale pages give, and an engine's own refusal handling ends in a logged abort.
"""

from __future__ import annotations

from typing import ClassVar

from collector.state.request_record import RequestRecord, SideRecord
from detectors.base import Detector, DetectorConfig, answered
from detectors.context import DetectionContext
from detectors.finding import Finding


class RejectedThenServedConfig(DetectorConfig):
    # Count a one-token stub as a refusal: an aborted prefill finish with a one-token prompt,
    # or time stats of a one-token input for a longer prompt (old engines log only the stub
    # when the refusal line is missing or carries no rid).
    count_stub_aborts: bool = True
    # Warn of a refused request decode received and logged no end for (see the module).
    warn_unknown_outcome: bool = True


class RejectedThenServed(Detector[RejectedThenServedConfig]):
    """Prefill refusal followed by a decode success for the same room; feeds
    `KVWatchRejectedThenServed`.

    Examples
    --------
    >>> from detectors.examples import incident_events
    >>> from detectors.pipeline import DetectionPipeline
    >>> pipe = DetectionPipeline(detectors=[RejectedThenServed()])
    >>> [(f.bootstrap_room, f.node, f.exposure) for f in pipe.run(incident_events())]
    [('1001', 'decode-0', True)]
    """

    name: ClassVar[str] = "rejected_then_served"
    alert: ClassVar[str] = "KVWatchRejectedThenServed"
    config_class: ClassVar[type[DetectorConfig]] = RejectedThenServedConfig
    wants_requests: ClassVar[bool] = True

    def _on_request(self, record: RequestRecord, ctx: DetectionContext) -> list[Finding]:
        serving = record.serving
        if serving is None or serving.role != "decode":
            return []
        unknown = not serving.terminal and serving.received_time is not None
        if not serving.delivered and not (unknown and self.config.warn_unknown_outcome):
            return []
        prefills = record.sides_with_role("prefill")
        refusals = [
            s
            for s in prefills
            if s.rejected or (self.config.count_stub_aborts and record.refused(s))
        ]
        if not refusals or any(s.succeeded and not record.refused(s) for s in prefills):
            return []
        refusal = next((s for s in refusals if s.rejected), refusals[0])
        prompt = record.prompt_tokens
        if not refusal.rejected and (prompt is None or prompt <= 1):
            return []
        room = record.bootstrap_room
        what = what_refusal(refusal)
        if not serving.delivered:
            return [self._unknown_outcome(record, serving, refusal, what)]
        summary = (
            f"Prefill {refusal.node} {what} but decode {serving.node} "
            f"{answered(serving, f'bootstrap_room {room}', finish=False)}: the answer was "
            "generated without the prompt's KV"
        )
        return [
            self._request_finding(
                "critical",
                record,
                serving,
                summary=summary,
                evidence={
                    "prompt_tokens": prompt,
                    "completion_tokens": serving.completion_tokens,
                    "refusal": (
                        "rejected"
                        if refusal.rejected
                        else "stub_abort"
                        if refusal.stub_abort
                        else "stub_finish"
                        if refusal.finished
                        else "stub_time_stats"
                    ),
                    "reject_reason": refusal.reject_reason,
                    "reject_input_tokens": refusal.reject_input_tokens,
                    "reject_limit_tokens": refusal.reject_limit_tokens,
                    "prefill_node": refusal.node,
                    "prefill_rid": refusal.rid,
                    "finish_type": serving.finish_type,
                },
                exposure=True,
            )
        ]

    def _unknown_outcome(
        self, record: RequestRecord, serving: SideRecord, refusal: SideRecord, what: str
    ) -> Finding:
        room = record.bootstrap_room
        summary = (
            f"Prefill {refusal.node} {what} and decode {serving.node} received bootstrap_room "
            f"{room} but logged no end for it: if it answered, the answer was generated without "
            "the prompt's KV (decode logging only slow finishes, SGLANG_LOG_REQUEST_EXCEEDED_MS, "
            "leaves out exactly those answers)"
        )
        return self._request_finding(
            "warning",
            record,
            serving,
            summary=summary,
            evidence={
                "prompt_tokens": record.prompt_tokens,
                "decode_outcome": UNKNOWN_OUTCOME,
                "reject_reason": refusal.reject_reason,
                "prefill_node": refusal.node,
                "prefill_rid": refusal.rid,
            },
            exposure=False,
        )


# `evidence["decode_outcome"]` of a refusal whose room decode received and never ended.
UNKNOWN_OUTCOME = "not_logged"


def what_refusal(refusal: SideRecord) -> str:
    """What prefill did with the request, as a summary says it."""
    if refusal.rejected:
        limit = refusal.reject_limit_tokens
        what = f"refused it ({refusal.reject_reason or 'rejected'}"
        return what + (
            # The limit refuses what reaches it (`>=`): "681,279 > 681,279" read as a slip.
            f", {refusal.reject_input_tokens:,} tokens against a limit of {limit:,})"
            if (refusal.reject_input_tokens is not None and limit is not None)
            else ")"
        )
    if refusal.stub_abort:
        return "aborted it as a one-token stub"
    if refusal.finished:
        return f"finished it as a one-token stub ({refusal.finish_type or 'no finish reason'})"
    return "ran it as a one-token stub (its time stats)"
