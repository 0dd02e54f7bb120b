/*
 * placeviz._partition_kernels: the partitioner's cut-edge loop as one whole function, in C.
 *
 * Why this exists: at 200k nodes a train step cuts about 29k edges and adds 37k nodes and 14k
 * transfer records. Done in Python (_Partitioner._split_originals and _cut_dst in
 * placeviz/partition/, which stay the specification and the fallback) that loop was most of the
 * time of a partition, and most of that was interpreter overhead: tuples for dict keys, f-strings,
 * attribute loads, _New.__init__, the transfer dicts.
 *
 * split_originals is a whole-function boundary, as CPython's _json is for json: it takes the
 * level's cut edges and the IR arrays by keyword, does the whole loop of _split_originals (every
 * group of edges into one original node, through the same steps as _cut_dst: shared receives,
 * host-memory sends and receives, ctrl Const/Identity for control edges, ref-typed sources whose
 * receives wait for the destination's other inputs) and returns everything it made. It changes
 * nothing it is given and never hands work back midway: it either returns the whole result or
 * declines (None) before doing anything, on an argument of another kind or a destination that a
 * while loop's control loop gates; then the Python function runs from its start.
 * The transfers it made come back as one list per column of
 * placeviz.partition.transfers.TransferTable (no dict per transfer: the readers that run on every
 * command read columns).
 *
 * Facts that need protobufs or the op table come as tables made once per call by the Python
 * methods the specification calls, and read here without calling back into Python: per node of
 * the edges' ends a row (row_of, rows: _MemoryTypes.fact_row: io types, memory type of each input
 * and output), the static shape of each (origin, slot) a transfer can name (shape_keys, sorted
 * int64 keys origin << 32 | slot, and shape_values, one shape each:
 * _GraphPartition.shape), and the dtype sizes and names (DTYPE_SIZE, dtype_name). The rules
 * stay in Python; what is left here is the loop (and out_host of an added node, three lines of
 * placeviz/partition/memory_types.py).
 *
 * Four small helpers: index_codes, attr_ints and input_sources (int32 arrays of dict values,
 * attributes and the added nodes' input sources, for np.fromiter over 1M items) and reach (the
 * reverse walk of a run, placeviz/closure.py reverse_closure, a whole function too: it returns the
 * mask or False). One more, not the partitioner's but as
 * small: bucket_by_component, the loop of placeviz/render/collapse.py's function of that name
 * (the views' name-scope buckets, read from the names' characters without splitting them).
 *
 * The results equal the Python code's, field for field (tests/test_partition_kernels.py compares
 * the whole partition both ways). Every index into a list or buffer is bounds-checked: a bad index
 * raises IndexError (split_originals) or declines (the helpers).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define CONTROL (-1)
#define REF_OFFSET 100
#define NEW_FIELDS 13 /* slots of partition._New */

/* Interned strings: attribute names of _New, transfer keys, op names and kinds. */
static PyObject *s_dev, *s_inputs, *s_name, *s_origin, *s_oslot, *s_dtype;
static PyObject *s_send_op, *s_hostsend_op, *s_recv_op, *s_hostrecv_op, *s_const_op, *s_identity_op;
static PyObject *s_kind_send, *s_kind_recv, *s_ctrl_const, *s_ctrl_identity;
static PyObject *s_kind, *s_copy_of, *s_op, *s_replicate;
static PyObject *s_control;
/* The columns of placeviz.partition.transfers.TransferTable (COLUMNS), in its order: a transfer is
 * one item appended to each. */
enum { T_ORIGIN, T_SRC, T_SLOT, T_SRC_DEV, T_DST_DEV, T_DTYPE, T_SHAPE, T_BYTES, T_SEND, T_RECV, T_SEND_OP,
       T_RECV_OP, T_TENSOR_NAME, T_DST, T_COLUMNS };

typedef struct {
    /* split_originals' keyword arguments (parse_args), read only */
    PyObject *pos_l, *src_l, *slot_l, *dst_l; /* the cut edges into original nodes, in order */
    Py_ssize_t n, level;
    PyObject *part, *is_cpu, *dev_task, *dev_names, *dev_type, *dev_l, *names, *ops, *old_added, *cloops;
    PyObject *rows, *shape_values, *dtype_sizes, *dtype_names; /* the fact tables (see fact_row, shape_of) */
    Py_buffer shape_keys; /* int64 origin << 32 | slot, ascending: the key of each of shape_values */
    PyObject *new_type, *suffix;
    Py_buffer row_of; /* int32 per original node: its row in rows, -1 none */
    Py_buffer rank, in_start; /* int64 client order per node; int32 CSR input starts */
    Py_buffer e_src, e_slot; /* int32 current inputs of every edge (a ref group reads them all) */
    PyObject *counters_in, *new_args, *new_constants; /* copied or read once, never changed */
    Py_ssize_t base; /* len(old_added): the first new node is n + base */
    /* owned by the call: its result */
    PyObject *added, *transfers, *counters, *dup, *recheck;
    /* the rewritten inputs (edge position, new source, new slot): at most one per cut edge, as arrays */
    int64_t *w_pos;
    int32_t *w_src, *w_slot;
    Py_ssize_t n_writes, cap_writes;
    PyObject *columns[T_COLUMNS]; /* the transfers' columns (transfers: the tuple of them) */
    int new_fast; /* see add_node and new_slots */
    PyObject *new_slots[NEW_FIELDS], *new_values;
} Ctx;

/* The added node with id n + idx: one the caller had (old_added) or one made by this call. Borrowed. */
static PyObject *added_node(Ctx *c, Py_ssize_t idx);

/* ------------------------------------------------------------------ small helpers */

/* list[i] (borrowed), IndexError when out of range. */
static PyObject *item(PyObject *list, Py_ssize_t i)
{
    if (i < 0 || i >= PyList_GET_SIZE(list)) {
        PyErr_SetString(PyExc_IndexError, "_partition_kernels: index out of range");
        return NULL;
    }
    return PyList_GET_ITEM(list, i);
}

/* list[i] as a C integer; -1 with an exception set on error (callers check PyErr_Occurred). */
static int append_new_ref(PyObject *list, PyObject *o)
{
    if (o == NULL)
        return -1;
    int rc = PyList_Append(list, o);
    Py_DECREF(o);
    return rc;
}

static int append_ssize(PyObject *list, Py_ssize_t v)
{
    return append_new_ref(list, PyLong_FromSsize_t(v));
}

/* The fact row of original node i (_MemoryTypes.fact_row): a 4-tuple of tuples (input types,
 * output types, input memory, output memory). Borrowed; NULL with an exception when i has no row
 * (the caller's table lacks a node it had to hold) or the row is of another kind. */
static PyObject *fact_row(Ctx *c, Py_ssize_t i)
{
    if (i < 0 || i >= c->n || i >= c->row_of.len / 4) {
        PyErr_SetString(PyExc_IndexError, "_partition_kernels: node out of range");
        return NULL;
    }
    int32_t r = ((const int32_t *)c->row_of.buf)[i];
    if (r < 0 || r >= PyList_GET_SIZE(c->rows)) {
        PyErr_Format(PyExc_ValueError, "_partition_kernels: node %zd has no fact row", i);
        return NULL;
    }
    PyObject *row = PyList_GET_ITEM(c->rows, r);
    int ok = PyTuple_CheckExact(row) && PyTuple_GET_SIZE(row) == 4;
    for (Py_ssize_t f = 0; ok && f < 4; f++)
        ok = PyTuple_CheckExact(PyTuple_GET_ITEM(row, f));
    if (!ok) {
        PyErr_SetString(PyExc_TypeError, "_partition_kernels: a fact row is not four tuples");
        return NULL;
    }
    return row;
}

/* Field f of node i's fact row at position k: borrowed; Py_None when k is beyond the field; NULL
 * on error. */
static PyObject *row_item(Ctx *c, Py_ssize_t i, Py_ssize_t f, Py_ssize_t k)
{
    PyObject *row = fact_row(c, i);
    if (row == NULL)
        return NULL;
    PyObject *field = PyTuple_GET_ITEM(row, f);
    return k >= 0 && k < PyTuple_GET_SIZE(field) ? PyTuple_GET_ITEM(field, k) : Py_None;
}

/* _Partitioner.out_type(i, slot) for a data edge: an added node's dtype, else output `slot` of
 * the node's io types, 0 when the op is unknown or has no such output. New reference. */
static PyObject *out_type(Ctx *c, PyObject *src, Py_ssize_t i, PyObject *slot, Py_ssize_t sl)
{
    (void)src;
    (void)slot;
    if (i >= c->n) {
        PyObject *a = added_node(c, i - c->n);
        return a == NULL ? NULL : PyObject_GetAttr(a, s_dtype);
    }
    PyObject *t = row_item(c, i, 1, sl);
    if (t == NULL)
        return NULL;
    return t == Py_None ? PyLong_FromLong(0) : Py_NewRef(t);
}

/* _Partitioner.in_type(i, idx) of an original node: input idx of its io types, 0 when unknown. New
 * reference. */
static PyObject *in_type(Ctx *c, Py_ssize_t i, Py_ssize_t idx)
{
    PyObject *t = row_item(c, i, 0, idx);
    if (t == NULL)
        return NULL;
    return t == Py_None ? PyLong_FromLong(0) : Py_NewRef(t);
}

/* _GraphPartition.shape(origin, oslot), from the table the caller made of it (a binary search of
 * shape_keys: no tuple key and dict per transfer). New reference; KeyError when the table lacks it. */
