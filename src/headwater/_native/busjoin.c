/*
 * headwater._native._busjoin: the change-row message values of an Arrow record batch,
 * one bytes object per row, joined in one pass over the batch's column buffers
 * (headwater/sinks/bus/arrow.py ``_values``). It writes what the Arrow-compute join it
 * replaces wrote (and what ``change_row_bytes`` of headwater/sinks/bus/messages.py writes
 * through orjson); a differential test holds them equal (tests/unit/sinks/test_bus_arrow.py).
 *
 * ``join(n, pieces)`` -> list of ``n`` bytes; ``join_buffer(n, pieces)`` -> ``(offsets,
 * data)``, the same values in one bytes object (``n + 1`` int64 offsets: an Arrow binary
 * array's buffers, read by the Kafka sink's C produce loop, rdproduce.c). Each row's value is the concatenation of
 * every piece's text for that row. A piece is
 *
 *   bytes                                  the same text for every row
 *   (0, texts, indices, offset)            ``texts[indices[offset + i]]`` (int32 indices;
 *                                          ``indices`` None: ``texts[0]``)
 *   (1, validity, values, offset)          an int64 column: its decimal text, ``null``
 *                                          for a null
 *   (2, validity, offsets, data, offset, wide, mode)
 *                                          a string/binary column (``wide``: int64 offsets,
 *                                          else int32); ``null`` for a null; mode 0: the
 *                                          bytes as they are (the images' JSON text), mode
 *                                          1: a JSON string as orjson 3.13 writes it from
 *                                          the UTF-8 text: ``"`` and ``\`` escaped, \b \t \n
 *                                          \f \r, other bytes below 0x20 as \u00XX
 *                                          (lowercase hex), nothing else escaped (orjson's
 *                                          src/serialize/per_type/str.rs escape table)
 *
 * ``validity`` is an Arrow validity bitmap (None: no nulls), bit ``offset + i`` for row
 * ``i``; every buffer supports the buffer protocol (pyarrow.Buffer). The caller keeps the
 * arrays alive and checks their lengths (arrow.py builds the pieces from the batch).
 *
 * The GIL is released while the rows are joined: the pieces are parsed first (buffer
 * views held, a group's texts as a tuple of its bytes, so another thread changing the
 * caller's list frees nothing under the join); without the GIL every row's length is
 * measured (the escapes counted; raw memory only, PyMem_Raw*); with it, each row's bytes
 * object is made at that length, uninitialised (PyBytes_FromStringAndSize(NULL, n)); and
 * without it again each row is written straight into its object, which nobody else
 * holds before the list is returned. The bus sinks' driver path joins in a writer thread
 * while the main thread decodes the next batch: with the GIL held, the join (and the
 * grouping around it) ran on one core at a time with the decoding. (Until 2026-11-25
 * every row went into one growing buffer, then was copied into its bytes object: the
 * reallocations and the second copy of ~470 bytes a row were most of the join's time.)
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

enum { P_CONST = -1, P_GROUP = 0, P_INT = 1, P_STR = 2 };

typedef struct {
    int kind;
    const char *text; /* P_CONST */
    Py_ssize_t text_len;
    PyObject *texts; /* P_GROUP: a tuple of the caller's bytes (held) */
    const char **group_text;
    Py_ssize_t *group_len, ngroups;
    const int32_t *indices;
    const uint8_t *valid;
    const void *values; /* P_INT: int64; P_STR: offsets */
    const uint8_t *data;
    Py_ssize_t offset;
    int wide, mode;
    Py_buffer views[3];
    int nviews;
} Piece;

/* The join's failures, raised once the GIL is held again. */
enum { E_OK = 0, E_MEMORY = -1, E_GROUP = -2, E_NODATA = -3, E_LENGTH = -4 };

static const uint64_t POW10[20] = {
    1ULL, 10ULL, 100ULL, 1000ULL, 10000ULL, 100000ULL, 1000000ULL, 10000000ULL,
    100000000ULL, 1000000000ULL, 10000000000ULL, 100000000000ULL, 1000000000000ULL,
    10000000000000ULL, 100000000000000ULL, 1000000000000000ULL, 10000000000000000ULL,
    100000000000000000ULL, 1000000000000000000ULL, 10000000000000000000ULL,
};

