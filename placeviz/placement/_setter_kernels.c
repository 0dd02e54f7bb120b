/*
 * placeviz.placement._setter_kernels: the setter replay in C.
 *
 * Why this exists: the setter (placeviz/placement/setter.py) touches each node from Python at
 * 0.3-3 us per node, most of its time on big graphs. setter() below is the replay
 * (setter.setter_replay) as one whole function: the IR arrays and complete tables go in, the
 * whole result or None (declined: the Python runs from its start) comes out; it runs no Python
 * code of its own and shares no state with the Python path. The other functions are the
 * group split's helpers, which still run inside Python loops and hand back what they do not
 * settle (not yet behind a whole-function boundary). Results equal the Python path's, node for
 * node (tests/test_setter_kernels.py runs both).
 *
 * Every index read from a list or array is bounds-checked; anything out of range or of an
 * unexpected type is "not the plain case" (a decline), never an error.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* RULE_* of setter.py (the values are part of SetterResult.rule; the tests compare both paths). */
enum { RULE_WORKER = 0, RULE_PS = 1, RULE_PS_PINNED = 2, RULE_COLOCATED = 3, RULE_DEVICE_NONE = 4, RULE_KEPT = 5,
       RULE_OUTSIDE = 8 };

#define CONTROL (-1)   /* graph.CONTROL: in_slot of a ^control input */
#define DEVICE_NONE (-1) /* scopes.DEVICE_NONE: colocation target "built under device(None)" */


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

