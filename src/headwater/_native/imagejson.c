/*
 * headwater._native._imagejson: the JSON text of a rows block's change-row images (the
 * ``key``, ``before``, ``after`` and ``before_key`` columns of the Spark source), exactly
 * as headwater/spark/partitions.py ``_block_json`` renders them through orjson 3.13 with
 * ``default=json_default`` (headwater/binlog/dump.py) and, for images orjson refuses,
 * through ``image_json``'s escaped rendering. A differential test holds the two equal
 * (tests/unit/spark/test_imagejson.py).
 *
 * One image is ``{"name":value,...}`` in column order (orjson writes a dict in insertion
 * order, no spaces). Values rendered here, as orjson (src/serialize/...) and json_default do:
 *
 *   None, True, False   null, true, false
 *   int                 decimal digits when it fits i64 or u64; beyond, orjson refuses it
 *                       (TypeError "Integer exceeds 64-bit range"): the callback raises it
 *   float               the shortest round-trip digits (Python's repr, PyOS_double_to_string
 *                       mode 'r'), laid out as orjson does: fixed notation for decimal
 *                       exponents -5..15 ("0.00001", "1000000000000000.0"), else
 *                       "1.5e-7" / "1e+16" (no zero padding of the exponent); NaN and
 *                       infinities are null
 *   str                 UTF-8 with ", \ escaped, \b \t \n \f \r, other bytes below 0x20
 *                       as \u00XX (lowercase hex); nothing else escaped
 *   Decimal             json_default: a string of format(d, "f") if finite else str(d)
 *   datetime            "YYYY-MM-DDTHH:MM:SS[.ffffff]", "+00:00" when its tzinfo is
 *                       datetime.UTC (other zones go to the callback)
 *   date                "YYYY-MM-DD"
 *   timedelta           json_default: format_time, "[-]HH:MM:SS[.ffffff]", hours unbounded
 *   bytes               json_default: {"base64":"..."} (RFC 4648 with padding)
 *   tuple, list         [v,...] (SET and VECTOR values)
 *
 * Everything else (dict, bool/int/str subclasses, bytearray, sets, dataclasses, other
 * zones...) is rendered by a Python callback per value (``orjson.dumps(v,
 * default=json_default)``). Exact types only: a subclass is the callback's.
 *
 * Strings orjson refuses (lone surrogates: bytes invalid in the column charset, kept by
 * the decoder as surrogate escapes) and anything else orjson refuses with TypeError make
 * the whole image render again in "escaped" mode, as image_json -> render_json does:
 * names through printable_name, each value as ``orjson.dumps(_escape_surrogates(v),
 * default=json_default)`` (the second callback) unless it is one of the native types
 * above. An error in escaped mode propagates, as it does from render_json.
 *
 * ``render_raw`` (rowjson.c, included below: one translation unit) writes the same text
 * straight from a rows event's bytes for the column kinds it covers, without the decoded
 * value tuples, and declines (the caller decodes and calls render_block) where it could
 * differ.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <datetime.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

static PyObject *decimal_type; /* decimal.Decimal */

/* ---- output buffer -------------------------------------------------------------------- */

typedef struct {
    char *p;
    Py_ssize_t len, cap;
    int nonascii;
} Buf;

static int grow(Buf *b, Py_ssize_t need) {
    Py_ssize_t cap = b->cap ? b->cap : 256;
    while (cap - b->len < need) cap *= 2;
    char *p = PyMem_Realloc(b->p, (size_t)cap);
    if (p == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}
#define RESERVE(b, n) \
    if ((b)->cap - (b)->len < (Py_ssize_t)(n) && grow((b), (Py_ssize_t)(n)) < 0) return -1
static inline int put(Buf *b, const char *s, Py_ssize_t n) {
    RESERVE(b, n);
    memcpy(b->p + b->len, s, (size_t)n);
    b->len += n;
    return 0;
}
static inline int putc1(Buf *b, char c) {
    RESERVE(b, 1);
    b->p[b->len++] = c;
    return 0;
}

static const char HEX[] = "0123456789abcdef";

/* The escape of byte ``c`` (below 0x20, '"' or '\\') written at ``o``, as orjson writes it:
 * \" \\ \b \t \n \f \r, else \u00XX in lowercase hex; the end of what it wrote. (Also
 * rowjson.c's, which this file includes.) */
static inline char *put_escape(char *o, unsigned char c) {
    *o++ = '\\';
    switch (c) {
    case '"': *o++ = '"'; break;
    case '\\': *o++ = '\\'; break;
    case '\b': *o++ = 'b'; break;
    case '\t': *o++ = 't'; break;
    case '\n': *o++ = 'n'; break;
    case '\f': *o++ = 'f'; break;
    case '\r': *o++ = 'r'; break;
    default:
        *o++ = 'u'; *o++ = '0'; *o++ = '0';
        *o++ = HEX[c >> 4]; *o++ = HEX[c & 15];
    }
    return o;
}

/* A JSON string of UTF-8 bytes, with orjson's escapes. */
static int put_string(Buf *b, const char *s, Py_ssize_t n) {
    RESERVE(b, n * 6 + 2); /* worst case: every byte \u00XX */
    char *o = b->p + b->len;
    *o++ = '"';
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') {
            *o++ = (char)c;
            continue;
        }
        o = put_escape(o, c);
    }
    *o++ = '"';
    b->len = o - b->p;
    return 0;
}

/* Decimal digits without printf (which was a third of the time): an unsigned number, and
 * zero-padded fields of a fixed width. */
