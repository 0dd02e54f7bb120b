/*
 * placeviz.placement._setter_kernels: the setter replay's per-node loops, in C.
 *
 * Why this exists: after three rounds of pure-Python work the setter (placeviz/placement/
 * setter.py) is a handful of loops that touch each node once from Python, 0.3-3 us per node,
 * which is most of its time on big graphs. Each function here is a direct transliteration of one
 * of those loops. The Python loop stays the reference and the fallback: a function here handles
 * only the plain case and hands everything else back to it (a node it did not settle, the
 * position where it stopped), and it never runs Python code of its own (no callbacks: only
 * lookups in dicts and sets keyed by str, int and tuples of those). Results are equal to the
 * Python path's, node for node (tests/test_setter_kernels.py runs both).
 *
 * Every index read from a list or array is bounds-checked; anything out of range or of an
 * unexpected type is "not the plain case", never an error.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* RULE_* of setter.py (the values are part of SetterResult.rule; the tests compare both paths). */
enum { RULE_WORKER = 0, RULE_PS = 1, RULE_PS_PINNED = 2, RULE_COLOCATED = 3, RULE_DEVICE_NONE = 4, RULE_KEPT = 5 };

#define CONTROL (-1)   /* graph.CONTROL: in_slot of a ^control input */
#define DEVICE_NONE (-1) /* scopes.DEVICE_NONE: colocation target "built under device(None)" */

/* Per-node flags of replay() (a bytes object the caller builds from two small sets). */
#define FLAG_DEVICE_NONE 1 /* in scopes.device_none_nodes */
#define FLAG_HINT 2        /* in scopes.device_scope_hints: handled by Python */

/* ------------------------------------------------------------------ helpers */

/* An array('i') (or any C-contiguous buffer of 4-byte "i" items), read-only. Anything else is
 * not the plain case: int_array_get then returns 0 with no error set (callers decline). */
typedef struct {
    Py_buffer view;
    const int32_t *data;
    Py_ssize_t len;
    int held;
} IntArray;

static int int_array_get(PyObject *obj, IntArray *a)
{
    a->held = 0;
    if (PyObject_GetBuffer(obj, &a->view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) {
        PyErr_Clear();
        return 0;
    }
    a->held = 1;
    if (a->view.itemsize != 4 || a->view.format == NULL || strcmp(a->view.format, "i") != 0)
        return 0;
    a->data = (const int32_t *)a->view.buf;
    a->len = a->view.len / 4;
    return 1;
}

static void int_array_release(IntArray *a)
{
    if (a->held)
        PyBuffer_Release(&a->view);
    a->held = 0;
}

/* list[i] = value (a new reference is taken). The list is exact and i is in range. */
static void list_put(PyObject *list, Py_ssize_t i, PyObject *value)
{
    PyObject *old = PyList_GET_ITEM(list, i);
    Py_INCREF(value);
    PyList_SET_ITEM(list, i, value);
    Py_XDECREF(old);
}

/* A small exact int into a C long; 0 if it is not one (or does not fit). */
static int small_int(PyObject *obj, long *out)
{
    int overflow;
    if (!PyLong_CheckExact(obj))
        return 0;
    *out = PyLong_AsLongAndOverflow(obj, &overflow);
    return !overflow && !(*out == -1 && PyErr_Occurred());
}

/* ------------------------------------------------------------------ colocation_targets */

PyDoc_STRVAR(colocation_targets_doc,
"colocation_targets(colocation, colocated_names, names, ops, index, targets, resolved, device_none)\n"
"\n"
"The loop of setter._colocation_targets over ``colocation.items()``: writes ``targets[i]`` for\n"
"every node it settles and fills the per-tuple cache ``resolved`` as the Python loop does.\n"
"Returns the list of node ids it left to the Python loop (Switch/RefSwitch ops, whose test\n"
"reads another node's colocation groups, and anything not of the plain types), in order.");

static PyObject *colocation_targets(PyObject *self, PyObject *args)
{
    PyObject *colocation, *colocated_names, *names, *ops, *index, *targets, *resolved, *device_none;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!O!O!O", &PyDict_Type, &colocation, &PyDict_Type, &colocated_names,
                          &PyList_Type, &names, &PyList_Type, &ops, &PyDict_Type, &index, &PyList_Type, &targets,
                          &PyDict_Type, &resolved, &device_none))
        return NULL;
    PyObject *left = PyList_New(0);
    PyObject *empty = PyTuple_New(0);
    if (left == NULL || empty == NULL)
        goto error;
    Py_ssize_t pos = 0;
    PyObject *key, *groups, *last_located = NULL, *last_entries = NULL;
    while (PyDict_Next(colocation, &pos, &key, &groups)) {
        long i;
        /* Types and ranges the Python loop assumes; anything else is left to it. */
        if (!small_int(key, &i) || i < 0 || i >= PyList_GET_SIZE(names) || i >= PyList_GET_SIZE(ops) ||
            i >= PyList_GET_SIZE(targets))
            goto defer;
        PyObject *located = PyDict_GetItemWithError(colocated_names, key);  /* .get(i, ()) */
        if (located == NULL) {
            if (PyErr_Occurred())
                goto error;
            located = empty;
        }
        PyObject *name = PyList_GET_ITEM(names, i);
        PyObject *op = PyList_GET_ITEM(ops, i);
        if (!PyTuple_CheckExact(located) || !PyUnicode_CheckExact(name) || !PyUnicode_CheckExact(op))
            goto defer;
        int own = PySequence_Contains(located, name);  /* loc:@<own name>: not colocated */
        if (own < 0)
            goto error;
        if (own)
            continue;
        /* A Switch may take its data input instead: that test reads another node's groups. */
        if (PyUnicode_CompareWithASCIIString(op, "Switch") == 0 ||
            PyUnicode_CompareWithASCIIString(op, "RefSwitch") == 0)
            goto defer;
        /* Nodes colocated with the same ops share one tuple (graph.colocated_names), and they
         * often come in a row: the last tuple's entries are reused without hashing it again. */
        PyObject *entries = located == last_located ? last_entries : PyDict_GetItemWithError(resolved, located);
        if (entries == NULL) {
            if (PyErr_Occurred())
                goto error;
            /* [(t + "/Initializer/", index.get(t)) for t in located] */
            Py_ssize_t count = PyTuple_GET_SIZE(located);
            for (Py_ssize_t k = 0; k < count; k++)
                if (!PyUnicode_CheckExact(PyTuple_GET_ITEM(located, k)))
                    goto defer;
            PyObject *built = PyList_New(count);
            if (built == NULL)
                goto error;
            for (Py_ssize_t k = 0; k < count; k++) {
                PyObject *t = PyTuple_GET_ITEM(located, k);
                PyObject *target = PyDict_GetItemWithError(index, t);
                if (target == NULL && PyErr_Occurred()) {
                    Py_DECREF(built);
                    goto error;
                }
                PyObject *prefix = PyUnicode_FromFormat("%U/Initializer/", t);
                PyObject *entry = prefix ? PyTuple_Pack(2, prefix, target ? target : Py_None) : NULL;
                Py_XDECREF(prefix);
                if (entry == NULL) {
                    Py_DECREF(built);
                    goto error;
                }
                PyList_SET_ITEM(built, k, entry);
            }
            int failed = PyDict_SetItem(resolved, located, built);
            Py_DECREF(built);  /* the dict holds it */
            if (failed)
                goto error;
            entries = PyDict_GetItemWithError(resolved, located);
            if (entries == NULL)
                goto error_if_set;
        }
        if (!PyList_CheckExact(entries))
            goto defer;
        last_located = located, last_entries = entries;  /* both alive: held by the dicts */
        Py_ssize_t count = PyList_GET_SIZE(entries);
        for (Py_ssize_t k = 0; k < count; k++) {
            PyObject *entry = PyList_GET_ITEM(entries, k);
            if (!PyTuple_CheckExact(entry) || PyTuple_GET_SIZE(entry) != 2 ||
                !PyUnicode_CheckExact(PyTuple_GET_ITEM(entry, 0)))
                goto defer;  /* nothing was written for this node yet */
        }
        for (Py_ssize_t k = 0; k < count; k++) {
            PyObject *entry = PyList_GET_ITEM(entries, k);
            Py_ssize_t match = PyUnicode_Tailmatch(name, PyTuple_GET_ITEM(entry, 0), 0, PY_SSIZE_T_MAX, -1);
            if (match < 0)
                goto error;
            if (match) {  /* name.startswith(<target>/Initializer/): built under device(None) */
                list_put(targets, i, device_none);
                break;
            }
            PyObject *target = PyTuple_GET_ITEM(entry, 1);
            if (target != Py_None) {
                list_put(targets, i, target);
                break;
            }
        }
        continue;
    defer:
        if (PyList_Append(left, key) < 0)
            goto error;
    }
    Py_DECREF(empty);
    return left;
