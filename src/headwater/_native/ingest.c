/*
 * headwater._native._ingest: the reader's compiled fast path (see __init__.py for the
 * Python side and the contract).
 *
 * Scanner.scan() walks the packets of a COM_BINLOG_DUMP answer held in a receive buffer
 * and turns each common MariaDB transaction
 *
 *     MARIADB_GTID (not standalone)  [ANNOTATE_ROWS | TABLE_MAP | rows event]*  XID
 *
 * into one change log record frame (headwater/store/record.py), exactly as the Python
 * grouper (headwater/reader/grouping.py) builds it: the payload is each event's header and
 * body (checksum verified and stripped) after a u32 length; the table list counts rows by
 * walking the row images' value lengths (headwater/binlog/rows.py, codec.py). It returns
 * at anything else -- a packet the Python framer would not take on its fast path
 * (headwater/binlog/_packets.py: multi-packet, artificial, FORMAT_DESCRIPTION, ROTATE,
 * heartbeats, errors, EOF), another event type, a TABLE_MAP whose shape was not
 * registered, a transaction that would be chunked, or one the caller's skip bounds do not
 * clear -- leaving that transaction, from its GTID packet on, to the Python path.
 *
 * Frames come out with seq 0 and CRC 0; stamp() assigns seqs and computes the CRC32C
 * when the store appends them (the CRC covers the seq).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HW_CRC 1
#endif

/* ---- little-endian helpers ------------------------------------------------------------ */

static inline uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static inline uint32_t rd24(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16; }
static inline uint32_t rd32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static inline uint64_t rd64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static inline void wr16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }

/* Whether an ANNOTATE_ROWS statement mentions a credential word (PASSWORD, IDENTIFIED,
 * CONNECTION; any case): such a transaction goes to Python, which redacts the statement
 * (headwater.schema.ddlscope.CREDENTIAL_WORDS is the same set, with word boundaries for
 * CONNECTION: this test may only say yes more often, never less). */
static int ci_word(const uint8_t *s, const char *w, size_t n) {
    for (size_t k = 0; k < n; k++)
        if ((s[k] | 0x20) != (uint8_t)w[k]) return 0;
    return 1;
}
static int has_credential_word(const uint8_t *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint8_t c = s[i] | 0x20;
        if (c == 'p' && n - i >= 8 && ci_word(s + i, "password", 8)) return 1;
        if (c == 'i' && n - i >= 10 && ci_word(s + i, "identified", 10)) return 1;
        if (c == 'c' && n - i >= 10 && ci_word(s + i, "connection", 10)) return 1;
    }
    return 0;
}
static inline void wr32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static inline void wr64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }

/* ---- CRC32C (Castagnoli), the store's frame checksum ---------------------------------- */

static uint32_t crc32c_table[8][256];

static void crc32c_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc32c_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc32c_table[t][i] = (crc32c_table[t - 1][i] >> 8) ^ crc32c_table[0][crc32c_table[t - 1][i] & 0xFF];
}

static uint32_t crc32c_sw(uint32_t crc, const uint8_t *p, size_t n) {
    crc = ~crc;
    while (n >= 8) {
        uint64_t w = rd64(p) ^ crc;
        crc = crc32c_table[7][w & 0xFF] ^ crc32c_table[6][(w >> 8) & 0xFF] ^
              crc32c_table[5][(w >> 16) & 0xFF] ^ crc32c_table[4][(w >> 24) & 0xFF] ^
              crc32c_table[3][(w >> 32) & 0xFF] ^ crc32c_table[2][(w >> 40) & 0xFF] ^
              crc32c_table[1][(w >> 48) & 0xFF] ^ crc32c_table[0][w >> 56];
        p += 8;
        n -= 8;
    }
    while (n--) crc = (crc >> 8) ^ crc32c_table[0][(crc ^ *p++) & 0xFF];
    return ~crc;
}

#ifdef HW_CRC
static int have_sse42, have_pclmul;

__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(uint32_t crc, const uint8_t *p, size_t n) {
    uint64_t c = ~crc;
    while (n >= 8) {
        c = _mm_crc32_u64(c, rd64(p));
        p += 8;
        n -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (n--) c32 = _mm_crc32_u8(c32, *p++);
    return ~c32;
}
#endif

static uint32_t crc32c(uint32_t crc, const uint8_t *p, size_t n) {
#ifdef HW_CRC
    if (have_sse42) return crc32c_hw(crc, p, n);
#endif
    return crc32c_sw(crc, p, n);
}

/* ---- CRC32 (zlib polynomial), the binlog's event checksum ------------------------------
 * (sql/log_event.cc checksum_crc32: zlib's crc32.) Slice-by-8 tables for short events, the
 * common case; carry-less multiplication folding (PCLMULQDQ, four 128-bit lanes, then the
 * last 16 bytes through the table) for long ones. The folding constants are
 * x^(4*128+32), x^(4*128-32), x^(128+32), x^(128-32) mod P, bit-reflected; module init
 * checks the folding against the tables and keeps it only if they agree. */

static uint32_t crc32_table[8][256];

static void crc32_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0xEDB88320u : c >> 1;
        crc32_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc32_table[t][i] = (crc32_table[t - 1][i] >> 8) ^ crc32_table[0][crc32_table[t - 1][i] & 0xFF];
}

/* The raw (not inverted) CRC state ``c`` advanced over p[0:n]. */
static uint32_t crc32_raw(uint32_t c, const uint8_t *p, size_t n) {
    while (n >= 8) {
        uint64_t w = rd64(p) ^ c;
        c = crc32_table[7][w & 0xFF] ^ crc32_table[6][(w >> 8) & 0xFF] ^
            crc32_table[5][(w >> 16) & 0xFF] ^ crc32_table[4][(w >> 24) & 0xFF] ^
            crc32_table[3][(w >> 32) & 0xFF] ^ crc32_table[2][(w >> 40) & 0xFF] ^
            crc32_table[1][(w >> 48) & 0xFF] ^ crc32_table[0][w >> 56];
        p += 8;
        n -= 8;
    }
    while (n--) c = (c >> 8) ^ crc32_table[0][(c ^ *p++) & 0xFF];
    return c;
}

#ifdef HW_CRC
#define FOLD(x, k, next)                                                                  \
    _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00),                         \
                                _mm_clmulepi64_si128(x, k, 0x11)),                        \
                  next)