static int put_u64(Buf *b, unsigned long long u, int neg) {
    char tmp[24];
    int i = sizeof tmp;
    do {
        tmp[--i] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (neg) tmp[--i] = '-';
    return put(b, tmp + i, (Py_ssize_t)sizeof tmp - i);
}
static inline char *digits(char *o, unsigned v, int width) {
    for (int i = width - 1; i >= 0; i--) {
        o[i] = (char)('0' + v % 10);
        v /= 10;
    }
    return o + width;
}

/* ---- values ---------------------------------------------------------------------------- */

enum { PLAIN = 0, ESCAPED = 1 };
/* put_value results: 0 done, -1 Python error set, AGAIN: orjson refuses this in plain
 * mode (the image renders again, escaped). */
#define AGAIN 1

typedef struct {
    PyObject *plain;   /* value -> its JSON text (str), as orjson with json_default */
    PyObject *escaped; /* the same after _escape_surrogates */
} Callbacks;

static int put_callback(Buf *b, PyObject *v, int mode, const Callbacks *cb) {
    PyObject *text = PyObject_CallOneArg(mode == PLAIN ? cb->plain : cb->escaped, v);
    if (text == NULL) {
        if (mode == PLAIN && PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            return AGAIN;
        }
        return -1;
    }
    if (!PyUnicode_Check(text)) {
        Py_DECREF(text);
        PyErr_SetString(PyExc_TypeError, "image JSON callback did not return a str");
        return -1;
    }
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(text, &n);
    int r = s == NULL ? -1 : put(b, s, n);
    if (r == 0 && !PyUnicode_IS_ASCII(text)) b->nonascii = 1;
    Py_DECREF(text);
    return r;
}

/* A float as orjson writes it (see the header). */
static int put_float(Buf *b, double d) {
    if (!isfinite(d)) return put(b, "null", 4);
    char *r = PyOS_double_to_string(d, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
    if (r == NULL) return -1;
    int rc;
    char *e = strchr(r, 'e');
    if (e == NULL) {
        rc = put(b, r, (Py_ssize_t)strlen(r));
    } else {
        int exp = atoi(e + 1);
        if (exp == -5) { /* orjson: fixed; repr: 1.5e-05 */
            char tmp[48];
            int n = 0;
            const char *m = r;
            if (*m == '-') tmp[n++] = *m++;
            memcpy(tmp + n, "0.0000", 6);
            n += 6;
            for (; m < e; m++)
                if (*m != '.') tmp[n++] = *m;
            rc = put(b, tmp, n);
        } else {
            rc = put(b, r, e - r);
            if (rc == 0) rc = put(b, exp < 0 ? "e-" : "e+", 2);
            if (rc == 0) rc = put_u64(b, (unsigned long long)(exp < 0 ? -exp : exp), 0);
        }
    }
    PyMem_Free(r);
    return rc;
}

/* json_default's Decimal: format(d, "f") if finite else str(d). str() is the same text
 * unless it uses exponent notation (to_sci_string: exponent > 0 or adjusted exponent < -6),
 * and non-finite values ("NaN", "sNaN", "Infinity", signed) never hold an 'E'. */
static int put_decimal(Buf *b, PyObject *v) {
    PyObject *text = PyObject_Str(v);
    if (text == NULL) return -1;
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(text, &n);
    if (s != NULL && (memchr(s, 'E', (size_t)n) || memchr(s, 'e', (size_t)n))) {
        Py_DECREF(text);
        PyObject *spec = PyUnicode_FromString("f");
        if (spec == NULL) {
            Py_DECREF(text);
            return -1;
        }
        text = PyObject_Format(v, spec);
        Py_DECREF(spec);
        if (text == NULL) return -1;
        s = PyUnicode_AsUTF8AndSize(text, &n);
    }
    int r = s == NULL ? -1 : put_string(b, s, n);
    Py_DECREF(text);
    return r;
}

/* "YYYY-MM-DD" (years 1..9999: four digits). */
static inline char *date_text(char *o, PyObject *v) {
    o = digits(o, (unsigned)PyDateTime_GET_YEAR(v), 4);
    *o++ = '-';
    o = digits(o, (unsigned)PyDateTime_GET_MONTH(v), 2);
    *o++ = '-';
    return digits(o, (unsigned)PyDateTime_GET_DAY(v), 2);
}

static int put_date(Buf *b, PyObject *v) {
    RESERVE(b, 12);
    char *o = b->p + b->len;
    *o++ = '"';
    o = date_text(o, v);
    *o++ = '"';
    b->len = o - b->p;
    return 0;
}

/* 1 if done, 0 if the zone is not one rendered here. */
static int put_datetime(Buf *b, PyObject *v) {
    PyObject *tz = PyDateTime_DATE_GET_TZINFO(v);
    if (tz != Py_None && tz != PyDateTime_TimeZone_UTC) return 0;
    RESERVE(b, 40);
    char *o = b->p + b->len;
    *o++ = '"';
    o = date_text(o, v);
    *o++ = 'T';
    o = digits(o, (unsigned)PyDateTime_DATE_GET_HOUR(v), 2);
    *o++ = ':';
    o = digits(o, (unsigned)PyDateTime_DATE_GET_MINUTE(v), 2);
    *o++ = ':';
    o = digits(o, (unsigned)PyDateTime_DATE_GET_SECOND(v), 2);
    int us = PyDateTime_DATE_GET_MICROSECOND(v);
    if (us) {
        *o++ = '.';
        o = digits(o, (unsigned)us, 6);
    }
    if (tz != Py_None) {
        memcpy(o, "+00:00", 6);
        o += 6;
    }
    *o++ = '"';
    b->len = o - b->p;
    return 1;
}

/* format_time: "[-]HH:MM:SS[.ffffff]" of the whole duration in microseconds. */
static int put_timedelta(Buf *b, PyObject *v) {
    __int128 total = (__int128)PyDateTime_DELTA_GET_DAYS(v) * 86400000000LL +
                     (__int128)PyDateTime_DELTA_GET_SECONDS(v) * 1000000 +
                     PyDateTime_DELTA_GET_MICROSECONDS(v);
    int neg = total < 0;
    if (neg) total = -total;
    long long seconds = (long long)(total / 1000000);
    int micro = (int)(total % 1000000);
    long long hours = seconds / 3600;
    if (putc1(b, '"') < 0 || (neg && putc1(b, '-') < 0)) return -1;
    if (hours < 10 && putc1(b, '0') < 0) return -1;
    if (put_u64(b, (unsigned long long)hours, 0) < 0) return -1;
    RESERVE(b, 16);
    char *o = b->p + b->len;
    *o++ = ':';
    o = digits(o, (unsigned)(seconds % 3600 / 60), 2);
    *o++ = ':';
    o = digits(o, (unsigned)(seconds % 60), 2);
    if (micro) {
        *o++ = '.';
        o = digits(o, (unsigned)micro, 6);
    }
    *o++ = '"';
    b->len = o - b->p;
    return 0;
}

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
static int put_base64(Buf *b, const unsigned char *s, Py_ssize_t n) {
    static const char head[] = "{\"base64\":\"";
    RESERVE(b, (Py_ssize_t)sizeof head + (n + 2) / 3 * 4 + 2);
    char *o = b->p + b->len;
    memcpy(o, head, sizeof head - 1);
    o += sizeof head - 1;
    Py_ssize_t i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t x = (uint32_t)s[i] << 16 | (uint32_t)s[i + 1] << 8 | s[i + 2];
        *o++ = B64[x >> 18]; *o++ = B64[x >> 12 & 63]; *o++ = B64[x >> 6 & 63]; *o++ = B64[x & 63];
    }
    if (n - i == 1) {
        uint32_t x = (uint32_t)s[i] << 16;
        *o++ = B64[x >> 18]; *o++ = B64[x >> 12 & 63]; *o++ = '='; *o++ = '=';
    } else if (n - i == 2) {
        uint32_t x = (uint32_t)s[i] << 16 | (uint32_t)s[i + 1] << 8;
        *o++ = B64[x >> 18]; *o++ = B64[x >> 12 & 63]; *o++ = B64[x >> 6 & 63]; *o++ = '=';
    }
    *o++ = '"';
    *o++ = '}';
    b->len = o - b->p;
    return 0;
}

#define MAX_DEPTH 32

static int put_value(Buf *b, PyObject *v, int mode, const Callbacks *cb, int depth) {
    if (v == Py_None) return put(b, "null", 4);
    if (v == Py_True) return put(b, "true", 4);
    if (v == Py_False) return put(b, "false", 5);
    PyTypeObject *t = Py_TYPE(v);
    if (t == &PyLong_Type) {
        int overflow;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (!overflow) {
            if (x == -1 && PyErr_Occurred()) return -1;
            return put_u64(b, x < 0 ? 0ULL - (unsigned long long)x : (unsigned long long)x, x < 0);
        }
        if (overflow > 0) {
            unsigned long long u = PyLong_AsUnsignedLongLong(v);
            if (!(u == (unsigned long long)-1 && PyErr_Occurred())) return put_u64(b, u, 0);
            if (!PyErr_ExceptionMatches(PyExc_OverflowError)) return -1;
            PyErr_Clear();
        }
        return put_callback(b, v, mode, cb); /* beyond 64 bits: orjson's own error */
    }
    if (t == &PyUnicode_Type) {
        Py_ssize_t n;
        const char *s = PyUnicode_AsUTF8AndSize(v, &n);
        if (s == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) return -1;
            PyErr_Clear();
            return mode == PLAIN ? AGAIN : put_callback(b, v, mode, cb);
        }
        if (!PyUnicode_IS_ASCII(v)) b->nonascii = 1;
        return put_string(b, s, n);
    }
    if (t == &PyFloat_Type) return put_float(b, PyFloat_AS_DOUBLE(v));
    if ((PyObject *)t == decimal_type) return put_decimal(b, v);
    if (PyDateTime_CheckExact(v)) {
        int r = put_datetime(b, v);
        return r != 0 ? (r < 0 ? -1 : 0) : put_callback(b, v, mode, cb);
    }
    if (PyDate_CheckExact(v)) return put_date(b, v);
    if (PyDelta_CheckExact(v)) return put_timedelta(b, v);
    if (t == &PyBytes_Type)
        return put_base64(b, (const unsigned char *)PyBytes_AS_STRING(v), PyBytes_GET_SIZE(v));
    if ((t == &PyTuple_Type || t == &PyList_Type) && depth < MAX_DEPTH) {
        if (putc1(b, '[') < 0) return -1;
        /* A list may change under a callback: index it afresh each time. */
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(v); i++) {
            if (i && putc1(b, ',') < 0) return -1;
            PyObject *item = PySequence_Fast_GET_ITEM(v, i);
            Py_INCREF(item);
            int r = put_value(b, item, mode, cb, depth + 1);
            Py_DECREF(item);
            if (r) return r;
        }
        return putc1(b, ']');
    }
    return put_callback(b, v, mode, cb);
}