static PyObject *shape_of(Ctx *c, Py_ssize_t origin, Py_ssize_t oslot)
{
    if (origin >= 0 && oslot >= 0 && oslot <= 0xFFFFFFFF) {
        const int64_t *keys = c->shape_keys.buf, key = ((int64_t)origin << 32) | (int64_t)oslot;
        Py_ssize_t lo = 0, hi = c->shape_keys.len / 8;
        while (lo < hi) {
            Py_ssize_t mid = lo + (hi - lo) / 2;
            if (keys[mid] < key)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (lo < c->shape_keys.len / 8 && keys[lo] == key)
            return Py_NewRef(PyList_GET_ITEM(c->shape_values, lo));
    }
    PyErr_Format(PyExc_KeyError, "_partition_kernels: no shape for (%zd, %zd)", origin, oslot);
    return NULL;
}

/* dtype in _ALWAYS_ON_HOST (DT_STRING, its ref, DT_RESOURCE): 1, 0, or -1 on error. */
static int always_on_host(PyObject *dtype)
{
    long t = PyLong_AsLong(dtype);
    if (t == -1 && PyErr_Occurred())
        return -1;
    return t == 7 || t == 107 || t == 20;
}

/* _MemoryTypes.out_host(i, slot) (out = 1) or in_host(i, idx, dtype) (out = 0): 1, 0, -1 on error.
 * An original node's from its fact row (input memory 2: the edge's dtype `type` decides, as beyond
 * the row); an added node's output as out_host says: a replicated Const's is its original's, a
 * _HostRecv off the CPU is on the host, else its dtype decides. The C cut never asks for the input
 * memory of an added node (its destinations are original nodes). */
static int host_of(Ctx *c, int out, Py_ssize_t i, Py_ssize_t pos, PyObject *type)
{
    if (i >= c->n) {
        PyObject *a = added_node(c, i - c->n);
        if (a == NULL)
            return -1;
        if (!out) {
            PyErr_SetString(PyExc_SystemError, "_partition_kernels: input memory of an added node");
            return -1;
        }
        PyObject *kind = PyObject_GetAttr(a, s_kind);
        if (kind == NULL)
            return -1;
        int replica = PyObject_RichCompareBool(kind, s_replicate, Py_EQ);
        Py_DECREF(kind);
        if (replica < 0)
            return -1;
        if (replica) {
            PyObject *of = PyObject_GetAttr(a, s_copy_of);
            Py_ssize_t of_i = of == NULL ? -1 : PyLong_AsSsize_t(of);
            Py_XDECREF(of);
            if (of_i == -1 && PyErr_Occurred())
                return -1;
            return host_of(c, 1, of_i, pos, NULL);
        }
        PyObject *dev = PyObject_GetAttr(a, s_dev), *op = NULL;
        Py_ssize_t dev_i = dev == NULL ? -1 : PyLong_AsSsize_t(dev);
        Py_XDECREF(dev);
        PyObject *cpu = dev_i == -1 && PyErr_Occurred() ? NULL : item(c->is_cpu, dev_i);
        if (cpu == NULL)
            return -1;
        if (cpu != Py_True) {
            if ((op = PyObject_GetAttr(a, s_op)) == NULL)
                return -1;
            int hostrecv = PyObject_RichCompareBool(op, s_hostrecv_op, Py_EQ);
            Py_DECREF(op);
            if (hostrecv != 0)
                return hostrecv;
        }
        PyObject *t = PyObject_GetAttr(a, s_dtype);
        int rc = t == NULL ? -1 : always_on_host(t);
        Py_XDECREF(t);
        return rc;
    }
    PyObject *v = row_item(c, i, out ? 3 : 2, pos);
    if (v == NULL)
        return -1;
    if (v == Py_None) /* beyond the row: an output of type 0 is not on the host; an input's dtype decides */
        return out ? 0 : always_on_host(type);
    long t = PyLong_AsLong(v);
    if (t == -1 && PyErr_Occurred())
        return -1;
    return !out && t == 2 ? always_on_host(type) : t != 0;
}

/* [0]: the shape of a control transfer. New reference. */
static PyObject *zero_shape(void)
{
    PyObject *zero = PyLong_FromLong(0), *shape = zero == NULL ? NULL : PyList_New(1);
    if (shape == NULL) {
        Py_XDECREF(zero);
        return NULL;
    }
    PyList_SET_ITEM(shape, 0, zero);
    return shape;
}

/* bytes per step: size * prod(shape) in Python's exact ints, or None when the shape or size is unknown
 * or the product is beyond int64 (an overflow: placeviz.limits.MAX_TENSOR_BYTES, as partition.py's
 * loop). New reference. */
static PyObject *nbytes_of(PyObject *shape, PyObject *size)
{
    if (shape == Py_None || size == Py_None)
        Py_RETURN_NONE;
    PyObject *fast = PySequence_Fast(shape, "shape is not a sequence");
    if (fast == NULL)
        return NULL;
    Py_ssize_t len = PySequence_Fast_GET_SIZE(fast);
    PyObject **dims = PySequence_Fast_ITEMS(fast);
    for (Py_ssize_t d = 0; d < len; d++) {
        int eq = PyObject_RichCompareBool(dims[d], Py_None, Py_EQ); /* `None in shape` */
        if (eq != 0) {
            Py_DECREF(fast);
            if (eq < 0)
                return NULL;
            Py_RETURN_NONE;
        }
    }
    PyObject *nbytes = size;
    Py_INCREF(nbytes);
    for (Py_ssize_t d = 0; d < len && nbytes != NULL; d++) {
        PyObject *next = PyNumber_Multiply(nbytes, dims[d]);
        Py_DECREF(nbytes);
        nbytes = next;
    }
    Py_DECREF(fast);
    if (nbytes != NULL && PyLong_Check(nbytes)) {
        int overflow;
        long long v = PyLong_AsLongLongAndOverflow(nbytes, &overflow);
        if (v == -1 && PyErr_Occurred()) {
            Py_DECREF(nbytes);
            return NULL;
        }
        if (overflow > 0) {
            Py_DECREF(nbytes);
            Py_RETURN_NONE;
        }
    }
    return nbytes;
}

/* _New(name, op, dev, inputs, kind, origin, oslot, dtype, major, minor[, meta]); steals `name`
 * and `inputs`, appended to `added`. 0 or -1. Calling the class runs its Python __init__, which is
 * a good part of the cost of a transfer; when the class is the plain slotted class that
 * partition.py declares (_NEW_ARGS, _NEW_CONSTANTS, see new_slots), the object is allocated and
 * its slots are set through their member descriptors here instead, to the same values. */
static int add_node(Ctx *c, PyObject *name, PyObject *op, PyObject *dev, PyObject *inputs, PyObject *kind,
                    PyObject *origin, PyObject *oslot, PyObject *dtype, PyObject *major, Py_ssize_t minor,
                    PyObject *meta)
{
    PyObject *minor_o = PyLong_FromSsize_t(minor);
    PyObject *node = NULL;
    if (name != NULL && inputs != NULL && minor_o != NULL) {
        PyObject *args[11] = {name, op, dev, inputs, kind, origin, oslot, dtype, major, minor_o, meta};
        if (c->new_fast) {
            PyTypeObject *tp = (PyTypeObject *)c->new_type;
            args[10] = meta != NULL ? meta : Py_None; /* __init__'s default */
            node = tp->tp_alloc(tp, 0);
            for (int k = 0; node != NULL && k < NEW_FIELDS; k++) {
                PyObject *d = c->new_slots[k], *v = k < 11 ? args[k] : PyTuple_GET_ITEM(c->new_values, k - 11);
                if (Py_TYPE(d)->tp_descr_set(d, node, v) < 0)
                    Py_CLEAR(node);
            }
        } else {
            node = PyObject_Vectorcall(c->new_type, args, meta != NULL ? 11 : 10, NULL);
        }
    }
    Py_XDECREF(name);
    Py_XDECREF(inputs);
    Py_XDECREF(minor_o);
    return append_new_ref(c->added, node);
}

/* The member descriptors of _New's slots, in the order of _NEW_ARGS then _NEW_CONSTANTS (their
 * values in c->new_values), when the class is exactly a plain slotted class with those 13 slots
 * and object's __new__ (so that allocating and setting every slot makes the same object as calling
 * it). 1 if so; 0 (no exception) if not, and the class is called instead. */
static int new_slots(Ctx *c, PyObject *arg_names, PyObject *constants)
{
    PyTypeObject *tp = (PyTypeObject *)c->new_type;
    if (!PyTuple_CheckExact(arg_names) || PyTuple_GET_SIZE(arg_names) != 11 || !PyTuple_CheckExact(constants) ||
        PyTuple_GET_SIZE(constants) != NEW_FIELDS - 11 || tp->tp_new != PyBaseObject_Type.tp_new ||
        tp->tp_dictoffset != 0 || tp->tp_weaklistoffset != 0 || tp->tp_alloc == NULL ||
        tp->tp_basicsize != PyBaseObject_Type.tp_basicsize + NEW_FIELDS * (Py_ssize_t)sizeof(PyObject *))
        return 0;
    c->new_values = PyTuple_New(NEW_FIELDS - 11);
    if (c->new_values == NULL) {
        PyErr_Clear();
        return 0;
    }
    for (int k = 0; k < NEW_FIELDS; k++) {
        PyObject *name = k < 11 ? PyTuple_GET_ITEM(arg_names, k) : NULL;
        if (k >= 11) {
            PyObject *pair = PyTuple_GET_ITEM(constants, k - 11);
            if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2)
                return 0;
            name = PyTuple_GET_ITEM(pair, 0);
            Py_INCREF(PyTuple_GET_ITEM(pair, 1));
            PyTuple_SET_ITEM(c->new_values, k - 11, PyTuple_GET_ITEM(pair, 1));
        }
        if (!PyUnicode_CheckExact(name))
            return 0;
        /* the class's own attribute (not an instance's), a slot's member descriptor */
        PyObject *d = PyDict_GetItemWithError(tp->tp_dict, name);
        if (d == NULL || !Py_IS_TYPE(d, &PyMemberDescr_Type) || Py_TYPE(d)->tp_descr_set == NULL) {
            PyErr_Clear();
            return 0;
        }
        for (int j = 0; j < k; j++)
            if (c->new_slots[j] == d)
                return 0;
        c->new_slots[k] = d; /* borrowed: the class holds it */
    }
    return 1;
}

