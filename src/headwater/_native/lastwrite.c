/*
 * headwater._native._lastwrite: the key-first pass of a replay (headwater/spark/asofscan.py).
 *
 * A replay's state is, per primary key, the key's last write when that write is a put
 * (headwater/spark/lastwrite.py argues why). This module finds those last writes without
 * building a Python object per row: it walks the row images of rows events, reads the
 * key columns' bytes only, and keeps per key (in a hash table of its own) the sequence of
 * its last write, whether it was a put, and where the put's after image starts in its
 * event. The caller then decodes only the after images that survive.
 *
 * Row image format (MySQL sql/rpl_record.cc unpack_row; MariaDB the same): a null bitmap
 * of one bit per present column, (present + 7) / 8 bytes, then the value of every present,
 * non-NULL column in column order. A value has a fixed width, or a k-byte little-endian
 * length followed by that many bytes (headwater/binlog/_columns.py value_width gives
 * either: n >= 0 fixed, -k prefixed). WRITE_ROWS holds one after image per row,
 * DELETE_ROWS one before image, UPDATE_ROWS a before and an after image per row
 * (sql/log_event.cc Rows_log_event).
 *
 * A key is compared by value, as headwater types it (sql/field.cc Field_*::pack gives the
 * bytes): integer columns (1, 2, 3, 4, 8 bytes, signed or unsigned) by their integer
 * value, so an ALTER from INT to BIGINT keeps keys equal; text columns by their bytes
 * (the caller only hands text in one charset class, whose decoding is one-to-one).
 * Each key column contributes a tag and its value to the key's bytes: 'n' (NULL), 'i' and
 * 8 bytes (an integer in int64 range), 'u' and 8 bytes (an unsigned above it), 's', a
 * 4-byte length and the bytes (text); so equal values give equal bytes, whatever their
 * column widths.
 *
 * Routing mode (Scanner.route; headwater/pipeline/netapply.py, the net-effect apply of a
 * pipeline micro-batch): instead of its own hash parts, the Scanner keeps the keys that the
 * SQL sinks' Spark glue routes to shard k of n: pmod(xxhash64(database, table, key), n),
 * Spark's xxhash64 (XXH64 chained over the UTF-8 bytes of each argument, seed 42; catalyst
 * hash.scala XxHash64 / XXH64.hashUnsafeBytes; pipeline/direct.py xxhash64 is the Python
 * twin) of the change row's `key` column text. That text is rendered here exactly as
 * _native/imagejson.c (= orjson 3.13) renders the key image: {"name":value,...} in key
 * column order, no spaces; integers in decimal; text as UTF-8 with ", \, \b \t \n \f
 * \r escaped and other bytes below 0x20 as \u00XX (lowercase hex), nothing else. Text
 * that the decoder would not decode strictly (invalid UTF-8 in a utf8 column, a byte
 * >= 0x80 in an ascii one: binlog/_columns.py keeps it as surrogate escapes and the key
 * text then takes image_json's escaped rendering) is not rendered here: scan raises
 * ValueError starting with UNROUTABLE, and the caller takes the row path.
 *
 * Fan-out (Scanner.fan): a routing Scanner given one routing Scanner per shard (shard k at
 * place k, each routed alike) keeps nothing itself: each write goes to the Scanner of its
 * key's shard. One walk of a batch then fills every shard's key pass (the net-effect
 * apply's one task for all shards) instead of one walk per shard, each throwing away the
 * other shards' keys after rendering and hashing them.
 *
 * removes() gives the keys whose last write is a remove (a delete, or the old key of a
 * key-changing update not put again), as columns, for a delta apply. Each key also
 * records whether its first write in the scanned range created it (WRITE_ROWS' key, or
 * an UPDATE_ROWS row's after key when it differs from the row's before key): such a key
 * did not exist when the range began (the source's primary key is unique: an insert of a
 * held key fails, and an update onto one too). removes(existing=True) leaves those keys
 * out: a delta apply to a target whose state is the source's at the range's start (the
 * SQL sinks' exactly-once shards; sinks/merge.py's collapse drops the same keys, "created
 * in this batch and gone again") has nothing to remove for them. A key deleted, then
 * inserted again, then deleted is still a remove: its first write was the delete.
 *
 * Errors: a row running past `end` or a length past the buffer raises ValueError with
 * TRUNC's text (the caller turns it into TruncatedError).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static const char TRUNC[] = "row image runs past the end of the event";
static const char UNROUTABLE[] = "unroutable key";

enum { KEY_NONE = 0, KEY_SIGNED = 1, KEY_UNSIGNED = 2, KEY_TEXT = 3 };
enum { OP_INSERT = 0, OP_UPDATE = 1, OP_DELETE = 2 };

/* ---- Shape: one row image's present columns ------------------------------------------ */

typedef struct {
    PyObject_HEAD
    Py_ssize_t n;     /* present columns */
    Py_ssize_t nb;    /* null bitmap bytes */
    int nkeys;        /* key columns */
    int *width;       /* per present column: fixed bytes (>= 0) or -prefix bytes */
    int *slot;        /* per present column: its place in the key (>= 0), or -1 */
    int *kind;        /* per key place: KEY_* */
} Shape;

static void Shape_dealloc(Shape *self) {
    PyMem_Free(self->width);
    PyMem_Free(self->slot);
    PyMem_Free(self->kind);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Shape_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    PyObject *widths, *keys;
    if (!PyArg_ParseTuple(args, "O!O!:Shape", &PyTuple_Type, &widths, &PyTuple_Type, &keys))
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(widths), k = PyTuple_GET_SIZE(keys);
    if (n < 1 || k < 1 || k > 64) {
        PyErr_SetString(PyExc_ValueError, "a shape needs columns and 1 to 64 key columns");
        return NULL;
    }
    Shape *self = (Shape *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->n = n;
    self->nb = (n + 7) / 8;
    self->nkeys = (int)k;
    self->width = PyMem_Calloc((size_t)n, sizeof(int));
    self->slot = PyMem_Calloc((size_t)n, sizeof(int));
    self->kind = PyMem_Calloc((size_t)k, sizeof(int));
    if (!self->width || !self->slot || !self->kind) {
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
        self->slot[i] = -1;
    }
    /* keys: ((position in the image, KEY_*), ...) in key order */
    for (Py_ssize_t j = 0; j < k; j++) {
        int at, kind;
        PyObject *item = PyTuple_GET_ITEM(keys, j);
        if (!PyTuple_Check(item) || !PyArg_ParseTuple(item, "ii;a key is (position, kind)", &at, &kind))
            goto fail;
        if (at < 0 || at >= n || self->slot[at] != -1 || kind < KEY_SIGNED || kind > KEY_TEXT) {
            PyErr_Format(PyExc_ValueError, "key column at %d of kind %d", at, kind);
            goto fail;
        }
        int w = self->width[at];
        if ((kind == KEY_TEXT) != (w < 0) ||
            (kind != KEY_TEXT && w != 1 && w != 2 && w != 3 && w != 4 && w != 8)) {
            PyErr_Format(PyExc_ValueError, "key kind %d with width %d", kind, w);
            goto fail;
        }
        self->slot[at] = (int)j;
        self->kind[j] = kind;
    }
    return (PyObject *)self;
fail:
    Py_DECREF(self);
    return NULL;
}

static PyTypeObject ShapeType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "headwater._native._lastwrite.Shape",
    .tp_basicsize = sizeof(Shape),
    .tp_dealloc = (destructor)Shape_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Shape(widths, keys): the present columns of one row image and its key",
    .tp_new = Shape_new,
};

