/*
 * placeviz._wire: read what the graph IR needs straight from a serialized GraphDef.
 *
 * Why this exists: building placeviz's Graph from upb messages costs about 4 us per node
 * (a Python string for every name, op, device and input, plus making each NodeDef's `attr`
 * map object to read `_class` and the op-fact attrs), against 0.6 us to parse. Reading the
 * same fields from the bytes in C takes a fraction of that. The pure-Python path in
 * placeviz/graph.py stays the reference: every function here returns None whenever the input
 * is anything but the plain case (duplicate or empty names, unknown inputs, odd wire forms),
 * and the caller then runs the Python path, which gives the exact result or error. The
 * results are equal to the Python path's, node for node (tests/test_wire.py checks that).
 *
 * The bytes have already been parsed by upb when these run (so they are a valid GraphDef),
 * but every read is still bounds-checked.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <structmember.h>

/* ------------------------------------------------------------------ wire format */

static int read_varint(const uint8_t **pp, const uint8_t *end, uint64_t *out)
{
    const uint8_t *p = *pp;
    if (p < end && *p < 0x80) { /* one byte: most tags and lengths */
        *out = *p;
        *pp = p + 1;
        return 1;
    }
    uint64_t v = 0;
    for (int shift = 0; shift < 64 && p < end; shift += 7) {
        uint8_t b = *p++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *pp = p;
            *out = v;
            return 1;
        }
    }
    return 0;
}

/* Read one tag; 0 at the end or on a malformed tag. */
static int read_tag(const uint8_t **pp, const uint8_t *end, uint32_t *field, int *wire_type)
{
    uint64_t tag;
    if (*pp >= end || !read_varint(pp, end, &tag) || (tag >> 3) == 0 || (tag >> 3) > 0x1fffffff)
        return 0;
    *field = (uint32_t)(tag >> 3);
    *wire_type = (int)(tag & 7);
    return 1;
}

/* A length-delimited payload: [*start, *start + *len). */
static int read_len(const uint8_t **pp, const uint8_t *end, const uint8_t **start, uint32_t *len)
{
    uint64_t n;
    if (!read_varint(pp, end, &n) || n > (uint64_t)(end - *pp))
        return 0;
    *start = *pp;
    *len = (uint32_t)n;
    *pp += n;
    return 1;
}

/* Skip a field's value; 0 if malformed or a group (never in TF's protos). */
static int skip_value(const uint8_t **pp, const uint8_t *end, int wire_type)
{
    uint64_t v;
    const uint8_t *s;
    uint32_t n;
    switch (wire_type) {
    case 0:
        return read_varint(pp, end, &v);
    case 1:
        if (end - *pp < 8) return 0;
        *pp += 8;
        return 1;
    case 2:
        return read_len(pp, end, &s, &n);
    case 5:
        if (end - *pp < 4) return 0;
        *pp += 4;
        return 1;
    default:
        return 0;
    }
}

/* Read one map<string, AttrValue> entry of a NodeDef's attr field (field 5, wire type 2) at *pp:
 * key = 1, value = 2, each at most once (a repeated value would merge, which only a full parse
 * answers). 0 when the entry is not that plain form: the caller then declines. A missing key or
 * value reads as empty, as protobuf's defaults. */
static int read_attr_entry(const uint8_t **pp, const uint8_t *end, int wire_type, const uint8_t **key,
                           uint32_t *key_len, const uint8_t **value, uint32_t *value_len)
{
    const uint8_t *entry, *q, *entry_end;
    uint32_t entry_len;
    if (wire_type != 2 || !read_len(pp, end, &entry, &entry_len)) return 0;
    *key = (const uint8_t *)"";
    *value = (const uint8_t *)"";
    *key_len = *value_len = 0;
    int keys = 0, vals = 0;
    q = entry;
    entry_end = entry + entry_len;
    while (q < entry_end) {
        uint32_t f;
        int w;
        if (!read_tag(&q, entry_end, &f, &w)) return 0;
        if (f == 1 && w == 2) {
            if (!read_len(&q, entry_end, key, key_len)) return 0;
            keys++;
        } else if (f == 2 && w == 2) {
            if (!read_len(&q, entry_end, value, value_len)) return 0;
            vals++;
        } else {
            return 0;
        }
    }
    return keys <= 1 && vals <= 1;
}

/* ------------------------------------------------------------------ byte-string hash table */

typedef struct {
    uint32_t off, len;
} Span;

/* A secret of this process mixed into every hash (set at import from Python's own string hash,
 * which is randomized per process unless PYTHONHASHSEED says otherwise). Without it a graph file
 * could name its nodes so that they share a run of slots: linear probing then compares every
 * name with every earlier one (a crafted 200k-node graph took 14 s to load instead of 0.2 s).
 * Nothing placeviz outputs depends on it: entries are numbered in insertion order. */
static uint64_t hash_seed = 0;

static uint64_t hash_bytes(const uint8_t *p, uint32_t n)
{
    /* 8 bytes at a time, multiply-xorshift mixing: node names are long and share prefixes. */
    uint64_t h = (0x9E3779B97F4A7C15ULL ^ hash_seed) ^ n;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdULL;
        h ^= h >> 32;
        p += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, p, n);
    h = (h ^ w) * 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 29;
    h *= 0xff51afd7ed558ccdULL;
    return h ^ (h >> 32);
}

/* Open addressing over spans of `base`. A slot holds the span, 32 bits of its hash and its
 * entry number + 1 (0 = empty), so a probe touches one slot and compares bytes only when the
 * hash bits match: at 200k+ names, cache misses are the cost of a lookup. */
typedef struct {
    uint32_t hash, len, off;
    int32_t entry; /* entry number + 1; 0 = empty */
} Slot;

typedef struct {
    const uint8_t *base;
    Slot *slots;
    uint64_t mask;
    int32_t count;
} Table;

static int table_init(Table *t, const uint8_t *base, int32_t expected)
{
    uint64_t size = 16;
    while (size < (uint64_t)expected * 2 + 2) size <<= 1;
    t->base = base;
    t->slots = calloc(size, sizeof(Slot));
    t->mask = size - 1;
    t->count = 0;
    return t->slots != NULL;
}

static void table_free(Table *t)
{
    free(t->slots);
}

/* Entry number of these bytes, or -1. With `insert`, adds them if missing (*added = 1); -2 if
 * out of memory. Entries are numbered in insertion order. */
static int32_t table_find_hashed(Table *t, uint32_t off, uint32_t len, uint64_t h, int insert, int *added)
{
    const uint8_t *p = t->base + off;
    uint32_t h32 = (uint32_t)(h >> 32);
    uint64_t i = h & t->mask;
    for (;;) {
        Slot *s = &t->slots[i];
        if (s->entry == 0) break;
        if (s->hash == h32 && s->len == len && memcmp(t->base + s->off, p, len) == 0)
            return s->entry - 1;
        i = (i + 1) & t->mask;
    }
    if (!insert) return -1;
    if ((uint64_t)(t->count + 1) * 2 > t->mask + 1) { /* grow and rehash */
        uint64_t size = (t->mask + 1) * 2;
        Slot *slots = calloc(size, sizeof(Slot));
        if (!slots) return -2;
        for (uint64_t k = 0; k <= t->mask; k++) {
            Slot s = t->slots[k];
            if (!s.entry) continue;
            uint64_t j = hash_bytes(t->base + s.off, s.len) & (size - 1);
            while (slots[j].entry) j = (j + 1) & (size - 1);
            slots[j] = s;
        }
        free(t->slots);
        t->slots = slots;
        t->mask = size - 1;
        i = h & t->mask;
        while (t->slots[i].entry) i = (i + 1) & t->mask;
    }
    Slot *s = &t->slots[i];
    s->hash = h32;
    s->len = len;
    s->off = off;
    s->entry = ++t->count;
    *added = 1;
    return t->count - 1;
}

static int32_t table_find(Table *t, uint32_t off, uint32_t len, int insert, int *added)
{
    return table_find_hashed(t, off, len, hash_bytes(t->base + off, len), insert, added);
}

/* Warm the cache for a later lookup of hash h: its first slot and, when that slot's hash bits
 * match, the bytes the lookup will compare. */
static inline void table_prefetch(const Table *t, uint64_t h, int stage)
{
    const Slot *s = &t->slots[h & t->mask];
    if (stage == 0)
        __builtin_prefetch(s);
    else if (s->entry && s->hash == (uint32_t)(h >> 32))
        __builtin_prefetch(t->base + s->off);
}

/* ------------------------------------------------------------------ scan_graph */

typedef struct {
    Span node, name, op, device;
    uint32_t first_input, num_inputs;
} NodeRec;

typedef struct {
    NodeRec *nodes;
    size_t n, cap;
    Span *inputs;
    size_t n_inputs, cap_inputs;
} Scan;

static void scan_free(Scan *s)
{
    free(s->nodes);
    free(s->inputs);
}

/* 1 ok, 0 not the plain case (caller returns None), -1 out of memory. */
static int scan_node(Scan *s, const uint8_t *base, const uint8_t *p, const uint8_t *end)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 1024;
        NodeRec *grown = realloc(s->nodes, cap * sizeof(NodeRec));
        if (!grown) return -1;
        s->nodes = grown;
        s->cap = cap;
    }
    NodeRec *r = &s->nodes[s->n];
    memset(r, 0, sizeof(*r));
    r->node.off = (uint32_t)(p - base);
    r->node.len = (uint32_t)(end - p);
    r->first_input = (uint32_t)s->n_inputs;
    int has_name = 0, has_op = 0;
    uint32_t field;
    int wt;
    while (p < end) {
        if (!read_tag(&p, end, &field, &wt)) return 0;
        if (field >= 1 && field <= 4) {
            const uint8_t *v;
            uint32_t n;
            if (wt != 2 || !read_len(&p, end, &v, &n)) return 0;
            Span sp = {(uint32_t)(v - base), n};
            if (field == 1) { r->name = sp; has_name = 1; }
            else if (field == 2) { r->op = sp; has_op = 1; }
            else if (field == 4) r->device = sp;
            else {
                if (s->n_inputs == s->cap_inputs) {
                    size_t cap = s->cap_inputs ? s->cap_inputs * 2 : 4096;
                    Span *grown = realloc(s->inputs, cap * sizeof(Span));
                    if (!grown) return -1;
                    s->inputs = grown;
                    s->cap_inputs = cap;
                }
                s->inputs[s->n_inputs++] = sp;
                r->num_inputs++;
            }
        } else if (!skip_value(&p, end, wt)) {
            return 0;
        }
    }
    if (!has_name || !has_op || r->name.len == 0 || r->op.len == 0) return 0;
    s->n++;
    return 1;
}

static PyObject *decode(const uint8_t *base, Span s)
{
    return PyUnicode_DecodeUTF8((const char *)base + s.off, s.len, "strict");
}

/* Intern a field (op or device) through `t`, whose entries' objects are in `strings`. */
static PyObject *intern(Table *t, PyObject *strings, const uint8_t *base, Span s, int32_t *id)
{
    int added = 0;
    int32_t e = table_find(t, s.off, s.len, 1, &added);
    if (e == -2) return PyErr_NoMemory();
    if (added) {
        PyObject *str = decode(base, s);
        if (!str) return NULL;
        int rc = PyList_Append(strings, str);
        Py_DECREF(str);
        if (rc < 0) return NULL;
    }
    if (id) *id = e;
    PyObject *out = PyList_GET_ITEM(strings, e);
    Py_INCREF(out);
    return out;
}

static PyObject *bytes_of(const void *p, size_t n)
{
    return PyBytes_FromStringAndSize((const char *)p, (Py_ssize_t)n);
}

/* ------------------------------------------------------------------ NameIndex */

/* The name -> node id index of a graph read by scan_graph: the open-addressing table the scan
 * built over the names' bytes (to find duplicates and resolve inputs), kept after the scan
 * instead of a Python dict of every name. A dict costs an insert per node, each a cache miss
 * into a table larger than the cache (0.05 s at 200k nodes, 0.34 s at 1M, plus an int object
 * per id), while the commands look up a few names. A slot's `entry` is the node id + 1 (the
 * scan inserts the names in node order and declines duplicates); its `off` (into the scanned
 * bytes, which are not kept) is not read again: a candidate is compared with names[id], the
 * str object of the node's name, as UTF-8 (for an ASCII name, its own characters). `names`
 * is the graph's list of names, which nothing mutates (Graph never does); every id read from
 * a slot is still bounds-checked. The Python twin is a dict (Graph.index). */
typedef struct {
    PyObject_HEAD
    PyObject *names; /* list of str, node order */
    Slot *slots;
    uint64_t mask;
} NameIndex;

static void name_index_dealloc(NameIndex *self)
{
    Py_XDECREF(self->names);
    free(self->slots);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The UTF-8 of `key` and its hash: 1; 0 when `key` can name no node (not a str, as in a dict of
 * str keys; lone surrogates, which no name decoded from valid UTF-8 has; too long); -1 with an
 * exception set. */
static int name_key(PyObject *key, const char **u, Py_ssize_t *len, uint64_t *h)
{
    if (!PyUnicode_Check(key)) return 0;
    *u = PyUnicode_AsUTF8AndSize(key, len);
    if (!*u) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) return -1;
        PyErr_Clear();
        return 0;
    }
    if (*len > 0xffffffffLL) return 0;
    *h = hash_bytes((const uint8_t *)*u, (uint32_t)*len);
    return 1;
}

/* The id of the node named `key` (UTF-8 `u` of `len` bytes, hash `h`); -1 if none, -2 with an
 * exception set. */
static Py_ssize_t name_index_find_hashed(NameIndex *self, PyObject *key, const char *u, Py_ssize_t len, uint64_t h)
{
    uint32_t h32 = (uint32_t)(h >> 32);
    Py_ssize_t n = PyList_GET_SIZE(self->names);
    for (uint64_t i = h & self->mask;; i = (i + 1) & self->mask) {
        const Slot *s = &self->slots[i];
        if (s->entry == 0) return -1;
        if (s->hash != h32 || s->len != (uint32_t)len || s->entry > n) continue;
        PyObject *name = PyList_GET_ITEM(self->names, s->entry - 1);
        if (name == key) return s->entry - 1;
        Py_ssize_t name_len;
        const char *v = PyUnicode_AsUTF8AndSize(name, &name_len);
        if (!v) return -2;
        if (name_len == len && memcmp(v, u, (size_t)len) == 0) return s->entry - 1;
    }
}

/* The id of the node named `key`; -1 if none, -2 with an exception set. */
static Py_ssize_t name_index_find(NameIndex *self, PyObject *key)
{
    const char *u;
    Py_ssize_t len;
    uint64_t h;
    int rc = name_key(key, &u, &len, &h);
    return rc <= 0 ? rc - 1 : name_index_find_hashed(self, key, u, len, h);
}

