/*
 * Part of headwater._native._imagejson (included by imagejson.c, which it extends: it uses
 * its output buffers, value writers, Keys cache and JsonColumns; not compiled on its own).
 *
 * Row images rendered to the key/before/after/before_key JSON text straight from a rows
 * event's bytes, with no Python object per value: ``render_raw``. The text is the text
 * render_block gives for the values headwater._native._rowimage decodes from the same
 * bytes (tests/unit/spark/test_rowjson.py holds them equal on random tables and rows).
 *
 * Row image format (MySQL sql/rpl_record.cc pack_row; per type Field_*::pack; tabled in
 * headwater/binlog/codec.py): a null bitmap of ceil(N / 8) bytes (bit k set: the k-th
 * present column is NULL), then each non-NULL value. A RowShape holds the present columns'
 * kinds, as _rowimage.Image does (the same (kind, a, b, obj) specs, from
 * headwater.binlog._columns.native_spec), for the kinds whose text is written here:
 *
 *   i8..u64, bit, year      digits (json: int)
 *   float, double           imagejson's put_float of the (float-widened) double
 *   decimal                 "digits[.scale digits]" (json_default: format(d, "f"); the
 *                           Decimal rowimage.c builds has exponent -scale, no sign on zero)
 *   date                    "%04d-%02d-%02d": a valid date's isoformat, an invalid one's
 *                           text (rowimage.c) are the same digits
 *   datetime2               valid: "YYYY-MM-DDTHH:MM:SS[.ffffff]"; not a datetime: the
 *                           _temporal.datetime2_text string; below year 0: fallback
 *   timestamp2, timestamp   UTC datetime "...+00:00" (fromtimestamp's rounding, as
 *                           rowimage.c), 0: "0000-00-00 00:00:00[.0...]"
 *   time2                   json_default's format_time "[-]HH:MM:SS[.ffffff]"
 *   bytes, binary           {"base64":"..."} (BINARY(n) padded back to n bytes)
 *   utf8, ascii             the bytes as a JSON string when they are valid (CPython's
 *                           strict decoders); invalid bytes (surrogate escapes): fallback
 *   latin1, charmap         each byte's code point, in UTF-8
 *
 * Fallback: render_raw returns False, having appended nothing, whenever its text could
 * differ from the decoded path's or it cannot tell (a value above: invalid text, a DECIMAL
 * group above its digits, a DATETIME2 below year 0; bytes that do not frame or run past
 * ``end``; names that are not distinct; a float or double key column of an update, whose
 * before_key compares values (NaN != NaN, 0.0 == -0.0) where text would not). The caller
 * then decodes the rows and renders them the usual way, which raises what it raises.
 */

enum {
    R_I8 = 1, R_U8, R_I16, R_U16, R_I24, R_U24, R_I32, R_U32, R_I64, R_U64,
    R_FLOAT, R_DOUBLE, R_DECIMAL, R_YEAR, R_DATE, R_DATETIME2, R_TIMESTAMP2, R_TIMESTAMP,
    R_TIME2, R_BIT, R_BYTES, R_BINARY, R_UTF8, R_ASCII, R_LATIN1, R_CHARMAP, R_MAX
};
static const char *const RAW_KIND_NAMES[R_MAX] = {
    NULL, "i8", "u8", "i16", "u16", "i24", "u24", "i32", "u32", "i64", "u64",
    "float", "double", "decimal", "year", "date", "datetime2", "timestamp2", "timestamp",
    "time2", "bit", "bytes", "binary", "utf8", "ascii", "latin1", "charmap",
};

#define RAW_FALLBACK 1

typedef struct {
    uint8_t kind;
    int width;        /* fixed bytes (>= 0), or -(length prefix bytes) */
    int32_t a, b;     /* as rowimage.c's Col */
    uint32_t *map;    /* R_CHARMAP: 256 code points */
} RCol;

typedef struct {
    PyObject_HEAD
    Py_ssize_t n, nb;
    RCol cols[1];
} RowShape;

