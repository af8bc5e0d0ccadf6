"""A bag's storage on disk: its size and its MCAP chunk compression."""

from __future__ import annotations

from pathlib import Path


def bag_size(path: Path, sim_time_s: float | None) -> dict:
    """``bag_mb`` (the storage files, MB = 1e6 bytes), ``bag_mb_per_sim_s`` (per simulated second) and
    ``bag_compression`` (MCAP chunk compression: ``zstd`` or ``none``; None for sqlite3)."""
    from legged_wbc.ros.recording.bag_writer import bag_size_bytes

    p = Path(path)
    if not p.is_dir():
        return {"bag_mb": None, "bag_mb_per_sim_s": None, "bag_compression": None}
    mb = bag_size_bytes(p) / 1e6
    kinds: set = set()
    for f in sorted(p.glob("*.mcap")):
        kinds |= mcap_chunk_compressions(f)
    compression = "+".join(sorted(k or "none" for k in kinds)) or None
    return {"bag_mb": mb, "bag_mb_per_sim_s": mb / sim_time_s if sim_time_s else None, "bag_compression": compression}


def mcap_chunk_compressions(path: Path) -> set[str]:
    """The compression names of an MCAP file's chunks ("" = uncompressed), from the records' headers
    (opcode, length; a Chunk's compression string follows its 28 bytes of times, size and CRC); the
    records are skipped, not read. Empty for an unreadable file."""
    out: set[str] = set()
    try:
        with open(path, "rb") as fh:
            if fh.read(8) != b"\x89MCAP0\r\n":
                return out
            while True:
                head = fh.read(9)
                if len(head) < 9 or head[0] in (0x0F, 0x02):   # DataEnd, Footer: the summary follows
                    return out
                op, length = head[0], int.from_bytes(head[1:], "little")
                start = fh.tell()
                if op == 0x06:
                    fixed = fh.read(32)
                    n = int.from_bytes(fixed[28:32], "little")
                    out.add(fh.read(n).decode("utf-8", "replace"))
                fh.seek(start + length)
    except OSError:
        return out
