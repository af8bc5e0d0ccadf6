"""A bag whose writer died, made readable again from what is on disk (what ``ros2 bag reindex`` does).

The recorder process writes MCAP chunk by chunk and ``metadata.yaml`` last. Killed, stopped for good or
out of disk space, it leaves an MCAP file without its summary and footer (perhaps ending in half a chunk)
and no ``metadata.yaml``: ``rosbags`` refuses the directory and the ``mcap`` library's indexed reader
the file. :func:`repair_bag` scans the file with a lenient streaming reader (``mcap``'s
``StreamReader``, chunk by chunk: it stops at the first record that is cut short or does not decompress),
rewrites every message it read into a complete MCAP file with ``mcap``'s writer (chunks, indexes,
statistics, summary), appends the ``extra`` messages (what the recorder had not written yet, taken back
from its ring by :class:`~legged_wbc.ros.recording.bag_process.ShmBagSink`), and writes ``metadata.yaml`` with
the message count per topic, as ``rosbags`` writes it. On a full disk there is no room for a second
copy: the file is cut after its last chunk whose message indexes are complete and indexed in place (data
end, a summary built from the chunks and message indexes in the file, footer: rosbags needs the index when
chunks are out of time order, as two rings give them); if even metadata.yaml finds no room, chunks are
given up from the end until it does; the extra messages are counted as lost.

A sqlite3 bag (one ``.db3``): the recorder commits its transaction every ~1 MiB; killed, it leaves the
committed messages and perhaps a hot journal (the uncommitted tail). Opened with Python's ``sqlite3``, the
journal is rolled back; the ``extra`` messages are appended (a topic new to the file gets its ``topics`` and
``message_definitions`` rows as ``rosbags`` writes them) and ``metadata.yaml`` written from the tables. On a
full disk the extra messages are counted as lost (said in ``problem``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from io import StringIO
from pathlib import Path

MAGIC = b"\x89MCAP0\r\n"
ROS_DISTRO = "kilted"


@dataclass
class Scan:
    """What a lenient read of an MCAP file found: schemas and channels by id, messages per channel, the
    time range [ns], the end of its last complete record (bytes) and whether it was complete (footer).
    ``groups``: each chunk (its index entry's fields) with the message indexes that follow it; ``marks``:
    the state after each chunk whose message indexes are all there (where the file can be cut)."""

    schemas: dict = field(default_factory=dict)
    channels: dict = field(default_factory=dict)
    counts: dict = field(default_factory=dict)
    t_min: int = 2**63 - 1
    t_max: int = 0
    good_end: int = 0
    chunks: int = 0
    complete: bool = False
    stop: str = ""
    groups: list = field(default_factory=list)
    marks: list = field(default_factory=list)
    _open: dict | None = None

    def mark(self) -> None:
        self.marks.append((self.good_end, dict(self.counts), self.t_min, self.t_max, dict(self.channels),
                           dict(self.schemas), len(self.groups)))

    def to_mark(self) -> None:
        """Back to the last mark (a chunk whose message indexes were cut is left out)."""
        self.good_end, counts, self.t_min, self.t_max, channels, schemas, n = self.marks[-1]
        self.counts, self.channels, self.schemas, self.groups = dict(counts), dict(channels), dict(schemas), \
            self.groups[:n]
        self.chunks = n

    def back_off(self) -> bool:
        """Forget the last chunk (its messages, channels, schemas); False when there is none left."""
        if len(self.marks) < 2:
            return False
        self.marks.pop()
        self.to_mark()
        return True

    def open_group(self, chunk, start: int, end: int) -> None:
        self.settle()
        self._open = {"start": start, "end": end, "chunk": chunk, "index": {}, "index_len": 0, "cids": set()}
        self.groups.append(self._open)

    def index(self, rec, start: int, end: int) -> None:
        if self._open is not None:
            self._open["index"][rec.channel_id] = start
            self._open["index_len"] += end - start

    def settle(self) -> None:
        """The open chunk's message indexes are over: a mark if they cover every channel it holds."""
        g, self._open = self._open, None
        if g is not None and g["cids"] <= set(g["index"]):
            good_end, self.good_end = self.good_end, g["end"] + g["index_len"]
            self.mark()
            self.good_end = good_end

    def note(self, msg, channel_id: int | None = None) -> None:
        self.note_stamp(msg.channel_id if channel_id is None else channel_id, msg.log_time)
        if self._open is not None:
            self._open["cids"].add(msg.channel_id)

    def note_stamp(self, channel_id: int, t_ns: int) -> None:
        self.counts[channel_id] = self.counts.get(channel_id, 0) + 1
        if t_ns < self.t_min:
            self.t_min = t_ns
        if t_ns > self.t_max:
            self.t_max = t_ns


def _records(path: Path, scan: Scan, messages: bool):
    """The file's schema, channel and message records in order, as far as they can be read; ``scan``
    notes them (``messages``: also yields the schemas, channels and messages)."""
    from mcap.records import Chunk, DataEnd, Footer, Header, MessageIndex
    from mcap.stream_reader import StreamReader, breakup_chunk

    with open(path, "rb") as fh:
        reader = StreamReader(fh, emit_chunks=True, record_size_limit=os.fstat(fh.fileno()).st_size)
        it = reader.records
        while True:
            start = reader._stream.count
            try:
                rec = next(it)
                inner = breakup_chunk(rec) if isinstance(rec, Chunk) else [rec]
            except StopIteration:
                break
            except Exception as exc:           # cut short, garbage, a chunk that does not decompress
                scan.stop = f"{type(exc).__name__} after byte {scan.good_end}"
                break
            end = reader._stream.count
            if isinstance(rec, (DataEnd, Footer)):
                scan.complete = isinstance(rec, Footer) or scan.complete
                scan.settle()
                continue
            if isinstance(rec, MessageIndex):
                scan.index(rec, start, end)
            elif isinstance(rec, Chunk):
                scan.open_group(rec, start, end)
                scan.chunks += 1
            else:
                scan.settle()
            yield from _note(scan, inner, messages)
            scan.good_end = end
            if isinstance(rec, Header):
                scan.mark()
        scan.settle()


def _note(scan: Scan, records, messages: bool):
    from mcap.records import Channel, Message, Schema

    for r in records:
        if isinstance(r, Schema):
            scan.schemas[r.id] = r
        elif isinstance(r, Channel):
            scan.channels[r.id] = r
        elif isinstance(r, Message):
            scan.note(r)
        else:
            continue
        if messages:
            yield r


def scan_mcap(path: Path) -> Scan:
    scan = Scan()
    for _ in _records(path, scan, messages=False):
        pass
    return scan


def mcap_chunks(path: Path) -> int:
    """The chunks a lenient read of the bag directory's MCAP file finds (0 unless there is exactly one)."""
    files = sorted(Path(path).glob("*.mcap"))
    return scan_mcap(files[0]).chunks if len(files) == 1 else 0


def sqlite_rows(path: Path) -> int:
    """The messages the bag directory's ``.db3`` holds, committed ones only (a fresh connection: a hot
    journal a killed writer left is rolled back); 0 unless there is exactly one readable file."""
    import sqlite3

    files = sorted(Path(path).glob("*.db3"))
    if len(files) != 1:
        return 0
    try:
        con = sqlite3.connect(files[0])
        try:
            return int(con.execute("SELECT count(*) FROM messages").fetchone()[0])
        finally:
            con.close()
    except sqlite3.Error:
        return 0


IN_FILE = {"mcap": mcap_chunks, "sqlite3": sqlite_rows}


def in_file_mark(path: Path, storage: str) -> int:
    """How far the bag's file got, in the recorder's marks (:meth:`~legged_wbc.ros.recording.bag_writer.
    BagWriter.next_mark`): MCAP chunks, sqlite3 committed messages."""
    return IN_FILE[storage](path)


@dataclass
class Repaired:
    """:func:`repair_bag`'s result: messages per topic in the bag now, how many of ``extra`` were added,
    how it was done (``how``) and what could not be done (``problem``, "" if nothing)."""

    counts: dict
    extra_written: int = 0
    how: str = ""
    problem: str = ""

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def repair_bag(path: Path, custom_data: dict | None = None, extra=()) -> Repaired:
    """Make the MCAP or sqlite3 bag ``path`` readable (see the module docstring). ``extra``: ``(topic,
    msgtype, qos, digest, t_ns, cdr bytes)`` to append (``qos``: ``rosbags`` ``Qos`` list, ``digest``: RIHS01
    or None). Never raises for what it finds on disk; ``problem`` says what is left undone."""
    path = Path(path)
    files, dbs = sorted(path.glob("*.mcap")), sorted(path.glob("*.db3"))
    if len(dbs) == 1 and not files:
        return _repair_sqlite(path, dbs[0], custom_data or {}, list(extra))
    if len(files) != 1:
        return Repaired({}, problem=f"{len(files)} MCAP files and {len(dbs)} sqlite3 files in {path}: "
                                    "nothing to repair")
    mcap = files[0]
    extra = list(extra)
    scan = scan_mcap(mcap)
    written = 0
    if scan.complete and not extra:
        how = "its MCAP file was complete"
    else:
        tmp = mcap.with_name(mcap.name + ".repairing")
        try:
            scan, written = _rewrite(mcap, tmp, extra)
            os.replace(tmp, mcap)
            how = "its MCAP file rewritten from the readable records"
        except OSError as exc:                 # no room for a copy (disk full): close the file as it is
            tmp.unlink(missing_ok=True)
            return _repair_in_place(path, mcap, scan, custom_data or {}, exc, len(extra))
        if scan.stop:
            how += f" (read up to byte {scan.good_end})"
    try:
        _write_mcap_metadata(path, mcap, scan, custom_data or {})
    except OSError as exc:
        return Repaired(_topic_counts(scan), written, how, f"cannot write metadata.yaml ({exc.strerror})")
    return Repaired(_topic_counts(scan), written, how)


def _repair_in_place(path: Path, mcap: Path, scan: Scan, custom_data: dict, why: OSError, extra: int) -> Repaired:
    """No room for a copy: ``mcap`` cut after its last complete chunk and closed there, metadata.yaml
    written; if even that finds no room, chunk after chunk is given up until it does (a readable bag with
    fewer messages rather than none)."""
    before = sum(scan.counts.values())
    scan.to_mark()
    while True:
        try:
            _close_in_place(mcap, scan)
            _write_mcap_metadata(path, mcap, scan, custom_data)
            break
        except OSError as exc:
            if not scan.back_off():
                return Repaired(_topic_counts(scan), problem=f"no room to close {mcap.name} ({exc.strerror})")
    how = f"its MCAP file cut after its last complete chunk (no room for a copy: {why.strerror})"
    if sum(scan.counts.values()) < before:
        how += f", {before - sum(scan.counts.values())} more messages given up to make room for metadata.yaml"
    if extra:
        how += f"; {extra} messages taken back from the ring could not be added"
    return Repaired(_topic_counts(scan), 0, how)


def _topic_counts(scan: Scan) -> dict:
    out: dict = {}
    for cid, n in scan.counts.items():
        ch = scan.channels.get(cid)
        if ch is not None:
            out[ch.topic] = out.get(ch.topic, 0) + n
    return out


def _rewrite(src: Path, dst: Path, extra: list) -> tuple[Scan, int]:
    """Copy ``src``'s readable records into a complete MCAP file ``dst``, then ``extra``; the scan of
    what ``dst`` holds and how many of ``extra`` it took."""
    from mcap.records import Channel, Message, Schema
    from mcap.writer import CompressionType, Writer

    out, scan = Scan(), Scan()
    schema_ids: dict = {}
    channel_ids: dict = {}
    with open(dst, "xb") as fh:
        w = Writer(fh, chunk_size=2**20, compression=CompressionType.ZSTD)
        w.start(profile="ros2", library="legged_wbc bag repair")

        def add_channel(ch, schema):
            if schema.id not in schema_ids:
                schema_ids[schema.id] = w.register_schema(schema.name, schema.encoding, schema.data)
            cid = w.register_channel(ch.topic, ch.message_encoding, schema_ids[schema.id], ch.metadata)
            out.schemas[schema_ids[schema.id]] = schema
            out.channels[cid] = Channel(id=cid, topic=ch.topic, message_encoding=ch.message_encoding,
                                        metadata=ch.metadata, schema_id=schema_ids[schema.id])
            return cid

        for rec in _records(src, scan, messages=True):
            if isinstance(rec, Channel) and rec.id not in channel_ids and rec.schema_id in scan.schemas:
                channel_ids[rec.id] = add_channel(rec, scan.schemas[rec.schema_id])
            elif isinstance(rec, Message) and rec.channel_id in channel_ids:
                cid = channel_ids[rec.channel_id]
                w.add_message(cid, rec.log_time, rec.data, rec.publish_time, rec.sequence)
                out.note(rec, cid)
        by_topic = {ch.topic: cid for cid, ch in out.channels.items()}
        n = 0
        for topic, msgtype, qos, digest, t_ns, data in extra:
            if topic not in by_topic:
                ch, schema = _new_channel(topic, msgtype, qos, digest, len(scan.schemas) + 1000 + len(by_topic))
                by_topic[topic] = add_channel(ch, schema)
            w.add_message(by_topic[topic], t_ns, bytes(data), t_ns, 0)
            out.note_stamp(by_topic[topic], t_ns)
            n += 1
        w.finish()
    out.complete = True
    return out, n


def _definition(msgtype: str, digest) -> tuple[str, str]:
    """``(message definition, RIHS01 type hash)`` of ``msgtype`` as the recorder writes them (``digest``: the
    publishers' hash, if known)."""
    from rosbags.typesys import Stores, get_typestore

    from legged_wbc.ros.recording.bag_writer import ensure_type, type_hash

    store = get_typestore(Stores.ROS2_KILTED)
    ensure_type(store, msgtype)
    msgdef, _ = store.generate_msgdef(msgtype, ros_version=2)
    return msgdef, digest or type_hash(msgtype, store)


def _new_channel(topic: str, msgtype: str, qos: list, digest, key: int):
    """A schema and channel for a topic the file did not hold yet, as the recorder writes them."""
    from mcap.records import Channel, Schema
    from rosbags.rosbag2.metadata import dump_qos_v8

    msgdef, digest = _definition(msgtype, digest)
    meta = {"offered_qos_profiles": dump_qos_v8(list(qos)), "topic_type_hash": digest}
    return (Channel(id=key, topic=topic, message_encoding="cdr", metadata=meta, schema_id=key),
            Schema(id=key, data=msgdef.encode(), encoding="ros2msg", name=msgtype))


def _close_in_place(mcap: Path, scan: Scan) -> None:
    """Cut ``mcap`` after the chunk of the scan's state (:meth:`Scan.to_mark`) and end it as a writer
    would: data end, a summary (schemas, channels, chunk indexes from the chunks and the message indexes
    in the file, statistics) and the footer. Readers that need the index (rosbags, for chunks out of time
    order) find it."""
    from mcap.data_stream import RecordBuilder
    from mcap.records import ChunkIndex, DataEnd, Footer, Statistics

    rb = RecordBuilder()
    DataEnd(0).write(rb)
    summary_start = scan.good_end + rb.count
    for schema in scan.schemas.values():
        schema.write(rb)
    for channel in scan.channels.values():
        channel.write(rb)
    for g in scan.groups:
        c = g["chunk"]
        ChunkIndex(chunk_length=g["end"] - g["start"], chunk_start_offset=g["start"], compression=c.compression,
                   compressed_size=len(c.data), message_end_time=c.message_end_time,
                   message_index_length=g["index_len"], message_index_offsets=dict(g["index"]),
                   message_start_time=c.message_start_time, uncompressed_size=c.uncompressed_size).write(rb)
    n = sum(scan.counts.values())
    Statistics(attachment_count=0, channel_count=len(scan.channels), channel_message_counts=dict(scan.counts),
               chunk_count=len(scan.groups), message_count=n, message_end_time=scan.t_max if n else 0,
               message_start_time=scan.t_min if n else 0, metadata_count=0, schema_count=len(scan.schemas)).write(rb)
    Footer(summary_start=summary_start, summary_offset_start=0, summary_crc=0).write(rb)
    tail = rb.end() + MAGIC
    with open(mcap, "r+b") as fh:
        fh.truncate(scan.good_end)
        fh.seek(scan.good_end)
        fh.write(tail)
    scan.complete = True


def _write_mcap_metadata(path: Path, mcap: Path, scan: Scan, custom_data: dict) -> None:
    """``metadata.yaml`` for ``scan``'s messages."""
    topics = []
    for cid, ch in sorted(scan.channels.items()):
        schema = scan.schemas.get(ch.schema_id)
        topics.append(((ch.topic, schema.name if schema else "", ch.message_encoding,
                        ch.metadata.get("offered_qos_profiles", ""), ch.metadata.get("topic_type_hash", "")),
                       scan.counts.get(cid, 0)))
    _write_metadata(path, "mcap", mcap, topics, (scan.t_min, scan.t_max), custom_data)


def _metadata(storage: str, file: Path, topics: list, t_range: tuple, custom_data: dict) -> dict:
    """The ``rosbag2_bagfile_information`` of a bag, in the form ``rosbags`` (and rosbag2, format 9) writes:
    ``topics``: ``((name, type, serialization format, offered QoS profiles as stored, type hash), message
    count)`` each; ``t_range``: the first and last stamp [ns]."""
    from rosbags.rosbag2.metadata import dump_qos_v9, parse_qos

    count = sum(n for _, n in topics)
    start = t_range[0] if count else 0
    duration = max(0, t_range[1] - t_range[0]) if count else 0
    listed = [{"topic_metadata": {"name": name, "type": typ, "serialization_format": fmt,
                                  "offered_qos_profiles": dump_qos_v9(parse_qos(qos)), "type_description_hash": h},
               "message_count": n} for (name, typ, fmt, qos, h), n in topics]
    return {"version": 9, "storage_identifier": storage, "relative_file_paths": [file.name],
            "duration": {"nanoseconds": duration}, "starting_time": {"nanoseconds_since_epoch": start},
            "message_count": count, "topics_with_message_count": listed, "compression_format": "",
            "compression_mode": "",
            "files": [{"path": file.name, "starting_time": {"nanoseconds_since_epoch": start},
                       "duration": {"nanoseconds": duration}, "message_count": count}],
            "custom_data": {str(k): str(v) for k, v in custom_data.items()} or None, "ros_distro": ROS_DISTRO}


def _yaml(data) -> str:
    from ruamel.yaml import YAML

    yaml = YAML(typ="safe")
    yaml.default_flow_style = False
    text = StringIO()
    yaml.dump(data, text)
    return text.getvalue()


def _write_metadata(path: Path, storage: str, file: Path, topics: list, t_range: tuple, custom_data: dict) -> None:
    """``metadata.yaml`` (:func:`_metadata`), replaced in one step."""
    text = _yaml({"rosbag2_bagfile_information": _metadata(storage, file, topics, t_range, custom_data)})
    tmp = path / "metadata.yaml.tmp"
    try:
        tmp.write_text(text)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path / "metadata.yaml")