/* ---- the key of one image ------------------------------------------------------------ */

typedef struct {
    uint8_t *b;
    size_t len, cap;
} Bytes;

static int put_bytes(Bytes *o, const void *p, size_t n) {
    if (o->len + n > o->cap) {
        size_t cap = o->cap ? o->cap : 64;
        while (cap < o->len + n) cap *= 2;
        uint8_t *b = PyMem_Realloc(o->b, cap);
        if (b == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        o->b = b;
        o->cap = cap;
    }
    memcpy(o->b + o->len, p, n);
    o->len += n;
    return 0;
}

static inline uint64_t le_n(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

typedef struct {
    const uint8_t *p;
    uint32_t len;
    int null;
} Val;

/* Walks one image at *pos (bounded by len); fills vals[slot] for the key columns and
 * advances *pos. Returns 0, or -1 with ValueError(TRUNC) set. */
static int walk(const Shape *s, const uint8_t *buf, Py_ssize_t len, Py_ssize_t *pos, Val *vals) {
    Py_ssize_t p = *pos;
    if (p + s->nb > len) goto trunc;
    const uint8_t *nulls = buf + p;
    p += s->nb;
    for (Py_ssize_t i = 0; i < s->n; i++) {
        int slot = s->slot[i];
        if (nulls[i >> 3] >> (i & 7) & 1) {
            if (slot >= 0) vals[slot].null = 1;
            continue;
        }
        int w = s->width[i];
        Py_ssize_t vlen;
        if (w >= 0) {
            vlen = w;
        } else {
            if (p + -w > len) goto trunc;
            vlen = (Py_ssize_t)le_n(buf + p, -w);
            p += -w;
        }
        if (vlen > len - p) goto trunc;
        if (slot >= 0) {
            vals[slot].p = buf + p;
            vals[slot].len = (uint32_t)vlen;
            vals[slot].null = 0;
        }
        p += vlen;
    }
    *pos = p;
    return 0;
trunc:
    PyErr_SetString(PyExc_ValueError, TRUNC);
    return -1;
}

/* The key's bytes (module docstring) into `out`, room made once: every row of every
 * event goes through here (a part's framing), and a call per tag and value to
 * put_bytes was a tenth of it. */
static int key_bytes(const Shape *s, const Val *vals, Bytes *out) {
    size_t need = 0;
    for (int j = 0; j < s->nkeys; j++)
        need += vals[j].null ? 1 : s->kind[j] == KEY_TEXT ? 5 + (size_t)vals[j].len : 9;
    out->len = 0;
    if (need > out->cap) {
        size_t cap = out->cap ? out->cap : 64;
        while (cap < need) cap *= 2;
        uint8_t *b = PyMem_Realloc(out->b, cap);
        if (b == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        out->b = b;
        out->cap = cap;
    }
    uint8_t *o = out->b;
    for (int j = 0; j < s->nkeys; j++) {
        const Val *v = &vals[j];
        if (v->null) {
            *o++ = 'n';
            continue;
        }
        if (s->kind[j] == KEY_TEXT) {
            o[0] = 's';
            for (int b = 0; b < 4; b++) o[1 + b] = (uint8_t)(v->len >> (8 * b));
            memcpy(o + 5, v->p, v->len);
            o += 5 + v->len;
            continue;
        }
        int n = (int)v->len;
        uint64_t u = le_n(v->p, n);
        if (s->kind[j] == KEY_SIGNED && n < 8 && (u >> (8 * n - 1) & 1))
            u |= ~(uint64_t)0 << (8 * n); /* sign extension */
        o[0] = (s->kind[j] == KEY_UNSIGNED && u > (uint64_t)INT64_MAX) ? 'u' : 'i';
        for (int b = 0; b < 8; b++) o[1 + b] = (uint8_t)(u >> (8 * b));
        o += 9;
    }
    out->len = (size_t)(o - out->b);
    return 0;
}


/* ---- routing: Spark's xxhash64 of the key's JSON text -------------------------------- */

#define P1 0x9E3779B185EBCA87ULL
#define P2 0xC2B2AE3D27D4EB4FULL
#define P3 0x165667B19E3779F9ULL
#define P4 0x85EBCA77C2B2AE63ULL
#define P5 0x27D4EB2F165667C5ULL

static inline uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
static inline uint64_t xround(uint64_t acc, uint64_t lane) {
    return rotl64(acc + lane * P2, 31) * P1;
}
static inline uint64_t rd64(const uint8_t *p) { return le_n(p, 8); }
static inline uint64_t rd32(const uint8_t *p) { return le_n(p, 4); }

/* XXH64 (the reference algorithm; Spark's XXH64.hashUnsafeBytes reads little-endian). */
static uint64_t xxh64(const uint8_t *p, size_t n, uint64_t seed) {
    size_t i = 0;
    uint64_t h;
    if (n >= 32) {
        uint64_t v1 = seed + P1 + P2, v2 = seed + P2, v3 = seed, v4 = seed - P1;
        for (; i + 32 <= n; i += 32) {
            v1 = xround(v1, rd64(p + i));
            v2 = xround(v2, rd64(p + i + 8));
            v3 = xround(v3, rd64(p + i + 16));
            v4 = xround(v4, rd64(p + i + 24));
        }
        h = rotl64(v1, 1) + rotl64(v2, 7) + rotl64(v3, 12) + rotl64(v4, 18);
        h = (h ^ xround(0, v1)) * P1 + P4;
        h = (h ^ xround(0, v2)) * P1 + P4;
        h = (h ^ xround(0, v3)) * P1 + P4;
        h = (h ^ xround(0, v4)) * P1 + P4;
    } else {
        h = seed + P5;
    }
    h += n;
    for (; i + 8 <= n; i += 8) {
        h ^= xround(0, rd64(p + i));
        h = rotl64(h, 27) * P1 + P4;
    }
    if (i + 4 <= n) {
        h ^= rd32(p + i) * P1;
        h = rotl64(h, 23) * P2 + P3;
        i += 4;
    }
    for (; i < n; i++) {
        h ^= p[i] * P5;
        h = rotl64(h, 11) * P1;
    }
    h ^= h >> 33;
    h *= P2;
    h ^= h >> 29;
    h *= P3;
    h ^= h >> 32;
    return h;
}

/* Whether Python's strict UTF-8 decoder accepts s[0:n] (no overlong forms, no surrogates,
 * nothing above U+10FFFF: Objects/stringlib/codecs.h). */
static int utf8_valid(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t need;
        uint8_t lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) {
            need = 1;
        } else if (c >= 0xE0 && c <= 0xEF) {
            need = 2;
            if (c == 0xE0) lo = 0xA0;
            if (c == 0xED) hi = 0x9F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            need = 3;
            if (c == 0xF0) lo = 0x90;
            if (c == 0xF4) hi = 0x8F;
        } else {
            return 0;
        }
        if (n - i - 1 < need) return 0;
        if (s[i + 1] < lo || s[i + 1] > hi) return 0;
        for (size_t k = 2; k <= need; k++)
            if (s[i + k] < 0x80 || s[i + k] > 0xBF) return 0;
        i += need + 1;
    }
    return 1;
}

static const char HEXD[] = "0123456789abcdef";

/* s[0:n] as a JSON string, with orjson's escapes (imagejson.c put_string). */
static int json_string(Bytes *o, const uint8_t *s, size_t n) {
    uint8_t q = '"';
    if (put_bytes(o, &q, 1) < 0) return -1;
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t c = s[i];
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        if (i > run && put_bytes(o, s + run, i - run) < 0) return -1;
        run = i + 1;
        uint8_t esc[6] = {'\\', 0, 0, 0, 0, 0};
        size_t len = 2;
        switch (c) {
        case '"': esc[1] = '"'; break;
        case '\\': esc[1] = '\\'; break;
        case '\b': esc[1] = 'b'; break;
        case '\t': esc[1] = 't'; break;
        case '\n': esc[1] = 'n'; break;
        case '\f': esc[1] = 'f'; break;
        case '\r': esc[1] = 'r'; break;
        default:
            esc[1] = 'u';
            esc[2] = '0';
            esc[3] = '0';
            esc[4] = (uint8_t)HEXD[c >> 4];
            esc[5] = (uint8_t)HEXD[c & 15];
            len = 6;
        }
        if (put_bytes(o, esc, len) < 0) return -1;
    }
    if (n > run && put_bytes(o, s + run, n - run) < 0) return -1;
    return put_bytes(o, &q, 1);
}

