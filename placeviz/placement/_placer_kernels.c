/*
 * placeviz.placement._placer_kernels: the placer's native core, two whole functions: `place` (the
 * whole of _Placer.run after the members) and `imported_colocation` (the `_class` part of
 * imported_devices, TF: python/framework/importer.py _ProcessNewOps).
 *
 * Why: the placer's cost at 200k+ nodes is its per-node loops (union-find over 100k+ colocation
 * keys and ref edges, the assignment over every node), about 1 us per node and loop in Python.
 * `place` runs the whole of _Placer.run after the members are made (placer.py, which stays the
 * executable specification; tests/test_placer_native.py runs both on the same graphs and compares
 * every field of the result): the ref/resource edge unions, the `_class` unions, the group roots,
 * the follow/consumer tables and the assignment (TF: colocation_graph.cc ColocateAllNodes /
 * ColocateResourceOrRefEdge, placer.cc Placer::Run). It either returns the whole result or
 * declines (None) and the Python function runs from its start: on any error to word (a merge
 * conflict, with or without soft placement: the Python step records each one for PV104,
 * incompatible ref devices, a group without candidates), on a
 * table that raises, on any input of another type. It never resumes a Python loop.
 *
 * The TF device-name rules (merging two groups' constraints, placing a group on a device, the
 * candidate list of a group) are not written here: they are the constraint tables of placer.py
 * (_Constraints' caches, _Placer._compute_candidates), interned as ints, which this code reads
 * through their mapping protocol (a missing entry is computed by the Python rule, once) and
 * remembers in its own memo for the run. The union-find state is this function's own C arrays.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* obj's buffer as `view` when it is C-contiguous, of items of `size` bytes and of a native integer
 * type whose format code is in `codes` (e.g. "i"): 1 done, 0 anything else (nothing held: the
 * caller declines), -1 error. */
static int int_buffer(PyObject *obj, Py_buffer *view, Py_ssize_t size, const char *codes)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) return -1;
    const char *f = view->format ? view->format : "B";
    if (*f == '@' || *f == '=') f++;
    if (view->itemsize == size && f[0] && !f[1] && strchr(codes, f[0])) return 1;
    PyBuffer_Release(view);
    view->obj = NULL;
    return 0;
}

/* Whether in_start (n + 1 entries) and in_src describe the inputs of n nodes: the first input at
 * 0, the last at the end of in_src, never decreasing, every source a node. */
static int valid_inputs(const int *in_start, const int *in_src, Py_ssize_t n, Py_ssize_t num_edges)
{
    if (in_start[0] != 0 || in_start[n] != num_edges) return 0;
    for (Py_ssize_t i = 0; i < n; i++)
        if (in_start[i + 1] < in_start[i]) return 0;
    for (Py_ssize_t k = 0; k < num_edges; k++)
        if (in_src[k] < 0 || in_src[k] >= n) return 0;
    return 1;
}

/* What the op type of a node says about it (follow_inputs). */
#define OP_METADATA 1  /* in metadata_ops: follows its input */
#define OP_IDENTITY 2  /* the pass-through op (Identity) */
#define OP_CACHE_SIZE 256

/* The op strings of a graph are shared objects (a few dozen for a million nodes), so the set
 * lookups are made once per object, in a small table keyed by the object's address (the ops
 * list holds every key alive meanwhile). */
typedef struct {
    PyObject *op;
    int bits;
} op_slot;

/* The OP_* bits of `op` (an exact str), or -1 on error. */
static int op_bits(op_slot *cache, PyObject *op, PyObject *metadata_ops, PyObject *identity_op)
{
    size_t h = ((size_t)op >> 4) % OP_CACHE_SIZE;
    op_slot *free_slot = NULL;
    for (int probe = 0; probe < 8; probe++) {
        op_slot *slot = &cache[(h + probe) % OP_CACHE_SIZE];
        if (slot->op == op) return slot->bits;
        if (!slot->op) {
            free_slot = slot;
            break;
        }
    }
    int metadata = PySet_Contains(metadata_ops, op);
    int identity = PyObject_RichCompareBool(op, identity_op, Py_EQ);
    if (metadata < 0 || identity < 0) return -1;
    int bits = (metadata ? OP_METADATA : 0) | (identity ? OP_IDENTITY : 0);
    if (free_slot) { /* a full neighbourhood only costs the lookups again */
        free_slot->op = op;
        free_slot->bits = bits;
    }
    return bits;
}

/* Placer._follow_and_consumers, in one pass over the nodes and one over the edges: (follow,
 * consumers), `follow` per node the reason code if it follows its input, else -1; `consumers`
 * generators then candidate Identity nodes -> their consumers, one per edge, in edge order.
 * None, having changed nothing, at anything but str ops and requests, bool generator flags and
 * consistent int32 input arrays (the caller declines). */
