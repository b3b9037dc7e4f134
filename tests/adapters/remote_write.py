"""Samples with chosen timestamps into a real Prometheus, through its remote-write receiver.

Prometheus started with ``--web.enable-remote-write-receiver`` takes ``POST /api/v1/write``: a
protobuf ``prometheus.WriteRequest`` compressed as one snappy block. Both are hand-encoded here (a
few lines each: the block holds literals only, which every snappy decoder accepts), so a test can
append history as its virtual clock advances, and query it at that clock's time.

Samples of one series must arrive in time order, and no older than an hour before the newest sample
Prometheus holds (its head block refuses them as out of bounds).
"""

from __future__ import annotations

import struct
import urllib.request
from collections.abc import Iterable

from tests.adapters.prom_fixture import Series

LITERAL_CHUNK = 65536  # bytes per snappy literal element (a 2-byte length)


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _label(name: str, value: str) -> bytes:
    return _field(1, name.encode()) + _field(2, value.encode())


def _sample(at: float, value: float) -> bytes:
    # Sample {double value = 1; int64 timestamp = 2 (milliseconds)}
    return b"\x09" + struct.pack("<d", value) + b"\x10" + _varint(round(at * 1000))


def write_request(series: Iterable[Series]) -> bytes:
    """A ``WriteRequest`` protobuf: TimeSeries {labels = 1 (sorted, ``__name__`` included), samples = 2}."""
    body = bytearray()
    for one in series:
        labels = sorted({"__name__": one.name, **one.labels}.items())
        entry = b"".join(_field(1, _label(k, v)) for k, v in labels)
        entry += b"".join(_field(2, _sample(at, value)) for at, value in one.samples)
        body += _field(1, entry)
    return bytes(body)


def snappy_block(data: bytes) -> bytes:
    """``data`` as a snappy block of literal elements (no compression: valid, and simple)."""
    out = bytearray(_varint(len(data)))
    for start in range(0, len(data), LITERAL_CHUNK):
        chunk = data[start : start + LITERAL_CHUNK]
        size = len(chunk) - 1
        if size < 60:
            out.append(size << 2)
        else:  # tag 61: the length minus one in the next 2 bytes, little-endian
            out += bytes([61 << 2]) + size.to_bytes(2, "little")
        out += chunk
    return bytes(out)


def remote_write(url: str, series: Iterable[Series], timeout: float = 10.0) -> None:
    """Append ``series`` to the Prometheus at ``url``; raises on any answer but 2xx (with its body)."""
    request = urllib.request.Request(
        f"{url}/api/v1/write",
        data=snappy_block(write_request(series)),
        method="POST",
        headers={
            "Content-Encoding": "snappy",
            "Content-Type": "application/x-protobuf",
            "X-Prometheus-Remote-Write-Version": "0.1.0",
        },
    )
    with urllib.request.urlopen(request, timeout=timeout) as answer:
        answer.read()
