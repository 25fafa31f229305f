/*
 * headwater._native._survivors: the surviving after images of a key-first replay
 * (headwater/spark/asofscan.py) decoded in C straight into Arrow buffers, no Python value
 * per row or per value.
 *
 * The values are those of the Python route they replace, bit for bit: the row decoder
 * (headwater/binlog/codec.py, and _native/rowimage.c which gives the same values) builds
 * a Python value per column, and headwater/spark/asofread.py ``_physical`` converts a
 * batch of them to the column's Arrow type (``_v``) when every value has the Python type
 * of that column type and fits. Only such pairs are done here; the caller's plan holds
 * every column of the replay's definition to one of them:
 *
 *   image column kind (_columns.native_spec)          Arrow column (views.spark_type)
 *   i8 u8 i16 u16 i24 u24 i32 u32 i64 u64, year       int8/16/32/64, the value range-checked
 *   float, double                                     float64 (a FLOAT's float widened)
 *   decimal(p, s), p <= 38                            decimal128(P, S), S == s, P >= p
 *   utf8, ascii, latin1, charmap text                 string (UTF-8)
 *
 * (charmap: a single-byte charset read through a table of 256 characters, MySQL's latin1
 * (cp1252 with its own 0x81, 0x8D, 0x8F, 0x90, 0x9D; strings/ctype-latin1.cc) as
 * _columns._mysql_latin1 gives it.)
 *
 * Formats (as rowimage.c, from MySQL sql/rpl_record.cc unpack_row, sql/field.cc
 * Field_*::pack, strings/decimal.cc bin2decimal): a null bitmap of (present + 7) / 8
 * bytes, bit i for present column i, then each non-NULL value; integers little endian of
 * 1, 2, 3, 4 or 8 bytes (signedness from the table map's metadata), YEAR one byte
 * (0, or the year - 1900), FLOAT/DOUBLE IEEE little endian, NEWDECIMAL groups of nine
 * digits in 4 big-endian bytes (partial leading/trailing groups in DIG2BYTES bytes; the
 * first byte's top bit set for positive values, every byte inverted for negative ones),
 * text as a 1-4 byte little-endian length and its bytes.
 *
 * A value this module cannot type the way the Python route would (an integer out of the
 * Arrow type's range, text that is not valid in its charset (the decoder keeps it with
 * surrogate escapes, which Arrow refuses), a DECIMAL group above its digits or a value
 * beyond the column's precision) makes ``add`` undo the call's rows and return False:
 * the caller decodes those images the Python way, which types the batch as it always
 * did (as text, for the JVM). Nothing is guessed.
 *
 * Errors: an image running past the buffer raises ValueError("row image runs past the
 * end of the event") (the caller raises TruncatedError).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static const char TRUNC[] = "row image runs past the end of the event";

/* image column kinds (the names of _columns.native_spec) */
enum {
    S_NONE = 0, S_I8, S_U8, S_I16, S_U16, S_I24, S_U24, S_I32, S_U32, S_I64, S_U64, S_YEAR,
    S_FLOAT, S_DOUBLE, S_DECIMAL, S_UTF8, S_ASCII, S_LATIN1, S_CHARMAP, S_MAX
};
static const char *const SOURCE_NAMES[S_MAX] = {
    "", "i8", "u8", "i16", "u16", "i24", "u24", "i32", "u32", "i64", "u64", "year",
    "float", "double", "decimal", "utf8", "ascii", "latin1", "charmap",
};
/* Arrow column kinds */
enum { T_INT8 = 0, T_INT16, T_INT32, T_INT64, T_FLOAT64, T_DECIMAL, T_STRING, T_MAX };
static const char *const TARGET_NAMES[T_MAX] = {
    "int8", "int16", "int32", "int64", "float64", "decimal", "string",
};
static const int TARGET_WIDTH[T_MAX] = {1, 2, 4, 8, 8, 16, 4};

static int name_index(PyObject *name, const char *const *names, int n) {
    const char *s = PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : NULL;
    if (s == NULL) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "a kind is a str");
        return -1;
    }
    for (int i = 0; i < n; i++)
        if (strcmp(s, names[i]) == 0) return i;
    PyErr_Format(PyExc_ValueError, "unknown kind %R", name);
    return -1;
}

