/*
 * placeviz.placement._placer_kernels: the placer's per-node loops, in C.
 *
 * Why: after three rounds of Python-level work the placer's cost is its per-node loops (union-
 * find over 100k+ colocation keys and ref edges, the import-time device rewrite), about 1 us per
 * node and loop. Each function here is a transliteration of one loop of placer.py, which stays
 * the reference (the tests run both). A function handles only the common case and, at anything
 * else (a merge not cached yet, an error to word, a device not seen yet), stops and returns
 * where it stopped: the Python loop handles that step, with the same state, and calls back to
 * resume. So the C code never has to reproduce an error message or a rare rule.
 *
 * The union-find state is the placer's own Python lists (parent, rank, state) of ints, updated
 * in place exactly as the Python code updates them (path compression included).
 *
 * The others (follow_inputs, class_keys, request_pairs) replace the glue between those loops:
 * passes that build per-node lists, numpy masks and dicts, where the Python code's cost is in
 * converting million-element lists to numpy and back. They change nothing in place: each returns
 * its whole result, or None at anything but the plain case (an object of another type, an id out
 * of range), and the Python code then computes it (and raises whatever it raises).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* list[i] as a C long; the lists hold ints only (the placer builds them). */
static inline long get_long(PyObject *list, Py_ssize_t i)
{
    return PyLong_AsLong(PyList_GET_ITEM(list, i));
}

static inline int set_long(PyObject *list, Py_ssize_t i, long v)
{
    PyObject *o = PyLong_FromLong(v);
    if (!o) return -1;
    return PyList_SetItem(list, i, o); /* steals o, releases the old item */
}

/* Placer.find: the root of i, with path compression. -1 on error. */
static long find_root(PyObject *parent, long i)
{
    long root = i, p;
    Py_ssize_t n = PyList_GET_SIZE(parent);
    while ((p = get_long(parent, root)) >= 0) {
        if (p >= n) {
            PyErr_SetString(PyExc_IndexError, "parent out of range");
            return -1;
        }
        root = p;
    }
    if (p == -1 && PyErr_Occurred()) return -1;
    while (i != root) {
        long next = get_long(parent, i);
        if (set_long(parent, i, root) < 0) return -1;
        i = next;
    }
    return root;
}

/* merged.get((a, b)): a new reference to the cached merged state, or NULL (no error) when
 * missing or cached as None. */
static PyObject *cached_merge(PyObject *merged, long a, long b)
{
    PyObject *key = Py_BuildValue("(ll)", a, b);
    if (!key) return NULL;
    PyObject *v = PyDict_GetItemWithError(merged, key);
    Py_DECREF(key);
    if (!v || v == Py_None) return NULL;
    Py_INCREF(v);
    return v;
}

/* A memo of the Python caches' answers for small state ids, for one kernel call.
 *
 * Why: a union asks the `merged` dict with a new (a, b) tuple key, and a ref edge asks `compatible`
 * three times; building and hashing those keys is most of a union's cost, while a graph has only
 * tens of distinct states. Within one call the Python caches do not change (the kernel returns
 * before Python adds to them), so an answer read once stays right until the call returns. */
#define MEMO_IDS 64
enum { MEMO_UNKNOWN = 0, MEMO_FOUND = 1, MEMO_MISSING = 2 };
typedef struct {
    unsigned char merge_known[MEMO_IDS][MEMO_IDS];
    long merge[MEMO_IDS][MEMO_IDS];
    unsigned char compatible_known[MEMO_IDS][MEMO_IDS];  /* by (state, state): all three fields */
    unsigned char compatible[MEMO_IDS][MEMO_IDS];
} Memo;

static inline int memo_slot(long a, long b)
{
    return a >= 0 && b >= 0 && a < MEMO_IDS && b < MEMO_IDS;
}

/* cached_merge through the memo (memo may be NULL). */
static PyObject *memo_merge(Memo *memo, PyObject *merged, long a, long b)
{
    int slot = memo != NULL && memo_slot(a, b);
    if (slot && memo->merge_known[a][b] == MEMO_FOUND) return PyLong_FromLong(memo->merge[a][b]);
    if (slot && memo->merge_known[a][b] == MEMO_MISSING) return NULL;
    PyObject *v = cached_merge(merged, a, b);
    if (slot) {
        if (v != NULL && PyLong_CheckExact(v)) {
            int overflow;
            long x = PyLong_AsLongAndOverflow(v, &overflow);
            if (!overflow && !(x == -1 && PyErr_Occurred())) {
                memo->merge[a][b] = x;
                memo->merge_known[a][b] = MEMO_FOUND;
            }
            PyErr_Clear();  /* v stays valid: it is returned as it is */
        } else if (v == NULL && !PyErr_Occurred()) {
            memo->merge_known[a][b] = MEMO_MISSING;
        }
    }
    return v;
}

/* The union of _colocate when the merged state is cached: state[new] = merged, parent[old] = new,
 * rank bump. xr, yr: the roots (x's first, as the Python code orders them). Returns 1 done,
 * 0 not cached (nothing changed), -1 error. */