error_if_set:
    if (!PyErr_Occurred())
        PyErr_SetString(PyExc_RuntimeError, "colocation_targets: cache entry vanished");
error:
    Py_XDECREF(left);
    Py_XDECREF(empty);
    return NULL;
}

/* ------------------------------------------------------------------ replay */

/* The replay's shared state: the arguments of one replay() call. */
typedef struct {
    Py_ssize_t n;
    PyObject *own_devices, *targets, *ops, *ps_ops;
    const uint8_t *flags;
    IntArray in_start, in_slot;
    int graph_as_default, ps_present, merge_devices;
    long rr_next, rr_num;
    PyObject *calls_for_own, *ps_cache, *worker_cache;
    PyObject *gen_usable, *gen_memo, *gen_values;
    PyObject *devices, *rule, *reference, *colocated, *strategy_calls;
    PyObject *empty_string;
} Replay;

enum { STOP = -1, FAIL = -2 };  /* besides 0/1: hand the node to Python / a Python error is set */

/* _resource_generator_test's cached path for node i (no data input at its first slot):
 * 1/0, STOP when Python must answer (no cache, cache miss, odd types), FAIL on error. */
static int generator_test(Replay *r, Py_ssize_t i, int32_t lo, int32_t hi)
{
    if (r->gen_usable == Py_None)
        return STOP;
    for (int32_t k = lo; k < hi; k++)  /* any data input: False (bounds checked by the caller) */
        if (r->in_slot.data[k] != CONTROL)
            return 0;
    PyObject *op = PyList_GET_ITEM(r->ops, i);
    PyObject *ok = PyDict_GetItemWithError(r->gen_usable, op);
    if (ok == NULL)
        return PyErr_Occurred() ? FAIL : STOP;
    if (ok != Py_True)  /* not usable: Python asks the op table for this node */
        return STOP;
    PyObject *key = PyTuple_Pack(2, op, PyList_GET_ITEM(r->gen_values, i));
    if (key == NULL)
        return FAIL;
    PyObject *out = PyDict_GetItemWithError(r->gen_memo, key);
    Py_DECREF(key);
    if (out == NULL)
        return PyErr_Occurred() ? FAIL : STOP;
    if (out == Py_None)
        return 0;
    if (!PyTuple_CheckExact(out))
        return STOP;
    if (PyTuple_GET_SIZE(out) != 1)
        return 0;
    long dtype;
    if (!small_int(PyTuple_GET_ITEM(out, 0), &dtype))
        return STOP;
    return dtype > 100 || dtype == 20;  /* a ref type, or DT_RESOURCE */
}

/* ``own`` in calls_for_own: whether a ps op with this own device calls the strategy (1/0),
 * STOP if not known yet, FAIL on error. */
static int calls_strategy(Replay *r, PyObject *own)
{
    PyObject *calls = PyDict_GetItemWithError(r->calls_for_own, own);
    if (calls == NULL)
        return PyErr_Occurred() ? FAIL : STOP;
    if (calls == Py_True)
        return 1;
    return calls == Py_False ? 0 : STOP;
}