/* Decimal digits of ``u`` without a division: log10 from the bit length (1233 / 4096 is
 * just above log10(2)), then one comparison. (A division per digit, twice a value, was
 * half of the join's time: a row's timestamps and sequences have 13-16 digits.) */
static int digits(uint64_t u) {
    int t = ((64 - __builtin_clzll(u | 1)) * 1233) >> 12;
    t += u >= POW10[t];
    return t ? t : 1;
}

static uint64_t magnitude(int64_t v) { return v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v; }

/* Digits (and sign) of an int64's decimal text. */
static Py_ssize_t int_len(int64_t v) { return digits(magnitude(v)) + (v < 0); }

static const char PAIRS[] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

/* ``v``'s decimal text at ``o`` (int_len(v) bytes), two digits at a time from the end. */
static char *write_int(char *o, int64_t v) {
    uint64_t u = magnitude(v);
    if (v < 0) *o++ = '-';
    char *end = o + digits(u), *w = end;
    while (u >= 100) {
        unsigned pair = (unsigned)(u % 100) * 2;
        u /= 100;
        *--w = PAIRS[pair + 1];
        *--w = PAIRS[pair];
    }
    if (u >= 10) {
        *--w = PAIRS[u * 2 + 1];
        *--w = PAIRS[u * 2];
    } else {
        *--w = (char)('0' + u);
    }
    return end;
}

/* Bytes out per byte in of put_json_string: 1 as it is, 2 for the short escapes, 6 for
 * \u00XX. */
static const uint8_t ESCAPED_LEN[32] = {
    6, 6, 6, 6, 6, 6, 6, 6, 2, 2, 2, 6, 2, 2, 6, 6,
    6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6,
};

static Py_ssize_t json_string_len(const uint8_t *s, Py_ssize_t n) {
    Py_ssize_t len = n + 2; /* the quotes */
    for (Py_ssize_t i = 0; i < n; i++) {
        uint8_t c = s[i];
        if (c < 0x20)
            len += ESCAPED_LEN[c] - 1;
        else if (c == '"' || c == '\\')
            len += 1;
    }
    return len;
}

static const char HEX[] = "0123456789abcdef";

static char *write_json_string(char *o, const uint8_t *s, Py_ssize_t n) {
    *o++ = '"';
    for (Py_ssize_t i = 0; i < n; i++) {
        uint8_t c = s[i];
        if (c >= 0x20 && c != '"' && c != '\\') {
            *o++ = (char)c;
            continue;
        }
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
            *o++ = 'u';
            *o++ = '0';
            *o++ = '0';
            *o++ = HEX[c >> 4];
            *o++ = HEX[c & 15];
        }
    }
    *o++ = '"';
    return o;
}

static int is_valid(const Piece *p, Py_ssize_t i) {
    if (p->valid == NULL) return 1;
    Py_ssize_t j = p->offset + i;
    return (p->valid[j >> 3] >> (j & 7)) & 1;
}

static int view(Piece *p, PyObject *obj, const void **out) {
    if (obj == Py_None) {
        *out = NULL;
        return 0;
    }
    Py_buffer *v = &p->views[p->nviews];
    if (PyObject_GetBuffer(obj, v, PyBUF_SIMPLE) < 0) return -1;
    p->nviews++;
    *out = v->buf;
    return 0;
}

