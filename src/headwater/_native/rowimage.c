/*
 * headwater._native._rowimage: row images of rows events decoded into Python values in C.
 *
 * The reference is the generated Python decoder (headwater/binlog/codec.py, per-type specs
 * in binlog/_columns.py and binlog/_temporal.py; the formats are tabled in codec.py's
 * docstring, from MySQL sql/rpl_record.cc pack_row, sql/field.cc Field_*::pack,
 * strings/decimal.cc bin2decimal, sql-common/my_time.cc my_*_packed_from_binary). This
 * module gives the same values of the same types for the column kinds below, and is used
 * only when every column of an image is one of them (codec.py chooses; the column's kind
 * and parameters are resolved in Python, _columns.native_spec).
 *
 * Contract with codec.py:
 *   - bounds are checked against len(buf); the loops run while pos < end, as the generated
 *     code does; a read past len(buf), or rows running past `end`, raise IndexError("row
 *     image runs past the end of the event"), which codec.py turns into TruncatedError
 *     exactly as it does for the generated code's IndexError/struct.error;
 *   - a function returns None (nothing decoded, no exception) when the Python path must
 *     decide: `buf` not exactly bytes, pos < 0 or end > len(buf), or a value whose Python
 *     form this module does not build (a DECIMAL group above its digits, a DATETIME2 below
 *     year 0: corrupt bytes whose Python value is arithmetic on out-of-range fields);
 *   - no other exception is raised for the kinds here (the Python path raises none either:
 *     invalid dates become text, invalid text bytes surrogateescape).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <datetime.h>
#include <math.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

/* Column kinds (exported as KINDS; _columns.native_spec maps a column to one). */
enum {
    K_I8 = 1, K_U8, K_I16, K_U16, K_I24, K_U24, K_I32, K_U32, K_I64, K_U64,
    K_FLOAT, K_DOUBLE, K_DECIMAL, K_YEAR, K_DATE, K_DATETIME2, K_TIMESTAMP2, K_TIMESTAMP,
    K_TIME2, K_BIT, K_ENUM, K_SET, K_BYTES, K_BINARY, K_UTF8, K_ASCII, K_LATIN1, K_CHARMAP,
    K_MAX
};
static const char *const KIND_NAMES[K_MAX] = {
    NULL, "i8", "u8", "i16", "u16", "i24", "u24", "i32", "u32", "i64", "u64",
    "float", "double", "decimal", "year", "date", "datetime2", "timestamp2", "timestamp",
    "time2", "bit", "enum", "set", "bytes", "binary", "utf8", "ascii", "latin1", "charmap",
};

#define FALLBACK 1 /* decode result: let the Python path decide */

static PyObject *Decimal;          /* decimal.Decimal */
static PyObject *ZERO_TS[7];       /* "0000-00-00 00:00:00[.000000]" by fsp */
static const char TRUNC[] = "row image runs past the end of the event";

typedef struct {
    uint8_t kind;
    int8_t width;       /* fixed bytes (>= 0) or -length prefix bytes (count_rows) */
    int32_t a, b;       /* kind parameters (below) */
    PyObject *names;    /* ENUM/SET names (tuple) or NULL */
    Py_UCS4 *map;       /* K_CHARMAP: 256 code points */
    Py_UCS4 map_high;   /* K_CHARMAP: the largest code point of bytes >= 0x80 */
    int map_ascii;      /* K_CHARMAP: bytes < 0x80 map to themselves */
} Col;
/* a, b: DECIMAL precision, scale; temporals fsp; BIT, ENUM, SET bytes; BYTES/BINARY/text
 * length prefix bytes in a, BINARY's column length in b. */

typedef struct {
    PyObject_HEAD
    Py_ssize_t n;
    Py_ssize_t nb; /* null bitmap bytes */
    Col cols[1];
} Image;

