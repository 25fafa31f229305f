/*
 * headwater._native._rdproduce: a Kafka producer whose produce loop runs in C, without the
 * GIL, over the change-row messages of an Arrow batch (headwater/sinks/kafka/native.py).
 *
 * Why: the Kafka sink's Python loop calls confluent-kafka's ``Producer.produce`` once a
 * message, holding the GIL for the call's argument parsing, a per-message state
 * allocation and librdkafka's enqueue. In the bus sinks' driver path
 * (headwater/pipeline/busdirect.py) that loop and the decoding of the next batch share one
 * GIL, so their times added up (bench/kafka.py: the produce loop was about half the
 * writer thread's samples). Here the loop over a batch's messages holds no GIL, and the
 * messages are never Python objects: keys come from the batch's ``key`` column buffers,
 * values from one contiguous buffer (_busjoin.join_buffer).
 *
 * The library is librdkafka, the client confluent-kafka wraps, loaded with dlopen from the
 * copy confluent-kafka's wheel ships (or any path the caller names): the settings are
 * librdkafka's, the same dictionary a confluent-kafka Producer gets. Only librdkafka's
 * public, ABI-stable C API is used; its declarations below are copied in shape from
 * rdkafka.h (librdkafka src/rdkafka.h: rd_kafka_message_t, rd_kafka_produce, the
 * RD_KAFKA_MSG_F_* flags, RD_KAFKA_PARTITION_UA, the error codes used), so no header is
 * needed to build.
 *
 * Delivery reports: librdkafka's ``dr_msg_cb`` runs inside rd_kafka_poll/rd_kafka_flush,
 * on the thread calling them (here, with the GIL released); it records the first failed
 * message's error code and topic and counts failures, in C. ``delivery.report.only.error``
 * is set, so successful messages cost no callback at all.
 *
 * A producer is used by one thread at a time (the sink's pool hands each caller its own);
 * ``busy`` guards close() against a call in flight on another thread.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>

/* ---- librdkafka's public API, as declared in rdkafka.h ---- */
typedef struct rd_kafka_s rd_kafka_t;
typedef struct rd_kafka_conf_s rd_kafka_conf_t;
typedef struct rd_kafka_topic_s rd_kafka_topic_t;
typedef struct rd_kafka_topic_conf_s rd_kafka_topic_conf_t;
typedef int rd_kafka_resp_err_t; /* an enum in rdkafka.h: int-sized */
typedef struct rd_kafka_message_s {
    rd_kafka_resp_err_t err;
    rd_kafka_topic_t *rkt;
    int32_t partition;
    void *payload;
    size_t len;
    void *key;
    size_t key_len;
    int64_t offset;
    void *_private;
} rd_kafka_message_t;

#define RD_KAFKA_PRODUCER 0
#define RD_KAFKA_CONF_OK 0
#define RD_KAFKA_MSG_F_COPY 0x2
#define RD_KAFKA_PARTITION_UA ((int32_t)-1)
#define RD_KAFKA_RESP_ERR__QUEUE_FULL (-184)

typedef void (*dr_msg_cb_t)(rd_kafka_t *, const rd_kafka_message_t *, void *);

static struct {
    void *lib;
    int (*version)(void);
    rd_kafka_conf_t *(*conf_new)(void);
    void (*conf_destroy)(rd_kafka_conf_t *);
    int (*conf_set)(rd_kafka_conf_t *, const char *, const char *, char *, size_t);
    void (*conf_set_dr_msg_cb)(rd_kafka_conf_t *, dr_msg_cb_t);
    void (*conf_set_opaque)(rd_kafka_conf_t *, void *);
    rd_kafka_t *(*new_)(int, rd_kafka_conf_t *, char *, size_t);
    void (*destroy)(rd_kafka_t *);
    rd_kafka_topic_t *(*topic_new)(rd_kafka_t *, const char *, rd_kafka_topic_conf_t *);
    void (*topic_destroy)(rd_kafka_topic_t *);
    const char *(*topic_name)(const rd_kafka_topic_t *);
    int (*produce)(rd_kafka_topic_t *, int32_t, int, void *, size_t, const void *, size_t,
                   void *);
    rd_kafka_resp_err_t (*last_error)(void);
    int (*poll)(rd_kafka_t *, int);
    rd_kafka_resp_err_t (*flush)(rd_kafka_t *, int);
    int (*outq_len)(rd_kafka_t *);
    const char *(*err2str)(rd_kafka_resp_err_t);
} rd;