static inline uint64_t le_n(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* ---- one Arrow column being built ---------------------------------------------------- */

typedef struct {
    int kind;            /* T_* */
    int precision, scale;
    Py_ssize_t n, cap, nulls;
    uint8_t *valid;      /* bit i (LSB first): row i is not null */
    uint8_t *data;       /* fixed values, or the string bytes */
    size_t data_len, data_cap;
    int32_t *offsets;    /* strings: n + 1 */
} Col;

static int col_reserve(Col *c, Py_ssize_t rows) {
    if (c->n + rows <= c->cap) return 0;
    Py_ssize_t cap = c->cap ? c->cap : 1024;
    while (cap < c->n + rows) cap *= 2;
    uint8_t *valid = PyMem_Realloc(c->valid, (size_t)(cap + 7) / 8);
    if (valid == NULL) return PyErr_NoMemory(), -1;
    memset(valid + (c->cap + 7) / 8, 0, (size_t)((cap + 7) / 8 - (c->cap + 7) / 8));
    c->valid = valid;
    if (c->kind == T_STRING) {
        int32_t *off = PyMem_Realloc(c->offsets, (size_t)(cap + 1) * sizeof(int32_t));
        if (off == NULL) return PyErr_NoMemory(), -1;
        if (c->cap == 0) off[0] = 0;
        c->offsets = off;
    } else {
        uint8_t *data = PyMem_Realloc(c->data, (size_t)cap * TARGET_WIDTH[c->kind]);
        if (data == NULL) return PyErr_NoMemory(), -1;
        c->data = data;
    }
    c->cap = cap;
    return 0;
}

static int bytes_reserve(Col *c, size_t n) {
    if (c->data_len + n <= c->data_cap) return 0;
    size_t cap = c->data_cap ? c->data_cap : 65536;
    while (cap < c->data_len + n) cap *= 2;
    uint8_t *data = PyMem_Realloc(c->data, cap);
    if (data == NULL) return PyErr_NoMemory(), -1;
    c->data = data;
    c->data_cap = cap;
    return 0;
}

/* A NULL at row c->n (room reserved). */
static inline void col_null(Col *c) {
    if (c->kind == T_STRING) {
        c->offsets[c->n + 1] = c->offsets[c->n];
    } else {
        memset(c->data + (size_t)c->n * TARGET_WIDTH[c->kind], 0, (size_t)TARGET_WIDTH[c->kind]);
    }
    c->nulls++;
    c->n++;
}

static inline void col_valid(Col *c) {
    c->valid[c->n >> 3] |= (uint8_t)(1u << (c->n & 7));
    c->n++;
}

/* Back to `n` rows with `nulls` nulls (undoes a call). */
static void col_truncate(Col *c, Py_ssize_t n, Py_ssize_t nulls) {
    for (Py_ssize_t i = n; i < c->n; i++) c->valid[i >> 3] &= (uint8_t)~(1u << (i & 7));
    if (c->kind == T_STRING && c->cap) c->data_len = (size_t)c->offsets[n];
    c->n = n;
    c->nulls = nulls;
}

/* ---- Plan: how one image shape fills the columns -------------------------------------- */

typedef struct {
    PyObject_HEAD
    Py_ssize_t n, nb;    /* present columns, null bitmap bytes */
    int ncols;           /* Arrow columns */
    int *width;          /* per present column: fixed bytes (>= 0) or -prefix bytes */
    int *source;         /* per present column: S_* (S_NONE: skipped) */
    int *a, *b;          /* per present column: DECIMAL precision, scale */
    uint8_t **map;       /* per present column: charmap, 256 UTF-8 sequences of 4 bytes
                          * (the first byte the length) or NULL */
    int *target;         /* per present column: its Arrow column, or -1 */
    int *target_kind;    /* per Arrow column: T_* (checked against the Columns) */
    int *target_scale;   /* per Arrow column: a decimal's scale */
} Plan;

static void Plan_dealloc(Plan *self) {
    PyMem_Free(self->width);
    PyMem_Free(self->source);
    PyMem_Free(self->a);
    PyMem_Free(self->b);
    for (Py_ssize_t i = 0; self->map && i < self->n; i++) PyMem_Free(self->map[i]);
    PyMem_Free(self->map);
    PyMem_Free(self->target);
    PyMem_Free(self->target_kind);
    PyMem_Free(self->target_scale);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject PlanType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "headwater._native._survivors.Plan",
    .tp_basicsize = sizeof(Plan),
    .tp_dealloc = (destructor)Plan_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "How one row image shape fills the Arrow columns (made by plan())",
};

static int fits(int source, int target) {
    switch (target) {
    case T_INT8: case T_INT16: case T_INT32: case T_INT64:
        return source >= S_I8 && source <= S_YEAR;
    case T_FLOAT64: return source == S_FLOAT || source == S_DOUBLE;
    case T_DECIMAL: return source == S_DECIMAL;
    case T_STRING:
        return source == S_UTF8 || source == S_ASCII || source == S_LATIN1 ||
               source == S_CHARMAP;
    default: return 0;
    }
}

/* A charmap's table: `map` a str of 256 characters (byte b reads as character b), each
 * kept as its UTF-8 bytes. -1 without an exception: not such a str (the column is then
 * not typed here); -1 with one: no memory. */
static int set_map(Plan *self, Py_ssize_t i, PyObject *map) {
    if (!PyUnicode_Check(map) || PyUnicode_GetLength(map) != 256) return -1;
    uint8_t *t = PyMem_Calloc(256, 4);
    if (t == NULL) return PyErr_NoMemory(), -1;
    for (Py_ssize_t b = 0; b < 256; b++) {
        Py_UCS4 c = PyUnicode_ReadChar(map, b);
        uint8_t *o = t + 4 * b;
        if (c < 0x80) {
            o[0] = 1; o[1] = (uint8_t)c;
        } else if (c < 0x800) {
            o[0] = 2; o[1] = (uint8_t)(0xC0 | c >> 6); o[2] = (uint8_t)(0x80 | (c & 0x3F));
        } else if (c < 0x10000 && (c < 0xD800 || c > 0xDFFF)) {
            o[0] = 3; o[1] = (uint8_t)(0xE0 | c >> 12);
            o[2] = (uint8_t)(0x80 | (c >> 6 & 0x3F)); o[3] = (uint8_t)(0x80 | (c & 0x3F));
        } else { /* beyond the BMP, or a surrogate: not for this table */
            PyMem_Free(t);
            return -1;
        }
    }
    self->map[i] = t;
    return 0;
}

/* plan(targets, widths, sources, where) -> Plan | None.
 * targets: ((arrow kind, precision, scale), ...) per Arrow column; widths: value_width
 * per present column; sources: (kind name, a, b) per present column ("" when unknown);
 * where: per Arrow column, its present column or -1. None: a pair this module does not
 * type (the caller decodes that shape the Python way). */
static PyObject *py_plan(PyObject *mod, PyObject *args) {
    PyObject *targets, *widths, *sources, *where;
    if (!PyArg_ParseTuple(args, "O!O!O!O!:plan", &PyTuple_Type, &targets, &PyTuple_Type,
                          &widths, &PyTuple_Type, &sources, &PyTuple_Type, &where))
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(widths), m = PyTuple_GET_SIZE(targets);
    if (n < 1 || PyTuple_GET_SIZE(sources) != n || PyTuple_GET_SIZE(where) != m || m > 4096) {
        PyErr_SetString(PyExc_ValueError, "plan: sizes differ");
        return NULL;
    }
    Plan *self = PyObject_New(Plan, &PlanType);
    if (self == NULL) return NULL;
    self->n = n;
    self->nb = (n + 7) / 8;
    self->ncols = (int)m;
    self->width = PyMem_Calloc((size_t)n, sizeof(int));
    self->source = PyMem_Calloc((size_t)n, sizeof(int));
    self->a = PyMem_Calloc((size_t)n, sizeof(int));
    self->b = PyMem_Calloc((size_t)n, sizeof(int));
    self->map = PyMem_Calloc((size_t)n, sizeof(uint8_t *));
    self->target = PyMem_Calloc((size_t)n, sizeof(int));
    self->target_kind = PyMem_Calloc((size_t)m + 1, sizeof(int));
    self->target_scale = PyMem_Calloc((size_t)m + 1, sizeof(int));
    if (!self->width || !self->source || !self->a || !self->b || !self->map || !self->target ||
        !self->target_kind || !self->target_scale) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        long w = PyLong_AsLong(PyTuple_GET_ITEM(widths, i));
        if (w == -1 && PyErr_Occurred()) goto fail;
        if (w < -4 || w > 255) {
            PyErr_Format(PyExc_ValueError, "column width %ld", w);
            goto fail;
        }
        self->width[i] = (int)w;
        self->target[i] = -1;
        PyObject *name, *map = Py_None;
        int a, b;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(sources, i), "Uii|O;a source is (kind, a, b[, map])",
                              &name, &a, &b, &map))
            goto fail;
        int s = PyUnicode_GetLength(name) ? -1 : S_NONE;
        for (int k = 1; k < S_MAX && s < 0; k++)
            if (PyUnicode_CompareWithASCIIString(name, SOURCE_NAMES[k]) == 0) s = k;
        if (s == S_CHARMAP && set_map(self, i, map) < 0) {
            if (PyErr_Occurred()) goto fail;
            s = S_NONE; /* no table of 256: only skipped */
        }
        self->source[i] = s < 0 ? S_NONE : s; /* other kinds: only skipped */
        self->a[i] = a;
        self->b[i] = b;
    }
    for (Py_ssize_t j = 0; j < m; j++) {
        PyObject *kind;
        int precision, scale;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(targets, j), "Oii;a target is (kind, p, s)",
                              &kind, &precision, &scale))
            goto fail;
        int t = name_index(kind, TARGET_NAMES, T_MAX);
        if (t < 0) goto fail;
        self->target_kind[j] = t;
        self->target_scale[j] = scale;
        long at = PyLong_AsLong(PyTuple_GET_ITEM(where, j));
        if (at == -1 && PyErr_Occurred()) goto fail;
        if (at < 0) continue; /* a column the image lacks: NULL */
        if (at >= n || self->target[at] != -1) {
            PyErr_Format(PyExc_ValueError, "plan: column %ld placed twice or outside", at);
            goto fail;
        }
        int s = self->source[at], w = self->width[at];
        int ok = fits(s, t);
        if (ok && s == S_DECIMAL)
            ok = self->b[at] == scale && self->a[at] <= 38 && self->a[at] <= precision &&
                 precision <= 38;
        int text = s == S_UTF8 || s == S_ASCII || s == S_LATIN1 || s == S_CHARMAP;
        if (ok) ok = text ? w < 0 : w > 0;
        if (!ok) {
            Py_DECREF(self);
            Py_RETURN_NONE;
        }
        self->target[at] = (int)j;
    }
    return (PyObject *)self;