static void Image_dealloc(Image *self) {
    for (Py_ssize_t i = 0; i < self->n; i++) {
        Py_XDECREF(self->cols[i].names);
        PyMem_Free(self->cols[i].map);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject ImageType;

static int fixed_width(const Col *c) {
    switch (c->kind) {
    case K_I8: case K_U8: case K_YEAR: return 1;
    case K_I16: case K_U16: return 2;
    case K_I24: case K_U24: case K_DATE: return 3;
    case K_I32: case K_U32: case K_FLOAT: case K_TIMESTAMP: return 4;
    case K_I64: case K_U64: case K_DOUBLE: return 8;
    case K_DATETIME2: return 5 + (c->a + 1) / 2;
    case K_TIMESTAMP2: return 4 + (c->a + 1) / 2;
    case K_TIME2: return 3 + (c->a + 1) / 2;
    case K_BIT: case K_ENUM: case K_SET: return c->a;
    default: return -1;
    }
}

static const int DIG2BYTES[10] = {0, 1, 1, 2, 2, 3, 3, 4, 4, 4};

static int decimal_bytes(int precision, int scale) {
    int intg = precision - scale;
    return intg / 9 * 4 + DIG2BYTES[intg % 9] + scale / 9 * 4 + DIG2BYTES[scale % 9];
}

static int set_col(Col *c, PyObject *spec) {
    int kind, a, b;
    PyObject *obj;
    if (!PyTuple_Check(spec) ||
        !PyArg_ParseTuple(spec, "iiiO;a column spec is (kind, a, b, names)", &kind, &a, &b, &obj))
        return -1;
    if (kind <= 0 || kind >= K_MAX) {
        PyErr_Format(PyExc_ValueError, "unknown column kind %d", kind);
        return -1;
    }
    c->kind = (uint8_t)kind;
    c->a = a;
    c->b = b;
    int bad = 0;
    switch (kind) {
    case K_DECIMAL: bad = !(0 < a && a <= 65 && 0 <= b && b <= a && b <= 30); break;
    case K_DATETIME2: case K_TIMESTAMP2: case K_TIME2: bad = a < 0 || a > 6; break;
    case K_BIT: bad = a < 0 || a > 8; break;
    case K_ENUM: bad = a != 1 && a != 2; break;
    case K_SET: bad = a < 1 || a > 8; break;
    case K_BYTES: case K_BINARY: case K_UTF8: case K_ASCII: case K_LATIN1: case K_CHARMAP:
        bad = a < 1 || a > 4 || b < 0;
        break;
    }
    if (bad) {
        PyErr_Format(PyExc_ValueError, "column kind %s with parameters %d, %d",
                     KIND_NAMES[kind], a, b);
        return -1;
    }
    if (kind == K_ENUM || kind == K_SET) {
        if (obj != Py_None) {
            if (!PyTuple_Check(obj)) {
                PyErr_SetString(PyExc_TypeError, "ENUM/SET names must be a tuple");
                return -1;
            }
            Py_INCREF(obj);
            c->names = obj;
        }
    }
    if (kind == K_CHARMAP) {
        if (!PyUnicode_Check(obj) || PyUnicode_GET_LENGTH(obj) != 256) {
            PyErr_SetString(PyExc_TypeError, "a charmap column needs a 256-character table");
            return -1;
        }
        c->map = PyMem_Malloc(256 * sizeof(Py_UCS4));
        if (c->map == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        c->map_ascii = 1;
        c->map_high = 0;
        for (int i = 0; i < 256; i++) {
            Py_UCS4 ch = PyUnicode_READ_CHAR(obj, i);
            c->map[i] = ch;
            if (i < 0x80 && ch != (Py_UCS4)i) c->map_ascii = 0;
            if (i >= 0x80 && ch > c->map_high) c->map_high = ch;
        }
    }
    if (kind == K_DECIMAL)
        c->width = (int8_t)decimal_bytes(a, b);
    else if (kind >= K_BYTES)
        c->width = (int8_t)-a;
    else
        c->width = (int8_t)fixed_width(c);
    return 0;
}

static PyObject *Image_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    PyObject *specs;
    if (!PyArg_ParseTuple(args, "O!:Image", &PyTuple_Type, &specs)) return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(specs);
    Image *self = (Image *)type->tp_alloc(type, n ? n : 1);
    if (self == NULL) return NULL;
    self->n = 0;
    self->nb = (n + 7) / 8;
    for (Py_ssize_t i = 0; i < n; i++) {
        memset(&self->cols[i], 0, sizeof(Col));
        self->n = i + 1;
        if (set_col(&self->cols[i], PyTuple_GET_ITEM(specs, i)) < 0) {
            Py_DECREF(self);
            return NULL;
        }
    }
    return (PyObject *)self;
}

static PyObject *Image_len(Image *self, void *closure) { return PyLong_FromSsize_t(self->n); }

static PyGetSetDef Image_getset[] = {
    {"columns", (getter)Image_len, NULL, "columns in the image", NULL},
    {NULL},
};

static PyTypeObject ImageType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "headwater._native._rowimage.Image",
    .tp_basicsize = sizeof(Image) - sizeof(Col),
    .tp_itemsize = sizeof(Col),
    .tp_dealloc = (destructor)Image_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Image(specs): the column kinds of one row image shape (see the source)",
    .tp_new = Image_new,
    .tp_getset = Image_getset,
};

/* ---- values ----------------------------------------------------------------------------- */

static inline uint32_t be16(const uint8_t *p) { return (uint32_t)p[0] << 8 | p[1]; }
static inline uint32_t be24(const uint8_t *p) { return (uint32_t)p[0] << 16 | (uint32_t)p[1] << 8 | p[2]; }
static inline uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static inline uint64_t le_n(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}
static inline uint64_t be_n(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v = v << 8 | p[i];
    return v;
}

static const int64_t POW10[10] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000,
                                  100000000, 1000000000};

/* decimal.Decimal objects, built without parsing text where the layout allows it.
 *
 * CPython's C decimal (Modules/_decimal/_decimal.c) keeps a value in a PyDecObject: the
 * object header, a cached hash (-1: not computed), an mpd_t (libmpdec's mpdecimal.h: flags,
 * exponent, digits of the coefficient, words used, words allocated, pointer to the words)
 * and _Py_DEC_MINALLOC = 4 words of static data the mpd_t points at; the coefficient is in
 * base 10**19 words, least significant first, no leading zero word. A DECIMAL has at most
 * 65 digits: 4 words. decimal_init checks this mirror against objects the constructor
 * built (sizes, flags, every field, for values up to 65 digits) and, on any difference,
 * leaves DECIMAL_DIRECT off: values then come from Decimal(text) (same values). */
