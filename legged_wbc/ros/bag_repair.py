"""A bag whose writer died, made readable again from what is on disk (what ``ros2 bag reindex`` does).

The recorder process writes MCAP chunk by chunk and ``metadata.yaml`` last. Killed, stopped for good or
out of disk space, it leaves an MCAP file without its summary and footer (perhaps ending in half a chunk)
and no ``metadata.yaml``: ``rosbags`` refuses the directory and the ``mcap`` library's indexed reader
the file. :func:`repair_bag` scans the file with a lenient streaming reader (``mcap``'s
``StreamReader``, chunk by chunk: it stops at the first record that is cut short or does not decompress),
rewrites every message it read into a complete MCAP file with ``mcap``'s writer (chunks, indexes,
statistics, summary), appends the ``extra`` messages (what the recorder had not written yet, taken back
from its ring by :class:`~legged_wbc.ros.bag_process.ShmBagSink`), and writes ``metadata.yaml`` with
the message count per topic, as ``rosbags`` writes it. On a full disk there is no room for a second
copy: the file is cut after its last complete record and closed as it is (data end and footer: an
MCAP file without a summary, which both readers scan), and the extra messages are counted as lost.
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
    time range [ns], the end of its last complete record (bytes) and whether it was complete (footer)."""

    schemas: dict = field(default_factory=dict)
    channels: dict = field(default_factory=dict)
    counts: dict = field(default_factory=dict)
    t_min: int = 2**63 - 1
    t_max: int = 0
    good_end: int = 0
    chunks: int = 0
    complete: bool = False
    stop: str = ""

    def note(self, msg, channel_id: int | None = None) -> None:
        self.note_stamp(msg.channel_id if channel_id is None else channel_id, msg.log_time)

    def note_stamp(self, channel_id: int, t_ns: int) -> None:
        self.counts[channel_id] = self.counts.get(channel_id, 0) + 1
        if t_ns < self.t_min:
            self.t_min = t_ns
        if t_ns > self.t_max:
            self.t_max = t_ns


def _records(path: Path, scan: Scan, messages: bool):
    """The file's schema, channel and message records in order, as far as they can be read; ``scan``
    notes them (``messages``: also yields the messages)."""
    from mcap.records import Channel, Chunk, DataEnd, Footer, Message, Schema
    from mcap.stream_reader import StreamReader, breakup_chunk

    with open(path, "rb") as fh:
        reader = StreamReader(fh, emit_chunks=True, record_size_limit=os.fstat(fh.fileno()).st_size)
        it = reader.records
        while True:
            try:
                rec = next(it)
                inner = breakup_chunk(rec) if isinstance(rec, Chunk) else [rec]
            except StopIteration:
                return
            except Exception as exc:           # cut short, garbage, a chunk that does not decompress
                scan.stop = f"{type(exc).__name__} after byte {scan.good_end}"
                return
            if isinstance(rec, (DataEnd, Footer)):
                scan.complete = isinstance(rec, Footer) or scan.complete
                continue
            scan.chunks += isinstance(rec, Chunk)
            for r in inner:
                if isinstance(r, Schema):
                    scan.schemas[r.id] = r
                elif isinstance(r, Channel):
                    scan.channels[r.id] = r
                elif isinstance(r, Message):
                    scan.note(r)
                    if messages:
                        yield r
                    continue
                else:
                    continue
                if messages:
                    yield r
            scan.good_end = reader._stream.count


def scan_mcap(path: Path) -> Scan:
    scan = Scan()
    for _ in _records(path, scan, messages=False):
        pass
    return scan


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
    """Make the MCAP bag ``path`` readable (see the module docstring). ``extra``: ``(topic, msgtype, qos,
    digest, t_ns, cdr bytes)`` to append (``qos``: ``rosbags`` ``Qos`` list, ``digest``: RIHS01 or None).
    Never raises for what it finds on disk; ``problem`` says what is left undone."""
    path = Path(path)
    files = sorted(path.glob("*.mcap"))
    if len(files) != 1:
        return Repaired({}, problem=f"{len(files)} MCAP files in {path}: nothing to repair")
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
            try:
                _close_in_place(mcap, scan)
            except OSError as exc2:
                return Repaired(_topic_counts(scan), how="", problem=f"cannot close {mcap.name} ({exc2.strerror})")
            how = f"its MCAP file cut after its last complete record (no room for a copy: {exc.strerror})"
            if extra:
                how += f"; {len(extra)} messages taken back from the ring could not be added"
        else:
            if scan.stop:
                how += f" (read up to byte {scan.good_end})"
    try:
        _write_metadata(path, mcap, scan, custom_data or {})
    except OSError as exc:
        return Repaired(_topic_counts(scan), written, how, f"cannot write metadata.yaml ({exc.strerror})")
    return Repaired(_topic_counts(scan), written, how)


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


