"""`kvwatch demo`: the main job on the embedded default, with nothing external needed."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TextIO

from collector.parse import ParseStats, events_in_time_order
from collector.parse_cmd import format_stats

SAMPLE = Path(__file__).parent / "samples" / "incident-excerpt"
_SHOWN = ("capacity", "request_rejected", "request_finished")


def run_demo(out: TextIO | None = None) -> int:
    out = out or sys.stdout
    stats = ParseStats()
    out.write(f"kvwatch demo: parsing the bundled incident excerpt in {SAMPLE}\n\n")
    for event in events_in_time_order([SAMPLE], stats):
        if event.kind in _SHOWN:
            fields = {k: v for k, v in event.fields.items() if v is not None}
            out.write(f"  {event.node:<10} {event.kind:<18} {fields}\n")
    out.write("\n" + format_stats(stats))
    return 0