static int append_int(PyObject *list, Py_ssize_t i)
{
    PyObject *v = PyLong_FromSsize_t(i);
    if (v == NULL)
        return -1;
    int failed = PyList_Append(list, v);
    Py_DECREF(v);
    return failed;
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

/* ------------------------------------------------------------------ setter: the whole replay */

/*
 * setter.setter_replay's native twin (setter.py: _colocation_targets, _reimported_initializers,
 * the replay loop, _outside and _resolve_colocated, in that order), as ONE function: the IR arrays
 * and a few complete tables go in, the whole result comes out, or None when it declines. It never
 * hands a node back: on anything it does not handle (an answer missing from a table, an id out of range, an odd type) it returns None and the Python function runs from its
 * start. It runs no Python code and keeps no state between calls.
 *
 * The device strings are never parsed here: Python gives, per distinct own device, the worker
 * device merged under it, whether a ps op there calls the strategy, and the ps device per task
 * (device_setter.py _ReplicaDeviceChooser.device_function), so PyDeviceSpec stays the only
 * implementation of TF's device merge.
 */

#define NO_TARGET (-2)  /* targets[i]: not built under colocate_with */
#define FLAG_DEVICE_NONE 1     /* device_none[i]: built under device(None) (scopes.device_none_nodes) */
#define FLAG_RESOURCE_ASSIGN 2 /* a ResourceVariable's <handle>/Assign under its handle's hint */
enum { DECLINE = -1, FAIL = -2 };

typedef struct {
    Py_ssize_t n, inside;
    PyObject *names, *ops, *own;
    IntArray in_start, in_src, in_slot;
    PyObject *colocation, *colocated_names, *located_ids, *index;
    const uint8_t *device_none;
    PyObject *ps_ops;
    long ps_tasks;
    int graph_as_default, merge_devices, ps_present;
    PyObject *worker_of, *ps_calls, *ps_device_of;
    PyObject *gen_keys, *gen_values, *gen_nodes;
    IntArray hint_of;       /* per node: the node whose device it was built under, or -1 */
    PyObject *scoped;       /* (scope device, own device) -> the scope merged over own */
    PyObject *initializer, *empty, *no_names;  /* "/Initializer/", "", () (owned) */
    int32_t *targets;
} Setter;

/* An exact int in [0, n) into *out; 0 if it is not one. */
static int node_id(PyObject *obj, Py_ssize_t n, Py_ssize_t *out)
{
    long v;
    if (!small_int(obj, &v) || v < 0 || v >= n)
        return 0;
    *out = v;
    return 1;
}

/* The input range of node i, bounds-checked against in_slot and in_src. */
static int input_range(Setter *s, Py_ssize_t i, int32_t *lo, int32_t *hi)
{
    *lo = s->in_start.data[i], *hi = s->in_start.data[i + 1];
    return *lo >= 0 && *hi >= *lo && *hi <= s->in_slot.len && *hi <= s->in_src.len;
}

/* name.startswith(t + "/Initializer/") without building the prefix. -1 on error. */
static int starts_with_initializer(Setter *s, PyObject *name, PyObject *t)
{
    Py_ssize_t len = PyUnicode_GET_LENGTH(t);
    Py_ssize_t m = PyUnicode_Tailmatch(name, t, 0, len, -1);
    if (m <= 0)
        return (int)m;
    return (int)PyUnicode_Tailmatch(name, s->initializer, len, PY_SSIZE_T_MAX, -1);
}

/* _colocation_targets over colocation.items(), Switch ops included. */
static int colocation_targets(Setter *s)
{
    Py_ssize_t pos = 0;
    PyObject *key, *groups;
    while (PyDict_Next(s->colocation, &pos, &key, &groups)) {
        Py_ssize_t i;
        if (!node_id(key, s->n, &i) || !PyTuple_CheckExact(groups))
            return DECLINE;
        PyObject *located = PyDict_GetItemWithError(s->colocated_names, key);  /* .get(i, ()) */
        if (located == NULL) {
            if (PyErr_Occurred())
                return FAIL;
            located = s->no_names;  /* no loc:@ names: only a Switch may get a target */
        }
        if (!PyTuple_CheckExact(located))
            return DECLINE;
        PyObject *name = PyList_GET_ITEM(s->names, i), *op = PyList_GET_ITEM(s->ops, i);
        int own = PySequence_Contains(located, name);  /* loc:@<own name>: not colocated */
        if (own < 0)
            return FAIL;
        if (own)
            continue;
        if (PyUnicode_CompareWithASCIIString(op, "Switch") == 0 ||
            PyUnicode_CompareWithASCIIString(op, "RefSwitch") == 0) {
            /* cond builds a Switch under colocate_with(data): its data input, when they share a group */
            int32_t lo, hi;
            if (!input_range(s, i, &lo, &hi))
                return DECLINE;
            if (hi > lo && s->in_slot.data[lo] != CONTROL) {
                int32_t data = s->in_src.data[lo];
                if (data < 0 || data >= s->n)
                    return DECLINE;
                PyObject *data_key = PyLong_FromLong(data);
                if (data_key == NULL)
                    return FAIL;
                PyObject *data_groups = PyDict_GetItemWithError(s->colocation, data_key);
                Py_DECREF(data_key);
                if (data_groups == NULL && PyErr_Occurred())
                    return FAIL;
                PyObject *made = NULL;  /* graph.colocation_groups(data): its list, or loc:@<its name> */
                if (data_groups == NULL || (PyTuple_CheckExact(data_groups) && PyTuple_GET_SIZE(data_groups) == 0)) {
                    PyObject *g = PyUnicode_FromFormat("loc:@%U", PyList_GET_ITEM(s->names, data));
                    made = g ? PyTuple_Pack(1, g) : NULL;
                    Py_XDECREF(g);
                    if (made == NULL)
                        return FAIL;
                    data_groups = made;
                }
                if (!PyTuple_CheckExact(data_groups))
                    return DECLINE;
                int shared = 0;
                for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(data_groups) && !shared; k++) {
                    shared = PySequence_Contains(groups, PyTuple_GET_ITEM(data_groups, k));
                    if (shared < 0) {
                        Py_XDECREF(made);
                        return FAIL;
                    }
                }
                Py_XDECREF(made);
                if (shared) {
                    s->targets[i] = data;
                    continue;
                }
            }
        }
        for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(located); k++) {
            PyObject *t = PyTuple_GET_ITEM(located, k);
            if (!PyUnicode_CheckExact(t))
                return DECLINE;
            int init = starts_with_initializer(s, name, t);
            if (init < 0)
                return FAIL;
            if (init) {  /* <target>/Initializer/...: built under device(None) */
                s->targets[i] = DEVICE_NONE;
                break;
            }
            PyObject *target = PyDict_GetItemWithError(s->located_ids, t);
            if (target == NULL) {
                if (PyErr_Occurred())
                    return FAIL;
                continue;
            }
            Py_ssize_t id;
            if (!node_id(target, s->n, &id))
                return DECLINE;
            s->targets[i] = (int32_t)id;
            break;
        }
    }
    return 0;
}