/* [[a, b]] with a, b ints given as objects or C values (fresh lists: the caller mutates inputs). */
static PyObject *one_input(PyObject *a, PyObject *b)
{
    PyObject *pair = PyList_New(2);
    if (pair == NULL)
        return NULL;
    Py_INCREF(a);
    Py_INCREF(b);
    PyList_SET_ITEM(pair, 0, a);
    PyList_SET_ITEM(pair, 1, b);
    PyObject *outer = PyList_New(1);
    if (outer == NULL) {
        Py_DECREF(pair);
        return NULL;
    }
    PyList_SET_ITEM(outer, 0, pair);
    return outer;
}

static PyObject *one_input_ids(Py_ssize_t a, Py_ssize_t b)
{
    PyObject *ao = PyLong_FromSsize_t(a), *bo = PyLong_FromSsize_t(b), *res = NULL;
    if (ao != NULL && bo != NULL)
        res = one_input(ao, bo);
    Py_XDECREF(ao);
    Py_XDECREF(bo);
    return res;
}

/* Input r (an edge position) now reads (src, slot): one more row of the rewritten inputs. 0 or -1. */
static int add_write(Ctx *c, Py_ssize_t r, Py_ssize_t src, Py_ssize_t slot)
{
    if (c->n_writes >= c->cap_writes || src < INT32_MIN || src > INT32_MAX || slot < INT32_MIN ||
        slot > INT32_MAX) {
        PyErr_SetString(PyExc_SystemError, "_partition_kernels: a rewritten input out of range");
        return -1;
    }
    c->w_pos[c->n_writes] = r;
    c->w_src[c->n_writes] = (int32_t)src;
    c->w_slot[c->n_writes] = (int32_t)slot;
    c->n_writes++;
    return 0;
}

/* ------------------------------------------------------------------ names */