typedef struct {
    uint8_t flags;
    Py_ssize_t exp, digits, len, alloc;
    uint64_t *data;
} MpdMirror;
typedef struct {
    PyObject_HEAD
    Py_hash_t hash;
    MpdMirror dec;
    uint64_t data[4];
} DecMirror;
#define MPD_NEG 1
#define MPD_STATIC 16
#define MPD_STATIC_DATA 32
static int decimal_direct;

/* Decimal of sign, ASCII digits (n >= 1, leading zeros allowed) and exponent. */
static PyObject *decimal_from_digits(const char *digits, int n, int negative, int exp,
                                     int direct) {
    int i = 0;
    while (i < n - 1 && digits[i] == '0') i++;
    const char *s = digits + i;
    int nd = n - i;
    if (nd == 1 && s[0] == '0') negative = 0; /* Decimal(0): no sign */
    if (!direct) {
        char text[96], *t = text;
        if (negative) *t++ = '-';
        memcpy(t, s, nd);
        t += nd;
        t += sprintf(t, "E%d", exp);
        PyObject *str = PyUnicode_DecodeASCII(text, t - text, NULL);
        if (str == NULL) return NULL;
        PyObject *out = PyObject_CallOneArg(Decimal, str);
        Py_DECREF(str);
        return out;
    }
    DecMirror *d = PyObject_Malloc(sizeof(DecMirror));
    if (d == NULL) return PyErr_NoMemory();
    PyObject_Init((PyObject *)d, (PyTypeObject *)Decimal);
    d->hash = -1;
    int len = 0;
    for (int end = nd; end > 0; end -= 19) {
        uint64_t w = 0;
        for (int k = end > 19 ? end - 19 : 0; k < end; k++) w = w * 10 + (uint64_t)(s[k] - '0');
        d->data[len++] = w;
    }
    for (int k = len; k < 4; k++) d->data[k] = 0;
    d->dec.flags = MPD_STATIC | MPD_STATIC_DATA | (negative ? MPD_NEG : 0);
    d->dec.exp = exp;
    d->dec.digits = nd;
    d->dec.len = len;
    d->dec.alloc = 4;
    d->dec.data = d->data;
    return (PyObject *)d;
}

/* Whether the mirror holds: every field of Decimal(text) equals the mirror's for these. */
static int decimal_mirror_ok(void) {
    static const char *const cases[][3] = {
        /* digits, sign, exponent */
        {"0", "", "0"}, {"1", "", "0"}, {"1250", "-", "-2"}, {"000123", "", "-5"},
        {"1234567890123456789", "", "0"}, {"12345678901234567890", "-", "-4"},
        {"99999999999999999999999999999999999999999999999999999999999999999", "-", "-30"},
        {"10000000000000000000000000000000000000000000000000000000000000000", "", "0"},
        {"00000000000000000000000000000000000000000000000000000000000000000", "-", "-30"},
    };
    PyTypeObject *type = (PyTypeObject *)Decimal;
    if (!PyType_Check(Decimal) || type->tp_basicsize != (Py_ssize_t)sizeof(DecMirror) ||
        type->tp_itemsize != 0 || PyType_HasFeature(type, Py_TPFLAGS_HAVE_GC) ||
        type->tp_free != PyObject_Free) /* objects from PyObject_Malloc, freed by it */
        return 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const char *digits = cases[c][0];
        int negative = cases[c][1][0] == '-', exp = atoi(cases[c][2]);
        PyObject *made = decimal_from_digits(digits, (int)strlen(digits), negative, exp, 0);
        PyObject *mine = decimal_from_digits(digits, (int)strlen(digits), negative, exp, 1);
        int ok = made != NULL && mine != NULL && Py_IS_TYPE(made, type);
        if (ok) {
            DecMirror *a = (DecMirror *)made, *b = (DecMirror *)mine;
            ok = a->dec.flags == b->dec.flags && a->dec.exp == b->dec.exp &&
                 a->dec.digits == b->dec.digits && a->dec.len == b->dec.len &&
                 a->dec.alloc == 4 && a->dec.data == a->data &&
                 memcmp(a->data, b->data, (size_t)a->dec.len * sizeof(uint64_t)) == 0 &&
                 PyObject_RichCompareBool(made, mine, Py_EQ) == 1;
            if (ok) {
                PyObject *s1 = PyObject_Str(made), *s2 = PyObject_Str(mine);
                ok = s1 != NULL && s2 != NULL && PyUnicode_Compare(s1, s2) == 0 &&
                     PyObject_Hash(made) == PyObject_Hash(mine);
                Py_XDECREF(s1);
                Py_XDECREF(s2);
            }
        }
        Py_XDECREF(made);
        Py_XDECREF(mine);
        if (PyErr_Occurred()) PyErr_Clear();
        if (!ok) return 0;
    }
    return 1;
}

/* NEWDECIMAL (bin2decimal): groups of 9 digits in 4 bytes big endian, partial groups of
 * intg % 9 leading / scale % 9 trailing digits in dig2bytes bytes; the first byte's top
 * bit is set for positive values, negative values invert every byte. The Python path
 * computes Decimal(unscaled).scaleb(-scale) (codec.py); for groups within their digits
 * that is the Decimal of those digits and exponent -scale, built here. Out-of-range
 * groups: FALLBACK. */