static int json_u64(Bytes *o, uint64_t u, int neg) {
    uint8_t tmp[24];
    int i = sizeof tmp;
    do {
        tmp[--i] = (uint8_t)('0' + u % 10);
        u /= 10;
    } while (u);
    if (neg) tmp[--i] = '-';
    return put_bytes(o, tmp + i, sizeof tmp - (size_t)i);
}

typedef struct {
    uint64_t seed;       /* xxhash64 state after database and table */
    uint64_t shards, shard;
    int nkeys;
    Bytes *names;        /* per key place: `"name":` */
    uint8_t *ascii;      /* per key place: text must be ASCII (an ascii column) */
    Bytes json;          /* scratch: the key text */
} Route;

/* The key text of tagged key bytes `kb` (key_bytes' encoding) into r->json. Returns 0,
 * 1 when a text value is not one the decoder decodes strictly (UNROUTABLE), -1 on error. */
static int key_json(Route *r, const uint8_t *kb, size_t klen) {
    Bytes *o = &r->json;
    o->len = 0;
    size_t at = 0;
    uint8_t c = '{';
    if (put_bytes(o, &c, 1) < 0) return -1;
    for (int j = 0; j < r->nkeys; j++) {
        if (j) {
            c = ',';
            if (put_bytes(o, &c, 1) < 0) return -1;
        }
        if (put_bytes(o, r->names[j].b, r->names[j].len) < 0) return -1;
        if (at >= klen) return 1;
        uint8_t tag = kb[at++];
        if (tag == 'n') {
            if (put_bytes(o, "null", 4) < 0) return -1;
        } else if (tag == 'i' || tag == 'u') {
            uint64_t u = le_n(kb + at, 8);
            at += 8;
            int neg = tag == 'i' && (int64_t)u < 0;
            if (json_u64(o, neg ? (uint64_t)0 - u : u, neg) < 0) return -1;
        } else {
            size_t n = (size_t)le_n(kb + at, 4);
            at += 4;
            const uint8_t *s = kb + at;
            at += n;
            if (r->ascii[j]) {
                for (size_t i = 0; i < n; i++)
                    if (s[i] >= 0x80) return 1;
            } else if (!utf8_valid(s, n)) {
                return 1;
            }
            if (json_string(o, s, n) < 0) return -1;
        }
    }
    c = '}';
    return put_bytes(o, &c, 1);
}

/* The shard of a key (>= 0), or -1 with ValueError set (UNROUTABLE, or memory). */
static int64_t route_of(Route *r, const uint8_t *kb, size_t klen) {
    int rc = key_json(r, kb, klen);
    if (rc != 0) {
        if (rc > 0) PyErr_Format(PyExc_ValueError, "%s: text the decoder keeps as surrogate "
                                 "escapes", UNROUTABLE);
        return -1;
    }
    int64_t h = (int64_t)xxh64(r->json.b, r->json.len, r->seed);
    int64_t m = h % (int64_t)r->shards;
    return m < 0 ? m + (int64_t)r->shards : m;
}

static void route_free(Route *r) {
    if (r == NULL) return;
    for (int j = 0; j < r->nkeys; j++) PyMem_Free(r->names[j].b);
    PyMem_Free(r->names);
    PyMem_Free(r->ascii);
    PyMem_Free(r->json.b);
    PyMem_Free(r);
}

/* ---- Scanner: the last write per key of one hash part -------------------------------- */

#define INLINE_KEY 16 /* keys up to this long live in their entry (an integer's 9 bytes) */

typedef struct {
    uint64_t hash;     /* 0: empty */
    int64_t seq;
    uint32_t offset;   /* a put's after image start in its event */
    uint16_t keylen;
    uint8_t present;
    uint8_t created;   /* its first write in the range created it (module docstring) */
    union {
        uint8_t bytes[INLINE_KEY];
        uint8_t *ptr;  /* longer keys: in the arena */
    } key;
} Entry;