# ------------------------------------------------------------------------------------ sqlite3
def _repair_sqlite(path: Path, db: Path, custom_data: dict, extra: list) -> Repaired:
    """:func:`repair_bag` for a sqlite3 bag: the committed messages (a hot journal is rolled back when the
    file is read), ``extra`` appended and the ``schema`` table's ``ros_distro`` set in one transaction (on a
    full disk: none of it, the file read again so that what the failed transaction left is rolled back
    too), metadata.yaml written."""
    import sqlite3

    journal = db.with_name(db.name + "-journal")
    how = ("its sqlite3 file's committed messages (the uncommitted tail rolled back)" if journal.exists()
           else "its sqlite3 file's messages")
    try:
        topics = _sqlite_read(db, _sqlite_topics)
    except sqlite3.Error as exc:                 # not a rosbag2 file, or unreadable
        return Repaired({}, problem=f"{db.name} cannot be read as a rosbag2 sqlite3 file ({exc})")
    problem, written = "", 0
    try:
        written = _sqlite_read(db, lambda con: _sqlite_append(con, extra))
    except sqlite3.Error as exc:                 # a full disk: nothing of the transaction is kept
        if extra:
            problem = f"{len(extra)} messages taken back from the ring could not be added ({exc})"
    try:
        topics = _sqlite_read(db, _sqlite_topics)
    except sqlite3.Error as exc:
        problem = "; ".join(filter(None, (problem, f"{db.name} cannot be read after adding to it ({exc})")))
    if journal.exists():
        problem = "; ".join(filter(None, (problem, f"{journal.name} could not be rolled back")))
    counts = {name: n for (name, *_), n, _ in topics if n}
    stamps = [t for _, n, t in topics if n]
    t_range = (min(t[0] for t in stamps), max(t[1] for t in stamps)) if stamps else (0, 0)
    try:
        _write_metadata(path, "sqlite3", db, [(meta, n) for meta, n, _ in topics], t_range, custom_data)
    except OSError as exc:
        problem = "; ".join(filter(None, (problem, f"cannot write metadata.yaml ({exc.strerror})")))
    return Repaired(counts, written, how, problem)