static int union_cached(PyObject *parent, PyObject *rank, PyObject *state, PyObject *merged, Memo *memo,
                        long xr, long yr)
{
    long rx = get_long(rank, xr), ry = get_long(rank, yr);
    long new_root = rx < ry ? yr : xr, old_root = rx < ry ? xr : yr;
    PyObject *m = memo_merge(memo, merged, get_long(state, new_root), get_long(state, old_root));
    if (!m) return PyErr_Occurred() ? -1 : 0;
    if (PyList_SetItem(state, new_root, m) < 0) return -1;
    if (set_long(parent, old_root, new_root) < 0) return -1;
    if (rx == ry && set_long(rank, new_root, get_long(rank, new_root) + 1) < 0) return -1;
    return 1;
}

PyDoc_STRVAR(union_by_keys_doc,
"union_by_keys(visit, keys_of, roots, parent, rank, state, merged, pos, key_pos) -> None | (pos, key_pos)\n\n"
"The loop of Placer._colocate_class_groups from visit[pos], key keys_of[visit[pos]][key_pos].\n"
"Stops at the first union whose merged state is not cached and returns its position: the\n"
"caller runs _colocate for it and resumes at key_pos + 1. None when the loop is done.");

static PyObject *union_by_keys_loop(PyObject *visit, PyObject *keys_of, PyObject *roots, PyObject *parent,
                                    PyObject *rank, PyObject *state, PyObject *merged, Memo *memo, Py_ssize_t n,
                                    Py_ssize_t pos, Py_ssize_t key_pos);

static PyObject *union_by_keys(PyObject *self, PyObject *args)
{
    PyObject *visit, *keys_of, *roots, *parent, *rank, *state, *merged;
    Py_ssize_t pos, key_pos;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!O!O!nn", &PyList_Type, &visit, &PyList_Type, &keys_of, &PyDict_Type,
                          &roots, &PyList_Type, &parent, &PyList_Type, &rank, &PyList_Type, &state, &PyDict_Type,
                          &merged, &pos, &key_pos))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(parent);
    if (PyList_GET_SIZE(rank) != n || PyList_GET_SIZE(state) != n || PyList_GET_SIZE(keys_of) != n) {
        PyErr_SetString(PyExc_ValueError, "parent, rank, state and keys_of differ in length");
        return NULL;
    }
    Memo *memo = PyMem_Calloc(1, sizeof(Memo));
    if (memo == NULL) return PyErr_NoMemory();
    PyObject *result = union_by_keys_loop(visit, keys_of, roots, parent, rank, state, merged, memo, n, pos,
                                          key_pos);
    PyMem_Free(memo);
    return result;
}

static PyObject *union_by_keys_loop(PyObject *visit, PyObject *keys_of, PyObject *roots, PyObject *parent,
                                    PyObject *rank, PyObject *state, PyObject *merged, Memo *memo, Py_ssize_t n,
                                    Py_ssize_t pos, Py_ssize_t key_pos)
{
    for (Py_ssize_t p = pos; p < PyList_GET_SIZE(visit); p++) {
        PyObject *node = PyList_GET_ITEM(visit, p);
        long i = PyLong_AsLong(node);
        if (i < 0 || i >= n) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_IndexError, "node id out of range");
            return NULL;
        }
        PyObject *keys = PyList_GET_ITEM(keys_of, i);
        if (!PyTuple_Check(keys)) {
            PyErr_SetString(PyExc_TypeError, "keys_of items must be tuples");
            return NULL;
        }
        for (Py_ssize_t k = p == pos ? key_pos : 0; k < PyTuple_GET_SIZE(keys); k++) {
            PyObject *key = PyTuple_GET_ITEM(keys, k);
            PyObject *root_obj = PyDict_GetItemWithError(roots, key);
            if (!root_obj) {
                if (PyErr_Occurred() || PyDict_SetItem(roots, key, node) < 0) return NULL;
                continue;
            }
            long root = PyLong_AsLong(root_obj);
            if (root < 0 || root >= n) {
                if (!PyErr_Occurred()) PyErr_SetString(PyExc_IndexError, "root out of range");
                return NULL;
            }
            long xr = find_root(parent, i);
            if (xr < 0) return NULL;
            long yr = find_root(parent, root);
            if (yr < 0) return NULL;
            if (xr == yr) continue;
            int done = union_cached(parent, rank, state, merged, memo, xr, yr);
            if (done < 0) return NULL;
            if (!done) return Py_BuildValue("(nn)", p, k);
        }
    }
    Py_RETURN_NONE;
}

/* compatible[(a, b)] when cached: 1 true, 0 false, -2 not cached, -1 error. */
static int cached_compatible(PyObject *compatible, PyObject *a, PyObject *b)
{
    PyObject *key = PyTuple_Pack(2, a, b);
    if (!key) return -1;
    PyObject *v = PyDict_GetItemWithError(compatible, key);
    Py_DECREF(key);
    if (!v) return PyErr_Occurred() ? -1 : -2;
    return PyObject_IsTrue(v);
}

PyDoc_STRVAR(union_ref_edges_doc,
"union_ref_edges(ref_inputs, in_start, in_src, in_slot, parent, rank, state, states, compatible, merged,\n"
"                pos, edge, port) -> None | (pos, edge, port)\n\n"
"The loop of Placer._colocate_resource_edges from ref_inputs[pos], input edge `edge` (its data\n"
"port number `port`; edge -1: the node's first edge). Stops at the first ref edge it cannot\n"
"settle from the caches alone (a compatibility not cached or false, a request to drop, a merge\n"
"not cached) and returns it: the caller handles that edge and resumes at edge + 1, port + 1.");