PyDoc_STRVAR(name_index_get_doc,
"get(name, default=None) -> int | default\n\n"
"The id of the node named `name`, or `default` when no node has that name (dict.get).");

static PyObject *name_index_get(NameIndex *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "get(name, default=None) takes 1 or 2 arguments");
        return NULL;
    }
    Py_ssize_t id = name_index_find(self, args[0]);
    if (id == -2) return NULL;
    if (id < 0) return Py_NewRef(nargs == 2 ? args[1] : Py_None);
    return PyLong_FromSsize_t(id);
}

PyDoc_STRVAR(name_index_ids_doc,
"ids(names) -> dict\n\n"
"name -> id for those of `names` (an iterable of str) that name a node, in `names`' order\n"
"(each once): the batch form of get, one call for the many lookups of a pass.");

/* All names hashed first, then looked up with the slots of lookups a few steps ahead prefetched
 * (as scan_graph resolves the inputs): the slots are random accesses into a table larger than the
 * cache. */
static PyObject *name_index_ids(NameIndex *self, PyObject *names)
{
    PyObject *seq = PySequence_Fast(names, "ids() takes an iterable of names");
    if (!seq) return NULL;
    Py_ssize_t m = PySequence_Fast_GET_SIZE(seq);
    PyObject **keys = PySequence_Fast_ITEMS(seq);
    uint64_t *hashes = malloc(sizeof(uint64_t) * (size_t)(m ? m : 1));
    uint8_t *named = malloc((size_t)(m ? m : 1)); /* name_key's answer, per key */
    PyObject *out = hashes && named ? PyDict_New() : PyErr_NoMemory();
    const char *u;
    Py_ssize_t len, k;
    for (k = 0; out && k < m; k++) {
        int rc = name_key(keys[k], &u, &len, &hashes[k]);
        if (rc < 0) Py_CLEAR(out);
        named[k] = rc > 0;
    }
    for (k = 0; out && k < m; k++) {
        if (k + 16 < m && named[k + 16]) __builtin_prefetch(&self->slots[hashes[k + 16] & self->mask]);
        if (!named[k]) continue;
        u = PyUnicode_AsUTF8AndSize(keys[k], &len); /* the UTF-8 name_key made (cached in the str) */
        if (!u) { Py_CLEAR(out); break; }
        Py_ssize_t id = name_index_find_hashed(self, keys[k], u, len, hashes[k]);
        if (id == -2) { Py_CLEAR(out); break; }
        if (id < 0) continue;
        PyObject *value = PyLong_FromSsize_t(id);
        if (!value || PyDict_SetItem(out, keys[k], value) < 0) Py_CLEAR(out);
        Py_XDECREF(value);
    }
    free(hashes);
    free(named);
    Py_DECREF(seq);
    return out;
}

static Py_ssize_t name_index_len(NameIndex *self)
{
    return PyList_GET_SIZE(self->names);
}

static int name_index_contains(NameIndex *self, PyObject *key)
{
    Py_ssize_t id = name_index_find(self, key);
    return id == -2 ? -1 : id >= 0;
}

static PyMethodDef name_index_methods[] = {
    {"get", (PyCFunction)(void (*)(void))name_index_get, METH_FASTCALL, name_index_get_doc},
    {"ids", (PyCFunction)name_index_ids, METH_O, name_index_ids_doc},
    {NULL, NULL, 0, NULL},
};

static PySequenceMethods name_index_as_sequence = {
    .sq_length = (lenfunc)name_index_len,
    .sq_contains = (objobjproc)name_index_contains,
};

static PyTypeObject NameIndexType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "placeviz._wire.NameIndex",
    .tp_basicsize = sizeof(NameIndex),
    .tp_dealloc = (destructor)name_index_dealloc,
    .tp_as_sequence = &name_index_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The name -> node id index scan_graph returns (made only by scan_graph): get(name), ids(names),\n"
              "len() and `in`, as a dict of every name would answer them.",
    .tp_methods = name_index_methods,
};

PyDoc_STRVAR(scan_graph_doc,
"scan_graph(data) -> tuple | None\n\n"
"Read a serialized GraphDef: (names, ops, devices, index, in_start, in_src, in_slot, spans,\n"
"op_ids, distinct_ops). index is a NameIndex over names (name -> id without a dict of every name);\n"
"in_start/in_src/in_slot/op_ids are native int32 bytes, spans the\n"
"NodeDefs' (offset, length) pairs as native uint32 bytes. None when the graph is not the plain\n"
"case (duplicate or empty names or ops, a name with ':' or '^', an input that names no node or\n"
"has a malformed or huge output index, invalid UTF-8, an odd wire form): the Python path then\n"
"gives the exact result or error.");

static PyObject *scan_graph(PyObject *self, PyObject *arg)
{
    Py_buffer buf;
    if (PyObject_GetBuffer(arg, &buf, PyBUF_SIMPLE) < 0) return NULL;
    const uint8_t *base = buf.buf, *p = base, *end = base + buf.len;
    PyObject *result = NULL, *names = NULL, *ops = NULL, *devices = NULL, *index = NULL;
    PyObject *op_strings = NULL, *device_strings = NULL;
    int32_t *in_start = NULL, *in_src = NULL, *in_slot = NULL, *op_ids = NULL;
    uint64_t *hashes = NULL;
    Span *node_spans = NULL;
    Scan s = {0};
    Table name_table = {0}, op_table = {0}, device_table = {0};
    int plain = 1;

    if (buf.len >= 0x7fffffff) { plain = 0; goto done; }
    uint32_t field;
    int wt;
    while (p < end) {
        if (!read_tag(&p, end, &field, &wt)) { plain = 0; goto done; }
        if (field == 1) {
            const uint8_t *v;
            uint32_t n;
            if (wt != 2 || !read_len(&p, end, &v, &n)) { plain = 0; goto done; }
            int rc = scan_node(&s, base, v, v + n);
            if (rc < 0) { PyErr_NoMemory(); goto done; }
            if (rc == 0) { plain = 0; goto done; }
        } else if (!skip_value(&p, end, wt)) {
            plain = 0;
            goto done;
        }
    }
    size_t n = s.n;
    if (n == 0 || n > 0x3fffffff) { plain = 0; goto done; }

    if (!table_init(&name_table, base, (int32_t)n) || !table_init(&op_table, base, 64) ||
        !table_init(&device_table, base, 64)) {
        PyErr_NoMemory();
        goto done;
    }
    names = PyList_New((Py_ssize_t)n);
    ops = PyList_New((Py_ssize_t)n);
    devices = PyList_New((Py_ssize_t)n);
    op_strings = PyList_New(0);
    device_strings = PyList_New(0);
    op_ids = malloc(sizeof(int32_t) * n);
    node_spans = malloc(sizeof(Span) * n);
    if (!names || !ops || !devices || !op_strings || !device_strings || !op_ids || !node_spans) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        goto done;
    }
    hashes = malloc(sizeof(uint64_t) * (n > s.n_inputs ? n : s.n_inputs) + 8);
    if (!hashes) { PyErr_NoMemory(); goto done; }
    for (size_t i = 0; i < n; i++)
        hashes[i] = hash_bytes(base + s.nodes[i].name.off, s.nodes[i].name.len);
    for (size_t i = 0; i < n; i++) {
        NodeRec *r = &s.nodes[i];
        const uint8_t *name = base + r->name.off;
        if (memchr(name, ':', r->name.len) || memchr(name, '^', r->name.len)) { plain = 0; goto done; }
        if (i + 16 < n) table_prefetch(&name_table, hashes[i + 16], 0);
        int added = 0;
        int32_t e = table_find_hashed(&name_table, r->name.off, r->name.len, hashes[i], 1, &added);
        if (e == -2) { PyErr_NoMemory(); goto done; }
        if (!added) { plain = 0; goto done; } /* duplicate name */
        PyObject *str = decode(base, r->name);
        if (!str) { PyErr_Clear(); plain = 0; goto done; }
        PyList_SET_ITEM(names, (Py_ssize_t)i, str);
        PyObject *op = intern(&op_table, op_strings, base, r->op, &op_ids[i]);
        if (!op) {
            if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) { PyErr_Clear(); plain = 0; }
            goto done;
        }
        PyList_SET_ITEM(ops, (Py_ssize_t)i, op);
        PyObject *device = intern(&device_table, device_strings, base, r->device, NULL);
        if (!device) {
            if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) { PyErr_Clear(); plain = 0; }
            goto done;
        }
        PyList_SET_ITEM(devices, (Py_ssize_t)i, device);
        node_spans[i] = r->node;
    }

    size_t m = s.n_inputs;
    in_start = malloc(sizeof(int32_t) * (n + 1));
    in_src = malloc(sizeof(int32_t) * (m ? m : 1));
    in_slot = malloc(sizeof(int32_t) * (m ? m : 1));
    if (!in_start || !in_src || !in_slot) { PyErr_NoMemory(); goto done; }
    for (size_t i = 0; i <= n; i++)
        in_start[i] = i < n ? (int32_t)s.nodes[i].first_input : (int32_t)m;
    /* Parse every input into (name span, slot) and hash the name; then look the names up, with
     * the slots and name bytes of lookups a few steps ahead prefetched (the lookups are random
     * accesses into tables larger than the cache). */
    for (size_t k = 0; k < m; k++) {
        Span *in = &s.inputs[k];
        const uint8_t *t = base + in->off;
        int32_t slot = 0;
        if (in->len > 0 && t[0] == '^') {
            in->off += 1;
            in->len -= 1;
            slot = -1;
        } else {
            const uint8_t *colon = memchr(t, ':', in->len);
            if (colon) {
                uint32_t name_len = (uint32_t)(colon - t), tail_len = in->len - name_len - 1;
                if (tail_len == 0 || tail_len > 9) { plain = 0; goto done; }
                for (uint32_t j = 0; j < tail_len; j++) {
                    uint8_t c = colon[1 + j];
                    if (c < '0' || c > '9') { plain = 0; goto done; }
                    slot = slot * 10 + (c - '0');
                }
                in->len = name_len;
            }
        }
        in_slot[k] = slot;
        hashes[k] = hash_bytes(base + in->off, in->len);
    }
    for (size_t k = 0; k < m; k++) {
        if (k + 16 < m) table_prefetch(&name_table, hashes[k + 16], 0);
        if (k + 8 < m) table_prefetch(&name_table, hashes[k + 8], 1);
        int added = 0;
        int32_t src = table_find_hashed(&name_table, s.inputs[k].off, s.inputs[k].len, hashes[k], 0, &added);
        if (src < 0) { plain = 0; goto done; }
        in_src[k] = src;
    }
    NameIndex *name_index = PyObject_New(NameIndex, &NameIndexType);
    if (!name_index) goto done;
    name_index->names = Py_NewRef(names);
    name_index->slots = name_table.slots; /* kept: the index (see NameIndex) */
    name_index->mask = name_table.mask;
    name_table.slots = NULL;
    index = (PyObject *)name_index;
    result = Py_BuildValue("(OOOONNNNNO)", names, ops, devices, index,
                           bytes_of(in_start, sizeof(int32_t) * (n + 1)),
                           bytes_of(in_src, sizeof(int32_t) * m), bytes_of(in_slot, sizeof(int32_t) * m),
                           bytes_of(node_spans, sizeof(Span) * n), bytes_of(op_ids, sizeof(int32_t) * n),
                           op_strings);

done:
    if (!result && plain == 0 && !PyErr_Occurred()) {
        result = Py_None;
        Py_INCREF(result);
    }
    Py_XDECREF(names);
    Py_XDECREF(ops);
    Py_XDECREF(devices);
    Py_XDECREF(index);
    Py_XDECREF(op_strings);
    Py_XDECREF(device_strings);
    free(hashes);
    free(in_start);
    free(in_src);
    free(in_slot);
    free(op_ids);
    free(node_spans);
    table_free(&name_table);
    table_free(&op_table);
    table_free(&device_table);
    scan_free(&s);
    PyBuffer_Release(&buf);
    return result;
}

/* ------------------------------------------------------------------ read_attrs */

/* The key of one AttrValue (Graph._attr_value_key): its `type` when that is the set member
 * of the oneof and nonzero, else canon(raw) (the Python side: parse, then type or serialized
 * bytes), memoised per distinct raw value in `memo`. A new reference, or NULL on error. */
static PyObject *value_key(const uint8_t *v, uint32_t n, PyObject *canon, PyObject *memo)
{
    const uint8_t *p = v, *end = v + n;
    uint32_t field, last = 0;
    int wt;
    uint64_t type = 0;
    int odd = 0;
    while (p < end) {
        if (!read_tag(&p, end, &field, &wt)) { odd = 1; break; }
        if (field == 6 && wt == 0) {
            if (!read_varint(&p, end, &type)) { odd = 1; break; }
            last = 6;
            continue;
        }
        if (field >= 1 && field <= 10) last = field;
        if (!skip_value(&p, end, wt)) { odd = 1; break; }
    }
    if (!odd && last == 6 && type >= 1 && type <= 0x7fffffff)
        return PyLong_FromUnsignedLongLong(type);
    PyObject *raw = bytes_of(v, n);
    if (!raw) return NULL;
    PyObject *out = PyDict_GetItemWithError(memo, raw);
    if (out) {
        Py_INCREF(out);
    } else if (!PyErr_Occurred()) {
        out = PyObject_CallOneArg(canon, raw);
        if (out && PyDict_SetItem(memo, raw, out) < 0) Py_CLEAR(out);
    }
    Py_DECREF(raw);
    return out;
}

/* (groups, located names) of a `_class` AttrValue that is exactly one `list` field whose
 * ListValue holds only `s` entries: each entry decoded as UTF-8 with "replace", and the
 * entries starting with "loc:@" without that prefix. Anything else (the oneof switching, other
 * list fields, unknown fields) returns NULL without an error: the caller asks Python. */
