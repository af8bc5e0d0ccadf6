"""Bags as rosbag2 (Kilted) writes them, read by readers other than the writer.

What must hold: ``metadata.yaml`` (and the MCAP ``rosbag2`` record, the sqlite3 ``schema`` table) says
``ros_distro: kilted``; every MCAP channel carries ``topic_type_hash``, the RIHS01 hash the ROS graph
reports for the type (rclpy, from the type support) and the one rosidl stored with the installed type
description; MCAP chunks are zstd-compressed by default, ``compression="none"`` leaves them raw, and
both read back the same through rosbags (what ``compare`` uses) and the ``mcap`` library; the fast
MCAP write path gives rosbags' bytes in both modes; ``compare`` reports the size per simulated second.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest


def _messages(rng):
    """The stack's main message types with random numbers (test_bag_process's set, without the latency array)."""
    from test_bag_process import _stack_messages

    return {k: v for k, v in _stack_messages(rng).items()
            if k in ("/joint_states", "/imu", "/estimator/odom", "/wbc/diagnostics", "/clock")}


def _type(m) -> str:
    from legged_wbc.ros.recording.cdr_layout import message_type_name

    return message_type_name(m)


def _serialized(n: int, seed: int = 3) -> list:
    """``[(topic, msgtype, t_ns, CDR bytes)]``: serialized once (rclpy leaves CDR padding bytes
    uninitialized, so two serializations of one message may differ in them)."""
    from rclpy.serialization import serialize_message

    rng = np.random.default_rng(seed)
    return [(topic, _type(m), 2_000_000 * k, serialize_message(m)) for k in range(n)
            for topic, m in _messages(rng).items()]


def _write(path: Path, storage: str, compression: str, msgs: list):
    from legged_wbc.ros.recording.bag_writer import BagWriter

    bw = BagWriter(path, storage, "controller=cbf", compression=compression)
    for topic, msgtype, t_ns, data in msgs:
        bw.add_topic(topic, msgtype)
        bw.write(topic, t_ns, data)
    bw.close()
    return bw


def _graph_hashes(ros_context, types: dict) -> dict:
    """``{topic: RIHS01}`` as the ROS graph reports the publishers' types (rclpy, from the type support)."""
    from rclpy.node import Node

    from legged_wbc.ros.recording.bag_writer import message_class

    node = Node("hash_probe", context=ros_context)
    try:
        out = {}
        for topic, msgtype in types.items():
            node.create_publisher(message_class(msgtype), topic, 1)
            out[topic] = str(node.get_publishers_info_by_topic(topic)[0].topic_type_hash)
        return out
    finally:
        node.destroy_node()


@pytest.mark.parametrize("storage,compression", [("mcap", "zstd"), ("mcap", "none"), ("sqlite3", "zstd")])
def test_metadata_and_type_hashes_as_rosbag2_writes(tmp_path, ros_context, storage, compression):
    import yaml

    bag = tmp_path / "bag"
    _write(bag, storage, compression, _serialized(50))
    info = yaml.safe_load((bag / "metadata.yaml").read_text())["rosbag2_bagfile_information"]
    assert info["ros_distro"] == "kilted"
    assert info["version"] == 9 and info["storage_identifier"] == storage
    assert info["compression_format"] == "" and info["compression_mode"] == ""   # compression inside the storage
    types = {t["topic_metadata"]["name"]: t["topic_metadata"]["type"] for t in info["topics_with_message_count"]}
    graph = _graph_hashes(ros_context, types)
    assert all(h.startswith("RIHS01_") and h != "RIHS01_" + "0" * 64 for h in graph.values())
    for t in info["topics_with_message_count"]:
        md = t["topic_metadata"]
        assert md["type_description_hash"] == graph[md["name"]], md["name"]
        pkg, _, name = md["type"].split("/")
        shipped = json.loads((Path(__import__("sys").prefix) / "share" / pkg / "msg" / f"{name}.json").read_text())
        assert graph[md["name"]] in [h["hash_string"] for h in shipped["type_hashes"]]
    if storage == "mcap":
        from mcap.reader import make_reader

        with open(next(bag.glob("*.mcap")), "rb") as fh:
            reader = make_reader(fh)
            summary = reader.get_summary()
            record = {m.name: m.metadata for m in reader.iter_metadata()}
        for ch in summary.channels.values():
            assert ch.metadata["topic_type_hash"] == graph[ch.topic], ch.topic
            assert "offered_qos_profiles" in ch.metadata
        assert {c.compression for c in summary.chunk_indexes} == {"zstd" if compression == "zstd" else ""}
        assert yaml.safe_load(record["rosbag2"]["serialized_metadata"])["ros_distro"] == "kilted"
    else:
        con = sqlite3.connect(next(bag.glob("*.db3")))
        assert con.execute("SELECT ros_distro FROM schema").fetchall() == [("kilted",)]
        (meta,), = con.execute("SELECT metadata FROM metadata").fetchall()
        assert yaml.safe_load(meta)["ros_distro"] == "kilted"
        con.close()