/* `created` sits in what was padding before the key: 40 bytes, as without it */
_Static_assert(sizeof(Entry) == 40, "an Entry is 40 bytes");

static inline const uint8_t *entry_key(const Entry *e) {
    return e->keylen <= INLINE_KEY ? e->key.bytes : e->key.ptr;
}

/* The hash table's memory. A large table (millions of keys) is touched at random, one
 * slot per write: with 4 KiB pages nearly every write also misses the TLB, and the page
 * walk stalled even the slot's prefetch (perf: about a third of the key pass). A table of
 * TABLE_HUGE bytes or more is therefore mapped on its own, aligned to 2 MiB, and advised
 * as huge pages (MADV_HUGEPAGE: transparent huge pages in their usual `madvise` mode;
 * elsewhere the advice is ignored and nothing changes) once it is dense enough: at once
 * for a table made by grow() (a third full), and for a table sized from a hint when its
 * keys reach cap / 1024, when the pages touched so far are collapsed too (MADV_COLLAPSE,
 * Linux 6.1+; without it they stay small). Then about a tenth of its 4 KiB pages (102
 * entries each) are touched already: a hint far above the keys that come (many writes to
 * few keys) maps no huge pages, and one that stops just past the threshold holds at most
 * about ten times the resident memory small pages would. Collapsing at cap / 64 instead
 * copied so much that it gained nothing. Key pass of bench/replay.py's 2.1 million
 * changes, one part of two, in-process (load 3.4): 0.18 -> 0.13 CPU-seconds. */
#define TABLE_HUGE ((size_t)4 << 20)
#define HUGE_PAGE ((size_t)2 << 20)
#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif

static Entry *table_alloc(size_t n) {
    size_t bytes = n * sizeof(Entry);
    if (bytes < TABLE_HUGE) return PyMem_Calloc(n, sizeof(Entry));
    /* anonymous memory comes zeroed: no memset; mapped 2 MiB more to align its start */
    uint8_t *raw = mmap(NULL, bytes + HUGE_PAGE, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return NULL;
    uint8_t *p = (uint8_t *)(((uintptr_t)raw + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
    if (p > raw) munmap(raw, (size_t)(p - raw));
    if (raw + HUGE_PAGE > p) munmap(p + bytes, (size_t)(raw + HUGE_PAGE - p));
    return (Entry *)p;
}

/* Advises a table of table_alloc as huge pages (and collapses what is touched already). */
static void table_huge(Entry *table, size_t n, int collapse) {
    size_t bytes = n * sizeof(Entry);
    if (bytes < TABLE_HUGE || table == NULL) return;
#ifdef MADV_HUGEPAGE
    (void)madvise(table, bytes, MADV_HUGEPAGE);
    if (collapse) (void)madvise(table, bytes, MADV_COLLAPSE); /* EINVAL before 6.1: ignored */
#endif
}

static void table_free(Entry *table, size_t n) {
    if (n * sizeof(Entry) < TABLE_HUGE)
        PyMem_Free(table);
    else if (table != NULL)
        munmap(table, n * sizeof(Entry));
}

typedef struct {
    size_t key_at, key_len;
    uint64_t hash;
    int64_t seq, offset;
    int present, created;
} Pending;

typedef struct Chunk {
    struct Chunk *next;
    size_t used, cap;
    uint8_t data[];
} Chunk;

typedef struct {
    PyObject_HEAD
    uint64_t parts, part;
    Entry *table;
    size_t cap, used;    /* cap: a power of two */
    size_t dense;        /* advise huge pages when `used` reaches it (0: done) */
    Chunk *arena;
    Bytes kb, ka;        /* scratch keys */
    Val *vb, *va;        /* scratch values, 64 each */
    Pending *pending;    /* the event's writes not yet applied */
    size_t npending, cap_pending;
    Bytes keys;          /* their keys */
    Route *route;        /* routing mode (Scanner.route), or NULL: hash parts */
    PyObject *fan;       /* fan-out (Scanner.fan): a tuple of a Scanner per shard, or NULL */
} Scanner;

static void Scanner_dealloc(Scanner *self) {
    table_free(self->table, self->cap);
    Chunk *c = self->arena;
    while (c) {
        Chunk *next = c->next;
        PyMem_Free(c);
        c = next;
    }
    PyMem_Free(self->kb.b);
    PyMem_Free(self->ka.b);
    PyMem_Free(self->vb);
    PyMem_Free(self->va);
    PyMem_Free(self->pending);
    PyMem_Free(self->keys.b);
    route_free(self->route);
    Py_XDECREF(self->fan);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The most keys a size hint sizes the table for (2^24: a table of 2^25 40-byte entries,
 * 1.25 GiB); more keys than that grow the table as without a hint. */
#define HINT_MAX ((unsigned long long)1 << 24)

/* Scanner(parts, part, hint=0): `hint`, the keys this part is expected to hold (the
 * caller's estimate from the records' row counts), sizes the table up front so that it
 * is not rehashed as it fills (a wrong hint costs memory or growth, never a result). */
static PyObject *Scanner_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    unsigned long long parts, part, hint = 0;
    if (!PyArg_ParseTuple(args, "KK|K:Scanner", &parts, &part, &hint)) return NULL;
    if (parts < 1 || part >= parts || parts > (1ULL << 32)) {
        PyErr_SetString(PyExc_ValueError, "part must be in [0, parts), parts at most 2**32");
        return NULL;
    }
    Scanner *self = (Scanner *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->parts = parts;
    self->part = part;
    self->cap = 1024;
    if (hint > HINT_MAX) hint = HINT_MAX;
    while ((hint + 1) * 10 > self->cap * 7) self->cap *= 2; /* record_write's load limit */
    self->table = table_alloc(self->cap);
    self->dense = self->cap / 1024;
    self->vb = PyMem_Calloc(64, sizeof(Val));
    self->va = PyMem_Calloc(64, sizeof(Val));
    if (!self->table || !self->vb || !self->va) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    return (PyObject *)self;
}

/* The key's 8-byte words (little-endian; the tail's bytes as one more word) folded by
 * multiply and xor-shift, then a finalizer (murmur3 fmix64) so that the table's slots
 * (low bits) and the parts (high bits) split evenly. It was FNV-1a byte by byte: a
 * multiply per byte in one dependency chain, a quarter of the key pass's own time on
 * 9-byte integer keys (perf). */
static uint64_t hash_of(const uint8_t *p, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t)n;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdULL;
        h ^= h >> 29;
    }
    if (i < n) {
        uint64_t w = 0;
        for (size_t k = i; k < n; k++) w |= (uint64_t)p[k] << (8 * (k - i));
        h = (h ^ w) * 0xc4ceb9fe1a85ec53ULL;
        h ^= h >> 29;
    }
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 33;
    return h ? h : 1;
}

/* The part of a hash: its high 32 bits scaled to [0, parts) by a multiply (a 64-bit
 * division per row was a sixth of the key pass's own time). With the word hash, the key
 * pass of bench/replay.py's 2.1 million changes, one part of two: 0.137 -> 0.124
 * CPU-seconds (paired runs, load 2.7). */
static inline uint64_t part_of(uint64_t h, uint64_t parts) {
    return ((h >> 32) * parts) >> 32;
}

static uint8_t *arena_copy(Scanner *self, const uint8_t *p, size_t n) {
    Chunk *c = self->arena;
    if (c == NULL || c->cap - c->used < n) {
        size_t cap = n > 1 << 20 ? n : 1 << 20;
        Chunk *fresh = PyMem_Malloc(sizeof(Chunk) + cap);
        if (fresh == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
        fresh->next = c;
        fresh->used = 0;
        fresh->cap = cap;
        self->arena = c = fresh;
    }
    uint8_t *at = c->data + c->used;
    memcpy(at, p, n);
    c->used += n;
    return at;
}

static int grow(Scanner *self) {
    size_t cap = self->cap * 2;
    Entry *t = table_alloc(cap);
    if (t == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    table_huge(t, cap, 0); /* (it is a third full at once: dense) */
    for (size_t i = 0; i < self->cap; i++) {
        Entry *e = &self->table[i];
        if (!e->hash) continue;
        size_t j = e->hash & (cap - 1);
        while (t[j].hash) j = (j + 1) & (cap - 1);
        t[j] = *e;
    }
    table_free(self->table, self->cap);
    self->dense = 0;
    self->table = t;
    self->cap = cap;
    return 0;
}

/* Records a write to `key` (when it is of this part): put (present, offset) or remove;
 * `created`: the write creates the key (kept only when it is the key's first write). */
static int record_write(Scanner *self, const uint8_t *kb, size_t klen, uint64_t h, int64_t seq,
                        int present, int created, int64_t offset) {
    size_t mask = self->cap - 1, j = h & mask;
    for (;;) {
        Entry *e = &self->table[j];
        if (!e->hash) break;
        if (e->hash == h && e->keylen == klen && memcmp(entry_key(e), kb, klen) == 0) {
            e->seq = seq;
            e->present = (uint8_t)present;
            e->offset = (uint32_t)offset;
            return 0;
        }
        j = (j + 1) & mask;
    }
    if ((self->used + 1) * 10 > self->cap * 7) {
        if (grow(self) < 0) return -1;
        return record_write(self, kb, klen, h, seq, present, created, offset);
    }
    Entry *e = &self->table[j];
    if (klen <= INLINE_KEY) {
        memcpy(e->key.bytes, kb, klen);
    } else {
        uint8_t *copy = arena_copy(self, kb, klen);
        if (copy == NULL) return -1;
        e->key.ptr = copy;
    }
    e->hash = h;
    e->keylen = (uint16_t)klen;
    e->seq = seq;
    e->present = (uint8_t)present;
    e->created = (uint8_t)created;
    e->offset = (uint32_t)offset;
    if (++self->used == self->dense) {
        table_huge(self->table, self->cap, 1);
        self->dense = 0;
    }
    return 0;
}

/* The writes of one event, gathered before they are applied so that the table slots they
 * touch are prefetched together (each is a cache miss in a table of millions of keys). */
static int pend(Scanner *self, const Bytes *key, int64_t seq, int present, int created,
                int64_t offset) {
    if (key->len > UINT16_MAX) {
        PyErr_SetString(PyExc_ValueError, "a key of more than 65535 bytes");
        return -1;
    }
    uint64_t h = hash_of(key->b, key->len);
    if (self->route != NULL) {
        int64_t shard = route_of(self->route, key->b, key->len);
        if (shard < 0) return -1;
        if (self->fan != NULL)
            self = (Scanner *)PyTuple_GET_ITEM(self->fan, shard); /* the shard's own */
        else if ((uint64_t)shard != self->route->shard)
            return 0;
    } else if (self->parts > 1 && part_of(h, self->parts) != self->part) {
        return 0;
    }
    if (self->npending == self->cap_pending) {
        size_t cap = self->cap_pending ? self->cap_pending * 2 : 256;
        Pending *p = PyMem_Realloc(self->pending, cap * sizeof(Pending));
        if (p == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        self->pending = p;
        self->cap_pending = cap;
    }
    Pending *w = &self->pending[self->npending++];
    w->key_at = self->keys.len;
    w->key_len = key->len;
    w->hash = h;
    w->seq = seq;
    w->offset = offset;
    w->present = present;
    w->created = created;
    __builtin_prefetch(&self->table[h & (self->cap - 1)], 1);
    return put_bytes(&self->keys, key->b, key->len);
}

static int apply_pending(Scanner *self) {
    for (size_t i = 0; i < self->npending; i++) {
        const Pending *w = &self->pending[i];
        if (record_write(self, self->keys.b + w->key_at, w->key_len, w->hash, w->seq, w->present,
                         w->created, w->offset) < 0)
            return -1;
    }
    self->npending = 0;
    self->keys.len = 0;
    return 0;
}

/* apply_pending of the Scanner, or of every Scanner it fans out to. */
static int apply_all(Scanner *self) {
    if (self->fan == NULL) return apply_pending(self);
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(self->fan); i++)
        if (apply_pending((Scanner *)PyTuple_GET_ITEM(self->fan, i)) < 0) return -1;
    return 0;
}

/* Drops the writes not applied (after an error nothing of the event is applied). */
static void drop_pending(Scanner *self) {
    self->npending = 0;
    self->keys.len = 0;
    if (self->fan == NULL) return;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(self->fan); i++) {
        Scanner *to = (Scanner *)PyTuple_GET_ITEM(self->fan, i);
        to->npending = 0;
        to->keys.len = 0;
    }
}

static int same(const Bytes *a, const Bytes *b) {
    return a->len == b->len && memcmp(a->b, b->b, a->len) == 0;
}

/* scan(op, first, second, buf, pos, end, ordinal) -> rows: the writes of every row of one
 * rows event, in order. `first` is the shape of the after image (insert) or of the before
 * image (update, delete), `second` the after image's of an update (else None). Row r's
 * sequence is ordinal << 32 | r. */
static PyObject *Scanner_scan(Scanner *self, PyObject *args) {
    int op;
    PyObject *first, *second;
    Py_buffer view;
    Py_ssize_t pos, end;
    long long ordinal;
    if (!PyArg_ParseTuple(args, "iO!Oy*nnL:scan", &op, &ShapeType, &first, &second, &view, &pos,
                          &end, &ordinal))
        return NULL;
    PyObject *result = NULL;
    const Shape *a = (const Shape *)first, *b = NULL;
    if (op == OP_UPDATE) {
        if (!PyObject_TypeCheck(second, &ShapeType)) {
            PyErr_SetString(PyExc_TypeError, "an update needs the after image's shape");
            goto done;
        }
        b = (const Shape *)second;
        if (b->nkeys != a->nkeys) {
            PyErr_SetString(PyExc_ValueError, "before and after keys differ in columns");
            goto done;
        }
    } else if (op != OP_INSERT && op != OP_DELETE) {
        PyErr_Format(PyExc_ValueError, "op %d", op);
        goto done;
    }
    if (self->route != NULL && a->nkeys != self->route->nkeys) {
        PyErr_SetString(PyExc_ValueError, "the shape's key and the route's differ in columns");
        goto done;
    }
    if (pos < 0 || end > view.len || end > (Py_ssize_t)UINT32_MAX || ordinal < 0 ||
        ordinal >= (1LL << 31)) {
        PyErr_SetString(PyExc_ValueError, "pos, end or ordinal out of range");
        goto done;
    }
    const uint8_t *buf = view.buf;
    int64_t row = 0;
    while (pos < end) {
        int64_t seq = (int64_t)ordinal << 32 | row;
        Py_ssize_t at = pos;
        if (walk(a, buf, end, &pos, self->vb) < 0 || key_bytes(a, self->vb, &self->kb) < 0)
            goto done;
        if (op == OP_INSERT) {
            if (pend(self, &self->kb, seq, 1, 1, at) < 0) goto done;
        } else if (op == OP_DELETE) {
            if (pend(self, &self->kb, seq, 0, 0, 0) < 0) goto done;
        } else {
            at = pos;
            if (walk(b, buf, end, &pos, self->va) < 0 || key_bytes(b, self->va, &self->ka) < 0)
                goto done;
            /* a key-changing update removes its before key and creates its after key; one
             * that keeps its key puts a key that existed */
            int moved = !same(&self->kb, &self->ka);
            if (moved && pend(self, &self->kb, seq, 0, 0, 0) < 0) goto done;
            if (pend(self, &self->ka, seq, 1, moved, at) < 0) goto done;
        }
        row++;
        if (row >= (1LL << 32)) {
            PyErr_SetString(PyExc_ValueError, "more than 2**32 rows in one event");
            goto done;
        }
    }
    if (apply_all(self) < 0) goto done;
    result = PyLong_FromLongLong(row);
done:
    drop_pending(self); /* after an error nothing of the event is applied */
    PyBuffer_Release(&view);
    return result;
}

/* Sorts n (seq, offset) pairs by seq (>= 0): LSD radix sort by 16-bit digits, skipping
 * the digits all seqs share (an event ordinal and a row index use few of the 64 bits). */
static int sort_pairs(int64_t *pairs, size_t n) {
    int64_t *tmp = PyMem_Malloc((n ? n : 1) * 2 * sizeof(int64_t));
    size_t *count = PyMem_Malloc(65536 * sizeof(size_t));
    if (tmp == NULL || count == NULL) {
        PyMem_Free(tmp);
        PyMem_Free(count);
        PyErr_NoMemory();
        return -1;
    }
    int64_t *src = pairs, *dst = tmp;
    for (int shift = 0; shift < 64; shift += 16) {
        memset(count, 0, 65536 * sizeof(size_t));
        for (size_t i = 0; i < n; i++) count[(uint64_t)src[2 * i] >> shift & 0xFFFF]++;
        if (n == 0 || count[(uint64_t)src[0] >> shift & 0xFFFF] == n) continue;
        size_t at = 0;
        for (size_t d = 0; d < 65536; d++) {
            size_t c = count[d];
            count[d] = at;
            at += c;
        }
        for (size_t i = 0; i < n; i++) {
            size_t to = count[(uint64_t)src[2 * i] >> shift & 0xFFFF]++;
            dst[2 * to] = src[2 * i];
            dst[2 * to + 1] = src[2 * i + 1];
        }
        int64_t *swap = src;
        src = dst;
        dst = swap;
    }
    if (src != pairs) memcpy(pairs, src, n * 2 * sizeof(int64_t));
    PyMem_Free(tmp);
    PyMem_Free(count);
    return 0;
}

/* survivors() -> (seqs, offsets): the puts that are their key's last write, as two bytes
 * objects of native int64s, in sequence order. */
static PyObject *Scanner_survivors(Scanner *self, PyObject *unused) {
    /* one pass over the table (tens of MB), into room for every key it holds */
    int64_t *pairs = PyMem_Malloc((self->used ? self->used : 1) * 2 * sizeof(int64_t));
    if (pairs == NULL) return PyErr_NoMemory();
    size_t n = 0;
    for (size_t i = 0; i < self->cap; i++) {
        const Entry *e = &self->table[i];
        if (e->hash && e->present) {
            pairs[2 * n] = e->seq;
            pairs[2 * n + 1] = e->offset;
            n++;
        }
    }
    if (sort_pairs(pairs, n) < 0) {
        PyMem_Free(pairs);
        return NULL;
    }
    PyObject *seqs = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * sizeof(int64_t)));
    PyObject *offsets = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * sizeof(int64_t)));
    if (seqs == NULL || offsets == NULL) {
        Py_XDECREF(seqs);
        Py_XDECREF(offsets);
        PyMem_Free(pairs);
        return NULL;
    }
    int64_t *s = (int64_t *)PyBytes_AS_STRING(seqs), *o = (int64_t *)PyBytes_AS_STRING(offsets);
    for (size_t i = 0; i < n; i++) {
        s[i] = pairs[2 * i];
        o[i] = pairs[2 * i + 1];
    }
    PyMem_Free(pairs);
    return Py_BuildValue("(NN)", seqs, offsets);
}