static int decode_decimal(const Col *c, const uint8_t *p, PyObject **out) {
    int precision = c->a, scale = c->b, intg = precision - scale;
    int sizes[16], digits[16], ng = 0;
    if (intg % 9) { sizes[ng] = DIG2BYTES[intg % 9]; digits[ng++] = intg % 9; }
    for (int i = 0; i < intg / 9; i++) { sizes[ng] = 4; digits[ng++] = 9; }
    for (int i = 0; i < scale / 9; i++) { sizes[ng] = 4; digits[ng++] = 9; }
    if (scale % 9) { sizes[ng] = DIG2BYTES[scale % 9]; digits[ng++] = scale % 9; }
    int negative = !(p[0] & 0x80);
    uint8_t mask = negative ? 0xFF : 0;
    char text[80], *t = text;
    for (int g = 0; g < ng; g++) {
        uint32_t v = 0;
        for (int k = 0; k < sizes[g]; k++) {
            uint8_t byte = (uint8_t)(*p++ ^ mask);
            if (g == 0 && k == 0) byte &= 0x7F; /* the sign bit */
            v = v << 8 | byte;
        }
        if (v >= (uint32_t)POW10[digits[g]]) return FALLBACK;
        for (int k = digits[g] - 1; k >= 0; k--) {
            t[k] = (char)('0' + v % 10);
            v /= 10;
        }
        t += digits[g];
    }
    *out = decimal_from_digits(text, (int)(t - text), negative, -scale, decimal_direct);
    return *out ? 0 : -1;
}

static int days_in_month(int y, int m) {
    static const int dim[13] = {0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (m == 2 && (y % 4 == 0 && (y % 100 != 0 || y % 400 == 0))) return 29;
    return dim[m];
}

static int valid_date(int y, int m, int d) {
    return y >= 1 && y <= 9999 && m >= 1 && m <= 12 && d >= 1 && d <= days_in_month(y, m);
}

static PyObject *ascii_text(const char *s, int n) { return PyUnicode_DecodeASCII(s, n, NULL); }

/* datetime.fromtimestamp(sec + us / 1e6, timezone.utc) for sec >= 0 (days from civil:
 * H. Hinnant's algorithm, proleptic Gregorian, as gmtime). */
static PyObject *utc_datetime(int64_t sec, int us) {
    int64_t days = sec / 86400, rem = sec % 86400;
    int64_t z = days + 719468, era = z / 146097, doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100), mp = (5 * doy + 2) / 153;
    int d = (int)(doy - (153 * mp + 2) / 5 + 1), m = (int)(mp < 10 ? mp + 3 : mp - 9);
    int y = (int)(yoe + era * 400 + (m <= 2));
    return PyDateTimeAPI->DateTime_FromDateAndTime(
        y, m, d, (int)(rem / 3600), (int)(rem / 60 % 60), (int)(rem % 60), us,
        PyDateTime_TimeZone_UTC, PyDateTimeAPI->DateTimeType);
}

/* datetime.fromtimestamp(<float>, UTC): CPython's _PyTime_DoubleToDenominator (modf, the
 * fraction times 1e6 rounded half to even, carried), then gmtime. */
static PyObject *utc_datetime_f(double d) {
    double intpart;
    volatile double frac = modf(d, &intpart);
    frac *= 1e6;
    double r = round(frac);
    if (fabs(frac - r) == 0.5) r = 2.0 * round(frac / 2.0);
    frac = r;
    if (frac >= 1e6) { frac -= 1e6; intpart += 1.0; }
    return utc_datetime((int64_t)intpart, (int)frac);
}

/* DATETIME2 that is no valid datetime: _temporal.datetime2_text for n >= 0. */
static PyObject *datetime2_text(int64_t n, int64_t us, int fsp) {
    int64_t ymd = n >> 17, ym = ymd >> 5, hms = n & 0x1FFFF;
    char buf[64], frac[24];
    int len = snprintf(buf, sizeof buf, "%04d-%02d-%02d %02d:%02d:%02d", (int)(ym / 13),
                       (int)(ym % 13), (int)(ymd & 31), (int)(hms >> 12),
                       (int)((hms >> 6) & 63), (int)(hms & 63));
    if (fsp) {
        int flen = snprintf(frac, sizeof frac, "%06lld", (long long)us);
        buf[len++] = '.';
        for (int i = 0; i < fsp && i < flen; i++) buf[len++] = frac[i];
    }
    return ascii_text(buf, len);
}

static PyObject *text_value(const Col *c, const char *s, Py_ssize_t n) {
    switch (c->kind) {
    case K_UTF8: return PyUnicode_DecodeUTF8(s, n, "surrogateescape");
    case K_ASCII: return PyUnicode_DecodeASCII(s, n, "surrogateescape");
    case K_LATIN1: return PyUnicode_DecodeLatin1(s, n, NULL);
    default: break;
    }
    /* K_CHARMAP: a complete single-byte table (mysql-latin1), never an invalid byte. */
    const uint8_t *u = (const uint8_t *)s;
    int high = 0;
    for (Py_ssize_t i = 0; i < n; i++) high |= u[i];
    if (high < 0x80 && c->map_ascii) return PyUnicode_DecodeASCII(s, n, NULL);
    Py_UCS4 maxchar = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        if (c->map[u[i]] > maxchar) maxchar = c->map[u[i]];
    PyObject *str = PyUnicode_New(n, maxchar);
    if (str == NULL) return NULL;
    int kind = PyUnicode_KIND(str);
    void *data = PyUnicode_DATA(str);
    for (Py_ssize_t i = 0; i < n; i++) PyUnicode_WRITE(kind, data, i, c->map[u[i]]);
    return str;
}