/* rule[i] = value */
static int set_rule(Replay *r, Py_ssize_t i, long value)
{
    PyObject *v = PyLong_FromLong(value);
    if (v == NULL)
        return -1;
    list_put(r->rule, i, v);
    Py_DECREF(v);
    return 0;
}

static int append_int(PyObject *list, Py_ssize_t i)
{
    PyObject *v = PyLong_FromSsize_t(i);
    if (v == NULL)
        return -1;
    int failed = PyList_Append(list, v);
    Py_DECREF(v);
    return failed;
}

/* One node of _run_setter's loop: 0 done, STOP (nothing written) or FAIL. */
static int replay_node(Replay *r, Py_ssize_t i)
{
    PyObject *own = PyList_GET_ITEM(r->own_devices, i);
    PyObject *target_obj = PyList_GET_ITEM(r->targets, i);
    int has_target = target_obj != Py_None;  /* built under colocate_with (or device(None)) */
    long target = 0;
    if (has_target && !small_int(target_obj, &target))
        return STOP;
    if ((has_target && target == DEVICE_NONE) || (r->flags[i] & FLAG_DEVICE_NONE)) {
        list_put(r->devices, i, r->empty_string);
        return set_rule(r, i, RULE_DEVICE_NONE) < 0 ? FAIL : 0;
    }
    if (has_target) {
        /* Built under colocate_with: the target's device; a resource constructor (in init_scope)
         * that is a ps op may still call the strategy. */
        if (target < 0 || target >= r->n)
            return STOP;  /* Python indexes from the end or raises */
        int32_t lo = r->in_start.data[i], hi = r->in_start.data[i + 1];
        if (lo < 0 || hi < lo || hi > r->in_slot.len)
            return STOP;
        int has_data_input = hi > lo && r->in_slot.data[lo] != CONTROL;
        int generator = 0;
        if (!has_data_input) {
            generator = generator_test(r, i, lo, hi);
            if (generator < 0)
                return generator;
        }
        int is_ps = PySet_Contains(r->ps_ops, PyList_GET_ITEM(r->ops, i));
        if (is_ps < 0)
            return FAIL;
        int advances = 0;
        if (generator) {
            advances = r->graph_as_default;
            if (!advances) {
                advances = PySet_Contains(r->ps_ops, PyList_GET_ITEM(r->ops, target));
                if (advances < 0)
                    return FAIL;
            }
        }
        int call = 0;
        if (is_ps && advances && r->ps_present) {
            call = calls_strategy(r, own);
            if (call < 0)
                return call;
            if (call && r->rr_num <= 0)
                return STOP;  /* not round-robin: Python calls the strategy */
        }
        PyObject *target_device = PyList_GET_ITEM(r->devices, target);
        /* Nothing written above: from here on the node is settled. */
        if (call) {
            if (append_int(r->strategy_calls, i) < 0)
                return FAIL;
            r->rr_next = (r->rr_next + 1) % r->rr_num;
        }
        if (target_device != Py_None) {
            int truthy = PyObject_IsTrue(target_device);
            if (truthy < 0)
                return FAIL;
            list_put(r->devices, i, truthy ? target_device : own);
        } else {
            PyObject *pair = PyTuple_New(2);
            PyObject *node = PyLong_FromSsize_t(i);
            if (pair == NULL || node == NULL) {
                Py_XDECREF(pair);
                Py_XDECREF(node);
                return FAIL;
            }
            PyTuple_SET_ITEM(pair, 0, node);
            Py_INCREF(target_obj);
            PyTuple_SET_ITEM(pair, 1, target_obj);
            int failed = PyList_Append(r->colocated, pair);
            Py_DECREF(pair);
            if (failed)
                return FAIL;
        }
        if (set_rule(r, i, RULE_COLOCATED) < 0)
            return FAIL;
        PyObject *node = PyLong_FromSsize_t(i);
        if (node == NULL)
            return FAIL;
        int failed = PyDict_SetItem(r->reference, node, target_obj);
        Py_DECREF(node);
        return failed ? FAIL : 0;
    }
    if (r->flags[i] & FLAG_HINT)
        return STOP;  /* built under device(<another node's device>): Python merges the scope */
    int own_set = PyObject_IsTrue(own);
    if (own_set < 0)
        return FAIL;
    if (!r->merge_devices && own_set) {
        list_put(r->devices, i, own);
        if (set_rule(r, i, RULE_KEPT) < 0)
            return FAIL;
        return 0;
    }
    if (r->ps_present) {
        int is_ps = PySet_Contains(r->ps_ops, PyList_GET_ITEM(r->ops, i));
        if (is_ps < 0)
            return FAIL;
        if (is_ps) {
            int call = calls_strategy(r, own);
            if (call < 0)
                return call;
            if (call && r->rr_num <= 0)
                return STOP;
            /* ps_cache[(task, own)], task None when the op keeps its own job */
            PyObject *task = call ? PyLong_FromLong(r->rr_next) : (Py_INCREF(Py_None), Py_None);
            PyObject *key = task ? PyTuple_Pack(2, task, own) : NULL;
            Py_XDECREF(task);
            if (key == NULL)
                return FAIL;
            PyObject *device = PyDict_GetItemWithError(r->ps_cache, key);
            Py_DECREF(key);
            if (device == NULL)
                return PyErr_Occurred() ? FAIL : STOP;
            if (call) {
                if (append_int(r->strategy_calls, i) < 0)
                    return FAIL;
                r->rr_next = (r->rr_next + 1) % r->rr_num;
            }
            if (set_rule(r, i, call ? RULE_PS : RULE_PS_PINNED) < 0)
                return FAIL;
            list_put(r->devices, i, device);
            return 0;
        }
    }
    PyObject *cached = PyDict_GetItemWithError(r->worker_cache, own);
    if (cached == NULL)
        return PyErr_Occurred() ? FAIL : STOP;
    list_put(r->devices, i, cached);  /* rule stays RULE_WORKER */
    return 0;
}

