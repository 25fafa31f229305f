"""MySQL/MariaDB collation ids and charset names -> Python codecs.

Row events carry character data in the column's charset, undecoded. TABLE_MAP metadata
(binlog_row_metadata=FULL) gives a *collation* id per character column; the schema history
gives a charset name. :func:`codec_for_collation` and :func:`codec_for_charset` map both to
a Python codec name, or ``None`` for the ``binary`` charset (the value stays ``bytes``).

Ids: MySQL ``strings/ctype-*.cc`` and ``SHOW COLLATION`` (ids 1-323), MariaDB adds the
NO PAD variants at ``1024 + id`` of the PAD SPACE collation, ids 576-767 (MariaDB 10.10
UCA-14.0 tailorings) and the UCA-14.0 ranges from 2048 (``strings/ctype-uca.c``).

Quirks:

* MySQL's ``latin1`` is Windows-1252, except that the five bytes cp1252 leaves undefined
  (0x81, 0x8D, 0x8F, 0x90, 0x9D) map to the C1 controls of the same value
  (``strings/ctype-latin1.cc``, ``to_uni_latin1``). The codec ``mysql-latin1`` registered
  here does exactly that.
* ``ucs2`` and ``utf16``/``utf32`` are big endian; ``utf16le`` is little endian.
* Charsets Python has no codec for (dec8, hp8, swe7, armscii8, keybcs2, geostd8) and ids
  this table does not know fall back to UTF-8 with ``surrogateescape`` (:data:`FALLBACK`),
  which keeps every byte recoverable: ``s.encode("utf-8", "surrogateescape")`` gives the
  stored bytes back.
"""

from __future__ import annotations

import codecs
from typing import Any

__all__ = [
    "BINARY_COLLATION",
    "FALLBACK",
    "charset_of_collation",
    "codec_for_charset",
    "codec_for_collation",
]

#: The ``binary`` pseudo-charset's collation id.
BINARY_COLLATION = 63
#: Codec used for unknown charsets and collation ids.
FALLBACK = "utf-8"

# MySQL charset name -> Python codec (None = bytes).
_CHARSET_CODEC: dict[str, str | None] = {
    "binary": None,
    "utf8mb4": "utf-8",
    "utf8mb3": "utf-8",
    "utf8": "utf-8",
    "latin1": "mysql-latin1",
    "ascii": "ascii",
    "ucs2": "utf-16-be",
    "utf16": "utf-16-be",
    "utf16le": "utf-16-le",
    "utf32": "utf-32-be",
    "big5": "big5",
    "latin2": "iso8859-2",
    "cp850": "cp850",
    "koi8r": "koi8-r",
    "koi8u": "koi8-u",
    "ujis": "euc-jp",
    "eucjpms": "euc-jp",
    "sjis": "shift-jis",
    "cp932": "cp932",
    "cp1250": "cp1250",
    "cp1251": "cp1251",
    "cp1256": "cp1256",
    "cp1257": "cp1257",
    "cp866": "cp866",
    "cp852": "cp852",
    "hebrew": "iso8859-8",
    "greek": "iso8859-7",
    "latin5": "iso8859-9",
    "latin7": "iso8859-13",
    "tis620": "tis-620",
    "euckr": "euc-kr",
    "gb2312": "gb2312",
    "gbk": "gbk",
    "gb18030": "gb18030",
    "macce": "mac-latin2",
    "macroman": "mac-roman",
    # No Python codec: decoded with FALLBACK.
    "dec8": FALLBACK,
    "hp8": FALLBACK,
    "swe7": FALLBACK,
    "armscii8": FALLBACK,
    "keybcs2": FALLBACK,
    "geostd8": FALLBACK,
}

# Collation id -> charset name, ids 1..323 (MySQL 8.4 / MariaDB 11 agree on these).
_IDS: dict[int, str] = {}


def _assign(charset: str, *ids: int | range) -> None:
    for i in ids:
        for j in i if isinstance(i, range) else (i,):
            _IDS[j] = charset