fail:
    Py_DECREF(self);
    return NULL;
}

/* ---- values -------------------------------------------------------------------------- */

#define ODD 1 /* a value this module does not type: the caller decodes the Python way */

static const int DIG2BYTES[10] = {0, 1, 1, 2, 2, 3, 3, 4, 4, 4};

/* bin2decimal (strings/decimal.cc) to the unscaled integer; ODD for a group above its
 * digits (corrupt bytes: the Python route's arithmetic value is not this) or beyond
 * `limit_digits`. */
static int decimal_unscaled(const uint8_t *p, int precision, int scale, int limit_digits,
                            __int128 *out) {
    int intg = precision - scale, sizes[16], digits[16], ng = 0;
    if (intg % 9) { sizes[ng] = DIG2BYTES[intg % 9]; digits[ng++] = intg % 9; }
    for (int i = 0; i < intg / 9; i++) { sizes[ng] = 4; digits[ng++] = 9; }
    for (int i = 0; i < scale / 9; i++) { sizes[ng] = 4; digits[ng++] = 9; }
    if (scale % 9) { sizes[ng] = DIG2BYTES[scale % 9]; digits[ng++] = scale % 9; }
    static const uint32_t pow10[10] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000,
                                       100000000, 1000000000};
    int negative = !(p[0] & 0x80);
    uint8_t mask = negative ? 0xFF : 0;
    __int128 v = 0;
    for (int g = 0; g < ng; g++) {
        uint32_t x = 0;
        for (int k = 0; k < sizes[g]; k++) {
            uint8_t byte = (uint8_t)(*p++ ^ mask);
            if (g == 0 && k == 0) byte &= 0x7F; /* the sign bit */
            x = x << 8 | byte;
        }
        if (x >= pow10[digits[g]]) return ODD;
        v = v * pow10[digits[g]] + x;
    }
    __int128 limit = 1;
    for (int i = 0; i < limit_digits; i++) limit *= 10;
    if (v >= limit) return ODD;
    *out = negative ? -v : v;
    return 0;
}