/* _reimported_initializers: after an import_graph_def round trip the initializers keep their
 * variable's device, when every one of them that can show it does. */
static int reimported_initializers(Setter *s)
{
    Py_ssize_t count = 0;
    int32_t *pairs = PyMem_Malloc(sizeof(int32_t) * 2 * (size_t)(s->n ? s->n : 1));
    if (pairs == NULL) {
        PyErr_NoMemory();
        return FAIL;
    }
    int status = 0;
    for (Py_ssize_t i = 0; i < s->n; i++) {
        if (s->targets[i] != DEVICE_NONE)
            continue;
        PyObject *name = PyList_GET_ITEM(s->names, i);
        Py_ssize_t cut = PyUnicode_Find(name, s->initializer, 0, PyUnicode_GET_LENGTH(name), 1);
        if (cut == -2) {
            status = FAIL;
            break;
        }
        PyObject *base = cut < 0 ? (Py_INCREF(name), name) : PyUnicode_Substring(name, 0, cut);
        if (base == NULL) {
            status = FAIL;
            break;
        }
        PyObject *var = PyDict_GetItemWithError(s->index, base);
        Py_DECREF(base);
        if (var == NULL) {
            if (PyErr_Occurred()) {
                status = FAIL;
                break;
            }
            continue;
        }
        Py_ssize_t v;
        if (!node_id(var, s->n, &v)) {
            status = DECLINE;
            break;
        }
        pairs[2 * count] = (int32_t)i, pairs[2 * count + 1] = (int32_t)v;
        count++;
    }
    if (status == 0) {
        int evidence = 0, all_same = 1;
        for (Py_ssize_t k = 0; k < count && all_same; k++) {
            PyObject *var_device = PyList_GET_ITEM(s->own, pairs[2 * k + 1]);
            if (PyUnicode_GET_LENGTH(var_device) == 0)
                continue;
            evidence = 1;
            int eq = PyUnicode_Compare(PyList_GET_ITEM(s->own, pairs[2 * k]), var_device);
            if (eq == -1 && PyErr_Occurred())
                status = FAIL;
            all_same = eq == 0;
        }
        if (status == 0 && evidence && all_same)
            for (Py_ssize_t k = 0; k < count; k++)
                s->targets[pairs[2 * k]] = pairs[2 * k + 1];
    }
    PyMem_Free(pairs);
    return status;
}

/* The resource-constructor test (_is_resource_generator) of node i, from the op facts Python
 * gave: 1/0, DECLINE when no answer was given, FAIL on error. */
static int generator(Setter *s, Py_ssize_t i, int32_t lo, int32_t hi)
{
    for (int32_t k = lo; k < hi; k++)  /* any data input: not a constructor */
        if (s->in_slot.data[k] != CONTROL)
            return 0;
    PyObject *answer = NULL;
    if (PyDict_GET_SIZE(s->gen_nodes)) {
        PyObject *key = PyLong_FromSsize_t(i);
        if (key == NULL)
            return FAIL;
        answer = PyDict_GetItemWithError(s->gen_nodes, key);
        Py_DECREF(key);
        if (answer == NULL && PyErr_Occurred())
            return FAIL;
    }
    if (answer == NULL && s->gen_values != Py_None) {
        PyObject *key = PyTuple_Pack(2, PyList_GET_ITEM(s->ops, i), PyList_GET_ITEM(s->gen_values, i));
        if (key == NULL)
            return FAIL;
        answer = PyDict_GetItemWithError(s->gen_keys, key);
        Py_DECREF(key);
        if (answer == NULL && PyErr_Occurred())
            return FAIL;
    }
    if (answer == Py_True)
        return 1;
    return answer == Py_False ? 0 : DECLINE;
}

/* ps_calls[own]: whether a ps op with this own device calls the strategy. */
static int calls_strategy(Setter *s, PyObject *own)
{
    PyObject *calls = PyDict_GetItemWithError(s->ps_calls, own);
    if (calls == NULL)
        return PyErr_Occurred() ? FAIL : DECLINE;
    return calls == Py_True ? 1 : calls == Py_False ? 0 : DECLINE;
}