def _new_channel(topic: str, msgtype: str, qos: list, digest, key: int):
    """A schema and channel for a topic the file did not hold yet, as the recorder writes them."""
    from mcap.records import Channel, Schema
    from rosbags.rosbag2.metadata import dump_qos_v8
    from rosbags.typesys import Stores, get_typestore

    from legged_wbc.ros.bag_writer import ensure_type, type_hash

    store = get_typestore(Stores.ROS2_KILTED)
    ensure_type(store, msgtype)
    msgdef, _ = store.generate_msgdef(msgtype, ros_version=2)
    meta = {"offered_qos_profiles": dump_qos_v8(list(qos)), "topic_type_hash": digest or type_hash(msgtype, store)}
    return (Channel(id=key, topic=topic, message_encoding="cdr", metadata=meta, schema_id=key),
            Schema(id=key, data=msgdef.encode(), encoding="ros2msg", name=msgtype))


def _close_in_place(mcap: Path, scan: Scan) -> None:
    """Cut ``mcap`` after its last complete record and end it with a data end and a footer (no summary)."""
    from mcap.data_stream import RecordBuilder
    from mcap.records import DataEnd, Footer

    rb = RecordBuilder()
    DataEnd(0).write(rb)
    Footer(0, 0, 0).write(rb)
    tail = rb.end() + MAGIC
    with open(mcap, "r+b") as fh:
        fh.truncate(scan.good_end)
        fh.seek(scan.good_end)
        fh.write(tail)
    scan.complete = True


def _write_metadata(path: Path, mcap: Path, scan: Scan, custom_data: dict) -> None:
    """``metadata.yaml`` for ``scan``'s messages, in the form ``rosbags`` (and rosbag2, format 9) writes."""
    from rosbags.rosbag2.metadata import dump_qos_v9, parse_qos
    from ruamel.yaml import YAML

    count = sum(scan.counts.values())
    start = scan.t_min if count else 0
    duration = max(0, scan.t_max - scan.t_min) if count else 0
    topics = []
    for cid, ch in sorted(scan.channels.items()):
        schema = scan.schemas.get(ch.schema_id)
        topics.append({"topic_metadata": {
            "name": ch.topic, "type": schema.name if schema else "", "serialization_format": ch.message_encoding,
            "offered_qos_profiles": dump_qos_v9(parse_qos(ch.metadata.get("offered_qos_profiles", ""))),
            "type_description_hash": ch.metadata.get("topic_type_hash", "")},
            "message_count": scan.counts.get(cid, 0)})
    info = {"version": 9, "storage_identifier": "mcap", "relative_file_paths": [mcap.name],
            "duration": {"nanoseconds": duration}, "starting_time": {"nanoseconds_since_epoch": start},
            "message_count": count, "topics_with_message_count": topics, "compression_format": "",
            "compression_mode": "",
            "files": [{"path": mcap.name, "starting_time": {"nanoseconds_since_epoch": start},
                       "duration": {"nanoseconds": duration}, "message_count": count}],
            "custom_data": {str(k): str(v) for k, v in custom_data.items()} or None, "ros_distro": ROS_DISTRO}
    yaml = YAML(typ="safe")
    yaml.default_flow_style = False
    text = StringIO()
    yaml.dump({"rosbag2_bagfile_information": info}, text)
    tmp = path / "metadata.yaml.tmp"
    tmp.write_text(text.getvalue())
    os.replace(tmp, path / "metadata.yaml")