static PyObject *follow_inputs(PyObject *ops, PyObject *requested, PyObject *in_start_obj, PyObject *in_src_obj,
                               PyObject *is_generator, PyObject *metadata_ops, PyObject *identity_op,
                               PyObject *why_metadata, PyObject *why_identity)
{
    PyObject *result = NULL, *follow = NULL, *consumers = NULL, *not_following = NULL;
    PyObject **lists = NULL;    /* per wanted node: its consumers list */
    unsigned char *kind = NULL; /* per node: KIND_* bits */
    int *count = NULL;          /* per wanted node: its consumers (counted, then filled) */
    Py_ssize_t n = 0;
    Py_buffer start_buf = {0}, src_buf = {0};
    int ok = int_buffer(in_start_obj, &start_buf, sizeof(int), "i");
    if (ok > 0) ok = int_buffer(in_src_obj, &src_buf, sizeof(int), "i");
    if (ok < 0) goto done;
    n = PyList_GET_SIZE(ops);
    if (!ok || start_buf.len / (Py_ssize_t)sizeof(int) != n + 1 || PyList_GET_SIZE(requested) != n ||
        PyList_GET_SIZE(is_generator) != n)
        goto decline;
    const int *in_start = start_buf.buf, *in_src = src_buf.buf;
    Py_ssize_t num_edges = src_buf.len / (Py_ssize_t)sizeof(int);
    if (!valid_inputs(in_start, in_src, n, num_edges)) goto decline;
    enum { KIND_GENERATOR = 1, KIND_IDENTITY = 2, KIND_METADATA = 4 };
    kind = PyMem_Calloc(n + 1, 1);
    count = PyMem_Calloc(n + 1, sizeof(int));
    lists = PyMem_Calloc(n + 1, sizeof(PyObject *));
    if (!kind || !count || !lists) {
        PyErr_NoMemory();
        goto done;
    }
    /* Per node: generator (is_generator), candidate Identity (_identity_candidates: no
     * requested device and exactly one input, data or control), metadata op. */
    op_slot cache[OP_CACHE_SIZE] = {{0}};
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *op = PyList_GET_ITEM(ops, i), *request = PyList_GET_ITEM(requested, i);
        PyObject *gen = PyList_GET_ITEM(is_generator, i);
        if (!PyUnicode_CheckExact(op) || !PyUnicode_CheckExact(request) || (gen != Py_True && gen != Py_False))
            goto decline;
        int bits = op_bits(cache, op, metadata_ops, identity_op);
        if (bits < 0) goto done;
        kind[i] = (gen == Py_True ? KIND_GENERATOR : 0) | (bits & OP_METADATA ? KIND_METADATA : 0);
        if (bits & OP_IDENTITY && PyUnicode_GET_LENGTH(request) == 0 && in_start[i + 1] - in_start[i] == 1)
            kind[i] |= KIND_IDENTITY;
    }
    /* _consumers_of: the consumers of the wanted nodes, in edge order (counted, then filled). */
    for (Py_ssize_t k = 0; k < num_edges; k++)
        if (kind[in_src[k]] & (KIND_GENERATOR | KIND_IDENTITY)) count[in_src[k]]++;
    if (!(consumers = PyDict_New())) goto done;
    for (int pass = 0; pass < 2; pass++) { /* generators first, then candidate Identity nodes */
        int wanted = pass == 0 ? KIND_GENERATOR : KIND_IDENTITY;
        for (Py_ssize_t i = 0; i < n; i++) {
            if (!(kind[i] & wanted)) continue;
            if (!lists[i] && !(lists[i] = PyList_New(count[i]))) goto done;
            PyObject *key = PyLong_FromSsize_t(i);
            if (!key) goto done;
            int rc = PyDict_SetItem(consumers, key, lists[i]);
            Py_DECREF(key);
            if (rc < 0) goto done;
        }
    }
    for (Py_ssize_t i = 0; i < n; i++) count[i] = 0; /* now: how many are filled in */
    for (Py_ssize_t dst = 0; dst < n; dst++) {
        for (Py_ssize_t k = in_start[dst]; k < in_start[dst + 1]; k++) {
            int src = in_src[k];
            if (!(kind[src] & (KIND_GENERATOR | KIND_IDENTITY))) continue; /* kind: the smallest array */
            PyObject *user = PyLong_FromSsize_t(dst);
            if (!user) goto done;
            PyList_SET_ITEM(lists[src], count[src]++, user);
        }
    }
    /* _follow_input: metadata ops always; a candidate Identity when it has at most one consumer
     * edge and its input requests what that consumer does ("" without consumers: the sink). */
    if (!(follow = PyList_New(n)) || !(not_following = PyLong_FromLong(-1)))
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *why = kind[i] & KIND_METADATA ? why_metadata : not_following;
        if (kind[i] & KIND_IDENTITY && count[i] <= 1) {
            PyObject *src_request = PyList_GET_ITEM(requested, in_src[in_start[i]]);
            int same = PyUnicode_GET_LENGTH(src_request) == 0; /* the sink's request */
            if (count[i]) {
                Py_ssize_t user = PyLong_AsSsize_t(PyList_GET_ITEM(lists[i], 0)); /* made above */
                same = PyObject_RichCompareBool(src_request, PyList_GET_ITEM(requested, user), Py_EQ);
                if (same < 0) goto done;
            }
            if (same) why = why_identity;
        }
        Py_INCREF(why);
        PyList_SET_ITEM(follow, i, why);
    }
    result = PyTuple_Pack(2, follow, consumers);
    goto done;
decline:
    result = Py_None;
    Py_INCREF(result);
done:
    if (lists) {
        for (Py_ssize_t i = 0; i < n; i++) Py_XDECREF(lists[i]);
        PyMem_Free(lists);
    }
    PyMem_Free(kind);
    PyMem_Free(count);
    Py_XDECREF(follow);
    Py_XDECREF(consumers);
    Py_XDECREF(not_following);
    if (start_buf.obj) PyBuffer_Release(&start_buf);
    if (src_buf.obj) PyBuffer_Release(&src_buf);
    return result;
}

/* Placer._class_keys: (keys_of, visit), per node of n its loc:@ names (colocated_names, a tuple)
 * followed by its own name when colocated_name_ids has it, and the nodes with some, in `order`.
 * None, having changed nothing, at anything but tuples of names and node ids in range. */
static PyObject *class_keys(PyObject *colocated_names, PyObject *name_ids, PyObject *order, Py_ssize_t n)
{
    PyObject *keys_of = NULL, *visit = NULL, *result = NULL;
    if (n < 0 || !(keys_of = PyList_New(n))) return NULL;
    PyObject *empty = PyTuple_New(0);
    if (!empty) goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_INCREF(empty);
        PyList_SET_ITEM(keys_of, i, empty);
    }
    Py_DECREF(empty);
    Py_ssize_t it = 0;
    PyObject *key, *value;
    while (PyDict_Next(colocated_names, &it, &key, &value)) { /* keys_of[i] = its loc:@ names */
        Py_ssize_t i = PyLong_CheckExact(key) ? PyLong_AsSsize_t(key) : -1;
        if (i == -1 && PyErr_Occurred()) PyErr_Clear(); /* too large: declined below */
        if (i < 0 || i >= n || !PyTuple_CheckExact(value)) goto decline;
        Py_INCREF(value);
        PyList_SetItem(keys_of, i, value);
    }
    it = 0;
    while (PyDict_Next(name_ids, &it, &key, &value)) { /* keys_of[i] += (name,) */
        Py_ssize_t i = PyLong_CheckExact(value) ? PyLong_AsSsize_t(value) : -1;
        if (i == -1 && PyErr_Occurred()) PyErr_Clear();
        if (i < 0 || i >= n) goto decline;
        PyObject *keys = PyList_GET_ITEM(keys_of, i);
        Py_ssize_t k = PyTuple_GET_SIZE(keys);
        PyObject *longer = PyTuple_New(k + 1);
        if (!longer) goto done;
        for (Py_ssize_t j = 0; j < k; j++) {
            Py_INCREF(PyTuple_GET_ITEM(keys, j));
            PyTuple_SET_ITEM(longer, j, PyTuple_GET_ITEM(keys, j));
        }
        Py_INCREF(key);
        PyTuple_SET_ITEM(longer, k, key);
        PyList_SetItem(keys_of, i, longer);
    }
    if (!(visit = PyList_New(0))) goto done;
    for (Py_ssize_t p = 0; p < PyList_GET_SIZE(order); p++) { /* the nodes with keys, in order */
        PyObject *node = PyList_GET_ITEM(order, p);
        Py_ssize_t i = PyLong_CheckExact(node) ? PyLong_AsSsize_t(node) : -1;
        if (i == -1 && PyErr_Occurred()) PyErr_Clear();
        if (i < 0 || i >= n) goto decline;
        if (PyTuple_GET_SIZE(PyList_GET_ITEM(keys_of, i)) > 0 && PyList_Append(visit, node) < 0) goto done;
    }
    result = PyTuple_Pack(2, keys_of, visit);
    goto done;