static PyObject *decode_class_fast(const uint8_t *v, uint32_t n)
{
    const uint8_t *p = v, *end = v + n, *list, *q, *list_end;
    uint32_t field, list_len;
    int wt;
    if (!read_tag(&p, end, &field, &wt) || field != 1 || wt != 2 || !read_len(&p, end, &list, &list_len) || p != end)
        return NULL;
    Py_ssize_t count = 0, located_count = 0;
    q = list;
    list_end = list + list_len;
    while (q < list_end) {
        const uint8_t *e;
        uint32_t e_len;
        if (!read_tag(&q, list_end, &field, &wt) || field != 2 || wt != 2 || !read_len(&q, list_end, &e, &e_len))
            return NULL;
        count++;
        if (e_len >= 5 && memcmp(e, "loc:@", 5) == 0) located_count++;
    }
    PyObject *groups = PyTuple_New(count), *located = PyTuple_New(located_count);
    if (!groups || !located) goto fail;
    Py_ssize_t k = 0, j = 0;
    for (q = list; q < list_end;) {
        const uint8_t *e = q;
        uint32_t e_len = 0;
        read_tag(&q, list_end, &field, &wt); /* both checked by the loop above */
        read_len(&q, list_end, &e, &e_len);
        PyObject *g = PyUnicode_DecodeUTF8((const char *)e, e_len, "replace");
        if (!g) goto fail;
        PyTuple_SET_ITEM(groups, k++, g);
        if (e_len >= 5 && memcmp(e, "loc:@", 5) == 0) {
            PyObject *name = PyUnicode_Substring(g, 5, PyUnicode_GET_LENGTH(g));
            if (!name) goto fail;
            PyTuple_SET_ITEM(located, j++, name);
        }
    }
    PyObject *out = PyTuple_Pack(2, groups, located);
    Py_DECREF(groups);
    Py_DECREF(located);
    return out;
fail:
    Py_XDECREF(groups);
    Py_XDECREF(located);
    return NULL;
}

#define MAX_KEY_ATTRS 16

PyDoc_STRVAR(read_attrs_doc,
"read_attrs(data, spans, op_ids, plans, canon, decode_class) -> tuple | None\n\n"
"One pass over the NodeDefs' attr maps (spans and op_ids from scan_graph). plans[op id] is the\n"
"tuple of attr names (as bytes) whose values key that op's facts, or None. Returns (values,\n"
"colocation, colocated_names) as Graph.attr_keys and Graph.colocation give them: values[i] is\n"
"None (no plan or an empty one), one attr's key or a tuple of keys; a key is None (attr\n"
"missing), the AttrValue's nonzero `type`, or canon(raw AttrValue bytes). decode_class(raw\n"
"_class value) -> (groups, located names). None when an attr map entry has an odd form.");

static PyObject *read_attrs(PyObject *self, PyObject *args)
{
    PyObject *data, *spans_obj, *op_ids_obj, *plans, *canon, *decode_class;
    if (!PyArg_ParseTuple(args, "OOOO!OO", &data, &spans_obj, &op_ids_obj, &PyList_Type, &plans, &canon,
                          &decode_class))
        return NULL;
    Py_buffer buf, spans_buf, ids_buf;
    if (PyObject_GetBuffer(data, &buf, PyBUF_SIMPLE) < 0) return NULL;
    if (PyObject_GetBuffer(spans_obj, &spans_buf, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&buf);
        return NULL;
    }
    if (PyObject_GetBuffer(op_ids_obj, &ids_buf, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&buf);
        PyBuffer_Release(&spans_buf);
        return NULL;
    }
    const uint8_t *base = buf.buf;
    const Span *spans = spans_buf.buf;
    const int32_t *op_ids = ids_buf.buf;
    size_t n = (size_t)spans_buf.len / sizeof(Span);
    Py_ssize_t num_plans = PyList_GET_SIZE(plans);
    PyObject *result = NULL, *values = NULL, *colocation = NULL, *colocated = NULL;
    PyObject *key_memo = NULL, *class_memo = NULL;
    Table class_table = {0};
    int plain = 1;
    /* The plans' names as raw bytes, flattened: plan p's names are [plan_first[p], plan_first[p+1]). */
    Py_ssize_t *plan_first = NULL;
    const char **plan_names = NULL;
    Py_ssize_t *plan_lens = NULL;

    if ((size_t)ids_buf.len / sizeof(int32_t) != n) {
        PyErr_SetString(PyExc_ValueError, "spans and op_ids differ in length");
        goto done;
    }
    plan_first = malloc(sizeof(Py_ssize_t) * (size_t)(num_plans + 1));
    Py_ssize_t total = 0;
    for (Py_ssize_t k = 0; k < num_plans; k++) {
        PyObject *plan = PyList_GET_ITEM(plans, k);
        if (plan != Py_None) {
            if (!PyTuple_Check(plan) || PyTuple_GET_SIZE(plan) > MAX_KEY_ATTRS) { plain = 0; goto done; }
            total += PyTuple_GET_SIZE(plan);
        }
    }
    plan_names = malloc(sizeof(char *) * (size_t)(total + 1));
    plan_lens = malloc(sizeof(Py_ssize_t) * (size_t)(total + 1));
    if (!plan_first || !plan_names || !plan_lens) { PyErr_NoMemory(); goto done; }
    total = 0;
    for (Py_ssize_t k = 0; k < num_plans; k++) {
        plan_first[k] = total;
        PyObject *plan = PyList_GET_ITEM(plans, k);
        if (plan == Py_None) continue;
        for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(plan); j++) {
            PyObject *name = PyTuple_GET_ITEM(plan, j);
            if (!PyBytes_Check(name)) {
                PyErr_SetString(PyExc_TypeError, "plan names must be bytes");
                goto done;
            }
            plan_names[total] = PyBytes_AS_STRING(name);
            plan_lens[total] = PyBytes_GET_SIZE(name);
            total++;
        }
    }
    plan_first[num_plans] = total;

    values = PyList_New((Py_ssize_t)n);
    colocation = PyDict_New();
    colocated = PyDict_New();
    key_memo = PyDict_New();
    class_memo = PyList_New(0); /* the decoded _class values, by their entry in class_table */
    if (!values || !colocation || !colocated || !key_memo || !class_memo) goto done;
    if (buf.len >= 0x7fffffff) { plain = 0; goto done; } /* class_table's offsets are 32-bit */
    if (!table_init(&class_table, base, 64)) { PyErr_NoMemory(); goto done; }

    for (size_t i = 0; i < n; i++) {
        int32_t op_id = op_ids[i];
        if (op_id < 0 || op_id >= num_plans) {
            PyErr_SetString(PyExc_ValueError, "op id out of range");
            goto done;
        }
        PyObject *plan = PyList_GET_ITEM(plans, op_id);
        Py_ssize_t first = plan_first[op_id], count = plan == Py_None ? 0 : PyTuple_GET_SIZE(plan);
        const uint8_t *found[MAX_KEY_ATTRS];
        uint32_t found_len[MAX_KEY_ATTRS];
        for (Py_ssize_t j = 0; j < count; j++) found[j] = NULL;
        const uint8_t *class_value = NULL;
        uint32_t class_len = 0;

        const uint8_t *p = base + spans[i].off, *end = p + spans[i].len;
        uint32_t field;
        int wt;
        while (p < end) {
            if (!read_tag(&p, end, &field, &wt)) { plain = 0; goto done; }
            if (field != 5) {
                if (!skip_value(&p, end, wt)) { plain = 0; goto done; }
                continue;
            }
            const uint8_t *key, *value;
            uint32_t key_len, value_len;
            if (!read_attr_entry(&p, end, wt, &key, &key_len, &value, &value_len)) { plain = 0; goto done; }
            if (key_len == 6 && memcmp(key, "_class", 6) == 0) {
                class_value = value;
                class_len = value_len;
            }
            for (Py_ssize_t j = 0; j < count; j++) {
                if ((Py_ssize_t)key_len == plan_lens[first + j] && memcmp(key, plan_names[first + j], key_len) == 0) {
                    found[j] = value;
                    found_len[j] = value_len;
                }
            }
        }

        PyObject *v;
        if (count == 0) {
            v = Py_None;
            Py_INCREF(v);
        } else if (count == 1) {
            v = found[0] ? value_key(found[0], found_len[0], canon, key_memo) : (Py_INCREF(Py_None), Py_None);
            if (!v) goto done;
        } else {
            v = PyTuple_New(count);
            if (!v) goto done;
            for (Py_ssize_t j = 0; j < count; j++) {
                PyObject *k = found[j] ? value_key(found[j], found_len[j], canon, key_memo)
                                       : (Py_INCREF(Py_None), Py_None);
                if (!k) { Py_DECREF(v); goto done; }
                PyTuple_SET_ITEM(v, j, k);
            }
        }
        PyList_SET_ITEM(values, (Py_ssize_t)i, v);

        if (class_value) {
            /* Decoded once per distinct value, looked up by its bytes in place: no bytes object
             * and no dict lookup per node (half the nodes of a training graph have a _class). */
            int added = 0;
            int32_t e = table_find(&class_table, (uint32_t)(class_value - base), class_len, 1, &added);
            if (e == -2) { PyErr_NoMemory(); goto done; }
            PyObject *decoded;
            if (!added) {
                decoded = PyList_GET_ITEM(class_memo, e);
                Py_INCREF(decoded);
            } else {
                decoded = decode_class_fast(class_value, class_len);
                if (!decoded && !PyErr_Occurred()) {
                    PyObject *raw = bytes_of(class_value, class_len);
                    decoded = raw ? PyObject_CallOneArg(decode_class, raw) : NULL;
                    Py_XDECREF(raw);
                }
                if (decoded && PyList_Append(class_memo, decoded) < 0) Py_CLEAR(decoded);
            }
            if (!decoded) goto done;
            if (!PyTuple_Check(decoded) || PyTuple_GET_SIZE(decoded) != 2) {
                Py_DECREF(decoded);
                PyErr_SetString(PyExc_TypeError, "decode_class must return (groups, located)");
                goto done;
            }
            PyObject *groups = PyTuple_GET_ITEM(decoded, 0), *located = PyTuple_GET_ITEM(decoded, 1);
            if (PyObject_IsTrue(groups)) {
                PyObject *id = PyLong_FromSsize_t((Py_ssize_t)i);
                int rc = id ? PyDict_SetItem(colocation, id, groups) : -1;
                if (rc == 0 && PyObject_IsTrue(located)) rc = PyDict_SetItem(colocated, id, located);
                Py_XDECREF(id);
                if (rc < 0) { Py_DECREF(decoded); goto done; }
            }
            Py_DECREF(decoded);
        }
    }
    result = PyTuple_Pack(3, values, colocation, colocated);

done:
    if (!result && plain == 0 && !PyErr_Occurred()) {
        result = Py_None;
        Py_INCREF(result);
    }
    Py_XDECREF(values);
    Py_XDECREF(colocation);
    Py_XDECREF(colocated);
    Py_XDECREF(key_memo);
    Py_XDECREF(class_memo);
    table_free(&class_table);
    free(plan_first);
    free(plan_names);
    free(plan_lens);
    PyBuffer_Release(&buf);
    PyBuffer_Release(&spans_buf);
    PyBuffer_Release(&ids_buf);
    return result;
}

/* ------------------------------------------------------------------ fields_spans */

#define MAX_TOP_FIELDS 8

PyDoc_STRVAR(fields_spans_doc,
"fields_spans(data, fields) -> tuple[list[(offset, length)], ...]\n\n"
"field_spans of each top-level field number of `fields` (a tuple of ints), in one pass over the\n"
"message: one list per field, in the order of `fields`. Every list is empty if the message has an\n"
"odd wire form.");