#define SYM(field, name)                                                                   \
    do {                                                                                   \
        *(void **)(&rd.field) = dlsym(lib, name);                                          \
        if (rd.field == NULL) {                                                            \
            PyErr_Format(PyExc_OSError, "librdkafka at %s lacks %s", path, name);          \
            goto fail;                                                                     \
        }                                                                                  \
    } while (0)

/* load(path): librdkafka from ``path`` (once per process; a second call with the library
 * loaded does nothing). */
static PyObject *load(PyObject *self, PyObject *args) {
    const char *path;
    if (!PyArg_ParseTuple(args, "s", &path)) return NULL;
    if (rd.lib != NULL) Py_RETURN_NONE;
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        const char *why = dlerror();
        PyErr_Format(PyExc_OSError, "cannot load librdkafka: %s", why ? why : path);
        return NULL;
    }
    SYM(version, "rd_kafka_version");
    SYM(conf_new, "rd_kafka_conf_new");
    SYM(conf_destroy, "rd_kafka_conf_destroy");
    SYM(conf_set, "rd_kafka_conf_set");
    SYM(conf_set_dr_msg_cb, "rd_kafka_conf_set_dr_msg_cb");
    SYM(conf_set_opaque, "rd_kafka_conf_set_opaque");
    SYM(new_, "rd_kafka_new");
    SYM(destroy, "rd_kafka_destroy");
    SYM(topic_new, "rd_kafka_topic_new");
    SYM(topic_destroy, "rd_kafka_topic_destroy");
    SYM(topic_name, "rd_kafka_topic_name");
    SYM(produce, "rd_kafka_produce");
    SYM(last_error, "rd_kafka_last_error");
    SYM(poll, "rd_kafka_poll");
    SYM(flush, "rd_kafka_flush");
    SYM(outq_len, "rd_kafka_outq_len");
    SYM(err2str, "rd_kafka_err2str");
    rd.lib = lib;
    Py_RETURN_NONE;
fail:
    memset(&rd, 0, sizeof(rd));
    dlclose(lib);
    return NULL;
}

static PyObject *version(PyObject *self, PyObject *unused) {
    if (rd.lib == NULL) Py_RETURN_NONE;
    return PyLong_FromLong(rd.version());
}

static PyObject *err2str(PyObject *self, PyObject *args) {
    int code;
    if (!PyArg_ParseTuple(args, "i", &code)) return NULL;
    if (rd.lib == NULL) return PyUnicode_FromFormat("error %d", code);
    return PyUnicode_FromString(rd.err2str(code));
}

/* ---- the producer ---- */
typedef struct {
    PyObject_HEAD
    rd_kafka_t *rk;
    int busy;
    /* the first failed delivery (written by dr_cb inside poll/flush) */
    rd_kafka_resp_err_t first_err;
    char first_topic[256];
    long long failed;
} Producer;

static void dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque) {
    Producer *p = opaque;
    if (m->err == 0) return;
    p->failed++;
    if (p->first_err == 0) {
        p->first_err = m->err;
        const char *name = m->rkt ? rd.topic_name(m->rkt) : "";
        snprintf(p->first_topic, sizeof(p->first_topic), "%s", name ? name : "");
    }
}

static int Producer_init(Producer *self, PyObject *args, PyObject *kwds) {
    PyObject *settings;
    if (!PyArg_ParseTuple(args, "O", &settings)) return -1;
    if (rd.lib == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "librdkafka is not loaded (load(path) first)");
        return -1;
    }
    if (self->rk != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "producer already initialised");
        return -1;
    }
    PyObject *fast = PySequence_Fast(settings, "settings: a sequence of (name, value) strings");
    if (fast == NULL) return -1;
    rd_kafka_conf_t *conf = rd.conf_new();
    char errstr[512];
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fast); i++) {
        const char *name, *value;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(fast, i), "ss", &name, &value)) goto fail;
        errstr[0] = 0;
        if (rd.conf_set(conf, name, value, errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK) {
            /* (the value is not repeated: it may be a secret) */
            PyErr_Format(PyExc_ValueError, "librdkafka rejects the setting %s", name);
            goto fail;
        }
    }
    if (rd.conf_set(conf, "delivery.report.only.error", "true", errstr, sizeof(errstr)) !=
        RD_KAFKA_CONF_OK) {
        PyErr_SetString(PyExc_ValueError, "librdkafka rejects delivery.report.only.error");
        goto fail;
    }
    rd.conf_set_dr_msg_cb(conf, dr_cb);
    rd.conf_set_opaque(conf, self);
    errstr[0] = 0;
    rd_kafka_t *rk = rd.new_(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
    if (rk == NULL) {
        PyErr_Format(PyExc_ValueError, "librdkafka cannot create a producer: %s", errstr);
        goto fail;
    }
    self->rk = rk; /* (rd_kafka_new owns conf now) */
    Py_DECREF(fast);
    return 0;
fail:
    rd.conf_destroy(conf);
    Py_DECREF(fast);
    return -1;
}