/* One non-NULL value at *pp (bounds checked against len). 0: *out set; -1: exception;
 * FALLBACK. */
static int decode_value(const Col *c, const uint8_t *buf, Py_ssize_t len, Py_ssize_t *pp,
                        PyObject **out) {
    Py_ssize_t p = *pp;
    const uint8_t *v = buf + p;
    int w = c->width;
    if (w >= 0) {
        if (p + w > len) goto trunc;
        *pp = p + w;
    }
    PyObject *r = NULL;
    switch (c->kind) {
    case K_I8: r = PyLong_FromLong((int8_t)v[0]); break;
    case K_U8: r = PyLong_FromLong(v[0]); break;
    case K_I16: r = PyLong_FromLong((int16_t)(v[0] | v[1] << 8)); break;
    case K_U16: r = PyLong_FromLong(v[0] | v[1] << 8); break;
    case K_I24: {
        int32_t x = (int32_t)(v[0] | v[1] << 8 | (uint32_t)v[2] << 16);
        r = PyLong_FromLong(x & 0x800000 ? x - 0x1000000 : x);
        break;
    }
    case K_U24: r = PyLong_FromLong((long)(v[0] | v[1] << 8 | (uint32_t)v[2] << 16)); break;
    case K_I32: { int32_t x; memcpy(&x, v, 4); r = PyLong_FromLong(x); break; }
    case K_U32: { uint32_t x; memcpy(&x, v, 4); r = PyLong_FromUnsignedLong(x); break; }
    case K_I64: { int64_t x; memcpy(&x, v, 8); r = PyLong_FromLongLong(x); break; }
    case K_U64: { uint64_t x; memcpy(&x, v, 8); r = PyLong_FromUnsignedLongLong(x); break; }
    case K_FLOAT: { float x; memcpy(&x, v, 4); r = PyFloat_FromDouble(x); break; }
    case K_DOUBLE: { double x; memcpy(&x, v, 8); r = PyFloat_FromDouble(x); break; }
    case K_DECIMAL: return decode_decimal(c, v, out);
    case K_YEAR: r = PyLong_FromLong(v[0] ? v[0] + 1900 : 0); break;
    case K_DATE: {
        uint32_t n = v[0] | v[1] << 8 | (uint32_t)v[2] << 16;
        int d = n & 31, m = (n >> 5) & 15, y = (int)(n >> 9);
        if (valid_date(y, m, d)) {
            r = PyDate_FromDate(y, m, d);
        } else {
            char text[32];
            r = ascii_text(text, snprintf(text, sizeof text, "%04d-%02d-%02d", y, m, d));
        }
        break;
    }
    case K_DATETIME2: {
        int fsp = c->a;
        int64_t raw, us;
        if (fsp >= 5) {
            uint64_t x = be_n(v, 8);
            raw = (int64_t)(x >> 24);
            us = (int64_t)(x & 0xFFFFFF);
        } else {
            raw = (int64_t)v[0] << 32 | be32(v + 1);
            us = fsp == 0 ? 0 : fsp <= 2 ? (int64_t)v[5] * 10000 : (int64_t)be16(v + 5) * 100;
        }
        int64_t n = raw - 0x8000000000LL;
        if (n < 0) return FALLBACK;
        int64_t ymd = n >> 17, ym = ymd >> 5;
        int y = (int)(ym / 13), mo = (int)(ym % 13), d = (int)(ymd & 31);
        int h = (int)((n >> 12) & 31), mi = (int)((n >> 6) & 63), s = (int)(n & 63);
        if (valid_date(y, mo, d) && h < 24 && mi < 60 && s < 60 && us < 1000000)
            r = PyDateTimeAPI->DateTime_FromDateAndTime(y, mo, d, h, mi, s, (int)us, Py_None,
                                                         PyDateTimeAPI->DateTimeType);
        else
            r = datetime2_text(n, us, fsp);
        break;
    }
    case K_TIMESTAMP2: {
        int fsp = c->a;
        uint32_t s = be32(v), frac;
        double per;
        if (fsp == 0) { frac = 0; per = 1; }
        else if (fsp <= 2) { frac = v[4]; per = 100; }
        else if (fsp <= 4) { frac = be16(v + 4); per = 10000; }
        else { frac = be24(v + 4); per = 1000000; }
        if (frac) {
            /* codec: fromtimestamp(s + frac / per_second, UTC) (both doubles exact) */
            volatile double q = (double)frac / per;
            r = utc_datetime_f((double)s + q);
        } else if (s) {
            r = utc_datetime(s, 0);
        } else {
            r = Py_NewRef(ZERO_TS[fsp]);
        }
        break;
    }
    case K_TIMESTAMP: {
        uint32_t s;
        memcpy(&s, v, 4);
        r = s ? utc_datetime(s, 0) : Py_NewRef(ZERO_TS[0]);
        break;
    }
    case K_TIME2: {
        /* _temporal.time2_from_parts */
        int fsp = c->a;
        int64_t packed;
        if (fsp >= 5) {
            packed = (int64_t)be_n(v, 6) - 0x800000000000LL;
        } else {
            int64_t ip = (int64_t)be24(v) - 0x800000;
            if (fsp >= 3) {
                int64_t frac = be16(v + 3);
                if (ip < 0 && frac) { ip += 1; frac -= 0x10000; }
                packed = ip * (1 << 24) + frac * 100;
            } else if (fsp >= 1) {
                int64_t frac = v[3];
                if (ip < 0 && frac) { ip += 1; frac -= 0x100; }
                packed = ip * (1 << 24) + frac * 10000;
            } else {
                packed = ip * (1 << 24);
            }
        }
        int neg = packed < 0;
        if (neg) packed = -packed;
        int64_t hms = packed >> 24, usec = packed & 0xFFFFFF;
        int64_t total = (((hms >> 12) & 0x3FF) * 3600 + ((hms >> 6) & 63) * 60 + (hms & 63)) *
                            1000000LL + usec;
        if (neg) total = -total;
        const int64_t day = 86400LL * 1000000LL;
        int64_t days = total / day, rem = total % day;
        if (rem < 0) { rem += day; days -= 1; }
        r = PyDelta_FromDSU((int)days, (int)(rem / 1000000), (int)(rem % 1000000));
        break;
    }
    case K_BIT: r = PyLong_FromUnsignedLongLong(be_n(v, c->a)); break;
    case K_ENUM: {
        long x = c->a == 1 ? v[0] : v[0] | v[1] << 8;
        if (c->names != NULL && x == 0) {
            r = PyUnicode_FromStringAndSize("", 0);
        } else if (c->names != NULL && x <= PyTuple_GET_SIZE(c->names)) {
            r = Py_NewRef(PyTuple_GET_ITEM(c->names, x - 1));
        } else {
            r = PyLong_FromLong(x);
        }
        break;
    }
    case K_SET: {
        uint64_t mask = le_n(v, c->a);
        if (c->names == NULL) { r = PyLong_FromUnsignedLongLong(mask); break; }
        Py_ssize_t nn = PyTuple_GET_SIZE(c->names);
        if (nn < 64 && mask >> nn) { r = PyLong_FromUnsignedLongLong(mask); break; }
        int count = 0;
        for (uint64_t m = mask; m; m &= m - 1) count++;
        r = PyTuple_New(count);
        if (r == NULL) return -1;
        int k = 0;
        for (Py_ssize_t i = 0; i < nn && i < 64; i++)
            if (mask >> i & 1) PyTuple_SET_ITEM(r, k++, Py_NewRef(PyTuple_GET_ITEM(c->names, i)));
        PyObject_GC_UnTrack(r); /* names are str */
        break;
    }
    default: {
        /* length-prefixed: BYTES, BINARY, text */
        int k = c->a;
        if (p + k > len) goto trunc;
        Py_ssize_t n = (Py_ssize_t)le_n(v, k);
        Py_ssize_t start = p + k;
        *pp = start + n;
        /* The Python path slices (short at the end) and finds the overrun after. */
        if (start + n > len) goto trunc;
        const char *s = (const char *)buf + start;
        if (c->kind == K_BYTES) {
            r = PyBytes_FromStringAndSize(s, n);
        } else if (c->kind == K_BINARY) {
            if (n >= c->b) {
                r = PyBytes_FromStringAndSize(s, n);
            } else {
                /* BINARY(n): the zero bytes the server dropped, padded back (_columns) */
                r = PyBytes_FromStringAndSize(NULL, c->b);
                if (r != NULL) {
                    memcpy(PyBytes_AS_STRING(r), s, n);
                    memset(PyBytes_AS_STRING(r) + n, 0, c->b - n);
                }
            }
        } else {
            r = text_value(c, s, n);
        }
        break;
    }
    }
    if (r == NULL) return -1;
    *out = r;
    return 0;
trunc:
    PyErr_SetString(PyExc_IndexError, TRUNC);
    return -1;
}