static PyObject *fields_spans(PyObject *self, PyObject *args)
{
    PyObject *data, *fields;
    if (!PyArg_ParseTuple(args, "OO!", &data, &PyTuple_Type, &fields)) return NULL;
    Py_ssize_t count = PyTuple_GET_SIZE(fields);
    if (count > MAX_TOP_FIELDS) {
        PyErr_SetString(PyExc_ValueError, "too many fields");
        return NULL;
    }
    uint32_t wanted[MAX_TOP_FIELDS];
    for (Py_ssize_t j = 0; j < count; j++) {
        unsigned long f = PyLong_AsUnsignedLong(PyTuple_GET_ITEM(fields, j));
        if (f == (unsigned long)-1 && PyErr_Occurred()) return NULL;
        wanted[j] = (uint32_t)f;
    }
    Py_buffer buf;
    if (PyObject_GetBuffer(data, &buf, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *out = PyTuple_New(count);
    int odd = 0;
    for (Py_ssize_t j = 0; out && j < count; j++) {
        PyObject *list = PyList_New(0);
        if (!list) Py_CLEAR(out);
        else PyTuple_SET_ITEM(out, j, list);
    }
    const uint8_t *base = buf.buf, *p = base, *end = base + buf.len;
    while (out && p < end) {
        uint32_t field;
        int wt;
        const uint8_t *v;
        uint32_t n;
        if (!read_tag(&p, end, &field, &wt)) { odd = 1; break; }
        Py_ssize_t j = 0;
        while (j < count && (wanted[j] != field || wt != 2)) j++;
        if (j < count) {
            if (!read_len(&p, end, &v, &n)) { odd = 1; break; }
            PyObject *span = Py_BuildValue("(nI)", (Py_ssize_t)(v - base), n);
            if (!span || PyList_Append(PyTuple_GET_ITEM(out, j), span) < 0) Py_CLEAR(out);
            Py_XDECREF(span);
        } else if (!skip_value(&p, end, wt)) {
            odd = 1;
            break;
        }
    }
    PyBuffer_Release(&buf);
    if (out && odd) {
        for (Py_ssize_t j = 0; j < count; j++) {
            PyObject *empty = PyList_New(0);
            if (!empty) { Py_CLEAR(out); break; }
            PyObject *old = PyTuple_GET_ITEM(out, j);
            PyTuple_SET_ITEM(out, j, empty);
            Py_DECREF(old);
        }
    }
    return out;
}

/* ------------------------------------------------------------------ attr_values */

#define MAX_VALUE_ATTRS 8

#define MAX_PATH_DEPTH 4

/* The message at `path` (message field numbers, outermost first) inside the serialized AttrValue
 * [v, v + len): what `attr_value.<field>.<field>...` reads after a parse (tensor.tensor_shape is
 * (8, 2)). A field absent on the way reads as its empty default message, as protobuf's getters
 * do. 0 when only a full parse answers: the AttrValue holds more than one field (all of its
 * fields are one oneof, where the last one parsed wins), or a message on the way holds the field
 * twice (the occurrences merge) or in another wire type. */
static int attr_path(const uint8_t *v, uint32_t len, const uint32_t *path, Py_ssize_t depth,
                     const uint8_t **out, uint32_t *out_len)
{
    const uint8_t *p = v, *end = v + len;
    for (Py_ssize_t d = 0; d < depth; d++) {
        const uint8_t *found = NULL;
        uint32_t found_len = 0;
        int fields = 0, hits = 0;
        while (p < end) {
            uint32_t f;
            int w;
            if (!read_tag(&p, end, &f, &w)) return 0;
            fields++;
            if (f == path[d]) {
                if (w != 2 || !read_len(&p, end, &found, &found_len)) return 0;
                hits++;
            } else if (!skip_value(&p, end, w)) {
                return 0;
            }
        }
        if (hits > 1 || (d == 0 && fields > 1)) return 0;
        if (!found) {
            *out = (const uint8_t *)"";
            *out_len = 0;
            return 1;
        }
        p = found;
        end = found + found_len;
    }
    *out = p;
    *out_len = (uint32_t)(end - p);
    return 1;
}

PyDoc_STRVAR(attr_values_doc,
"attr_values(data, spans, ids, names, paths=None) -> list[tuple] | None\n\n"
"For each node of `ids` (a list of ints, each < len(spans) / 8; spans as scan_graph gives), a\n"
"tuple with one item per attr name of `names` (a tuple of bytes): the serialized AttrValue of\n"
"that attr in the node's attr map (the last entry with that key, as the parse keeps it), or None\n"
"when the map has no such key. `paths` (a tuple of tuples of ints, one per name): for a name\n"
"with a non-empty path, the serialized message at that path inside the AttrValue instead (see\n"
"attr_path: (8, 2) is its tensor's tensor_shape), so that a Const's tensor is never copied.\n"
"Equal raw values are one bytes object. None when an attr map entry has an odd form (a repeated\n"
"key or value, another field) or a path needs a full parse: the caller reads the NodeDefs.");

static PyObject *attr_values(PyObject *self, PyObject *args)
{
    PyObject *data, *spans, *ids, *names, *paths = Py_None;
    if (!PyArg_ParseTuple(args, "OOO!O!|O", &data, &spans, &PyList_Type, &ids, &PyTuple_Type, &names, &paths))
        return NULL;
    Py_ssize_t count = PyTuple_GET_SIZE(names);
    if (count > MAX_VALUE_ATTRS) {
        PyErr_SetString(PyExc_ValueError, "too many attr names");
        return NULL;
    }
    if (paths != Py_None && (!PyTuple_Check(paths) || PyTuple_GET_SIZE(paths) != count)) {
        PyErr_SetString(PyExc_TypeError, "paths must be a tuple with one path per attr name");
        return NULL;
    }
    const char *want[MAX_VALUE_ATTRS];
    Py_ssize_t want_len[MAX_VALUE_ATTRS];
    uint32_t path[MAX_VALUE_ATTRS][MAX_PATH_DEPTH];
    Py_ssize_t depth[MAX_VALUE_ATTRS];
    for (Py_ssize_t j = 0; j < count; j++) {
        PyObject *name = PyTuple_GET_ITEM(names, j);
        if (!PyBytes_Check(name)) {
            PyErr_SetString(PyExc_TypeError, "attr names must be bytes");
            return NULL;
        }
        want[j] = PyBytes_AS_STRING(name);
        want_len[j] = PyBytes_GET_SIZE(name);
        depth[j] = 0;
        if (paths == Py_None) continue;
        PyObject *fields = PyTuple_GET_ITEM(paths, j);
        if (!PyTuple_Check(fields) || PyTuple_GET_SIZE(fields) > MAX_PATH_DEPTH) {
            PyErr_SetString(PyExc_TypeError, "a path must be a tuple of at most 4 field numbers");
            return NULL;
        }
        depth[j] = PyTuple_GET_SIZE(fields);
        for (Py_ssize_t d = 0; d < depth[j]; d++) {
            unsigned long f = PyLong_AsUnsignedLong(PyTuple_GET_ITEM(fields, d));
            if (f == (unsigned long)-1 && PyErr_Occurred()) return NULL;
            if (f == 0 || f > 0x1fffffff) {
                PyErr_SetString(PyExc_ValueError, "not a field number");
                return NULL;
            }
            path[j][d] = (uint32_t)f;
        }
    }
    Py_buffer buf, sbuf;
    if (PyObject_GetBuffer(data, &buf, PyBUF_SIMPLE) < 0) return NULL;
    if (PyObject_GetBuffer(spans, &sbuf, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&buf);
        return NULL;
    }
    const Span *sp = sbuf.buf;
    Py_ssize_t nspans = sbuf.len / (Py_ssize_t)sizeof(Span), n = PyList_GET_SIZE(ids);
    PyObject *out = PyList_New(n), *memo = PyDict_New(), *result = NULL;
    int plain = 1;
    if (!out || !memo) goto done;
    for (Py_ssize_t k = 0; k < n; k++) {
        Py_ssize_t i = PyLong_AsSsize_t(PyList_GET_ITEM(ids, k));
        if (i == -1 && PyErr_Occurred()) goto done;
        if (i < 0 || i >= nspans || (uint64_t)sp[i].off + sp[i].len > (uint64_t)buf.len) {
            PyErr_SetString(PyExc_IndexError, "node id out of range");
            goto done;
        }
        const uint8_t *found[MAX_VALUE_ATTRS];
        uint32_t found_len[MAX_VALUE_ATTRS];
        for (Py_ssize_t j = 0; j < count; j++) found[j] = NULL;
        const uint8_t *p = (const uint8_t *)buf.buf + sp[i].off, *end = p + sp[i].len;
        uint32_t field;
        int wt;
        while (p < end) {
            if (!read_tag(&p, end, &field, &wt)) { plain = 0; goto done; }
            if (field != 5) {
                if (!skip_value(&p, end, wt)) { plain = 0; goto done; }
                continue;
            }
            const uint8_t *key, *value;
            uint32_t key_len, value_len;
            if (!read_attr_entry(&p, end, wt, &key, &key_len, &value, &value_len)) { plain = 0; goto done; }
            for (Py_ssize_t j = 0; j < count; j++) {
                if ((Py_ssize_t)key_len == want_len[j] && memcmp(key, want[j], key_len) == 0) {
                    found[j] = value;
                    found_len[j] = value_len;
                }
            }
        }
        PyObject *row = PyTuple_New(count);
        if (!row) goto done;
        PyList_SET_ITEM(out, k, row);
        for (Py_ssize_t j = 0; j < count; j++) {
            PyObject *v = Py_None;
            if (found[j]) {
                if (depth[j] && !attr_path(found[j], found_len[j], path[j], depth[j], &found[j], &found_len[j])) {
                    plain = 0;
                    goto done;
                }
                PyObject *raw = bytes_of(found[j], found_len[j]);
                if (!raw) goto done;
                v = PyDict_SetDefault(memo, raw, raw); /* borrowed: the first equal bytes */
                Py_DECREF(raw);
                if (!v) goto done;
            }
            Py_INCREF(v);
            PyTuple_SET_ITEM(row, j, v);
        }
    }
    result = out;
    out = NULL;
done:
    if (!result && !plain && !PyErr_Occurred()) {
        result = Py_None;
        Py_INCREF(result);
    }
    Py_XDECREF(out);
    Py_XDECREF(memo);
    PyBuffer_Release(&buf);
    PyBuffer_Release(&sbuf);
    return result;
}

PyDoc_STRVAR(valid_node_names_doc,
"valid_node_names(names) -> bool\n\n"
"True if every name matches TF's node-name rule [A-Za-z0-9.][A-Za-z0-9_.\\-/>]* exactly (ASCII,\n"
"nothing after). False does not mean invalid: the caller then applies its own regex.");

static PyObject *valid_node_names(PyObject *self, PyObject *names)
{
    static uint8_t first[256], rest[256];
    if (!rest['a']) {
        for (int c = 0; c < 256; c++) {
            int alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
            first[c] = alnum || c == '.';
            rest[c] = alnum || c == '.' || c == '_' || c == '-' || c == '/' || c == '>';
        }
    }
    if (!PyList_Check(names)) {
        PyErr_SetString(PyExc_TypeError, "names must be a list");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(names);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *name = PyList_GET_ITEM(names, i);
        if (!PyUnicode_Check(name) || !PyUnicode_IS_ASCII(name)) Py_RETURN_FALSE;
        Py_ssize_t len = PyUnicode_GET_LENGTH(name);
        const uint8_t *c = PyUnicode_1BYTE_DATA(name);
        if (len == 0 || !first[c[0]]) Py_RETURN_FALSE;
        for (Py_ssize_t k = 1; k < len; k++)
            if (!rest[c[k]]) Py_RETURN_FALSE;
    }
    Py_RETURN_TRUE;
}

PyDoc_STRVAR(any_leading_underscore_doc,
"any_leading_underscore(names) -> bool\n\n"
"Whether a str of the list names starts with '_' (placeviz.nodewire.any_leading_underscore_py is\n"
"the reference): one read of each name's first character, no joined copy of the names.");

static PyObject *any_leading_underscore(PyObject *self, PyObject *names)
{
    if (!PyList_Check(names)) {
        PyErr_SetString(PyExc_TypeError, "names must be a list");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(names); i++) {
        PyObject *name = PyList_GET_ITEM(names, i);
        if (!PyUnicode_Check(name)) {
            PyErr_SetString(PyExc_TypeError, "a node name is not a str");
            return NULL;
        }
        if (PyUnicode_GET_LENGTH(name) && PyUnicode_READ_CHAR(name, 0) == '_') Py_RETURN_TRUE;
    }
    Py_RETURN_FALSE;
}

PyDoc_STRVAR(field_spans_doc,
"field_spans(data, field) -> list[(offset, length)]\n\n"
"The payloads of every length-delimited occurrence of a top-level field of a serialized message,\n"
"in order (to find the GraphDef inside a MetaGraphDef or SavedModel). Empty if the message has\n"
"an odd wire form.");

static PyObject *field_spans(PyObject *self, PyObject *args)
{
    PyObject *data;
    unsigned int wanted;
    if (!PyArg_ParseTuple(args, "OI", &data, &wanted)) return NULL;
    Py_buffer buf;
    if (PyObject_GetBuffer(data, &buf, PyBUF_SIMPLE) < 0) return NULL;
    const uint8_t *base = buf.buf, *p = base, *end = base + buf.len;
    PyObject *out = PyList_New(0);
    while (out && p < end) {
        uint32_t field;
        int wt;
        const uint8_t *v;
        uint32_t n;
        if (!read_tag(&p, end, &field, &wt)) goto odd;
        if (field == wanted && wt == 2) {
            if (!read_len(&p, end, &v, &n)) goto odd;
            PyObject *span = Py_BuildValue("(nI)", (Py_ssize_t)(v - base), n);
            if (!span || PyList_Append(out, span) < 0) Py_CLEAR(out);
            Py_XDECREF(span);
        } else if (!skip_value(&p, end, wt)) {
            goto odd;
        }
    }
    PyBuffer_Release(&buf);
    return out;
odd:
    PyBuffer_Release(&buf);
    Py_DECREF(out);
    return PyList_New(0);
}

/* ------------------------------------------------------------------ parses */

/* Whether upb's parser surely accepts a serialized message, walked against a schema of its
 * fields (what io.py's lazy load asks before it skips GraphDef.ParseFromString). The walk accepts
 * a subset of what upb (upb/wire/decode.c) accepts, so True means "ParseFromString would
 * succeed"; anything it is not sure of (a group, a known field in an unexpected wire type, a
 * non-canonical tag or length, a 10-byte varint with overflow bits, invalid UTF-8 in any string
 * field, proto2's included, nesting deeper than PARSES_MAX_DEPTH) is False, and the caller parses
 * for real, which gives the exact result or error. */

enum { K_NONE = 0, K_VARINT, K_FIXED64, K_FIXED32, K_STRING, K_BYTES, K_MESSAGE, K_REFUSE };
#define PARSES_DENSE 64
#define PARSES_MAX_DEPTH 32 /* upb's default limit is 100: deeper nesting is left to it */

typedef struct {
    uint8_t kind[PARSES_DENSE], repeated[PARSES_DENSE];
    uint16_t sub[PARSES_DENSE];
    const uint8_t *recs; /* every field, 8 bytes each: number (u32 LE), kind, repeated, sub (u16 LE) */
    Py_ssize_t nrecs;
} MsgSchema;

typedef struct {
    MsgSchema *msgs;
    Py_ssize_t n;
} Schema;

/* A varint of at most `max_bytes` bytes, the last of 10 holding no bits beyond 64. */
static int strict_varint(const uint8_t **pp, const uint8_t *end, uint64_t *out, int max_bytes)
{
    const uint8_t *p = *pp;
    if (p < end && *p < 0x80) { /* one byte: most tags and lengths */
        *out = *p;
        *pp = p + 1;
        return 1;
    }
    uint64_t v = 0;
    for (int i = 0; i < max_bytes && p < end; i++) {
        uint8_t b = *p++;
        if (i == 9 && b > 1) return 0;
        v |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            *pp = p;
            *out = v;
            return 1;
        }
    }
    return 0;
}

/* A length prefix (at most 5 bytes, below 2^31) and the payload within [p, end). */
static int strict_len(const uint8_t **pp, const uint8_t *end, const uint8_t **start, uint32_t *len)
{
    uint64_t n;
    if (!strict_varint(pp, end, &n, 5) || n >= 0x7fffffff || n > (uint64_t)(end - *pp)) return 0;
    *start = *pp;
    *len = (uint32_t)n;
    *pp += n;
    return 1;
}

/* Well-formed UTF-8 as Python's strict decoder reads it (no overlong forms, no surrogates,
 * nothing above U+10FFFF). */
static int utf8_ok(const uint8_t *s, uint32_t n)
{
    const uint8_t *end = s + n;
    while (s < end) {
        uint64_t w;
        if (end - s >= 8 && (memcpy(&w, s, 8), !(w & 0x8080808080808080ULL))) { /* 8 ASCII bytes */
            s += 8;
            continue;
        }
        uint8_t c = *s;
        if (c < 0x80) { s++; continue; }
        if (c >= 0xc2 && c <= 0xdf) {
            if (end - s < 2 || (s[1] & 0xc0) != 0x80) return 0;
            s += 2;
        } else if (c >= 0xe0 && c <= 0xef) {
            if (end - s < 3 || (s[1] & 0xc0) != 0x80 || (s[2] & 0xc0) != 0x80) return 0;
            if (c == 0xe0 && s[1] < 0xa0) return 0; /* overlong */
            if (c == 0xed && s[1] > 0x9f) return 0; /* surrogate */
            s += 3;
        } else if (c >= 0xf0 && c <= 0xf4) {
            if (end - s < 4 || (s[1] & 0xc0) != 0x80 || (s[2] & 0xc0) != 0x80 || (s[3] & 0xc0) != 0x80)
                return 0;
            if (c == 0xf0 && s[1] < 0x90) return 0; /* overlong */
            if (c == 0xf4 && s[1] > 0x8f) return 0; /* above U+10FFFF */
            s += 4;
        } else {
            return 0;
        }
    }
    return 1;
}

static int parses_msg(const Schema *S, Py_ssize_t m, const uint8_t *p, const uint8_t *end, int depth)
{
    if (depth > PARSES_MAX_DEPTH) return 0;
    const MsgSchema *ms = &S->msgs[m];
    while (p < end) {
        uint64_t tag, v;
        if (!strict_varint(&p, end, &tag, 5) || tag > 0xffffffffu) return 0;
        uint32_t field = (uint32_t)(tag >> 3);
        int wt = (int)(tag & 7);
        if (field == 0) return 0;
        int kind = K_NONE, repeated = 0;
        Py_ssize_t sub = 0;
        if (field < PARSES_DENSE) {
            kind = ms->kind[field];
            repeated = ms->repeated[field];
            sub = ms->sub[field];
        } else {
            for (Py_ssize_t k = 0; k < ms->nrecs; k++) {
                const uint8_t *r = ms->recs + 8 * k;
                uint32_t number;
                memcpy(&number, r, 4);
                if (number == field) {
                    kind = r[4];
                    repeated = r[5];
                    sub = r[6] | (r[7] << 8);
                    break;
                }
            }
        }
        const uint8_t *s;
        uint32_t n;
        switch (kind) {
        case K_NONE: /* an unknown field: kept by upb as unknown bytes, unless it is a group */
            if (wt == 0) { if (!strict_varint(&p, end, &v, 10)) return 0; }
            else if (wt == 1) { if (end - p < 8) return 0; p += 8; }
            else if (wt == 2) { if (!strict_len(&p, end, &s, &n)) return 0; }
            else if (wt == 5) { if (end - p < 4) return 0; p += 4; }
            else return 0;
            break;
        case K_VARINT:
            if (wt == 0) {
                if (!strict_varint(&p, end, &v, 10)) return 0;
            } else if (wt == 2 && repeated) { /* packed */
                if (!strict_len(&p, end, &s, &n)) return 0;
                const uint8_t *e = s + n;
                while (s < e)
                    if (!strict_varint(&s, e, &v, 10)) return 0;
            } else {
                return 0;
            }
            break;
        case K_FIXED64:
        case K_FIXED32: {
            int size = kind == K_FIXED64 ? 8 : 4;
            if (wt == (kind == K_FIXED64 ? 1 : 5)) {
                if (end - p < size) return 0;
                p += size;
            } else if (wt == 2 && repeated) {
                if (!strict_len(&p, end, &s, &n) || n % size) return 0;
            } else {
                return 0;
            }
            break;
        }
        case K_STRING:
            if (wt != 2 || !strict_len(&p, end, &s, &n) || !utf8_ok(s, n)) return 0;
            break;
        case K_BYTES:
            if (wt != 2 || !strict_len(&p, end, &s, &n)) return 0;
            break;
        case K_MESSAGE:
            if (wt != 2 || !strict_len(&p, end, &s, &n) || sub >= S->n) return 0;
            if (!parses_msg(S, sub, s, s + n, depth + 1)) return 0;
            break;
        default:
            return 0;
        }
    }
    return 1;
}

PyDoc_STRVAR(parses_doc,
"parses(data, schema) -> bool\n\n"
"True when upb's ParseFromString surely accepts `data` as the message schema[0] describes;\n"
"False when unsure (then parse for real). schema: one bytes object per message type, 8 bytes per\n"
"field: number (uint32 LE), kind (1 varint, 2 fixed64, 3 fixed32, 4 string, 5 bytes, 6 message,\n"
"7 refuse), repeated (0/1), the message's index in schema (uint16 LE).");

static PyObject *parses(PyObject *self, PyObject *args)
{
    PyObject *data, *schema;
    if (!PyArg_ParseTuple(args, "OO!", &data, &PyTuple_Type, &schema)) return NULL;
    Py_ssize_t nm = PyTuple_GET_SIZE(schema);
    if (nm == 0 || nm > 0xffff) {
        PyErr_SetString(PyExc_ValueError, "schema: 1 to 65535 message types");
        return NULL;
    }
    Schema S = {calloc((size_t)nm, sizeof(MsgSchema)), nm};
    if (!S.msgs) return PyErr_NoMemory();
    for (Py_ssize_t m = 0; m < nm; m++) {
        PyObject *b = PyTuple_GET_ITEM(schema, m);
        if (!PyBytes_Check(b) || PyBytes_GET_SIZE(b) % 8) {
            free(S.msgs);
            PyErr_SetString(PyExc_TypeError, "schema: bytes of 8-byte field records");
            return NULL;
        }
        MsgSchema *ms = &S.msgs[m];
        ms->recs = (const uint8_t *)PyBytes_AS_STRING(b);
        ms->nrecs = PyBytes_GET_SIZE(b) / 8;
        for (Py_ssize_t k = 0; k < ms->nrecs; k++) {
            const uint8_t *r = ms->recs + 8 * k;
            uint32_t number;
            memcpy(&number, r, 4);
            if (number < PARSES_DENSE) {
                ms->kind[number] = r[4];
                ms->repeated[number] = r[5];
                ms->sub[number] = (uint16_t)(r[6] | (r[7] << 8));
            }
        }
    }
    Py_buffer buf;
    if (PyObject_GetBuffer(data, &buf, PyBUF_SIMPLE) < 0) {
        free(S.msgs);
        return NULL;
    }
    int ok = 0;
    if (buf.len < 0x7fffffff) {
        const uint8_t *base = buf.buf;
        Py_BEGIN_ALLOW_THREADS
        ok = parses_msg(&S, 0, base, base + buf.len, 0);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&buf);
    free(S.msgs);
    return PyBool_FromLong(ok);
}

/* ------------------------------------------------------------------ splice_nodes */

static size_t varint_size(uint64_t v)
{
    size_t k = 1;
    while (v >= 0x80) { v >>= 7; k++; }
    return k;
}

static uint8_t *put_varint(uint8_t *q, uint64_t v)
{
    while (v >= 0x80) { *q++ = (uint8_t)(v | 0x80); v >>= 7; }
    *q++ = (uint8_t)v;
    return q;
}

/* `x` in decimal, as printf's "%lld" writes it, at `q` (at most 20 bytes); returns the end. The
 * writers below call it per input slot and per JSON number (hundreds of thousands a command), where
 * snprintf's format parsing cost more than the digits. */
static char *put_decimal(char *q, long long x)
{
    unsigned long long u = x < 0 ? 0ULL - (unsigned long long)x : (unsigned long long)x;
    char digits[20];
    int n = 0;
    do {
        digits[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (x < 0) *q++ = '-';
    while (n) *q++ = digits[--n];
    return q;
}

/* The size of a NodeDef's fields other than `device` (field 4); -1 on an odd wire form. With `out`,
 * also copy them there, in their order. */
PyDoc_STRVAR(node_records_doc,
"node_records(data, spans, ids) -> bytes\n\n"
"The GraphDef `node` records (field 1) of nodes `ids` (a list of ints, each < len(spans) / 8),\n"
"from their NodeDefs' (offset, length) pairs in `spans` (native uint32 bytes, as scan_graph\n"
"gives), in the order of `ids`: parsed as a GraphDef, its node[k] is node ids[k]'s NodeDef.");

static PyObject *node_records(PyObject *self, PyObject *args)
{
    PyObject *data, *spans, *ids;
    if (!PyArg_ParseTuple(args, "OOO!", &data, &spans, &PyList_Type, &ids)) return NULL;
    Py_buffer buf, sbuf;
    if (PyObject_GetBuffer(data, &buf, PyBUF_SIMPLE) < 0) return NULL;
    if (PyObject_GetBuffer(spans, &sbuf, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&buf);
        return NULL;
    }
    PyObject *out = NULL;
    const Span *sp = sbuf.buf;
    Py_ssize_t nspans = sbuf.len / (Py_ssize_t)sizeof(Span), k, n = PyList_GET_SIZE(ids);
    size_t total = 0;
    for (k = 0; k < n; k++) {
        Py_ssize_t i = PyLong_AsSsize_t(PyList_GET_ITEM(ids, k));
        if (i == -1 && PyErr_Occurred()) goto done;
        if (i < 0 || i >= nspans || (uint64_t)sp[i].off + sp[i].len > (uint64_t)buf.len) {
            PyErr_SetString(PyExc_IndexError, "node id out of range");
            goto done;
        }
        total += 1 + varint_size(sp[i].len) + sp[i].len;
    }
    out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
    if (!out) goto done;
    uint8_t *q = (uint8_t *)PyBytes_AS_STRING(out);
    for (k = 0; k < n; k++) {
        Py_ssize_t i = PyLong_AsSsize_t(PyList_GET_ITEM(ids, k));
        *q++ = 0x0a;
        q = put_varint(q, sp[i].len);
        memcpy(q, (const uint8_t *)buf.buf + sp[i].off, sp[i].len);
        q += sp[i].len;
    }
done:
    PyBuffer_Release(&buf);
    PyBuffer_Release(&sbuf);
    return out;
}

/* Copy the NodeDef fields at [p, end) but `device` to `q`, in runs between device fields (one
 * memcpy for a node without one); the bytes were checked by without_device. Returns the end. */
static uint8_t *copy_without_device(const uint8_t *p, const uint8_t *end, uint8_t *q)
{
    const uint8_t *run = p;
    while (p < end) {
        const uint8_t *start = p;
        uint32_t field;
        int wt;
        if (!read_tag(&p, end, &field, &wt) || !skip_value(&p, end, wt)) break;  /* checked: cannot */
        if (field == 4) {
            memcpy(q, run, (size_t)(start - run));
            q += start - run;
            run = p;
        }
    }
    memcpy(q, run, (size_t)(end - run));
    return q + (end - run);
}

static Py_ssize_t without_device(const uint8_t *p, const uint8_t *end, uint8_t *out)
{
    Py_ssize_t kept = 0;
    while (p < end) {
        const uint8_t *start = p;
        uint32_t field;
        int wt;
        if (!read_tag(&p, end, &field, &wt) || wt == 3 || wt == 4 || !skip_value(&p, end, wt)) return -1;
        if (field == 4) continue;
        if (out) memcpy(out + kept, start, (size_t)(p - start));
        kept += p - start;
    }
    return kept;
}

PyDoc_STRVAR(splice_nodes_doc,
"splice_nodes(data, offsets, lengths, devices, device_names, extra, tail=b'') -> bytes | None\n\n"
"The `node` fields of a serialized GraphDef, one per item: offsets/lengths (native int64 bytes)\n"
"locate a serialized NodeDef in data, written without its `device` field and with\n"
"`device: device_names[devices[k]]` (devices: native int32 bytes) appended; offset -1 - j takes\n"
"the next `node` field of extra[j] instead (extra: bytes objects, each `node` fields one after the\n"
"other, as encode_added and a serialized GraphDef of nodes only write them), copied whole; `tail`\n"
"is appended as is (the GraphDef's other fields, without a copy of the whole). None on an odd wire\n"
"form of a node in data; ValueError when extra[j] has no next `node` field\n"
"(placeviz.nodewire.splice_nodes_py is the reference).");

static PyObject *splice_nodes(PyObject *self, PyObject *args)
{
    PyObject *data, *offsets_obj, *lengths_obj, *devs_obj, *dev_names, *extra, *tail = NULL;
    if (!PyArg_ParseTuple(args, "OOOOO!O!|O!", &data, &offsets_obj, &lengths_obj, &devs_obj,
                          &PyList_Type, &dev_names, &PyList_Type, &extra, &PyBytes_Type, &tail))
        return NULL;
    Py_buffer buf = {0}, ob = {0}, lb = {0}, db = {0};
    PyObject *result = NULL;
    Py_ssize_t *kept_len = NULL, *cursor = NULL;
    if (PyObject_GetBuffer(data, &buf, PyBUF_SIMPLE) < 0) return NULL;
    if (PyObject_GetBuffer(offsets_obj, &ob, PyBUF_SIMPLE) < 0) goto done;
    if (PyObject_GetBuffer(lengths_obj, &lb, PyBUF_SIMPLE) < 0) goto done;
    if (PyObject_GetBuffer(devs_obj, &db, PyBUF_SIMPLE) < 0) goto done;
    Py_ssize_t m = ob.len / (Py_ssize_t)sizeof(int64_t);
    if (lb.len != ob.len || db.len != m * (Py_ssize_t)sizeof(int32_t)) {
        PyErr_SetString(PyExc_ValueError, "offsets, lengths and devices differ in length");
        goto done;
    }
    const int64_t *offsets = ob.buf, *lengths = lb.buf;
    const int32_t *devs = db.buf;
    const uint8_t *base = buf.buf;
    Py_ssize_t n_names = PyList_GET_SIZE(dev_names), n_extra = PyList_GET_SIZE(extra);
    for (Py_ssize_t d = 0; d < n_names; d++)
        if (!PyBytes_Check(PyList_GET_ITEM(dev_names, d))) {
            PyErr_SetString(PyExc_TypeError, "device_names must be bytes");
            goto done;
        }
    for (Py_ssize_t j = 0; j < n_extra; j++)
        if (!PyBytes_Check(PyList_GET_ITEM(extra, j))) {
            PyErr_SetString(PyExc_TypeError, "extra must be bytes");
            goto done;
        }
    cursor = PyMem_Calloc((size_t)(n_extra ? n_extra : 1), sizeof(Py_ssize_t));
    if (!cursor) { PyErr_NoMemory(); goto done; }
    /* Pass 1: sizes (each node's kept bytes, or an extra node field's whole size, remembered for
     * pass 2, which then scans a node's fields only when it has a device field to leave out). */
    size_t total = 0;
    kept_len = PyMem_Malloc((size_t)(m ? m : 1) * sizeof(Py_ssize_t));
    if (!kept_len) { PyErr_NoMemory(); goto done; }
    for (Py_ssize_t k = 0; k < m; k++) {
        if (offsets[k] < 0) {
            int64_t j = -1 - offsets[k];
            if (j >= n_extra) {
                PyErr_SetString(PyExc_ValueError, "extra: no such source");
                goto done;
            }
            PyObject *src = PyList_GET_ITEM(extra, j);
            const uint8_t *start = (const uint8_t *)PyBytes_AS_STRING(src) + cursor[j], *p = start, *body;
            const uint8_t *end = (const uint8_t *)PyBytes_AS_STRING(src) + PyBytes_GET_SIZE(src);
            uint32_t size;
            if (p >= end || *p++ != 0x0a || !read_len(&p, end, &body, &size)) {
                PyErr_SetString(PyExc_ValueError, "extra: too few node fields");
                goto done;
            }
            kept_len[k] = (Py_ssize_t)(p - start);
            cursor[j] += kept_len[k];
            total += (size_t)kept_len[k];
            continue;
        }
        if (offsets[k] > buf.len || lengths[k] < 0 || lengths[k] > buf.len - offsets[k] || devs[k] < 0 ||
            devs[k] >= n_names) {
            PyErr_SetString(PyExc_ValueError, "a node span or device index out of range");
            goto done;
        }
        const uint8_t *p = base + offsets[k];
        Py_ssize_t kept = without_device(p, p + lengths[k], NULL);
        if (kept < 0) { result = Py_None; Py_INCREF(result); goto done; }
        kept_len[k] = kept;
        size_t dn = (size_t)PyBytes_GET_SIZE(PyList_GET_ITEM(dev_names, devs[k]));
        size_t body = (size_t)kept + 1 + varint_size(dn) + dn;
        total += 1 + varint_size(body) + body;
    }
    if (tail) total += (size_t)PyBytes_GET_SIZE(tail);
    result = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
    if (!result) goto done;
    /* Pass 2: the bytes. */
    uint8_t *q = (uint8_t *)PyBytes_AS_STRING(result);
    memset(cursor, 0, (size_t)(n_extra ? n_extra : 1) * sizeof(Py_ssize_t));
    for (Py_ssize_t k = 0; k < m; k++) {
        if (offsets[k] < 0) {  /* a whole node field of extra[j], checked in pass 1 */
            int64_t j = -1 - offsets[k];
            memcpy(q, PyBytes_AS_STRING(PyList_GET_ITEM(extra, j)) + cursor[j], (size_t)kept_len[k]);
            cursor[j] += kept_len[k];
            q += kept_len[k];
            continue;
        }
        *q++ = 0x0a; /* field 1 (node), length-delimited */
        const uint8_t *p = base + offsets[k];
        PyObject *dev = PyList_GET_ITEM(dev_names, devs[k]);
        size_t dn = (size_t)PyBytes_GET_SIZE(dev);
        Py_ssize_t kept = kept_len[k];
        q = put_varint(q, (size_t)kept + 1 + varint_size(dn) + dn);
        if (kept == lengths[k]) {
            memcpy(q, p, (size_t)kept);
            q += kept;
        } else {
            q = copy_without_device(p, p + lengths[k], q);
        }
        *q++ = 0x22; /* field 4 (device), length-delimited */
        q = put_varint(q, dn);
        memcpy(q, PyBytes_AS_STRING(dev), dn);
        q += dn;
    }
    if (tail) memcpy(q, PyBytes_AS_STRING(tail), (size_t)PyBytes_GET_SIZE(tail));
done:
    PyMem_Free(kept_len);
    PyMem_Free(cursor);
    if (ob.obj) PyBuffer_Release(&ob);
    if (lb.obj) PyBuffer_Release(&lb);
    if (db.obj) PyBuffer_Release(&db);
    PyBuffer_Release(&buf);
    return result;
}

/* ------------------------------------------------------------------ encode_added */

/* A growable output buffer for one NodeDef at a time. */
typedef struct {
    uint8_t *p;
    size_t len, cap;
} Buf;

static int buf_room(Buf *b, size_t extra)
{
    if (b->len + extra <= b->cap) return 1;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra) cap *= 2;
    uint8_t *p = PyMem_Realloc(b->p, cap);
    if (!p) { PyErr_NoMemory(); return 0; }
    b->p = p;
    b->cap = cap;
    return 1;
}

static void buf_varint(Buf *b, uint64_t v)
{
    b->len = (size_t)(put_varint(b->p + b->len, v) - b->p);
}

static void buf_raw(Buf *b, const void *data, size_t n)
{
    memcpy(b->p + b->len, data, n);
    b->len += n;
}

/* A string field (one-byte tag): `pre`, a '.' when `fix` and the name starts with '_' (placeviz.
 * partition._importable_name), the name, then `suf`. */
static int buf_name_field(Buf *b, uint8_t tag, const char *pre, size_t prelen, int fix, const char *s, size_t len,
                          const char *suf, size_t suflen)
{
    size_t dot = (fix && len && s[0] == '_') ? 1 : 0;
    size_t total = prelen + dot + len + suflen;
    if (!buf_room(b, 1 + 10 + total)) return 0;
    b->p[b->len++] = tag;
    buf_varint(b, total);
    buf_raw(b, pre, prelen);
    if (dot) b->p[b->len++] = '.';
    buf_raw(b, s, len);
    buf_raw(b, suf, suflen);
    return 1;
}

/* One NodeDef.attr map entry (field 5): key (field 1), AttrValue (field 2) holding `value`, the
 * already encoded AttrValue fields. */
static int buf_attr(Buf *b, const char *key, const uint8_t *value, size_t vlen)
{
    size_t klen = strlen(key);
    size_t entry = 1 + varint_size(klen) + klen + 1 + varint_size(vlen) + vlen;
    if (!buf_room(b, 1 + 10 + entry)) return 0;
    b->p[b->len++] = 0x2a;
    buf_varint(b, entry);
    b->p[b->len++] = 0x0a;
    buf_varint(b, klen);
    buf_raw(b, key, klen);
    b->p[b->len++] = 0x12;
    buf_varint(b, vlen);
    buf_raw(b, value, vlen);
    return 1;
}

/* An attr whose AttrValue is one varint field (`number`: 3 i, 5 b, 6 type), as protobuf writes an
 * int64 (negative: ten bytes, two's complement). */
static int buf_varint_attr(Buf *b, const char *key, int number, uint64_t v)
{
    uint8_t av[11];
    av[0] = (uint8_t)(number << 3);
    size_t n = (size_t)(put_varint(av + 1, v) - av);
    return buf_attr(b, key, av, n);
}

/* An attr whose AttrValue is `s` (field 2). */
static int buf_string_attr(Buf *b, const char *key, const char *s, size_t len)
{
    size_t klen = strlen(key);
    size_t av = 1 + varint_size(len) + len;
    size_t entry = 1 + varint_size(klen) + klen + 1 + varint_size(av) + av;
    if (!buf_room(b, 1 + 10 + entry)) return 0;
    b->p[b->len++] = 0x2a;
    buf_varint(b, entry);
    b->p[b->len++] = 0x0a;
    buf_varint(b, klen);
    buf_raw(b, key, klen);
    b->p[b->len++] = 0x12;
    buf_varint(b, av);
    b->p[b->len++] = 0x12;
    buf_varint(b, len);
    buf_raw(b, s, len);
    return 1;
}

/* Slot names of placeviz.partition.base._New, interned at import. */
static PyObject *str_name, *str_op, *str_kind, *str_inputs, *str_meta, *str_dev, *str_dtype, *str_copy_of;

/* Those slots read straight from an instance: a hundred thousand added nodes, about ten slots each,
 * and PyObject_GetAttr's generic lookup (type, descriptor, member) costs more than the encoding.
 * The offsets are those of the member descriptors __slots__ makes, taken from the type of the
 * first added node when a kernel starts (learn_slots); an object of any other type, a slot that
 * is not a plain __slots__ member, or an empty slot goes through PyObject_GetAttr (so the
 * AttributeError is Python's). */
static PyObject **slot_names[] = {&str_name, &str_op, &str_kind, &str_inputs, &str_meta, &str_dev, &str_dtype,
                                  &str_copy_of};
#define N_SLOTS ((int)(sizeof slot_names / sizeof slot_names[0]))
static PyTypeObject *slots_type;  /* borrowed, during one kernel call: the type whose offsets these are */
static Py_ssize_t slot_offsets[sizeof slot_names / sizeof slot_names[0]];

static void learn_slots(PyObject *added)
{
    slots_type = NULL;
    if (!PyList_GET_SIZE(added)) return;
    PyTypeObject *t = Py_TYPE(PyList_GET_ITEM(added, 0));
    if (t->tp_getattro != PyObject_GenericGetAttr) return;
    for (int k = 0; k < N_SLOTS; k++) {
        PyObject *d = _PyType_Lookup(t, *slot_names[k]);  /* borrowed */
        if (!d || !Py_IS_TYPE(d, &PyMemberDescr_Type)) return;
        PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
        if (m->type != T_OBJECT_EX || m->offset <= 0) return;
        slot_offsets[k] = m->offset;
    }
    slots_type = t;
}

enum { A_NAME, A_OP, A_KIND, A_INPUTS, A_META, A_DEV, A_DTYPE, A_COPY_OF };

/* Attribute `which` of an added node (a new reference, or NULL with an exception). */
static PyObject *attr_of(PyObject *a, int which)
{
    if (Py_TYPE(a) == slots_type) {
        PyObject *v = *(PyObject **)((char *)a + slot_offsets[which]);
        if (v) {
            Py_INCREF(v);
            return v;
        }
    }
    return PyObject_GetAttr(a, *slot_names[which]);
}

static const char *utf8_of(PyObject *s, Py_ssize_t *len)
{
    if (!PyUnicode_Check(s)) {
        PyErr_SetString(PyExc_TypeError, "a node name is not a str");
        return NULL;
    }
    return PyUnicode_AsUTF8AndSize(s, len);
}

/* The name of node `s`: an original's from `names`, an added node's from its `name` slot (the
 * object keeps the string alive). */
static const char *node_name(PyObject *names, PyObject *added, Py_ssize_t n, long s, Py_ssize_t *len)
{
    if (s >= 0 && s < n && s < PyList_GET_SIZE(names)) return utf8_of(PyList_GET_ITEM(names, s), len);
    if (s >= n && s - n < PyList_GET_SIZE(added)) {
        PyObject *name = attr_of(PyList_GET_ITEM(added, s - n), A_NAME);
        if (!name) return NULL;
        const char *p = utf8_of(name, len);
        Py_DECREF(name);
        return p;
    }
    PyErr_SetString(PyExc_IndexError, "an input names no node");
    return NULL;
}

static long long_attr(PyObject *obj, int which, int *ok)
{
    PyObject *v = attr_of(obj, which);
    if (!v) { *ok = 0; return 0; }
    long x = PyLong_AsLong(v);
    Py_DECREF(v);
    if (x == -1 && PyErr_Occurred()) *ok = 0;
    return x;
}

enum { ADDED_OTHER, ADDED_SEND, ADDED_RECV, ADDED_CTRL_CONST, ADDED_CTRL_IDENTITY };

/* Which added nodes are written here: _Send/_Recv (and their host forms) and the control
 * transfers' Const/Identity, unless they copy an original (replicated Consts). */
static int added_kind(PyObject *a, int *kind)
{
    int ok = 1;
    long copy_of = long_attr(a, A_COPY_OF, &ok);
    if (!ok) return 0;
    *kind = ADDED_OTHER;
    if (copy_of >= 0) return 1;
    PyObject *op = attr_of(a, A_OP);
    if (!op) return 0;
    PyObject *k = attr_of(a, A_KIND);
    if (!k) { Py_DECREF(op); return 0; }
    if (PyUnicode_Check(op) && PyUnicode_Check(k)) {
        if (!PyUnicode_CompareWithASCIIString(op, "_Send") || !PyUnicode_CompareWithASCIIString(op, "_HostSend"))
            *kind = ADDED_SEND;
        else if (!PyUnicode_CompareWithASCIIString(op, "_Recv") || !PyUnicode_CompareWithASCIIString(op, "_HostRecv"))
            *kind = ADDED_RECV;
        else if (!PyUnicode_CompareWithASCIIString(k, "ctrl_const"))
            *kind = ADDED_CTRL_CONST;
        else if (!PyUnicode_CompareWithASCIIString(k, "ctrl_identity"))
            *kind = ADDED_CTRL_IDENTITY;
    }
    Py_DECREF(op);
    Py_DECREF(k);
    return 1;
}

/* Fields 1-4 of an added node: fixed name, op, inputs ("^src", "src", "src:slot"), device. */
static int buf_head(Buf *b, PyObject *a, PyObject *names, PyObject *added, Py_ssize_t n, PyObject *dev_names)
{
    Py_ssize_t len;
    int ok = 1;
    PyObject *v = attr_of(a, A_NAME);
    if (!v) return 0;
    const char *s = utf8_of(v, &len);
    ok = s && buf_name_field(b, 0x0a, "", 0, 1, s, (size_t)len, "", 0);
    Py_DECREF(v);
    if (!ok) return 0;
    v = attr_of(a, A_OP);
    if (!v) return 0;
    s = utf8_of(v, &len);
    ok = s && buf_name_field(b, 0x12, "", 0, 0, s, (size_t)len, "", 0);
    Py_DECREF(v);
    if (!ok) return 0;
    v = attr_of(a, A_INPUTS);
    if (!v) return 0;
    PyObject *inputs = PySequence_Fast(v, "inputs must be a sequence");
    Py_DECREF(v);
    if (!inputs) return 0;
    for (Py_ssize_t k = 0; ok && k < PySequence_Fast_GET_SIZE(inputs); k++) {
        PyObject *pair = PySequence_Fast(PySequence_Fast_GET_ITEM(inputs, k), "an input must be a pair");
        if (!pair) { ok = 0; break; }
        if (PySequence_Fast_GET_SIZE(pair) != 2) {
            PyErr_SetString(PyExc_ValueError, "an input must be a pair");
            Py_DECREF(pair);
            ok = 0;
            break;
        }
        long src = PyLong_AsLong(PySequence_Fast_GET_ITEM(pair, 0));
        long slot = PyLong_AsLong(PySequence_Fast_GET_ITEM(pair, 1));
        Py_DECREF(pair);
        if (PyErr_Occurred()) { ok = 0; break; }
        s = node_name(names, added, n, src, &len);
        if (!s) { ok = 0; break; }
        char suf[24];
        size_t suflen = 0;
        if (slot > 0) {
            suf[0] = ':';
            suflen = (size_t)(put_decimal(suf + 1, slot) - suf);
        }
        ok = buf_name_field(b, 0x1a, "^", slot == -1 ? 1 : 0, 1, s, (size_t)len, suf, suflen);
    }
    Py_DECREF(inputs);
    if (!ok) return 0;
    long dev = long_attr(a, A_DEV, &ok);
    if (!ok) return 0;
    if (dev < 0 || dev >= PyList_GET_SIZE(dev_names)) {
        PyErr_SetString(PyExc_IndexError, "a device index out of range");
        return 0;
    }
    PyObject *d = PyList_GET_ITEM(dev_names, dev);
    if (!buf_room(b, 1 + 10 + (size_t)PyBytes_GET_SIZE(d))) return 0;
    b->p[b->len++] = 0x22;
    buf_varint(b, (uint64_t)PyBytes_GET_SIZE(d));
    buf_raw(b, PyBytes_AS_STRING(d), (size_t)PyBytes_GET_SIZE(d));
    return 1;
}

static int buf_str_attr_obj(Buf *b, const char *key, PyObject *s)
{
    Py_ssize_t len;
    const char *p = utf8_of(s, &len);
    return p && buf_string_attr(b, key, p, (size_t)len);
}

/* The attrs of a _Send/_Recv, in the key order of protobuf's deterministic serialization
 * (placeviz.partition.graphdefs._GraphDefs._encode_transfer is the reference). */
static int buf_transfer_attrs(Buf *b, PyObject *a, int is_send, PyObject *dev_names, PyObject *incarnations)
{
    int ok = 1;
    PyObject *meta = attr_of(a, A_META);
    if (!meta) return 0;
    if (!PyTuple_Check(meta) || PyTuple_GET_SIZE(meta) != 6) {
        PyErr_SetString(PyExc_ValueError, "a transfer's meta must be a 6-tuple");
        Py_DECREF(meta);
        return 0;
    }
    PyObject *tname = PyTuple_GET_ITEM(meta, 0), *src = PyTuple_GET_ITEM(meta, 3), *dst = PyTuple_GET_ITEM(meta, 4);
    long sdev = PyLong_AsLong(PyTuple_GET_ITEM(meta, 1)), rdev = PyLong_AsLong(PyTuple_GET_ITEM(meta, 2));
    int client = PyObject_IsTrue(PyTuple_GET_ITEM(meta, 5));
    long dtype = long_attr(a, A_DTYPE, &ok);
    Py_ssize_t n_dev = PyList_GET_SIZE(dev_names);
    if (!ok || client < 0 || PyErr_Occurred()) goto fail;
    if (sdev < 0 || sdev >= n_dev || rdev < 0 || rdev >= n_dev || sdev >= PyList_GET_SIZE(incarnations)) {
        PyErr_SetString(PyExc_IndexError, "a transfer's device index out of range");
        goto fail;
    }
    uint64_t inc = (uint64_t)PyLong_AsUnsignedLongLongMask(PyList_GET_ITEM(incarnations, sdev));
    if (PyErr_Occurred()) goto fail;
    if (is_send && !buf_varint_attr(b, "T", 6, (uint64_t)(int64_t)dtype)) goto fail;
    if (src != Py_None) {
        /* "_dst" sorts before "_src" */
        if (!buf_str_attr_obj(b, "_dst", dst) || !buf_str_attr_obj(b, "_src", src)) goto fail;
    }
    PyObject *rd = PyList_GET_ITEM(dev_names, rdev), *sd = PyList_GET_ITEM(dev_names, sdev);
    /* upb sorts a longer key before its prefix (upb/message/internal/map_sorter.c) */
    if (!buf_varint_attr(b, "client_terminated", 5, (uint64_t)client) ||
        !buf_string_attr(b, "recv_device", PyBytes_AS_STRING(rd), (size_t)PyBytes_GET_SIZE(rd)) ||
        !buf_varint_attr(b, "send_device_incarnation", 3, inc) ||
        !buf_string_attr(b, "send_device", PyBytes_AS_STRING(sd), (size_t)PyBytes_GET_SIZE(sd)) ||
        !buf_str_attr_obj(b, "tensor_name", tname))
        goto fail;
    if (!is_send && !buf_varint_attr(b, "tensor_type", 6, (uint64_t)(int64_t)dtype)) goto fail;
    Py_DECREF(meta);
    return 1;
fail:
    Py_DECREF(meta);
    return 0;
}

PyDoc_STRVAR(encode_added_doc,
"encode_added(ids, n, added, names, device_names, incarnations, skip, fallback, const_attrs,\n"
"             identity_attrs) -> bytes\n\n"
"The serialized NodeDef of each node of ids, in order, each as a GraphDef `node` field (tag,\n"
"length, NodeDef), one after the other (splice_nodes copies them whole), as placeviz.partition\n"
"writes a partition (importable names): added _Send/_Recv/_HostSend/_HostRecv and control-transfer\n"
"Const/Identity nodes (ids >= n, items of added, not copies) are written here in protobuf's\n"
"deterministic byte order; every other node, and any id in skip, is fallback(id) (a NodeDef's\n"
"bytes). names: the original nodes' names; device_names: bytes per device index; incarnations:\n"
"send_device_incarnation per device index; const_attrs/identity_attrs: the encoded attr fields of\n"
"a control Const/Identity.");

/* Append `body` to `out` as a GraphDef `node` field (field 1, length-delimited). */
static int buf_node_field(Buf *out, const void *body, size_t len)
{
    if (!buf_room(out, 1 + 10 + len)) return 0;
    out->p[out->len++] = 0x0a;
    buf_varint(out, len);
    buf_raw(out, body, len);
    return 1;
}

static PyObject *encode_added(PyObject *self, PyObject *args)
{
    PyObject *ids, *added, *names, *dev_names, *incs, *skip, *fallback, *const_attrs, *ident_attrs;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "O!nO!O!O!O!OOO!O!", &PyList_Type, &ids, &n, &PyList_Type, &added, &PyList_Type,
                          &names, &PyList_Type, &dev_names, &PyList_Type, &incs, &skip, &fallback, &PyBytes_Type,
                          &const_attrs, &PyBytes_Type, &ident_attrs))
        return NULL;
    for (Py_ssize_t d = 0; d < PyList_GET_SIZE(dev_names); d++)
        if (!PyBytes_Check(PyList_GET_ITEM(dev_names, d))) {
            PyErr_SetString(PyExc_TypeError, "device_names must be bytes");
            return NULL;
        }
    Py_ssize_t m = PyList_GET_SIZE(ids);
    PyObject *result = NULL;
    Buf b = {NULL, 0, 0}, out = {NULL, 0, 0};
    learn_slots(added);
    /* An empty dict or set (the usual skip: no control loops) needs no lookup per added node. */
    int may_skip = !((PyDict_CheckExact(skip) && PyDict_GET_SIZE(skip) == 0) ||
                     (PyAnySet_CheckExact(skip) && PySet_GET_SIZE(skip) == 0));
    for (Py_ssize_t k = 0; k < m; k++) {
        PyObject *id = PyList_GET_ITEM(ids, k);
        long i = PyLong_AsLong(id);
        if (i == -1 && PyErr_Occurred()) goto done;
        int kind = ADDED_OTHER;
        PyObject *a = NULL;
        if (i >= n && i - n < PyList_GET_SIZE(added)) {
            int skipped = may_skip ? PySequence_Contains(skip, id) : 0;
            if (skipped < 0) goto done;
            a = PyList_GET_ITEM(added, i - n);
            if (!skipped && !added_kind(a, &kind)) goto done;
        }
        if (kind == ADDED_OTHER) {
            PyObject *node = PyObject_CallOneArg(fallback, id);
            if (!node) goto done;
            if (!PyBytes_Check(node)) {
                PyErr_SetString(PyExc_TypeError, "fallback must return bytes");
                Py_DECREF(node);
                goto done;
            }
            int ok = buf_node_field(&out, PyBytes_AS_STRING(node), (size_t)PyBytes_GET_SIZE(node));
            Py_DECREF(node);
            if (!ok) goto done;
            continue;
        }
        b.len = 0;
        if (!buf_head(&b, a, names, added, n, dev_names)) goto done;
        int ok;
        if (kind == ADDED_SEND || kind == ADDED_RECV) {
            ok = buf_transfer_attrs(&b, a, kind == ADDED_SEND, dev_names, incs);
        } else {
            PyObject *attrs = kind == ADDED_CTRL_CONST ? const_attrs : ident_attrs;
            ok = buf_room(&b, (size_t)PyBytes_GET_SIZE(attrs));
            if (ok) buf_raw(&b, PyBytes_AS_STRING(attrs), (size_t)PyBytes_GET_SIZE(attrs));
        }
        if (!ok || !buf_node_field(&out, b.p, b.len)) goto done;
    }
    result = PyBytes_FromStringAndSize(out.len ? (const char *)out.p : "", (Py_ssize_t)out.len);
done:
    PyMem_Free(b.p);
    PyMem_Free(out.p);
    return result;
}