static int parse(Piece *p, PyObject *item) {
    memset(p, 0, sizeof *p);
    if (PyBytes_Check(item)) {
        p->kind = P_CONST;
        p->text = PyBytes_AS_STRING(item);
        p->text_len = PyBytes_GET_SIZE(item);
        return 0;
    }
    if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) < 4) {
        PyErr_SetString(PyExc_TypeError, "a piece is bytes or a tuple");
        return -1;
    }
    long kind = PyLong_AsLong(PyTuple_GET_ITEM(item, 0));
    if (kind == -1 && PyErr_Occurred()) return -1;
    p->kind = (int)kind;
    const void *ptr;
    if (kind == P_GROUP) {
        PyObject *texts = PyTuple_GET_ITEM(item, 1);
        if (!PyList_Check(texts) || PyList_GET_SIZE(texts) == 0) {
            PyErr_SetString(PyExc_TypeError, "group texts: a non-empty list of bytes");
            return -1;
        }
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(texts); i++)
            if (!PyBytes_Check(PyList_GET_ITEM(texts, i))) {
                PyErr_SetString(PyExc_TypeError, "group texts: a list of bytes");
                return -1;
            }
        p->texts = PySequence_Tuple(texts);
        if (p->texts == NULL) return -1;
        p->ngroups = PyTuple_GET_SIZE(p->texts);
        p->group_text = PyMem_Calloc((size_t)p->ngroups, sizeof(char *));
        p->group_len = PyMem_Calloc((size_t)p->ngroups, sizeof(Py_ssize_t));
        if (p->group_text == NULL || p->group_len == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        for (Py_ssize_t i = 0; i < p->ngroups; i++) {
            PyObject *t = PyTuple_GET_ITEM(p->texts, i);
            p->group_text[i] = PyBytes_AS_STRING(t);
            p->group_len[i] = PyBytes_GET_SIZE(t);
        }
        if (view(p, PyTuple_GET_ITEM(item, 2), &ptr) < 0) return -1;
        p->indices = ptr;
        p->offset = PyLong_AsSsize_t(PyTuple_GET_ITEM(item, 3));
    } else if (kind == P_INT) {
        if (view(p, PyTuple_GET_ITEM(item, 1), &ptr) < 0) return -1;
        p->valid = ptr;
        if (view(p, PyTuple_GET_ITEM(item, 2), &ptr) < 0) return -1;
        p->values = ptr;
        p->offset = PyLong_AsSsize_t(PyTuple_GET_ITEM(item, 3));
    } else if (kind == P_STR && PyTuple_GET_SIZE(item) == 7) {
        if (view(p, PyTuple_GET_ITEM(item, 1), &ptr) < 0) return -1;
        p->valid = ptr;
        if (view(p, PyTuple_GET_ITEM(item, 2), &ptr) < 0) return -1;
        p->values = ptr;
        if (view(p, PyTuple_GET_ITEM(item, 3), &ptr) < 0) return -1;
        p->data = ptr;
        p->offset = PyLong_AsSsize_t(PyTuple_GET_ITEM(item, 4));
        p->wide = PyObject_IsTrue(PyTuple_GET_ITEM(item, 5));
        p->mode = (int)PyLong_AsLong(PyTuple_GET_ITEM(item, 6));
    } else {
        PyErr_SetString(PyExc_ValueError, "unknown piece");
        return -1;
    }
    if (PyErr_Occurred()) return -1;
    if ((kind == P_INT || kind == P_STR) && p->values == NULL) {
        PyErr_SetString(PyExc_ValueError, "a column piece needs its values buffer");
        return -1;
    }
    return 0;
}

static void release(Piece *p) {
    for (int j = 0; j < p->nviews; j++) PyBuffer_Release(&p->views[j]);
    Py_CLEAR(p->texts);
    PyMem_Free(p->group_text);
    PyMem_Free(p->group_len);
}

/* A string piece's bytes of row i (``*len`` 0 and NULL for an empty value). */
static int str_span(const Piece *p, Py_ssize_t i, const uint8_t **at, Py_ssize_t *len) {
    Py_ssize_t j = p->offset + i;
    int64_t start, end;
    if (p->wide) {
        start = ((const int64_t *)p->values)[j];
        end = ((const int64_t *)p->values)[j + 1];
    } else {
        start = ((const int32_t *)p->values)[j];
        end = ((const int32_t *)p->values)[j + 1];
    }
    *at = NULL;
    *len = 0;
    if (end == start) return E_OK;
    if (p->data == NULL || end < start) return E_NODATA;
    *at = p->data + start;
    *len = (Py_ssize_t)(end - start);
    return E_OK;
}

/* The length of one row's piece, added to ``*len``; checks what writing it relies on.
 * Without the GIL (raw buffers and the held group texts only). */