/* One image at *pp -> a tuple of its present columns' values. */
static int decode_image(const Image *im, const uint8_t *buf, Py_ssize_t len, Py_ssize_t *pp,
                        PyObject **out) {
    Py_ssize_t n = im->n, nb = im->nb, p = *pp;
    PyObject *row = PyTuple_New(n);
    if (row == NULL) return -1;
    if (n == 0) {
        *out = row;
        return 0;
    }
    if (p + nb > len) {
        Py_DECREF(row);
        PyErr_SetString(PyExc_IndexError, TRUNC);
        return -1;
    }
    const uint8_t *nulls = buf + p;
    p += nb;
    int any_null = 0;
    for (Py_ssize_t i = 0; i < nb; i++) any_null |= nulls[i];
    for (Py_ssize_t j = 0; j < n; j++) {
        PyObject *value;
        if (any_null && nulls[j >> 3] >> (j & 7) & 1) {
            value = Py_NewRef(Py_None);
        } else {
            int rc = decode_value(&im->cols[j], buf, len, &p, &value);
            if (rc) {
                Py_DECREF(row);
                return rc;
            }
        }
        PyTuple_SET_ITEM(row, j, value);
    }
    /* No value here is a container the cyclic GC tracks (SET tuples are untracked too):
     * the row cannot be in a cycle, and the collector need not walk it (CPython untracks
     * such tuples itself, at their first collection; decoding keeps whole events alive,
     * which made the collections walk every row of them). */
    PyObject_GC_UnTrack(row);
    *pp = p;
    *out = row;
    return 0;
}