__attribute__((target("pclmul,sse4.1"))) static uint32_t crc32_fold(uint32_t c, const uint8_t *p,
                                                                  size_t n) {
    const __m128i k12 = _mm_set_epi64x(0x1c6e41596LL, 0x154442bd4LL);
    const __m128i k34 = _mm_set_epi64x(0x0ccaa009eLL, 0x1751997d0LL);
    __m128i x0 = _mm_loadu_si128((const __m128i *)p);
    __m128i x1 = _mm_loadu_si128((const __m128i *)(p + 16));
    __m128i x2 = _mm_loadu_si128((const __m128i *)(p + 32));
    __m128i x3 = _mm_loadu_si128((const __m128i *)(p + 48));
    x0 = _mm_xor_si128(x0, _mm_cvtsi32_si128((int)c));
    p += 64;
    n -= 64;
    while (n >= 64) {
        x0 = FOLD(x0, k12, _mm_loadu_si128((const __m128i *)p));
        x1 = FOLD(x1, k12, _mm_loadu_si128((const __m128i *)(p + 16)));
        x2 = FOLD(x2, k12, _mm_loadu_si128((const __m128i *)(p + 32)));
        x3 = FOLD(x3, k12, _mm_loadu_si128((const __m128i *)(p + 48)));
        p += 64;
        n -= 64;
    }
    x1 = FOLD(x0, k34, x1);
    x2 = FOLD(x1, k34, x2);
    x3 = FOLD(x2, k34, x3);
    while (n >= 16) {
        x3 = FOLD(x3, k34, _mm_loadu_si128((const __m128i *)p));
        p += 16;
        n -= 16;
    }
    uint8_t b[16];
    _mm_storeu_si128((__m128i *)b, x3);
    return crc32_raw(crc32_raw(0, b, 16), p, n);
}
#endif

#ifdef HW_CRC
/* One lane folded 16 bytes at a time: for events of 32 to 255 bytes. */
__attribute__((target("pclmul,sse4.1"))) static uint32_t crc32_fold1(uint32_t c, const uint8_t *p,
                                                                   size_t n) {
    const __m128i k34 = _mm_set_epi64x(0x0ccaa009eLL, 0x1751997d0LL);
    __m128i x = _mm_xor_si128(_mm_loadu_si128((const __m128i *)p), _mm_cvtsi32_si128((int)c));
    p += 16;
    n -= 16;
    while (n >= 16) {
        x = FOLD(x, k34, _mm_loadu_si128((const __m128i *)p));
        p += 16;
        n -= 16;
    }
    uint8_t b[16];
    _mm_storeu_si128((__m128i *)b, x);
    return crc32_raw(crc32_raw(0, b, 16), p, n);
}
#endif

static uint32_t event_crc32(const uint8_t *p, size_t n) {
#ifdef HW_CRC
    if (n >= 256 && have_pclmul) return ~crc32_fold(0xFFFFFFFFu, p, n);
    if (n >= 32 && have_pclmul) return ~crc32_fold1(0xFFFFFFFFu, p, n);
#endif
    return ~crc32_raw(0xFFFFFFFFu, p, n);
}

#ifdef HW_CRC
/* Whether the folding agrees with the tables (lengths 16..1100, several alignments). */
static int crc32_fold_ok(void) {
    uint8_t buf[1200];
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (uint8_t)((i * 2654435761u) >> 13);
    for (size_t n = 16; n < 1100; n += 3)
        for (size_t o = 0; o < 3; o++) {
            uint32_t want = crc32_raw(0xFFFFFFFFu, buf + o, n);
            if (crc32_fold1(0xFFFFFFFFu, buf + o, n) != want) return 0;
            if (n >= 64 && crc32_fold(0xFFFFFFFFu, buf + o, n) != want) return 0;
        }
    return 1;
}
#endif

/* ---- binlog constants (MariaDB sql/log_event.h, MySQL binlog_event.h) ------------------ */

enum {
    T_ROTATE = 4, T_FDE = 15, T_XID = 16, T_TABLE_MAP = 19,
    T_WRITE_V1 = 23, T_UPDATE_V1 = 24, T_DELETE_V1 = 25, T_HEARTBEAT = 27,
    T_WRITE_V2 = 30, T_UPDATE_V2 = 31, T_DELETE_V2 = 32, T_HEARTBEAT_V2 = 41,
    T_ANNOTATE = 160, T_MARIADB_GTID = 162,
};
#define HDR 19
#define ARTIFICIAL_F 0x20
#define FL_STANDALONE 1
#define MAX_PACKET 0xFFFFFF
#define FRAME_MAGIC 0x31525748u
#define FRAME_PREFIX 12
#define FIXED_SIZE 62
#define MAX_TABLES 64

enum { ST_SLOW = 0, ST_MORE = 1, ST_LIMIT = 2, ST_SHAPE = 3 };

/* ---- table shapes ---------------------------------------------------------------------- */

typedef struct {
    uint8_t *body;     /* the TABLE_MAP body (after the header): the lookup key */
    size_t body_len;
    uint64_t hash;
    uint8_t *name;     /* db.table, UTF-8 */
    uint16_t name_len;
    uint32_t ncols;
    int8_t *widths;    /* value_width() per column: n >= 0 fixed, -k a k-byte length */
} Shape;

typedef struct {
    uint64_t table_id;
    Shape *shape;
} MapEntry;

typedef struct {
    Shape *shape;
    uint64_t rows;
} TableCount;

typedef struct {
    PyObject_HEAD
    int id_size;
    Shape **slots;     /* open addressing, power-of-two size */
    size_t nslots;
    size_t nshapes;
    /* the transaction under way (kept across a ST_MORE return) */
    int in_txn;
    size_t resume;     /* bytes after the transaction's start already walked */
    int seq_resume;    /* packet sequence expected at the resume point */
    /* the events so far: where each starts (bytes after the transaction's first packet)
     * and its length; copied once, into the frame, at the XID */
    uint64_t *ev_off;
    uint32_t *ev_len;
    size_t ev_cap;
    size_t scratch_len; /* payload bytes so far (u32 length + event, each) */
    size_t n_events;
    MapEntry maps[MAX_TABLES];
    int nmaps;
    TableCount tables[MAX_TABLES];
    int ntables;
    int content;
    uint64_t g_seq, g_offset;
    uint32_t g_domain, g_server;
    uint32_t g_ts;
    /* columns present, scratch for row counting */
    uint32_t *cols1, *cols2;
    size_t cols_cap;
} Scanner;

static uint64_t hash_bytes(const uint8_t *p, size_t n) {
    uint64_t h = 1469598103934665603ull ^ n;
    while (n >= 8) {
        h = (h ^ rd64(p)) * 0x9E3779B97F4A7C15ull;
        h ^= h >> 29;
        p += 8;
        n -= 8;
    }
    while (n--) h = (h ^ *p++) * 1099511628211ull;
    return h ^ (h >> 32);
}

static void shape_free(Shape *s) {
    if (s == NULL) return;
    PyMem_Free(s->body);
    PyMem_Free(s->name);
    PyMem_Free(s->widths);
    PyMem_Free(s);
}

static void clear_shapes(Scanner *self) {
    for (size_t i = 0; i < self->nslots; i++) {
        shape_free(self->slots[i]);
        self->slots[i] = NULL;
    }
    self->nshapes = 0;
}

static Shape *find_shape(Scanner *self, const uint8_t *body, size_t len) {
    uint64_t h = hash_bytes(body, len);
    size_t mask = self->nslots - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
        Shape *s = self->slots[i];
        if (s == NULL) return NULL;
        if (s->hash == h && s->body_len == len && memcmp(s->body, body, len) == 0) return s;
    }
}