/* ---- images ---------------------------------------------------------------------------- */

/* The object keys of one image shape: ``"name":`` as plain and as escaped text. */
typedef struct {
    Py_ssize_t n;
    PyObject **plain;   /* bytes, or NULL when the name does not encode (surrogates) */
    PyObject **escaped; /* bytes of printable_name(name) */
    Py_ssize_t *index;  /* for key images: the value's index in the row, -1: None */
    int nonascii[2];    /* whether any plain / escaped key has a non-ASCII byte */
} Keys;

static void keys_free(Keys *k) {
    for (Py_ssize_t i = 0; i < k->n; i++) {
        Py_XDECREF(k->plain[i]);
        Py_XDECREF(k->escaped[i]);
    }
    PyMem_Free(k->plain);
    PyMem_Free(k->escaped);
    PyMem_Free(k->index);
    memset(k, 0, sizeof *k);
}

static PyObject *key_bytes(const char *s, Py_ssize_t n) {
    Buf b = {0};
    PyObject *out = NULL;
    if (put_string(&b, s, n) == 0 && putc1(&b, ':') == 0)
        out = PyBytes_FromStringAndSize(b.p, b.len);
    PyMem_Free(b.p);
    return out;
}

static int bytes_ascii(PyObject *bytes) {
    const unsigned char *s = (const unsigned char *)PyBytes_AS_STRING(bytes);
    for (Py_ssize_t i = 0; i < PyBytes_GET_SIZE(bytes); i++)
        if (s[i] >= 0x80) return 0;
    return 1;
}