static PyObject *union_ref_edges(PyObject *self, PyObject *args)
{
    PyObject *ref_inputs, *in_start_obj, *in_src_obj, *in_slot_obj, *parent, *rank, *state, *states;
    PyObject *compatible, *merged, *result = NULL;
    Memo *memo = NULL;
    Py_ssize_t pos, edge, port;
    if (!PyArg_ParseTuple(args, "O!OOOO!O!O!O!O!O!nnn", &PyList_Type, &ref_inputs, &in_start_obj, &in_src_obj,
                          &in_slot_obj, &PyList_Type, &parent, &PyList_Type, &rank, &PyList_Type, &state,
                          &PyList_Type, &states, &PyDict_Type, &compatible, &PyDict_Type, &merged, &pos, &edge,
                          &port))
        return NULL;
    Py_buffer start_buf = {0}, src_buf = {0}, slot_buf = {0};
    if (PyObject_GetBuffer(in_start_obj, &start_buf, PyBUF_SIMPLE) < 0) return NULL;
    if (PyObject_GetBuffer(in_src_obj, &src_buf, PyBUF_SIMPLE) < 0) goto done;
    if (PyObject_GetBuffer(in_slot_obj, &slot_buf, PyBUF_SIMPLE) < 0) goto done;
    const int *in_start = start_buf.buf, *in_src = src_buf.buf, *in_slot = slot_buf.buf;
    Py_ssize_t n = PyList_GET_SIZE(parent), num_edges = src_buf.len / (Py_ssize_t)sizeof(int);
    Py_ssize_t num_states = PyList_GET_SIZE(states);
    if (start_buf.len / (Py_ssize_t)sizeof(int) != n + 1 || slot_buf.len != src_buf.len ||
        PyList_GET_SIZE(rank) != n || PyList_GET_SIZE(state) != n) {
        PyErr_SetString(PyExc_ValueError, "inconsistent graph arrays");
        goto done;
    }
    memo = PyMem_Calloc(1, sizeof(Memo));
    if (memo == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t p = pos; p < PyList_GET_SIZE(ref_inputs); p++) {
        PyObject *item = PyList_GET_ITEM(ref_inputs, p), *ports;
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2 || !PyTuple_Check(ports = PyTuple_GET_ITEM(item, 1))) {
            PyErr_SetString(PyExc_TypeError, "ref_inputs items must be (node, ports)");
            goto done;
        }
        long dst = PyLong_AsLong(PyTuple_GET_ITEM(item, 0));
        if (dst < 0 || dst >= n || in_start[dst] < 0 || in_start[dst + 1] > num_edges) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_IndexError, "node id out of range");
            goto done;
        }
        Py_ssize_t k = in_start[dst], port_k = -1;
        if (p == pos && edge >= 0) {
            k = edge;
            port_k = port - 1;
        }
        for (; k < in_start[dst + 1]; k++) {
            if (in_slot[k] == -1) continue;
            port_k++;
            int is_ref = 0;
            for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(ports); j++) {
                long q = PyLong_AsLong(PyTuple_GET_ITEM(ports, j));
                if (q == -1 && PyErr_Occurred()) goto done;
                if (q == port_k) { is_ref = 1; break; }
            }
            if (!is_ref) continue;
            long src = in_src[k];
            if (src < 0 || src >= n) {
                PyErr_SetString(PyExc_IndexError, "input out of range");
                goto done;
            }
            long sr = find_root(parent, src);
            if (sr < 0) goto done;
            long dr = find_root(parent, dst);
            if (dr < 0) goto done;
            long s_id = get_long(state, sr), d_id = get_long(state, dr);
            if (s_id < 0 || s_id >= num_states || d_id < 0 || d_id >= num_states) {
                if (!PyErr_Occurred()) PyErr_SetString(PyExc_IndexError, "state out of range");
                goto done;
            }
            PyObject *s = PyList_GET_ITEM(states, s_id), *d = PyList_GET_ITEM(states, d_id);
            if (!PyTuple_Check(s) || !PyTuple_Check(d) || PyTuple_GET_SIZE(s) < 3 || PyTuple_GET_SIZE(d) < 3) {
                PyErr_SetString(PyExc_TypeError, "states must be tuples");
                goto done;
            }
            int stop = 0;
            int slot = memo_slot(s_id, d_id);
            if (slot && memo->compatible_known[s_id][d_id]) {
                stop = !memo->compatible[s_id][d_id];
            } else {
                for (int f = 0; f < 3 && !stop; f++) { /* assigned, resource, requested: all compatible */
                    int c = cached_compatible(compatible, PyTuple_GET_ITEM(s, f), PyTuple_GET_ITEM(d, f));
                    if (c == -1) goto done;
                    if (c != 1) stop = 1;
                }
                if (slot) {  /* states are immutable tuples, so their answer is fixed for this call */
                    memo->compatible_known[s_id][d_id] = 1;
                    memo->compatible[s_id][d_id] = !stop;
                }
            }
            if (!stop && sr != dr) {
                int u = union_cached(parent, rank, state, merged, memo, sr, dr);
                if (u < 0) goto done;
                stop = !u;
            }
            if (stop) {
                result = Py_BuildValue("(nnn)", p, k, port_k);
                goto done;
            }
        }
    }
    result = Py_None;
    Py_INCREF(result);
done:
    PyMem_Free(memo);
    if (start_buf.obj) PyBuffer_Release(&start_buf);
    if (src_buf.obj) PyBuffer_Release(&src_buf);
    if (slot_buf.obj) PyBuffer_Release(&slot_buf);
    return result;
}