/* Decimal digits of v into buf (at least 24 bytes); returns the length. */
static Py_ssize_t format_int(char *buf, Py_ssize_t v)
{
    char tmp[24];
    Py_ssize_t len = 0;
    size_t u = v < 0 ? (size_t)0 - (size_t)v : (size_t)v;
    do {
        tmp[len++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    Py_ssize_t out = 0;
    if (v < 0)
        buf[out++] = '-';
    while (len)
        buf[out++] = tmp[--len];
    return out;
}

static int is_ascii(PyObject *s)
{
#if PY_VERSION_HEX < 0x030C0000
    if (PyUnicode_READY(s) < 0) {
        PyErr_Clear();
        return 0;
    }
#endif
    return PyUnicode_IS_ASCII(s);
}

/* f"{a}{lit}{b}{num}" (b may be NULL); names are ASCII in practice, built here without
 * PyUnicode_FromFormat (which formats ints through vsprintf), else by PyUnicode_FromFormat. */
static PyObject *name_num(PyObject *a, const char *lit, PyObject *b, Py_ssize_t num)
{
    if (!PyUnicode_Check(a) || (b != NULL && !PyUnicode_Check(b))) {
        PyErr_SetString(PyExc_TypeError, "_partition_kernels: names must be str");
        return NULL;
    }
    /* str subclasses, non-ASCII names: the general path */
    if (!PyUnicode_CheckExact(a) || (b != NULL && !PyUnicode_CheckExact(b)) || !is_ascii(a) ||
        (b != NULL && !is_ascii(b)))
        return b != NULL ? PyUnicode_FromFormat("%U%s%U%zd", a, lit, b, num)
                         : PyUnicode_FromFormat("%U%s%zd", a, lit, num);
    char digits[24];
    Py_ssize_t nd = format_int(digits, num), la = PyUnicode_GET_LENGTH(a), ll = (Py_ssize_t)strlen(lit);
    Py_ssize_t lb = b != NULL ? PyUnicode_GET_LENGTH(b) : 0;
    PyObject *out = PyUnicode_New(la + ll + lb + nd, 127);
    if (out == NULL)
        return NULL;
    char *p = (char *)PyUnicode_DATA(out);
    memcpy(p, PyUnicode_DATA(a), la);
    memcpy(p + la, lit, ll);
    if (lb)
        memcpy(p + la + ll, PyUnicode_DATA(b), lb);
    memcpy(p + la + ll + lb, digits, nd);
    return out;
}

/* f"edge_{num}_{name}" */
static PyObject *edge_name(Py_ssize_t num, PyObject *name)
{
    if (!PyUnicode_Check(name)) {
        PyErr_SetString(PyExc_TypeError, "_partition_kernels: names must be str");
        return NULL;
    }
    if (!PyUnicode_CheckExact(name) || !is_ascii(name))
        return PyUnicode_FromFormat("edge_%zd_%U", num, name);
    char digits[24];
    Py_ssize_t nd = format_int(digits, num), ln = PyUnicode_GET_LENGTH(name);
    PyObject *out = PyUnicode_New(5 + nd + 1 + ln, 127);
    if (out == NULL)
        return NULL;
    char *p = (char *)PyUnicode_DATA(out);
    memcpy(p, "edge_", 5);
    memcpy(p + 5, digits, nd);
    p[5 + nd] = '_';
    memcpy(p + 6 + nd, PyUnicode_DATA(name), ln);
    return out;
}

/* ------------------------------------------------------------------ the loop */

/* One cut edge into a destination that no control loop gates (the body of _cut_dst's loop for
 * a cut entry): the receive already made for this tensor and partition, else a new _Send/_Recv pair
 * (with a ctrl Const and an Identity for a control edge) and its transfer record. `type_q`: the
 * edge's dtype (a ref source's base type), 0 for a control edge. `dst_cpu`: dst is on a CPU (its
 * receives are then shared whatever the input's memory type). `plain`: a CPU destination and no
 * ref source in the group (else the edge counter moves for every transfer, see _cut_dst); `ref`:
 * this source is ref-typed (its receive is never shared). *out: the new reference the edge now reads (the
 * receive, or the Identity of a control edge); *recv: the receive's id, -1 when shared. 0 or -1. */
static int cut_edge(Ctx *c, Py_ssize_t q, PyObject *type_q, PyObject *dst, Py_ssize_t dst_i, PyObject *dst_dev,
                    Py_ssize_t dst_dev_i, PyObject *dpart, PyObject *dst_name, PyObject *task, PyObject *major,
                    Py_ssize_t *seq, Py_ssize_t *counter_s,
                    Py_ssize_t *edge_id, int dst_cpu, int plain, int ref, PyObject **out_ref, Py_ssize_t *recv_id)
{
    *out_ref = NULL;
    *recv_id = -1;
    PyObject *src = PyList_GET_ITEM(c->src_l, q), *slot = PyList_GET_ITEM(c->slot_l, q);
    PyObject *r = PyList_GET_ITEM(c->pos_l, q);
    Py_ssize_t src_i = PyLong_AsSsize_t(src), sl = PyLong_AsSsize_t(slot), r_i = PyLong_AsSsize_t(r);
    if (PyErr_Occurred())
        return -1;
    int data = sl != CONTROL;
    PyObject *key = NULL, *src_dev = NULL, *src_name = NULL, *origin = NULL, *oslot = NULL, *tname = NULL;
    PyObject *meta = NULL, *dtype = NULL, *shape = NULL, *nbytes = NULL, *out = NULL;
    PyObject *send_name = NULL, *recv_name = NULL, *size = NULL, *dname = NULL, *origin_name = NULL;
    PyObject *send_op, *recv_op, *slot_out;
    Py_ssize_t out_i = -1; /* the node the edge reads now (out) */
    int rc = -1;

    /* the receive is shared per (source, slot, destination partition, on host): a CPU destination
     * is host memory; elsewhere the input's memory type decides (control edges: not on host) */
    int host_recv = 0;
    Py_ssize_t idx = r_i - ((const int32_t *)c->in_start.buf)[dst_i];
    if (data) {
        dtype = Py_NewRef(type_q);
        int truth = PyObject_IsTrue(dtype);
        if (truth < 0)
            goto done;
        if (!truth) { /* dtype = self.in_type(dst, idx) or DT_FLOAT */
            PyObject *t = in_type(c, dst_i, idx);
            if (t == NULL)
                goto done;
            truth = PyObject_IsTrue(t);
            if (truth < 0) {
                Py_DECREF(t);
                goto done;
            }
            if (truth) {
                Py_SETREF(dtype, t);
            } else {
                Py_DECREF(t);
                Py_SETREF(dtype, PyLong_FromLong(1));
                if (dtype == NULL)
                    goto done;
            }
        }
        host_recv = host_of(c, 0, dst_i, idx, dtype);
        if (host_recv < 0)
            goto done;
    }
    key = PyTuple_Pack(4, src, slot, dpart, dst_cpu || (data && host_recv) ? Py_True : Py_False);
    if (key == NULL)
        goto done;
    PyObject *hit = PyDict_GetItemWithError(c->dup, key);
    if (hit != NULL) { /* the receive already made for this tensor and partition */
        *out_ref = Py_NewRef(hit);
        Py_ssize_t hit_i = PyLong_AsSsize_t(hit);
        if (hit_i == -1 && PyErr_Occurred())
            goto done;
        rc = add_write(c, r_i, hit_i, data ? 0 : sl);
        goto done;
    }
    if (PyErr_Occurred())
        goto done;

    if (src_i < c->n) {
        PyObject *d = item(c->dev_l, src_i), *nm = item(c->names, src_i);
        if (d == NULL || nm == NULL)
            goto done;
        src_dev = Py_NewRef(d);
        src_name = Py_NewRef(nm);
        origin = src;
        oslot = slot;
        Py_INCREF(origin);
        Py_INCREF(oslot);
    } else {
        PyObject *a = added_node(c, src_i - c->n);
        if (a == NULL || (src_dev = PyObject_GetAttr(a, s_dev)) == NULL ||
            (src_name = PyObject_GetAttr(a, s_name)) == NULL || (origin = PyObject_GetAttr(a, s_origin)) == NULL)
            goto done;
        Py_ssize_t ao = PyLong_AsSsize_t(origin);
        if (ao == -1 && PyErr_Occurred())
            goto done;
        if (ao < 0) {
            Py_SETREF(origin, Py_NewRef(src));
            oslot = Py_NewRef(slot);
        } else if (!data) {
            oslot = Py_NewRef(slot);
        } else if ((oslot = PyObject_GetAttr(a, s_oslot)) == NULL) {
            goto done;
        }
    }
    Py_ssize_t src_dev_i = PyLong_AsSsize_t(src_dev), origin_i = PyLong_AsSsize_t(origin);
    if (PyErr_Occurred())
        goto done;

    Py_ssize_t cnt;
    if (c->level == 1) {
        PyObject *have = PyDict_GetItemWithError(c->counters, task);
        if (have == NULL && PyErr_Occurred())
            goto done;
        cnt = have == NULL ? 0 : PyLong_AsSsize_t(have);
        if (cnt == -1 && PyErr_Occurred())
            goto done;
        *edge_id += 1;
        tname = edge_name(*edge_id, src_name);
    } else {
        cnt = *counter_s;
        if (!plain)
            *edge_id += 1;
        tname = edge_name(r_i, src_name);
    }
    if (tname == NULL)
        goto done;
    meta = PyTuple_Pack(6, tname, src_dev, dst_dev, src_name, dst_name, Py_False);
    if (meta == NULL)
        goto done;

    /* a transfer inside one partition (a memory-type change on a device): the receive waits for
     * its send (a control input) */
    PyObject *src_part = item(c->part, src_dev_i);
    int same_part = src_part == NULL ? -1 : PyObject_RichCompareBool(src_part, dpart, Py_EQ);
    if (same_part < 0)
        goto done;
    if (data) {
        int host_send = host_of(c, 1, src_i, sl, NULL);
        if (host_send < 0)
            goto done;
        send_op = host_send ? s_hostsend_op : s_send_op;
        recv_op = host_recv ? s_hostrecv_op : s_recv_op;
        send_name = name_num(src_name, "", c->suffix, cnt);
        recv_name = name_num(src_name, "", c->suffix, cnt + 1);
        if (send_name == NULL || recv_name == NULL)
            goto done;
        cnt += 2;
        Py_ssize_t send_id = c->n + c->base + PyList_GET_SIZE(c->added);
        Py_INCREF(send_name);
        if (add_node(c, send_name, send_op, src_dev, one_input(src, slot), s_kind_send, origin, oslot, dtype,
                     major, *seq + 1, meta) < 0)
            goto done;
        Py_INCREF(recv_name);
        if (add_node(c, recv_name, recv_op, dst_dev, same_part ? one_input_ids(send_id, CONTROL) : PyList_New(0),
                     s_kind_recv, origin, oslot, dtype, major, *seq + 2, meta) < 0)
            goto done;
        *seq += 2;
        *recv_id = c->n + c->base + PyList_GET_SIZE(c->added) - 1;
        out_i = *recv_id;
        if ((out = PyLong_FromSsize_t(out_i)) == NULL)
            goto done;
        Py_ssize_t oslot_i = PyLong_AsSsize_t(oslot);
        if (oslot_i == -1 && PyErr_Occurred())
            goto done;
        if (oslot_i == CONTROL) { /* the output of a control transfer's node: _transfer's control case */
            if ((shape = zero_shape()) == NULL || (nbytes = PyLong_FromLong(0)) == NULL)
                goto done;
            slot_out = s_control;
        } else {
            /* dtype_size: DTYPE_SIZE of the base type */
            long dt = PyLong_AsLong(dtype);
            PyObject *base = dt == -1 && PyErr_Occurred() ? NULL : PyLong_FromLong(dt > REF_OFFSET ? dt - REF_OFFSET : dt);
            if (base == NULL)
                goto done;
            size = PyDict_GetItemWithError(c->dtype_sizes, base);
            Py_DECREF(base);
            if (size == NULL && PyErr_Occurred())
                goto done;
            size = Py_NewRef(size != NULL ? size : Py_None);
            if ((shape = shape_of(c, origin_i, oslot_i)) == NULL || (nbytes = nbytes_of(shape, size)) == NULL)
                goto done;
            slot_out = oslot;
        }
    } else {
        PyObject *const_name = name_num(src_name, "/ctrl", c->suffix, cnt);
        send_name = name_num(src_name, "", c->suffix, cnt + 1);
        recv_name = name_num(src_name, "", c->suffix, cnt + 2);
        PyObject *ident_name = name_num(src_name, "", c->suffix, cnt + 3);
        if (const_name == NULL || send_name == NULL || recv_name == NULL || ident_name == NULL) {
            Py_XDECREF(const_name);
            Py_XDECREF(ident_name);
            goto done;
        }
        cnt += 4;
        if ((dtype = PyLong_FromLong(1)) == NULL) { /* DT_FLOAT */
            Py_DECREF(const_name);
            Py_DECREF(ident_name);
            goto done;
        }
        send_op = s_send_op;
        recv_op = s_recv_op;
        Py_ssize_t base_id = c->n + c->base + PyList_GET_SIZE(c->added);
        if (add_node(c, const_name, s_const_op, src_dev, one_input(src, slot), s_ctrl_const, origin, slot, dtype,
                     major, *seq + 1, NULL) < 0) {
            Py_DECREF(ident_name);
            goto done;
        }
        Py_INCREF(send_name);
        if (add_node(c, send_name, send_op, src_dev, one_input_ids(base_id, 0), s_kind_send, origin, oslot, dtype,
                     major, *seq + 2, meta) < 0) {
            Py_DECREF(ident_name);
            goto done;
        }
        Py_INCREF(recv_name);
        if (add_node(c, recv_name, recv_op, dst_dev, same_part ? one_input_ids(base_id + 1, CONTROL) : PyList_New(0),
                     s_kind_recv, origin, oslot, dtype, major, *seq + 3, meta) < 0) {
            Py_DECREF(ident_name);
            goto done;
        }
        if (add_node(c, ident_name, s_identity_op, dst_dev, one_input_ids(base_id + 2, 0), s_ctrl_identity,
                     origin, slot, dtype, major, *seq + 4, NULL) < 0)
            goto done;
        *seq += 4;
        *recv_id = base_id + 2;
        out_i = base_id + 3;
        if ((out = PyLong_FromSsize_t(out_i)) == NULL)
            goto done;
        if ((shape = zero_shape()) == NULL)
            goto done;
        nbytes = PyLong_FromLong(0);
        if (nbytes == NULL)
            goto done;
        slot_out = s_control;
    }
    if (c->level == 1) {
        PyObject *cnt_o = PyLong_FromSsize_t(cnt);
        if (cnt_o == NULL || PyDict_SetItem(c->counters, task, cnt_o) < 0) {
            Py_XDECREF(cnt_o);
            goto done;
        }
        Py_DECREF(cnt_o);
    } else {
        *counter_s = cnt;
    }
    if (add_write(c, r_i, out_i, data ? 0 : sl) < 0 ||
        (!ref && PyDict_SetItem(c->dup, key, out) < 0))
        goto done;
    *out_ref = Py_NewRef(out);

    /* dtype_name(dtype): the table of every DataType value and its ref, else "dtype_<n>" */
    dname = PyDict_GetItemWithError(c->dtype_names, dtype);
    if (dname != NULL) {
        Py_INCREF(dname);
    } else {
        if (PyErr_Occurred() || (dname = PyUnicode_FromFormat("dtype_%S", dtype)) == NULL)
            goto done;
    }
    if (origin_i < c->n) {
        if ((origin_name = item(c->names, origin_i)) == NULL)
            goto done;
        Py_INCREF(origin_name);
    } else {
        PyObject *a = added_node(c, origin_i - c->n);
        if (a == NULL || (origin_name = PyObject_GetAttr(a, s_name)) == NULL)
            goto done;
    }
    /* the transfer's row (TransferTable.append's order) */
    PyObject *row[T_COLUMNS] = {origin, origin_name, slot_out, src_dev, dst_dev, dname, shape, nbytes, send_name,
                                recv_name, send_op, recv_op, tname, dst_name};
    rc = 0;
    for (int k = 0; rc == 0 && k < T_COLUMNS; k++)
        rc = PyList_Append(c->columns[k], row[k]);
done:
    if (rc < 0)
        Py_CLEAR(*out_ref);
    Py_XDECREF(key);
    Py_XDECREF(src_dev);
    Py_XDECREF(src_name);
    Py_XDECREF(origin);
    Py_XDECREF(oslot);
    Py_XDECREF(tname);
    Py_XDECREF(meta);
    Py_XDECREF(dtype);
    Py_XDECREF(shape);
    Py_XDECREF(nbytes);
    Py_XDECREF(out);
    Py_XDECREF(send_name);
    Py_XDECREF(recv_name);
    Py_XDECREF(size);
    Py_XDECREF(dname);
    Py_XDECREF(origin_name);
    return rc;
}

/* A C-contiguous buffer of at least `count` native signed ints of `itemsize` bytes ("i" int32,
 * "l"/"q" int64, maybe with a native-order prefix): 1 (view held) or 0 (not held, no exception). */
static int int_buffer(PyObject *o, Py_buffer *view, Py_ssize_t itemsize, Py_ssize_t count)
{
    if (PyObject_GetBuffer(o, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyErr_Clear();
        memset(view, 0, sizeof(*view));
        return 0;
    }
    const char *f = view->format ? view->format : "B";
    f += (f[0] == '@' || f[0] == '=');
    int ok = view->itemsize == itemsize && view->len / itemsize >= count &&
             (itemsize == 4 ? strcmp(f, "i") == 0 : (strcmp(f, "l") == 0 || strcmp(f, "q") == 0));
    if (!ok) {
        PyBuffer_Release(view);
        memset(view, 0, sizeof(*view));
    }
    return ok;
}

static PyObject *added_node(Ctx *c, Py_ssize_t idx)
{
    return idx < c->base ? item(c->old_added, idx) : item(c->added, idx - c->base);
}

/* Release what parse_args and split_originals took (a view never taken is zeroed: PyBuffer_Release
 * skips it; Py_CLEAR skips NULL). */
static void release_ctx(Ctx *c)
{
    Py_CLEAR(c->new_values);
    PyBuffer_Release(&c->rank);
    PyBuffer_Release(&c->in_start);
    PyBuffer_Release(&c->e_src);
    PyBuffer_Release(&c->e_slot);
    PyBuffer_Release(&c->row_of);
    PyBuffer_Release(&c->shape_keys);
    PyMem_Free(c->w_pos);
    PyMem_Free(c->w_src);
    PyMem_Free(c->w_slot);
    c->w_pos = NULL;
    c->w_src = c->w_slot = NULL;
    PyObject **owned[] = {&c->added, &c->transfers, &c->counters, &c->dup, &c->recheck};
    for (size_t k = 0; k < sizeof(owned) / sizeof(owned[0]); k++)
        Py_CLEAR(*owned[k]);
    for (int k = 0; k < T_COLUMNS; k++)
        Py_CLEAR(c->columns[k]);
}

/* The keywords of split_originals and where each goes in the Ctx (one table, read in one place). */
enum { K_LIST, K_DICT, K_INT, K_STR, K_TYPE, K_TUPLE, K_I32, K_I64 };
typedef struct {
    const char *name;
    int kind;
    size_t offset; /* PyObject * field, Py_ssize_t field (K_INT) or Py_buffer (K_I32/K_I64) */
} Arg;
#define ARG(name, kind, field) {name, kind, offsetof(Ctx, field)}
static const Arg ARGS[] = {
    ARG("pos", K_LIST, pos_l), ARG("src", K_LIST, src_l), ARG("slot", K_LIST, slot_l), ARG("dst", K_LIST, dst_l),
    ARG("n", K_INT, n), ARG("level", K_INT, level), ARG("part", K_LIST, part), ARG("is_cpu", K_LIST, is_cpu),
    ARG("dev_task", K_LIST, dev_task), ARG("dev_names", K_LIST, dev_names), ARG("dev_type", K_LIST, dev_type),
    ARG("dev", K_LIST, dev_l), ARG("names", K_LIST, names), ARG("ops", K_LIST, ops), ARG("added", K_LIST, old_added),
    ARG("cloops", K_DICT, cloops), ARG("row_of", K_I32, row_of), ARG("rows", K_LIST, rows),
    ARG("shape_keys", K_I64, shape_keys), ARG("shape_values", K_LIST, shape_values),
    ARG("dtype_sizes", K_DICT, dtype_sizes), ARG("dtype_names", K_DICT, dtype_names),
    ARG("new_type", K_TYPE, new_type), ARG("suffix", K_STR, suffix), ARG("rank", K_I64, rank),
    ARG("in_start", K_I32, in_start), ARG("e_src", K_I32, e_src), ARG("e_slot", K_I32, e_slot),
    ARG("counters", K_DICT, counters_in), ARG("new_args", K_TUPLE, new_args),
    ARG("new_constants", K_TUPLE, new_constants),
};
#define NARGS (sizeof(ARGS) / sizeof(ARGS[0]))
/* the three counters, read separately: seq, counter_s, edge_id */

/* The keyword arguments into c (borrowed references and buffer views): 1, 0 when a value is not of
 * its kind (decline), -1 on a missing or unknown keyword (TypeError: a caller's mistake, not an
 * input to decline). */
static int parse_args(PyObject *kw, Ctx *c)
{
    memset(c, 0, sizeof(*c));
    Py_ssize_t seen = 0;
    for (size_t k = 0; k < NARGS; k++) {
        PyObject *v = kw == NULL ? NULL : PyDict_GetItemString(kw, ARGS[k].name);
        if (v == NULL) {
            PyErr_Format(PyExc_TypeError, "split_originals() missing keyword argument '%s'", ARGS[k].name);
            return -1;
        }
        seen++;
        char *field = (char *)c + ARGS[k].offset;
        int ok = 1;
        switch (ARGS[k].kind) {
        case K_LIST: ok = PyList_CheckExact(v); break;
        case K_DICT: ok = PyDict_CheckExact(v); break;
        case K_STR: ok = PyUnicode_CheckExact(v); break;
        case K_TYPE: ok = PyType_Check(v); break;
        case K_TUPLE: ok = PyTuple_CheckExact(v); break;
        case K_INT:
            if (!PyLong_CheckExact(v))
                return 0;
            *(Py_ssize_t *)field = PyLong_AsSsize_t(v);
            if (PyErr_Occurred()) {
                PyErr_Clear();
                return 0;
            }
            continue;
        case K_I32:
        case K_I64:
            if (!int_buffer(v, (Py_buffer *)field, ARGS[k].kind == K_I32 ? 4 : 8, 0))
                return 0;
            continue;
        }
        if (!ok)
            return 0;
        *(PyObject **)field = v; /* borrowed: the caller's keywords hold it for the call */
    }
    if (PyDict_GET_SIZE(kw) != seen + 3) {
        PyErr_SetString(PyExc_TypeError, "split_originals() got an unexpected keyword argument");
        return -1;
    }
    Py_ssize_t total = PyList_GET_SIZE(c->pos_l);
    if (PyList_GET_SIZE(c->src_l) != total || PyList_GET_SIZE(c->slot_l) != total ||
        PyList_GET_SIZE(c->dst_l) != total || c->n < 0 || c->rank.len / 8 < c->n || c->in_start.len / 4 < c->n + 1 ||
        c->row_of.len / 4 < c->n || c->shape_keys.len / 8 != PyList_GET_SIZE(c->shape_values) ||
        c->e_slot.len != c->e_src.len)
        return 0;
    c->new_fast = new_slots(c, c->new_args, c->new_constants);
    return 1;
}

/* One group of cut edges [k, j) into original node dst (no control loop gating it): _cut_dst.
 * Without a ref-typed source, each edge in order; with one, every input of dst in order as TF
 * does: the receives of ref sources are not shared and wait (control inputs) for dst's other
 * inputs, which a later pass over the added nodes (recheck) splits again. 0 or -1. */
static int cut_group(Ctx *c, Py_ssize_t k, Py_ssize_t j, PyObject **types, long max_type, Py_ssize_t *seq,
                     Py_ssize_t *counter_s, Py_ssize_t *edge_id)
{
    PyObject *dst = PyList_GET_ITEM(c->dst_l, k);
    Py_ssize_t dst_i = PyLong_AsSsize_t(dst);
    PyObject *dst_dev = item(c->dev_l, dst_i);
    Py_ssize_t dst_dev_i = dst_dev == NULL ? -1 : PyLong_AsSsize_t(dst_dev);
    if (dst_dev_i == -1 && PyErr_Occurred())
        return -1;
    const int64_t *rank = (const int64_t *)c->rank.buf;
    PyObject *dpart = item(c->part, dst_dev_i), *dst_name = item(c->names, dst_i);
    PyObject *task = item(c->dev_task, dst_dev_i);
    if (dpart == NULL || dst_name == NULL || task == NULL)
        return -1;
    PyObject *cpu = item(c->is_cpu, dst_dev_i);
    if (cpu == NULL)
        return -1;
    int dst_cpu = cpu == Py_True;
    PyObject *major = PyLong_FromLongLong(rank[dst_i]);
    if (major == NULL)
        return -1;
    int rc = 0;
    if (max_type <= REF_OFFSET) {
        for (Py_ssize_t q = k; rc == 0 && q < j; q++) {
            PyObject *out;
            Py_ssize_t recv;
            rc = cut_edge(c, q, types[q - k], dst, dst_i, dst_dev, dst_dev_i, dpart, dst_name, task, major,
                          seq, counter_s, edge_id, dst_cpu, dst_cpu, 0, &out, &recv);
            Py_XDECREF(out);
        }
        Py_DECREF(major);
        return rc;
    }
    /* a ref edge: every input of dst, cut or not */
    PyObject *ref_ctrl = PyList_New(0), *ref_recvs = PyList_New(0);
    const int32_t *in_start = c->in_start.buf, *e_src = c->e_src.buf, *e_slot = c->e_slot.buf;
    Py_ssize_t lo = in_start[dst_i], hi = in_start[dst_i + 1];
    if (ref_ctrl == NULL || ref_recvs == NULL || lo < 0 || hi < lo || hi > c->e_src.len / 4) {
        if (ref_ctrl != NULL && ref_recvs != NULL)
            PyErr_SetString(PyExc_IndexError, "_partition_kernels: input out of range");
        rc = -1;
    }
    /* which inputs are cut: the group's edges in input order (as split gives them) are met one
     * after the other; in any other order, searched */
    int ascending = 1;
    for (Py_ssize_t q = k + 1; rc == 0 && ascending && q < j; q++) {
        Py_ssize_t a = PyLong_AsSsize_t(PyList_GET_ITEM(c->pos_l, q - 1));
        Py_ssize_t b = PyLong_AsSsize_t(PyList_GET_ITEM(c->pos_l, q));
        if (PyErr_Occurred())
            rc = -1;
        ascending = a < b;
    }
    Py_ssize_t next = k;
    for (Py_ssize_t r = lo; rc == 0 && r < hi; r++) {
        Py_ssize_t q = ascending ? next : k, p = -1;
        for (; q < j; q++) {
            p = PyLong_AsSsize_t(PyList_GET_ITEM(c->pos_l, q));
            if ((p == -1 && PyErr_Occurred()) || p == r || ascending)
                break;
        }
        if (p == -1 && PyErr_Occurred()) {
            rc = -1;
            break;
        }
        if (q < j && p != r)
            q = j;
        if (q < j && ascending)
            next++;
        if (q == j) { /* not cut: a control input of the ref receives unless it is a ref itself */
            PyObject *s_o = PyLong_FromLong(e_src[r]), *sl_o = PyLong_FromLong(e_slot[r]), *t = NULL;
            if (s_o != NULL && sl_o != NULL)
                t = e_slot[r] == CONTROL ? PyLong_FromLong(0) : out_type(c, s_o, e_src[r], sl_o, e_slot[r]);
            long tv = t == NULL ? -1 : PyLong_AsLong(t);
            if (t == NULL || (tv == -1 && PyErr_Occurred()))
                rc = -1;
            else if (tv <= REF_OFFSET)
                rc = PyList_Append(ref_ctrl, s_o);
            Py_XDECREF(s_o);
            Py_XDECREF(sl_o);
            Py_XDECREF(t);
            continue;
        }
        long tv = PyLong_AsLong(types[q - k]);
        if (tv == -1 && PyErr_Occurred()) {
            rc = -1;
            break;
        }
        int is_ref = tv > REF_OFFSET;
        PyObject *dtype = is_ref ? PyLong_FromLong(tv - REF_OFFSET) : Py_NewRef(types[q - k]);
        PyObject *out = NULL;
        Py_ssize_t recv = -1;
        if (dtype == NULL)
            rc = -1;
        else
            rc = cut_edge(c, q, dtype, dst, dst_i, dst_dev, dst_dev_i, dpart, dst_name, task, major,
                          seq, counter_s, edge_id, dst_cpu, 0, is_ref, &out, &recv);
        Py_XDECREF(dtype);
        if (rc == 0)
            rc = is_ref && recv >= 0 ? append_ssize(ref_recvs, recv) : PyList_Append(ref_ctrl, out);
        Py_XDECREF(out);
    }
    for (Py_ssize_t x = 0; rc == 0 && x < PyList_GET_SIZE(ref_recvs); x++) {
        PyObject *recv = PyList_GET_ITEM(ref_recvs, x);
        Py_ssize_t recv_i = PyLong_AsSsize_t(recv);
        PyObject *node = recv_i == -1 && PyErr_Occurred() ? NULL : added_node(c, recv_i - c->n);
        PyObject *inputs = node == NULL ? NULL : PyObject_GetAttr(node, s_inputs);
        if (inputs == NULL || !PyList_Check(inputs)) {
            if (inputs != NULL)
                PyErr_SetString(PyExc_TypeError, "_partition_kernels: inputs is not a list");
            Py_XDECREF(inputs);
            rc = -1;
            break;
        }
        for (Py_ssize_t y = 0; rc == 0 && y < PyList_GET_SIZE(ref_ctrl); y++) {
            PyObject *ctl = PyLong_FromLong(CONTROL), *pair = ctl == NULL ? NULL : PyList_New(2);
            if (pair != NULL) { /* [x, CONTROL] */
                PyList_SET_ITEM(pair, 0, Py_NewRef(PyList_GET_ITEM(ref_ctrl, y)));
                PyList_SET_ITEM(pair, 1, Py_NewRef(ctl));
            }
            rc = append_new_ref(inputs, pair);
            Py_XDECREF(ctl);
        }
        Py_DECREF(inputs);
        if (rc == 0)
            rc = PyList_Append(c->recheck, recv);
    }
    Py_XDECREF(ref_ctrl);
    Py_XDECREF(ref_recvs);
    Py_DECREF(major);
    return rc;
}

PyDoc_STRVAR(split_originals_doc,
"split_originals(**arrays) -> dict or None\n\n"
"The whole of _GraphPartition._split_originals for one level (placeviz/partition/graph_partition.py): every group of\n"
"cut edges into one original node, in order, as _cut_dst does it. Keyword arguments only (see\n"
"_Partitioner._split_originals_c); nothing given is changed. Returns the new nodes (`added`, to\n"
"append), `transfers` (a tuple of TransferTable's columns, to extend it), the rewritten edges\n"
"(`w_pos` int64, `w_src` and `w_slot` int32, as bytearrays: one row per rewritten input), the shared receives\n"
"(`dup`), the counters (`counters`, `counter_s`, `seq`, `edge_id`) and the receives to split again\n"
"(`recheck`). None, before doing anything, when an argument is not of its kind or a control\n"
"loop gates a destination: then the Python function runs from its start.");

static PyObject *split_originals(PyObject *self, PyObject *args, PyObject *kw)
{
    if (PyTuple_GET_SIZE(args)) {
        PyErr_SetString(PyExc_TypeError, "split_originals() takes keyword arguments only");
        return NULL;
    }
    Ctx c;
    int parsed = parse_args(kw, &c);
    if (parsed <= 0) {
        release_ctx(&c);
        if (parsed < 0)
            return NULL;
        Py_RETURN_NONE;
    }
    Py_ssize_t seq, counter_s, edge_id;
    PyObject *seq_o = PyDict_GetItemString(kw, "seq"), *cs_o = PyDict_GetItemString(kw, "counter_s");
    PyObject *eid_o = PyDict_GetItemString(kw, "edge_id");
    if (seq_o == NULL || cs_o == NULL || eid_o == NULL) {
        release_ctx(&c);
        PyErr_SetString(PyExc_TypeError, "split_originals() needs seq, counter_s and edge_id");
        return NULL;
    }
    seq = PyLong_AsSsize_t(seq_o);
    counter_s = PyLong_AsSsize_t(cs_o);
    edge_id = PyLong_AsSsize_t(eid_o);
    if (PyErr_Occurred()) {
        PyErr_Clear();
        release_ctx(&c);
        Py_RETURN_NONE;
    }
    Py_ssize_t total = PyList_GET_SIZE(c.pos_l);
    /* decline before doing anything: every destination an original node, no control loop */
    for (Py_ssize_t q = 0; q < total; q++) {
        PyObject *dst = PyList_GET_ITEM(c.dst_l, q);
        Py_ssize_t dst_i = PyLong_AsSsize_t(dst);
        if (dst_i == -1 && PyErr_Occurred())
            PyErr_Clear();
        PyObject *dev = dst_i >= 0 && dst_i < c.n && dst_i < PyList_GET_SIZE(c.dev_l) ? PyList_GET_ITEM(c.dev_l, dst_i)
                                                                                      : NULL;
        Py_ssize_t dev_i = dev == NULL ? -1 : PyLong_AsSsize_t(dev);
        if (dev_i == -1 && PyErr_Occurred())
            PyErr_Clear();
        int in_cloop = PyDict_Contains(c.cloops, dst);
        if (in_cloop != 0 || dev_i < 0 || dev_i >= PyList_GET_SIZE(c.is_cpu)) {
            PyErr_Clear();
            release_ctx(&c);
            Py_RETURN_NONE;
        }
    }
    c.base = PyList_GET_SIZE(c.old_added);
    c.counters = PyDict_Copy(c.counters_in);
    c.added = PyList_New(0), c.dup = PyDict_New(), c.recheck = PyList_New(0);
    c.cap_writes = total; /* one per cut edge at most */
    c.w_pos = PyMem_Malloc(sizeof(int64_t) * (size_t)(total ? total : 1));
    c.w_src = PyMem_Malloc(sizeof(int32_t) * (size_t)(total ? total : 1));
    c.w_slot = PyMem_Malloc(sizeof(int32_t) * (size_t)(total ? total : 1));
    PyObject **types = NULL; /* out types of the current group's edges (0 for control edges) */
    PyObject *result = NULL;
    Py_ssize_t cap = 0, k = 0;
    c.transfers = PyTuple_New(T_COLUMNS);
    for (int col = 0; c.transfers != NULL && col < T_COLUMNS; col++) {
        if ((c.columns[col] = PyList_New(0)) == NULL)
            goto error;
        PyTuple_SET_ITEM(c.transfers, col, Py_NewRef(c.columns[col]));
    }
    if (c.w_pos == NULL || c.w_src == NULL || c.w_slot == NULL) {
        PyErr_NoMemory();
        goto error;
    }
    if (c.counters == NULL || c.added == NULL || c.transfers == NULL || c.dup == NULL || c.recheck == NULL)
        goto error;
    while (k < total) {
        PyObject *dst = PyList_GET_ITEM(c.dst_l, k);
        Py_ssize_t j = k + 1;
        while (j < total) {
            int eq = PyObject_RichCompareBool(PyList_GET_ITEM(c.dst_l, j), dst, Py_EQ);
            if (eq < 0)
                goto error;
            if (!eq)
                break;
            j++;
        }
        if (j - k > cap) {
            PyObject **grown = PyMem_Realloc(types, sizeof(PyObject *) * (size_t)(j - k));
            if (grown == NULL) {
                PyErr_NoMemory();
                goto error;
            }
            types = grown;
            cap = j - k;
        }
        /* types = [out_type(src, slot) if slot != CONTROL else 0 ...], in order */
        Py_ssize_t got = 0;
        long max_type = LONG_MIN;
        for (Py_ssize_t q = k; q < j; q++, got++) {
            PyObject *src = PyList_GET_ITEM(c.src_l, q), *slot = PyList_GET_ITEM(c.slot_l, q);
            Py_ssize_t src_i = PyLong_AsSsize_t(src), sl = PyLong_AsSsize_t(slot);
            if (PyErr_Occurred())
                break;
            types[got] = sl == CONTROL ? PyLong_FromLong(0) : out_type(&c, src, src_i, slot, sl);
            if (types[got] == NULL)
                break;
            long t = PyLong_AsLong(types[got]);
            if (t == -1 && PyErr_Occurred()) {
                got++;
                break;
            }
            if (t > max_type)
                max_type = t;
        }
        int ok = got == j - k && !PyErr_Occurred();
        if (ok)
            ok = cut_group(&c, k, j, types, max_type, &seq, &counter_s, &edge_id) == 0;
        for (Py_ssize_t q = 0; q < got; q++)
            Py_DECREF(types[q]);
        if (!ok)
            goto error;
        k = j;
    }
    result = Py_BuildValue("{sOsOsNsNsNsOsOsnsnsnsO}", "added", c.added, "transfers", c.transfers, "w_pos",
                           PyByteArray_FromStringAndSize((const char *)c.w_pos, c.n_writes * 8), "w_src",
                           PyByteArray_FromStringAndSize((const char *)c.w_src, c.n_writes * 4), "w_slot",
                           PyByteArray_FromStringAndSize((const char *)c.w_slot, c.n_writes * 4), "dup", c.dup,
                           "counters", c.counters, "seq", seq,
                           "counter_s", counter_s, "edge_id", edge_id, "recheck", c.recheck);
error:
    PyMem_Free(types);
    release_ctx(&c);
    return result;
}

/* ------------------------------------------------------------------ int arrays */

/* A bytearray of n int32 (zeroed), or NULL. */
static PyObject *int32_buffer(Py_ssize_t n)
{
    if (n > PY_SSIZE_T_MAX / 4) {
        PyErr_NoMemory();
        return NULL;
    }
    PyObject *out = PyByteArray_FromStringAndSize(NULL, n * 4);
    if (out != NULL && n)
        memset(PyByteArray_AS_STRING(out), 0, (size_t)n * 4);
    return out;
}

/* v as an int32; 0 (no exception) when it is not an int in range. */
static int as_int32(PyObject *v, int32_t *out)
{
    if (!PyLong_CheckExact(v))
        return 0;
    int overflow;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (overflow || (x == -1 && PyErr_Occurred()) || x < INT32_MIN || x > INT32_MAX) {
        PyErr_Clear();
        return 0;
    }
    *out = (int32_t)x;
    return 1;
}

PyDoc_STRVAR(index_codes_doc,
"index_codes(items, mapping) -> bytearray or None\n\n"
"int32 mapping[x] for each x of the list or tuple items (what\n"
"np.fromiter(map(mapping.__getitem__, items), np.int32) holds). None when an item is not a key,\n"
"or a value not an int32: the caller's Python path then raises the error.");

static PyObject *index_codes(PyObject *self, PyObject *args)
{
    PyObject *items, *mapping;
    if (!PyArg_ParseTuple(args, "OO!", &items, &PyDict_Type, &mapping))
        return NULL;
    if (!PyDict_CheckExact(mapping) || !(PyList_CheckExact(items) || PyTuple_CheckExact(items)))
        Py_RETURN_NONE;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(items);
    PyObject *out = int32_buffer(n);
    if (out == NULL)
        return NULL;
    int32_t *codes = (int32_t *)PyByteArray_AS_STRING(out);
    /* a list cannot change size here: dict lookups of str keys run no Python code */
    for (Py_ssize_t i = 0; i < n && i < PySequence_Fast_GET_SIZE(items); i++) {
        PyObject *v = PyDict_GetItemWithError(mapping, PySequence_Fast_GET_ITEM(items, i));
        if (v == NULL || !as_int32(v, &codes[i])) {
            Py_DECREF(out);
            if (PyErr_Occurred())
                return NULL;
            Py_RETURN_NONE;
        }
    }
    if (PySequence_Fast_GET_SIZE(items) != n) {
        Py_DECREF(out);
        Py_RETURN_NONE;
    }
    return out;
}

PyDoc_STRVAR(attr_ints_doc,
"attr_ints(objects, name) -> bytearray or None\n\n"
"int32 getattr(o, name) for each o of the list objects (the partitioner's added nodes' devices).\n"
"None when a value is not an int32 (the caller's Python path then decides).");

static PyObject *attr_ints(PyObject *self, PyObject *args)
{
    PyObject *objects, *name;
    if (!PyArg_ParseTuple(args, "O!U", &PyList_Type, &objects, &name))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(objects);
    PyObject *out = int32_buffer(n);
    if (out == NULL)
        return NULL;
    int32_t *vals = (int32_t *)PyByteArray_AS_STRING(out);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i >= PyList_GET_SIZE(objects)) { /* shrunk by a __getattr__: not the plain case */
            Py_DECREF(out);
            Py_RETURN_NONE;
        }
        PyObject *v = PyObject_GetAttr(PyList_GET_ITEM(objects, i), name);
        if (v == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        int ok = as_int32(v, &vals[i]);
        Py_DECREF(v);
        if (!ok) {
            Py_DECREF(out);
            Py_RETURN_NONE;
        }
    }
    if (PyList_GET_SIZE(objects) != n) {
        Py_DECREF(out);
        Py_RETURN_NONE;
    }
    return out;
}

PyDoc_STRVAR(input_sources_doc,
"input_sources(objects) -> (bytearray, bytearray) or None\n\n"
"int32 len(o.inputs) for each o of the list objects, and int32 s of every [s, slot] of their\n"
"inputs in order (graph_partition._input_sources: the partitioner's added nodes). None when an\n"
"input is not a pair whose first item is an int32 (the caller's Python path then decides).");

static PyObject *input_sources(PyObject *self, PyObject *args)
{
    PyObject *objects;
    if (!PyArg_ParseTuple(args, "O!", &PyList_Type, &objects))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(objects), total = 0, cap = 0;
    PyObject *counts = int32_buffer(n), *srcs = NULL;
    int32_t *buf = NULL;
    int ok = counts != NULL;
    for (Py_ssize_t i = 0; ok && i < n; i++) {
        if (i >= PyList_GET_SIZE(objects)) { /* shrunk by a __getattr__: not the plain case */
            ok = 0;
            break;
        }
        PyObject *inputs = PyObject_GetAttr(PyList_GET_ITEM(objects, i), s_inputs);
        if (inputs == NULL) {
            ok = -1;
            break;
        }
        if (!PyList_CheckExact(inputs)) {
            Py_DECREF(inputs);
            ok = 0;
            break;
        }
        /* a list of pairs: reading it runs no Python code, its size cannot change */
        Py_ssize_t m = PyList_GET_SIZE(inputs);
        if (total + m > cap) {
            Py_ssize_t grown = cap * 2 > total + m ? cap * 2 : total + m + 1024;
            int32_t *more = grown > PY_SSIZE_T_MAX / 4 ? NULL : PyMem_Realloc(buf, (size_t)grown * 4);
            if (more == NULL) {
                Py_DECREF(inputs);
                PyErr_NoMemory();
                ok = -1;
                break;
            }
            buf = more;
            cap = grown;
        }
        for (Py_ssize_t k = 0; ok > 0 && k < m; k++) {
            PyObject *pair = PyList_GET_ITEM(inputs, k);
            ok = (PyList_CheckExact(pair) || PyTuple_CheckExact(pair)) && PySequence_Fast_GET_SIZE(pair) == 2 &&
                 as_int32(PySequence_Fast_GET_ITEM(pair, 0), &buf[total + k]);
        }
        Py_DECREF(inputs);
        ((int32_t *)PyByteArray_AS_STRING(counts))[i] = (int32_t)m;
        total += m;
    }
    if (ok > 0 && PyList_GET_SIZE(objects) == n)
        srcs = PyByteArray_FromStringAndSize((const char *)buf, total * 4);
    PyMem_Free(buf);
    PyObject *result = NULL;
    if (srcs != NULL)
        result = PyTuple_Pack(2, counts, srcs);
    Py_XDECREF(counts);
    Py_XDECREF(srcs);
    if (result == NULL && !PyErr_Occurred())
        Py_RETURN_NONE;
    return result;
}

PyDoc_STRVAR(reach_doc,
"reach(in_start, in_src, starts, mask, edge_ok) -> bool\n\n"
"Mark in mask (a writable buffer of one byte per node, zeroed) every node that the node ids in\n"
"starts reach backwards over the graph's input edges (in CSR form: int32 in_start, n + 1 of them,\n"
"and int32 in_src), using only the edges whose byte in edge_ok is nonzero (None: all). This is\n"
"the reverse walk of placeviz/closure.py (reverse_closure). False, with the mask unspecified, when the arrays are not\n"
"of those kinds or an id is out of range: the caller then runs its Python walk.");

static PyObject *reach(PyObject *self, PyObject *args)
{
    PyObject *start_o, *src_o, *starts, *mask_o, *ok_o;
    if (!PyArg_ParseTuple(args, "OOOOO", &start_o, &src_o, &starts, &mask_o, &ok_o))
        return NULL;
    if (!PyList_CheckExact(starts))
        Py_RETURN_FALSE;
    Py_buffer st, sr, mk, ok;
    int have_ok = ok_o != Py_None, got = 0, result = 0, nomem = 0;
    int32_t *stack = NULL;
    if (PyObject_GetBuffer(start_o, &st, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        goto release;
    got = 1;
    if (PyObject_GetBuffer(src_o, &sr, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        goto release;
    got = 2;
    if (PyObject_GetBuffer(mask_o, &mk, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0)
        goto release;
    got = 3;
    if (have_ok) {
        if (PyObject_GetBuffer(ok_o, &ok, PyBUF_C_CONTIGUOUS) < 0)
            goto release;
        got = 4;
    }
    const char *sf = st.format ? st.format : "B", *rf = sr.format ? sr.format : "B";
    if (st.itemsize != 4 || sr.itemsize != 4 || strcmp(sf + (sf[0] == '@' || sf[0] == '='), "i") != 0 ||
        strcmp(rf + (rf[0] == '@' || rf[0] == '='), "i") != 0)
        goto release;
    Py_ssize_t n = mk.len, edges = sr.len / 4;
    const int32_t *in_start = st.buf, *in_src = sr.buf;
    uint8_t *mask = mk.buf;
    const uint8_t *edge_ok = have_ok ? ok.buf : NULL;
    if (st.len / 4 != n + 1 || (have_ok && ok.len != edges))
        goto release;
    /* Every node is pushed at most once (when first marked): the stack holds at most n ids. */
    stack = PyMem_Malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    if (stack == NULL) {
        PyErr_NoMemory();
        nomem = 1;
        goto release;
    }
    Py_ssize_t top = 0;
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(starts); k++) {
        Py_ssize_t i = PyLong_AsSsize_t(PyList_GET_ITEM(starts, k));
        if (i == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            goto release;
        }
        if (i < 0 || i >= n)
            goto release;
        if (!mask[i]) {
            mask[i] = 1;
            stack[top++] = (int32_t)i;
        }
    }
    while (top) {
        int32_t i = stack[--top];
        int32_t lo = in_start[i], hi = in_start[i + 1];
        if (lo < 0 || hi > edges || lo > hi)
            goto release;
        for (int32_t e = lo; e < hi; e++) {
            int32_t s = in_src[e];
            if (s < 0 || s >= n)
                goto release;
            if (!mask[s] && (edge_ok == NULL || edge_ok[e])) {
                mask[s] = 1;
                stack[top++] = s;
            }
        }
    }
    result = 1;
release:
    PyMem_Free(stack);
    if (got >= 4)
        PyBuffer_Release(&ok);
    if (got >= 3)
        PyBuffer_Release(&mk);
    if (got >= 2)
        PyBuffer_Release(&sr);
    if (got >= 1)
        PyBuffer_Release(&st);
    if (nomem)
        return NULL;
    PyErr_Clear(); /* an argument without the buffer interface: not the plain case */
    return PyBool_FromLong(result);
}

PyDoc_STRVAR(bucket_by_component_doc,
"bucket_by_component(names, members, depth) -> (own, buckets) or None\n\n"
"placeviz.render.collapse.bucket_by_component: the members (ints indexing the list names) whose\n"
"name has no component at depth (fewer than depth '/'), and a dict component -> members, in the\n"
"order first met (the members are the same int objects). None when a member is not an int index\n"
"of names or its name not a str: the caller's Python loop then runs (and raises what it raises).");

/* The component at `depth` of `name`: [*start, *end) in code points; 0 when there is none, -1 on
   an error (PyUnicode_FindChar's -2, which valid bounds never give). */
static int component_span(PyObject *name, Py_ssize_t depth, Py_ssize_t *start, Py_ssize_t *end)
{
    Py_ssize_t len = PyUnicode_GET_LENGTH(name), pos = 0;
    for (Py_ssize_t d = 0; d < depth; d++) {
        Py_ssize_t slash = PyUnicode_FindChar(name, '/', pos, len, 1);
        if (slash < 0)
            return slash == -1 ? 0 : -1;
        pos = slash + 1;
    }
    Py_ssize_t slash = PyUnicode_FindChar(name, '/', pos, len, 1);
    if (slash == -2)
        return -1;
    *start = pos;
    *end = slash < 0 ? len : slash;
    return 1;
}

/* Whether name[start:end] equals the str comp (code points, any kinds). */
static int span_equals(PyObject *name, Py_ssize_t start, Py_ssize_t end, PyObject *comp)
{
    if (PyUnicode_GET_LENGTH(comp) != end - start)
        return 0;
    int kind = PyUnicode_KIND(name), ckind = PyUnicode_KIND(comp);
    const void *data = PyUnicode_DATA(name), *cdata = PyUnicode_DATA(comp);
    if (kind == ckind)
        return memcmp((const char *)data + start * kind, cdata, (size_t)(end - start) * kind) == 0;
    for (Py_ssize_t j = 0; j < end - start; j++)
        if (PyUnicode_READ(kind, data, start + j) != PyUnicode_READ(ckind, cdata, j))
            return 0;
    return 1;
}

static PyObject *bucket_by_component(PyObject *self, PyObject *args)
{
    PyObject *names, *members;
    Py_ssize_t depth;
    if (!PyArg_ParseTuple(args, "O!O!n", &PyList_Type, &names, &PyList_Type, &members, &depth))
        return NULL;
    if (depth < 0)
        Py_RETURN_NONE;
    PyObject *own = PyList_New(0), *buckets = PyDict_New();
    PyObject *last = NULL, *last_bucket = NULL; /* the previous member's component (owned) and its list (the dict's) */
    if (own == NULL || buckets == NULL)
        goto fail;
    /* members and names cannot change size here: nothing below runs Python code (str keys) */
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(members); k++) {
        PyObject *item = PyList_GET_ITEM(members, k);
        if (!PyLong_CheckExact(item))
            goto decline;
        Py_ssize_t i = PyLong_AsSsize_t(item);
        if (i == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            goto decline;
        }
        if (i < 0 || i >= PyList_GET_SIZE(names))
            goto decline;
        PyObject *name = PyList_GET_ITEM(names, i);
        if (!PyUnicode_CheckExact(name))
            goto decline;
        Py_ssize_t start, end;
        int found = component_span(name, depth, &start, &end);
        if (found < 0)
            goto fail;
        if (!found) {
            if (PyList_Append(own, item) < 0)
                goto fail;
            continue;
        }
        if (last == NULL || !span_equals(name, start, end, last)) {
            PyObject *comp = PyUnicode_Substring(name, start, end);
            if (comp == NULL)
                goto fail;
            PyObject *bucket = PyDict_GetItemWithError(buckets, comp); /* borrowed */
            if (bucket == NULL) {
                if (PyErr_Occurred() || (bucket = PyList_New(0)) == NULL) {
                    Py_DECREF(comp);
                    goto fail;
                }
                int failed = PyDict_SetItem(buckets, comp, bucket);
                Py_DECREF(bucket); /* the dict holds it, and never lets it go while this runs */
                if (failed < 0) {
                    Py_DECREF(comp);
                    goto fail;
                }
            }
            Py_XSETREF(last, comp);
            last_bucket = bucket;
        }
        if (PyList_Append(last_bucket, item) < 0)
            goto fail;
    }
    Py_XDECREF(last);
    return Py_BuildValue("(NN)", own, buckets);
decline:
    Py_XDECREF(last);
    Py_DECREF(own);
    Py_DECREF(buckets);
    Py_RETURN_NONE;
fail:
    Py_XDECREF(last);
    Py_XDECREF(own);
    Py_XDECREF(buckets);
    return NULL;
}

static PyMethodDef methods[] = {
    {"split_originals", (PyCFunction)(void (*)(void))split_originals, METH_VARARGS | METH_KEYWORDS,
     split_originals_doc},
    {"index_codes", index_codes, METH_VARARGS, index_codes_doc},
    {"attr_ints", attr_ints, METH_VARARGS, attr_ints_doc},
    {"input_sources", input_sources, METH_VARARGS, input_sources_doc},
    {"reach", reach, METH_VARARGS, reach_doc},
    {"bucket_by_component", bucket_by_component, METH_VARARGS, bucket_by_component_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "placeviz._partition_kernels",
    "The partitioner's loop over cut edges (see placeviz/partition/graph_partition.py).", -1, methods,
};

#define INTERN(var, text) \
    if ((var = PyUnicode_InternFromString(text)) == NULL) return NULL

PyMODINIT_FUNC PyInit__partition_kernels(void)
{
    INTERN(s_dev, "dev");
    INTERN(s_inputs, "inputs");
    INTERN(s_name, "name");
    INTERN(s_origin, "origin");
    INTERN(s_oslot, "oslot");
    INTERN(s_dtype, "dtype");
    INTERN(s_send_op, "_Send");
    INTERN(s_hostsend_op, "_HostSend");
    INTERN(s_recv_op, "_Recv");
    INTERN(s_hostrecv_op, "_HostRecv");
    INTERN(s_const_op, "Const");
    INTERN(s_identity_op, "Identity");
    INTERN(s_kind_send, "send");
    INTERN(s_kind_recv, "recv");
    INTERN(s_ctrl_const, "ctrl_const");
    INTERN(s_ctrl_identity, "ctrl_identity");
    INTERN(s_control, "control");
    INTERN(s_kind, "kind");
    INTERN(s_copy_of, "copy_of");
    INTERN(s_op, "op");
    INTERN(s_replicate, "replicate");
    return PyModule_Create(&module);
}