def test_type_hash_is_computed_from_the_installed_type_descriptions():
    """Every installed message type: RIHS01 from its ``.json`` type description equals rosidl's stored hash;
    a type without an installed package (tf2_msgs) gets rosbags' hash."""
    import sys

    from legged_wbc.ros.recording.bag_writer import type_hash

    files = sorted(Path(sys.prefix, "share").glob("*/msg/*.json"))
    assert len(files) > 50
    for f in files:
        msgtype = f"{f.parts[-3]}/msg/{f.stem}"
        shipped = {h["type_name"]: h["hash_string"] for h in json.loads(f.read_text())["type_hashes"]}
        assert type_hash(msgtype) == shipped[msgtype], msgtype
    assert type_hash("tf2_msgs/msg/TFMessage").startswith("RIHS01_")


def test_zstd_and_raw_chunks_read_back_the_same(tmp_path):
    """Both compressions hold the same messages, read by rosbags (``compare``'s reader) and by ``mcap``;
    zstd is smaller; ``compare``'s size metrics say what each is."""
    from mcap.reader import make_reader

    from legged_wbc.tools.analysis.bag_metrics import bag_size, read_bag_messages

    read = {}
    msgs = _serialized(1500)
    for comp in ("zstd", "none"):
        bag = tmp_path / comp
        _write(bag, "mcap", comp, msgs)
        decoded, _ = read_bag_messages(bag, topics={m[0] for m in msgs})
        with open(next(bag.glob("*.mcap")), "rb") as fh:
            raw = [(ch.topic, m.log_time, m.data) for _, ch, m in make_reader(fh).iter_messages()]
        read[comp] = (decoded, raw, bag_size(bag, 3.0))
    (mz, rz, sz), (mn, rn, sn) = read["zstd"], read["none"]
    assert rz == rn and len(rz) == 5 * 1500
    assert set(mz) == set(mn)
    for topic in mz:
        if topic.startswith("/"):
            assert [t for t, _ in mz[topic]] == [t for t, _ in mn[topic]]
    assert sz["bag_compression"] == "zstd" and sn["bag_compression"] == "none"
    assert sz["bag_mb"] < sn["bag_mb"]
    assert sn["bag_mb_per_sim_s"] == pytest.approx(sn["bag_mb"] / 3.0)


@pytest.mark.parametrize("compression", ["zstd", "none"])
def test_fast_mcap_write_gives_the_bytes_rosbags_writes(tmp_path, compression):
    """BagWriter's MCAP fast path (one struct call per message) against rosbags' own Writer.write, with the
    channel hash and the distro: the same messages give the same file, byte for byte (chunks, indexes)."""
    from rclpy.serialization import serialize_message

    from legged_wbc.ros.recording.bag_writer import BagWriter

    rng = np.random.default_rng(7)
    msgs = [(t, serialize_message(m), m) for k in range(3000) for t, m in _messages(rng).items()]
    files = []
    for fast in (True, False):
        bw = BagWriter(tmp_path / f"{fast}" / "bag", "mcap", compression=compression)   # same name: in the MCAP
        assert bw._mcap is not None
        if not fast:
            bw._mcap = None                     # every message through rosbags' Writer.write
        for k, (topic, data, m) in enumerate(msgs):
            bw.add_topic(topic, _type(m))
            bw.write(topic, 1000 * k, data)
        bw.close()
        files.append(next((tmp_path / f"{fast}" / "bag").glob("*.mcap")).read_bytes())
    assert files[0] == files[1]
    assert b"topic_type_hash" in files[0] and b"ros_distro: kilted" in files[0]
    if compression == "none":
        assert len(files[0]) > 3 * 2**20       # several chunks