PyDoc_STRVAR(replay_doc,
"replay(start, n, own_devices, targets, flags, in_start, in_slot, ops, ps_ops, switches, rr_next, rr_num,\n"
"       calls_for_own, ps_cache, worker_cache, gen_usable, gen_memo, gen_values,\n"
"       devices, rule, reference, colocated, strategy_calls) -> (stop, rr_next)\n"
"\n"
"The loop of setter._run_setter from node ``start``: settles nodes in order, writing what the\n"
"Python loop writes, and returns at the first node it leaves to Python (or n) with the\n"
"round-robin counter. ``switches``: 1 graph_as_default, 2 ps_spec is not None, 4 merge_devices.\n"
"``rr_num`` 0: the strategy is not round-robin (every strategy call is left to Python).\n"
"``gen_usable`` None: no cached resource-constructor test (those nodes are left to Python).");

static PyObject *replay(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 23) {
        PyErr_SetString(PyExc_TypeError, "replay() takes 23 arguments");
        return NULL;
    }
    Replay r;
    memset(&r, 0, sizeof r);
    Py_ssize_t start = PyLong_AsSsize_t(args[0]);
    r.n = PyLong_AsSsize_t(args[1]);
    long switches = PyLong_AsLong(args[9]);
    r.rr_next = PyLong_AsLong(args[10]);
    r.rr_num = PyLong_AsLong(args[11]);
    if (PyErr_Occurred())
        return NULL;
    r.own_devices = args[2], r.targets = args[3], r.ops = args[7], r.ps_ops = args[8];
    r.graph_as_default = (switches & 1) != 0, r.ps_present = (switches & 2) != 0;
    r.merge_devices = (switches & 4) != 0;
    r.calls_for_own = args[12], r.ps_cache = args[13], r.worker_cache = args[14];
    r.gen_usable = args[15], r.gen_memo = args[16], r.gen_values = args[17];
    r.devices = args[18], r.rule = args[19], r.reference = args[20], r.colocated = args[21];
    r.strategy_calls = args[22];
    PyObject *flags = args[4];
    if (!PyList_CheckExact(r.own_devices) || !PyList_CheckExact(r.targets) || !PyList_CheckExact(r.ops) ||
        !PyAnySet_Check(r.ps_ops) || !PyBytes_CheckExact(flags) || !PyDict_CheckExact(r.calls_for_own) ||
        !PyDict_CheckExact(r.ps_cache) || !PyDict_CheckExact(r.worker_cache) ||
        !(r.gen_usable == Py_None || (PyDict_CheckExact(r.gen_usable) && PyDict_CheckExact(r.gen_memo) &&
                                      PyList_CheckExact(r.gen_values))) ||
        !PyList_CheckExact(r.devices) || !PyList_CheckExact(r.rule) || !PyDict_CheckExact(r.reference) ||
        !PyList_CheckExact(r.colocated) || !PyList_CheckExact(r.strategy_calls)) {
        PyErr_SetString(PyExc_TypeError, "replay(): unexpected argument types");
        return NULL;
    }
    if (r.rr_num > 0 && (r.rr_next < 0 || r.rr_next >= r.rr_num)) {
        PyErr_SetString(PyExc_ValueError, "replay(): round-robin counter out of range");
        return NULL;
    }
    r.flags = (const uint8_t *)PyBytes_AS_STRING(flags);
    int arrays = int_array_get(args[5], &r.in_start) && int_array_get(args[6], &r.in_slot);
    r.empty_string = PyUnicode_New(0, 0);
    if (r.empty_string == NULL)
        goto fail;
    Py_ssize_t i = start < 0 ? 0 : start;
    /* Every per-node list must cover n nodes (in_start n + 1) and the arrays be array('i'); if
     * not (never with a Graph's own arrays), each call leaves its first node to Python. */
    if (!arrays || PyList_GET_SIZE(r.own_devices) < r.n || PyList_GET_SIZE(r.targets) < r.n ||
        PyList_GET_SIZE(r.ops) < r.n || PyBytes_GET_SIZE(flags) < r.n || r.in_start.len < r.n + 1 ||
        PyList_GET_SIZE(r.devices) < r.n || PyList_GET_SIZE(r.rule) < r.n ||
        (r.gen_usable != Py_None && PyList_GET_SIZE(r.gen_values) < r.n))
        i = start;
    else {
        for (; i < r.n; i++) {
            int done = replay_node(&r, i);
            if (done == FAIL)
                goto fail;
            if (done == STOP)
                break;
        }
    }
    Py_DECREF(r.empty_string);
    int_array_release(&r.in_start);
    int_array_release(&r.in_slot);
    return Py_BuildValue("(nl)", i, r.rr_next);
fail:
    Py_XDECREF(r.empty_string);
    int_array_release(&r.in_start);
    int_array_release(&r.in_slot);
    return NULL;
}

/* ------------------------------------------------------------------ group_noops */

/* _control_only_noop: a NoOp with inputs, all of them control inputs. -1: bad bounds. */
static int control_only_noop(PyObject *ops, const IntArray *in_start, const IntArray *in_slot, Py_ssize_t i)
{
    PyObject *op = PyList_GET_ITEM(ops, i);
    if (!PyUnicode_CheckExact(op) || PyUnicode_CompareWithASCIIString(op, "NoOp") != 0)
        return 0;
    int32_t lo = in_start->data[i], hi = in_start->data[i + 1];
    if (lo < 0 || hi < lo || hi > in_slot->len)
        return -1;
    if (hi == lo)
        return 0;
    for (int32_t k = lo; k < hi; k++)
        if (in_slot->data[k] != CONTROL)
            return 0;
    return 1;
}