/* Whether the tuple `devices` holds the int v (`v in devices`). */
static int tuple_has_long(PyObject *devices, long v, int *err)
{
    for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(devices); j++) {
        long d = PyLong_AsLong(PyTuple_GET_ITEM(devices, j));
        if (d == -1 && PyErr_Occurred()) { *err = 1; return 0; }
        if (d == v) return 1;
    }
    return 0;
}

PyDoc_STRVAR(assign_nodes_doc,
"assign_nodes(visit, generators, group_root, state, candidates_of, first_names, candidate_names,\n"
"             assigned, reason, follow, in_start, in_src, consumers, placed, device_name_id,\n"
"             why_generator, pos) -> None | pos\n\n"
"The assignment loop of Placer.run (one pass) from visit[pos]. Stops, before changing anything\n"
"for that node, at the first node whose group's candidates, candidate names or placed state are\n"
"not cached yet and returns its position: the caller assigns that node and resumes at pos + 1.");

static PyObject *assign_nodes(PyObject *self, PyObject *args)
{
    PyObject *visit, *group_root, *state, *candidates_of, *first_names, *candidate_names, *assigned, *reason;
    PyObject *follow, *in_start_obj, *in_src_obj, *consumers, *placed, *device_name_id, *why_generator;
    PyObject *result = NULL;
    int generators;
    Py_ssize_t pos;
    if (!PyArg_ParseTuple(args, "O!pO!O!O!O!O!O!O!O!OOO!O!O!On", &PyList_Type, &visit, &generators, &PyList_Type,
                          &group_root, &PyList_Type, &state, &PyDict_Type, &candidates_of, &PyDict_Type,
                          &first_names, &PyDict_Type, &candidate_names, &PyList_Type, &assigned, &PyList_Type,
                          &reason, &PyList_Type, &follow, &in_start_obj, &in_src_obj, &PyDict_Type, &consumers,
                          &PyDict_Type, &placed, &PyList_Type, &device_name_id, &why_generator, &pos))
        return NULL;
    Py_buffer start_buf = {0}, src_buf = {0};
    if (PyObject_GetBuffer(in_start_obj, &start_buf, PyBUF_SIMPLE) < 0) return NULL;
    if (PyObject_GetBuffer(in_src_obj, &src_buf, PyBUF_SIMPLE) < 0) goto done;
    const int *in_start = start_buf.buf, *in_src = src_buf.buf;
    Py_ssize_t n = PyList_GET_SIZE(group_root), num_edges = src_buf.len / (Py_ssize_t)sizeof(int);
    Py_ssize_t num_devices = PyList_GET_SIZE(device_name_id);
    if (start_buf.len / (Py_ssize_t)sizeof(int) != n + 1 || PyList_GET_SIZE(assigned) != n ||
        PyList_GET_SIZE(reason) != n || PyList_GET_SIZE(follow) != n || PyList_GET_SIZE(state) != n) {
        PyErr_SetString(PyExc_ValueError, "inconsistent arrays");
        goto done;
    }
    for (Py_ssize_t p = pos; p < PyList_GET_SIZE(visit); p++) {
        long i = PyLong_AsLong(PyList_GET_ITEM(visit, p));
        if (i < 0 || i >= n) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_IndexError, "node id out of range");
            goto done;
        }
        long root = get_long(group_root, i);
        if (root < 0 || root >= n) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_IndexError, "root out of range");
            goto done;
        }
        PyObject *st = PyList_GET_ITEM(state, root);
        PyObject *devices = PyDict_GetItemWithError(candidates_of, st);
        if (!devices) {
            if (PyErr_Occurred()) goto done;
            goto stop;
        }
        if (!PyTuple_Check(devices) || PyTuple_GET_SIZE(devices) == 0) goto stop;
        PyObject *root_obj = PyList_GET_ITEM(group_root, i);
        PyObject *names = NULL; /* borrowed; set when the root has no first names yet */
        int has_names = PyDict_Contains(first_names, root_obj);
        if (has_names < 0) goto done;
        if (!has_names) {
            names = PyDict_GetItemWithError(candidate_names, devices);
            if (!names) {
                if (PyErr_Occurred()) goto done;
                goto stop;
            }
        }
        long chosen = PyLong_AsLong(PyTuple_GET_ITEM(devices, 0));
        PyObject *why = NULL; /* borrowed: the reason to record, if not the default */
        int err = 0;
        if (!generators) {
            PyObject *why_obj = PyList_GET_ITEM(follow, i);
            long w = PyLong_AsLong(why_obj);
            if (w >= 0 && in_start[i + 1] > in_start[i]) {
                long lo = in_start[i];
                if (lo >= num_edges || in_src[lo] < 0 || in_src[lo] >= n) {
                    PyErr_SetString(PyExc_IndexError, "input out of range");
                    goto done;
                }
                long src_device = get_long(assigned, in_src[lo]);
                if (src_device >= 0 && tuple_has_long(devices, src_device, &err)) {
                    chosen = src_device;
                    why = why_obj;
                }
            }
        } else {
            PyObject *key = PyList_GET_ITEM(visit, p);
            PyObject *users = PyDict_GetItemWithError(consumers, key);
            if (!users) {
                if (!PyErr_Occurred()) PyErr_SetObject(PyExc_KeyError, key);
                goto done;
            }
            if (!PyList_Check(users)) {
                PyErr_SetString(PyExc_TypeError, "consumers must be lists");
                goto done;
            }
            Py_ssize_t u = PyList_GET_SIZE(users);
            if (u > 0) {
                long first_user = PyLong_AsLong(PyList_GET_ITEM(users, 0));
                if (first_user < 0 || first_user >= n) {
                    if (!PyErr_Occurred()) PyErr_SetString(PyExc_IndexError, "consumer out of range");
                    goto done;
                }
                long first = get_long(assigned, first_user);
                if (first >= 0 && tuple_has_long(devices, first, &err)) {
                    int same = 1;
                    for (Py_ssize_t j = 1; j < u && same; j++) {
                        long user = PyLong_AsLong(PyList_GET_ITEM(users, j));
                        if (user < 0 || user >= n) {
                            if (!PyErr_Occurred()) PyErr_SetString(PyExc_IndexError, "consumer out of range");
                            goto done;
                        }
                        same = get_long(assigned, user) == first;
                    }
                    if (same) {
                        chosen = first;
                        why = why_generator;
                    }
                }
            }
        }
        if (err || PyErr_Occurred()) goto done;
        if (chosen < 0 || chosen >= num_devices) {
            PyErr_SetString(PyExc_IndexError, "device out of range");
            goto done;
        }
        PyObject *key = PyTuple_Pack(2, st, PyList_GET_ITEM(device_name_id, chosen));
        if (!key) goto done;
        PyObject *new_state = PyDict_GetItemWithError(placed, key);
        Py_DECREF(key);
        if (!new_state) {
            if (PyErr_Occurred()) goto done;
            goto stop;
        }
        /* Everything is known: record it, as the Python loop does. */
        if (names && PyDict_SetItem(first_names, root_obj, names) < 0) goto done;
        if (why) {
            Py_INCREF(why);
            if (PyList_SetItem(reason, i, why) < 0) goto done;
        }
        if (set_long(assigned, i, chosen) < 0) goto done;
        Py_INCREF(new_state);
        if (PyList_SetItem(state, root, new_state) < 0) goto done;
        continue;
    stop:
        result = PyLong_FromSsize_t(p);
        goto done;
    }
    result = Py_None;
    Py_INCREF(result);