static int decimal_bytes(int precision, int scale) {
    int intg = precision - scale;
    return intg / 9 * 4 + DIG2BYTES[intg % 9] + scale / 9 * 4 + DIG2BYTES[scale % 9];
}

/* Whether s[0:n] is UTF-8 as Python's strict decoder reads it (RFC 3629: no overlong
 * forms, no surrogates, nothing above U+10FFFF). */
static int valid_utf8(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) { i++; continue; }
        if (c >= 0xC2 && c <= 0xDF) {
            if (i + 1 >= n || (s[i + 1] & 0xC0) != 0x80) return 0;
            i += 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            if (i + 2 >= n || (s[i + 1] & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80) return 0;
            if (c == 0xE0 && s[i + 1] < 0xA0) return 0; /* overlong */
            if (c == 0xED && s[i + 1] > 0x9F) return 0; /* surrogates */
            i += 3;
        } else if (c >= 0xF0 && c <= 0xF4) {
            if (i + 3 >= n || (s[i + 1] & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80 ||
                (s[i + 3] & 0xC0) != 0x80)
                return 0;
            if (c == 0xF0 && s[i + 1] < 0x90) return 0; /* overlong */
            if (c == 0xF4 && s[i + 1] > 0x8F) return 0; /* above U+10FFFF */
            i += 4;
        } else {
            return 0;
        }
    }
    return 1;
}