/* ``name`` is ``prefix`` or ``prefix_<digits>`` (str.isdigit: at least one digit character). */
static int child_name_matches(PyObject *name, PyObject *prefix)
{
    Py_ssize_t len = PyUnicode_GET_LENGTH(name), plen = PyUnicode_GET_LENGTH(prefix);
    if (len < plen || PyUnicode_Tailmatch(name, prefix, 0, plen, -1) != 1)
        return 0;
    if (len == plen)
        return 1;
    int kind = PyUnicode_KIND(name);
    const void *data = PyUnicode_DATA(name);
    if (PyUnicode_READ(kind, data, plen) != '_' || len == plen + 1)
        return 0;
    for (Py_ssize_t k = plen + 1; k < len; k++)
        if (!Py_UNICODE_ISDIGIT(PyUnicode_READ(kind, data, k)))
            return 0;
    return 1;
}

PyDoc_STRVAR(group_noops_doc,
"group_noops(names, ops, in_start, in_src, in_slot) -> (roots, candidates) or None\n"
"\n"
"The first loop of scopes.group_roots: every control-only NoOp as (id, its inputs, the inputs\n"
"that may be its per-device NoOps) and the union of those sets. None when an array is out of\n"
"range or a name is not a str (the Python loop then runs).");

static PyObject *group_noops(PyObject *self, PyObject *args)
{
    PyObject *names, *ops, *start_obj, *src_obj, *slot_obj;
    if (!PyArg_ParseTuple(args, "O!O!OOO", &PyList_Type, &names, &PyList_Type, &ops, &start_obj, &src_obj,
                          &slot_obj))
        return NULL;
    IntArray in_start = {0}, in_src = {0}, in_slot = {0};
    PyObject *roots = NULL, *candidates = NULL, *result = NULL;
    if (!int_array_get(start_obj, &in_start) || !int_array_get(src_obj, &in_src) ||
        !int_array_get(slot_obj, &in_slot))
        goto decline;
    Py_ssize_t n = PyList_GET_SIZE(ops);
    if (PyList_GET_SIZE(names) != n || in_start.len < n + 1 || in_src.len != in_slot.len)
        goto decline;
    roots = PyList_New(0);
    candidates = PySet_New(NULL);
    if (roots == NULL || candidates == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        int noop = control_only_noop(ops, &in_start, &in_slot, i);
        if (noop < 0)
            goto decline;
        if (!noop)
            continue;
        PyObject *name = PyList_GET_ITEM(names, i);
        if (!PyUnicode_CheckExact(name))
            goto decline;
        int32_t lo = in_start.data[i], hi = in_start.data[i + 1];  /* checked above */
        PyObject *prefix = PyUnicode_FromFormat("%U/NoOp", name);
        PyObject *inputs = PyList_New(hi - lo);
        PyObject *maybe = PySet_New(NULL);
        PyObject *entry = NULL;
        if (prefix == NULL || inputs == NULL || maybe == NULL)
            goto root_failed;
        for (int32_t k = lo; k < hi; k++) {
            int32_t src = in_src.data[k];
            if (src < 0 || src >= n) {
                Py_DECREF(prefix), Py_DECREF(inputs), Py_DECREF(maybe);
                goto decline;
            }
            PyObject *id = PyLong_FromLong(src);
            if (id == NULL)
                goto root_failed;
            PyList_SET_ITEM(inputs, k - lo, id);
            PyObject *child_op = PyList_GET_ITEM(ops, src);
            PyObject *child_name = PyList_GET_ITEM(names, src);
            if (!PyUnicode_CheckExact(child_op) || PyUnicode_CompareWithASCIIString(child_op, "NoOp") != 0)
                continue;  /* most grouped ops are not NoOps */
            if (!PyUnicode_CheckExact(child_name)) {
                Py_DECREF(prefix), Py_DECREF(inputs), Py_DECREF(maybe);
                goto decline;
            }
            if (!child_name_matches(child_name, prefix))
                continue;
            int child_noop = control_only_noop(ops, &in_start, &in_slot, src);
            if (child_noop < 0) {
                Py_DECREF(prefix), Py_DECREF(inputs), Py_DECREF(maybe);
                goto decline;
            }
            if (child_noop && (PySet_Add(maybe, id) < 0 || PySet_Add(candidates, id) < 0))
                goto root_failed;
        }
        entry = Py_BuildValue("(lOO)", (long)i, inputs, maybe);
        if (entry == NULL || PyList_Append(roots, entry) < 0)
            goto root_failed;
        Py_DECREF(entry), Py_DECREF(prefix), Py_DECREF(inputs), Py_DECREF(maybe);
        continue;
    root_failed:
        Py_XDECREF(entry), Py_XDECREF(prefix), Py_XDECREF(inputs), Py_XDECREF(maybe);
        goto done;
    }
    result = PyTuple_Pack(2, roots, candidates);
    goto done;
decline:
    result = Py_None;
    Py_INCREF(result);
done:
    Py_XDECREF(roots);
    Py_XDECREF(candidates);
    int_array_release(&in_start);
    int_array_release(&in_src);
    int_array_release(&in_slot);
    return result;
}

/* ------------------------------------------------------------------ by_device */

PyDoc_STRVAR(by_device_doc,
"by_device(members, devices, ops, assign_ops) -> dict or None\n"
"\n"
"The member loop of setter._split_groups: device -> members on it, in order. None when a member\n"
"is an assign op (its key is its variable's device: the Python loop finds it) or out of range.");

static PyObject *by_device(PyObject *self, PyObject *args)
{
    PyObject *members, *devices, *ops, *assign_ops;
    if (!PyArg_ParseTuple(args, "O!O!O!O", &PyList_Type, &members, &PyList_Type, &devices, &PyList_Type, &ops,
                          &assign_ops))
        return NULL;
    if (!PyAnySet_Check(assign_ops))
        Py_RETURN_NONE;
    PyObject *out = PyDict_New();
    if (out == NULL)
        return NULL;
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(members); k++) {
        PyObject *m = PyList_GET_ITEM(members, k);
        long i;
        if (!small_int(m, &i) || i < 0 || i >= PyList_GET_SIZE(devices) || i >= PyList_GET_SIZE(ops))
            goto decline;
        int assign = PySet_Contains(assign_ops, PyList_GET_ITEM(ops, i));
        if (assign < 0)
            goto error;
        if (assign)
            goto decline;
        PyObject *key = PyList_GET_ITEM(devices, i);
        PyObject *list = PyDict_GetItemWithError(out, key);
        if (list == NULL) {
            if (PyErr_Occurred())
                goto error;
            list = PyList_New(0);
            if (list == NULL)
                goto error;
            int failed = PyDict_SetItem(out, key, list);
            Py_DECREF(list);  /* the dict holds it */
            if (failed)
                goto error;
        }
        if (PyList_Append(list, m) < 0)
            goto error;
    }
    return out;