/* printable_name(): the name's bytes (surrogate escapes back to bytes) read as UTF-8 with
 * invalid bytes as \xNN. */
static PyObject *printable_key(PyObject *name) {
    PyObject *raw = PyUnicode_AsEncodedString(name, "utf-8", "surrogateescape");
    if (raw == NULL) return NULL;
    PyObject *text =
        PyUnicode_DecodeUTF8(PyBytes_AS_STRING(raw), PyBytes_GET_SIZE(raw), "backslashreplace");
    Py_DECREF(raw);
    if (text == NULL) return NULL;
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(text, &n);
    PyObject *out = s == NULL ? NULL : key_bytes(s, n);
    Py_DECREF(text);
    return out;
}

/* Fill ``k`` from a list of names, or of (name, index) pairs (``picks``). Returns 1 when
 * done, 0 when the names are not distinct (as plain or escaped keys: a dict would merge
 * them; left to the Python path), -1 on error. */
static int keys_init(Keys *k, PyObject *seq, int picks) {
    memset(k, 0, sizeof *k);
    if (!PyList_Check(seq)) {
        PyErr_SetString(PyExc_TypeError, "image names must be a list");
        return -1;
    }
    Py_ssize_t n = PyList_GET_SIZE(seq);
    k->plain = PyMem_Calloc((size_t)n + 1, sizeof(PyObject *));
    k->escaped = PyMem_Calloc((size_t)n + 1, sizeof(PyObject *));
    k->index = PyMem_Calloc((size_t)n + 1, sizeof(Py_ssize_t));
    if (!k->plain || !k->escaped || !k->index) {
        keys_free(k);
        PyErr_NoMemory();
        return -1;
    }
    k->n = n;
    PyObject *seen = PySet_New(NULL), *seen_esc = PySet_New(NULL);
    int rc = seen && seen_esc ? 1 : -1;
    for (Py_ssize_t i = 0; rc == 1 && i < n; i++) {
        PyObject *name = PyList_GET_ITEM(seq, i);
        if (picks) {
            if (!PyTuple_Check(name) || PyTuple_GET_SIZE(name) != 2) {
                PyErr_SetString(PyExc_TypeError, "key picks must be (name, index) pairs");
                rc = -1;
                break;
            }
            k->index[i] = PyLong_AsSsize_t(PyTuple_GET_ITEM(name, 1));
            if (k->index[i] == -1 && PyErr_Occurred()) {
                rc = -1;
                break;
            }
            name = PyTuple_GET_ITEM(name, 0);
        }
        if (!PyUnicode_CheckExact(name)) {
            PyErr_Format(PyExc_TypeError, "column name %R is not a str", name);
            rc = -1;
            break;
        }
        int dup = PySet_Contains(seen, name);
        if (dup != 0 || PySet_Add(seen, name) < 0) {
            rc = dup > 0 ? 0 : -1;
            break;
        }
        Py_ssize_t len;
        const char *s = PyUnicode_AsUTF8AndSize(name, &len);
        if (s == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) {
                rc = -1;
                break;
            }
            PyErr_Clear();
            k->escaped[i] = printable_key(name);
        } else {
            k->plain[i] = key_bytes(s, len);
            if (k->plain[i] != NULL) k->escaped[i] = Py_NewRef(k->plain[i]);
        }
        if (k->escaped[i] == NULL) {
            rc = -1;
            break;
        }
        if (k->plain[i] != NULL && !bytes_ascii(k->plain[i])) k->nonascii[PLAIN] = 1;
        if (!bytes_ascii(k->escaped[i])) k->nonascii[ESCAPED] = 1;
        dup = PySet_Contains(seen_esc, k->escaped[i]);
        if (dup != 0 || PySet_Add(seen_esc, k->escaped[i]) < 0) rc = dup > 0 ? 0 : -1;
    }
    Py_XDECREF(seen);
    Py_XDECREF(seen_esc);
    if (rc != 1) keys_free(k);
    return rc;
}

/* One image ``{key: value}``: values[i] for names, or values[index[i]] for key picks
 * (``values`` NULL, or index -1: None). The text is left in ``b`` (emptied first). */