/* Common arguments: buf must be exactly bytes, 0 <= pos, end <= len(buf); else None. */
static int buffer_of(PyObject *obj, const uint8_t **buf, Py_ssize_t *len) {
    if (!PyBytes_CheckExact(obj)) return 0;
    *buf = (const uint8_t *)PyBytes_AS_STRING(obj);
    *len = PyBytes_GET_SIZE(obj);
    return 1;
}

static int image_arg(PyObject *obj, const char *what) {
    if (Py_TYPE(obj) != &ImageType) {
        PyErr_Format(PyExc_TypeError, "%s must be an Image", what);
        return 0;
    }
    return 1;
}

static int ssize_arg(PyObject *obj, Py_ssize_t *out) {
    *out = PyLong_AsSsize_t(obj);
    return !(*out == -1 && PyErr_Occurred());
}

/* rows(image, buf, pos, end) -> list of tuples | None */
static PyObject *py_rows(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    const uint8_t *buf;
    Py_ssize_t len, p, end;
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "rows(image, buf, pos, end)");
        return NULL;
    }
    if (!image_arg(args[0], "image") || !ssize_arg(args[2], &p) || !ssize_arg(args[3], &end))
        return NULL;
    if (!buffer_of(args[1], &buf, &len) || p < 0 || end > len) Py_RETURN_NONE;
    const Image *im = (const Image *)args[0];
    if (im->n == 0) Py_RETURN_NONE;
    PyObject *out = PyList_New(0);
    if (out == NULL) return NULL;
    while (p < end) {
        PyObject *row;
        int rc = decode_image(im, buf, len, &p, &row);
        if (rc == 0) {
            rc = PyList_Append(out, row);
            Py_DECREF(row);
        }
        if (rc) {
            Py_DECREF(out);
            if (rc == FALLBACK) Py_RETURN_NONE;
            return NULL;
        }
    }
    if (p > end) {
        Py_DECREF(out);
        PyErr_SetString(PyExc_IndexError, TRUNC);
        return NULL;
    }
    return out;
}

/* pairs(before, after, buf, pos, end) -> list of (before, after) | None */
static PyObject *py_pairs(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    const uint8_t *buf;
    Py_ssize_t len, p, end;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "pairs(before, after, buf, pos, end)");
        return NULL;
    }
    if (!image_arg(args[0], "before") || !image_arg(args[1], "after") ||
        !ssize_arg(args[3], &p) || !ssize_arg(args[4], &end))
        return NULL;
    if (!buffer_of(args[2], &buf, &len) || p < 0 || end > len) Py_RETURN_NONE;
    const Image *bi = (const Image *)args[0], *ai = (const Image *)args[1];
    if (bi->n == 0 && ai->n == 0) Py_RETURN_NONE;
    PyObject *out = PyList_New(0);
    if (out == NULL) return NULL;
    while (p < end) {
        PyObject *b, *a, *pair = NULL;
        int rc = decode_image(bi, buf, len, &p, &b);
        if (rc == 0) {
            rc = decode_image(ai, buf, len, &p, &a);
            if (rc == 0) {
                pair = PyTuple_New(2);
                if (pair == NULL) {
                    Py_DECREF(a);
                    Py_DECREF(b);
                    rc = -1;
                } else {
                    PyTuple_SET_ITEM(pair, 0, b);
                    PyTuple_SET_ITEM(pair, 1, a);
                    PyObject_GC_UnTrack(pair); /* two untracked rows */
                    rc = PyList_Append(out, pair);
                    Py_DECREF(pair);
                }
            } else {
                Py_DECREF(b);
            }
        }
        if (rc) {
            Py_DECREF(out);
            if (rc == FALLBACK) Py_RETURN_NONE;
            return NULL;
        }
    }
    if (p > end) {
        Py_DECREF(out);
        PyErr_SetString(PyExc_IndexError, TRUNC);
        return NULL;
    }
    return out;
}

/* image(image, buf, pos) -> (values, end) | None */
static PyObject *py_image(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    const uint8_t *buf;
    Py_ssize_t len, p;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "image(image, buf, pos)");
        return NULL;
    }
    if (!image_arg(args[0], "image") || !ssize_arg(args[2], &p)) return NULL;
    if (!buffer_of(args[1], &buf, &len) || p < 0) Py_RETURN_NONE;
    PyObject *row;
    int rc = decode_image((const Image *)args[0], buf, len, &p, &row);
    if (rc == FALLBACK) Py_RETURN_NONE;
    if (rc) return NULL;
    return Py_BuildValue("(Nn)", row, p);
}