static void reset_txn(Scanner *self) {
    self->in_txn = 0;
    self->resume = 0;
    self->scratch_len = 0;
    self->n_events = 0;
    self->nmaps = 0;
    self->ntables = 0;
    self->content = 0;
}

static int scratch_add(Scanner *self, size_t rel_off, size_t n) {
    if (self->n_events == self->ev_cap) {
        size_t cap = self->ev_cap ? self->ev_cap * 2 : 1024;
        uint64_t *o = PyMem_Realloc(self->ev_off, cap * sizeof(uint64_t));
        if (o == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        self->ev_off = o;
        uint32_t *l = PyMem_Realloc(self->ev_len, cap * sizeof(uint32_t));
        if (l == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        self->ev_len = l;
        self->ev_cap = cap;
    }
    self->ev_off[self->n_events] = rel_off;
    self->ev_len[self->n_events] = (uint32_t)n;
    self->n_events++;
    self->scratch_len += 4 + n;
    return 0;
}

/* ---- row counting (headwater/binlog/codec.py _count_image, rows.py _layout) ------------ */

static int read_packed(const uint8_t *b, size_t n, size_t *p, uint64_t *out) {
    if (*p >= n) return -1;
    uint8_t c = b[*p];
    if (c < 251) { *out = c; *p += 1; return 0; }
    size_t k = c == 252 ? 2 : c == 253 ? 3 : c == 254 ? 8 : 0;
    if (k == 0 || *p + 1 + k > n) return -1;
    uint64_t v = 0;
    for (size_t i = 0; i < k; i++) v |= (uint64_t)b[*p + 1 + i] << (8 * i);
    *out = v;
    *p += 1 + k;
    return 0;
}

static size_t bitmap_columns(const uint8_t *bm, uint32_t width, uint32_t *out) {
    size_t k = 0;
    for (uint32_t i = 0; i < width; i++)
        if (bm[i >> 3] >> (i & 7) & 1) out[k++] = i;
    return k;
}

/* Advance *p over one row image; -1 if it does not frame. */
static inline int walk_image(const int8_t *widths, const uint32_t *cols, size_t k,
                             const uint8_t *b, size_t n, size_t *p) {
    size_t nb = (k + 7) / 8;
    size_t q = *p;
    if (q + nb > n) return -1;
    const uint8_t *nulls = b + q;
    q += nb;
    for (size_t i = 0; i < k; i++) {
        if (nulls[i >> 3] >> (i & 7) & 1) continue;
        int w = widths[cols[i]];
        if (w >= 0) {
            q += (size_t)w;
        } else {
            size_t lb = (size_t)(-w);
            if (q + lb > n) return -1;
            size_t len = 0;
            for (size_t j = 0; j < lb; j++) len |= (size_t)b[q + j] << (8 * j);
            q += lb + len;
        }
        if (q > n) return -1;
    }
    *p = q;
    return 0;
}

/* Rows of a rows event body (b, n: after the header, checksum stripped); -1: leave it to
 * Python (it does not frame, or it is a case Python reports). */
static int64_t count_rows(Scanner *self, Shape *sh, int tc, const uint8_t *b, size_t n) {
    int update = tc == T_UPDATE_V1 || tc == T_UPDATE_V2;
    int v2 = tc >= T_WRITE_V2 && tc <= T_DELETE_V2;
    size_t p = (size_t)self->id_size + 2;
    if (n < p + (v2 ? 2 : 0)) return -1;
    if (v2) {
        size_t extra = rd16(b + p);
        if (extra < 2 || p + extra > n) return -1;
        p += extra;
    }
    uint64_t width;
    if (read_packed(b, n, &p, &width) < 0 || width != sh->ncols) return -1;
    size_t nbm = (size_t)(width + 7) / 8;
    if (self->cols_cap < width) {
        size_t cap = width < 64 ? 64 : (size_t)width;
        uint32_t *a = PyMem_Realloc(self->cols1, cap * sizeof(uint32_t));
        if (a == NULL) return -1;
        self->cols1 = a;
        uint32_t *c = PyMem_Realloc(self->cols2, cap * sizeof(uint32_t));
        if (c == NULL) return -1;
        self->cols2 = c;
        self->cols_cap = cap;
    }
    if (p + nbm > n) return -1;
    size_t k1 = bitmap_columns(b + p, (uint32_t)width, self->cols1);
    p += nbm;
    size_t k2 = 0;
    if (update) {
        if (p + nbm > n) return -1;
        k2 = bitmap_columns(b + p, (uint32_t)width, self->cols2);
        p += nbm;
    }
    if (k1 == 0 || (update && k2 == 0)) return -1;
    int64_t rows = 0;
    while (p < n) {
        if (walk_image(sh->widths, self->cols1, k1, b, n, &p) < 0) return -1;
        if (update && walk_image(sh->widths, self->cols2, k2, b, n, &p) < 0) return -1;
        rows++;
    }
    return p == n ? rows : -1;
}

/* "domain-server-seq", as the Python grouper writes a MariaDB GTID */
static size_t put_uint(char *out, uint64_t v) {
    char tmp[24];
    size_t n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (size_t i = 0; i < n; i++) out[i] = tmp[n - 1 - i];
    return n;
}

static int format_gtid(char *out, uint32_t domain, uint32_t server, uint64_t seq) {
    size_t n = put_uint(out, domain);
    out[n++] = '-';
    n += put_uint(out + n, server);
    out[n++] = '-';
    n += put_uint(out + n, seq);
    return (int)n;
}

/* ---- the output buffer (a bytearray) --------------------------------------------------- */

typedef struct {
    PyObject *ba;
    size_t len;
} Out;

static uint8_t *out_reserve(Out *o, size_t n) {
    size_t cap = (size_t)PyByteArray_GET_SIZE(o->ba);
    if (o->len + n > cap) {
        size_t want = cap * 2;
        if (want < o->len + n) want = o->len + n;
        if (want < 65536) want = 65536;
        if (PyByteArray_Resize(o->ba, (Py_ssize_t)want) < 0) return NULL;
    }
    return (uint8_t *)PyByteArray_AS_STRING(o->ba) + o->len;
}

/* ---- Scanner --------------------------------------------------------------------------- */

static void Scanner_dealloc(Scanner *self) {
    clear_shapes(self);
    PyMem_Free(self->slots);
    PyMem_Free(self->ev_off);
    PyMem_Free(self->ev_len);
    PyMem_Free(self->cols1);
    PyMem_Free(self->cols2);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Scanner_init(Scanner *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"id_size", NULL};
    int id_size = 6;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|i", kwlist, &id_size)) return -1;
    if (id_size != 4 && id_size != 6) {
        PyErr_SetString(PyExc_ValueError, "id_size must be 4 or 6");
        return -1;
    }
    self->id_size = id_size;
    if (self->slots == NULL) {
        self->nslots = 1024;
        self->slots = PyMem_Calloc(self->nslots, sizeof(Shape *));
        if (self->slots == NULL) {
            PyErr_NoMemory();
            return -1;
        }
    }
    reset_txn(self);
    return 0;
}

static int insert_shape(Scanner *self, Shape *s) {
    if ((self->nshapes + 1) * 2 > self->nslots) {
        size_t n = self->nslots * 2;
        Shape **slots = PyMem_Calloc(n, sizeof(Shape *));
        if (slots == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        for (size_t i = 0; i < self->nslots; i++) {
            Shape *t = self->slots[i];
            if (t == NULL) continue;
            size_t j = t->hash & (n - 1);
            while (slots[j] != NULL) j = (j + 1) & (n - 1);
            slots[j] = t;
        }
        PyMem_Free(self->slots);
        self->slots = slots;
        self->nslots = n;
    }
    size_t mask = self->nslots - 1;
    size_t i = s->hash & mask;
    while (self->slots[i] != NULL) i = (i + 1) & mask;
    self->slots[i] = s;
    self->nshapes++;
    return 0;
}

static PyObject *Scanner_add_shape(Scanner *self, PyObject *args) {
    Py_buffer body, name, widths;
    if (!PyArg_ParseTuple(args, "y*y*y*", &body, &name, &widths)) return NULL;
    PyObject *result = NULL;
    if (name.len > 0xFFFF) {
        PyErr_SetString(PyExc_ValueError, "table name longer than 65535 bytes");
        goto done;
    }
    if (find_shape(self, body.buf, (size_t)body.len) != NULL) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    Shape *s = PyMem_Calloc(1, sizeof(Shape));
    if (s == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    s->body = PyMem_Malloc(body.len ? (size_t)body.len : 1);
    s->name = PyMem_Malloc(name.len ? (size_t)name.len : 1);
    s->widths = PyMem_Malloc(widths.len ? (size_t)widths.len : 1);
    if (s->body == NULL || s->name == NULL || s->widths == NULL) {
        shape_free(s);
        PyErr_NoMemory();
        goto done;
    }
    memcpy(s->body, body.buf, (size_t)body.len);
    s->body_len = (size_t)body.len;
    s->hash = hash_bytes(s->body, s->body_len);
    memcpy(s->name, name.buf, (size_t)name.len);
    s->name_len = (uint16_t)name.len;
    memcpy(s->widths, widths.buf, (size_t)widths.len);
    s->ncols = (uint32_t)widths.len;
    if (insert_shape(self, s) < 0) {
        shape_free(s);
        goto done;
    }
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&body);
    PyBuffer_Release(&name);
    PyBuffer_Release(&widths);
    return result;
}

static PyObject *Scanner_clear(Scanner *self, PyObject *Py_UNUSED(ignored)) {
    reset_txn(self);
    clear_shapes(self);
    Py_RETURN_NONE;
}

static PyObject *Scanner_reset(Scanner *self, PyObject *Py_UNUSED(ignored)) {
    reset_txn(self);
    Py_RETURN_NONE;
}

/* Append the frame of the finished transaction to the output. */
static int emit_frame(Scanner *self, Out *o, const uint8_t *txn, uint64_t seq,
                      uint64_t change_id, uint32_t file_num, uint64_t ts_us,
                      uint64_t schema_version, char *gtid, size_t glen) {
    size_t tlen = 0;
    for (int i = 0; i < self->ntables; i++) tlen += 2 + self->tables[i].shape->name_len + 8;
    size_t body_len = FIXED_SIZE + glen + tlen + self->scratch_len;
    if (body_len > 0xFFFFFFFFu) return -1;
    uint8_t *f = out_reserve(o, FRAME_PREFIX + body_len);
    if (f == NULL) return -2;
    wr32(f, FRAME_MAGIC);
    wr32(f + 4, 0);
    wr32(f + 8, (uint32_t)body_len);
    uint8_t *h = f + FRAME_PREFIX;
    wr64(h, seq);                     /* 0: stamp() assigns it */
    wr64(h + 8, change_id);
    wr32(h + 16, file_num);
    wr64(h + 20, self->g_offset);
    wr32(h + 28, 0);                  /* event_index */
    wr64(h + 32, ts_us);
    wr64(h + 40, schema_version);
    h[48] = 3;                        /* FIRST_CHUNK | LAST_CHUNK */
    h[49] = (uint8_t)glen;
    wr16(h + 50, (uint16_t)self->ntables);
    wr32(h + 52, (uint32_t)tlen);
    wr32(h + 56, 0);                  /* chunk_no */
    wr16(h + 60, 0);
    uint8_t *q = h + FIXED_SIZE;
    memcpy(q, gtid, glen);
    q += glen;
    for (int i = 0; i < self->ntables; i++) {
        Shape *s = self->tables[i].shape;
        wr16(q, s->name_len);
        memcpy(q + 2, s->name, s->name_len);
        wr64(q + 2 + s->name_len, self->tables[i].rows);
        q += 2 + s->name_len + 8;
    }
    for (size_t i = 0; i < self->n_events; i++) {
        uint32_t n = self->ev_len[i];
        wr32(q, n);
        memcpy(q + 4, txn + self->ev_off[i], n);
        q += 4 + n;
    }
    if (seq) /* the CRC while the bytes are in the cache; stamp() redoes it if seq changes */
        wr32(f + 4, crc32c(0, f + 8, 4 + body_len));
    o->len += FRAME_PREFIX + body_len;
    return 0;
}

/*
 * scan(buf, start, end, seq, *, crc, verify, change_id, file_num, schema_version,
 *      chunk_bytes, after_file, after_offset, gtid_domain, gtid_floor, dropped, max_out)
 *
 * buf[start:end] holds received packets; ``start`` is a transaction boundary (or the
 * start of the transaction a previous ST_MORE left under way, with the same start).
 * ``seq0``: the store seq the first frame will get, if known: frames are then built
 * with their seq and CRC (stamp() checks the seq and redoes both if it changed).
 * Frames are written to ``out`` (a bytearray, grown as needed, never shrunk: the caller
 * reuses it once nothing points into it). Returns (status, stop, seq, n, records,
 * n_events, last) where out[:n] holds ``records`` record frames (seq and CRC 0), ``stop`` the offset of the
 * first packet not consumed (a transaction's GTID packet when it is left to Python or is
 * incomplete), ``seq`` the packet sequence number expected there, and ``last`` is None
 * or (offset, log_pos, ts_s, domain, server_id, seq_no) of the last transaction.
 */
static PyObject *Scanner_scan(Scanner *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"buf", "start", "end", "seq", "crc", "verify", "change_id",
                             "file_num", "schema_version", "chunk_bytes", "after_file",
                             "after_offset", "gtid_domain", "gtid_floor", "dropped",
                             "max_out", "out", "seq0", NULL};
    /* keyword-only arguments are optional to the parser: the defaults below, but for
     * ``dropped`` and ``out``, checked after parsing */
    Py_buffer view, dropped = {0};
    Out o = {NULL, 0};
    Py_ssize_t start, end, chunk_bytes = 8 << 20, max_out = 4 << 20;
    int seq, crc_on = 1, verify = 1;
    unsigned long long change_id = 0, schema_version = 0, seq0 = 0;
    unsigned int file_num = 0;
    long long after_file = -1, after_offset = -1, gtid_domain = -1, gtid_floor = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "y*nni|$ppKIKnLLLLy*nO!K", kwlist, &view, &start,
                                     &end, &seq, &crc_on, &verify, &change_id, &file_num,
                                     &schema_version, &chunk_bytes, &after_file, &after_offset,
                                     &gtid_domain, &gtid_floor, &dropped, &max_out,
                                     &PyByteArray_Type, &o.ba, &seq0))
        return NULL;
    PyObject *result = NULL, *last = NULL;
    Py_ssize_t records = 0;
    if (start < 0 || end > view.len || start > end || dropped.obj == NULL ||
        dropped.len != 256 || o.ba == NULL) {
        PyErr_SetString(PyExc_ValueError, "scan: bad bounds, or no dropped mask or out buffer");
        goto fail;
    }
    const uint8_t *buf = view.buf;
    const uint8_t *drop = dropped.buf;
    size_t csize = crc_on ? 4 : 0;

    size_t txn_start = (size_t)start;
    int txn_seq = seq;
    size_t p = txn_start;
    int pseq = seq;
    int status = ST_MORE;
    uint64_t last_logpos = 0, last_seqno = 0;
    uint32_t last_ts = 0, last_domain = 0, last_server = 0;
    uint64_t last_offset = 0;
    int have_last = 0;
    size_t events = 0;
    if (self->in_txn) {
        p = txn_start + self->resume;
        pseq = self->seq_resume;
    }
    for (;;) {
        /* one packet */
        if ((size_t)end - p < 4) { status = ST_MORE; break; }
        uint32_t length = rd24(buf + p);
        size_t stop = p + 4 + length;
        if (stop > (size_t)end) { status = ST_MORE; break; }
        if (length < 1 + HDR) { status = ST_SLOW; break; } /* EOF, error, or malformed */
        const uint8_t *ev = buf + p + 5;
        uint32_t ts = rd32(ev);
        int tc = ev[4];
        uint32_t server_id = rd32(ev + 5);
        uint32_t ev_size = rd32(ev + 9);
        uint32_t log_pos = rd32(ev + 13);
        uint16_t flags = rd16(ev + 17);
        if (buf[p + 3] != (uint8_t)pseq || buf[p + 4] != 0 || length >= MAX_PACKET ||
            ev_size != length - 1 || tc == T_FDE || tc == T_ROTATE || tc == T_HEARTBEAT ||
            tc == T_HEARTBEAT_V2 || log_pos < ev_size || ev_size < 23 || flags & ARTIFICIAL_F) {
            status = ST_SLOW;
            break;
        }
        size_t n = ev_size - csize; /* header + body */
        if (crc_on && verify &&
            event_crc32(ev, n) != rd32(ev + n)) {
            status = ST_SLOW; /* Python raises the ChecksumError with its location */
            break;
        }
        const uint8_t *body = ev + HDR;
        size_t blen = n - HDR;
        if (!self->in_txn) {
            if (tc != T_MARIADB_GTID || blen < 13) { status = ST_SLOW; break; }
            uint64_t seq_no = rd64(body);
            uint32_t domain = rd32(body + 8);
            uint8_t gflags = body[12];
            uint64_t offset = (uint64_t)log_pos - ev_size;
            if (gflags & FL_STANDALONE) { status = ST_SLOW; break; }
            /* the caller's skip bounds: beyond the last position, above the GTID floor */
            if (after_file >= 0 &&
                ((long long)file_num < after_file ||
                 ((long long)file_num == after_file && (long long)offset <= after_offset))) {
                status = ST_SLOW;
                break;
            }
            if (gtid_domain >= 0 && ((long long)domain != gtid_domain ||
                                     (gtid_floor >= 0 && (long long)seq_no <= gtid_floor))) {
                status = ST_SLOW;
                break;
            }
            reset_txn(self);
            self->in_txn = 1;
            self->g_seq = seq_no;
            self->g_domain = domain;
            self->g_server = server_id;
            self->g_offset = offset;
            self->g_ts = ts;
            if (scratch_add(self, (size_t)(ev - buf) - txn_start, n) < 0) goto fail;
        } else if (tc == T_TABLE_MAP) {
            Shape *s = find_shape(self, body, blen);
            if (s == NULL) { status = ST_SHAPE; break; } /* Python parses it, then resumes */
            if (self->nmaps >= MAX_TABLES) { status = ST_SLOW; break; }
            uint64_t tid = 0;
            for (int i = 0; i < self->id_size; i++) tid |= (uint64_t)body[i] << (8 * i);
            int found = 0;
            for (int i = 0; i < self->nmaps; i++)
                if (self->maps[i].table_id == tid) { self->maps[i].shape = s; found = 1; break; }
            if (!found) {
                self->maps[self->nmaps].table_id = tid;
                self->maps[self->nmaps].shape = s;
                self->nmaps++;
            }
            found = 0;
            for (int i = 0; i < self->ntables; i++)
                if (self->tables[i].shape->name_len == s->name_len &&
                    memcmp(self->tables[i].shape->name, s->name, s->name_len) == 0) {
                    found = 1;
                    break;
                }
            if (!found) {
                if (self->ntables >= MAX_TABLES) { status = ST_SLOW; break; }
                self->tables[self->ntables].shape = s;
                self->tables[self->ntables].rows = 0;
                self->ntables++;
            }
            if (scratch_add(self, (size_t)(ev - buf) - txn_start, n) < 0) goto fail;
        } else if ((tc >= T_WRITE_V1 && tc <= T_DELETE_V1) || (tc >= T_WRITE_V2 && tc <= T_DELETE_V2)) {
            if (drop[tc] || blen < (size_t)self->id_size) { status = ST_SLOW; break; }
            uint64_t tid = 0;
            for (int i = 0; i < self->id_size; i++) tid |= (uint64_t)body[i] << (8 * i);
            Shape *s = NULL;
            for (int i = 0; i < self->nmaps; i++)
                if (self->maps[i].table_id == tid) { s = self->maps[i].shape; break; }
            if (s == NULL) { status = ST_SLOW; break; }
            int64_t rows = count_rows(self, s, tc, body, blen);
            if (rows < 0) {
                if (PyErr_Occurred()) goto fail;
                status = ST_SLOW;
                break;
            }
            int t = -1;
            for (int i = 0; i < self->ntables; i++)
                if (self->tables[i].shape->name_len == s->name_len &&
                    memcmp(self->tables[i].shape->name, s->name, s->name_len) == 0) {
                    t = i;
                    break;
                }
            if (t < 0) { status = ST_SLOW; break; }
            self->tables[t].rows += (uint64_t)rows;
            self->content = 1;
            if (scratch_add(self, (size_t)(ev - buf) - txn_start, n) < 0) goto fail;
            /* the Python grouper starts a chunk here: leave the transaction to it */
            if (self->scratch_len >= (size_t)chunk_bytes) { status = ST_SLOW; break; }
        } else if (tc == T_ANNOTATE) {
            if (has_credential_word(body, blen)) { status = ST_SLOW; break; }
            if (scratch_add(self, (size_t)(ev - buf) - txn_start, n) < 0) goto fail;
        } else if (tc == T_XID) {
            if (!self->content) { status = ST_SLOW; break; }
            if (scratch_add(self, (size_t)(ev - buf) - txn_start, n) < 0) goto fail;
            char gtid[64];
            int glen = format_gtid(gtid, self->g_domain, self->g_server, self->g_seq);
            uint64_t commit_us = (uint64_t)ts * 1000000u;
            uint64_t rec_ts = commit_us ? commit_us : (uint64_t)self->g_ts * 1000000u;
            int r = emit_frame(self, &o, buf + txn_start, seq0 ? seq0 + (uint64_t)records : 0,
                               change_id, file_num, rec_ts, schema_version, gtid,
                               (size_t)glen);
            if (r == -2) goto fail;
            if (r < 0) { status = ST_SLOW; break; }
            records++;
            events += self->n_events;
            have_last = 1;
            last_offset = self->g_offset;
            last_logpos = log_pos;
            last_ts = ts;
            last_domain = self->g_domain;
            last_server = self->g_server;
            last_seqno = self->g_seq;
            /* what the task's skip check knows after this one (MariadbGtidPos.add: the
             * domain's last GTID; the resume position) */
            gtid_domain = self->g_domain;
            gtid_floor = (long long)self->g_seq;
            after_file = file_num;
            after_offset = (long long)self->g_offset;
            reset_txn(self);
            pseq = (pseq + 1) & 0xFF;
            p = stop;
            txn_start = p;
            txn_seq = pseq;
            if (o.len >= (size_t)max_out) { status = ST_LIMIT; break; }
            continue;
        } else {
            status = ST_SLOW;
            break;
        }
        pseq = (pseq + 1) & 0xFF;
        p = stop;
    }
    if (status == ST_SLOW) {
        reset_txn(self);
    } else if (self->in_txn) {
        self->resume = p - txn_start;
        self->seq_resume = pseq;
    }
    if (have_last) {
        last = Py_BuildValue("(KKkIIK)", (unsigned long long)last_offset,
                             (unsigned long long)last_logpos, (unsigned long)last_ts,
                             last_domain, last_server, (unsigned long long)last_seqno);
        if (last == NULL) goto fail;
    } else {
        last = Py_NewRef(Py_None);
    }
    result = Py_BuildValue("(ininnnO)", status, (Py_ssize_t)txn_start, txn_seq, (Py_ssize_t)o.len, records,
                           (Py_ssize_t)events, last);
fail:
    if (result == NULL) reset_txn(self);
    Py_XDECREF(last);
    PyBuffer_Release(&view);
    PyBuffer_Release(&dropped);
    return result;
}