typedef struct {
    PyObject **devices;  /* borrowed; NULL: not settled yet (None in the Python loop) */
    uint8_t *rule;
    int32_t *ref_node, *ref_target, *colocated, *calls;
    Py_ssize_t refs, colocated_count, call_count;
    int32_t *pending;  /* the target of each colocated node left for after the pass, else NO_TARGET */
} Out;

static int colocated_node(Setter *s, Out *o, Py_ssize_t i, int32_t target)
{
    PyObject *device = o->devices[target];
    if (device != NULL)  /* the target was created first: its device, or the op's own if empty */
        o->devices[i] = PyUnicode_GET_LENGTH(device) ? device : PyList_GET_ITEM(s->own, i);
    else {
        o->colocated[o->colocated_count++] = (int32_t)i;
        o->pending[i] = target;
    }
    o->rule[i] = RULE_COLOCATED;
    o->ref_node[o->refs] = (int32_t)i, o->ref_target[o->refs++] = target;
    return 0;
}

/* scoped[(scope, own)]: the device of an op built under device(scope) whose own device is own. */
static PyObject *scoped_device(Setter *s, PyObject *scope, PyObject *own)
{
    PyObject *key = PyTuple_Pack(2, scope, own);
    if (key == NULL)
        return NULL;
    PyObject *merged = PyDict_GetItemWithError(s->scoped, key);
    Py_DECREF(key);
    if (merged != NULL && !PyUnicode_CheckExact(merged))
        return NULL;
    return merged;
}

/* One node of the replay loop (inside the setter's block). */
/* Whether node i is a ps op (*is_ps) and, if so, whether the setter's device function asks the
 * strategy for its task (setter._calls_strategy): 1 it does, 0 it does not or i is no ps op, <0
 * FAIL/DECLINE. The replay asks this at two places: a colocated node in an init scope and a
 * node placed by the device function. */
static int ps_call(Setter *s, Py_ssize_t i, PyObject *own, int *is_ps)
{
    *is_ps = PySet_Contains(s->ps_ops, PyList_GET_ITEM(s->ops, i));
    if (*is_ps < 0)
        return FAIL;
    return *is_ps ? calls_strategy(s, own) : 0;
}

/* One strategy call for node i: recorded, and the round-robin moves to the next ps task. */
static void take_call(Setter *s, Out *o, Py_ssize_t i, long *rr_next)
{
    o->calls[o->call_count++] = (int32_t)i;
    *rr_next = (*rr_next + 1) % s->ps_tasks;
}