/* utf-8 bytes of a str (surrogatepass: as direct.xxhash64 encodes names). */
static PyObject *utf8_of(PyObject *text) {
    if (!PyUnicode_Check(text)) {
        PyErr_SetString(PyExc_TypeError, "names must be str");
        return NULL;
    }
    return PyUnicode_AsEncodedString(text, "utf-8", "surrogatepass");
}

/* route(database, table, names, ascii, shards, shard): routing mode (module docstring). */
static PyObject *Scanner_route(Scanner *self, PyObject *args) {
    PyObject *database, *table, *names, *ascii;
    unsigned long long shards, shard;
    if (!PyArg_ParseTuple(args, "UUO!O!KK:route", &database, &table, &PyTuple_Type, &names,
                          &PyTuple_Type, &ascii, &shards, &shard))
        return NULL;
    Py_ssize_t k = PyTuple_GET_SIZE(names);
    if (shards < 1 || shard >= shards || k < 1 || k > 64 || PyTuple_GET_SIZE(ascii) != k) {
        PyErr_SetString(PyExc_ValueError, "route: shard in [0, shards), 1 to 64 key names, "
                        "one ascii flag each");
        return NULL;
    }
    if (self->used || self->route != NULL) {
        PyErr_SetString(PyExc_ValueError, "route: set once, before the first scan");
        return NULL;
    }
    Route *r = PyMem_Calloc(1, sizeof(Route));
    if (r == NULL) return PyErr_NoMemory();
    r->shards = shards;
    r->shard = shard;
    r->names = PyMem_Calloc((size_t)k, sizeof(Bytes));
    r->ascii = PyMem_Calloc((size_t)k, 1);
    if (r->names == NULL || r->ascii == NULL) {
        route_free(r);
        return PyErr_NoMemory();
    }
    r->nkeys = (int)k;
    uint64_t h = 42; /* Spark's seed (catalyst hash.scala XxHash64) */
    PyObject *parts[2] = {database, table};
    for (int i = 0; i < 2; i++) {
        PyObject *raw = utf8_of(parts[i]);
        if (raw == NULL) goto fail;
        h = xxh64((const uint8_t *)PyBytes_AS_STRING(raw), (size_t)PyBytes_GET_SIZE(raw), h);
        Py_DECREF(raw);
    }
    r->seed = h;
    for (Py_ssize_t j = 0; j < k; j++) {
        int flag = PyObject_IsTrue(PyTuple_GET_ITEM(ascii, j));
        if (flag < 0) goto fail;
        r->ascii[j] = (uint8_t)flag;
        /* strict: a name orjson refuses (surrogates) raises UnicodeEncodeError here */
        PyObject *raw = PyUnicode_AsUTF8String(PyTuple_GET_ITEM(names, j));
        if (raw == NULL) goto fail;
        int rc = json_string(&r->names[j], (const uint8_t *)PyBytes_AS_STRING(raw),
                             (size_t)PyBytes_GET_SIZE(raw));
        Py_DECREF(raw);
        if (rc < 0 || put_bytes(&r->names[j], ":", 1) < 0) goto fail;
    }
    self->route = r;
    Py_RETURN_NONE;
fail:
    route_free(r);
    return NULL;
}