static PyMethodDef Scanner_methods[] = {
    {"add_shape", (PyCFunction)Scanner_add_shape, METH_VARARGS,
     "add_shape(body, name, widths): a TABLE_MAP body whose rows events the scan counts"},
    {"clear", (PyCFunction)Scanner_clear, METH_NOARGS, "forget every shape"},
    {"reset", (PyCFunction)Scanner_reset, METH_NOARGS,
     "drop the transaction a scan left under way (ST_MORE)"},
    {"scan", (PyCFunction)(void (*)(void))Scanner_scan, METH_VARARGS | METH_KEYWORDS,
     "scan(buf, start, end, seq, **bounds): frame the common transactions"},
    {NULL, NULL, 0, NULL},
};

static PyObject *Scanner_in_txn(Scanner *self, void *Py_UNUSED(closure)) {
    return PyBool_FromLong(self->in_txn);
}

static PyObject *Scanner_resume(Scanner *self, void *Py_UNUSED(closure)) {
    return PyLong_FromSize_t(self->in_txn ? self->resume : 0);
}

static PyObject *Scanner_txn_offset(Scanner *self, void *Py_UNUSED(closure)) {
    return PyLong_FromUnsignedLongLong(self->g_offset);
}

static PyObject *Scanner_shapes(Scanner *self, void *Py_UNUSED(closure)) {
    return PyLong_FromSize_t(self->nshapes);
}