decline:
    Py_DECREF(out);
    Py_RETURN_NONE;
error:
    Py_DECREF(out);
    return NULL;
}

/* ------------------------------------------------------------------ single_device_groups */

PyDoc_STRVAR(single_device_groups_doc,
"single_device_groups(items, devices, ops, assign_ops, rule, colocated_rule, plain_devices, merge_devices,\n"
"                     pos) -> int or None\n"
"\n"
"The loop of setter._split_groups over (root, (children, members)) items from position pos, for\n"
"the usual root: its members all on one device, no per-device children. Such a root, unless its\n"
"rule is colocated_rule, gets that device's plain device (the device itself when merge_devices is\n"
"false and it is not empty, else plain_devices[device]) written into devices[root]. Returns the\n"
"position of the first other item (several devices, children, an assign op among the members, no\n"
"members, a plain device not cached yet, anything out of range), which the Python loop handles;\n"
"None at the end.");

static PyObject *single_device_groups(PyObject *self, PyObject *args)
{
    PyObject *items, *devices, *ops, *assign_ops, *rule, *plain_devices;
    long colocated_rule;
    int merge_devices;
    Py_ssize_t pos;
    if (!PyArg_ParseTuple(args, "O!O!O!OO!lO!pn", &PyList_Type, &items, &PyList_Type, &devices, &PyList_Type, &ops,
                          &assign_ops, &PyList_Type, &rule, &colocated_rule, &PyDict_Type, &plain_devices,
                          &merge_devices, &pos))
        return NULL;
    if (!PyAnySet_Check(assign_ops) || pos < 0)
        return PyLong_FromSsize_t(pos);
    for (; pos < PyList_GET_SIZE(items); pos++) {
        PyObject *item = PyList_GET_ITEM(items, pos);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2)
            break;
        PyObject *pair = PyTuple_GET_ITEM(item, 1);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2)
            break;
        PyObject *children = PyTuple_GET_ITEM(pair, 0), *members = PyTuple_GET_ITEM(pair, 1);
        long root;
        if (!small_int(PyTuple_GET_ITEM(item, 0), &root) || root < 0 || root >= PyList_GET_SIZE(devices) ||
            root >= PyList_GET_SIZE(rule))
            break;
        int has_children = PyObject_IsTrue(children);
        if (has_children < 0)
            return NULL;
        if (has_children || !PyList_Check(members) || PyList_GET_SIZE(members) == 0)
            break;
        /* The members' one device (compared as by_device's dict keys compare), or a stop. */
        PyObject *device = NULL;
        int single = 1;
        for (Py_ssize_t k = 0; k < PyList_GET_SIZE(members); k++) {
            long i;
            if (!small_int(PyList_GET_ITEM(members, k), &i) || i < 0 || i >= PyList_GET_SIZE(devices) ||
                i >= PyList_GET_SIZE(ops)) {
                single = 0;
                break;
            }
            int assign = PySet_Contains(assign_ops, PyList_GET_ITEM(ops, i));
            if (assign < 0)
                return NULL;
            PyObject *d = PyList_GET_ITEM(devices, i);
            if (assign || !PyUnicode_CheckExact(d)) {
                single = 0;
                break;
            }
            if (device == NULL) {
                device = d;
            } else if (d != device) {
                int same = PyObject_RichCompareBool(d, device, Py_EQ);
                if (same < 0)
                    return NULL;
                if (!same) {
                    single = 0;
                    break;
                }
            }
        }
        if (!single)
            break;
        long root_rule;
        if (!small_int(PyList_GET_ITEM(rule, root), &root_rule))
            break;
        if (root_rule == colocated_rule)
            continue;
        PyObject *plain;
        if (!merge_devices && PyUnicode_GET_LENGTH(device) > 0) {
            plain = device;
        } else {
            plain = PyDict_GetItemWithError(plain_devices, device);
            if (plain == NULL) {
                if (PyErr_Occurred())
                    return NULL;
                break;  /* not cached yet: the Python loop computes it */
            }
        }
        Py_INCREF(plain);
        if (PyList_SetItem(devices, root, plain) < 0)  /* steals plain */
            return NULL;
    }
    if (pos >= PyList_GET_SIZE(items))
        Py_RETURN_NONE;
    return PyLong_FromSsize_t(pos);
}

/* ------------------------------------------------------------------ renumbered */

PyDoc_STRVAR(renumbered_doc,
"renumbered(mapping, new_id, keys_only) -> dict or None\n"
"\n"
"setter._renumbered in one pass: keys (and values unless keys_only) mapped through new_id (a\n"
"C-contiguous int32 buffer: the new id of each old one, -1 if dropped), entries with a -1\n"
"dropped, order kept. None when new_id is not such a buffer, an id is not an int in range, or it\n"
"maps to a negative number other than -1 (the Python function then runs).");