done:
    if (start_buf.obj) PyBuffer_Release(&start_buf);
    if (src_buf.obj) PyBuffer_Release(&src_buf);
    return result;
}

PyDoc_STRVAR(colocated_others_doc,
"colocated_others(colocated_names, names) -> list[(node, names)]\n\n"
"The first loop of imported_devices: per node of colocated_names (in its order), the names it\n"
"is colocated with other than its own, for the nodes that have some.");

static PyObject *colocated_others(PyObject *self, PyObject *args)
{
    PyObject *colocated_names, *names;
    if (!PyArg_ParseTuple(args, "O!O!", &PyDict_Type, &colocated_names, &PyList_Type, &names)) return NULL;
    PyObject *out = PyList_New(0);
    if (!out) return NULL;
    Py_ssize_t it = 0, n = PyList_GET_SIZE(names);
    PyObject *key, *located;
    while (PyDict_Next(colocated_names, &it, &key, &located)) {
        long i = PyLong_AsLong(key);
        if (i < 0 || i >= n || !PyTuple_Check(located)) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "bad colocated_names entry");
            Py_DECREF(out);
            return NULL;
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

PyDoc_STRVAR(apply_colocated_devices_doc,
"apply_colocated_devices(colocated, static, devices, index, colocated_ids, recanonical, pos) -> None | pos\n\n"
"The last loop of imported_devices from colocated[pos]: each node takes the (re-canonicalised)\n"
"device of the first op it names that has one, answered once per tuple of names when none of\n"
"them is colocated itself (`static`). Stops at the first node that needs a device not in\n"
"`recanonical` yet and returns its position: the caller does that node and resumes at pos + 1.");

static PyObject *apply_colocated_devices(PyObject *self, PyObject *args)
{
    PyObject *colocated, *stat, *devices, *index, *colocated_ids, *recanonical;
    Py_ssize_t pos;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!O!n", &PyList_Type, &colocated, &PyDict_Type, &stat, &PyList_Type,
                          &devices, &PyDict_Type, &index, &PySet_Type, &colocated_ids, &PyDict_Type, &recanonical,
                          &pos))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(devices);
    for (Py_ssize_t p = pos; p < PyList_GET_SIZE(colocated); p++) {
        PyObject *pair = PyList_GET_ITEM(colocated, p), *others;
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2 || !PyTuple_Check(others = PyTuple_GET_ITEM(pair, 1))) {
            PyErr_SetString(PyExc_TypeError, "colocated items must be (node, names)");
            return NULL;
        }
        long i = PyLong_AsLong(PyTuple_GET_ITEM(pair, 0));
        if (i < 0 || i >= n) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_IndexError, "node id out of range");
            return NULL;
        }
        PyObject *device = PyDict_GetItemWithError(stat, others);
        if (!device) {
            if (PyErr_Occurred()) return NULL;
            /* first_device(ids), and whether the answer holds for every node naming these ops */
            int found = 0, disjoint = 1;
            device = Py_None;
            for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(others); k++) {
                PyObject *id = PyDict_GetItemWithError(index, PyTuple_GET_ITEM(others, k));
                if (!id) {
                    if (PyErr_Occurred()) return NULL;
                    continue; /* no such op: skipped, and never colocated */
                }
                int c = PySet_Contains(colocated_ids, id);
                if (c < 0) return NULL;
                if (c) disjoint = 0;
                if (found) continue;
                long j = PyLong_AsLong(id);
                if (j < 0 || j >= n) {
                    if (!PyErr_Occurred()) PyErr_SetString(PyExc_IndexError, "node id out of range");
                    return NULL;
                }
                PyObject *dj = PyList_GET_ITEM(devices, j);
                if (!PyUnicode_Check(dj)) return PyLong_FromSsize_t(p);
                if (PyUnicode_GET_LENGTH(dj) == 0) continue;
                PyObject *canon = PyDict_GetItemWithError(recanonical, dj);
                if (!canon) {
                    if (PyErr_Occurred()) return NULL;
                    return PyLong_FromSsize_t(p);
                }
                device = canon;
                found = 1;
            }
            if (disjoint && PyDict_SetItem(stat, others, device) < 0) return NULL;
        }
        if (device == Py_None) continue;
        Py_INCREF(device);
        if (PyList_SetItem(devices, i, device) < 0) return NULL;
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(number_keys_doc,
"number_keys(ops, values) -> (numbers, count)\n\n"
"Number each distinct (ops[i], values[i]) pair in order of first occurrence: what\n"
"Placer._fact_keys computes (a dict per op, so no pair tuple is made per node). `numbers`:\n"
"bytes of native int64, one per node (the caller's numpy array, with no list to convert).");