static PyGetSetDef Scanner_getset[] = {
    {"in_transaction", (getter)Scanner_in_txn, NULL, "a ST_MORE left a transaction under way", NULL},
    {"shapes", (getter)Scanner_shapes, NULL, "registered TABLE_MAP shapes", NULL},
    {"resume", (getter)Scanner_resume, NULL,
     "where the transaction under way goes on (bytes after its first packet)", NULL},
    {"txn_offset", (getter)Scanner_txn_offset, NULL,
     "binlog offset of the transaction under way (or the last one)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ScannerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "headwater._native._ingest.Scanner",
    .tp_basicsize = sizeof(Scanner),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Scanner_init,
    .tp_dealloc = (destructor)Scanner_dealloc,
    .tp_methods = Scanner_methods,
    .tp_getset = Scanner_getset,
};

/* A canonical MariaDB GTID text "domain-server-seq" (as format_gtid writes it); 0 if not. */
static int parse_gtid(const uint8_t *p, size_t n, uint32_t *domain, uint64_t *seq) {
    uint64_t part[3] = {0, 0, 0};
    int k = 0;
    size_t digits = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t c = p[i];
        if (c == '-') {
            if (!digits || k == 2) return 0;
            k++;
            digits = 0;
        } else if (c >= '0' && c <= '9' && digits < 19) {
            if (digits == 1 && part[k] == 0) return 0; /* no leading zeros */
            part[k] = part[k] * 10 + (uint64_t)(c - '0');
            digits++;
        } else {
            return 0;
        }
    }
    if (k != 2 || !digits || part[0] > 0xFFFFFFFFu) return 0;
    *domain = (uint32_t)part[0];
    *seq = part[2];
    return 1;
}