decline:
    result = Py_None;
    Py_INCREF(result);
done:
    Py_XDECREF(keys_of);
    Py_XDECREF(visit);
    return result;
}


/* ------------------------------------------------------------------ the native core: place */

enum { PL_ERROR = -1, PL_DECLINE = 0, PL_OK = 1, PL_CONFLICT = 2 };

/* A memo of the tables' answers for small state ids, for one run: a union asks `merged` for a new
 * (a, b) tuple key and a ref edge asks `compatible` three times, and building and hashing those
 * keys is most of a union's cost, while a graph has only tens of distinct states. The tables are
 * pure functions of their keys (a missing entry is computed, never changed), so an answer read
 * once stays right. */
#define MEMO_IDS 64
enum { MEMO_UNKNOWN = 0, MEMO_FOUND = 1, MEMO_NONE = 2 };

typedef struct {
    PyObject *merged, *placed, *compatible, *unset; /* (int, int) -> value, filled on a miss */
    PyObject *states;       /* state id -> (assigned, resource, requested, type set) */
    PyObject *intern_state; /* _Constraints.state(assigned, resource, requested, types) -> id */
    PyObject *merge_error;  /* DeviceMergeError: a merge conflict, not a failure */
    unsigned char merge_known[MEMO_IDS][MEMO_IDS];
    long merge[MEMO_IDS][MEMO_IDS];
    unsigned char compat_known[MEMO_IDS][MEMO_IDS];
    unsigned char compat_bits[MEMO_IDS][MEMO_IDS]; /* 1 assigned, 2 resource, 4 requested */
} Tables;

static inline int memo_slot(long a, long b)
{
    return a >= 0 && b >= 0 && a < MEMO_IDS && b < MEMO_IDS;
}

/* After a table raised: decline on an ordinary exception (the Python spec meets it again and
 * words it); anything else (KeyboardInterrupt, MemoryError) propagates. */
static int table_failed(void)
{
    if (PyErr_ExceptionMatches(PyExc_MemoryError) || !PyErr_ExceptionMatches(PyExc_Exception)) return PL_ERROR;
    PyErr_Clear();
    return PL_DECLINE;
}

/* table[(a, b)] as a long: PL_OK, PL_CONFLICT (None), PL_DECLINE or PL_ERROR. */
static int table_long(PyObject *table, PyObject *a, PyObject *b, long *out)
{
    PyObject *key = PyTuple_Pack(2, a, b);
    if (!key) return PL_ERROR;
    PyObject *v = PyObject_GetItem(table, key);
    Py_DECREF(key);
    if (!v) return table_failed();
    if (v == Py_None) {
        Py_DECREF(v);
        return PL_CONFLICT;
    }
    long x = PyLong_Check(v) ? PyLong_AsLong(v) : -1;
    Py_DECREF(v);
    if (x == -1 && PyErr_Occurred()) return table_failed();
    if (x < 0) return PL_DECLINE;
    *out = x;
    return PL_OK;
}

/* The state tuple of id `s` (borrowed), or NULL (no error set: the caller declines). */
static PyObject *state_fields(Tables *t, long s)
{
    if (s < 0 || s >= PyList_GET_SIZE(t->states)) return NULL;
    PyObject *fields = PyList_GET_ITEM(t->states, s);
    return PyTuple_CheckExact(fields) && PyTuple_GET_SIZE(fields) == 4 ? fields : NULL;
}

/* _Constraints.merged[a, b]: PL_OK (*out), PL_CONFLICT (no device type supports both, or the
 * devices cannot merge), PL_DECLINE, PL_ERROR. */
static int merge_states(Tables *t, long a, long b, long *out)
{
    int slot = memo_slot(a, b);
    if (slot && t->merge_known[a][b] == MEMO_FOUND) {
        *out = t->merge[a][b];
        return PL_OK;
    }
    if (slot && t->merge_known[a][b] == MEMO_NONE) return PL_CONFLICT;
    PyObject *pa = PyLong_FromLong(a), *pb = PyLong_FromLong(b), *key = NULL, *v = NULL;
    int r = PL_ERROR;
    if (!pa || !pb || !(key = PyTuple_Pack(2, pa, pb))) goto done;
    v = PyObject_GetItem(t->merged, key);
    if (!v) {
        if (PyErr_ExceptionMatches(t->merge_error)) {
            PyErr_Clear();
            r = PL_CONFLICT;
        } else {
            r = table_failed();
        }
        goto done;
    }
    if (v == Py_None) {
        if (slot) t->merge_known[a][b] = MEMO_NONE;
        r = PL_CONFLICT;
        goto done;
    }
    long x = PyLong_Check(v) ? PyLong_AsLong(v) : -1;
    if (x < 0) {
        r = PyErr_Occurred() ? table_failed() : PL_DECLINE;
        goto done;
    }
    if (slot) {
        t->merge[a][b] = x;
        t->merge_known[a][b] = MEMO_FOUND;
    }
    *out = x;
    r = PL_OK;
done:
    Py_XDECREF(pa);
    Py_XDECREF(pb);
    Py_XDECREF(key);
    Py_XDECREF(v);
    return r;
}

/* _Placer.find: the root of i, with path compression. */
static long find_root(long *parent, long i)
{
    long root = i;
    while (parent[root] >= 0) root = parent[root];
    while (i != root) {
        long next = parent[i];
        parent[i] = root;
        i = next;
    }
    return root;
}

/* The union of _Placer._colocate for the roots xr (x's) and yr: TF's rank rule, then the merged
 * constraints at the surviving root. PL_CONFLICT changes nothing. */