static PyObject *number_keys(PyObject *self, PyObject *args)
{
    PyObject *ops, *values;
    if (!PyArg_ParseTuple(args, "O!O!", &PyList_Type, &ops, &PyList_Type, &values)) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(ops);
    if (PyList_GET_SIZE(values) != n) {
        PyErr_SetString(PyExc_ValueError, "ops and values differ in length");
        return NULL;
    }
    PyObject *by_op = PyDict_New(), *numbers = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(int64_t));
    PyObject *out = NULL;
    Py_ssize_t count = 0;
    if (!by_op || !numbers) goto done;
    int64_t *number = (int64_t *)PyBytes_AS_STRING(numbers);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *op = PyList_GET_ITEM(ops, i), *value = PyList_GET_ITEM(values, i);
        PyObject *ids = PyDict_GetItemWithError(by_op, op);
        if (!ids) {
            if (PyErr_Occurred() || !(ids = PyDict_New())) goto done;
            int rc = PyDict_SetItem(by_op, op, ids);
            Py_DECREF(ids); /* by_op holds it */
            if (rc < 0) goto done;
        }
        PyObject *id = PyDict_GetItemWithError(ids, value);
        if (id) {
            number[i] = PyLong_AsLongLong(id); /* one of ours: an int */
        } else {
            if (PyErr_Occurred() || !(id = PyLong_FromSsize_t(count))) goto done;
            int rc = PyDict_SetItem(ids, value, id);
            Py_DECREF(id);
            if (rc < 0) goto done;
            number[i] = count++;
        }
    }
    out = Py_BuildValue("(On)", numbers, count);
done:
    Py_XDECREF(by_op);
    Py_XDECREF(numbers);
    return out;
}

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
#define OP_BACK_EDGE 4 /* in back_edge_ops: NextIteration */
#define OP_CACHE_SIZE 256

/* The op strings of a graph are shared objects (a few dozen for a million nodes), so the set
 * lookups are made once per object, in a small table keyed by the object's address (the ops
 * list holds every key alive meanwhile). */
typedef struct {
    PyObject *op;
    int bits;
} op_slot;

/* The OP_* bits of `op` (an exact str), or -1 on error. */
static int op_bits(op_slot *cache, PyObject *op, PyObject *metadata_ops, PyObject *back_edge_ops,
                   PyObject *identity_op)
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
    int metadata = PySet_Contains(metadata_ops, op), back_edge = PySet_Contains(back_edge_ops, op);
    int identity = PyObject_RichCompareBool(op, identity_op, Py_EQ);
    if (metadata < 0 || back_edge < 0 || identity < 0) return -1;
    int bits = (metadata ? OP_METADATA : 0) | (identity ? OP_IDENTITY : 0) | (back_edge ? OP_BACK_EDGE : 0);
    if (free_slot) { /* a full neighbourhood only costs the lookups again */
        free_slot->op = op;
        free_slot->bits = bits;
    }
    return bits;
}

PyDoc_STRVAR(follow_inputs_doc,
"follow_inputs(ops, requested, in_start, in_src, is_generator, metadata_ops, back_edge_ops, identity_op,\n"
"              why_metadata, why_identity) -> None | (follow, consumers, plain)\n\n"
"What Placer._follow_and_consumers computes before the assignment loop, in one pass over the\n"
"nodes and one over the edges: `follow` (per node, the reason code if it follows its input,\n"
"else -1), `consumers` (generators then candidate Identity nodes -> their consumers, one per\n"
"edge, in edge order) and `plain` (bytes, 1 per node that is no generator, follower or\n"
"back-edge source). None, having changed nothing, at anything but str ops and requests, bool\n"
"generator flags and consistent int32 input arrays: the Python code does it all.");