static int replay_node(Setter *s, Out *o, Py_ssize_t i, long *rr_next)
{
    PyObject *own = PyList_GET_ITEM(s->own, i);
    int32_t target = s->targets[i];
    if (target == DEVICE_NONE || (s->device_none[i] & FLAG_DEVICE_NONE)) {
        o->devices[i] = s->empty, o->rule[i] = RULE_DEVICE_NONE;
        return 0;
    }
    if (target >= 0) {
        int32_t lo, hi;
        if (!input_range(s, i, &lo, &hi))
            return DECLINE;
        int has_data_input = hi > lo && s->in_slot.data[lo] != CONTROL;
        int in_init_scope = 0;
        if (!has_data_input && (in_init_scope = generator(s, i, lo, hi)) < 0)
            return in_init_scope;
        int advances = in_init_scope && s->graph_as_default;
        if (in_init_scope && !advances && (advances = PySet_Contains(s->ps_ops, PyList_GET_ITEM(s->ops, target))) < 0)
            return FAIL;
        if (advances && s->ps_present) {
            int is_ps, call = ps_call(s, i, own, &is_ps);
            if (call < 0)
                return call;
            if (call)
                take_call(s, o, i, rr_next);
        }
        return colocated_node(s, o, i, target);
    }
    int32_t hint = s->hint_of.data[i];
    if (hint >= 0) {
        /* Built under device(<device of node hint>) (scopes.device_scope_hints): that device merged
         * over the op's own is its own device here. */
        if (hint >= s->n)
            return DECLINE;
        PyObject *scope = o->devices[hint];
        if (scope != NULL && PyUnicode_GET_LENGTH(scope)) {
            own = scoped_device(s, scope, own);
            if (own == NULL)
                return PyErr_Occurred() ? FAIL : DECLINE;
        }
        o->ref_node[o->refs] = (int32_t)i, o->ref_target[o->refs++] = hint;
        if (s->device_none[i] & FLAG_RESOURCE_ASSIGN) {
            /* colocate_with(None, ignore_existing=True), then device(handle.device) */
            o->devices[i] = own, o->rule[i] = RULE_COLOCATED;
            return 0;
        }
    }
    if (!s->merge_devices && PyUnicode_GET_LENGTH(own)) {
        o->devices[i] = own, o->rule[i] = RULE_KEPT;
        return 0;
    }
    if (s->ps_present) {
        int is_ps, call = ps_call(s, i, own, &is_ps);
        if (call < 0)
            return call;
        if (is_ps) {
            PyObject *by_task = PyDict_GetItemWithError(s->ps_device_of, own);
            if (by_task == NULL)
                return PyErr_Occurred() ? FAIL : DECLINE;
            Py_ssize_t slot = call ? 1 + *rr_next : 0;  /* 0: no strategy call (task None) */
            if (!PyTuple_CheckExact(by_task) || slot >= PyTuple_GET_SIZE(by_task) ||
                !PyUnicode_CheckExact(PyTuple_GET_ITEM(by_task, slot)))
                return DECLINE;
            if (call)
                take_call(s, o, i, rr_next);
            o->devices[i] = PyTuple_GET_ITEM(by_task, slot);
            o->rule[i] = call ? RULE_PS : RULE_PS_PINNED;
            return 0;
        }
    }
    PyObject *device = PyDict_GetItemWithError(s->worker_of, own);
    if (device == NULL)
        return PyErr_Occurred() ? FAIL : DECLINE;
    if (!PyUnicode_CheckExact(device))
        return DECLINE;
    o->devices[i] = device;  /* rule stays RULE_WORKER */
    return 0;
}

/* _outside: a node built after the setter's block keeps its own device (colocation and library
 * scopes still apply). */
static int outside_node(Setter *s, Out *o, Py_ssize_t i)
{
    int32_t target = s->targets[i];
    if (target == DEVICE_NONE || (s->device_none[i] & FLAG_DEVICE_NONE)) {
        o->devices[i] = s->empty, o->rule[i] = RULE_DEVICE_NONE;
        return 0;
    }
    if (target >= 0)
        return colocated_node(s, o, i, target);
    PyObject *own = PyList_GET_ITEM(s->own, i);
    int32_t hint = s->hint_of.data[i];
    if (hint >= s->n)
        return DECLINE;
    PyObject *scope = hint >= 0 ? o->devices[hint] : NULL;
    if (scope != NULL && PyUnicode_GET_LENGTH(scope)) {
        own = scoped_device(s, scope, own);
        if (own == NULL)
            return PyErr_Occurred() ? FAIL : DECLINE;
        o->ref_node[o->refs] = (int32_t)i, o->ref_target[o->refs++] = hint;
    }
    o->devices[i] = own, o->rule[i] = RULE_OUTSIDE;
    return 0;
}

/* _resolve_colocated for the nodes whose target came later, in the order they were met. */
static int resolve_colocated(Setter *s, Out *o)
{
    int32_t *seen = PyMem_Malloc(sizeof(int32_t) * (size_t)(s->n ? s->n : 1));
    if (seen == NULL) {
        PyErr_NoMemory();
        return FAIL;
    }
    for (Py_ssize_t i = 0; i < s->n; i++)
        seen[i] = -1;
    for (Py_ssize_t k = 0; k < o->colocated_count; k++) {
        int32_t i = o->colocated[k], target = o->pending[i];
        seen[i] = (int32_t)k;
        while (o->devices[target] == NULL && o->pending[target] != NO_TARGET && seen[target] != k) {
            seen[target] = (int32_t)k;
            target = o->pending[target];
        }
        PyObject *device = o->devices[target];
        o->devices[i] = device != NULL && PyUnicode_GET_LENGTH(device) ? device : PyList_GET_ITEM(s->own, i);
    }
    PyMem_Free(seen);
    return 0;
}