static PyTypeObject ScannerType;

/* Whether two routes render and hash keys alike (same names, table, flags, shards). */
static int same_route(const Route *a, const Route *b) {
    if (a->shards != b->shards || a->seed != b->seed || a->nkeys != b->nkeys) return 0;
    for (int j = 0; j < a->nkeys; j++)
        if (a->ascii[j] != b->ascii[j] || !same(&a->names[j], &b->names[j])) return 0;
    return 1;
}

/* fan(scanners): fan-out (module docstring). `scanners` holds shard k's routing Scanner
 * at place k, each routed as this one, none scanned or fanning out itself. */
static PyObject *Scanner_fan(Scanner *self, PyObject *args) {
    PyObject *fan;
    if (!PyArg_ParseTuple(args, "O!:fan", &PyTuple_Type, &fan)) return NULL;
    if (self->route == NULL || self->used || self->fan != NULL) {
        PyErr_SetString(PyExc_ValueError, "fan: set once, after route, before the first scan");
        return NULL;
    }
    if ((uint64_t)PyTuple_GET_SIZE(fan) != self->route->shards) {
        PyErr_SetString(PyExc_ValueError, "fan: one Scanner per shard");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(fan); i++) {
        PyObject *item = PyTuple_GET_ITEM(fan, i);
        if (!PyObject_TypeCheck(item, &ScannerType)) {
            PyErr_SetString(PyExc_TypeError, "fan: Scanners only");
            return NULL;
        }
        Scanner *to = (Scanner *)item;
        if (to == self || to->fan != NULL || to->used || to->route == NULL ||
            to->route->shard != (uint64_t)i || !same_route(to->route, self->route)) {
            PyErr_Format(PyExc_ValueError,
                         "fan: place %zd is not a fresh Scanner routed alike to shard %zd", i, i);
            return NULL;
        }
    }
    Py_INCREF(fan);
    self->fan = fan;
    Py_RETURN_NONE;
}

/* key_text(tagged) -> (text, shard): the routing of one key in key_bytes' encoding (for
 * tests: the rendering and the hash, without a rows event). */
static PyObject *Scanner_key_text(Scanner *self, PyObject *args) {
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "y*:key_text", &view)) return NULL;
    PyObject *out = NULL;
    if (self->route == NULL) {
        PyErr_SetString(PyExc_ValueError, "key_text needs a route");
    } else {
        int64_t shard = route_of(self->route, view.buf, (size_t)view.len);
        if (shard >= 0)
            out = Py_BuildValue("(y#L)", self->route->json.b, (Py_ssize_t)self->route->json.len,
                                (long long)shard);
    }
    PyBuffer_Release(&view);
    return out;
}

/* Whether entry e is one removes() gives (`existing`: not a key the range created). */
static inline int removed(const Entry *e, int existing) {
    return e->hash && !e->present && !(existing && e->created);
}

/* removes(existing=False) -> (count, columns): the keys whose last write is a remove
 * (`existing`: only those whose first write in the range did not create them: module
 * docstring); per key column bytes of native int64s (an integer column; an unsigned's
 * bits) or (int32 offsets, utf-8 data) (a text column). A column is typed by its first
 * key (None when there is none). */