static PyObject *follow_inputs(PyObject *self, PyObject *args)
{
    PyObject *ops, *requested, *in_start_obj, *in_src_obj, *is_generator, *metadata_ops, *back_edge_ops;
    PyObject *identity_op, *why_metadata, *why_identity;
    PyObject *result = NULL, *follow = NULL, *consumers = NULL, *plain = NULL, *not_following = NULL;
    PyObject **lists = NULL;    /* per wanted node: its consumers list */
    unsigned char *kind = NULL; /* per node: KIND_* bits */
    int *count = NULL;          /* per wanted node: its consumers (counted, then filled) */
    Py_ssize_t n = 0;
    if (!PyArg_ParseTuple(args, "O!O!OOO!O!O!UO!O!", &PyList_Type, &ops, &PyList_Type, &requested, &in_start_obj,
                          &in_src_obj, &PyList_Type, &is_generator, &PyFrozenSet_Type, &metadata_ops,
                          &PyFrozenSet_Type, &back_edge_ops, &identity_op, &PyLong_Type, &why_metadata,
                          &PyLong_Type, &why_identity))
        return NULL;
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
    enum { KIND_GENERATOR = 1, KIND_IDENTITY = 2, KIND_METADATA = 4, KIND_BACK_EDGE = 8 };
    kind = PyMem_Calloc(n + 1, 1);
    count = PyMem_Calloc(n + 1, sizeof(int));
    lists = PyMem_Calloc(n + 1, sizeof(PyObject *));
    if (!kind || !count || !lists) {
        PyErr_NoMemory();
        goto done;
    }
    /* Per node: generator (is_generator), candidate Identity (_identity_candidates: no
     * requested device and exactly one input, data or control), metadata op, back-edge source. */
    op_slot cache[OP_CACHE_SIZE] = {{0}};
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *op = PyList_GET_ITEM(ops, i), *request = PyList_GET_ITEM(requested, i);
        PyObject *gen = PyList_GET_ITEM(is_generator, i);
        if (!PyUnicode_CheckExact(op) || !PyUnicode_CheckExact(request) || (gen != Py_True && gen != Py_False))
            goto decline;
        int bits = op_bits(cache, op, metadata_ops, back_edge_ops, identity_op);
        if (bits < 0) goto done;
        kind[i] = (gen == Py_True ? KIND_GENERATOR : 0) | (bits & OP_METADATA ? KIND_METADATA : 0) |
                  (bits & OP_BACK_EDGE ? KIND_BACK_EDGE : 0);
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
    if (!(follow = PyList_New(n)) || !(plain = PyBytes_FromStringAndSize(NULL, n)) ||
        !(not_following = PyLong_FromLong(-1)))
        goto done;
    char *plain_bytes = PyBytes_AS_STRING(plain);
    long metadata_code = PyLong_AsLong(why_metadata), identity_code = PyLong_AsLong(why_identity);
    if (PyErr_Occurred()) goto done;
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
        /* plain: no generator, no follower (a negative code), no back-edge source */
        long code = why == why_metadata ? metadata_code : why == why_identity ? identity_code : -1;
        plain_bytes[i] = !(kind[i] & (KIND_GENERATOR | KIND_BACK_EDGE)) && code < 0;
    }
    result = PyTuple_Pack(3, follow, consumers, plain);
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
    Py_XDECREF(plain);
    Py_XDECREF(not_following);
    if (start_buf.obj) PyBuffer_Release(&start_buf);
    if (src_buf.obj) PyBuffer_Release(&src_buf);
    return result;
}

PyDoc_STRVAR(class_keys_doc,
"class_keys(colocated_names, colocated_name_ids, order, n) -> None | (keys_of, visit)\n\n"
"What Placer._class_keys computes for the union loop of _colocate_class_groups: per node of n,\n"
"its loc:@ names (colocated_names, a tuple) followed by its own name when colocated_name_ids\n"
"has it, and the nodes with some, in `order`. None, having changed nothing, at anything but\n"
"tuples of names and node ids in range: the Python code does it.");

static PyObject *class_keys(PyObject *self, PyObject *args)
{
    PyObject *colocated_names, *name_ids, *order, *keys_of = NULL, *visit = NULL, *result = NULL;
    Py_ssize_t n;
    if (!PyArg_ParseTuple(args, "O!O!O!n", &PyDict_Type, &colocated_names, &PyDict_Type, &name_ids, &PyList_Type,
                          &order, &n))
        return NULL;
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

/* An open-addressing table from a 64-bit key to its number (first come, first numbered). */
typedef struct {
    uint64_t *keys;
    Py_ssize_t *numbers; /* -1: empty slot */
    size_t mask;
    Py_ssize_t count;
} pair_table;

static int pair_table_init(pair_table *t, size_t capacity)
{
    t->keys = PyMem_Malloc(capacity * sizeof(uint64_t));
    t->numbers = PyMem_Malloc(capacity * sizeof(Py_ssize_t));
    if (!t->keys || !t->numbers) {
        PyMem_Free(t->keys);
        PyMem_Free(t->numbers);
        t->keys = NULL;
        t->numbers = NULL;
        PyErr_NoMemory();
        return -1;
    }
    for (size_t j = 0; j < capacity; j++) t->numbers[j] = -1;
    t->mask = capacity - 1;
    return 0;
}

static void pair_table_free(pair_table *t)
{
    PyMem_Free(t->keys);
    PyMem_Free(t->numbers);
}

/* The slot of `key`: where it is, or the empty slot where it goes. */
static size_t pair_table_slot(const pair_table *t, uint64_t key)
{
    size_t j = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 20) & t->mask;
    while (t->numbers[j] >= 0 && t->keys[j] != key) j = (j + 1) & t->mask;
    return j;
}

