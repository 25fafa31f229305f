/*
 * headwater._native._busjoin: the change-row message values of an Arrow record batch,
 * one bytes object per row, joined in one pass over the batch's column buffers
 * (headwater/sinks/bus/arrow.py ``_values``). It writes what the Arrow-compute join it
 * replaces wrote (and what ``change_row_bytes`` of headwater/sinks/bus/messages.py writes
 * through orjson); a differential test holds them equal (tests/unit/sinks/test_bus_arrow.py).
 *
 * ``join(n, pieces)`` -> list of ``n`` bytes. Each row's value is the concatenation of
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
 * caller's list frees nothing under the join), every row is then written into one buffer
 * with its end offset, touching raw memory only (PyMem_Raw*), and the bytes objects are
 * made from that buffer with the GIL again. The bus sinks' driver path joins in a writer
 * thread while the main thread decodes the next batch: with the GIL held, the join (and
 * the grouping around it) ran on one core at a time with the decoding.
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
enum { E_OK = 0, E_MEMORY = -1, E_GROUP = -2, E_NODATA = -3 };

typedef struct {
    char *p;
    Py_ssize_t len, cap;
} Buf;

/* Raw memory only: called without the GIL. */
static int reserve(Buf *b, Py_ssize_t need) {
    if (b->cap - b->len >= need) return 0;
    Py_ssize_t cap = b->cap ? b->cap : 1024;
    while (cap - b->len < need) {
        if (cap > PY_SSIZE_T_MAX / 2) return E_MEMORY;
        cap *= 2;
    }
    char *p = PyMem_RawRealloc(b->p, (size_t)cap);
    if (p == NULL) return E_MEMORY;
    b->p = p;
    b->cap = cap;
    return 0;
}

static int put(Buf *b, const char *s, Py_ssize_t n) {
    if (reserve(b, n) < 0) return E_MEMORY;
    memcpy(b->p + b->len, s, (size_t)n);
    b->len += n;
    return 0;
}

static int put_int(Buf *b, int64_t v) {
    char tmp[24];
    int i = 24;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do {
        tmp[--i] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0) tmp[--i] = '-';
    return put(b, tmp + i, 24 - i);
}

static const char HEX[] = "0123456789abcdef";

static int put_json_string(Buf *b, const uint8_t *s, Py_ssize_t n) {
    /* at most 6 bytes out per byte in, and the quotes */
    if (reserve(b, n * 6 + 2) < 0) return E_MEMORY;
    char *o = b->p + b->len;
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
    b->len = o - b->p;
    return 0;
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

/* One row's piece; without the GIL (raw buffers and the held group texts only). */
static int put_piece(Buf *b, const Piece *p, Py_ssize_t i) {
    switch (p->kind) {
    case P_CONST:
        return put(b, p->text, p->text_len);
    case P_GROUP: {
        Py_ssize_t g = p->indices ? p->indices[p->offset + i] : 0;
        if (g < 0 || g >= p->ngroups) return E_GROUP;
        return put(b, p->group_text[g], p->group_len[g]);
    }
    case P_INT:
        if (!is_valid(p, i)) return put(b, "null", 4);
        return put_int(b, ((const int64_t *)p->values)[p->offset + i]);
    default: { /* P_STR */
        if (!is_valid(p, i)) return put(b, "null", 4);
        Py_ssize_t j = p->offset + i;
        int64_t start, end;
        if (p->wide) {
            start = ((const int64_t *)p->values)[j];
            end = ((const int64_t *)p->values)[j + 1];
        } else {
            start = ((const int32_t *)p->values)[j];
            end = ((const int32_t *)p->values)[j + 1];
        }
        if (end == start) return p->mode ? put(b, "\"\"", 2) : 0;
        if (p->data == NULL || end < start) return E_NODATA;
        if (p->mode) return put_json_string(b, p->data + start, (Py_ssize_t)(end - start));
        return put(b, (const char *)p->data + start, (Py_ssize_t)(end - start));
    }
    }
}

/* Every row into ``b``, row i's value ending at ``ends[i]``; without the GIL. */
static int join_rows(Buf *b, Py_ssize_t *ends, const Piece *pieces, Py_ssize_t np,
                     Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        for (Py_ssize_t k = 0; k < np; k++) {
            int rc = put_piece(b, &pieces[k], i);
            if (rc < 0) return rc;
        }
        ends[i] = b->len;
    }
    return E_OK;
}

static PyObject *join(PyObject *self, PyObject *args) {
    Py_ssize_t n;
    PyObject *seq;
    if (!PyArg_ParseTuple(args, "nO", &n, &seq)) return NULL;
    if (n < 0) {
        PyErr_SetString(PyExc_ValueError, "a negative number of rows");
        return NULL;
    }
    PyObject *fast = PySequence_Fast(seq, "pieces must be a sequence");
    if (fast == NULL) return NULL;
    Py_ssize_t np = PySequence_Fast_GET_SIZE(fast);
    Piece *pieces = PyMem_Calloc((size_t)(np ? np : 1), sizeof(Piece));
    Py_ssize_t *ends = NULL;
    PyObject *out = NULL;
    Buf b = {NULL, 0, 0};
    Py_ssize_t parsed = 0;
    if (pieces == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (; parsed < np; parsed++)
        if (parse(&pieces[parsed], PySequence_Fast_GET_ITEM(fast, parsed)) < 0) {
            parsed++; /* release what it took */
            goto done;
        }
    ends = PyMem_RawMalloc((size_t)(n ? n : 1) * sizeof(Py_ssize_t));
    if (ends == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = join_rows(&b, ends, pieces, np, n);
    Py_END_ALLOW_THREADS
    if (rc == E_MEMORY) {
        PyErr_NoMemory();
        goto done;
    }
    if (rc == E_GROUP) {
        PyErr_SetString(PyExc_IndexError, "group index out of range");
        goto done;
    }
    if (rc == E_NODATA) {
        PyErr_SetString(PyExc_ValueError, "string column without data");
        goto done;
    }
    out = PyList_New(n);
    if (out == NULL) goto done;
    for (Py_ssize_t i = 0, at = 0; i < n; at = ends[i], i++) {
        PyObject *v = PyBytes_FromStringAndSize(b.p ? b.p + at : "", ends[i] - at);
        if (v == NULL) {
            Py_CLEAR(out);
            goto done;
        }
        PyList_SET_ITEM(out, i, v);
    }
done:
    if (pieces != NULL) {
        for (Py_ssize_t k = 0; k < parsed; k++) release(&pieces[k]);
        PyMem_Free(pieces);
    }
    PyMem_RawFree(ends);
    PyMem_RawFree(b.p);
    Py_DECREF(fast);
    return out;
}

static PyMethodDef methods[] = {
    {"join", join, METH_VARARGS, "join(n, pieces) -> list of n bytes (module docstring)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_busjoin",
    "Change-row message values of an Arrow batch, joined from its column buffers.", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__busjoin(void) { return PyModule_Create(&module); }