static int piece_len(const Piece *p, Py_ssize_t i, Py_ssize_t *len) {
    Py_ssize_t add;
    switch (p->kind) {
    case P_CONST:
        add = p->text_len;
        break;
    case P_GROUP: {
        Py_ssize_t g = p->indices ? p->indices[p->offset + i] : 0;
        if (g < 0 || g >= p->ngroups) return E_GROUP;
        add = p->group_len[g];
        break;
    }
    case P_INT:
        add = is_valid(p, i) ? int_len(((const int64_t *)p->values)[p->offset + i]) : 4;
        break;
    default: { /* P_STR */
        if (!is_valid(p, i)) {
            add = 4;
            break;
        }
        const uint8_t *at;
        Py_ssize_t n;
        int rc = str_span(p, i, &at, &n);
        if (rc < 0) return rc;
        if (p->mode == 0)
            add = n;
        else if (n > (PY_SSIZE_T_MAX - 2) / 6)
            return E_MEMORY;
        else
            add = json_string_len(at, n);
    }
    }
    if (add > PY_SSIZE_T_MAX - *len) return E_MEMORY;
    *len += add;
    return E_OK;
}

/* One row's piece written at ``o`` (its length counted by piece_len, which checked it);
 * the end. Without the GIL. */
static char *write_piece(char *o, const Piece *p, Py_ssize_t i) {
    switch (p->kind) {
    case P_CONST:
        memcpy(o, p->text, (size_t)p->text_len);
        return o + p->text_len;
    case P_GROUP: {
        Py_ssize_t g = p->indices ? p->indices[p->offset + i] : 0;
        memcpy(o, p->group_text[g], (size_t)p->group_len[g]);
        return o + p->group_len[g];
    }
    case P_INT:
        if (!is_valid(p, i)) break;
        return write_int(o, ((const int64_t *)p->values)[p->offset + i]);
    default: { /* P_STR */
        if (!is_valid(p, i)) break;
        const uint8_t *at;
        Py_ssize_t n;
        str_span(p, i, &at, &n);
        if (p->mode) return write_json_string(o, at, n);
        if (n) memcpy(o, at, (size_t)n);
        return o + n;
    }
    }
    memcpy(o, "null", 4);
    return o + 4;
}

/* Every row's length into ``lens``; without the GIL. */
static int measure_rows(Py_ssize_t *lens, const Piece *pieces, Py_ssize_t np, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t len = 0;
        for (Py_ssize_t k = 0; k < np; k++) {
            int rc = piece_len(&pieces[k], i, &len);
            if (rc < 0) return rc;
        }
        lens[i] = len;
    }
    return E_OK;
}

/* Every row written into ``dest[i]`` (``lens[i]`` bytes each); without the GIL. */
static int write_rows(char **dest, const Py_ssize_t *lens, const Piece *pieces, Py_ssize_t np,
                      Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        char *o = dest[i];
        for (Py_ssize_t k = 0; k < np; k++) o = write_piece(o, &pieces[k], i);
        if (o - dest[i] != lens[i]) return E_LENGTH;
    }
    return E_OK;
}

static void raise_join_error(int rc) {
    if (rc == E_MEMORY)
        PyErr_NoMemory();
    else if (rc == E_GROUP)
        PyErr_SetString(PyExc_IndexError, "group index out of range");
    else if (rc == E_NODATA)
        PyErr_SetString(PyExc_ValueError, "string column without data");
    else
        PyErr_SetString(PyExc_SystemError, "busjoin: a row's length changed between passes");
}

/* The parsed pieces and measured rows of a call (join, join_buffer). */
typedef struct {
    PyObject *fast;
    Piece *pieces;
    Py_ssize_t np, parsed, n;
    Py_ssize_t *lens;
    char **dest;
} Call;

static void call_end(Call *c) {
    if (c->pieces != NULL) {
        for (Py_ssize_t k = 0; k < c->parsed; k++) release(&c->pieces[k]);
        PyMem_Free(c->pieces);
    }
    PyMem_RawFree(c->lens);
    PyMem_RawFree(c->dest);
    Py_XDECREF(c->fast);
}