# ------------------------------------------------------------------------------------ a bag whose writer died
def _dead_writer_bag(path: Path, msgs: list, cut: int | None) -> tuple[int, list]:
    """A bag as a killed writer leaves it: chunks written as they closed, no summary, no footer, no
    metadata.yaml; ``cut``: the file then cut that many bytes into its last chunk (a full disk). Returns the
    messages the complete chunks hold and every written message in order."""
    from legged_wbc.ros.recording.bag_writer import BagWriter

    bw = BagWriter(path, "mcap", "", compression="zstd", chunk_by_caller=True)
    for k, (topic, msgtype, t_ns, data) in enumerate(msgs):
        bw.add_topic(topic, msgtype)
        bw.write(topic, t_ns, data)
        if k % 1500 == 1499:
            bw.end_batch(force=True)
            in_file = k + 1
    bw.abandon()                                    # the open chunk never reaches the file
    mcap = next(path.glob("*.mcap"))
    if cut is not None:
        size = mcap.stat().st_size
        with open(mcap, "r+b") as fh:
            fh.truncate(size - cut)                  # the last chunk cut short (past its message indexes)
        in_file -= 1500
    return in_file, msgs


@pytest.mark.parametrize("room", ["room for a copy", "disk full"])
@pytest.mark.parametrize("cut", [None, 40_000])
def test_a_bag_whose_writer_died_is_repaired_for_both_readers(tmp_path, monkeypatch, room, cut):
    """What ``ros2 bag reindex`` does: the readable records kept (a chunk cut short dropped), a complete MCAP
    rewritten (or, with no room for a copy, the file cut after its last complete chunk and indexed in place),
    metadata.yaml with the counts per topic; rosbags and the mcap reader then read the same messages, byte
    for byte."""
    import errno

    from mcap.reader import make_reader
    from rosbags.rosbag2 import Reader

    from legged_wbc.ros.recording import bag_repair

    bag = tmp_path / "bag"
    msgs = _serialized(1300)
    msgs = [m for k in range(len(msgs) // 1500, -1, -1) for m in msgs[k * 1500:(k + 1) * 1500]]   # chunks out of
    n, msgs = _dead_writer_bag(bag, msgs, cut)            # time order, as two rings give them: an index is needed
    assert not (bag / "metadata.yaml").exists()
    if room == "disk full":
        def no_room(*args):
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(bag_repair, "_rewrite", no_room)
    rep = bag_repair.repair_bag(bag, {"controller": "cbf"})
    assert rep.problem == "" and rep.total == n > 0
    assert ("cut after its last complete chunk" in rep.how) == (room == "disk full")
    expect = [(topic, t, data) for topic, _, t, data in msgs[:n]]
    import yaml

    meta = yaml.safe_load((bag / "metadata.yaml").read_text())["rosbag2_bagfile_information"]
    assert meta["custom_data"] == {"controller": "cbf"} and meta["ros_distro"] == "kilted"
    with Reader(bag) as r:
        assert r.message_count == n
        got = [(c.topic, t, bytes(d)) for c, t, d in r.messages()]
    assert sorted(got) == sorted(expect)
    with open(next(bag.glob("*.mcap")), "rb") as fh:
        got = [(ch.topic, m.log_time, m.data) for _, ch, m in make_reader(fh).iter_messages(log_time_order=False)]
    assert got == expect
    counts = {}
    for topic, _, _ in expect:
        counts[topic] = counts.get(topic, 0) + 1
    assert rep.counts == counts
