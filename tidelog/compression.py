"""Compression codecs for record-batch payloads: none, gzip, lz4 (frame), zstd.

Decompression is always bounded by the size the batch header declares, so a small compressed
payload cannot expand into an unbounded one (a "zip bomb" is refused, not allocated).
Snappy keeps Kafka's number (2) in the enum but is not supported: no pure-wheel codec we trust.
"""

from __future__ import annotations

import zlib

import lz4.frame
import zstandard

from tidelog.errors import CorruptMessageError, UnsupportedCompressionTypeError
from tidelog.v1.common_pb2 import CompressionType

__all__ = ["CODEC_NAMES", "codec_from_name", "compress", "decompress"]

#: Names as Kafka's compression.type spells them.
CODEC_NAMES: dict[str, int] = {
    "none": CompressionType.COMPRESSION_NONE,
    "gzip": CompressionType.COMPRESSION_GZIP,
    "lz4": CompressionType.COMPRESSION_LZ4,
    "zstd": CompressionType.COMPRESSION_ZSTD,
}

_GZIP_WBITS = 31  # zlib's "gzip container" mode
_GZIP_LEVEL = 6
_ZSTD_LEVEL = 3
_ZSTD_COMPRESSOR = zstandard.ZstdCompressor(level=_ZSTD_LEVEL, write_content_size=True)


def codec_from_name(name: str) -> int:
    """The CompressionType for a Kafka codec name ("none", "gzip", "lz4", "zstd")."""
    try:
        return CODEC_NAMES[name.strip().lower()]
    except KeyError:
        supported = ", ".join(CODEC_NAMES)
        raise UnsupportedCompressionTypeError(
            f"compression type {name!r} is not supported (supported: {supported})"
        ) from None


def compress(codec: int, data: bytes) -> bytes:
    """Compress ``data`` with ``codec`` (COMPRESSION_NONE returns it unchanged)."""
    if codec == CompressionType.COMPRESSION_NONE:
        return data
    if codec == CompressionType.COMPRESSION_GZIP:
        c = zlib.compressobj(_GZIP_LEVEL, zlib.DEFLATED, _GZIP_WBITS)
        return c.compress(data) + c.flush()
    if codec == CompressionType.COMPRESSION_LZ4:
        return bytes(lz4.frame.compress(data, store_size=True))
    if codec == CompressionType.COMPRESSION_ZSTD:
        return bytes(_ZSTD_COMPRESSOR.compress(data))
    raise UnsupportedCompressionTypeError(f"compression codec {codec} is not supported")


def decompress(codec: int, data: bytes, *, expected_size: int) -> bytes:
    """Decompress ``data``, which must expand to exactly ``expected_size`` bytes.

    Raises CorruptMessageError when the payload is not valid for the codec or its size differs
    from the declared one; at most ``expected_size + 1`` bytes are ever produced.
    """
    if codec == CompressionType.COMPRESSION_NONE:
        out = data
    elif codec == CompressionType.COMPRESSION_GZIP:
        out = _bounded_zlib(data, expected_size)
    elif codec == CompressionType.COMPRESSION_LZ4:
        out = _bounded_lz4(data, expected_size)
    elif codec == CompressionType.COMPRESSION_ZSTD:
        out = _bounded_zstd(data, expected_size)
    else:
        raise UnsupportedCompressionTypeError(f"compression codec {codec} is not supported")
    if len(out) != expected_size:
        raise CorruptMessageError(
            f"payload expands to {len(out)} bytes but the batch header declares {expected_size}"
        )
    return out


def _bounded_zlib(data: bytes, expected_size: int) -> bytes:
    d = zlib.decompressobj(_GZIP_WBITS)
    try:
        out = d.decompress(data, expected_size + 1)
    except zlib.error as e:
        raise CorruptMessageError(f"gzip payload is invalid: {e}") from None
    if not d.eof and len(out) <= expected_size:
        raise CorruptMessageError("gzip payload is truncated")
    return out


def _bounded_lz4(data: bytes, expected_size: int) -> bytes:
    d = lz4.frame.LZ4FrameDecompressor()
    try:
        out = bytes(d.decompress(data, max_length=expected_size + 1))
    except RuntimeError as e:
        raise CorruptMessageError(f"lz4 payload is invalid: {e}") from None
    if not d.eof and len(out) <= expected_size:
        raise CorruptMessageError("lz4 payload is truncated")
    return out


def _bounded_zstd(data: bytes, expected_size: int) -> bytes:
    try:
        declared = zstandard.get_frame_parameters(data).content_size
        if declared not in (expected_size, zstandard.CONTENTSIZE_UNKNOWN):
            raise CorruptMessageError(
                f"zstd frame declares {declared} bytes but the batch header {expected_size}"
            )
        reader = zstandard.ZstdDecompressor().stream_reader(data)
        return bytes(reader.read(expected_size + 1))
    except zstandard.ZstdError as e:
        raise CorruptMessageError(f"zstd payload is invalid: {e}") from None