/* The result: (devices, rule, reference, strategy_calls). */
static PyObject *setter_result(Setter *s, Out *o)
{
    PyObject *devices = PyList_New(s->n), *rule = PyList_New(s->n), *reference = PyDict_New();
    PyObject *calls = PyList_New(o->call_count);
    if (devices == NULL || rule == NULL || reference == NULL || calls == NULL)
        goto error;
    for (Py_ssize_t i = 0; i < s->n; i++) {
        PyObject *d = o->devices[i] ? o->devices[i] : s->empty;  /* every node is settled by now */
        Py_INCREF(d);
        PyList_SET_ITEM(devices, i, d);
        PyObject *r = PyLong_FromLong(o->rule[i]);
        if (r == NULL)
            goto error;
        PyList_SET_ITEM(rule, i, r);
    }
    for (Py_ssize_t k = 0; k < o->refs; k++) {
        PyObject *a = PyLong_FromLong(o->ref_node[k]), *b = PyLong_FromLong(o->ref_target[k]);
        int failed = a == NULL || b == NULL || PyDict_SetItem(reference, a, b) < 0;
        Py_XDECREF(a);
        Py_XDECREF(b);
        if (failed)
            goto error;
    }
    for (Py_ssize_t k = 0; k < o->call_count; k++) {
        PyObject *c = PyLong_FromLong(o->calls[k]);
        if (c == NULL)
            goto error;
        PyList_SET_ITEM(calls, k, c);
    }
    return Py_BuildValue("(NNNN)", devices, rule, reference, calls);
error:
    Py_XDECREF(devices);
    Py_XDECREF(rule);
    Py_XDECREF(reference);
    Py_XDECREF(calls);
    return NULL;
}

static int exact_str_list(PyObject *list, Py_ssize_t n)
{
    if (!PyList_CheckExact(list) || PyList_GET_SIZE(list) != n)
        return 0;
    for (Py_ssize_t i = 0; i < n; i++)
        if (!PyUnicode_CheckExact(PyList_GET_ITEM(list, i)))
            return 0;
    return 1;
}

PyDoc_STRVAR(setter_doc,
"setter(*, names, ops, own_devices, in_start, in_src, in_slot, colocation, colocated_names,\n"
"       located_ids, index, device_none, inside, ps_ops, ps_tasks, graph_as_default, merge_devices,\n"
"       ps_present, worker_of, ps_calls, ps_device_of, generator_keys, generator_values,\n"
"       generator_nodes, hint_of, scoped) -> (devices, rule, reference, strategy_calls) or None\n"
"\n"
"setter.setter_replay with the round-robin strategy, as one function\n"
"(see setter.native_replay, which builds the arguments). None: declined, run the Python.");