PyDoc_STRVAR(rebuild_nodes_doc,
"rebuild_nodes(data, offsets, lengths, ids, rewrite, fix_names, in_start, e_src, e_slot, names, added,\n"
"              device_names, devices) -> bytes\n\n"
"The `node` fields of a GraphDef holding, for each original node i of ids, its NodeDef at\n"
"offsets[i]/lengths[i] in data (int64 arrays) with a new `device` (device_names[devices[i]],\n"
"devices: int32) and, when rewrite[i] (uint8), new inputs: e_src/e_slot[in_start[i]:in_start[i+1]]\n"
"(int32 arrays; slot -1 is ^src, 0 src, k src:k; names from names, or for ids >= len(names) from\n"
"the `name` of the items of added), with a '.' before names starting with '_' and, when\n"
"fix_names, the node's own name rewritten so too. The fields are the input's, in its order, so\n"
"the caller parses the result and serializes each node (placeviz.partition.graphdefs._GraphDefs.\n"
"_rebuilt_originals; _node_bytes is the reference).");

static PyObject *rebuild_nodes(PyObject *self, PyObject *args)
{
    PyObject *data, *offsets_obj, *lengths_obj, *ids, *rewrite_obj, *in_start_obj, *src_obj, *slot_obj, *names, *added,
        *dev_names, *devs_obj;
    int fix_names;
    if (!PyArg_ParseTuple(args, "OOOO!OpOOOO!O!O!O", &data, &offsets_obj, &lengths_obj, &PyList_Type, &ids, &rewrite_obj,
                          &fix_names, &in_start_obj, &src_obj, &slot_obj, &PyList_Type, &names, &PyList_Type, &added,
                          &PyList_Type, &dev_names, &devs_obj))
        return NULL;
    Py_buffer buf = {0}, ob = {0}, lb = {0}, rb = {0}, sb = {0}, eb = {0}, tb = {0}, db = {0};
    PyObject *result = NULL;
    Buf out = {NULL, 0, 0};
    if (PyObject_GetBuffer(data, &buf, PyBUF_SIMPLE) < 0) return NULL;
    if (PyObject_GetBuffer(offsets_obj, &ob, PyBUF_SIMPLE) < 0 || PyObject_GetBuffer(lengths_obj, &lb, PyBUF_SIMPLE) < 0 ||
        PyObject_GetBuffer(rewrite_obj, &rb, PyBUF_SIMPLE) < 0 || PyObject_GetBuffer(in_start_obj, &sb, PyBUF_SIMPLE) < 0 ||
        PyObject_GetBuffer(src_obj, &eb, PyBUF_SIMPLE) < 0 || PyObject_GetBuffer(slot_obj, &tb, PyBUF_SIMPLE) < 0 ||
        PyObject_GetBuffer(devs_obj, &db, PyBUF_SIMPLE) < 0)
        goto done;
    Py_ssize_t n = PyList_GET_SIZE(names);
    Py_ssize_t n_edges = eb.len / (Py_ssize_t)sizeof(int32_t);
    learn_slots(added);
    const int64_t *offsets = ob.buf, *lengths = lb.buf;
    const uint8_t *rewrite = rb.buf, *base = buf.buf;
    const int32_t *in_start = sb.buf, *e_src = eb.buf, *e_slot = tb.buf, *devs = db.buf;
    if (ob.len < n * (Py_ssize_t)sizeof(int64_t) || lb.len < ob.len || rb.len < n ||
        sb.len < (n + 1) * (Py_ssize_t)sizeof(int32_t) || tb.len != eb.len || db.len < n * (Py_ssize_t)sizeof(int32_t)) {
        PyErr_SetString(PyExc_ValueError, "rebuild_nodes: arrays too short");
        goto done;
    }
    for (Py_ssize_t d = 0; d < PyList_GET_SIZE(dev_names); d++)
        if (!PyBytes_Check(PyList_GET_ITEM(dev_names, d))) {
            PyErr_SetString(PyExc_TypeError, "device_names must be bytes");
            goto done;
        }
    Buf node = {NULL, 0, 0};
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(ids); k++) {
        long i = PyLong_AsLong(PyList_GET_ITEM(ids, k));
        if (i == -1 && PyErr_Occurred()) goto fail;
        if (i < 0 || i >= n || offsets[i] < 0 || offsets[i] > buf.len || lengths[i] < 0 ||
            lengths[i] > buf.len - offsets[i] || devs[i] < 0 || devs[i] >= PyList_GET_SIZE(dev_names)) {
            PyErr_SetString(PyExc_ValueError, "rebuild_nodes: a node without bytes or device");
            goto fail;
        }
        int fresh = rewrite[i] != 0;
        int rename = fresh && fix_names;
        node.len = 0;
        const uint8_t *p = base + offsets[i], *end = p + lengths[i];
        while (p < end) {  /* the input's fields but those replaced */
            const uint8_t *start = p;
            uint32_t field;
            int wt;
            if (!read_tag(&p, end, &field, &wt) || wt == 3 || wt == 4 || !skip_value(&p, end, wt)) {
                PyErr_SetString(PyExc_ValueError, "rebuild_nodes: a node of odd wire form");
                goto fail;
            }
            if (field == 4 || (field == 3 && fresh) || (field == 1 && rename)) continue;
            if (!buf_room(&node, (size_t)(p - start))) goto fail;
            buf_raw(&node, start, (size_t)(p - start));
        }
        Py_ssize_t len;
        const char *s;
        if (rename) {
            s = utf8_of(PyList_GET_ITEM(names, i), &len);
            if (!s || !buf_name_field(&node, 0x0a, "", 0, 1, s, (size_t)len, "", 0)) goto fail;
        }
        if (fresh) {
            int32_t lo = in_start[i], hi = in_start[i + 1];
            if (lo < 0 || hi < lo || hi > n_edges) {
                PyErr_SetString(PyExc_ValueError, "rebuild_nodes: edge range out of bounds");
                goto fail;
            }
            for (int32_t e = lo; e < hi; e++) {
                s = node_name(names, added, n, e_src[e], &len);
                if (!s) goto fail;
                char suf[24];
                size_t suflen = 0;
                if (e_slot[e] > 0) {
                    suf[0] = ':';
                    suflen = (size_t)(put_decimal(suf + 1, e_slot[e]) - suf);
                }
                if (!buf_name_field(&node, 0x1a, "^", e_slot[e] == -1 ? 1 : 0, 1, s, (size_t)len, suf, suflen))
                    goto fail;
            }
        }
        PyObject *d = PyList_GET_ITEM(dev_names, devs[i]);
        size_t dn = (size_t)PyBytes_GET_SIZE(d);
        if (!buf_room(&node, 1 + 10 + dn)) goto fail;
        node.p[node.len++] = 0x22;
        buf_varint(&node, dn);
        buf_raw(&node, PyBytes_AS_STRING(d), dn);
        if (!buf_node_field(&out, node.p, node.len)) goto fail;
    }
    result = PyBytes_FromStringAndSize(out.len ? (const char *)out.p : "", (Py_ssize_t)out.len);
