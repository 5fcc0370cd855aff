"""The joined requests as Parquet: written a bounded batch at a time, every row kept in order."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from collector.forensics.parquet import RequestParquetWriter, schema
from collector.state.request_record import RequestRecord, SideRecord


def _record(i: int) -> RequestRecord:
    prefill = SideRecord(node="prefill-0", rid=f"p{i}", role="prefill", first_time=100.0 + i)
    decode = SideRecord(
        node="decode-0",
        rid=f"d{i}",
        role="decode",
        first_time=100.5 + i,
        last_time=103.0 + i,
        finished_time=103.0 + i,
        prompt_tokens=1000 + i,
        completion_tokens=7,
        finish_type="stop",
    )
    return RequestRecord(f"room:{i}", str(i), [prefill, decode], True)


def test_rows_are_written_a_batch_at_a_time_and_read_back_in_order(tmp_path: Path) -> None:
    writer = RequestParquetWriter(tmp_path / "requests.parquet", batch_rows=4)
    for i in range(10):
        writer.add(_record(i), ["over_length_answered"] if i == 6 else [])
        assert len(writer._rows["key"]) < 4  # never more than a batch held as Python objects
    writer.close()
    file = pq.ParquetFile(tmp_path / "requests.parquet")
    assert file.metadata.num_row_groups == 3  # 4 + 4 + 2
    table = file.read()
    assert table.schema.equals(schema())
    assert table.column("key").to_pylist() == [f"room:{i}" for i in range(10)]
    assert table.column("prompt_tokens").to_pylist() == [1000 + i for i in range(10)]
    assert table.column("serving_rid").to_pylist() == [f"d{i}" for i in range(10)]
    assert table.column("prefill_rid").to_pylist() == [f"p{i}" for i in range(10)]
    exposed = table.column("exposed_by").to_pylist()
    assert exposed[6] == ["over_length_answered"]
    assert [e for i, e in enumerate(exposed) if i != 6] == [[]] * 9
    assert writer.rows == 10


def test_requests_exposed_after_their_row_was_written_are_marked_when_the_file_closes(
    tmp_path: Path,
) -> None:
    path = tmp_path / "requests.parquet"
    writer = RequestParquetWriter(path, batch_rows=4)
    for i in range(10):
        writer.add(_record(i), ["over_length_answered"] if i == 6 else [])
    # Rows 2 and 6 were exposed later (6 already was, by another detector); "room:99" has no row.
    later = {"room:2": {"kv_canary_violation"}, "room:6": {"kv_canary_violation"}}
    writer.close(exposed_later={**later, "room:99": {"kv_canary_violation"}})
    table = pq.read_table(path)
    assert table.schema.equals(schema()) and table.num_rows == 10
    assert table.column("key").to_pylist() == [f"room:{i}" for i in range(10)]
    exposed = table.column("exposed_by").to_pylist()
    assert exposed[2] == ["kv_canary_violation"]
    assert exposed[6] == ["kv_canary_violation", "over_length_answered"]
    assert [e for i, e in enumerate(exposed) if i not in (2, 6)] == [[]] * 8
    assert table.column("prompt_tokens").to_pylist() == [1000 + i for i in range(10)]
    assert [p.name for p in tmp_path.iterdir()] == ["requests.parquet"]  # no scratch file left


def test_no_requests_still_make_a_valid_empty_file(tmp_path: Path) -> None:
    writer = RequestParquetWriter(tmp_path / "requests.parquet")
    writer.close()
    table = pq.read_table(tmp_path / "requests.parquet")
    assert table.num_rows == 0 and table.schema.equals(schema())


def test_a_batch_must_hold_a_row(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="batch_rows"):
        RequestParquetWriter(tmp_path / "requests.parquet", batch_rows=0)


def test_numbers_past_the_columns_range_are_written_as_unknown(tmp_path: Path) -> None:
    """A garbled line's digits (a prompt of 10^30 tokens, a time of 10^300) do not fit an
    int64 or a millisecond timestamp: they are written as null, and the rows around them kept."""
    path = tmp_path / "requests.parquet"
    writer = RequestParquetWriter(path)
    odd = _record(1)
    odd.sides[1].completion_tokens = -(10**30)
    odd.sides[1].last_time = 1e300
    writer.add(_record(0), [])
    writer.add(RequestRecord(odd.key, odd.bootstrap_room, odd.sides, True), [])
    big = _record(2)
    big.sides[1].prompt_tokens = 10**30
    writer.add(RequestRecord(big.key, big.bootstrap_room, big.sides, True), [])
    writer.close()
    table = pq.read_table(path)
    assert table.column("key").to_pylist() == ["room:0", "room:1", "room:2"]
    assert table.column("prompt_tokens").to_pylist() == [1000, 1001, None]
    assert table.column("completion_tokens").to_pylist() == [7, None, 7]
    assert table.column("end").to_pylist()[1] is None


def test_a_run_stopped_half_way_leaves_the_last_complete_file_as_it_was(tmp_path: Path) -> None:
    """Audit Q: a run interrupted after its first row groups left a valid-looking Parquet of
    part of the requests beside the last complete run's reports."""
    path = tmp_path / "requests.parquet"
    complete = RequestParquetWriter(path, batch_rows=4)
    for i in range(10):
        complete.add(_record(i), [])
    complete.close()
    before = path.read_bytes()
    stopped = RequestParquetWriter(path, batch_rows=4)
    for i in range(100, 106):
        stopped.add(_record(i), [])  # one row group written
    assert path.read_bytes() == before  # nothing reaches `path` before the end
    stopped.abandon()
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["requests.parquet"]


def test_forensics_stopped_by_ctrl_c_removes_its_partial_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from collector.forensics import driver

    case = Path(__file__).parent / "testdata" / "reference_incident"
    out = tmp_path / "out"
    driver.run_forensics([str(case)], out, workers=1)
    before = (out / "requests.parquet").read_bytes()
    events = driver.parallel_events_in_time_order

    def stopped(*args: object, **kwargs: object) -> Iterator[object]:
        for n, event in enumerate(events(*args, **kwargs)):  # type: ignore[arg-type]
            if n == 10:
                raise KeyboardInterrupt
            yield event

    monkeypatch.setattr(driver, "parallel_events_in_time_order", stopped)
    with pytest.raises(KeyboardInterrupt):
        driver.run_forensics([str(case)], out, workers=1)
    assert (out / "requests.parquet").read_bytes() == before
    assert not [p.name for p in out.iterdir() if "partial" in p.name]


def test_the_answer_s_own_stamp_is_kept_to_the_millisecond(tmp_path: Path) -> None:
    """Review: the reports give an exposed response the time meta_info says it was sent
    (12:15:44.427); its row had only its last line's second (12:15:44), so the two could not
    be matched, nor joined to a router's log by time."""
    path = tmp_path / "requests.parquet"
    stamped = _record(0)
    stamped.sides[1].last_time = 1789000000.0
    stamped.sides[1].sent_time = 1789000000.427
    writer = RequestParquetWriter(path)
    writer.add(RequestRecord(stamped.key, stamped.bootstrap_room, stamped.sides, True), [])
    writer.add(_record(1), [])  # no stamp: unknown, not its line's time
    writer.close()
    table = pq.read_table(path)
    sent = table.column("sent").to_pylist()
    assert sent[0].timestamp() == pytest.approx(1789000000.427, abs=1e-6)
    assert table.column("end").to_pylist()[0].timestamp() == 1789000000.0
    assert sent[1] is None
