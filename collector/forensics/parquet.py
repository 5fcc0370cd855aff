"""The joined requests as Parquet, written in batches so memory stays flat over weeks of logs.

One row per request as the deployment saw it (prefill and decode sides joined by bootstrap room):
ids, nodes, token counts, latencies, outcome, and which detectors called it an exposure. Metadata
only: no text ever reaches a `RequestRecord`.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Mapping, Set
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from collector.state.request_record import RequestRecord

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq

# Rows buffered as Python lists before they become one row group: about 1.2 KB of objects a row,
# so 10,000 rows keep the judging process's peak near 195 MiB where 50,000 took it to 240 MiB
# (1.37 GB of incident logs), at the price of a few more row groups.
BATCH_ROWS = 10_000


@cache
def schema() -> pa.Schema:
    """The table's columns. pyarrow is imported here, at the first rows: forensics forks its
    parsing workers before, and they never write Parquet."""
    import pyarrow as pa

    return pa.schema(
        [
            ("key", pa.string()),
            ("bootstrap_room", pa.string()),
            ("serving_node", pa.string()),
            ("serving_rid", pa.string()),
            ("prefill_node", pa.string()),
            ("prefill_rid", pa.string()),
            ("start", pa.timestamp("ms", tz="UTC")),
            ("end", pa.timestamp("ms", tz="UTC")),
            # When the serving node sent the answer (meta_info's stamp, to the millisecond): the
            # time the reports give an exposed response; `end` is its last line's, to the second.
            ("sent", pa.timestamp("ms", tz="UTC")),
            ("prompt_tokens", pa.int64()),
            ("cached_tokens", pa.int64()),
            ("completion_tokens", pa.int64()),
            ("finish_type", pa.string()),
            ("status_code", pa.int64()),
            ("e2e_latency", pa.float64()),
            ("first_token_latency", pa.float64()),
            ("prefill_forward_seconds", pa.float64()),
            ("prefill_refused", pa.bool_()),
            ("served", pa.bool_()),
            ("exposed_by", pa.list_(pa.string())),
        ]
    )


_INT64 = range(-(2**63), 2**63)


def _int64(value: int | None) -> int | None:
    """A count as the int64 column holds it; None past its range (a garbled line's digits),
    which would otherwise stop the run at the first row group."""
    return value if value is None or value in _INT64 else None


def _ms(epoch: float | None) -> int | None:
    """Epoch seconds to the nearest millisecond, as `events.iso_time` writes them in the JSON
    and reports: cut, 12:39:10.583947 was .583 here and .584 there (blind review 18)."""
    if epoch is None or not -9.2e15 < epoch < 9.2e15:
        return None
    return round(epoch * 1000)


class RequestParquetWriter:
    """Rows go to a hidden partial file, renamed to `path` when `close` finishes it: a run
    stopped half way (Ctrl-C, a kill) leaves the last complete run's file beside its reports,
    never a valid-looking file of part of the requests (`abandon` removes the partial one)."""

    def __init__(self, path: Path, batch_rows: int = BATCH_ROWS) -> None:
        if batch_rows < 1:
            raise ValueError("batch_rows must be at least 1")
        self.path = path
        # Hidden (discovery passes over dot files, so a later run over this folder skips it),
        # and one a process: two runs into one `--out` each finish a whole file, the last
        # one's staying (one shared file had the two runs' row groups interleaved, unreadable).
        self._partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
        self.batch_rows = batch_rows
        # column -> its values, by `add` (which fills every column)
        self._rows: defaultdict[str, list[Any]] = defaultdict(list)
        self._writer: pq.ParquetWriter | None = None
        self.rows = 0

    def add(self, record: RequestRecord, exposed_by: list[str]) -> None:
        serving = record.serving
        prefill = record.prefill
        rows = self._rows
        rows["key"].append(record.key)
        rows["bootstrap_room"].append(record.bootstrap_room)
        rows["serving_node"].append(serving.node if serving else None)
        rows["serving_rid"].append(serving.rid if serving else None)
        rows["prefill_node"].append(prefill.node if prefill else None)
        rows["prefill_rid"].append(prefill.rid if prefill else None)
        starts = [s.first_time for s in record.sides if s.first_time is not None]
        ends = [s.last_time for s in record.sides if s.last_time is not None]
        rows["start"].append(_ms(min(starts)) if starts else None)
        rows["end"].append(_ms(max(ends)) if ends else None)
        rows["sent"].append(_ms(serving.sent_time) if serving else None)
        rows["prompt_tokens"].append(_int64(record.prompt_tokens))
        rows["cached_tokens"].append(_int64(record.cached_tokens))
        # A side known from spans alone: what its span says (`SideRecord.trace_*`).
        completion = serving.completion_tokens if serving else None
        if completion is None and serving is not None:
            completion = serving.trace_completion_tokens
        rows["completion_tokens"].append(_int64(completion))
        finish = serving.finish_type if serving else None
        rows["finish_type"].append(
            finish if finish is not None or serving is None else serving.trace_finish
        )
        rows["status_code"].append(_int64(serving.status_code) if serving else None)
        rows["e2e_latency"].append(serving.end_to_end if serving else None)
        rows["first_token_latency"].append(serving.time_to_first_token if serving else None)
        rows["prefill_forward_seconds"].append(
            prefill.durations.get("forward_duration") if prefill else None
        )
        rows["prefill_refused"].append(record.prefill_refused)
        rows["served"].append(record.served)
        rows["exposed_by"].append(sorted(set(exposed_by)))
        self.rows += 1
        if len(rows["key"]) >= self.batch_rows:
            self._flush()

    def _flush(self) -> None:
        if not self._rows["key"]:
            return
        import pyarrow as pa

        table = pa.Table.from_pydict(self._rows, schema=schema())
        self._open().write_table(table)
        self._rows = defaultdict(list)

    def _open(self) -> pq.ParquetWriter:
        if self._writer is None:
            import pyarrow.parquet as pq

            self._writer = pq.ParquetWriter(self._partial, schema(), compression="zstd")
        return self._writer

    def close(self, exposed_later: Mapping[str, Set[str]] | None = None) -> None:
        """Finish the file. `exposed_later` (row `key` -> detectors) names requests that a
        finding exposed after their row was written: their `exposed_by` gains those detectors,
        in a second pass over the file a batch at a time (taken only when there are any)."""
        self._flush()
        self._open().close()  # with no requests at all, still an empty, valid file
        if exposed_later:
            self._add_exposures(exposed_later)
        os.replace(self._partial, self.path)

    def abandon(self) -> None:
        """The run stopped before its end: its rows are removed, `path` left as it was."""
        if self._writer is not None:
            self._writer.close()
        self._partial.unlink(missing_ok=True)

    def _add_exposures(self, exposed_later: Mapping[str, Set[str]]) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        rewritten = self._partial.with_name(self._partial.name + ".tmp")
        table_schema = schema()
        column = table_schema.get_field_index("exposed_by")
        with (
            pq.ParquetFile(self._partial) as source,
            pq.ParquetWriter(rewritten, table_schema, compression="zstd") as writer,
        ):
            for batch in source.iter_batches(batch_size=self.batch_rows):
                keys = batch.column("key").to_pylist()
                if not any(key in exposed_later for key in keys):
                    writer.write_batch(batch)
                    continue
                exposed_by = [
                    sorted(set(before) | exposed_later[key]) if key in exposed_later else before
                    for key, before in zip(keys, batch.column(column).to_pylist(), strict=True)
                ]
                columns = list(batch.columns)
                columns[column] = pa.array(exposed_by, type=table_schema.field(column).type)
                writer.write_batch(pa.RecordBatch.from_arrays(columns, schema=table_schema))
        os.replace(rewritten, self._partial)