static void RowShape_dealloc(RowShape *self) {
    for (Py_ssize_t i = 0; i < self->n; i++) PyMem_Free(self->cols[i].map);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static const int R_DIG2BYTES[10] = {0, 1, 1, 2, 2, 3, 3, 4, 4, 4};

static int rcol_width(const RCol *c) {
    switch (c->kind) {
    case R_I8: case R_U8: case R_YEAR: return 1;
    case R_I16: case R_U16: return 2;
    case R_I24: case R_U24: case R_DATE: return 3;
    case R_I32: case R_U32: case R_FLOAT: case R_TIMESTAMP: return 4;
    case R_I64: case R_U64: case R_DOUBLE: return 8;
    case R_DATETIME2: return 5 + (c->a + 1) / 2;
    case R_TIMESTAMP2: return 4 + (c->a + 1) / 2;
    case R_TIME2: return 3 + (c->a + 1) / 2;
    case R_BIT: return c->a;
    case R_DECIMAL: {
        int intg = c->a - c->b;
        return intg / 9 * 4 + R_DIG2BYTES[intg % 9] + c->b / 9 * 4 + R_DIG2BYTES[c->b % 9];
    }
    default: return -c->a;
    }
}

static int rcol_set(RCol *c, PyObject *spec) {
    const char *name;
    int a, b;
    PyObject *obj;
    if (!PyTuple_Check(spec) ||
        !PyArg_ParseTuple(spec, "siiO;a column spec is (kind, a, b, obj)", &name, &a, &b, &obj))
        return -1;
    int kind = 0;
    for (int k = 1; k < R_MAX; k++)
        if (strcmp(name, RAW_KIND_NAMES[k]) == 0) kind = k;
    if (kind == 0) {
        PyErr_Format(PyExc_ValueError, "column kind %s is not rendered from bytes", name);
        return -1;
    }
    int bad = 0;
    switch (kind) {
    case R_DECIMAL: bad = !(0 < a && a <= 65 && 0 <= b && b <= a && b <= 30); break;
    case R_DATETIME2: case R_TIMESTAMP2: case R_TIME2: bad = a < 0 || a > 6; break;
    case R_BIT: bad = a < 0 || a > 8; break;
    case R_BYTES: case R_BINARY: case R_UTF8: case R_ASCII: case R_LATIN1: case R_CHARMAP:
        bad = a < 1 || a > 4 || b < 0 || b > 65535;
        break;
    }
    if (bad) {
        PyErr_Format(PyExc_ValueError, "column kind %s with parameters %d, %d", name, a, b);
        return -1;
    }
    c->kind = (uint8_t)kind;
    c->a = a;
    c->b = b;
    if (kind == R_CHARMAP) {
        if (!PyUnicode_Check(obj) || PyUnicode_GET_LENGTH(obj) != 256) {
            PyErr_SetString(PyExc_TypeError, "a charmap column needs a 256-character table");
            return -1;
        }
        c->map = PyMem_Malloc(256 * sizeof(uint32_t));
        if (c->map == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        for (int i = 0; i < 256; i++) {
            Py_UCS4 ch = PyUnicode_READ_CHAR(obj, i);
            if (ch >= 0xD800 && ch <= 0xDFFF) { /* a str orjson would refuse */
                PyErr_SetString(PyExc_ValueError, "a charmap table holding a surrogate");
                return -1;
            }
            c->map[i] = ch;
        }
    }
    c->width = rcol_width(c);
    return 0;
}

static PyTypeObject RowShapeType;

static PyObject *RowShape_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    PyObject *specs;
    if (!PyArg_ParseTuple(args, "O!:RowShape", &PyTuple_Type, &specs)) return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(specs);
    if (n == 0) {
        PyErr_SetString(PyExc_ValueError, "a row shape of no columns");
        return NULL;
    }
    RowShape *self = (RowShape *)type->tp_alloc(type, n);
    if (self == NULL) return NULL;
    self->n = 0;
    self->nb = (n + 7) / 8;
    for (Py_ssize_t i = 0; i < n; i++) {
        memset(&self->cols[i], 0, sizeof(RCol));
        self->n = i + 1;
        if (rcol_set(&self->cols[i], PyTuple_GET_ITEM(specs, i)) < 0) {
            Py_DECREF(self);
            return NULL;
        }
    }
    return (PyObject *)self;
}

static PyObject *RowShape_columns(RowShape *self, void *closure) {
    return PyLong_FromSsize_t(self->n);
}

static PyGetSetDef RowShape_getset[] = {
    {"columns", (getter)RowShape_columns, NULL, "columns in the image", NULL},
    {NULL},
};

static PyTypeObject RowShapeType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "headwater._native._imagejson.RowShape",
    .tp_basicsize = sizeof(RowShape) - sizeof(RCol),
    .tp_itemsize = sizeof(RCol),
    .tp_dealloc = (destructor)RowShape_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "RowShape(specs): the column kinds of one row image, rendered from bytes",
    .tp_new = RowShape_new,
    .tp_getset = RowShape_getset,
};

/* ---- values from bytes ------------------------------------------------------------------ */

static inline uint64_t r_le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}
static inline uint64_t r_be(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v = v << 8 | p[i];
    return v;
}