static int unite(Tables *t, long *parent, long *rank, long *state, long xr, long yr)
{
    long new_root = rank[xr] < rank[yr] ? yr : xr, old_root = rank[xr] < rank[yr] ? xr : yr, merged;
    int r = merge_states(t, state[new_root], state[old_root], &merged);
    if (r != PL_OK) return r;
    state[new_root] = merged;
    parent[old_root] = new_root;
    if (rank[xr] == rank[yr]) rank[new_root]++;
    return PL_OK;
}

/* Which of the (assigned, resource, requested) names of states s and d are compatible
 * (_Constraints.compatible): *bits 1, 2, 4. */
static int compatible_fields(Tables *t, long s, long d, int *bits)
{
    if (memo_slot(s, d) && t->compat_known[s][d]) {
        *bits = t->compat_bits[s][d];
        return PL_OK;
    }
    PyObject *sf = state_fields(t, s), *df = state_fields(t, d);
    if (!sf || !df) return PL_DECLINE;
    int b = 0;
    for (int f = 0; f < 3; f++) {
        PyObject *key = PyTuple_Pack(2, PyTuple_GET_ITEM(sf, f), PyTuple_GET_ITEM(df, f));
        if (!key) return PL_ERROR;
        PyObject *v = PyObject_GetItem(t->compatible, key);
        Py_DECREF(key);
        if (!v) return table_failed();
        int truth = PyObject_IsTrue(v);
        Py_DECREF(v);
        if (truth < 0) return table_failed();
        if (truth) b |= 1 << f;
    }
    if (memo_slot(s, d)) {
        t->compat_known[s][d] = 1;
        t->compat_bits[s][d] = (unsigned char)b;
    }
    *bits = b;
    return PL_OK;
}

/* _Placer._colocate_resource_edges and _colocate_ref_edge: join each node of ref_inputs (node-id
 * order) with the producers of its ref/resource data inputs. Incompatible assigned or resource
 * devices, and a merge that fails, are errors: declined. */
static int union_ref_edges(Tables *t, PyObject *ref_inputs, const int *in_start, const int *in_src,
                           const int *in_slot, Py_ssize_t n, long *parent, long *rank, long *state)
{
    for (Py_ssize_t p = 0; p < PyList_GET_SIZE(ref_inputs); p++) {
        PyObject *item = PyList_GET_ITEM(ref_inputs, p), *ports;
        if (!PyTuple_CheckExact(item) || PyTuple_GET_SIZE(item) != 2 ||
            !PyTuple_CheckExact(ports = PyTuple_GET_ITEM(item, 1)))
            return PL_DECLINE;
        long dst = PyLong_AsLong(PyTuple_GET_ITEM(item, 0));
        if (dst == -1 && PyErr_Occurred()) return table_failed();
        if (dst < 0 || dst >= n) return PL_DECLINE;
        long port = -1;
        for (Py_ssize_t k = in_start[dst]; k < in_start[dst + 1]; k++) {
            if (in_slot[k] == -1) continue; /* CONTROL */
            port++;
            int is_ref = 0;
            for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(ports) && !is_ref; j++) {
                long q = PyLong_AsLong(PyTuple_GET_ITEM(ports, j));
                if (q == -1 && PyErr_Occurred()) return table_failed();
                is_ref = q == port;
            }
            if (!is_ref) continue;
            long sr = find_root(parent, in_src[k]), dr = find_root(parent, dst);
            int bits, r = compatible_fields(t, state[sr], state[dr], &bits);
            if (r != PL_OK) return r;
            if ((bits & 3) != 3) return PL_DECLINE; /* incompatible assigned or resource devices */
            if (!(bits & 4)) {
                /* TF silently drops the consumer's request in favour of the producer's. */
                PyObject *s = state_fields(t, state[sr]), *d = state_fields(t, state[dr]);
                if (!s || !d) return PL_DECLINE;
                long unset1, requested;
                r = table_long(t->unset, PyTuple_GET_ITEM(d, 0), PyTuple_GET_ITEM(s, 2), &unset1);
                if (r == PL_OK) {
                    PyObject *u = PyLong_FromLong(unset1);
                    if (!u) return PL_ERROR;
                    r = table_long(t->unset, PyTuple_GET_ITEM(d, 1), u, &requested);
                    Py_DECREF(u);
                }
                if (r != PL_OK) return r == PL_CONFLICT ? PL_DECLINE : r;
                PyObject *req = PyLong_FromLong(requested);
                if (!req) return PL_ERROR;
                PyObject *v = PyObject_CallFunctionObjArgs(t->intern_state, PyTuple_GET_ITEM(d, 0),
                                                           PyTuple_GET_ITEM(d, 1), req, PyTuple_GET_ITEM(d, 3),
                                                           NULL);
                Py_DECREF(req);
                if (!v) return table_failed();
                long id = PyLong_Check(v) ? PyLong_AsLong(v) : -1;
                Py_DECREF(v);
                if (id < 0) return PyErr_Occurred() ? table_failed() : PL_DECLINE;
                state[dr] = id;
            }
            if (sr == dr) continue;
            r = unite(t, parent, rank, state, sr, dr);
            if (r != PL_OK) return r == PL_CONFLICT ? PL_DECLINE : r;
        }
    }
    return PL_OK;
}

/* _Placer._colocate_class_groups: join loc:@X groups over `visit` (the nodes with keys, in visit
 * order); the first node with a key is the group's root. A conflict declines, with or without
 * soft placement: the Python step words and records it (placer.py, ColocationConflict). */
static int union_by_keys(Tables *t, PyObject *visit, PyObject *keys_of, long *parent, long *rank, long *state)
{
    PyObject *roots = PyDict_New();
    if (!roots) return PL_ERROR;
    int r = PL_OK;
    for (Py_ssize_t p = 0; p < PyList_GET_SIZE(visit) && r == PL_OK; p++) {
        PyObject *node = PyList_GET_ITEM(visit, p);
        long i = PyLong_AsLong(node); /* class_keys checked the ids */
        PyObject *keys = PyList_GET_ITEM(keys_of, i);
        for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(keys); k++) {
            PyObject *key = PyTuple_GET_ITEM(keys, k);
            PyObject *root_obj = PyDict_GetItemWithError(roots, key);
            if (!root_obj) {
                if (PyErr_Occurred() || PyDict_SetItem(roots, key, node) < 0) {
                    r = PL_ERROR;
                    break;
                }
                continue;
            }
            long xr = find_root(parent, i), yr = find_root(parent, PyLong_AsLong(root_obj));
            if (xr == yr) continue;
            r = unite(t, parent, rank, state, xr, yr);
            if (r == PL_CONFLICT) r = PL_DECLINE;
            if (r != PL_OK) break;
        }
    }
    Py_DECREF(roots);
    return r;
}

