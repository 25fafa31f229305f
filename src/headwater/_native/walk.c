/*
 * headwater._native._walk: the event walk of a replay's key pass (headwater/spark/asofscan.py
 * _Walker.scan_record), in C: the rows events of one store record's payload handed to the
 * key pass (headwater._native._lastwrite Scanner.scan) without a Python object per event.
 *
 * A record payload is a run of events, each a 4-byte little-endian length followed by the
 * event (19-byte header + body, checksum stripped; headwater/changes/__init__.py
 * encode_events). The common case is handled here: an uncompressed rows event (v1 or v2:
 * WRITE/UPDATE/DELETE_ROWS, type codes 23-25 and 30-32) of a table the caller mapped,
 * with every column present in its images. Its header (MySQL sql/log_event.h
 * Rows_log_event; libbinlogevents rows_event.h): table id (table_id_size bytes, 6 unless
 * the FORMAT_DESCRIPTION says 4), flags (2), for v2 an extra-data length (2, counting
 * itself) and that data, the column count (a packed integer: < 251 one byte, 252 + 2,
 * 253 + 3, 254 + 8 bytes), one columns-present bitmap of (count + 7) / 8 bytes, and for
 * an update a second one (the after image's). The row images follow to the event's end.
 *
 * Everything else stops the walk and is left to the Python walk, which gives every error
 * its usual typed exception: a TABLE_MAP (status TABLE_MAP: the caller parses it and
 * maps its table id), and any event this walk does not take (status SLOW: a rows event
 * of an unmapped table id, compressed, a JSON partial update, a partial image, a column
 * count other than the map's or the full image's width, or bytes that do not frame).
 * Events of other types are skipped; rows events of a table id mapped to None (another
 * table) too.
 *
 * Per event taken, the walk calls scanner.scan(op, shape, shape | None, payload, pos, end,
 * ordinal) (its ValueError propagates) and appends six native int64s to `out`: the map's
 * index, op, the body's start, the first row image's start, the event's end (offsets in
 * the payload) and the rows scan counted. A table entry of four items, (index, Shape,
 * width, scanner), names its own scanner (the net-effect apply walks every table of a
 * batch at once, one Scanner per table: headwater/pipeline/netapply.py); `stop_query`
 * (optional, default 0) stops at QUERY events too (type 2, and MariaDB's
 * QUERY_COMPRESSED_EVENT 165: MariaDB sql/log_event.h Log_event_type), status SLOW, for
 * the caller to look for DDL.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

enum { DONE = 0, TABLE_MAP = 1, SLOW = 2 };
enum { OP_INSERT = 0, OP_UPDATE = 1, OP_DELETE = 2 };
#define HEADER 19 /* the v4 event header: timestamp, type, server id, size, log_pos, flags */

static PyObject *scan_name;

static uint64_t le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* Whether the (width + 7) / 8 bytes at p have bits 0 .. width - 1 all set. */
static int all_present(const uint8_t *p, Py_ssize_t width) {
    Py_ssize_t full = width / 8;
    for (Py_ssize_t i = 0; i < full; i++)
        if (p[i] != 0xFF) return 0;
    int rest = (int)(width % 8);
    return rest == 0 || (p[full] & ((1 << rest) - 1)) == (1 << rest) - 1;
}

/* The op of a rows event type code this walk takes, or -1. */
static int op_of(int code) {
    switch (code) {
    case 23: case 30: return OP_INSERT;
    case 24: case 31: return OP_UPDATE;
    case 25: case 32: return OP_DELETE;
    default: return -1;
    }
}

/* walk(payload, pos, table_id_size, tables, scanner, ordinal, out, expected)
 *   -> (status, pos, ordinal)
 * Walks the events of `payload` from `pos` (an event's length prefix). `tables` maps a
 * table id to None (skip its events) or (index, Shape, width). `expected`: the full
 * image's width at the record's schema version, or -1 (unknown). Returns at the payload's
 * end (DONE) or at the event it stops at (TABLE_MAP, SLOW; `pos` is its length prefix),
 * with the next ordinal. */