static int render_image(Buf *b, const Keys *k, PyObject *const *values, int picked,
                        const Callbacks *cb) {
    for (int mode = PLAIN;; mode = ESCAPED) {
        b->len = 0;
        b->nonascii = k->nonascii[mode];
        int r = putc1(b, '{');
        for (Py_ssize_t i = 0; r == 0 && i < k->n; i++) {
            PyObject *key = mode == PLAIN ? k->plain[i] : k->escaped[i];
            if (key == NULL) { /* a name orjson refuses */
                r = AGAIN;
                break;
            }
            if (i && putc1(b, ',') < 0) return -1;
            if (put(b, PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key)) < 0) return -1;
            Py_ssize_t j = picked ? k->index[i] : i;
            r = put_value(b, j < 0 ? Py_None : values[j], mode, cb, 0);
        }
        if (r == 0) return putc1(b, '}');
        if (r < 0 || mode == ESCAPED) return -1;
    }
}

static PyObject *buf_str(const Buf *b) {
    if (b->nonascii) return PyUnicode_DecodeUTF8(b->p, b->len, NULL);
    PyObject *s = PyUnicode_New(b->len, 127);
    if (s != NULL) memcpy(PyUnicode_DATA(s), b->p, (size_t)b->len);
    return s;
}

/* ---- output: four lists of str/None, or a JsonColumns builder ---------------------- */

/* One Arrow string column being built: int32 offsets, UTF-8 data, validity bits. */
typedef struct {
    Buf data;
    int32_t *offsets; /* n + 1 used */
    uint8_t *valid;   /* bit i (LSB first) set: row i is not null */
    Py_ssize_t n, cap, nulls;
} StrCol;

typedef struct {
    PyObject_HEAD
    StrCol col[4]; /* key, before, after, before_key */
} JsonColumns;

static PyTypeObject JsonColumnsType;

/* Room for one more row's offset and validity bit. */
static int strcol_room(StrCol *c) {
    if (c->n + 1 >= c->cap) {
        Py_ssize_t cap = c->cap ? c->cap * 2 : 4096;
        int32_t *off = PyMem_Realloc(c->offsets, (size_t)(cap + 1) * sizeof(int32_t));
        if (off == NULL) return PyErr_NoMemory(), -1;
        c->offsets = off;
        uint8_t *valid = PyMem_Realloc(c->valid, (size_t)(cap + 7) / 8);
        if (valid == NULL) return PyErr_NoMemory(), -1;
        memset(valid + (c->cap + 7) / 8, 0, (size_t)((cap + 7) / 8 - (c->cap + 7) / 8));
        c->valid = valid;
        if (c->cap == 0) c->offsets[0] = 0;
        c->cap = cap;
    }
    return 0;
}

static int strcol_push(StrCol *c, const char *s, Py_ssize_t n) {
    if (strcol_room(c) < 0) return -1;
    if (s == NULL) {
        c->nulls++;
    } else {
        if (c->data.len + n > INT32_MAX) {
            PyErr_SetString(PyExc_OverflowError,
                            "the JSON of a record batch's image column exceeds 2 GiB");
            return -1;
        }
        if (put(&c->data, s, n) < 0) return -1;
        c->valid[c->n >> 3] |= (uint8_t)(1u << (c->n & 7));
    }
    c->offsets[++c->n] = (int32_t)c->data.len;
    return 0;
}

/* Back to ``n`` rows with ``nulls`` nulls (an error undoes a block). */
static void strcol_truncate(StrCol *c, Py_ssize_t n, Py_ssize_t nulls) {
    for (Py_ssize_t i = n; i < c->n; i++) c->valid[i >> 3] &= (uint8_t)~(1u << (i & 7));
    if (c->cap) c->data.len = c->offsets[n];
    c->n = n;
    c->nulls = nulls;
}

typedef struct {
    PyObject *lists[4];
    JsonColumns *cols;
} Out;

static int emit_text(Out *o, int i, const Buf *b) {
    if (o->cols != NULL) return strcol_push(&o->cols->col[i], b->p, b->len);
    PyObject *s = buf_str(b);
    if (s == NULL) return -1;
    int r = PyList_Append(o->lists[i], s);
    Py_DECREF(s);
    return r;
}

static int emit_none(Out *o, int i) {
    if (o->cols != NULL) return strcol_push(&o->cols->col[i], NULL, 0);
    return PyList_Append(o->lists[i], Py_None);
}

static int emit_image(Out *o, int i, Buf *b, const Keys *k, PyObject *const *values,
                      int picked, const Callbacks *cb) {
    if (render_image(b, k, values, picked, cb) < 0) return -1;
    return emit_text(o, i, b);
}

enum { KEY = 0, BEFORE = 1, AFTER = 2, OLD_KEY = 3 };

/* The values of one image, checked against its names (zip(..., strict=True)). */
static PyObject *const *image_values(PyObject *image, Py_ssize_t n, PyObject **held) {
    *held = PySequence_Fast(image, "a row image must be a sequence");
    if (*held == NULL) return NULL;
    if (PySequence_Fast_GET_SIZE(*held) != n) {
        PyErr_Format(PyExc_ValueError,
                     "row image has %zd values for %zd column names (zip strict)",
                     PySequence_Fast_GET_SIZE(*held), n);
        Py_CLEAR(*held);
        return NULL;
    }
    return PySequence_Fast_ITEMS(*held);
}

/* Whether the key values ``a`` (picks ``new``) equal ``b`` (picks ``old``), as the dicts'
 * ``==`` compares them (same keys: each old value == the new one). */