/* At least ``width`` digits (snprintf's %0<width>d of a non-negative number). */
static inline char *r_digits(char *o, unsigned long long v, int width) {
    char tmp[24];
    int i = sizeof tmp;
    do {
        tmp[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while ((int)sizeof tmp - i < width) tmp[--i] = '0';
    memcpy(o, tmp + i, sizeof tmp - i);
    return o + (sizeof tmp - i);
}

/* Strict UTF-8 as CPython's decoder takes it (no surrogates, no overlongs, <= U+10FFFF). */
static int utf8_valid(const uint8_t *s, Py_ssize_t n) {
    Py_ssize_t i = 0;
    while (i < n) {
        while (i + 8 <= n) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (w & 0x8080808080808080ULL) break;
            i += 8;
        }
        if (i >= n) break;
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        int more;
        uint8_t lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) more = 1;
        else if (c == 0xE0) { more = 2; lo = 0xA0; }
        else if (c >= 0xE1 && c <= 0xEC) more = 2;
        else if (c == 0xED) { more = 2; hi = 0x9F; }
        else if (c >= 0xEE && c <= 0xEF) more = 2;
        else if (c == 0xF0) { more = 3; lo = 0x90; }
        else if (c >= 0xF1 && c <= 0xF3) more = 3;
        else if (c == 0xF4) { more = 3; hi = 0x8F; }
        else return 0;
        if (i + more >= n) return 0; /* cut short */
        if (s[i + 1] < lo || s[i + 1] > hi) return 0;
        for (int k = 2; k <= more; k++)
            if (s[i + k] < 0x80 || s[i + k] > 0xBF) return 0;
        i += more + 1;
    }
    return 1;
}