def _sqlite_read(db: Path, work):
    """``work(connection)`` on a fresh connection to ``db`` (its first read rolls a hot journal back), in one
    transaction: committed if ``work`` returns, rolled back if it raises."""
    import sqlite3

    con = sqlite3.connect(db)
    try:
        with con:
            return work(con)
    finally:
        con.close()


def _sqlite_topics(con) -> list:
    """``((name, type, serialization format, offered QoS profiles, type hash), messages, (first, last stamp
    [ns]))`` of each row of the ``topics`` table, in its order."""
    rows = con.execute("SELECT t.name, t.type, t.serialization_format, t.offered_qos_profiles, "
                       "t.type_description_hash, count(m.id), min(m.timestamp), max(m.timestamp) "
                       "FROM topics t LEFT JOIN messages m ON m.topic_id = t.id GROUP BY t.id ORDER BY t.id")
    return [(tuple(r[:5]), int(r[5]), (r[6], r[7])) for r in rows]


def _sqlite_append(con, extra: list) -> int:
    """Set the ``schema`` table's ``ros_distro`` and insert ``extra`` (:func:`repair_bag`'s) in the open
    transaction; a topic the file does not hold gets a ``topics`` row (and its type a ``message_definitions``
    row) as ``rosbags``' ``Sqlite3Writer`` writes them. Returns how many messages were inserted."""
    con.execute("UPDATE schema SET ros_distro = ?", (ROS_DISTRO,))
    ids = {name: tid for tid, name in con.execute("SELECT id, name FROM topics")}
    defined = {t for (t,) in con.execute("SELECT topic_type FROM message_definitions")}
    rows = []
    for topic, msgtype, qos, digest, t_ns, data in extra:
        if topic not in ids:
            msgdef, digest = _definition(msgtype, digest)
            if msgtype not in defined:
                con.execute("INSERT INTO message_definitions (topic_type, encoding, encoded_message_definition, "
                            "type_description_hash) VALUES (?, ?, ?, ?)", (msgtype, "ros2msg", msgdef, digest))
                defined.add(msgtype)
            ids[topic] = max(ids.values(), default=0) + 1
            con.execute("INSERT INTO topics VALUES (?, ?, ?, ?, ?, ?)",
                        (ids[topic], topic, msgtype, "cdr", _qos_text(qos), digest))
        rows.append((ids[topic], t_ns, bytes(data)))
    con.executemany("INSERT INTO messages (topic_id, timestamp, data) VALUES (?, ?, ?)", rows)
    return len(rows)


def _qos_text(qos: list) -> str:
    """Offered QoS profiles as ``rosbags``' writer (format 9) stores them in the ``topics`` table."""
    from rosbags.rosbag2.metadata import dump_qos_v9

    return _yaml(dump_qos_v9(list(qos))).strip()