/* Whether the tuple `devices` of ints holds v. */
static int tuple_has_long(PyObject *devices, long v)
{
    for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(devices); j++)
        if (PyLong_AsLong(PyTuple_GET_ITEM(devices, j)) == v) return 1;
    return 0;
}

/* What the assignment reads besides the union-find arrays (one run's values). */
typedef struct {
    const int *in_start, *in_src;
    Py_ssize_t n, num_devices;
    PyObject *follow, *consumers;           /* follow_inputs */
    PyObject *candidates;                   /* _Placer._compute_candidates(state) -> tuple */
    PyObject *candidates_of;                /* state -> candidate tuple (this run's) */
    PyObject *candidate_names;              /* candidate tuple -> first 8 names (this run's) */
    PyObject *first_names;                  /* group root -> names when first visited (the result) */
    PyObject *device_names, *device_name_id;
    long why_generator;
    const long *group_root;
    long *state, *assigned, *reason;
    unsigned char *visited_root;
} Assign;

/* One step of the assignment loop of _Placer.run (assign) for node i. */
static int assign_node(Tables *t, Assign *a, long i, int generators)
{
    long root = a->group_root[i], st = a->state[root];
    PyObject *st_obj = PyLong_FromLong(st);
    if (!st_obj) return PL_ERROR;
    PyObject *devices = PyDict_GetItemWithError(a->candidates_of, st_obj); /* borrowed */
    if (!devices) {
        if (PyErr_Occurred()) goto error;
        PyObject *computed = PyObject_CallOneArg(a->candidates, st_obj);
        if (!computed) {
            Py_DECREF(st_obj);
            return table_failed();
        }
        int rc = PyTuple_CheckExact(computed) ? PyDict_SetItem(a->candidates_of, st_obj, computed) : 1;
        Py_DECREF(computed); /* candidates_of holds it */
        if (rc) {
            Py_DECREF(st_obj);
            return rc < 0 ? PL_ERROR : PL_DECLINE;
        }
        devices = computed;
    }
    Py_ssize_t num = PyTuple_GET_SIZE(devices);
    for (Py_ssize_t j = 0; j < num; j++) {
        PyObject *d = PyTuple_GET_ITEM(devices, j);
        long k = PyLong_CheckExact(d) ? PyLong_AsLong(d) : -1;
        if (k < 0 || k >= a->num_devices) { /* checked once per candidate tuple would do; tuples are short */
            PyErr_Clear();
            Py_DECREF(st_obj);
            return PL_DECLINE;
        }
    }
    if (num == 0) { /* no device for the group: an error to word */
        Py_DECREF(st_obj);
        return PL_DECLINE;
    }
    if (!a->visited_root[root]) {
        PyObject *names = PyDict_GetItemWithError(a->candidate_names, devices);
        if (!names) {
            if (PyErr_Occurred()) goto error;
            Py_ssize_t m = num < 8 ? num : 8;
            PyObject *made = PyTuple_New(m);
            if (!made) goto error;
            for (Py_ssize_t j = 0; j < m; j++) {
                PyObject *name = PyList_GET_ITEM(a->device_names, PyLong_AsLong(PyTuple_GET_ITEM(devices, j)));
                Py_INCREF(name);
                PyTuple_SET_ITEM(made, j, name);
            }
            int rc = PyDict_SetItem(a->candidate_names, devices, made);
            Py_DECREF(made);
            if (rc < 0) goto error;
            names = made;
        }
        PyObject *root_obj = PyLong_FromLong(root);
        if (!root_obj) goto error;
        int rc = PyDict_SetItem(a->first_names, root_obj, names);
        Py_DECREF(root_obj);
        if (rc < 0) goto error;
        a->visited_root[root] = 1;
    }
    long chosen = PyLong_AsLong(PyTuple_GET_ITEM(devices, 0));
    if (!generators) {
        long why = PyLong_AsLong(PyList_GET_ITEM(a->follow, i));
        int lo = a->in_start[i];
        if (why >= 0 && a->in_start[i + 1] > lo) { /* Shape/Size/Rank, pass-through Identity */
            long src_device = a->assigned[a->in_src[lo]];
            if (src_device >= 0 && tuple_has_long(devices, src_device)) {
                chosen = src_device;
                a->reason[i] = why;
            }
        }
    } else { /* a generator: the device of all its consumers, if they share one */
        PyObject *key = PyLong_FromLong(i);
        if (!key) goto error;
        PyObject *users = PyDict_GetItemWithError(a->consumers, key);
        Py_DECREF(key);
        if (!users || !PyList_CheckExact(users)) {
            if (PyErr_Occurred()) goto error;
            Py_DECREF(st_obj);
            return PL_DECLINE;
        }
        Py_ssize_t u = PyList_GET_SIZE(users);
        if (u > 0) {
            long first = a->assigned[PyLong_AsLong(PyList_GET_ITEM(users, 0))]; /* follow_inputs made them */
            if (first >= 0 && tuple_has_long(devices, first)) {
                int same = 1;
                for (Py_ssize_t j = 1; j < u && same; j++)
                    same = a->assigned[PyLong_AsLong(PyList_GET_ITEM(users, j))] == first;
                if (same) {
                    chosen = first;
                    a->reason[i] = a->why_generator;
                }
            }
        }
    }
    long placed;
    int r = table_long(t->placed, st_obj, PyList_GET_ITEM(a->device_name_id, chosen), &placed);
    Py_DECREF(st_obj);
    if (r != PL_OK) return r == PL_CONFLICT ? PL_DECLINE : r;
    a->assigned[i] = chosen;
    a->state[root] = placed;
    return PL_OK;
error:
    Py_DECREF(st_obj);
    return PL_ERROR;
}

/* A list of n ints from a C array, or NULL. */
static PyObject *int_list(const long *values, Py_ssize_t n)
{
    PyObject *list = PyList_New(n);
    if (!list) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = PyLong_FromLong(values[i]);
        if (!v) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, v);
    }
    return list;
}

/* Copy a list of n ints into `out`: 1 done, 0 anything else (declined). */
static int copy_ints(PyObject *list, Py_ssize_t n, long *out)
{
    if (!PyList_CheckExact(list) || PyList_GET_SIZE(list) != n) return 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = PyList_GET_ITEM(list, i);
        out[i] = PyLong_CheckExact(v) ? PyLong_AsLong(v) : -1;
        if (out[i] == -1 && PyErr_Occurred()) PyErr_Clear();
        if (out[i] < 0) return 0;
    }
    return 1;
}