/* A JSON string of code points (latin1 / charmap bytes), escaped as put_string does. */
static int put_mapped(Buf *b, const uint8_t *s, Py_ssize_t n, const uint32_t *map) {
    RESERVE(b, n * 6 + 2);
    char *o = b->p + b->len;
    *o++ = '"';
    for (Py_ssize_t i = 0; i < n; i++) {
        uint32_t c = map ? map[s[i]] : s[i];
        if (c >= 0x80) {
            if (c < 0x800) {
                *o++ = (char)(0xC0 | c >> 6);
            } else if (c < 0x10000) {
                *o++ = (char)(0xE0 | c >> 12);
                *o++ = (char)(0x80 | (c >> 6 & 63));
            } else {
                *o++ = (char)(0xF0 | c >> 18);
                *o++ = (char)(0x80 | (c >> 12 & 63));
                *o++ = (char)(0x80 | (c >> 6 & 63));
            }
            *o++ = (char)(0x80 | (c & 63));
            b->nonascii = 1;
            continue;
        }
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

/* NEWDECIMAL (strings/decimal.cc bin2decimal; rowimage.c decode_decimal) as json_default
 * writes the Decimal: the integer digits without leading zeros ("0" if none), then "."
 * and the ``scale`` fraction digits; "-" when negative and not zero. */
static int put_raw_decimal(Buf *b, const RCol *c, const uint8_t *p) {
    int precision = c->a, scale = c->b, intg = precision - scale;
    int sizes[16], ndig[16], ng = 0;
    if (intg % 9) { sizes[ng] = R_DIG2BYTES[intg % 9]; ndig[ng++] = intg % 9; }
    for (int i = 0; i < intg / 9; i++) { sizes[ng] = 4; ndig[ng++] = 9; }
    for (int i = 0; i < scale / 9; i++) { sizes[ng] = 4; ndig[ng++] = 9; }
    if (scale % 9) { sizes[ng] = R_DIG2BYTES[scale % 9]; ndig[ng++] = scale % 9; }
    static const uint32_t pow10[10] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000,
                                       100000000, 1000000000};
    int negative = !(p[0] & 0x80);
    uint8_t mask = negative ? 0xFF : 0;
    char text[80], *t = text;
    for (int g = 0; g < ng; g++) {
        uint32_t v = 0;
        for (int k = 0; k < sizes[g]; k++) {
            uint8_t byte = (uint8_t)(*p++ ^ mask);
            if (g == 0 && k == 0) byte &= 0x7F;
            v = v << 8 | byte;
        }
        if (v >= pow10[ndig[g]]) return RAW_FALLBACK;
        for (int k = ndig[g] - 1; k >= 0; k--) {
            t[k] = (char)('0' + v % 10);
            v /= 10;
        }
        t += ndig[g];
    }
    int zero = 1;
    for (char *q = text; q < t; q++) zero &= *q == '0';
    int skip = 0;
    while (skip < intg - 1 && text[skip] == '0') skip++;
    RESERVE(b, 84);
    char *o = b->p + b->len;
    *o++ = '"';
    if (negative && !zero) *o++ = '-';
    if (intg == 0) *o++ = '0';
    memcpy(o, text + skip, (size_t)(intg - skip));
    o += intg - skip;
    if (scale) {
        *o++ = '.';
        memcpy(o, text + intg, (size_t)scale);
        o += scale;
    }
    *o++ = '"';
    b->len = o - b->p;
    return 0;
}

static int r_leap(int y) { return y % 4 == 0 && (y % 100 != 0 || y % 400 == 0); }
static int r_valid_date(int y, int m, int d) {
    static const int dim[13] = {0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    return y >= 1 && y <= 9999 && m >= 1 && m <= 12 && d >= 1 &&
           d <= (m == 2 && r_leap(y) ? 29 : dim[m]);
}

/* "YYYY-MM-DDTHH:MM:SS[.ffffff][+00:00]" of a valid datetime (put_datetime's layout). */
static int put_iso(Buf *b, int y, int mo, int d, int h, int mi, int s, int us, int utc) {
    RESERVE(b, 48);
    char *o = b->p + b->len;
    *o++ = '"';
    o = r_digits(o, (unsigned)y, 4);
    *o++ = '-';
    o = r_digits(o, (unsigned)mo, 2);
    *o++ = '-';
    o = r_digits(o, (unsigned)d, 2);
    *o++ = 'T';
    o = r_digits(o, (unsigned)h, 2);
    *o++ = ':';
    o = r_digits(o, (unsigned)mi, 2);
    *o++ = ':';
    o = r_digits(o, (unsigned)s, 2);
    if (us) {
        *o++ = '.';
        o = r_digits(o, (unsigned)us, 6);
    }
    if (utc) {
        memcpy(o, "+00:00", 6);
        o += 6;
    }
    *o++ = '"';
    b->len = o - b->p;
    return 0;
}

/* datetime.fromtimestamp(sec + us / 1e6, UTC) (rowimage.c utc_datetime), as JSON. */
static int put_utc(Buf *b, int64_t sec, int us) {
    int64_t days = sec / 86400, rem = sec % 86400;
    int64_t z = days + 719468, era = z / 146097, doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100), mp = (5 * doy + 2) / 153;
    int d = (int)(doy - (153 * mp + 2) / 5 + 1), m = (int)(mp < 10 ? mp + 3 : mp - 9);
    int y = (int)(yoe + era * 400 + (m <= 2));
    return put_iso(b, y, m, d, (int)(rem / 3600), (int)(rem / 60 % 60), (int)(rem % 60), us, 1);
}

/* rowimage.c utc_datetime_f: fromtimestamp(<float>, UTC)'s rounding. */
static int put_utc_f(Buf *b, double d) {
    double intpart;
    volatile double frac = modf(d, &intpart);
    frac *= 1e6;
    double r = round(frac);
    if (fabs(frac - r) == 0.5) r = 2.0 * round(frac / 2.0);
    frac = r;
    if (frac >= 1e6) { frac -= 1e6; intpart += 1.0; }
    return put_utc(b, (int64_t)intpart, (int)frac);
}

static int put_zero_ts(Buf *b, int fsp) {
    static const char zero[] = "\"0000-00-00 00:00:00.000000";
    if (put(b, zero, fsp ? 21 + fsp : 20) < 0) return -1;
    return putc1(b, '"');
}

/* The text of one non-NULL value at *pp (``lim``: the end of the rows). 0, RAW_FALLBACK or
 * -1 (a Python error). */
static int put_raw_value(Buf *b, const RCol *c, const uint8_t *buf, Py_ssize_t lim,
                         Py_ssize_t *pp) {
    Py_ssize_t p = *pp;
    const uint8_t *v = buf + p;
    int w = c->width;
    if (w >= 0) {
        if (p + w > lim) return RAW_FALLBACK;
        *pp = p + w;
    }
    switch (c->kind) {
    case R_I8: { int8_t x = (int8_t)v[0]; return put_u64(b, x < 0 ? -(long long)x : x, x < 0); }
    case R_U8: return put_u64(b, v[0], 0);
    case R_I16: {
        int16_t x = (int16_t)(v[0] | v[1] << 8);
        return put_u64(b, x < 0 ? -(long long)x : x, x < 0);
    }
    case R_U16: return put_u64(b, (unsigned)(v[0] | v[1] << 8), 0);
    case R_I24: {
        int32_t x = (int32_t)(v[0] | v[1] << 8 | (uint32_t)v[2] << 16);
        if (x & 0x800000) x -= 0x1000000;
        return put_u64(b, x < 0 ? -(long long)x : x, x < 0);
    }
    case R_U24: return put_u64(b, v[0] | v[1] << 8 | (uint32_t)v[2] << 16, 0);
    case R_I32: {
        int32_t x;
        memcpy(&x, v, 4);
        return put_u64(b, x < 0 ? -(long long)x : x, x < 0);
    }
    case R_U32: { uint32_t x; memcpy(&x, v, 4); return put_u64(b, x, 0); }
    case R_I64: {
        int64_t x;
        memcpy(&x, v, 8);
        return put_u64(b, x < 0 ? 0ULL - (unsigned long long)x : (unsigned long long)x, x < 0);
    }
    case R_U64: { uint64_t x; memcpy(&x, v, 8); return put_u64(b, x, 0); }
    case R_FLOAT: { float x; memcpy(&x, v, 4); return put_float(b, (double)x); }
    case R_DOUBLE: { double x; memcpy(&x, v, 8); return put_float(b, x); }
    case R_DECIMAL: return put_raw_decimal(b, c, v);
    case R_YEAR: return put_u64(b, v[0] ? v[0] + 1900u : 0, 0);
    case R_BIT: return put_u64(b, r_be(v, c->a), 0);
    case R_DATE: {
        uint32_t n = v[0] | v[1] << 8 | (uint32_t)v[2] << 16;
        RESERVE(b, 24);
        char *o = b->p + b->len;
        *o++ = '"';
        o = r_digits(o, n >> 9, 4);
        *o++ = '-';
        o = r_digits(o, (n >> 5) & 15, 2);
        *o++ = '-';
        o = r_digits(o, n & 31, 2);
        *o++ = '"';
        b->len = o - b->p;
        return 0;
    }
    case R_DATETIME2: {
        int fsp = c->a;
        int64_t raw, us;
        if (fsp >= 5) {
            uint64_t x = r_be(v, 8);
            raw = (int64_t)(x >> 24);
            us = (int64_t)(x & 0xFFFFFF);
        } else {
            raw = (int64_t)v[0] << 32 | (int64_t)r_be(v + 1, 4);
            us = fsp == 0 ? 0 : fsp <= 2 ? (int64_t)v[5] * 10000 : (int64_t)r_be(v + 5, 2) * 100;
        }
        int64_t n = raw - 0x8000000000LL;
        if (n < 0) return RAW_FALLBACK;
        int64_t ymd = n >> 17, ym = ymd >> 5;
        int y = (int)(ym / 13), mo = (int)(ym % 13), d = (int)(ymd & 31);
        int h = (int)((n >> 12) & 31), mi = (int)((n >> 6) & 63), s = (int)(n & 63);
        if (r_valid_date(y, mo, d) && h < 24 && mi < 60 && s < 60 && us < 1000000)
            return put_iso(b, y, mo, d, h, mi, s, (int)us, 0);
        /* _temporal.datetime2_text (rowimage.c datetime2_text) */
        RESERVE(b, 64);
        char *o = b->p + b->len;
        *o++ = '"';
        o = r_digits(o, (unsigned long long)y, 4);
        *o++ = '-';
        o = r_digits(o, (unsigned)mo, 2);
        *o++ = '-';
        o = r_digits(o, (unsigned)d, 2);
        *o++ = ' ';
        o = r_digits(o, (unsigned)h, 2);
        *o++ = ':';
        o = r_digits(o, (unsigned)mi, 2);
        *o++ = ':';
        o = r_digits(o, (unsigned)s, 2);
        if (fsp) {
            char frac[24];
            char *f = r_digits(frac, (unsigned long long)us, 6);
            *o++ = '.';
            for (int i = 0; i < fsp && frac + i < f; i++) *o++ = frac[i];
        }
        *o++ = '"';
        b->len = o - b->p;
        return 0;
    }
    case R_TIMESTAMP2: {
        int fsp = c->a;
        uint32_t s = (uint32_t)r_be(v, 4), frac;
        double per;
        if (fsp == 0) { frac = 0; per = 1; }
        else if (fsp <= 2) { frac = v[4]; per = 100; }
        else if (fsp <= 4) { frac = (uint32_t)r_be(v + 4, 2); per = 10000; }
        else { frac = (uint32_t)r_be(v + 4, 3); per = 1000000; }
        if (frac) {
            volatile double q = (double)frac / per;
            return put_utc_f(b, (double)s + q);
        }
        return s ? put_utc(b, s, 0) : put_zero_ts(b, fsp);
    }
    case R_TIMESTAMP: {
        uint32_t s;
        memcpy(&s, v, 4);
        return s ? put_utc(b, s, 0) : put_zero_ts(b, 0);
    }
    case R_TIME2: {
        /* _temporal.time2_from_parts (rowimage.c), then format_time of the timedelta */
        int fsp = c->a;
        int64_t packed;
        if (fsp >= 5) {
            packed = (int64_t)r_be(v, 6) - 0x800000000000LL;
        } else {
            int64_t ip = (int64_t)r_be(v, 3) - 0x800000;
            if (fsp >= 3) {
                int64_t frac = (int64_t)r_be(v + 3, 2);
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
        /* total >= 0: the timedelta is -total or total; format_time takes its sign */
        long long seconds = total / 1000000;
        int micro = (int)(total % 1000000);
        long long hours = seconds / 3600;
        RESERVE(b, 48);
        char *o = b->p + b->len;
        *o++ = '"';
        if (neg && total) *o++ = '-';
        o = r_digits(o, (unsigned long long)hours, 2);
        *o++ = ':';
        o = r_digits(o, (unsigned)(seconds % 3600 / 60), 2);
        *o++ = ':';
        o = r_digits(o, (unsigned)(seconds % 60), 2);
        if (micro) {
            *o++ = '.';
            o = r_digits(o, (unsigned)micro, 6);
        }
        *o++ = '"';
        b->len = o - b->p;
        return 0;
    }
    default: break;
    }
    /* length-prefixed */
    int k = c->a;
    if (p + k > lim) return RAW_FALLBACK;
    Py_ssize_t n = (Py_ssize_t)r_le(v, k), start = p + k;
    if (n > lim - start) return RAW_FALLBACK;
    *pp = start + n;
    const uint8_t *s = buf + start;
    switch (c->kind) {
    case R_BYTES: return put_base64(b, s, n);
    case R_BINARY: {
        if (n >= c->b) return put_base64(b, s, n);
        unsigned char *padded = PyMem_Malloc((size_t)c->b);
        if (padded == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        memcpy(padded, s, (size_t)n);
        memset(padded + n, 0, (size_t)(c->b - n));
        int r = put_base64(b, padded, c->b);
        PyMem_Free(padded);
        return r;
    }
    case R_UTF8:
        if (!utf8_valid(s, n)) return RAW_FALLBACK;
        for (Py_ssize_t i = 0; i < n; i++)
            if (s[i] >= 0x80) { b->nonascii = 1; break; }
        return put_string(b, (const char *)s, n);
    case R_ASCII:
        for (Py_ssize_t i = 0; i < n; i++)
            if (s[i] >= 0x80) return RAW_FALLBACK;
        return put_string(b, (const char *)s, n);
    case R_LATIN1: return put_mapped(b, s, n, NULL);
    case R_CHARMAP: return put_mapped(b, s, n, c->map);
    }
    return RAW_FALLBACK;
}

/* One image at *pp: each column's text into ``vals`` (emptied first), column j's at
 * [at[j], at[j + 1]) ("null" for NULL). 0, RAW_FALLBACK or -1. */
static int raw_values(const RowShape *sh, const uint8_t *buf, Py_ssize_t lim, Py_ssize_t *pp,
                      Buf *vals, Py_ssize_t *at) {
    Py_ssize_t p = *pp, nb = sh->nb;
    if (p + nb > lim) return RAW_FALLBACK;
    const uint8_t *nulls = buf + p;
    p += nb;
    vals->len = 0;
    for (Py_ssize_t j = 0; j < sh->n; j++) {
        at[j] = vals->len;
        int r = nulls[j >> 3] >> (j & 7) & 1 ? put(vals, "null", 4)
                                              : put_raw_value(vals, &sh->cols[j], buf, lim, &p);
        if (r) return r;
    }
    at[sh->n] = vals->len;
    *pp = p;
    return 0;
}

/* Past one image without rendering it. 0 or RAW_FALLBACK. */
static int raw_skip(const RowShape *sh, const uint8_t *buf, Py_ssize_t lim, Py_ssize_t *pp) {
    Py_ssize_t p = *pp, nb = sh->nb;
    if (p + nb > lim) return RAW_FALLBACK;
    const uint8_t *nulls = buf + p;
    p += nb;
    for (Py_ssize_t j = 0; j < sh->n; j++) {
        if (nulls[j >> 3] >> (j & 7) & 1) continue;
        int w = sh->cols[j].width;
        if (w >= 0) {
            p += w;
        } else {
            if (p - w > lim) return RAW_FALLBACK;
            p += -w + (Py_ssize_t)r_le(buf + p, -w);
        }
        if (p > lim) return RAW_FALLBACK;
    }
    *pp = p;
    return 0;
}

/* Whether a Keys' names all encode (else render_image's escaped mode: every key of the
 * image in its printable form; the values here render alike in both modes). */
static int keys_escaped(const Keys *k) {
    for (Py_ssize_t i = 0; i < k->n; i++)
        if (k->plain[i] == NULL) return 1;
    return 0;
}

/* ``{"name":value,...}`` of one image's rendered values, written in place at the end of
 * column ``col``'s data (then its offset and validity bit: strcol_push without a copy). */
static int raw_emit(Out *o, int col, const Keys *k, int esc, const Buf *vals,
                    const Py_ssize_t *at, Py_ssize_t n, int picked) {
    StrCol *c = &o->cols->col[col];
    Buf *img = &c->data;
    Py_ssize_t start = img->len;
    int r = strcol_room(c) < 0 || putc1(img, '{') < 0 ? -1 : 0;
    for (Py_ssize_t i = 0; r == 0 && i < k->n; i++) {
        PyObject *key = esc ? k->escaped[i] : k->plain[i];
        Py_ssize_t j = picked ? k->index[i] : i;
        if ((i && putc1(img, ',') < 0) ||
            put(img, PyBytes_AS_STRING(key), PyBytes_GET_SIZE(key)) < 0)
            r = -1;
        else if (j >= n)
            r = RAW_FALLBACK;
        else if (j < 0 ? put(img, "null", 4) < 0
                       : put(img, vals->p + at[j], at[j + 1] - at[j]) < 0)
            r = -1;
    }
    if (r == 0 && putc1(img, '}') < 0) r = -1;
    if (r == 0 && img->len > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError,
                        "the JSON of a record batch's image column exceeds 2 GiB");
        r = -1;
    }
    if (r) {
        img->len = start;
        return r;
    }
    c->valid[c->n >> 3] |= (uint8_t)(1u << (c->n & 7));
    c->offsets[++c->n] = (int32_t)img->len;
    return 0;
}

static int is_float(const RowShape *sh, Py_ssize_t j) {
    return j >= 0 && j < sh->n && (sh->cols[j].kind == R_FLOAT || sh->cols[j].kind == R_DOUBLE);
}

typedef struct {
    const RowShape *image, *before; /* insert/delete: image; update: after, before */
    const uint8_t *buf;
    Py_ssize_t pos, lim, lo, hi;
    int update, insert;
    int esc[4]; /* per Keys of the Shape: escaped keys */
} RawJob;

static int raw_rows(const RawJob *job, const Shape *sh, Out *o) {
    Py_ssize_t p = job->pos;
    const RowShape *im = job->image, *bi = job->before;
    Py_ssize_t an = im->n, bn = bi ? bi->n : 0;
    Buf vals = {0}, bvals = {0};
    Py_ssize_t *at = PyMem_Malloc((size_t)(an + bn + 2) * sizeof(Py_ssize_t));
    int rc = at == NULL ? (PyErr_NoMemory(), -1) : 0;
    Py_ssize_t *bat = at == NULL ? NULL : at + an + 1;
    for (Py_ssize_t r = 0; rc == 0 && r < job->hi; r++) {
        if (p >= job->lim) {
            rc = RAW_FALLBACK; /* fewer rows than asked */
            break;
        }
        if (r < job->lo) {
            if (bi != NULL) rc = raw_skip(bi, job->buf, job->lim, &p);
            if (rc == 0) rc = raw_skip(im, job->buf, job->lim, &p);
            continue;
        }
        if (!job->update) {
            rc = raw_values(im, job->buf, job->lim, &p, &vals, at);
            if (rc == 0)
                rc = sh->has_picks ? raw_emit(o, KEY, sh->picks, job->esc[2], &vals, at, an, 1)
                                   : emit_none(o, KEY);
            if (rc == 0)
                rc = raw_emit(o, job->insert ? AFTER : BEFORE, sh->names, job->esc[0],
                              &vals, at, an, 0);
            if (rc == 0) rc = emit_none(o, job->insert ? BEFORE : AFTER);
            if (rc == 0) rc = emit_none(o, OLD_KEY);
            continue;
        }
        rc = raw_values(bi, job->buf, job->lim, &p, &bvals, bat);
        if (rc == 0) rc = raw_values(im, job->buf, job->lim, &p, &vals, at);
        if (rc == 0) rc = raw_emit(o, BEFORE, sh->bnames, job->esc[1], &bvals, bat, bn, 0);
        if (rc == 0) rc = raw_emit(o, AFTER, sh->names, job->esc[0], &vals, at, an, 0);
        if (rc || !sh->has_picks) {
            if (rc == 0) rc = emit_none(o, KEY);
            if (rc == 0) rc = emit_none(o, OLD_KEY);
            continue;
        }
        rc = raw_emit(o, KEY, sh->picks, job->esc[2], &vals, at, an, 1);
        if (rc) continue;
        /* before_key: set when every key column is in the before image and the values
         * differ (partitions._block_json); equal text is equal value for these kinds
         * (floats, where it is not, were refused up front). */
        int same = 1;
        if (sh->has_old && sh->picks->n) {
            for (Py_ssize_t i = 0; same && i < sh->picks->n; i++) {
                Py_ssize_t ja = sh->picks->index[i], jb = sh->old_picks->index[i];
                const char *x = ja < 0 ? "null" : vals.p + at[ja];
                Py_ssize_t nx = ja < 0 ? 4 : at[ja + 1] - at[ja];
                const char *y = jb < 0 ? "null" : bvals.p + bat[jb];
                Py_ssize_t ny = jb < 0 ? 4 : bat[jb + 1] - bat[jb];
                same = nx == ny && memcmp(x, y, (size_t)nx) == 0;
            }
        }
        rc = same ? emit_none(o, OLD_KEY)
                  : raw_emit(o, OLD_KEY, sh->old_picks, job->esc[3], &bvals, bat, bn, 1);
    }
    PyMem_Free(vals.p);
    PyMem_Free(bvals.p);
    PyMem_Free(at);
    return rc;
}

static int shape_arg(PyObject *obj, const RowShape **out) {
    if (obj == Py_None) {
        *out = NULL;
        return 1;
    }
    if (!Py_IS_TYPE(obj, &RowShapeType)) {
        PyErr_SetString(PyExc_TypeError, "render_raw: shapes must be RowShape or None");
        return 0;
    }
    *out = (const RowShape *)obj;
    return 1;
}

/* render_raw(op, before_shape, after_shape, body, pos, end, lo, hi, before_names,
 * after_names, picks, old_picks, out) -> bool (see the .pyi). */
static PyObject *render_raw(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 13) {
        PyErr_SetString(PyExc_TypeError, "render_raw takes 13 arguments");
        return NULL;
    }
    PyObject *op = args[0], *body = args[3], *bn = args[8], *an = args[9], *picks = args[10],
             *old = args[11], *out = args[12];
    const RowShape *bshape, *ashape;
    if (!shape_arg(args[1], &bshape) || !shape_arg(args[2], &ashape)) return NULL;
    if (!PyUnicode_Check(op) || !PyBytes_CheckExact(body)) {
        PyErr_SetString(PyExc_TypeError, "render_raw: op must be a str and body bytes");
        return NULL;
    }
    if (!Py_IS_TYPE(out, &JsonColumnsType)) Py_RETURN_FALSE; /* lists: render_block's */
    Py_ssize_t v[4];
    for (int i = 0; i < 4; i++) {
        v[i] = PyLong_AsSsize_t(args[4 + i]);
        if (v[i] == -1 && PyErr_Occurred()) return NULL;
    }
    RawJob job = {0};
    job.buf = (const uint8_t *)PyBytes_AS_STRING(body);
    job.pos = v[0];
    job.lim = v[1];
    job.lo = v[2];
    job.hi = v[3];
    job.update = PyUnicode_CompareWithASCIIString(op, "update") == 0;
    job.insert = PyUnicode_CompareWithASCIIString(op, "insert") == 0;
    int del = PyUnicode_CompareWithASCIIString(op, "delete") == 0;
    job.image = job.insert || job.update ? ashape : bshape;
    job.before = job.update ? bshape : NULL;
    if ((!job.update && !job.insert && !del) || job.image == NULL ||
        (job.update && job.before == NULL) || job.pos < 0 ||
        job.lim > PyBytes_GET_SIZE(body) || job.lo < 0 || job.hi < job.lo)
        Py_RETURN_FALSE;
    if (job.lo == job.hi) Py_RETURN_TRUE;

    Shape sh = {&no_keys, &no_keys, &no_keys, &no_keys, picks != Py_None,
                job.update && old != Py_None};
    PyObject *caps[4] = {NULL, NULL, NULL, NULL};
    int ok = 1;
    caps[0] = cached_keys(0, job.insert || job.update ? an : bn, 0, &sh.names, &ok);
    if (ok == 1 && job.update) caps[1] = cached_keys(1, bn, 0, &sh.bnames, &ok);
    if (ok == 1 && sh.has_picks) caps[2] = cached_keys(2, picks, 1, &sh.picks, &ok);
    if (ok == 1 && sh.has_old) caps[3] = cached_keys(3, old, 1, &sh.old_picks, &ok);
    int rc = ok == 1 ? 0 : ok < 0 ? -1 : RAW_FALLBACK;
    if (rc == 0 && (sh.names->n != job.image->n ||
                    (job.update && sh.bnames->n != job.before->n) ||
                    (sh.has_old && sh.old_picks->n != sh.picks->n)))
        rc = RAW_FALLBACK; /* names that are not the shape's: the decoded path says */
    for (Py_ssize_t i = 0; rc == 0 && sh.has_old && i < sh.picks->n; i++)
        if (is_float(job.image, sh.picks->index[i]) || is_float(job.before, sh.old_picks->index[i]))
            rc = RAW_FALLBACK;
    Out o = {{NULL, NULL, NULL, NULL}, (JsonColumns *)out};
    Py_ssize_t marks[4], nulls[4];
    for (int i = 0; i < 4; i++) {
        marks[i] = o.cols->col[i].n;
        nulls[i] = o.cols->col[i].nulls;
    }
    if (rc == 0) {
        job.esc[0] = keys_escaped(sh.names);
        job.esc[1] = keys_escaped(sh.bnames);
        job.esc[2] = keys_escaped(sh.picks);
        job.esc[3] = keys_escaped(sh.old_picks);
        rc = raw_rows(&job, &sh, &o);
    }
    for (int i = 0; i < 4; i++) Py_XDECREF(caps[i]);
    if (rc == 0) Py_RETURN_TRUE;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    for (int i = 0; i < 4; i++) strcol_truncate(&o.cols->col[i], marks[i], nulls[i]);
    PyErr_Restore(type, value, tb);
    if (rc < 0) return NULL;
    Py_RETURN_FALSE;
}