/*
 * stamp(frames, start, seq0, off0, seg_limit, block_bytes, interval, open_first, max_ts) -> (n, end, ends, blocks, block_bytes, max_ts)
 *
 * Assigns seq0, seq0 + 1, ... to the frames of ``frames`` from byte ``start`` on and
 * computes their CRC32C, in place (a frame that already carries its seq was built with
 * its CRC: scan's seq0), stopping before a frame that would start at or beyond
 * ``seg_limit`` (absolute offset; the first frame is always taken) -- the store rolls the
 * segment there. Follows the store's sparse index on the way (log.py ``_encode``):
 * ``blocks`` lists (i, max_ts before frame i, leaf) for the frames that open an index
 * block, where ``leaf`` is (domain, lo, hi), the MariaDB GTID summary of the block that
 * frame closes (store/index.py block_summary) when that block began in this call and its
 * GTIDs are all canonical MariaDB ones of one domain, else None (Python summarizes it);
 * ``ends`` the absolute end offset of every frame stamped.
 */
static PyObject *stamp(PyObject *Py_UNUSED(module), PyObject *args) {
    Py_buffer view;
    Py_ssize_t start;
    unsigned long long seq0, off0, seg_limit, bb, interval, max_ts;
    int open_first;
    if (!PyArg_ParseTuple(args, "w*nKKKKKpK", &view, &start, &seq0, &off0, &seg_limit, &bb,
                          &interval, &open_first, &max_ts))
        return NULL;
    PyObject *ends = PyList_New(0), *blocks = PyList_New(0), *result = NULL;
    if (ends == NULL || blocks == NULL) goto done;
    uint8_t *b = view.buf;
    size_t p = (size_t)start, n = (size_t)view.len;
    uint64_t off = off0, seq = seq0;
    Py_ssize_t count = 0;
    int in_block = 0, leaf_ok = 0; /* a block opened in this call; its GTIDs summarize */
    uint32_t leaf_domain = 0;
    uint64_t leaf_lo = 0, leaf_hi = 0;
    while (p < n) {
        if (count && off >= seg_limit) break;
        if (n - p < FRAME_PREFIX + FIXED_SIZE || rd32(b + p) != FRAME_MAGIC) {
            PyErr_SetString(PyExc_ValueError, "stamp: not a record frame");
            goto done;
        }
        size_t body_len = rd32(b + p + 8);
        if (p + FRAME_PREFIX + body_len > n) {
            PyErr_SetString(PyExc_ValueError, "stamp: frame runs past the end");
            goto done;
        }
        uint8_t *h = b + p + FRAME_PREFIX;
        if (rd64(h) != seq) { /* not built with this seq (scan's seq0): stamp it now */
            wr64(h, seq);
            wr32(b + p + 4, crc32c(0, b + p + 8, 4 + body_len));
        }
        uint64_t ts = rd64(h + 32);
        size_t flen = FRAME_PREFIX + body_len;
        if (bb >= interval || (open_first && count == 0)) {
            PyObject *item;
            if (in_block && leaf_ok)
                item = Py_BuildValue("(nK(IKK))", count, max_ts, leaf_domain, leaf_lo, leaf_hi);
            else
                item = Py_BuildValue("(nKO)", count, max_ts, Py_None);
            if (item == NULL || PyList_Append(blocks, item) < 0) {
                Py_XDECREF(item);
                goto done;
            }
            Py_DECREF(item);
            bb = 0;
            in_block = 1;
            leaf_ok = 2; /* no GTID yet */
        }
        if (in_block && leaf_ok) {
            uint32_t d;
            uint64_t g;
            if (!parse_gtid(h + FIXED_SIZE, h[49], &d, &g)) {
                leaf_ok = 0;
            } else if (leaf_ok == 2) {
                leaf_ok = 1;
                leaf_domain = d;
                leaf_lo = leaf_hi = g;
            } else if (d != leaf_domain) {
                leaf_ok = 0;
            } else {
                if (g < leaf_lo) leaf_lo = g;
                if (g > leaf_hi) leaf_hi = g;
            }
        }
        bb += flen;
        if (ts > max_ts) max_ts = ts;
        off += flen;
        PyObject *e = PyLong_FromUnsignedLongLong(off);
        if (e == NULL || PyList_Append(ends, e) < 0) {
            Py_XDECREF(e);
            goto done;
        }
        Py_DECREF(e);
        seq++;
        count++;
        p += flen;
    }
    result = Py_BuildValue("(nnOOKK)", count, (Py_ssize_t)p, ends, blocks, bb, max_ts);
done:
    Py_XDECREF(ends);
    Py_XDECREF(blocks);
    PyBuffer_Release(&view);
    return result;
}