_assign("big5", 1, 84)
_assign("latin2", 2, 9, 21, 27, 77)
_assign("dec8", 3, 69)
_assign("cp850", 4, 80)
_assign("latin1", 5, 8, 15, 31, 47, 48, 49, 94)
_assign("hp8", 6, 72)
_assign("koi8r", 7, 74)
_assign("swe7", 10, 82)
_assign("ascii", 11, 65)
_assign("ujis", 12, 91)
_assign("sjis", 13, 88)
_assign("cp1251", 14, 23, 50, 51, 52)
_assign("hebrew", 16, 71)
_assign("tis620", 18, 89)
_assign("euckr", 19, 85)
_assign("latin7", 20, 41, 42, 79)
_assign("koi8u", 22, 75)
_assign("gb2312", 24, 86)
_assign("greek", 25, 70)
_assign("cp1250", 26, 34, 44, 66, 99)
_assign("gbk", 28, 87)
_assign("cp1257", 29, 58, 59)
_assign("latin5", 30, 78)
_assign("armscii8", 32, 64)
_assign("utf8mb3", 33, 76, 83, range(192, 216), 223)
_assign("ucs2", 35, 90, range(128, 152), 159)
_assign("cp866", 36, 68)
_assign("keybcs2", 37, 73)
_assign("macce", 38, 43)
_assign("macroman", 39, 53)
_assign("cp852", 40, 81)
_assign("utf8mb4", 45, 46, range(224, 248), range(255, 324))
_assign("utf16", 54, 55, range(101, 125))
_assign("utf16le", 56, 62)
_assign("cp1256", 57, 67)
_assign("utf32", 60, 61, range(160, 184))
_assign("binary", 63)
_assign("geostd8", 92, 93)
_assign("cp932", 95, 96)
_assign("eucjpms", 97, 98)
_assign("gb18030", 248, 249, 250)
# MariaDB 10.10+ (strings/ctype-uca.c): UCA-14.0 tailorings and the generic uca1400 ranges.
_assign("utf8mb3", range(576, 608), range(2048, 2304))
_assign("utf8mb4", range(608, 640), range(2304, 2560))
_assign("ucs2", range(640, 672), range(2560, 2816))
_assign("utf16", range(672, 736), range(2816, 3072))
_assign("utf32", range(736, 768), range(3072, 3328))


def charset_of_collation(collation_id: int) -> str | None:
    """The charset name of a collation id, ``None`` when the id is unknown."""
    name = _IDS.get(collation_id)
    if name is None and 1024 <= collation_id < 2048:
        # MariaDB NO PAD collations: the PAD SPACE collation's id + 1024.
        name = _IDS.get(collation_id - 1024)
    return name


def codec_for_collation(collation_id: int) -> str | None:
    """Python codec for a collation id; ``None`` for binary; :data:`FALLBACK` if unknown."""
    name = charset_of_collation(collation_id)
    if name is None:
        return FALLBACK
    return _CHARSET_CODEC.get(name, FALLBACK)


def codec_for_charset(name: str) -> str | None:
    """Python codec for a MySQL charset name (``utf8mb4``) or a Python codec name.

    ``binary`` gives ``None``. A collation name (``latin1_swedish_ci``) is accepted too: its
    charset is the part before the first ``_`` that names a known charset.
    """
    key = name.lower()
    if key in _CHARSET_CODEC:
        return _CHARSET_CODEC[key]
    head = key.split("_", 1)[0]
    if head in _CHARSET_CODEC:
        return _CHARSET_CODEC[head]
    try:
        return codecs.lookup(key).name
    except LookupError:
        return FALLBACK


def _latin1_table() -> str:
    chars = []
    for b in range(256):
        try:
            chars.append(bytes([b]).decode("cp1252"))
        except UnicodeDecodeError:
            chars.append(chr(b))  # the 5 holes of cp1252 -> C1 controls, as MySQL does
    return "".join(chars)


_LATIN1_DECODE = _latin1_table()
_LATIN1_ENCODE = codecs.charmap_build(_LATIN1_DECODE)


def _latin1_encode(text: str, errors: str = "strict") -> tuple[bytes, int]:
    return codecs.charmap_encode(text, errors, _LATIN1_ENCODE)


def _latin1_decode(data: Any, errors: str = "strict") -> tuple[str, int]:
    return codecs.charmap_decode(data, errors, _LATIN1_DECODE)


def _search(name: str) -> codecs.CodecInfo | None:
    if name in ("mysql-latin1", "mysql_latin1"):
        return codecs.CodecInfo(_latin1_encode, _latin1_decode, name="mysql-latin1")
    return None


codecs.register(_search)