PyDoc_STRVAR(place_doc,
"place(*, in_start, in_src, in_slot, ops, requested, order, is_generator, state, ref_inputs,\n"
"      colocated_names, colocated_name_ids, constraints, candidates, device_names, device_name_id,\n"
"      metadata_ops, identity_op, why_metadata, why_identity, why_generator, why_default)\n"
"    -> None | (devices, reason, group_root, first_names)\n\n"
"_Placer.run after _init_members: the ref/resource and _class unions, the group roots and the\n"
"assignment (placer.py is the specification). `state`: each node's initial state id;\n"
"`constraints`: the run's _Constraints (its caches are read, and filled on a miss);\n"
"`candidates`: state id -> tuple of device indices. Returns the device name per node, the\n"
"reason code per node, the group root per node and {group root: names of its first 8\n"
"candidates when first visited}; None (declined) at an error to word or an input it does not\n"
"handle: the caller then runs the Python placer from its start.");

static PyObject *place(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"in_start", "in_src", "in_slot", "ops", "requested", "order", "is_generator",
                             "state", "ref_inputs", "colocated_names", "colocated_name_ids", "constraints",
                             "candidates", "device_names", "device_name_id", "metadata_ops", "identity_op",
                             "why_metadata", "why_identity", "why_generator", "why_default", NULL};
    PyObject *in_start_obj = NULL, *in_src_obj = NULL, *in_slot_obj = NULL, *ops = NULL, *requested = NULL;
    PyObject *order = NULL, *is_generator = NULL, *state_obj = NULL, *ref_inputs = NULL, *colocated_names = NULL;
    PyObject *colocated_name_ids = NULL, *constraints = NULL, *candidates = NULL, *device_names = NULL;
    PyObject *device_name_id = NULL, *metadata_ops = NULL, *identity_op = NULL, *why_metadata = NULL;
    PyObject *why_identity = NULL;
    long why_generator = -1, why_default = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$OOOO!O!O!O!O!O!O!O!OOO!O!O!UO!O!ll", kwlist, &in_start_obj,
                                     &in_src_obj, &in_slot_obj, &PyList_Type, &ops, &PyList_Type, &requested,
                                     &PyList_Type, &order, &PyList_Type, &is_generator, &PyList_Type, &state_obj,
                                     &PyList_Type, &ref_inputs, &PyDict_Type, &colocated_names, &PyDict_Type,
                                     &colocated_name_ids, &constraints, &candidates, &PyList_Type, &device_names,
                                     &PyList_Type, &device_name_id, &PyFrozenSet_Type, &metadata_ops, &identity_op,
                                     &PyLong_Type, &why_metadata, &PyLong_Type, &why_identity, &why_generator,
                                     &why_default))
        return NULL;
    if (!in_start_obj || !in_src_obj || !in_slot_obj || !ops || !requested || !order || !is_generator ||
        !state_obj || !ref_inputs || !colocated_names || !colocated_name_ids || !constraints || !candidates ||
        !device_names || !device_name_id || !metadata_ops || !identity_op || !why_metadata || !why_identity ||
        why_generator < 0 || why_default < 0) {
        PyErr_SetString(PyExc_TypeError, "place() takes every argument, by keyword");
        return NULL;
    }
    PyObject *result = NULL, *follow_consumers = NULL, *keys = NULL, *first_names = NULL;
    PyObject *candidates_of = NULL, *candidate_names = NULL, *out_devices = NULL, *out_reason = NULL;
    PyObject *out_roots = NULL;
    long *parent = NULL, *rank = NULL, *state = NULL, *group_root = NULL, *assigned = NULL, *reason = NULL;
    unsigned char *visited_root = NULL;
    Tables *t = NULL;
    int r = PL_DECLINE;
    Py_buffer start_buf = {0}, src_buf = {0}, slot_buf = {0};
    int ok = int_buffer(in_start_obj, &start_buf, sizeof(int), "i");
    if (ok > 0) ok = int_buffer(in_src_obj, &src_buf, sizeof(int), "i");
    if (ok > 0) ok = int_buffer(in_slot_obj, &slot_buf, sizeof(int), "i");
    if (ok < 0) goto done;
    Py_ssize_t n = PyList_GET_SIZE(ops), num_devices = PyList_GET_SIZE(device_names);
    if (!ok || start_buf.len / (Py_ssize_t)sizeof(int) != n + 1 || slot_buf.len != src_buf.len ||
        PyList_GET_SIZE(order) != n || PyList_GET_SIZE(device_name_id) != num_devices || num_devices == 0)
        goto decline;
    const int *in_start = start_buf.buf, *in_src = src_buf.buf, *in_slot = slot_buf.buf;
    if (!valid_inputs(in_start, in_src, n, src_buf.len / (Py_ssize_t)sizeof(int))) goto decline;

    /* The constraint tables. */
    if (!(t = PyMem_Calloc(1, sizeof(Tables)))) {
        PyErr_NoMemory();
        goto done;
    }
    if (!(t->merged = PyObject_GetAttrString(constraints, "merged")) ||
        !(t->placed = PyObject_GetAttrString(constraints, "placed")) ||
        !(t->compatible = PyObject_GetAttrString(constraints, "compatible")) ||
        !(t->unset = PyObject_GetAttrString(constraints, "unset")) ||
        !(t->states = PyObject_GetAttrString(constraints, "states")) ||
        !(t->intern_state = PyObject_GetAttrString(constraints, "state")) ||
        !(t->merge_error = PyObject_GetAttrString(constraints, "merge_error")))
        goto done;
    if (!PyList_CheckExact(t->states) || !PyExceptionClass_Check(t->merge_error)) goto decline;

    /* Union-find over node ids: parent (-1 at a root), rank, the state id of each group root. */
    parent = PyMem_Malloc((n + 1) * sizeof(long));
    rank = PyMem_Calloc(n + 1, sizeof(long));
    state = PyMem_Malloc((n + 1) * sizeof(long));
    group_root = PyMem_Malloc((n + 1) * sizeof(long));
    assigned = PyMem_Malloc((n + 1) * sizeof(long));
    reason = PyMem_Malloc((n + 1) * sizeof(long));
    visited_root = PyMem_Calloc(n + 1, 1);
    if (!parent || !rank || !state || !group_root || !assigned || !reason || !visited_root) {
        PyErr_NoMemory();
        goto done;
    }
    if (!copy_ints(state_obj, n, state)) goto decline;
    for (Py_ssize_t i = 0; i < n; i++) {
        parent[i] = -1;
        assigned[i] = -1;
        reason[i] = why_default;
    }
    if ((r = union_ref_edges(t, ref_inputs, in_start, in_src, in_slot, n, parent, rank, state)) != PL_OK) goto end;
    if (!(keys = class_keys(colocated_names, colocated_name_ids, order, n))) goto done;
    if (keys == Py_None) goto decline;
    if ((r = union_by_keys(t, PyTuple_GET_ITEM(keys, 1), PyTuple_GET_ITEM(keys, 0), parent, rank, state)) != PL_OK)
        goto end;
    for (Py_ssize_t i = 0; i < n; i++) group_root[i] = find_root(parent, i); /* groups are final now */

    if (!(follow_consumers = follow_inputs(ops, requested, in_start_obj, in_src_obj, is_generator, metadata_ops,
                                           identity_op, why_metadata, why_identity)))
        goto done;
    if (follow_consumers == Py_None) goto decline;
    if (!(first_names = PyDict_New()) || !(candidates_of = PyDict_New()) || !(candidate_names = PyDict_New()))
        goto done;
    Assign a = {in_start, in_src, n, num_devices, PyTuple_GET_ITEM(follow_consumers, 0),
                PyTuple_GET_ITEM(follow_consumers, 1), candidates, candidates_of, candidate_names, first_names,
                device_names, device_name_id, why_generator, group_root, state, assigned, reason, visited_root};
    for (Py_ssize_t j = 0; j < num_devices; j++)
        if (!PyUnicode_CheckExact(PyList_GET_ITEM(device_names, j)) ||
            !PyLong_CheckExact(PyList_GET_ITEM(device_name_id, j)))
            goto decline;
    /* Pass 1 visits non-generators in node order; pass 2 the generators, after their consumers.
     * follow_inputs checked that is_generator holds bools. */
    for (int generators = 0; generators < 2; generators++) {
        for (Py_ssize_t p = 0; p < n; p++) {
            PyObject *node = PyList_GET_ITEM(order, p);
            long i = PyLong_CheckExact(node) ? PyLong_AsLong(node) : -1;
            if (i < 0 || i >= n) {
                PyErr_Clear();
                goto decline;
            }
            if ((PyList_GET_ITEM(is_generator, i) == Py_True) != generators) continue;
            if ((r = assign_node(t, &a, i, generators)) != PL_OK) goto end;
        }
    }
    /* Both passes visit every node of `order`, a permutation of the nodes (Graph.topological_order):
     * every node has a device. */
    if (!(out_devices = PyList_New(n))) goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (assigned[i] < 0) goto decline;
        PyObject *name = PyList_GET_ITEM(device_names, assigned[i]);
        Py_INCREF(name);
        PyList_SET_ITEM(out_devices, i, name);
    }
    if (!(out_reason = int_list(reason, n)) || !(out_roots = int_list(group_root, n))) goto done;
    result = PyTuple_Pack(4, out_devices, out_reason, out_roots, first_names);
    goto done;