static PyObject *renumbered(PyObject *self, PyObject *args)
{
    PyObject *mapping, *new_id_obj;
    int keys_only;
    if (!PyArg_ParseTuple(args, "O!Op", &PyDict_Type, &mapping, &new_id_obj, &keys_only))
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(new_id_obj, &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    PyObject *out = NULL;
    if (view.itemsize != 4 || view.format == NULL || strcmp(view.format, "i") != 0)
        goto decline;
    const int *new_id = (const int *)view.buf;
    Py_ssize_t size = view.len / 4;
    out = PyDict_New();
    if (out == NULL)
        goto error;
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (PyDict_Next(mapping, &pos, &key, &value)) {
        long old, new_key, new_value = 0;
        if (!small_int(key, &old) || old < 0 || old >= size)
            goto decline;
        new_key = new_id[old];
        if (!keys_only) {
            if (!small_int(value, &old) || old < 0 || old >= size)
                goto decline;
            new_value = new_id[old];
        }
        if (new_key < -1 || new_value < -1)
            goto decline;
        if (new_key == -1 || new_value == -1)
            continue;  /* names a dropped node */
        PyObject *k = PyLong_FromLong(new_key);
        PyObject *v = keys_only ? (Py_INCREF(value), value) : PyLong_FromLong(new_value);
        int failed = k == NULL || v == NULL || PyDict_SetItem(out, k, v) < 0;
        Py_XDECREF(k);
        Py_XDECREF(v);
        if (failed)
            goto error;
    }
    PyBuffer_Release(&view);
    return out;
decline:
    Py_XDECREF(out);
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
error:
    Py_XDECREF(out);
    PyBuffer_Release(&view);
    return NULL;
}

/* ------------------------------------------------------------------ nodes_with_ops */

PyDoc_STRVAR(nodes_with_ops_doc,
"nodes_with_ops(ops, wanted, names, suffixes) -> list or None\n"
"\n"
"scopes._nodes_with_ops: ids (ascending) of the nodes whose op is in ``wanted``, except that a\n"
"node whose op is a key of ``suffixes`` is kept only if its name ends with ``suffixes[op]`` (the\n"
"caller's loop does nothing for the others). None when an op or name is not a str.");

static PyObject *nodes_with_ops(PyObject *self, PyObject *args)
{
    PyObject *ops, *wanted, *names, *suffixes;
    if (!PyArg_ParseTuple(args, "O!OO!O!", &PyList_Type, &ops, &wanted, &PyList_Type, &names, &PyDict_Type,
                          &suffixes))
        return NULL;
    if (!PyAnySet_Check(wanted))
        Py_RETURN_NONE;
    Py_ssize_t n = PyList_GET_SIZE(ops);
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *op = PyList_GET_ITEM(ops, i);
        if (!PyUnicode_CheckExact(op))
            goto decline;
        int found = PySet_Contains(wanted, op);
        if (found < 0)
            goto error;
        if (!found)
            continue;
        PyObject *suffix = PyDict_GetItemWithError(suffixes, op);
        if (suffix == NULL && PyErr_Occurred())
            goto error;
        if (suffix != NULL) {
            if (i >= PyList_GET_SIZE(names) || !PyUnicode_CheckExact(PyList_GET_ITEM(names, i)) ||
                !PyUnicode_CheckExact(suffix))
                goto decline;
            Py_ssize_t match = PyUnicode_Tailmatch(PyList_GET_ITEM(names, i), suffix, 0, PY_SSIZE_T_MAX, +1);
            if (match < 0)
                goto error;
            if (!match)
                continue;
        }
        if (append_int(out, i) < 0)
            goto error;
    }
    return out;
decline:
    Py_DECREF(out);
    Py_RETURN_NONE;
error:
    Py_DECREF(out);
    return NULL;
}

/* ------------------------------------------------------------------ shifted */

PyDoc_STRVAR(shifted_doc,
"shifted(values, a, b, shift) -> bytes or None\n"
"\n"
"The bytes of array('i', values[a:b]) with ``shift`` added to each item (the in_start stretch\n"
"_GroupRewrite._copy appends). None when the range is out of bounds or an item would not fit\n"
"an int (the Python code then raises what it raises).");

static PyObject *shifted(PyObject *self, PyObject *args)
{
    PyObject *values_obj;
    Py_ssize_t a, b;
    long long shift;
    if (!PyArg_ParseTuple(args, "OnnL", &values_obj, &a, &b, &shift))
        return NULL;
    IntArray values = {0};
    PyObject *out = NULL;
    if (!int_array_get(values_obj, &values) || a < 0 || b < a || b > values.len) {
        out = Py_None;
        Py_INCREF(out);
        goto done;
    }
    out = PyBytes_FromStringAndSize(NULL, (b - a) * 4);
    if (out == NULL)
        goto done;
    int32_t *dst = (int32_t *)PyBytes_AS_STRING(out);
    for (Py_ssize_t k = a; k < b; k++) {
        long long v = (long long)values.data[k] + shift;
        if (v < INT32_MIN || v > INT32_MAX) {
            Py_DECREF(out);
            out = Py_None;
            Py_INCREF(out);
            goto done;
        }
        dst[k - a] = (int32_t)v;
    }
done:
    int_array_release(&values);
    return out;
}

/* ------------------------------------------------------------------ group_members */

PyDoc_STRVAR(group_members_doc,
"group_members(roots, candidates, in_start, in_src) -> dict or None\n"
"\n"
"The rest of scopes.group_roots after group_noops: how many edges leave each would-be child,\n"
"then root -> (children, members) for every root with children or at least two members, minus\n"
"the roots that are some root's child. ``roots`` and ``candidates`` are what group_noops\n"
"returned. None when an id is out of range (the Python code then runs).");