static PyObject *Scanner_removes(Scanner *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"existing", NULL};
    int existing = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|p:removes", kwlist, &existing)) return NULL;
    size_t n = 0;
    int nk = -1;
    for (size_t i = 0; i < self->cap; i++) {
        const Entry *e = &self->table[i];
        if (!removed(e, existing)) continue;
        if (nk < 0) { /* count the key's columns by its tags */
            const uint8_t *kb = entry_key(e);
            size_t at = 0;
            nk = 0;
            while (at < e->keylen) {
                uint8_t t = kb[at++];
                at += t == 'n' ? 0 : t == 's' ? 4 + (size_t)le_n(kb + at, 4) : 8;
                nk++;
            }
        }
        n++;
    }
    if (nk < 0) return Py_BuildValue("(nN)", (Py_ssize_t)0, PyTuple_New(0));
    PyObject *result = NULL, *cols = PyTuple_New(nk);
    char *kind = PyMem_Calloc((size_t)nk, 1);
    Bytes *data = PyMem_Calloc((size_t)nk, sizeof(Bytes));
    Bytes *offs = PyMem_Calloc((size_t)nk, sizeof(Bytes));
    if (cols == NULL || kind == NULL || data == NULL || offs == NULL) {
        if (cols != NULL) PyErr_NoMemory();
        goto done;
    }
    for (size_t i = 0; i < self->cap; i++) {
        const Entry *e = &self->table[i];
        if (!removed(e, existing)) continue;
        const uint8_t *kb = entry_key(e);
        size_t at = 0;
        for (int j = 0; j < nk; j++) {
            if (at >= e->keylen) goto bad;
            uint8_t t = kb[at++];
            char k = t == 's' ? 's' : (t == 'i' || t == 'u') ? 'i' : 'n';
            if (k == 'n') {
                PyErr_SetString(PyExc_ValueError, "a removed key has a NULL column");
                goto done;
            }
            if (kind[j] == 0) {
                kind[j] = k;
                int32_t zero = 0;
                if (k == 's' && put_bytes(&offs[j], &zero, 4) < 0) goto done;
            }
            if (kind[j] != k) goto bad;
            if (k == 'i') {
                int64_t v = (int64_t)le_n(kb + at, 8);
                if (put_bytes(&data[j], &v, 8) < 0) goto done;
                at += 8;
            } else {
                size_t len = (size_t)le_n(kb + at, 4);
                at += 4;
                if (put_bytes(&data[j], kb + at, len) < 0) goto done;
                at += len;
                if (data[j].len > INT32_MAX) {
                    PyErr_SetString(PyExc_ValueError, "removed keys of more than 2 GiB");
                    goto done;
                }
                int32_t end = (int32_t)data[j].len;
                if (put_bytes(&offs[j], &end, 4) < 0) goto done;
            }
        }
        if (at != e->keylen) goto bad;
    }
    for (int j = 0; j < nk; j++) {
        PyObject *d = PyBytes_FromStringAndSize((const char *)data[j].b, (Py_ssize_t)data[j].len);
        if (d == NULL) goto done;
        if (kind[j] == 's') {
            PyObject *o = PyBytes_FromStringAndSize((const char *)offs[j].b,
                                                    (Py_ssize_t)offs[j].len);
            PyObject *pair = o == NULL ? NULL : PyTuple_Pack(2, o, d);
            Py_XDECREF(o);
            Py_DECREF(d);
            if (pair == NULL) goto done;
            d = pair;
        }
        PyTuple_SET_ITEM(cols, j, d);
    }
    result = Py_BuildValue("(nO)", (Py_ssize_t)n, cols);
    goto done;
bad:
    PyErr_SetString(PyExc_ValueError, "removed keys differ in their columns");
done:
    Py_XDECREF(cols);
    if (data != NULL)
        for (int j = 0; j < nk; j++) PyMem_Free(data[j].b);
    if (offs != NULL)
        for (int j = 0; j < nk; j++) PyMem_Free(offs[j].b);
    PyMem_Free(data);
    PyMem_Free(offs);
    PyMem_Free(kind);
    return result;
}

static PyObject *Scanner_keys(Scanner *self, void *closure) {
    return PyLong_FromSize_t(self->used);
}

static PyMethodDef Scanner_methods[] = {
    {"scan", (PyCFunction)Scanner_scan, METH_VARARGS,
     "scan(op, first, second, buf, pos, end, ordinal) -> rows"},
    {"survivors", (PyCFunction)Scanner_survivors, METH_NOARGS,
     "survivors() -> (seqs, offsets): the surviving puts, int64 arrays in sequence order"},
    {"route", (PyCFunction)Scanner_route, METH_VARARGS,
     "route(database, table, names, ascii, shards, shard): keep the keys the SQL sinks' "
     "glue routes to `shard`"},
    {"fan", (PyCFunction)Scanner_fan, METH_VARARGS,
     "fan(scanners): hand each write to the Scanner of its key's shard (one per shard)"},
    {"key_text", (PyCFunction)Scanner_key_text, METH_VARARGS,
     "key_text(tagged) -> (text, shard): one key's routing (tests)"},
    {"removes", (PyCFunction)(void (*)(void))Scanner_removes, METH_VARARGS | METH_KEYWORDS,
     "removes(existing=False) -> (count, columns): the keys whose last write is a remove "
     "(existing: not those the range's first write to them created)"},
    {NULL},
};

static PyGetSetDef Scanner_getset[] = {
    {"keys", (getter)Scanner_keys, NULL, "keys of this part written so far", NULL},
    {NULL},
};

static PyTypeObject ScannerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "headwater._native._lastwrite.Scanner",
    .tp_basicsize = sizeof(Scanner),
    .tp_dealloc = (destructor)Scanner_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Scanner(parts, part, hint=0): the last write per key of the keys hashed to "
              "`part` (`hint`: the keys expected, to size the table)",
    .tp_new = Scanner_new,
    .tp_methods = Scanner_methods,
    .tp_getset = Scanner_getset,
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "headwater._native._lastwrite",
    "The key-first pass of a replay: last write per key, in C (see the source).", -1, NULL,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__lastwrite(void) {
    if (PyType_Ready(&ShapeType) < 0 || PyType_Ready(&ScannerType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL) return NULL;
    Py_INCREF(&ShapeType);
    Py_INCREF(&ScannerType);
    if (PyModule_AddObject(m, "Shape", (PyObject *)&ShapeType) < 0 ||
        PyModule_AddObject(m, "Scanner", (PyObject *)&ScannerType) < 0 ||
        PyModule_AddIntConstant(m, "INSERT", OP_INSERT) < 0 ||
        PyModule_AddIntConstant(m, "UPDATE", OP_UPDATE) < 0 ||
        PyModule_AddIntConstant(m, "DELETE", OP_DELETE) < 0 ||
        PyModule_AddIntConstant(m, "KEY_SIGNED", KEY_SIGNED) < 0 ||
        PyModule_AddIntConstant(m, "KEY_UNSIGNED", KEY_UNSIGNED) < 0 ||
        PyModule_AddIntConstant(m, "KEY_TEXT", KEY_TEXT) < 0 ||
        PyModule_AddStringConstant(m, "UNROUTABLE", UNROUTABLE) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