static int put_text(Col *c, int source, const uint8_t *map, const uint8_t *s, size_t n) {
    if (source == S_CHARMAP) {
        size_t total = 0;
        for (size_t i = 0; i < n; i++) total += map[4 * s[i]];
        if (c->data_len + total > INT32_MAX) return ODD;
        if (bytes_reserve(c, total) < 0) return -1;
        uint8_t *o = c->data + c->data_len;
        for (size_t i = 0; i < n; i++) {
            const uint8_t *u = map + 4 * s[i];
            memcpy(o, u + 1, u[0]);
            o += u[0];
        }
        c->data_len += total;
        c->offsets[c->n + 1] = (int32_t)c->data_len;
        return 0;
    }
    if (source == S_UTF8) {
        if (!valid_utf8(s, n)) return ODD;
    } else if (source == S_ASCII) {
        for (size_t i = 0; i < n; i++)
            if (s[i] & 0x80) return ODD;
    }
    size_t extra = 0;
    if (source == S_LATIN1)
        for (size_t i = 0; i < n; i++) extra += s[i] >> 7;
    if (c->data_len + n + extra > INT32_MAX) return ODD; /* a batch past int32 offsets */
    if (bytes_reserve(c, n + extra) < 0) return -1;
    uint8_t *o = c->data + c->data_len;
    if (extra == 0) {
        memcpy(o, s, n);
    } else { /* ISO 8859-1: byte b is U+00b */
        for (size_t i = 0; i < n; i++) {
            if (s[i] < 0x80) {
                *o++ = s[i];
            } else {
                *o++ = (uint8_t)(0xC0 | s[i] >> 6);
                *o++ = (uint8_t)(0x80 | (s[i] & 0x3F));
            }
        }
    }
    c->data_len += n + extra;
    c->offsets[c->n + 1] = (int32_t)c->data_len;
    return 0;
}

/* One non-NULL value of present column i (its bytes at v, vlen long) into column c. */
static int put_value(const Plan *pl, Py_ssize_t i, Col *c, const uint8_t *v, size_t vlen) {
    int s = pl->source[i];
    if (s == S_UTF8 || s == S_ASCII || s == S_LATIN1 || s == S_CHARMAP)
        return put_text(c, s, pl->map[i], v, vlen);
    uint8_t *out = c->data + (size_t)c->n * TARGET_WIDTH[c->kind];
    if (s == S_FLOAT || s == S_DOUBLE) {
        double d;
        if (s == S_FLOAT) {
            float f;
            memcpy(&f, v, 4);
            d = f;
        } else {
            memcpy(&d, v, 8);
        }
        memcpy(out, &d, 8);
        return 0;
    }
    if (s == S_DECIMAL) {
        __int128 x;
        if (decimal_unscaled(v, pl->a[i], pl->b[i], c->precision, &x)) return ODD;
        memcpy(out, &x, 16); /* little endian two's complement (Arrow Decimal128) */
        return 0;
    }
    int64_t x;
    int w = (int)vlen;
    uint64_t u = le_n(v, w);
    switch (s) {
    case S_I8: case S_I16: case S_I24: case S_I32: case S_I64:
        if (w < 8 && (u >> (8 * w - 1) & 1)) u |= ~(uint64_t)0 << (8 * w);
        x = (int64_t)u;
        break;
    case S_YEAR: x = u ? (int64_t)u + 1900 : 0; break;
    default: /* unsigned */
        if (u > (uint64_t)INT64_MAX) return ODD;
        x = (int64_t)u;
        break;
    }
    switch (c->kind) {
    case T_INT8: if (x < INT8_MIN || x > INT8_MAX) return ODD; *(int8_t *)out = (int8_t)x; break;
    case T_INT16: {
        if (x < INT16_MIN || x > INT16_MAX) return ODD;
        int16_t y = (int16_t)x;
        memcpy(out, &y, 2);
        break;
    }
    case T_INT32: {
        if (x < INT32_MIN || x > INT32_MAX) return ODD;
        int32_t y = (int32_t)x;
        memcpy(out, &y, 4);
        break;
    }
    default: memcpy(out, &x, 8); break;
    }
    return 0;
}

/* ---- Columns: the builder ------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    int ncols;
    Col *cols;
    uint8_t *seen;       /* scratch: per column, written in this image */
} Columns;

static void Columns_dealloc(Columns *self) {
    for (int j = 0; j < self->ncols && self->cols; j++) {
        PyMem_Free(self->cols[j].valid);
        PyMem_Free(self->cols[j].data);
        PyMem_Free(self->cols[j].offsets);
    }
    PyMem_Free(self->cols);
    PyMem_Free(self->seen);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Columns_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    PyObject *targets;
    if (!PyArg_ParseTuple(args, "O!:Columns", &PyTuple_Type, &targets)) return NULL;
    Py_ssize_t m = PyTuple_GET_SIZE(targets);
    if (m < 1 || m > 4096) {
        PyErr_SetString(PyExc_ValueError, "1 to 4096 columns");
        return NULL;
    }
    Columns *self = (Columns *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->cols = PyMem_Calloc((size_t)m, sizeof(Col));
    self->seen = PyMem_Calloc((size_t)m, 1);
    if (!self->cols || !self->seen) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    self->ncols = (int)m;
    for (Py_ssize_t j = 0; j < m; j++) {
        PyObject *kind;
        int precision, scale;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(targets, j), "Oii;a target is (kind, p, s)",
                              &kind, &precision, &scale)) {
            Py_DECREF(self);
            return NULL;
        }
        int t = name_index(kind, TARGET_NAMES, T_MAX);
        if (t < 0 || (t == T_DECIMAL && !(0 < precision && precision <= 38))) {
            if (t >= 0) PyErr_Format(PyExc_ValueError, "decimal precision %d", precision);
            Py_DECREF(self);
            return NULL;
        }
        self->cols[j].kind = t;
        self->cols[j].precision = precision;
        self->cols[j].scale = scale;
    }
    return (PyObject *)self;
}

