/*
 * placeviz.placement._setter_kernels: the setter replay in C.
 *
 * Why this exists: the setter (placeviz/placement/setter.py) touches each node from Python at
 * 0.3-3 us per node, most of its time on big graphs. setter() below is the replay
 * (setter.setter_replay) as one whole function: the IR arrays and complete tables go in, the
 * whole result or None (declined: the Python runs from its start) comes out; it runs no Python
 * code of its own and shares no state with the Python path. It is the module's only entry point:
 * the control_flow_ops.group split that follows the replay (setter._split_groups) is Python
 * only, with array passes. Results equal the Python path's, node for node
 * (tests/test_setter_kernels.py runs both).
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
    PyObject *colocation, *colocated_names, *located_ids, *id_of;
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
        PyObject *var = PyObject_CallOneArg(s->id_of, base); /* Graph.id_lookup(): no dict of every name */
        Py_DECREF(base);
        if (var == NULL) {
            status = FAIL;
            break;
        }
        if (var == Py_None) {
            Py_DECREF(var);
            continue;
        }
        Py_ssize_t v;
        int ok = node_id(var, s->n, &v);
        Py_DECREF(var);
        if (!ok) {
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
"       located_ids, id_of, device_none, inside, ps_ops, ps_tasks, graph_as_default, merge_devices,\n"
"       ps_present, worker_of, ps_calls, ps_device_of, generator_keys, generator_values,\n"
"       generator_nodes, hint_of, scoped) -> (devices, rule, reference, strategy_calls) or None\n"
"\n"
"setter.setter_replay with the round-robin strategy, as one function\n"
"(see setter.native_replay, which builds the arguments; id_of is Graph.id_lookup(), called for the\n"
"initializers' variable names). None: declined, run the Python.");

static PyObject *setter_entry(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"names", "ops", "own_devices", "in_start", "in_src", "in_slot", "colocation",
                             "colocated_names", "located_ids", "id_of", "device_none", "inside", "ps_ops",
                             "ps_tasks", "graph_as_default", "merge_devices", "ps_present", "worker_of",
                             "ps_calls", "ps_device_of", "generator_keys", "generator_values",
                             "generator_nodes", "hint_of", "scoped", NULL};
    Setter s;
    memset(&s, 0, sizeof s);
    PyObject *in_start = NULL, *in_src = NULL, *in_slot = NULL, *device_none = NULL, *hint_of = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$OOOOOOO!O!O!OSnOlpppO!O!O!O!OO!OO!", kwlist,
                                     &s.names, &s.ops, &s.own, &in_start, &in_src, &in_slot,
                                     &PyDict_Type, &s.colocation, &PyDict_Type, &s.colocated_names,
                                     &PyDict_Type, &s.located_ids, &s.id_of, &device_none,
                                     &s.inside, &s.ps_ops, &s.ps_tasks, &s.graph_as_default, &s.merge_devices,
                                     &s.ps_present, &PyDict_Type, &s.worker_of, &PyDict_Type, &s.ps_calls,
                                     &PyDict_Type, &s.ps_device_of, &PyDict_Type, &s.gen_keys, &s.gen_values,
                                     &PyDict_Type, &s.gen_nodes, &hint_of, &PyDict_Type, &s.scoped))
        return NULL;
    if (!s.names || !s.ops || !s.own || !in_start || !in_src || !in_slot || !s.colocation || !s.colocated_names ||
        !s.located_ids || !s.id_of || !device_none || !s.ps_ops || !s.worker_of || !s.ps_calls || !s.ps_device_of ||
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


static PyMethodDef methods[] = {
    {"setter", (PyCFunction)(void (*)(void))setter_entry, METH_VARARGS | METH_KEYWORDS, setter_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "placeviz.placement._setter_kernels",
    "The setter replay in C, one whole function (see placeviz/placement/setter.py).", -1, methods,
};

PyMODINIT_FUNC PyInit__setter_kernels(void)
{
    return PyModule_Create(&module);
}