/* Parses ``(n, pieces)`` and measures every row (``c->lens``); -1 with an exception set. */
static int call_begin(Call *c, PyObject *args) {
    PyObject *seq;
    memset(c, 0, sizeof *c);
    if (!PyArg_ParseTuple(args, "nO", &c->n, &seq)) return -1;
    if (c->n < 0) {
        PyErr_SetString(PyExc_ValueError, "a negative number of rows");
        return -1;
    }
    c->fast = PySequence_Fast(seq, "pieces must be a sequence");
    if (c->fast == NULL) return -1;
    c->np = PySequence_Fast_GET_SIZE(c->fast);
    c->pieces = PyMem_Calloc((size_t)(c->np ? c->np : 1), sizeof(Piece));
    if (c->pieces == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (; c->parsed < c->np; c->parsed++)
        if (parse(&c->pieces[c->parsed], PySequence_Fast_GET_ITEM(c->fast, c->parsed)) < 0) {
            c->parsed++; /* release what it took */
            return -1;
        }
    c->lens = PyMem_RawMalloc((size_t)(c->n ? c->n : 1) * sizeof(Py_ssize_t));
    c->dest = PyMem_RawMalloc((size_t)(c->n ? c->n : 1) * sizeof(char *));
    if (c->lens == NULL || c->dest == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    /* (measured with the GIL held: a second release would be a second wait for the GIL,
     * up to the switch interval, 5 ms, when the decoding thread holds it) */
    int rc = measure_rows(c->lens, c->pieces, c->np, c->n);
    if (rc < 0) {
        raise_join_error(rc);
        return -1;
    }
    return 0;
}

/* Writes every row to ``c->dest`` without the GIL; -1 with an exception set. */
static int call_write(Call *c) {
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = write_rows(c->dest, c->lens, c->pieces, c->np, c->n);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        raise_join_error(rc);
        return -1;
    }
    return 0;
}

static PyObject *join(PyObject *self, PyObject *args) {
    Call c;
    PyObject *out = NULL;
    if (call_begin(&c, args) < 0) goto done;
    out = PyList_New(c.n);
    if (out == NULL) goto done;
    for (Py_ssize_t i = 0; i < c.n; i++) {
        /* uninitialised contents, written below: nobody else holds these objects yet */
        PyObject *v = PyBytes_FromStringAndSize(NULL, c.lens[i]);
        if (v == NULL) {
            Py_CLEAR(out);
            goto done;
        }
        PyList_SET_ITEM(out, i, v);
        c.dest[i] = PyBytes_AS_STRING(v);
    }
    if (call_write(&c) < 0) Py_CLEAR(out);
done:
    call_end(&c);
    return out;
}

/* join_buffer(n, pieces) -> (offsets, data): the same values in one bytes object ``data``,
 * value i at ``data[offsets[i]:offsets[i + 1]]`` (``offsets``: n + 1 int64, native byte
 * order): an Arrow binary array's buffers, with no Python object per row (the Kafka
 * sink's C produce loop reads them, rdproduce.c). */
static PyObject *join_buffer(PyObject *self, PyObject *args) {
    Call c;
    PyObject *offsets = NULL, *data = NULL, *out = NULL;
    if (call_begin(&c, args) < 0) goto done;
    offsets = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)sizeof(int64_t) * (c.n + 1));
    if (offsets == NULL) goto done;
    int64_t *at = (int64_t *)PyBytes_AS_STRING(offsets);
    int64_t total = 0;
    at[0] = 0;
    for (Py_ssize_t i = 0; i < c.n; i++) {
        if (c.lens[i] > PY_SSIZE_T_MAX - total) {
            PyErr_NoMemory();
            goto done;
        }
        total += c.lens[i];
        at[i + 1] = total;
    }
    data = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
    if (data == NULL) goto done;
    char *base = PyBytes_AS_STRING(data);
    for (Py_ssize_t i = 0; i < c.n; i++) c.dest[i] = base + at[i];
    if (call_write(&c) < 0) goto done;
    out = PyTuple_Pack(2, offsets, data);
done:
    Py_XDECREF(offsets);
    Py_XDECREF(data);
    call_end(&c);
    return out;
}

static PyMethodDef methods[] = {
    {"join", join, METH_VARARGS, "join(n, pieces) -> list of n bytes (module docstring)"},
    {"join_buffer", join_buffer, METH_VARARGS,
     "join_buffer(n, pieces) -> (int64 offsets, data): the values in one buffer"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_busjoin",
    "Change-row message values of an Arrow batch, joined from its column buffers.", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__busjoin(void) { return PyModule_Create(&module); }