fail:
    PyMem_Free(node.p);
done:
    PyMem_Free(out.p);
    Py_buffer *views[] = {&ob, &lb, &rb, &sb, &eb, &tb, &db};
    for (size_t v = 0; v < sizeof views / sizeof views[0]; v++)
        if (views[v]->obj) PyBuffer_Release(views[v]);
    PyBuffer_Release(&buf);
    return result;
}


/* ------------------------------------------------------------------ json_records */

/* JSON text of the values json's C encoder writes for a partition's index.json and analyze's lists
 * of records (placeviz/jsontext.py: compact, ensure_ascii), appended to `b`. 1: written; 0: a Python
 * error; -1: a value not handled here (a float, a subclass, a dict with a key that is not a str, an
 * int beyond 64 bits, ...): the caller lets json encode the whole. */
static int json_value(Buf *b, PyObject *v, PyObject *escape, int depth)
{
    if (v == Py_None || v == Py_True || v == Py_False) {
        const char *s = v == Py_None ? "null" : v == Py_True ? "true" : "false";
        size_t n = strlen(s);
        if (!buf_room(b, n)) return 0;
        buf_raw(b, s, n);
        return 1;
    }
    if (PyUnicode_CheckExact(v)) {
#if PY_VERSION_HEX < 0x030C0000
        if (PyUnicode_READY(v) < 0) return 0;  /* a legacy string (3.11 and older): its data made first */
#endif
        if (PyUnicode_IS_ASCII(v)) {
            const char *s = (const char *)PyUnicode_DATA(v);
            Py_ssize_t n = PyUnicode_GET_LENGTH(v), k;
            for (k = 0; k < n; k++) {
                unsigned char c = (unsigned char)s[k];
                if (c < 0x20 || c == '"' || c == '\\' || c == 0x7f) break;
            }
            if (k == n) {  /* nothing to escape: the string between quotes */
                if (!buf_room(b, (size_t)n + 2)) return 0;
                b->p[b->len++] = '"';
                buf_raw(b, s, (size_t)n);
                b->p[b->len++] = '"';
                return 1;
            }
        }
        /* escapes: json's own encode_basestring_ascii writes them */
        PyObject *text = PyObject_CallOneArg(escape, v);
        if (!text) return 0;
        if (!PyUnicode_CheckExact(text) || !PyUnicode_IS_ASCII(text)) {
            Py_DECREF(text);
            return -1;
        }
        size_t n = (size_t)PyUnicode_GET_LENGTH(text);
        int ok = buf_room(b, n);
        if (ok) buf_raw(b, PyUnicode_DATA(text), n);
        Py_DECREF(text);
        return ok;
    }
    if (PyLong_CheckExact(v)) {
        int overflow;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow) return -1;
        if (x == -1 && PyErr_Occurred()) return 0;
        if (!buf_room(b, 24)) return 0;
        b->len = (size_t)((uint8_t *)put_decimal((char *)b->p + b->len, x) - b->p);
        return 1;
    }
    if ((PyList_CheckExact(v) || PyTuple_CheckExact(v)) && depth < 8) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(v);
        if (!buf_room(b, 2)) return 0;
        b->p[b->len++] = '[';
        for (Py_ssize_t k = 0; k < n; k++) {
            if (k) {
                if (!buf_room(b, 1)) return 0;
                b->p[b->len++] = ',';
            }
            int r = json_value(b, PySequence_Fast_GET_ITEM(v, k), escape, depth + 1);
            if (r != 1) return r;
            if (n != PySequence_Fast_GET_SIZE(v)) return -1;  /* changed under us (cannot, here) */
        }
        if (!buf_room(b, 1)) return 0;
        b->p[b->len++] = ']';
        return 1;
    }
    if (PyDict_CheckExact(v) && depth < 8) {  /* keys in insertion order, each written as a string value is */
        Py_ssize_t pos = 0, n = PyDict_GET_SIZE(v), k = 0;
        PyObject *key, *value;
        if (!buf_room(b, 2)) return 0;
        b->p[b->len++] = '{';
        while (PyDict_Next(v, &pos, &key, &value)) {
            if (!PyUnicode_CheckExact(key)) return -1;  /* json writes an int or None key as a string */
            if (k++) {
                if (!buf_room(b, 1)) return 0;
                b->p[b->len++] = ',';
            }
            int r = json_value(b, key, escape, depth + 1);
            if (r != 1) return r;
            if (!buf_room(b, 1)) return 0;
            b->p[b->len++] = ':';
            r = json_value(b, value, escape, depth + 1);
            if (r != 1) return r;
            if (n != PyDict_GET_SIZE(v)) return -1;  /* changed under us (cannot, here) */
        }
        if (!buf_room(b, 1)) return 0;
        b->p[b->len++] = '}';
        return 1;
    }
    return -1;  /* floats, subclasses, anything else: json's encoder decides */
}

