"""`refused_without_decode.csv`: every request prefill refused (or ran as a one-token stub) of
which no decode node in the input logged anything.

Why: on releases before 0.5.20 decode answered such requests from other requests' KV, and with
decode's logs missing nothing here can tell whether it did. The responder has to look each one
up elsewhere (a router's or gateway's logs, the client's), so the reports' "room A, room B,
room C and 23 more" is not enough: this file names them all (blind review 56). Rows go to disk
as they are counted, so the list costs no memory however long it gets. Metadata only.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import IO, Any, Final

from collector.events import iso_time
from collector.forensics.csv_cells import inert_cell

FILE_NAME: Final = "refused_without_decode.csv"

COLUMNS: Final = (
    "time",
    "prefill_node",
    "bootstrap_room",
    "rid",
    "prompt_tokens",
    "refusal",
)


class RefusalListWriter:
    """Writes the rows as they come; the file exists only once a row does (`path` None till
    then), and a run stopped before its end removes it (`abandon`)."""

    def __init__(self, path: Path) -> None:
        self._target = path
        self._handle: IO[str] | None = None
        self._writer: Any = None
        self.rows = 0

    @property
    def path(self) -> Path | None:
        return self._target if self._handle is not None else None

    def add(
        self,
        when: float | None,
        *,
        node: str | None,
        room: str | None,
        rid: str | None,
        prompt_tokens: int | None,
        refusal: str | None,
    ) -> None:
        if self._handle is None:
            self._handle = open(self._target, "w", newline="", encoding="utf-8")  # noqa: SIM115
            self._writer = csv.writer(self._handle)
            self._writer.writerow(COLUMNS)
        row = (iso_time(when), node, room, rid, prompt_tokens, refusal)
        self._writer.writerow([inert_cell(value) for value in row])
        self.rows += 1

    def close(self) -> None:
        """The run's end: with no row, an earlier run's list in the folder is removed, since it
        would read as this run's."""
        if self._handle is not None:
            self._handle.close()
        else:
            self._target.unlink(missing_ok=True)

    def abandon(self) -> None:
        """The run stopped before its end: a partial list would read as the whole one."""
        if self._handle is not None:
            self._handle.close()
            self._target.unlink(missing_ok=True)
            self._handle = None