static PyObject *py_crc32c(PyObject *Py_UNUSED(module), PyObject *args) {
    Py_buffer view;
    unsigned int crc = 0;
    if (!PyArg_ParseTuple(args, "y*|I", &view, &crc)) return NULL;
    uint32_t r = crc32c(crc, view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(r);
}

static PyObject *py_crc32(PyObject *Py_UNUSED(module), PyObject *args) {
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "y*", &view)) return NULL;
    uint32_t r = event_crc32(view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(r);
}

/* The table versions, whatever the CPU has (tests check them where it has more). */
static PyObject *py_portable(PyObject *Py_UNUSED(module), PyObject *args) {
    Py_buffer view;
    int which;
    if (!PyArg_ParseTuple(args, "iy*", &which, &view)) return NULL;
    uint32_t r = which ? crc32c_sw(0, view.buf, (size_t)view.len)
                       : ~crc32_raw(0xFFFFFFFFu, view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(r);
}

/* ---- the consumer SDK's shard hash, a column at a time (issue #18) --------------------
 *
 * headwater.server.sharding.stable_hash is the CRC32C of u32le(len(part)) + part for
 * database, table and each key value; headwater.client.hashing.ShardHasher keeps the CRC
 * of the database and table parts per table and continues it (crc32c(b, crc32c(a)) ==
 * crc32c(a + b)). shard_column continues it over one key value per row, encoded as
 * sharding._canonical does for the kinds taken here: an int (exactly int, not bool) as its
 * decimal text, a str (exactly str) as UTF-8 with surrogateescape, bytes (exactly bytes)
 * as they are, None as "null". Any other value -- bool, float, Decimal, date, a JSON
 * binary's {"base64": ...}, a subclass, an int beyond 64 bits -- makes it return None: the
 * caller then hashes the column in Python. */

/* The decimal text of v into end[-20..-1] (backwards); returns its start. */
static uint8_t *format_ll(long long v, uint8_t *end) {
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    uint8_t *p = end;
    do {
        *--p = (uint8_t)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0) *--p = '-';
    return p;
}

/* The CRC of u32le(n) + text continued from crc; 0 with *ok = 0 for a kind not taken. */
static uint32_t shard_value(uint32_t crc, PyObject *v, int *ok) {
    uint8_t buf[4 + 64];
    const uint8_t *text;
    Py_ssize_t n;
    if (PyLong_CheckExact(v)) {
        int overflow;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow) { *ok = 0; return 0; }  /* x == -1 without an error when it fits */
        uint8_t *end = buf + sizeof buf;
        uint8_t *p = format_ll(x, end);
        n = end - p;
        wr32(p - 4, (uint32_t)n);
        return crc32c(crc, p - 4, (size_t)n + 4);
    }
    PyObject *owned = NULL;
    if (PyUnicode_CheckExact(v)) {
        if (PyUnicode_IS_ASCII(v)) {
            text = PyUnicode_DATA(v);
            n = PyUnicode_GET_LENGTH(v);
        } else {
            owned = PyUnicode_AsEncodedString(v, "utf-8", "surrogateescape");
            if (owned == NULL) { *ok = -1; return 0; }
            text = (const uint8_t *)PyBytes_AS_STRING(owned);
            n = PyBytes_GET_SIZE(owned);
        }
    } else if (PyBytes_CheckExact(v)) {
        text = (const uint8_t *)PyBytes_AS_STRING(v);
        n = PyBytes_GET_SIZE(v);
    } else if (v == Py_None) {
        text = (const uint8_t *)"null";
        n = 4;
    } else {
        *ok = 0;
        return 0;
    }
    if ((size_t)n > UINT32_MAX) { Py_XDECREF(owned); *ok = 0; return 0; }
    wr32(buf, (uint32_t)n);
    if ((size_t)n <= sizeof buf - 4) {
        memcpy(buf + 4, text, (size_t)n);
        crc = crc32c(crc, buf, (size_t)n + 4);
    } else {
        crc = crc32c(crc32c(crc, buf, 4), text, (size_t)n);
    }
    Py_XDECREF(owned);
    return crc;
}