/* Advance over one image by its columns' widths, decoding nothing. 0 or -1 (IndexError). */
static int skip_image(const Image *im, const uint8_t *buf, Py_ssize_t len, Py_ssize_t *pp) {
    Py_ssize_t n = im->n, nb = im->nb, p = *pp;
    if (n == 0) return 0;
    if (p + nb > len) goto trunc;
    const uint8_t *nulls = buf + p;
    p += nb;
    int any_null = 0;
    for (Py_ssize_t i = 0; i < nb; i++) any_null |= nulls[i];
    for (Py_ssize_t j = 0; j < n; j++) {
        if (any_null && nulls[j >> 3] >> (j & 7) & 1) continue;
        int w = im->cols[j].width;
        if (w >= 0) {
            p += w;
        } else {
            if (p - w > len) goto trunc;
            p += -w + (Py_ssize_t)le_n(buf + p, -w);
        }
    }
    *pp = p;
    return 0;
trunc:
    PyErr_SetString(PyExc_IndexError, TRUNC);
    return -1;
}

/* count(first, second | None, buf, pos, end) -> int | None. Any buffer (the reader
 * counts memoryviews of its receive buffer): no value is built from it. */
static PyObject *py_count(PyObject *mod, PyObject *const *args, Py_ssize_t nargs) {
    Py_ssize_t p, end;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "count(first, second, buf, pos, end)");
        return NULL;
    }
    if (!image_arg(args[0], "first") || (args[1] != Py_None && !image_arg(args[1], "second")) ||
        !ssize_arg(args[3], &p) || !ssize_arg(args[4], &end))
        return NULL;
    const Image *first = (const Image *)args[0];
    const Image *second = args[1] == Py_None ? NULL : (const Image *)args[1];
    if (first->n == 0 && (second == NULL || second->n == 0)) Py_RETURN_NONE;
    Py_buffer view;
    if (PyObject_GetBuffer(args[2], &view, PyBUF_SIMPLE) < 0) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    const uint8_t *buf = view.buf;
    Py_ssize_t len = view.len, rows = 0;
    PyObject *result = NULL;
    if (p < 0 || end > len) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    while (p < end) {
        if (skip_image(first, buf, len, &p) < 0) goto done;
        if (second != NULL && skip_image(second, buf, len, &p) < 0) goto done;
        rows++;
    }
    if (p != end)
        PyErr_SetString(PyExc_IndexError, TRUNC);
    else
        result = PyLong_FromSsize_t(rows);
done:
    PyBuffer_Release(&view);
    return result;
}

/* _decimal_direct(on) -> the previous setting (tests: both ways give the same values);
 * on only takes when the mirror checked out at import. */
static PyObject *py_decimal_direct(PyObject *mod, PyObject *arg) {
    int on = PyObject_IsTrue(arg);
    if (on < 0) return NULL;
    int was = decimal_direct;
    decimal_direct = on && decimal_mirror_ok();
    return PyBool_FromLong(was);
}

static PyMethodDef module_methods[] = {
    {"_decimal_direct", py_decimal_direct, METH_O,
     "_decimal_direct(on): build Decimals directly (when the layout checks) or from text"},
    {"rows", (PyCFunction)(void (*)(void))py_rows, METH_FASTCALL,
     "rows(image, buf, pos, end): every image in buf[pos:end], or None (Python decides)"},
    {"pairs", (PyCFunction)(void (*)(void))py_pairs, METH_FASTCALL,
     "pairs(before, after, buf, pos, end): every (before, after) pair, or None"},
    {"image", (PyCFunction)(void (*)(void))py_image, METH_FASTCALL,
     "image(image, buf, pos): (values, end) of one image, or None"},
    {"count", (PyCFunction)(void (*)(void))py_count, METH_FASTCALL,
     "count(first, second, buf, pos, end): rows in buf[pos:end] walked by widths, or None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "headwater._native._rowimage",
    "Row images decoded in C (headwater/binlog/codec.py chooses when).", -1, module_methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__rowimage(void) {
    PyDateTime_IMPORT;
    if (PyDateTimeAPI == NULL) return NULL;
    PyObject *decimal = PyImport_ImportModule("decimal");
    if (decimal == NULL) return NULL;
    Decimal = PyObject_GetAttrString(decimal, "Decimal");
    Py_DECREF(decimal);
    if (Decimal == NULL) return NULL;
    decimal_direct = decimal_mirror_ok();
    for (int fsp = 0; fsp <= 6; fsp++) {
        char text[32] = "0000-00-00 00:00:00.000000";
        ZERO_TS[fsp] = ascii_text(text, fsp ? 20 + fsp : 19);
        if (ZERO_TS[fsp] == NULL) return NULL;
    }
    if (PyType_Ready(&ImageType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL) return NULL;
    PyObject *kinds = PyDict_New();
    if (kinds == NULL) goto fail;
    for (int k = 1; k < K_MAX; k++) {
        PyObject *v = PyLong_FromLong(k);
        if (v == NULL || PyDict_SetItemString(kinds, KIND_NAMES[k], v) < 0) {
            Py_XDECREF(v);
            Py_DECREF(kinds);
            goto fail;
        }
        Py_DECREF(v);
    }
    if (PyModule_AddObject(m, "KINDS", kinds) < 0) {
        Py_DECREF(kinds);
        goto fail;
    }
    if (PyModule_AddObjectRef(m, "Image", (PyObject *)&ImageType) < 0 ||
        PyModule_AddIntConstant(m, "DECIMAL_DIRECT", decimal_direct) < 0)
        goto fail;
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