PyDoc_STRVAR(json_records_doc,
"json_records(items, escape) -> bytes | None\n\n"
"The items of the list `items`, each a dict with the same str keys in the same order, as\n"
"compact JSON joined by ',' (json.dumps(items, separators=(',', ':'))[1:-1], ASCII): the\n"
"transfers of a partition's index.json. escape: json.encoder.encode_basestring_ascii, called for\n"
"the keys and for any string holding a character to escape. Values: str, int (64-bit), None,\n"
"bool, lists/tuples of them and dicts of them with str keys; None for anything else (a float, a\n"
"subclass, an item that is not such a dict): the caller encodes with json\n"
"(placeviz.jsontext.compact_items).");

static PyObject *json_records(PyObject *self, PyObject *args)
{
    PyObject *items, *escape;
    if (!PyArg_ParseTuple(args, "O!O", &PyList_Type, &items, &escape)) return NULL;
    Py_ssize_t m = PyList_GET_SIZE(items);
    if (m == 0 || !PyDict_CheckExact(PyList_GET_ITEM(items, 0))) Py_RETURN_NONE;
    PyObject *first = PyList_GET_ITEM(items, 0);
    Py_ssize_t nkeys = PyDict_GET_SIZE(first);
    PyObject *keys = PyList_New(nkeys);  /* the first item's keys, in order */
    PyObject *heads = PyList_New(nkeys);  /* "key": as json writes it (',' before all but the first) */
    PyObject *result = NULL;
    Buf b = {NULL, 0, 0};
    if (!keys || !heads) goto done;
    Py_ssize_t pos = 0, k = 0;
    PyObject *key, *value;
    while (PyDict_Next(first, &pos, &key, &value)) {
        if (!PyUnicode_CheckExact(key)) { result = Py_None; Py_INCREF(result); goto done; }
        PyObject *text = PyObject_CallOneArg(escape, key);
        if (!text) goto done;
        PyObject *head = PyUnicode_FromFormat("%s%U:", k ? "," : "", text);
        Py_DECREF(text);
        if (!head) goto done;
        PyObject *head_bytes = PyUnicode_AsASCIIString(head);
        Py_DECREF(head);
        if (!head_bytes) goto done;
        Py_INCREF(key);
        PyList_SET_ITEM(keys, k, key);
        PyList_SET_ITEM(heads, k, head_bytes);
        k++;
    }
    for (Py_ssize_t i = 0; i < m; i++) {
        PyObject *item = PyList_GET_ITEM(items, i);
        if (!PyDict_CheckExact(item) || PyDict_GET_SIZE(item) != nkeys) { result = Py_None; Py_INCREF(result); goto done; }
        if (!buf_room(&b, 2)) goto done;
        if (i) b.p[b.len++] = ',';
        b.p[b.len++] = '{';
        pos = 0;
        k = 0;
        while (PyDict_Next(item, &pos, &key, &value)) {
            PyObject *want = PyList_GET_ITEM(keys, k);
            if (key != want) {
                int same = PyUnicode_CheckExact(key) ? PyUnicode_Compare(key, want) : 1;
                if (same == -1 && PyErr_Occurred()) goto done;
                if (same != 0) { result = Py_None; Py_INCREF(result); goto done; }
            }
            PyObject *head = PyList_GET_ITEM(heads, k);
            if (!buf_room(&b, (size_t)PyBytes_GET_SIZE(head))) goto done;
            buf_raw(&b, PyBytes_AS_STRING(head), (size_t)PyBytes_GET_SIZE(head));
            int r = json_value(&b, value, escape, 0);
            if (r == 0) goto done;
            if (r < 0) { result = Py_None; Py_INCREF(result); goto done; }
            k++;
        }
        if (!buf_room(&b, 1)) goto done;
        b.p[b.len++] = '}';
    }
    result = PyBytes_FromStringAndSize((const char *)b.p, (Py_ssize_t)b.len);
done:
    PyMem_Free(b.p);
    Py_XDECREF(keys);
    Py_XDECREF(heads);
    return result;
}