/* One image at *pp into the columns (room for one row reserved). */
static int add_image(Columns *self, const Plan *pl, const uint8_t *buf, Py_ssize_t len,
                     Py_ssize_t p) {
    if (p < 0 || p > len || pl->nb > len - p) goto trunc;
    const uint8_t *nulls = buf + p;
    p += pl->nb;
    memset(self->seen, 0, (size_t)self->ncols);
    for (Py_ssize_t i = 0; i < pl->n; i++) {
        int j = pl->target[i];
        if (nulls[i >> 3] >> (i & 7) & 1) continue; /* NULL: filled below */
        int w = pl->width[i];
        Py_ssize_t vlen;
        if (w >= 0) {
            vlen = w;
        } else {
            if (-w > len - p) goto trunc;
            vlen = (Py_ssize_t)le_n(buf + p, -w);
            p += -w;
        }
        if (vlen > len - p) goto trunc;
        if (j >= 0) {
            Col *c = &self->cols[j];
            if (pl->source[i] == S_DECIMAL &&
                vlen != decimal_bytes(pl->a[i], pl->b[i])) return ODD;
            int rc = put_value(pl, i, c, buf + p, (size_t)vlen);
            if (rc) return rc;
            col_valid(c);
            self->seen[j] = 1;
        }
        p += vlen;
    }
    for (int j = 0; j < self->ncols; j++)
        if (!self->seen[j]) col_null(&self->cols[j]);
    return 0;
trunc:
    PyErr_SetString(PyExc_ValueError, TRUNC);
    return -1;
}

/* add(plan, buf, offsets) -> bool: the images of `buf` starting at `offsets` (native
 * int64s), one row each. False: an image held a value this module does not type; the
 * call's rows are undone. */