static int enter(Producer *self) {
    if (self->rk == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "producer closed");
        return -1;
    }
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "producer in use by another thread");
        return -1;
    }
    self->busy = 1;
    return 0;
}

static void close_rk(Producer *self) {
    rd_kafka_t *rk = self->rk;
    self->rk = NULL;
    if (rk == NULL) return;
    Py_BEGIN_ALLOW_THREADS
    rd.destroy(rk); /* (waits for librdkafka's threads; pending messages are dropped) */
    Py_END_ALLOW_THREADS
}

static void Producer_dealloc(Producer *self) {
    if (!self->busy) close_rk(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Producer_close(Producer *self, PyObject *unused) {
    if (self->busy) {
        PyErr_SetString(PyExc_RuntimeError, "producer in use by another thread");
        return NULL;
    }
    close_rk(self);
    Py_RETURN_NONE;
}

/* produce(topic, value, key, partition) -> 0 or librdkafka's error code (the queue full is
 * RD_KAFKA_RESP_ERR__QUEUE_FULL, -184). */
static PyObject *Producer_produce(Producer *self, PyObject *args) {
    const char *topic;
    Py_buffer value = {0}, key = {0};
    int partition;
    if (!PyArg_ParseTuple(args, "sz*z*i", &topic, &value, &key, &partition)) return NULL;
    PyObject *out = NULL;
    if (enter(self) < 0) goto done;
    rd_kafka_topic_t *rkt = rd.topic_new(self->rk, topic, NULL);
    int err = 0;
    if (rkt == NULL)
        err = rd.last_error();
    else {
        if (rd.produce(rkt, partition, RD_KAFKA_MSG_F_COPY, value.buf, (size_t)value.len,
                       key.buf, (size_t)key.len, NULL) == -1)
            err = rd.last_error();
        rd.topic_destroy(rkt);
    }
    self->busy = 0;
    out = PyLong_FromLong(err);
done:
    if (value.obj) PyBuffer_Release(&value);
    if (key.obj) PyBuffer_Release(&key);
    return out;
}

/* A buffer argument that may be None. */
static int get_buffer(PyObject *obj, Py_buffer *view) {
    if (obj == Py_None) return 0;
    return PyObject_GetBuffer(obj, view, PyBUF_SIMPLE);
}

static int bit(const uint8_t *bits, Py_ssize_t i) {
    return bits == NULL || ((bits[i >> 3] >> (i & 7)) & 1);
}

/* produce_rows(n, topics, groups, goffset, kvalid, koffsets, kdata, koffset, kwide,
 *              voffsets, vdata, single) -> (produced, error)
 *
 * Row i: topic ``topics[groups[goffset + i]]`` (``groups`` None: ``topics[0]``); key the
 * Arrow string/binary column's value at ``koffset + i`` (validity ``kvalid``, None: no
 * nulls; int32 offsets, or int64 with ``kwide``); value ``vdata[voffsets[i]:voffsets[i +
 * 1]]`` (int64 offsets, _busjoin.join_buffer). Partition: 0 with ``single``, else
 * librdkafka's partitioner by key, and 0 for a null key (the Python loop's rule). The loop
 * runs without the GIL; a full local queue is drained by rd_kafka_poll (50 ms) and the
 * message tried again. It stops at another error: ``produced`` messages were queued, the
 * next failed with ``error`` (0: all were queued). The caller checked the lengths. */
static PyObject *Producer_produce_rows(Producer *self, PyObject *args) {
    Py_ssize_t n, goffset, koffset;
    PyObject *topics, *groups, *kvalid, *koffsets, *kdata, *voffsets, *vdata;
    int kwide, single;
    if (!PyArg_ParseTuple(args, "nOOnOOOnpOOp", &n, &topics, &groups, &goffset, &kvalid,
                          &koffsets, &kdata, &koffset, &kwide, &voffsets, &vdata, &single))
        return NULL;
    if (!PyTuple_Check(topics) || PyTuple_GET_SIZE(topics) == 0) {
        PyErr_SetString(PyExc_TypeError, "topics: a non-empty tuple of str");
        return NULL;
    }
    Py_ssize_t ntopics = PyTuple_GET_SIZE(topics);
    Py_buffer bg = {0}, bkv = {0}, bko = {0}, bkd = {0}, bvo = {0}, bvd = {0};
    rd_kafka_topic_t **rkts = NULL;
    PyObject *out = NULL;
    if (get_buffer(groups, &bg) < 0 || get_buffer(kvalid, &bkv) < 0 ||
        get_buffer(koffsets, &bko) < 0 || get_buffer(kdata, &bkd) < 0 ||
        get_buffer(voffsets, &bvo) < 0 || get_buffer(vdata, &bvd) < 0)
        goto done;
    if (bko.buf == NULL || bvo.buf == NULL ||
        bvo.len < (Py_ssize_t)sizeof(int64_t) * (n + 1) ||
        bko.len < (Py_ssize_t)(kwide ? 8 : 4) * (koffset + n + 1) ||
        (bg.buf != NULL && bg.len < (Py_ssize_t)sizeof(int32_t) * (goffset + n)) ||
        (bkv.buf != NULL && bkv.len * 8 < koffset + n)) {
        PyErr_SetString(PyExc_ValueError, "produce_rows: a buffer shorter than its rows");
        goto done;
    }
    if (enter(self) < 0) goto done;
    rkts = PyMem_Calloc((size_t)ntopics, sizeof(*rkts));
    if (rkts == NULL) {
        self->busy = 0;
        PyErr_NoMemory();
        goto done;
    }
    int err = 0, named = 1;
    for (Py_ssize_t t = 0; t < ntopics && err == 0; t++) {
        const char *name = PyUnicode_AsUTF8(PyTuple_GET_ITEM(topics, t));
        if (name == NULL) {
            named = 0;
            break;
        }
        rkts[t] = rd.topic_new(self->rk, name, NULL);
        if (rkts[t] == NULL) err = rd.last_error();
    }
    if (!named) { /* (a topic that is not text: the handles made so far are let go) */
        for (Py_ssize_t t = 0; t < ntopics; t++)
            if (rkts[t] != NULL) rd.topic_destroy(rkts[t]);
        self->busy = 0;
        goto done;
    }
    const int32_t *gi = bg.buf;
    const uint8_t *kv = bkv.buf;
    const uint8_t *kd = bkd.buf, *vd = bvd.buf;
    const int64_t *vo = bvo.buf;
    const int32_t *ko32 = bko.buf;
    const int64_t *ko64 = bko.buf;
    Py_ssize_t i = 0;
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS
    for (; i < n && err == 0; i++) {
        Py_ssize_t g = gi ? gi[goffset + i] : 0;
        int64_t vs = vo[i], ve = vo[i + 1];
        if (g < 0 || g >= ntopics || vs < 0 || ve < vs || ve > bvd.len) {
            bad = 1;
            break;
        }
        const void *key = NULL;
        size_t klen = 0;
        int32_t partition = single ? 0 : RD_KAFKA_PARTITION_UA;
        Py_ssize_t k = koffset + i;
        if (bit(kv, k)) {
            int64_t ks = kwide ? ko64[k] : ko32[k], ke = kwide ? ko64[k + 1] : ko32[k + 1];
            if (ks < 0 || ke < ks || ke > bkd.len) {
                bad = 1;
                break;
            }
            key = kd ? (const void *)(kd + ks) : ""; /* ("": an empty key, not a null one) */
            klen = (size_t)(ke - ks);
        } else if (!single)
            partition = 0;
        for (;;) {
            if (rd.produce(rkts[g], partition, RD_KAFKA_MSG_F_COPY, (void *)(vd + vs),
                           (size_t)(ve - vs), key, klen, NULL) == 0)
                break;
            int e = rd.last_error();
            if (e != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
                err = e;
                break;
            }
            rd.poll(self->rk, 50);
        }
        if (err) break;
    }
    Py_END_ALLOW_THREADS
    for (Py_ssize_t t = 0; t < ntopics; t++)
        if (rkts[t] != NULL) rd.topic_destroy(rkts[t]);
    self->busy = 0;
    if (bad)
        PyErr_Format(PyExc_ValueError, "produce_rows: row %zd is out of its buffers", i);
    else
        out = Py_BuildValue("ni", i, err);
done:
    PyMem_Free(rkts);
    if (bg.obj) PyBuffer_Release(&bg);
    if (bkv.obj) PyBuffer_Release(&bkv);
    if (bko.obj) PyBuffer_Release(&bko);
    if (bkd.obj) PyBuffer_Release(&bkd);
    if (bvo.obj) PyBuffer_Release(&bvo);
    if (bvd.obj) PyBuffer_Release(&bvd);
    return out;
}

/* poll(timeout_ms) -> events served (delivery reports), without the GIL. */
static PyObject *Producer_poll(Producer *self, PyObject *args) {
    int timeout, r;
    if (!PyArg_ParseTuple(args, "i", &timeout)) return NULL;
    if (enter(self) < 0) return NULL;
    Py_BEGIN_ALLOW_THREADS
    r = rd.poll(self->rk, timeout);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    return PyLong_FromLong(r);
}

/* flush(timeout_ms) -> messages not yet delivered (0: every message delivered or failed,
 * failures recorded), without the GIL. */
static PyObject *Producer_flush(Producer *self, PyObject *args) {
    int timeout, left;
    if (!PyArg_ParseTuple(args, "i", &timeout)) return NULL;
    if (enter(self) < 0) return NULL;
    Py_BEGIN_ALLOW_THREADS
    rd.flush(self->rk, timeout);
    left = rd.outq_len(self->rk);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    return PyLong_FromLong(left);
}

/* take_error() -> (code, topic, failed) of the first failed delivery since the last call,
 * or None; clears it. */
static PyObject *Producer_take_error(Producer *self, PyObject *unused) {
    if (self->first_err == 0) Py_RETURN_NONE;
    PyObject *out = Py_BuildValue("isL", self->first_err, self->first_topic, self->failed);
    self->first_err = 0;
    self->first_topic[0] = 0;
    self->failed = 0;
    return out;
}

static PyMethodDef Producer_methods[] = {
    {"produce", (PyCFunction)Producer_produce, METH_VARARGS,
     "produce(topic, value, key, partition) -> 0 or librdkafka's error code"},
    {"produce_rows", (PyCFunction)Producer_produce_rows, METH_VARARGS,
     "produce_rows(...) -> (produced, error): a batch's messages (rdproduce.c)"},
    {"poll", (PyCFunction)Producer_poll, METH_VARARGS, "poll(timeout_ms) -> events"},
    {"flush", (PyCFunction)Producer_flush, METH_VARARGS, "flush(timeout_ms) -> left"},
    {"take_error", (PyCFunction)Producer_take_error, METH_NOARGS,
     "take_error() -> (code, topic, failed) or None"},
    {"close", (PyCFunction)Producer_close, METH_NOARGS, "destroy the librdkafka handle"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject ProducerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "headwater._native._rdproduce.Producer",
    .tp_basicsize = sizeof(Producer),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Producer_init,
    .tp_dealloc = (destructor)Producer_dealloc,
    .tp_methods = Producer_methods,
    .tp_doc = "Producer(settings): a librdkafka producer (rdproduce.c)",
};

static PyMethodDef methods[] = {
    {"load", load, METH_VARARGS, "load(path): librdkafka from path (once)"},
    {"version", version, METH_NOARGS, "librdkafka's version number, or None if not loaded"},
    {"err2str", err2str, METH_VARARGS, "err2str(code) -> librdkafka's text of an error code"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_rdproduce",
    "A librdkafka producer whose produce loop over a batch runs without the GIL.", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__rdproduce(void) {
    if (PyType_Ready(&ProducerType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    Py_INCREF(&ProducerType);
    if (PyModule_AddObject(m, "Producer", (PyObject *)&ProducerType) < 0) {
        Py_DECREF(&ProducerType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