end:
    if (r == PL_ERROR) goto done;
decline:
    result = Py_None;
    Py_INCREF(result);
done:
    if (t) {
        Py_XDECREF(t->merged);
        Py_XDECREF(t->placed);
        Py_XDECREF(t->compatible);
        Py_XDECREF(t->unset);
        Py_XDECREF(t->states);
        Py_XDECREF(t->intern_state);
        Py_XDECREF(t->merge_error);
        PyMem_Free(t);
    }
    PyMem_Free(parent);
    PyMem_Free(rank);
    PyMem_Free(state);
    PyMem_Free(group_root);
    PyMem_Free(assigned);
    PyMem_Free(reason);
    PyMem_Free(visited_root);
    Py_XDECREF(follow_consumers);
    Py_XDECREF(keys);
    Py_XDECREF(first_names);
    Py_XDECREF(candidates_of);
    Py_XDECREF(candidate_names);
    Py_XDECREF(out_devices);
    Py_XDECREF(out_reason);
    Py_XDECREF(out_roots);
    if (start_buf.obj) PyBuffer_Release(&start_buf);
    if (src_buf.obj) PyBuffer_Release(&src_buf);
    if (slot_buf.obj) PyBuffer_Release(&slot_buf);
    return result;
}

/* ------------------------------------------------------------------ the import rewrite */

/* The first loop of imported_devices: per node of colocated_names (in its order), the names it
 * is colocated with other than its own, for the nodes that have some: a list of (node, names).
 * NULL with an error set, or Py_None (a new reference) at an entry it does not take. */
static PyObject *colocated_others(PyObject *colocated_names, PyObject *names)
{
    PyObject *out = PyList_New(0);
    if (!out) return NULL;
    Py_ssize_t it = 0, n = PyList_GET_SIZE(names);
    PyObject *key, *located;
    while (PyDict_Next(colocated_names, &it, &key, &located)) {
        long i = PyLong_CheckExact(key) ? PyLong_AsLong(key) : -1;
        if (i == -1 && PyErr_Occurred()) PyErr_Clear();
        if (i < 0 || i >= n || !PyTuple_CheckExact(located)) {
            Py_DECREF(out);
            Py_RETURN_NONE;
        }
        PyObject *own = PyList_GET_ITEM(names, i), *others = located;
        Py_INCREF(others);
        int has_own = PySequence_Contains(located, own);
        if (has_own < 0) goto fail;
        if (has_own) { /* the same names without its own, in order */
            Py_DECREF(others);
            others = PyList_New(0);
            if (!others) goto fail_nothing;
            for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(located); j++) {
                PyObject *name = PyTuple_GET_ITEM(located, j);
                int same = PyObject_RichCompareBool(name, own, Py_EQ);
                if (same < 0 || (!same && PyList_Append(others, name) < 0)) goto fail;
            }
            PyObject *t = PyList_AsTuple(others);
            Py_DECREF(others);
            if (!(others = t)) goto fail_nothing;
        }
        if (PyTuple_GET_SIZE(others) > 0) {
            PyObject *pair = PyTuple_Pack(2, key, others);
            if (!pair || PyList_Append(out, pair) < 0) {
                Py_XDECREF(pair);
                goto fail;
            }
            Py_DECREF(pair);
        }
        Py_DECREF(others);
        continue;
    fail:
        Py_DECREF(others);
    fail_nothing:
        Py_DECREF(out);
        return NULL;
    }
    return out;
}