static PyObject *Columns_add(Columns *self, PyObject *args) {
    PyObject *plan;
    Py_buffer view, offs;
    if (!PyArg_ParseTuple(args, "O!y*y*:add", &PlanType, &plan, &view, &offs)) return NULL;
    PyObject *result = NULL;
    const Plan *pl = (const Plan *)plan;
    Py_ssize_t rows = offs.len / (Py_ssize_t)sizeof(int64_t);
    if (pl->ncols != self->ncols || offs.len % (Py_ssize_t)sizeof(int64_t)) {
        PyErr_SetString(PyExc_ValueError, "add: the plan is of other columns, or offsets");
        goto done;
    }
    for (int j = 0; j < self->ncols; j++) {
        Col *c = &self->cols[j];
        if (pl->target_kind[j] != c->kind ||
            (c->kind == T_DECIMAL && pl->target_scale[j] != c->scale)) {
            PyErr_SetString(PyExc_ValueError, "add: the plan is of other columns");
            goto done;
        }
        if (col_reserve(c, rows) < 0) goto done;
    }
    Py_ssize_t n0 = self->cols[0].n, *nulls0 = PyMem_Malloc(sizeof(Py_ssize_t) * self->ncols);
    if (nulls0 == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (int j = 0; j < self->ncols; j++) nulls0[j] = self->cols[j].nulls;
    const int64_t *at = offs.buf;
    int rc = 0;
    for (Py_ssize_t r = 0; r < rows && rc == 0; r++)
        rc = add_image(self, pl, view.buf, view.len, (Py_ssize_t)at[r]);
    if (rc) {
        for (int j = 0; j < self->ncols; j++) col_truncate(&self->cols[j], n0, nulls0[j]);
    }
    PyMem_Free(nulls0);
    if (rc < 0) goto done;
    result = PyBool_FromLong(rc == 0);
done:
    PyBuffer_Release(&view);
    PyBuffer_Release(&offs);
    return result;
}

/* Adds the images of one event's survivors (offsets in `buf`) as Columns_add does: 0,
 * ODD (the rows undone), or -1 with an exception. */
static int add_group(Columns *self, const Plan *pl, const uint8_t *buf, Py_ssize_t len,
                     const int64_t *at, Py_ssize_t rows) {
    for (int j = 0; j < self->ncols; j++) {
        Col *c = &self->cols[j];
        if (pl->target_kind[j] != c->kind ||
            (c->kind == T_DECIMAL && pl->target_scale[j] != c->scale)) {
            PyErr_SetString(PyExc_ValueError, "add_events: a plan is of other columns");
            return -1;
        }
        if (col_reserve(c, rows) < 0) return -1;
    }
    Py_ssize_t n0 = self->cols[0].n;
    Py_ssize_t small[16], *nulls0 = self->ncols <= 16 ? small
                                        : PyMem_Malloc(sizeof(Py_ssize_t) * self->ncols);
    if (nulls0 == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (int j = 0; j < self->ncols; j++) nulls0[j] = self->cols[j].nulls;
    int rc = 0;
    for (Py_ssize_t r = 0; r < rows && rc == 0; r++)
        rc = add_image(self, pl, buf, len, (Py_ssize_t)at[r]);
    if (rc)
        for (int j = 0; j < self->ncols; j++) col_truncate(&self->cols[j], n0, nulls0[j]);
    if (nulls0 != small) PyMem_Free(nulls0);
    return rc;
}

enum { EV_DONE = 0, EV_SLOW = 1, EV_ODD = 2, EV_FULL = 3 };

/* add_events(plans, payloads, firsts, events, seqs, offsets, start, limit) -> (stop, status)
 *
 * Columns_add over a run of events at once (headwater/spark/asofscan.py
 * _FastWalker.survivors_of: one call instead of one per event). `seqs` and `offsets` are
 * the scanner's survivors (native int64s, in sequence order: an event's ordinal << 32 |
 * its row); `events` the C walk's rows of six int64s per ordinal (_walk: table index or
 * -1, op, body, first image, end, rows); `firsts` the ordinal each record of `payloads`
 * (bytes) starts at; `plans` a Plan or None per table index. From survivor `start`, the
 * images of each event's survivors are added (offsets in its record's payload) until:
 * the end (EV_DONE, stop = the survivors' count), an event that is not this call's to do
 * (EV_SLOW: walked in Python, or its shape has no plan), an event with a value this
 * module does not type (EV_ODD: its rows undone), or `limit` rows gathered (EV_FULL).
 * `stop` is the first survivor not added: the caller does that event its own way. */
static PyObject *Columns_add_events(Columns *self, PyObject *args) {
    PyObject *plans, *payloads;
    Py_buffer firsts, events, seqs, offs;
    Py_ssize_t start, limit;
    if (!PyArg_ParseTuple(args, "O!O!y*y*y*y*nn:add_events", &PyTuple_Type, &plans,
                          &PyList_Type, &payloads, &firsts, &events, &seqs, &offs, &start,
                          &limit))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = seqs.len / 8, nrec = firsts.len / 8, nev = events.len / 48;
    const int64_t *seq = seqs.buf, *off = offs.buf, *first = firsts.buf, *ev = events.buf;
    if (seqs.len % 8 || offs.len != seqs.len || firsts.len % 8 || events.len % 48 ||
        nrec != PyList_GET_SIZE(payloads) || start < 0 || start > n) {
        PyErr_SetString(PyExc_ValueError, "add_events: arrays of other lengths");
        goto done;
    }
    int status = EV_DONE;
    Py_ssize_t i = start, r = 0;
    if (i < n) { /* the record of the first survivor's event: the last first <= its ordinal */
        Py_ssize_t lo = 0, hi = nrec;
        while (hi - lo > 1) {
            Py_ssize_t mid = lo + (hi - lo) / 2;
            if (first[mid] <= seq[i] >> 32) lo = mid; else hi = mid;
        }
        r = lo;
    }
    while (i < n) {
        int64_t ordinal = seq[i] >> 32;
        Py_ssize_t j = i + 1;
        while (j < n && seq[j] >> 32 == ordinal) j++;
        if (ordinal < 0 || ordinal >= nev) {
            PyErr_SetString(PyExc_ValueError, "add_events: a survivor of no event");
            goto done;
        }
        int64_t t = ev[6 * ordinal];
        if (t < 0) {
            status = EV_SLOW;
            break;
        }
        if (t >= PyTuple_GET_SIZE(plans)) {
            PyErr_SetString(PyExc_ValueError, "add_events: an event of no plan");
            goto done;
        }
        PyObject *plan = PyTuple_GET_ITEM(plans, t);
        if (plan == Py_None) {
            status = EV_SLOW;
            break;
        }
        if (!PyObject_TypeCheck(plan, &PlanType)) {
            PyErr_SetString(PyExc_TypeError, "add_events: plans are Plan or None");
            goto done;
        }
        /* the record holding the ordinal: the last whose first ordinal is <= it */
        while (r + 1 < nrec && first[r + 1] <= ordinal) r++;
        if (nrec == 0 || first[r] > ordinal) {
            PyErr_SetString(PyExc_ValueError, "add_events: an event in no record");
            goto done;
        }
        PyObject *payload = PyList_GET_ITEM(payloads, r);
        if (!PyBytes_Check(payload)) {
            PyErr_SetString(PyExc_TypeError, "add_events: payloads are bytes");
            goto done;
        }
        int rc = add_group(self, (const Plan *)plan, (const uint8_t *)PyBytes_AS_STRING(payload),
                           PyBytes_GET_SIZE(payload), off + i, j - i);
        if (rc < 0) goto done;
        if (rc) {
            status = EV_ODD;
            break;
        }
        i = j;
        if (self->cols[0].n >= limit) {
            status = i < n ? EV_FULL : EV_DONE;
            break;
        }
    }
    result = Py_BuildValue("(ni)", i, status);
done:
    PyBuffer_Release(&firsts);
    PyBuffer_Release(&events);
    PyBuffer_Release(&seqs);
    PyBuffer_Release(&offs);
    return result;
}

/* take() -> ((rows, nulls, validity | None, data, offsets | None), ...) per column, the
 * buffers of pyarrow.Array.from_buffers; the builder is empty afterwards. */
static PyObject *Columns_take(Columns *self, PyObject *unused) {
    PyObject *out = PyTuple_New(self->ncols);
    if (out == NULL) return NULL;
    for (int j = 0; j < self->ncols; j++) {
        Col *c = &self->cols[j];
        size_t dlen = c->kind == T_STRING ? c->data_len : (size_t)c->n * TARGET_WIDTH[c->kind];
        PyObject *valid = c->nulls ? PyBytes_FromStringAndSize((const char *)c->valid,
                                                               (c->n + 7) / 8)
                                   : Py_NewRef(Py_None);
        PyObject *data = PyBytes_FromStringAndSize(c->data ? (const char *)c->data : "",
                                                   (Py_ssize_t)dlen);
        PyObject *offsets = Py_NewRef(Py_None);
        if (c->kind == T_STRING) {
            Py_DECREF(offsets);
            static const int32_t zero = 0;
            offsets = PyBytes_FromStringAndSize(c->offsets ? (const char *)c->offsets
                                                           : (const char *)&zero,
                                                (c->n + 1) * (Py_ssize_t)sizeof(int32_t));
        }
        PyObject *item = (valid && data && offsets)
                             ? Py_BuildValue("(nnNNN)", c->n, c->nulls, valid, data, offsets)
                             : NULL;
        if (item == NULL) {
            Py_XDECREF(valid);
            Py_XDECREF(data);
            Py_XDECREF(offsets);
            Py_DECREF(out);
            return NULL;
        }
        PyTuple_SET_ITEM(out, j, item);
        col_truncate(c, 0, 0);
        c->data_len = 0;
    }
    return out;
}

static PyObject *Columns_rows(Columns *self, void *closure) {
    return PyLong_FromSsize_t(self->cols[0].n);
}

static PyMethodDef Columns_methods[] = {
    {"add", (PyCFunction)Columns_add, METH_VARARGS, "add(plan, buf, offsets) -> bool"},
    {"add_events", (PyCFunction)Columns_add_events, METH_VARARGS,
     "add_events(plans, payloads, firsts, events, seqs, offsets, start, limit) -> "
     "(stop, status): Columns.add over a run of events (see the source)"},
    {"take", (PyCFunction)Columns_take, METH_NOARGS,
     "take() -> the columns' Arrow buffers; the builder is empty afterwards"},
    {NULL},
};

static PyGetSetDef Columns_getset[] = {
    {"rows", (getter)Columns_rows, NULL, "rows gathered", NULL},
    {NULL},
};

static PyTypeObject ColumnsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "headwater._native._survivors.Columns",
    .tp_basicsize = sizeof(Columns),
    .tp_dealloc = (destructor)Columns_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Columns(targets): Arrow columns being filled from row images",
    .tp_new = Columns_new,
    .tp_methods = Columns_methods,
    .tp_getset = Columns_getset,
};

static PyMethodDef module_methods[] = {
    {"plan", py_plan, METH_VARARGS, "plan(targets, widths, sources, where) -> Plan | None"},
    {NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "headwater._native._survivors",
    "Surviving after images of a replay decoded into Arrow buffers in C (see the source).",
    -1, module_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__survivors(void) {
    if (PyType_Ready(&PlanType) < 0 || PyType_Ready(&ColumnsType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL) return NULL;
    Py_INCREF(&PlanType);
    Py_INCREF(&ColumnsType);
    if (PyModule_AddObject(m, "Plan", (PyObject *)&PlanType) < 0 ||
        PyModule_AddObject(m, "Columns", (PyObject *)&ColumnsType) < 0 ||
        PyModule_AddIntConstant(m, "EV_DONE", EV_DONE) < 0 ||
        PyModule_AddIntConstant(m, "EV_SLOW", EV_SLOW) < 0 ||
        PyModule_AddIntConstant(m, "EV_ODD", EV_ODD) < 0 ||
        PyModule_AddIntConstant(m, "EV_FULL", EV_FULL) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