/* The number of `key`, giving it the next one if new; -1 on error (no memory). */
static Py_ssize_t pair_table_number(pair_table *t, uint64_t key)
{
    size_t j = pair_table_slot(t, key);
    if (t->numbers[j] >= 0) return t->numbers[j];
    if ((size_t)(t->count + 1) * 2 > t->mask + 1) { /* keep it half empty: grow, then find the slot again */
        pair_table bigger = {0};
        if (pair_table_init(&bigger, (t->mask + 1) * 2) < 0) return -1;
        for (size_t k = 0; k <= t->mask; k++) {
            if (t->numbers[k] < 0) continue;
            size_t m = pair_table_slot(&bigger, t->keys[k]);
            bigger.keys[m] = t->keys[k];
            bigger.numbers[m] = t->numbers[k];
        }
        bigger.count = t->count;
        pair_table_free(t);
        *t = bigger;
        j = pair_table_slot(t, key);
    }
    t->keys[j] = key;
    t->numbers[j] = t->count;
    return t->count++;
}

PyDoc_STRVAR(request_pairs_doc,
"request_pairs(requested, requested_ids, node_types) -> None | (numbers, firsts)\n\n"
"What _request_pairs computes for Placer._init_members: number each node's distinct\n"
"(requested_ids[requested[i]], node_types[i]) pair in order of first occurrence; `numbers`:\n"
"bytes of native int64, one per node; `firsts`: the first node of each number. node_types: a\n"
"buffer of native int64. None, having changed nothing, at anything but str requests whose ids\n"
"are ints in [0, 2**31): the Python code does it.");

static PyObject *request_pairs(PyObject *self, PyObject *args)
{
    PyObject *requested, *requested_ids, *types_obj, *numbers = NULL, *firsts = NULL, *result = NULL;
    if (!PyArg_ParseTuple(args, "O!O!O", &PyList_Type, &requested, &PyDict_Type, &requested_ids, &types_obj))
        return NULL;
    Py_buffer types_buf = {0};
    pair_table table = {0};
    int ok = int_buffer(types_obj, &types_buf, sizeof(int64_t), "lq");
    if (ok < 0) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(requested);
    if (!ok || types_buf.len != n * (Py_ssize_t)sizeof(int64_t)) goto decline;
    const int64_t *types = types_buf.buf;
    if (pair_table_init(&table, 64) < 0) goto done;
    if (!(numbers = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(int64_t))) || !(firsts = PyList_New(0)))
        goto done;
    int64_t *number = (int64_t *)PyBytes_AS_STRING(numbers);
    PyObject *last = NULL; /* requests repeat in runs: the last one looked up, and its id */
    long last_id = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *request = PyList_GET_ITEM(requested, i);
        if (request != last) {
            if (!PyUnicode_CheckExact(request)) goto decline;
            PyObject *id = PyDict_GetItemWithError(requested_ids, request);
            if (!id) {
                if (PyErr_Occurred()) goto done;
                goto decline;
            }
            last_id = PyLong_CheckExact(id) ? PyLong_AsLong(id) : -1;
            if (last_id == -1 && PyErr_Occurred()) PyErr_Clear(); /* too large: declined below */
            if (last_id < 0 || last_id > INT32_MAX) goto decline;
            last = request;
        }
        if (types[i] < 0 || types[i] > INT32_MAX) goto decline;
        Py_ssize_t k = pair_table_number(&table, ((uint64_t)last_id << 32) | (uint64_t)types[i]);
        if (k < 0) goto done;
        if (k == PyList_GET_SIZE(firsts)) { /* a new pair: i is its first node */
            PyObject *node = PyLong_FromSsize_t(i);
            if (!node) goto done;
            int rc = PyList_Append(firsts, node);
            Py_DECREF(node);
            if (rc < 0) goto done;
        }
        number[i] = k;
    }
    result = PyTuple_Pack(2, numbers, firsts);
    goto done;
decline:
    result = Py_None;
    Py_INCREF(result);
done:
    pair_table_free(&table);
    Py_XDECREF(numbers);
    Py_XDECREF(firsts);
    if (types_buf.obj) PyBuffer_Release(&types_buf);
    return result;
}

static PyMethodDef methods[] = {
    {"union_by_keys", union_by_keys, METH_VARARGS, union_by_keys_doc},
    {"union_ref_edges", union_ref_edges, METH_VARARGS, union_ref_edges_doc},
    {"assign_nodes", assign_nodes, METH_VARARGS, assign_nodes_doc},
    {"number_keys", number_keys, METH_VARARGS, number_keys_doc},
    {"follow_inputs", follow_inputs, METH_VARARGS, follow_inputs_doc},
    {"class_keys", class_keys, METH_VARARGS, class_keys_doc},
    {"request_pairs", request_pairs, METH_VARARGS, request_pairs_doc},
    {"colocated_others", colocated_others, METH_VARARGS, colocated_others_doc},
    {"apply_colocated_devices", apply_colocated_devices, METH_VARARGS, apply_colocated_devices_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "placeviz.placement._placer_kernels",
    "The placer's per-node loops in C (see placeviz/placement/placer.py, the reference).", -1, methods,
};

PyMODINIT_FUNC PyInit__placer_kernels(void)
{
    return PyModule_Create(&module);
}