static PyObject *walk(PyObject *module, PyObject *args) {
    PyObject *payload, *tables, *scanner, *out;
    Py_ssize_t pos, expected;
    int id_size, stop_query = 0;
    long long ordinal;
    if (!PyArg_ParseTuple(args, "SniO!OLO!n|p:walk", &payload, &pos, &id_size, &PyDict_Type,
                          &tables, &scanner, &ordinal, &PyByteArray_Type, &out, &expected,
                          &stop_query))
        return NULL;
    if (id_size != 4 && id_size != 6) {
        PyErr_SetString(PyExc_ValueError, "table_id_size must be 4 or 6");
        return NULL;
    }
    const uint8_t *buf = (const uint8_t *)PyBytes_AS_STRING(payload);
    Py_ssize_t len = PyBytes_GET_SIZE(payload);
    if (pos < 0 || pos > len || ordinal < 0) {
        PyErr_SetString(PyExc_ValueError, "pos or ordinal out of range");
        return NULL;
    }
    int status = DONE;
    while (pos < len) {
        if (len - pos < 4) { status = SLOW; break; }
        Py_ssize_t size = (Py_ssize_t)le(buf + pos, 4);
        Py_ssize_t start = pos + 4, end = start + size;
        if (size < HEADER || size > len - start) { status = SLOW; break; }
        int code = buf[start + 4];
        if (code == 19) { status = TABLE_MAP; break; }
        if (stop_query && (code == 2 || code == 165)) { status = SLOW; break; }
        int op = op_of(code);
        if (op < 0) {
            if (code == 39 || (code >= 166 && code <= 171)) {
                /* a partial JSON update or compressed rows: maybe of the table */
                Py_ssize_t body = start + HEADER;
                if (end - body < id_size) { status = SLOW; break; }
                PyObject *key = PyLong_FromUnsignedLongLong(le(buf + body, id_size));
                if (key == NULL) return NULL;
                PyObject *entry = PyDict_GetItemWithError(tables, key);
                Py_DECREF(key);
                if (entry == NULL && PyErr_Occurred()) return NULL;
                if (entry != Py_None) { status = SLOW; break; }
            }
            pos = end;
            continue;
        }
        int v2 = code >= 30;
        Py_ssize_t body = start + HEADER, p = body + id_size + 2;
        if (p + (v2 ? 2 : 0) > end) { status = SLOW; break; }
        PyObject *key = PyLong_FromUnsignedLongLong(le(buf + body, id_size));
        if (key == NULL) return NULL;
        PyObject *entry = PyDict_GetItemWithError(tables, key); /* borrowed */
        Py_DECREF(key);
        if (entry == NULL) {
            if (PyErr_Occurred()) return NULL;
            status = SLOW; /* no TABLE_MAP for it in this record: the Python walk says so */
            break;
        }
        if (entry == Py_None) { pos = end; continue; }
        Py_ssize_t index, width;
        PyObject *shape, *own = scanner;
        if (!PyTuple_Check(entry) ||
            !PyArg_ParseTuple(entry, "nOn|O;a table entry is (index, Shape, width[, scanner])",
                              &index, &shape, &width, &own))
            return NULL;
        if (v2) {
            Py_ssize_t extra = (Py_ssize_t)le(buf + p, 2);
            if (extra < 2 || extra > end - p) { status = SLOW; break; }
            p += extra;
        }
        if (p >= end) { status = SLOW; break; }
        uint64_t count = buf[p];
        int n = count < 251 ? 0 : count == 252 ? 2 : count == 253 ? 3 : count == 254 ? 8 : -1;
        if (n < 0 || p + 1 + n > end) { status = SLOW; break; }
        if (n) count = le(buf + p + 1, n);
        p += 1 + n;
        Py_ssize_t nb = (width + 7) / 8, images = op == OP_UPDATE ? 2 : 1;
        if (count != (uint64_t)width || (expected >= 0 && width != expected) ||
            nb * images > end - p || !all_present(buf + p, width) ||
            (op == OP_UPDATE && !all_present(buf + p + nb, width))) {
            status = SLOW;
            break;
        }
        p += nb * images;
        PyObject *nums[4] = {PyLong_FromLong(op), PyLong_FromSsize_t(p),
                             PyLong_FromSsize_t(end), PyLong_FromLongLong(ordinal)};
        PyObject *rows = NULL;
        if (nums[0] && nums[1] && nums[2] && nums[3]) {
            PyObject *call[8] = {own, nums[0], shape, op == OP_UPDATE ? shape : Py_None,
                                 payload, nums[1], nums[2], nums[3]};
            rows = PyObject_VectorcallMethod(scan_name, call,
                                             8, NULL);
        }
        for (int i = 0; i < 4; i++) Py_XDECREF(nums[i]);
        if (rows == NULL) return NULL;
        long long counted = PyLong_AsLongLong(rows);
        Py_DECREF(rows);
        if (counted == -1 && PyErr_Occurred()) return NULL;
        int64_t row[6] = {index, op, body, p, end, counted};
        Py_ssize_t at = PyByteArray_GET_SIZE(out);
        if (PyByteArray_Resize(out, at + (Py_ssize_t)sizeof row) < 0) return NULL;
        memcpy(PyByteArray_AS_STRING(out) + at, row, sizeof row);
        ordinal++;
        pos = end;
    }
    return Py_BuildValue("inL", status, pos, ordinal);
}

static PyMethodDef methods[] = {
    {"walk", walk, METH_VARARGS,
     "walk(payload, pos, table_id_size, tables, scanner, ordinal, out, expected[, stop_query])"
     " -> (status, pos, ordinal)"},
    {NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "headwater._native._walk",
    "The event walk of a replay's key pass, in C (see the source).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__walk(void) {
    scan_name = PyUnicode_InternFromString("scan");
    if (scan_name == NULL) return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL) return NULL;
    if (PyModule_AddIntConstant(m, "DONE", DONE) < 0 ||
        PyModule_AddIntConstant(m, "TABLE_MAP", TABLE_MAP) < 0 ||
        PyModule_AddIntConstant(m, "SLOW", SLOW) < 0 ||
        PyModule_AddIntConstant(m, "FIELDS", 6) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