/* events(payload, mask) -> [(index, type_code, body_start, body_end)] of the events of a
 * store record's payload (headwater/changes/__init__.py: each a u32 LE length, then the
 * 19-byte header and the body) whose type code's byte in ``mask`` (256 bytes) is not 0, in
 * order, ``index`` counting every event; None when the payload does not frame (a length
 * shorter than a header or past the end: the Python decoder names that error). The changes
 * decoder's walk of a record (headwater.changes._planned_blocks): a one-row transaction's
 * GTID, annotation and XID are passed over here rather than framed in Python. */
static PyObject *py_events(PyObject *Py_UNUSED(module), PyObject *args) {
    Py_buffer payload, mask;
    if (!PyArg_ParseTuple(args, "y*y*:events", &payload, &mask)) return NULL;
    PyObject *out = NULL;
    if (mask.len != 256) {
        PyErr_SetString(PyExc_ValueError, "events: mask must be 256 bytes");
        goto done;
    }
    const uint8_t *p = payload.buf, *m = mask.buf;
    Py_ssize_t n = payload.len, pos = 0, index = 0;
    out = PyList_New(0);
    if (out == NULL) goto done;
    while (pos < n) {
        if (n - pos < 4) goto unframed;
        uint32_t size = rd32(p + pos);
        pos += 4;
        if (size < 19 || (Py_ssize_t)size > n - pos) goto unframed;
        uint8_t code = p[pos + 4];
        if (m[code]) {
            PyObject *t = Py_BuildValue("(ninn)", index, (int)code, pos + 19,
                                        pos + (Py_ssize_t)size);
            int failed = t == NULL || PyList_Append(out, t) < 0;
            Py_XDECREF(t);
            if (failed) {
                Py_CLEAR(out);
                goto done;
            }
        }
        pos += size;
        index++;
    }
    goto done;
unframed:
    Py_DECREF(out);
    out = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&payload);
    PyBuffer_Release(&mask);
    return out;
}

/* shard_column(prefix, values, index=-1): [hash of each row's one-column key] or None;
 * with index >= 0, values are rows (tuples or lists) and the key is row[index]. */
static PyObject *shard_column(PyObject *Py_UNUSED(module), PyObject *args) {
    unsigned int prefix;
    PyObject *values;
    Py_ssize_t index = -1;
    if (!PyArg_ParseTuple(args, "IO|n", &prefix, &values, &index)) return NULL;
    PyObject *seq = PySequence_Fast(values, "shard_column: values must be a sequence");
    if (seq == NULL) return NULL;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    PyObject *out = PyList_New(count);
    if (out == NULL) goto fail;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *v = items[i];
        if (index >= 0) {
            /* a row (tuple or list; anything else: the caller's Python path) */
            if (!PyTuple_Check(v) && !PyList_Check(v)) {
                Py_DECREF(out);
                Py_DECREF(seq);
                Py_RETURN_NONE;
            }
            if (index >= Py_SIZE(v)) {
                PyErr_SetString(PyExc_IndexError, "shard_column: row index out of range");
                goto fail;
            }
            v = PyTuple_Check(v) ? PyTuple_GET_ITEM(v, index) : PyList_GET_ITEM(v, index);
        }
        int ok = 1;
        uint32_t h = shard_value(prefix, v, &ok);
        if (ok < 0) goto fail;
        if (ok == 0) {
            Py_DECREF(out);
            Py_DECREF(seq);
            Py_RETURN_NONE;
        }
        PyObject *o = PyLong_FromUnsignedLong(h);
        if (o == NULL) goto fail;
        PyList_SET_ITEM(out, i, o);
    }
    Py_DECREF(seq);
    return out;
fail:
    Py_XDECREF(out);
    Py_DECREF(seq);
    return NULL;
}

static PyMethodDef module_methods[] = {
    {"_portable_crc", py_portable, METH_VARARGS,
     "_portable_crc(which, data): table CRC32 (0) or CRC32C (1), never the CPU instructions"},
    {"crc32", py_crc32, METH_VARARGS, "crc32(data): the binlog's CRC32 (zlib's), as the scan checks it"},
    {"stamp", stamp, METH_VARARGS, "assign seqs and CRC32Cs to record frames (see the source)"},
    {"crc32c", py_crc32c, METH_VARARGS, "crc32c(data, crc=0): CRC32C, as the crc32c package"},
    {"events", py_events, METH_VARARGS,
     "events(payload, mask): (index, type, body start, body end) of the wanted events, or None"},
    {"shard_column", shard_column, METH_VARARGS,
     "shard_column(prefix, values, index=-1): the shard hash of each one-column key, or None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "headwater._native._ingest",
    "The reader's compiled fast path (headwater/_native/__init__.py).", -1, module_methods,
    NULL, NULL, NULL, NULL,
};

#ifdef HW_CRC
#define HW_CRC_FLAGS (have_sse42 | have_pclmul << 1)
#else
#define HW_CRC_FLAGS 0
#endif

PyMODINIT_FUNC PyInit__ingest(void) {
    crc32c_init();
    crc32_init();
#ifdef HW_CRC
    __builtin_cpu_init();
    have_sse42 = __builtin_cpu_supports("sse4.2") != 0;
    have_pclmul = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1") &&
                  crc32_fold_ok();
#endif
    if (PyType_Ready(&ScannerType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL) return NULL;
    if (PyModule_AddObjectRef(m, "Scanner", (PyObject *)&ScannerType) < 0 ||
        PyModule_AddIntConstant(m, "SLOW", ST_SLOW) < 0 ||
        PyModule_AddIntConstant(m, "MORE", ST_MORE) < 0 ||
        PyModule_AddIntConstant(m, "LIMIT", ST_LIMIT) < 0 ||
        PyModule_AddIntConstant(m, "SHAPE", ST_SHAPE) < 0 ||
        PyModule_AddIntConstant(m, "HW_CRC", HW_CRC_FLAGS) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