/* The keys' texts as json writes them before a value: `"key":`, with ',' before all but the first
 * (bytes), in a new list; None (no error set) when a key is not a str. */
static PyObject *json_heads(PyObject *keys, PyObject *escape)
{
    Py_ssize_t nkeys = PyList_GET_SIZE(keys);
    PyObject *heads = PyList_New(nkeys);
    if (!heads) return NULL;
    for (Py_ssize_t k = 0; k < nkeys; k++) {
        PyObject *key = PyList_GET_ITEM(keys, k);
        if (!PyUnicode_CheckExact(key)) { Py_DECREF(heads); Py_RETURN_NONE; }
        PyObject *text = PyObject_CallOneArg(escape, key);
        if (!text) { Py_DECREF(heads); return NULL; }
        PyObject *head = PyUnicode_FromFormat("%s%U:", k ? "," : "", text);
        Py_DECREF(text);
        PyObject *head_bytes = head ? PyUnicode_AsASCIIString(head) : NULL;
        Py_XDECREF(head);
        if (!head_bytes) { Py_DECREF(heads); return NULL; }
        PyList_SET_ITEM(heads, k, head_bytes);
    }
    return heads;
}

PyDoc_STRVAR(json_columns_doc,
"json_columns(keys, columns, escape) -> bytes | None\n\n"
"json_records of the records dict(zip(keys, row)) for row in zip(*columns), without making them:\n"
"the same text, read from one list per key (a partition's transfers, kept as columns:\n"
"placeviz.partition.transfers.TransferTable). keys: a list of str; columns: a list of lists, one\n"
"per key, of one length. None where json_records declines (a value it does not write as json\n"
"would) or on columns of unequal lengths: the caller encodes with json\n"
"(placeviz.jsontext.compact_columns).");

static PyObject *json_columns(PyObject *self, PyObject *args)
{
    PyObject *keys, *columns, *escape;
    if (!PyArg_ParseTuple(args, "O!O!O", &PyList_Type, &keys, &PyList_Type, &columns, &escape)) return NULL;
    Py_ssize_t nkeys = PyList_GET_SIZE(keys);
    if (nkeys == 0 || PyList_GET_SIZE(columns) != nkeys) Py_RETURN_NONE;
    Py_ssize_t m = -1;
    for (Py_ssize_t k = 0; k < nkeys; k++) {
        PyObject *col = PyList_GET_ITEM(columns, k);
        if (!PyList_CheckExact(col) || (m >= 0 && PyList_GET_SIZE(col) != m)) Py_RETURN_NONE;
        m = PyList_GET_SIZE(col);
    }
    PyObject *heads = json_heads(keys, escape);
    if (!heads || heads == Py_None) return heads;
    PyObject *result = NULL;
    Buf b = {NULL, 0, 0};
    for (Py_ssize_t i = 0; i < m; i++) {
        if (!buf_room(&b, 2)) goto done;
        if (i) b.p[b.len++] = ',';
        b.p[b.len++] = '{';
        for (Py_ssize_t k = 0; k < nkeys; k++) {
            PyObject *head = PyList_GET_ITEM(heads, k), *col = PyList_GET_ITEM(columns, k);
            if (PyList_GET_SIZE(col) != m) { result = Py_NewRef(Py_None); goto done; }  /* changed under us */
            if (!buf_room(&b, (size_t)PyBytes_GET_SIZE(head))) goto done;
            buf_raw(&b, PyBytes_AS_STRING(head), (size_t)PyBytes_GET_SIZE(head));
            int r = json_value(&b, PyList_GET_ITEM(col, i), escape, 0);
            if (r == 0) goto done;
            if (r < 0) { result = Py_NewRef(Py_None); goto done; }
        }
        if (!buf_room(&b, 1)) goto done;
        b.p[b.len++] = '}';
    }
    result = PyBytes_FromStringAndSize(b.len ? (const char *)b.p : "", (Py_ssize_t)b.len);
done:
    PyMem_Free(b.p);
    Py_DECREF(heads);
    return result;
}

PyDoc_STRVAR(hash_seed_doc,
"hash_seed() -> int\n\n"
"The secret this process mixes into its name tables' hashes (see hash_bytes), for tests: it\n"
"follows Python's string hash, so it differs between processes unless PYTHONHASHSEED is set.");

static PyObject *hash_seed_of(PyObject *self, PyObject *unused)
{
    return PyLong_FromUnsignedLongLong(hash_seed);
}

static PyMethodDef methods[] = {
    {"hash_seed", hash_seed_of, METH_NOARGS, hash_seed_doc},
    {"scan_graph", scan_graph, METH_O, scan_graph_doc},
    {"read_attrs", read_attrs, METH_VARARGS, read_attrs_doc},
    {"attr_values", attr_values, METH_VARARGS, attr_values_doc},
    {"valid_node_names", valid_node_names, METH_O, valid_node_names_doc},
    {"any_leading_underscore", any_leading_underscore, METH_O, any_leading_underscore_doc},
    {"field_spans", field_spans, METH_VARARGS, field_spans_doc},
    {"fields_spans", fields_spans, METH_VARARGS, fields_spans_doc},
    {"parses", parses, METH_VARARGS, parses_doc},
    {"node_records", node_records, METH_VARARGS, node_records_doc},
    {"splice_nodes", splice_nodes, METH_VARARGS, splice_nodes_doc},
    {"encode_added", encode_added, METH_VARARGS, encode_added_doc},
    {"rebuild_nodes", rebuild_nodes, METH_VARARGS, rebuild_nodes_doc},
    {"json_records", json_records, METH_VARARGS, json_records_doc},
    {"json_columns", json_columns, METH_VARARGS, json_columns_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "placeviz._wire",
    "Read the graph IR's fields straight from a serialized GraphDef (see placeviz/graph.py).", -1, methods,
};

PyMODINIT_FUNC PyInit__wire(void)
{
    PyObject **slots[] = {&str_name, &str_op, &str_kind, &str_inputs, &str_meta, &str_dev, &str_dtype, &str_copy_of};
    const char *names[] = {"name", "op", "kind", "inputs", "meta", "dev", "dtype", "copy_of"};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
        if (!*slots[k] && !(*slots[k] = PyUnicode_InternFromString(names[k]))) return NULL;
    if (PyType_Ready(&NameIndexType) < 0) return NULL;
    PyObject *key = PyUnicode_FromString("placeviz._wire name tables");
    Py_hash_t secret = key ? PyObject_Hash(key) : -1;
    Py_XDECREF(key);
    if (secret == -1) return NULL;
    hash_seed = (uint64_t)secret * 0xff51afd7ed558ccdULL; /* spread a 32-bit platform's hash too */
    PyObject *m = PyModule_Create(&module);
    if (m && PyModule_AddObjectRef(m, "NameIndex", (PyObject *)&NameIndexType) < 0) Py_CLEAR(m);
    return m;
}