static int same_key(const Keys *old, PyObject *const *b, const Keys *new, PyObject *const *a) {
    for (Py_ssize_t i = 0; i < new->n; i++) {
        PyObject *x = old->index[i] < 0 ? Py_None : b[old->index[i]];
        PyObject *y = new->index[i] < 0 ? Py_None : a[new->index[i]];
        int eq = PyObject_RichCompareBool(x, y, Py_EQ);
        if (eq <= 0) return eq;
    }
    return 1;
}

typedef struct {
    const Keys *names, *bnames, *picks, *old_picks; /* (the cache's: see cached_keys) */
    int has_picks, has_old;
} Shape;

static int render_rows(PyObject *op, PyObject *rows, Py_ssize_t lo, Py_ssize_t hi, Shape *sh,
                       Out *o, const Callbacks *cb, Buf *b) {
    int update = PyUnicode_CompareWithASCIIString(op, "update") == 0;
    int insert = PyUnicode_CompareWithASCIIString(op, "insert") == 0;
    int images = insert ? AFTER : BEFORE, empty = insert ? BEFORE : AFTER;
    for (Py_ssize_t r = lo; r < hi; r++) {
        PyObject *row = PyList_GET_ITEM(rows, r);
        if (!update) {
            PyObject *held;
            PyObject *const *v = image_values(row, sh->names->n, &held);
            if (v == NULL) return -1;
            int rc = sh->has_picks ? emit_image(o, KEY, b, sh->picks, v, 1, cb)
                                   : emit_none(o, KEY);
            if (rc == 0) rc = emit_image(o, images, b, sh->names, v, 0, cb);
            Py_DECREF(held);
            if (rc < 0 || emit_none(o, empty) < 0 || emit_none(o, OLD_KEY) < 0) return -1;
            continue;
        }
        if (!PyTuple_Check(row) || PyTuple_GET_SIZE(row) != 2) {
            PyErr_SetString(PyExc_TypeError, "an update row must be a (before, after) pair");
            return -1;
        }
        PyObject *hb, *ha;
        PyObject *const *bv = image_values(PyTuple_GET_ITEM(row, 0), sh->bnames->n, &hb);
        if (bv == NULL) return -1;
        PyObject *const *av = image_values(PyTuple_GET_ITEM(row, 1), sh->names->n, &ha);
        if (av == NULL) {
            Py_DECREF(hb);
            return -1;
        }
        int rc = emit_image(o, BEFORE, b, sh->bnames, bv, 0, cb);
        if (rc == 0) rc = emit_image(o, AFTER, b, sh->names, av, 0, cb);
        if (rc == 0 && !sh->has_picks) {
            rc = emit_none(o, KEY) < 0 || emit_none(o, OLD_KEY) < 0 ? -1 : 0;
        } else if (rc == 0) {
            rc = emit_image(o, KEY, b, sh->picks, av, 1, cb);
            if (rc == 0) {
                /* before_key: set when every key column is in the before image and the
                 * values differ (partitions._block_json). */
                int same = !sh->has_old || sh->picks->n == 0
                               ? 1
                               : same_key(sh->old_picks, bv, sh->picks, av);
                if (same < 0) rc = -1;
                else if (same) rc = emit_none(o, OLD_KEY);
                else rc = emit_image(o, OLD_KEY, b, sh->old_picks, bv, 1, cb);
            }
        }
        Py_DECREF(hb);
        Py_DECREF(ha);
        if (rc) return -1;
    }
    return 0;
}

/* ---- the keys of image shapes seen before ------------------------------------------- */

/* A table's blocks repeat the same names (the same str objects: headwater.changes' plans
 * share one list per shape, partitions._key_picks one picks list), and building their Keys
 * (a set, an encode and a bytes object per name) was most of a one-row block's render.
 * Each of four slots (names, before names, picks, old picks) keeps the Keys last built in
 * a capsule, with the tuple of the items they were built from: a list holding the very
 * same objects in the same order (str and tuples are immutable, and the tuple's references
 * keep them alive) has the same Keys. A call holds a reference to the capsules it uses, so
 * another thread replacing a slot meanwhile (a value callback may release the GIL) frees
 * nothing under it. */
typedef struct {
    Keys keys;
    PyObject *items; /* tuple */
    int picks;
} Cached;

#define CACHED_NAME "headwater._imagejson.keys"
static PyObject *cache_slot[4];

static void cached_free(PyObject *capsule) {
    Cached *c = PyCapsule_GetPointer(capsule, CACHED_NAME);
    if (c == NULL) return;
    keys_free(&c->keys);
    Py_XDECREF(c->items);
    PyMem_Free(c);
}

/* The Keys of ``seq`` (a list of names, or of (name, index) pairs: ``picks``) in a capsule
 * (a new reference) and in *keys; NULL with *rc 0 when the names are not distinct, NULL
 * with *rc -1 on an error (keys_init's answers). */
