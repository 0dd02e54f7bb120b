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
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

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

/* The union of _colocate when the merged state is cached: state[new] = merged, parent[old] = new,
 * rank bump. xr, yr: the roots (x's first, as the Python code orders them). Returns 1 done,
 * 0 not cached (nothing changed), -1 error. */
static int union_cached(PyObject *parent, PyObject *rank, PyObject *state, PyObject *merged, long xr, long yr)
{
    long rx = get_long(rank, xr), ry = get_long(rank, yr);
    long new_root = rx < ry ? yr : xr, old_root = rx < ry ? xr : yr;
    PyObject *m = cached_merge(merged, get_long(state, new_root), get_long(state, old_root));
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
            int done = union_cached(parent, rank, state, merged, xr, yr);
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
            for (int f = 0; f < 3 && !stop; f++) { /* assigned, resource, requested: all compatible */
                int c = cached_compatible(compatible, PyTuple_GET_ITEM(s, f), PyTuple_GET_ITEM(d, f));
                if (c == -1) goto done;
                if (c != 1) stop = 1;
            }
            if (!stop && sr != dr) {
                int u = union_cached(parent, rank, state, merged, sr, dr);
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
"Placer._fact_keys computes (a dict per op, so no pair tuple is made per node).");

static PyObject *number_keys(PyObject *self, PyObject *args)
{
    PyObject *ops, *values;
    if (!PyArg_ParseTuple(args, "O!O!", &PyList_Type, &ops, &PyList_Type, &values)) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(ops);
    if (PyList_GET_SIZE(values) != n) {
        PyErr_SetString(PyExc_ValueError, "ops and values differ in length");
        return NULL;
    }
    PyObject *by_op = PyDict_New(), *numbers = PyList_New(n), *out = NULL;
    Py_ssize_t count = 0;
    if (!by_op || !numbers) goto done;
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
            Py_INCREF(id);
        } else {
            if (PyErr_Occurred() || !(id = PyLong_FromSsize_t(count++))) goto done;
            if (PyDict_SetItem(ids, value, id) < 0) {
                Py_DECREF(id);
                goto done;
            }
        }
        PyList_SET_ITEM(numbers, i, id);
    }
    out = Py_BuildValue("(On)", numbers, count);
done:
    Py_XDECREF(by_op);
    Py_XDECREF(numbers);
    return out;
}

static PyMethodDef methods[] = {
    {"union_by_keys", union_by_keys, METH_VARARGS, union_by_keys_doc},
    {"union_ref_edges", union_ref_edges, METH_VARARGS, union_ref_edges_doc},
    {"assign_nodes", assign_nodes, METH_VARARGS, assign_nodes_doc},
    {"number_keys", number_keys, METH_VARARGS, number_keys_doc},
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