static PyObject *setter_entry(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"names", "ops", "own_devices", "in_start", "in_src", "in_slot", "colocation",
                             "colocated_names", "located_ids", "index", "device_none", "inside", "ps_ops",
                             "ps_tasks", "graph_as_default", "merge_devices", "ps_present", "worker_of",
                             "ps_calls", "ps_device_of", "generator_keys", "generator_values",
                             "generator_nodes", "hint_of", "scoped", NULL};
    Setter s;
    memset(&s, 0, sizeof s);
    PyObject *in_start = NULL, *in_src = NULL, *in_slot = NULL, *device_none = NULL, *hint_of = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$OOOOOOO!O!O!O!SnOlpppO!O!O!O!OO!OO!", kwlist,
                                     &s.names, &s.ops, &s.own, &in_start, &in_src, &in_slot,
                                     &PyDict_Type, &s.colocation, &PyDict_Type, &s.colocated_names,
                                     &PyDict_Type, &s.located_ids, &PyDict_Type, &s.index, &device_none,
                                     &s.inside, &s.ps_ops, &s.ps_tasks, &s.graph_as_default, &s.merge_devices,
                                     &s.ps_present, &PyDict_Type, &s.worker_of, &PyDict_Type, &s.ps_calls,
                                     &PyDict_Type, &s.ps_device_of, &PyDict_Type, &s.gen_keys, &s.gen_values,
                                     &PyDict_Type, &s.gen_nodes, &hint_of, &PyDict_Type, &s.scoped))
        return NULL;
    if (!s.names || !s.ops || !s.own || !in_start || !in_src || !in_slot || !s.colocation || !s.colocated_names ||
        !s.located_ids || !s.index || !device_none || !s.ps_ops || !s.worker_of || !s.ps_calls || !s.ps_device_of ||
        !s.gen_keys || !s.gen_values || !s.gen_nodes || !hint_of || !s.scoped) {
        PyErr_SetString(PyExc_TypeError, "setter(): every argument is required");
        return NULL;
    }
    if (!PyList_CheckExact(s.names))
        Py_RETURN_NONE;
    s.n = PyList_GET_SIZE(s.names);
    PyObject *result = NULL;
    Out o;
    memset(&o, 0, sizeof o);
    int ok = exact_str_list(s.names, s.n) && exact_str_list(s.ops, s.n) && exact_str_list(s.own, s.n) &&
             PyAnySet_CheckExact(s.ps_ops) && s.ps_tasks > 0 && PyBytes_GET_SIZE(device_none) == s.n &&
             s.inside >= 0 && s.inside <= s.n &&
             (s.gen_values == Py_None || (PyList_CheckExact(s.gen_values) && PyList_GET_SIZE(s.gen_values) == s.n));
    ok = ok && int_array_get(in_start, &s.in_start) && int_array_get(in_src, &s.in_src) &&
         int_array_get(in_slot, &s.in_slot) && s.in_start.len == s.n + 1 && int_array_get(hint_of, &s.hint_of) &&
         s.hint_of.len == s.n;
    if (!ok)
        goto decline;
    s.device_none = (const uint8_t *)PyBytes_AS_STRING(device_none);
    s.initializer = PyUnicode_FromString("/Initializer/");
    s.empty = PyUnicode_New(0, 0);
    s.no_names = PyTuple_New(0);
    size_t n = (size_t)(s.n ? s.n : 1);
    s.targets = PyMem_Malloc(sizeof(int32_t) * n);
    o.devices = PyMem_Calloc(n, sizeof(PyObject *));
    o.rule = PyMem_Calloc(n, 1);  /* RULE_WORKER */
    o.ref_node = PyMem_Malloc(sizeof(int32_t) * n);
    o.ref_target = PyMem_Malloc(sizeof(int32_t) * n);
    o.colocated = PyMem_Malloc(sizeof(int32_t) * n);
    o.calls = PyMem_Malloc(sizeof(int32_t) * n);
    o.pending = PyMem_Malloc(sizeof(int32_t) * n);
    if (s.initializer == NULL || s.empty == NULL || s.no_names == NULL || s.targets == NULL || o.devices == NULL || o.rule == NULL ||
        o.ref_node == NULL || o.ref_target == NULL || o.colocated == NULL || o.calls == NULL ||
        o.pending == NULL) {
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < s.n; i++)
        s.targets[i] = NO_TARGET, o.pending[i] = NO_TARGET;
    int status = colocation_targets(&s);
    if (status == 0)
        status = reimported_initializers(&s);
    long rr_next = 0;
    for (Py_ssize_t i = 0; status == 0 && i < s.n; i++)
        status = i < s.inside ? replay_node(&s, &o, i, &rr_next) : outside_node(&s, &o, i);
    if (status == 0)
        status = resolve_colocated(&s, &o);
    if (status == 0)
        result = setter_result(&s, &o);
    else if (status == DECLINE)
        goto decline;
    goto done;
decline:
    Py_INCREF(Py_None);
    result = Py_None;
done:
    Py_XDECREF(s.initializer);
    Py_XDECREF(s.empty);
    Py_XDECREF(s.no_names);
    PyMem_Free(s.targets);
    PyMem_Free(o.devices);
    PyMem_Free(o.rule);
    PyMem_Free(o.ref_node);
    PyMem_Free(o.ref_target);
    PyMem_Free(o.colocated);
    PyMem_Free(o.calls);
    PyMem_Free(o.pending);
    int_array_release(&s.in_start);
    int_array_release(&s.in_src);
    int_array_release(&s.in_slot);
    int_array_release(&s.hint_of);
    return result;
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
    {"setter", (PyCFunction)(void (*)(void))setter_entry, METH_VARARGS | METH_KEYWORDS, setter_doc},
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