static PyObject *cached_keys(int slot, PyObject *seq, int picks, const Keys **keys, int *rc) {
    if (!PyList_Check(seq)) {
        PyErr_SetString(PyExc_TypeError, "image names must be a list");
        *rc = -1;
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(seq);
    PyObject *held = cache_slot[slot];
    if (held != NULL) {
        Cached *c = PyCapsule_GetPointer(held, CACHED_NAME);
        int same = c != NULL && c->picks == picks && PyTuple_GET_SIZE(c->items) == n;
        for (Py_ssize_t i = 0; same && i < n; i++)
            same = PyList_GET_ITEM(seq, i) == PyTuple_GET_ITEM(c->items, i);
        if (same) {
            *keys = &c->keys;
            *rc = 1;
            return Py_NewRef(held);
        }
    }
    Cached *c = PyMem_Calloc(1, sizeof *c);
    if (c == NULL) {
        PyErr_NoMemory();
        *rc = -1;
        return NULL;
    }
    *rc = keys_init(&c->keys, seq, picks);
    c->picks = picks;
    c->items = *rc == 1 ? PyList_AsTuple(seq) : NULL;
    PyObject *capsule = c->items == NULL ? NULL : PyCapsule_New(c, CACHED_NAME, cached_free);
    if (capsule == NULL) {
        if (*rc == 1) {
            *rc = -1;
            keys_free(&c->keys);
        }
        Py_XDECREF(c->items);
        PyMem_Free(c);
        return NULL;
    }
    Py_XSETREF(cache_slot[slot], Py_NewRef(capsule));
    *keys = &c->keys;
    return capsule;
}

/* Keys of no names: the picks of a block without a key, the old picks of no update. */
static const Keys no_keys;

/* render_block(op, rows, lo, hi, before_names, after_names, picks, old_picks, out, plain,
 * escaped) -> bool (see the .pyi). */
static PyObject *render_block(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 11) {
        PyErr_SetString(PyExc_TypeError, "render_block takes 11 arguments");
        return NULL;
    }
    PyObject *op = args[0], *rows = args[1], *bn = args[4], *an = args[5], *picks = args[6],
             *old = args[7], *out = args[8];
    Callbacks cb = {args[9], args[10]};
    if (!PyUnicode_Check(op) || !PyList_Check(rows)) {
        PyErr_SetString(PyExc_TypeError, "render_block: op must be a str and rows a list");
        return NULL;
    }
    Out o = {{NULL, NULL, NULL, NULL}, NULL};
    if (Py_IS_TYPE(out, &JsonColumnsType)) {
        o.cols = (JsonColumns *)out;
    } else if (PyTuple_Check(out) && PyTuple_GET_SIZE(out) == 4) {
        for (int i = 0; i < 4; i++) {
            o.lists[i] = PyTuple_GET_ITEM(out, i);
            if (!PyList_Check(o.lists[i])) o.lists[0] = NULL;
        }
    }
    if (o.cols == NULL && (o.lists[0] == NULL || o.lists[1] == NULL || o.lists[2] == NULL ||
                           o.lists[3] == NULL)) {
        PyErr_SetString(PyExc_TypeError,
                        "render_block: out must be a JsonColumns or a tuple of four lists");
        return NULL;
    }
    Py_ssize_t lo = PyLong_AsSsize_t(args[2]), hi = PyLong_AsSsize_t(args[3]);
    if ((lo == -1 || hi == -1) && PyErr_Occurred()) return NULL;
    /* rows[lo:hi] */
    Py_ssize_t n = PyList_GET_SIZE(rows);
    lo = lo < 0 ? 0 : lo > n ? n : lo;
    hi = hi < lo ? lo : hi > n ? n : hi;

    int update = PyUnicode_CompareWithASCIIString(op, "update") == 0;
    int insert = PyUnicode_CompareWithASCIIString(op, "insert") == 0;
    Shape sh = {&no_keys, &no_keys, &no_keys, &no_keys, picks != Py_None,
                update && old != Py_None};
    PyObject *caps[4] = {NULL, NULL, NULL, NULL}; /* the cached Keys this call uses */
    int ok = 1;
    caps[0] = cached_keys(0, insert || update ? an : bn, 0, &sh.names, &ok);
    if (ok == 1 && update) caps[1] = cached_keys(1, bn, 0, &sh.bnames, &ok);
    if (ok == 1 && sh.has_picks) caps[2] = cached_keys(2, picks, 1, &sh.picks, &ok);
    if (ok == 1 && sh.has_old) caps[3] = cached_keys(3, old, 1, &sh.old_picks, &ok);
    if (ok == 1 && sh.has_old && sh.old_picks->n != sh.picks->n) {
        PyErr_SetString(PyExc_ValueError, "render_block: picks and old_picks differ in length");
        ok = -1;
    }
    if (ok != 1) {
        for (int i = 0; i < 4; i++) Py_XDECREF(caps[i]);
        if (ok < 0) return NULL;
        Py_RETURN_FALSE;
    }
    Py_ssize_t marks[4], nulls[4];
    for (int i = 0; i < 4; i++) {
        marks[i] = o.cols ? o.cols->col[i].n : PyList_GET_SIZE(o.lists[i]);
        nulls[i] = o.cols ? o.cols->col[i].nulls : 0;
    }
    Buf b = {0};
    int rc = render_rows(op, rows, lo, hi, &sh, &o, &cb, &b);
    PyMem_Free(b.p);
    for (int i = 0; i < 4; i++) Py_XDECREF(caps[i]);
    if (rc < 0) {
        /* Leave the columns as they were. */
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        for (int i = 0; i < 4; i++) {
            if (o.cols != NULL)
                strcol_truncate(&o.cols->col[i], marks[i], nulls[i]);
            else if (PyList_GET_SIZE(o.lists[i]) > marks[i] &&
                     PyList_SetSlice(o.lists[i], marks[i], PyList_GET_SIZE(o.lists[i]), NULL) < 0)
                PyErr_Clear();
        }
        PyErr_Restore(type, value, tb);
        return NULL;
    }
    Py_RETURN_TRUE;
}

/* ---- images straight from a rows event's bytes (render_raw) ---------------------------- */

#include "rowjson.c"

/* ---- JsonColumns ------------------------------------------------------------------------ */