/* The last loop of imported_devices over `colocated`, on `devices` (the caller's copy, whose
 * colocated nodes already lost their device): each node takes the re-canonicalised device of the
 * first op it names that has one, answered once per tuple of names when none of them is colocated
 * itself (`stat`). 1 done, 0 declined, -1 error. */
static int take_colocated_devices(PyObject *colocated, PyObject *devices, PyObject *index, PyObject *colocated_ids,
                                  PyObject *recanonical)
{
    PyObject *stat = PyDict_New();
    if (!stat) return -1;
    int r = 1;
    Py_ssize_t n = PyList_GET_SIZE(devices);
    for (Py_ssize_t p = 0; p < PyList_GET_SIZE(colocated) && r == 1; p++) {
        PyObject *pair = PyList_GET_ITEM(colocated, p);
        PyObject *others = PyTuple_GET_ITEM(pair, 1); /* colocated_others made them */
        long i = PyLong_AsLong(PyTuple_GET_ITEM(pair, 0));
        PyObject *device = PyDict_GetItemWithError(stat, others); /* borrowed */
        PyObject *found_device = NULL;                             /* owned, when computed here */
        if (!device) {
            if (PyErr_Occurred()) {
                r = -1;
                break;
            }
            int disjoint = 1;
            for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(others); k++) {
                PyObject *id = PyDict_GetItemWithError(index, PyTuple_GET_ITEM(others, k));
                if (!id) {
                    if (PyErr_Occurred()) r = -1;
                    if (r < 0) break;
                    continue; /* no such op: skipped, and never colocated */
                }
                int c = PySet_Contains(colocated_ids, id);
                if (c < 0) {
                    r = -1;
                    break;
                }
                if (c) disjoint = 0;
                if (found_device) continue;
                long j = PyLong_CheckExact(id) ? PyLong_AsLong(id) : -1;
                if (j < 0 || j >= n) {
                    PyErr_Clear();
                    r = 0;
                    break;
                }
                PyObject *dj = PyList_GET_ITEM(devices, j);
                if (PyUnicode_GET_LENGTH(dj) == 0) continue;
                if (!(found_device = PyObject_GetItem(recanonical, dj))) { /* DeviceSpec's rule, in Python */
                    if (!PyErr_ExceptionMatches(PyExc_Exception) || PyErr_ExceptionMatches(PyExc_MemoryError)) {
                        r = -1;
                    } else {
                        PyErr_Clear();
                        r = 0;
                    }
                    break;
                }
                if (!PyUnicode_CheckExact(found_device)) r = 0;
            }
            if (r == 1 && disjoint && PyDict_SetItem(stat, others, found_device ? found_device : Py_None) < 0) r = -1;
            device = found_device ? found_device : Py_None;
        }
        if (r == 1 && device != Py_None) {
            Py_INCREF(device);
            if (PyList_SetItem(devices, i, device) < 0) r = -1;
        }
        Py_XDECREF(found_device);
    }
    Py_DECREF(stat);
    return r;
}

PyDoc_STRVAR(imported_colocation_doc,
"imported_colocation(*, colocated_names, names, index, devices, recanonical) -> None | list[str]\n\n"
"The `_class` part of imported_devices (importer._ProcessNewOps): `devices`, the canonical device\n"
"of every node, with each op colocated with others first losing its device, then taking, in\n"
"node order, the device of the first op it names that has one. `recanonical`: device -> its\n"
"canonical form (a table that computes a missing entry, DeviceSpec's rule in Python). Returns\n"
"a new list, or None (declined) at an input of another type or a table that raises: the\n"
"Python code then does it.");

static PyObject *imported_colocation(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"colocated_names", "names", "index", "devices", "recanonical", NULL};
    PyObject *colocated_names = NULL, *names = NULL, *index = NULL, *devices = NULL, *recanonical = NULL;
    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$O!O!O!O!O", kwlist, &PyDict_Type, &colocated_names,
                                     &PyList_Type, &names, &PyDict_Type, &index, &PyList_Type, &devices,
                                     &recanonical))
        return NULL;
    if (!colocated_names || !names || !index || !devices || !recanonical) {
        PyErr_SetString(PyExc_TypeError, "imported_colocation() takes every argument, by keyword");
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(devices);
    if (PyList_GET_SIZE(names) != n) Py_RETURN_NONE;
    for (Py_ssize_t i = 0; i < n; i++)
        if (!PyUnicode_CheckExact(PyList_GET_ITEM(devices, i)) || !PyUnicode_CheckExact(PyList_GET_ITEM(names, i)))
            Py_RETURN_NONE;
    PyObject *colocated = colocated_others(colocated_names, names), *out = NULL, *ids = NULL, *empty = NULL;
    if (!colocated || colocated == Py_None) return colocated;
    if (!(out = PyList_GetSlice(devices, 0, n)) || !(ids = PySet_New(NULL)) || !(empty = PyUnicode_FromString("")))
        goto fail;
    for (Py_ssize_t p = 0; p < PyList_GET_SIZE(colocated); p++) { /* each loses its device */
        PyObject *node = PyTuple_GET_ITEM(PyList_GET_ITEM(colocated, p), 0);
        if (PySet_Add(ids, node) < 0) goto fail;
        Py_INCREF(empty);
        PyList_SetItem(out, PyLong_AsSsize_t(node), empty);
    }
    int r = take_colocated_devices(colocated, out, index, ids, recanonical);
    if (r < 0) goto fail;
    if (r == 0) {
        Py_DECREF(out);
        out = Py_None;
        Py_INCREF(out);
    }
    Py_DECREF(colocated);
    Py_DECREF(ids);
    Py_DECREF(empty);
    return out;
fail:
    Py_XDECREF(colocated);
    Py_XDECREF(out);
    Py_XDECREF(ids);
    Py_XDECREF(empty);
    return NULL;
}

static PyMethodDef methods[] = {
    {"place", (PyCFunction)(void (*)(void))place, METH_VARARGS | METH_KEYWORDS, place_doc},
    {"imported_colocation", (PyCFunction)(void (*)(void))imported_colocation, METH_VARARGS | METH_KEYWORDS,
     imported_colocation_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "placeviz.placement._placer_kernels",
    "The placer's native core (see placeviz/placement/placer.py, the specification).",
    -1, methods,
};

PyMODINIT_FUNC PyInit__placer_kernels(void)
{
    return PyModule_Create(&module);
}