static PyObject *group_members(PyObject *self, PyObject *args)
{
    PyObject *roots, *candidates, *start_obj, *src_obj;
    if (!PyArg_ParseTuple(args, "O!O!OO", &PyList_Type, &roots, &PySet_Type, &candidates, &start_obj, &src_obj))
        return NULL;
    IntArray in_start = {0}, in_src = {0};
    PyObject *out = NULL, *children_all = NULL, *result = NULL;
    int32_t *consumers = NULL;
    if (!int_array_get(start_obj, &in_start) || !int_array_get(src_obj, &in_src))
        goto decline;
    Py_ssize_t n = in_start.len - 1;
    if (n < 0)
        goto decline;
    /* consumers[c]: edges leaving candidate c (the Counter over in_src, for candidates only);
     * -1 marks a node that is not a candidate. */
    consumers = PyMem_Malloc((n > 0 ? n : 1) * sizeof(int32_t));
    if (consumers == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t k = 0; k < n; k++)
        consumers[k] = -1;
    PyObject *iter = PyObject_GetIter(candidates), *key;
    if (iter == NULL)
        goto done;
    while ((key = PyIter_Next(iter)) != NULL) {
        long c;
        int ok = small_int(key, &c) && c >= 0 && c < n;
        Py_DECREF(key);
        if (!ok) {
            Py_DECREF(iter);
            goto decline;
        }
        consumers[c] = 0;
    }
    Py_DECREF(iter);
    if (PyErr_Occurred())
        goto done;
    for (Py_ssize_t k = 0; k < in_src.len; k++) {
        int32_t src = in_src.data[k];
        if (src >= 0 && src < n && consumers[src] >= 0)
            consumers[src]++;
    }
    out = PyDict_New();
    children_all = PyList_New(0);
    if (out == NULL || children_all == NULL)
        goto done;
    for (Py_ssize_t r = 0; r < PyList_GET_SIZE(roots); r++) {
        PyObject *root = PyList_GET_ITEM(roots, r);
        if (!PyTuple_CheckExact(root) || PyTuple_GET_SIZE(root) != 3 ||
            !PyList_CheckExact(PyTuple_GET_ITEM(root, 1)) || !PyAnySet_Check(PyTuple_GET_ITEM(root, 2)))
            goto decline;
        PyObject *inputs = PyTuple_GET_ITEM(root, 1), *maybe = PyTuple_GET_ITEM(root, 2);
        PyObject *children = PyList_New(0), *members = PyList_New(0);
        if (children == NULL || members == NULL) {
            Py_XDECREF(children), Py_XDECREF(members);
            goto done;
        }
        int failed = 0, odd = 0;
        for (Py_ssize_t k = 0; k < PyList_GET_SIZE(inputs) && !failed && !odd; k++) {
            PyObject *input = PyList_GET_ITEM(inputs, k);
            long src;
            if (!small_int(input, &src) || src < 0 || src >= n) {
                odd = 1;
                break;
            }
            int child = 0;
            if (PySet_GET_SIZE(maybe) > 0) {
                child = PySet_Contains(maybe, input);
                if (child < 0) {
                    failed = 1;
                    break;
                }
                child = child && consumers[src] == 1;
            }
            if (!child) {
                failed = PyList_Append(members, input) < 0;
                continue;
            }
            failed = PyList_Append(children, input) < 0;
            int32_t lo = in_start.data[src], hi = in_start.data[src + 1];
            if (lo < 0 || hi < lo || hi > in_src.len) {
                odd = 1;
                break;
            }
            for (int32_t e = lo; e < hi && !failed; e++)
                failed = append_int(members, in_src.data[e]) < 0;
        }
        if (failed || odd) {
            Py_DECREF(children), Py_DECREF(members);
            if (odd)
                goto decline;
            goto done;
        }
        if (PyList_GET_SIZE(children) > 0 || PyList_GET_SIZE(members) >= 2) {
            PyObject *value = PyTuple_Pack(2, children, members);
            failed = value == NULL || PyDict_SetItem(out, PyTuple_GET_ITEM(root, 0), value) < 0;
            Py_XDECREF(value);
            if (!failed) {  /* children_of_some_root.update(children) */
                Py_ssize_t size = PyList_GET_SIZE(children_all);
                failed = PyList_SetSlice(children_all, size, size, children) < 0;
            }
        }
        Py_DECREF(children), Py_DECREF(members);
        if (failed)
            goto done;
    }
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(children_all); k++) {  /* out.pop(child, None) */
        PyObject *child = PyList_GET_ITEM(children_all, k);
        int has = PyDict_Contains(out, child);
        if (has < 0 || (has && PyDict_DelItem(out, child) < 0))
            goto done;
    }
    result = out;
    out = NULL;
    goto done;
decline:
    result = Py_None;
    Py_INCREF(result);
done:
    Py_XDECREF(out);
    Py_XDECREF(children_all);
    PyMem_Free(consumers);
    int_array_release(&in_start);
    int_array_release(&in_src);
    return result;
}

/* ------------------------------------------------------------------ id_range */

PyDoc_STRVAR(id_range_doc,
"id_range(a, b) -> bytes or None\n"
"\n"
"The bytes of array('i', range(a, b)) (the attr ids _GroupRewrite._copy appends); None if they\n"
"would not fit an int.");

static PyObject *id_range(PyObject *self, PyObject *args)
{
    long long a, b;
    if (!PyArg_ParseTuple(args, "LL", &a, &b))
        return NULL;
    if (b < a)
        b = a;
    if (a < INT32_MIN || b - 1 > INT32_MAX)
        Py_RETURN_NONE;
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(b - a) * 4);
    if (out == NULL)
        return NULL;
    int32_t *dst = (int32_t *)PyBytes_AS_STRING(out);
    for (long long k = a; k < b; k++)
        dst[k - a] = (int32_t)k;
    return out;
}

static PyMethodDef methods[] = {
    {"colocation_targets", colocation_targets, METH_VARARGS, colocation_targets_doc},
    {"replay", (PyCFunction)(void (*)(void))replay, METH_FASTCALL, replay_doc},
    {"group_noops", group_noops, METH_VARARGS, group_noops_doc},
    {"by_device", by_device, METH_VARARGS, by_device_doc},
    {"single_device_groups", single_device_groups, METH_VARARGS, single_device_groups_doc},
    {"renumbered", renumbered, METH_VARARGS, renumbered_doc},
    {"nodes_with_ops", nodes_with_ops, METH_VARARGS, nodes_with_ops_doc},
    {"shifted", shifted, METH_VARARGS, shifted_doc},
    {"group_members", group_members, METH_VARARGS, group_members_doc},
    {"id_range", id_range, METH_VARARGS, id_range_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "placeviz.placement._setter_kernels",
    "The setter replay's per-node loops in C (see placeviz/placement/setter.py).", -1, methods,
};

PyMODINIT_FUNC PyInit__setter_kernels(void)
{
    return PyModule_Create(&module);
}