static void JsonColumns_dealloc(JsonColumns *self) {
    for (int i = 0; i < 4; i++) {
        PyMem_Free(self->col[i].data.p);
        PyMem_Free(self->col[i].offsets);
        PyMem_Free(self->col[i].valid);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int column_index(PyObject *arg) {
    long i = PyLong_AsLong(arg);
    if (i == -1 && PyErr_Occurred()) return -1;
    if (i < 0 || i > 3) {
        PyErr_Format(PyExc_IndexError, "JsonColumns has columns 0-3, not %ld", i);
        return -1;
    }
    return (int)i;
}

/* append(column, text or None) */
static PyObject *JsonColumns_append(JsonColumns *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "append(column, text) takes 2 arguments");
        return NULL;
    }
    int i = column_index(args[0]);
    if (i < 0) return NULL;
    int r;
    if (args[1] == Py_None) {
        r = strcol_push(&self->col[i], NULL, 0);
    } else if (PyUnicode_Check(args[1])) {
        Py_ssize_t n;
        const char *s = PyUnicode_AsUTF8AndSize(args[1], &n);
        r = s == NULL ? -1 : strcol_push(&self->col[i], s, n);
    } else {
        PyErr_Format(PyExc_TypeError, "JsonColumns.append takes a str or None, not %.100s",
                     Py_TYPE(args[1])->tp_name);
        r = -1;
    }
    if (r < 0) return NULL;
    Py_RETURN_NONE;
}

/* take() -> [(length, null_count, offsets, data, validity or None)] * 4, and empty. */
static PyObject *JsonColumns_take(JsonColumns *self, PyObject *unused) {
    PyObject *out = PyList_New(4);
    if (out == NULL) return NULL;
    for (int i = 0; i < 4; i++) {
        StrCol *c = &self->col[i];
        int32_t zero = 0;
        PyObject *off = PyBytes_FromStringAndSize(c->cap ? (const char *)c->offsets : (const char *)&zero,
                                                  (Py_ssize_t)((c->n + 1) * sizeof(int32_t)));
        PyObject *data = PyBytes_FromStringAndSize(c->data.p ? c->data.p : "", c->data.len);
        PyObject *valid = c->nulls ? PyBytes_FromStringAndSize((const char *)c->valid, (c->n + 7) / 8)
                                   : Py_NewRef(Py_None);
        PyObject *item = off && data && valid
                             ? Py_BuildValue("(nnOOO)", c->n, c->nulls, off, data, valid)
                             : NULL;
        Py_XDECREF(off);
        Py_XDECREF(data);
        Py_XDECREF(valid);
        if (item == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, item);
        strcol_truncate(c, 0, 0);
    }
    return out;
}

static Py_ssize_t JsonColumns_len(JsonColumns *self) { return self->col[0].n; }

static PyMethodDef JsonColumns_methods[] = {
    {"append", (PyCFunction)(void (*)(void))JsonColumns_append, METH_FASTCALL,
     "append(column, text): one row's text (or None) to column 0-3."},
    {"take", (PyCFunction)JsonColumns_take, METH_NOARGS,
     "The four columns' Arrow buffers; the builder is empty afterwards."},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods JsonColumns_as_sequence = {.sq_length = (lenfunc)JsonColumns_len};

static PyTypeObject JsonColumnsType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "headwater._native._imagejson.JsonColumns",
    .tp_basicsize = sizeof(JsonColumns),
    .tp_dealloc = (destructor)JsonColumns_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The key, before, after and before_key columns of a record batch, as Arrow "
              "string buffers.",
    .tp_methods = JsonColumns_methods,
    .tp_as_sequence = &JsonColumns_as_sequence,
    .tp_new = PyType_GenericNew,
};

static PyMethodDef module_methods[] = {
    {"render_block", (PyCFunction)(void (*)(void))render_block, METH_FASTCALL,
     "Append the JSON images of rows [lo, hi) of a rows block (see _imagejson.pyi)."},
    {"render_raw", (PyCFunction)(void (*)(void))render_raw, METH_FASTCALL,
     "Append the JSON images of rows [lo, hi) of a rows event's bytes (see _imagejson.pyi)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "headwater._native._imagejson",
    "The JSON text of change-row images (headwater/spark/partitions.py).", -1, module_methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__imagejson(void) {
    PyDateTime_IMPORT;
    if (PyDateTimeAPI == NULL) return NULL;
    PyObject *decimal = PyImport_ImportModule("decimal");
    if (decimal == NULL) return NULL;
    decimal_type = PyObject_GetAttrString(decimal, "Decimal");
    Py_DECREF(decimal);
    if (decimal_type == NULL) return NULL;
    if (PyType_Ready(&JsonColumnsType) < 0 || PyType_Ready(&RowShapeType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL) return NULL;
    PyObject *kinds = PyFrozenSet_New(NULL);
    for (int k = 1; kinds != NULL && k < R_MAX; k++) {
        PyObject *name = PyUnicode_FromString(RAW_KIND_NAMES[k]);
        if (name == NULL || PySet_Add(kinds, name) < 0) Py_CLEAR(kinds);
        Py_XDECREF(name);
    }
    int bad = kinds == NULL || PyModule_AddObjectRef(m, "RAW_KINDS", kinds) < 0 ||
              PyModule_AddObjectRef(m, "JsonColumns", (PyObject *)&JsonColumnsType) < 0 ||
              PyModule_AddObjectRef(m, "RowShape", (PyObject *)&RowShapeType) < 0;
    Py_XDECREF(kinds);
    if (bad) Py_CLEAR(m);
    return m;
}
