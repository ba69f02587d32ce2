#include "native.h"

/* r3comp: the compile path's per-state loops (network._finish's table, objects._Builder.build).
 *
 * r3comp_fill(trans, edges, renumber) fills a rule's byte table: ``trans`` a writable
 * C-contiguous int32 buffer of (kept states) * 256 entries, set to -1 then, per state
 * of ``edges`` (a list of lists of (lo, hi, target) tuples) that ``renumber`` keeps
 * (None: all, else a list of ints, -1 dropped), bytes lo..hi to the renumbered target
 * (edges to dropped states left out). Every index is checked (ValueError/TypeError).
 *
 * r3comp_object_build(...) is objects._Builder.build: see build()'s comment below. */

/* ------------------------------------------------------------------------------ */
/* r3comp_fill                                                                      */

/* A (lo, hi, target) tuple's ints; -1 with an exception on error. */
static int read_interval(PyObject *item, int64_t *lo, int64_t *hi, int64_t *target) {
    if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 3) {
        PyErr_SetString(PyExc_TypeError, "an edge is a (lo, hi, target) tuple");
        return -1;
    }
    *lo = as_i64(PyTuple_GET_ITEM(item, 0));
    if (*lo == -1 && PyErr_Occurred()) return -1;
    *hi = as_i64(PyTuple_GET_ITEM(item, 1));
    if (*hi == -1 && PyErr_Occurred()) return -1;
    *target = as_i64(PyTuple_GET_ITEM(item, 2));
    if (*target == -1 && PyErr_Occurred()) return -1;
    if (*lo < 0 || *hi > 255 || *lo > *hi) {
        PyErr_SetString(PyExc_ValueError, "an edge's bytes must be 0 <= lo <= hi <= 255");
        return -1;
    }
    return 0;
}

PyObject *r3comp_fill(PyObject *module, PyObject *args) {
    PyObject *trans_obj, *edges_in, *renumber_in;
    if (!PyArg_ParseTuple(args, "OO!O", &trans_obj, &PyList_Type, &edges_in, &renumber_in)) return NULL;
    if (renumber_in != Py_None && !PyList_Check(renumber_in)) {
        PyErr_SetString(PyExc_TypeError, "renumber must be a list of ints or None");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(trans_obj, &view, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE | PyBUF_FORMAT) < 0) return NULL;
    PyObject *result = NULL, *edges = NULL;
    int64_t *renumber = NULL;
    if (view.itemsize != 4 || !jm_is_int32(view.format) || view.len % (256 * 4)) {
        PyErr_SetString(PyExc_TypeError, "trans must be an int32 buffer of rows of 256");
        goto done;
    }
    /* (Our own tuple: a list could change while its items convert.) */
    if (!(edges = PySequence_Tuple(edges_in))) goto done;
    Py_ssize_t n = PyTuple_GET_SIZE(edges), rows = view.len / (256 * 4);
    if (!(renumber = PyMem_RawMalloc((size_t)(n ? n : 1) * sizeof(int64_t)))) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t kept = n;
    if (renumber_in == Py_None) {
        for (Py_ssize_t i = 0; i < n; i++) renumber[i] = i;
    } else {
        if (PyList_GET_SIZE(renumber_in) != n) {
            PyErr_SetString(PyExc_ValueError, "renumber must have one entry per state");
            goto done;
        }
        kept = 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            if (i >= PyList_GET_SIZE(renumber_in)) { /* (a conversion may shrink it) */
                PyErr_SetString(PyExc_ValueError, "renumber changed size");
                goto done;
            }
            int64_t to = as_i64(PyList_GET_ITEM(renumber_in, i));
            if (to == -1 && PyErr_Occurred()) goto done;
            if (to < -1 || to >= n) {
                PyErr_SetString(PyExc_ValueError, "renumber out of range");
                goto done;
            }
            renumber[i] = to;
            if (to >= 0) kept++;
        }
    }
    if (kept != rows) {
        PyErr_SetString(PyExc_ValueError, "trans must have one row per kept state");
        goto done;
    }
    int32_t *trans = view.buf;
    memset(trans, 0xff, (size_t)view.len);
    for (Py_ssize_t state = 0; state < n; state++) {
        int64_t at = renumber[state];
        if (at < 0) continue;
        if (at >= rows) {
            PyErr_SetString(PyExc_ValueError, "renumber out of range");
            goto done;
        }
        PyObject *row = PyTuple_GET_ITEM(edges, state);
        if (!PyList_Check(row)) {
            PyErr_SetString(PyExc_TypeError, "edges must be a list of lists");
            goto done;
        }
        Py_INCREF(row);
        for (Py_ssize_t k = 0; k < PyList_GET_SIZE(row); k++) {
            int64_t lo, hi, target;
            if (read_interval(PyList_GET_ITEM(row, k), &lo, &hi, &target) < 0) {
                Py_DECREF(row);
                goto done;
            }
            if (target < 0 || target >= n) {
                Py_DECREF(row);
                PyErr_SetString(PyExc_ValueError, "an edge's target is out of range");
                goto done;
            }
            int64_t to = renumber[target];
            if (to < 0) continue;
            int32_t *out = trans + at * 256;
            for (int64_t b = lo; b <= hi; b++) out[b] = (int32_t)to;
        }
        Py_DECREF(row);
    }
    result = Py_None;
    Py_INCREF(result);
done:
    PyMem_RawFree(renumber);
    Py_XDECREF(edges);
    PyBuffer_Release(&view);
    return result;
}

/* ------------------------------------------------------------------------------ */
/* r3comp_object_build: objects._Builder.build                                     */

/* State kinds, as objects.py's keys: ("o", i, 0) ("O", p, wrote) ("P", p, s)
 * ("k", q, i) ("K", g, i) ("F", q, f) ("c", i, 0). */
enum { K_o, K_O, K_P, K_k, K_K, K_F, K_c };

typedef struct {
    int64_t lo, hi, kind, a, b;
} Part;

typedef struct {
    PyObject *name; /* borrowed (a str of the inputs) */
    int64_t kind, a, b;
} CallPart;

typedef struct {
    /* inputs (borrowed; the tuples ours) */
    const uint8_t *opening, *closing;
    Py_ssize_t n_opening, n_closing;
    PyObject *keys;   /* tuple of bytes */
    PyObject *values; /* tuple of None | (edges, calls, accepting, exits) */
    PyObject *sep_edges, *sep_accepting;
    int64_t *cand_stop; /* per position p (0..count): candidates are p..stop-1 */
    uint8_t *closable;
    PyObject *extra; /* str or None */
    Py_ssize_t count;
    int64_t max_states;
    PyObject *error;
    /* the numbering */
    Map3 index;
    I64Vec order; /* kind, a, b per state */
    I64Vec stops; /* per state: the stop of a "k" run starting there, else -1 */
    PyObject *groups; /* dict: bytes of the members -> group number */
    I64Vec group_items, group_off; /* group g: items group_off[g] .. group_off[g + 1] */
    /* scratch */
    Part *parts;
    Py_ssize_t n_parts, cap_parts;
    CallPart *calls;
    Py_ssize_t n_calls, cap_calls;
    int64_t *scratch; /* branch: members grouped by byte */
    Py_ssize_t cap_scratch;
} Ob;

/* A strict int (no Python code runs); -1 with an exception when not an int. */
static int int_of(PyObject *o, int64_t *out) {
    if (!PyLong_Check(o)) {
        PyErr_SetString(PyExc_TypeError, "expected an int");
        return -1;
    }
    *out = (int64_t)PyLong_AsLongLong(o);
    if (*out == -1 && PyErr_Occurred()) return -1;
    return 0;
}

/* Item ``i`` of list ``list`` (borrowed), or NULL with ValueError. */
static PyObject *item_of(PyObject *list, int64_t i) {
    if (!PyList_Check(list) && !PyTuple_Check(list)) {
        PyErr_SetString(PyExc_TypeError, "expected a list");
        return NULL;
    }
    Py_ssize_t n = PyList_Check(list) ? PyList_GET_SIZE(list) : PyTuple_GET_SIZE(list);
    if (i < 0 || i >= n) {
        PyErr_SetString(PyExc_ValueError, "index out of range");
        return NULL;
    }
    return PyList_Check(list) ? PyList_GET_ITEM(list, i) : PyTuple_GET_ITEM(list, i);
}

/* Truth of item ``i`` of a list of bools (-1 with an exception). */
static int flag_of(PyObject *list, int64_t i) {
    PyObject *x = item_of(list, i);
    if (!x) return -1;
    if (!PyBool_Check(x)) {
        PyErr_SetString(PyExc_TypeError, "expected a bool");
        return -1;
    }
    return x == Py_True;
}

static int add_part(Ob *o, int64_t lo, int64_t hi, int64_t kind, int64_t a, int64_t b) {
    if (o->n_parts == o->cap_parts) {
        Py_ssize_t cap = o->cap_parts ? 2 * o->cap_parts : 64;
        Part *p = PyMem_RawRealloc(o->parts, (size_t)cap * sizeof(Part));
        if (!p) {
            PyErr_NoMemory();
            return -1;
        }
        o->parts = p;
        o->cap_parts = cap;
    }
    o->parts[o->n_parts++] = (Part){lo, hi, kind, a, b};
    return 0;
}

static int add_call(Ob *o, PyObject *name, int64_t kind, int64_t a, int64_t b) {
    if (o->n_calls == o->cap_calls) {
        Py_ssize_t cap = o->cap_calls ? 2 * o->cap_calls : 16;
        CallPart *p = PyMem_RawRealloc(o->calls, (size_t)cap * sizeof(CallPart));
        if (!p) {
            PyErr_NoMemory();
            return -1;
        }
        o->calls = p;
        o->cap_calls = cap;
    }
    o->calls[o->n_calls++] = (CallPart){name, kind, a, b};
    return 0;
}

/* The key bytes of member q (borrowed buffer). */
static int key_of(Ob *o, int64_t q, const uint8_t **data, Py_ssize_t *n) {
    if (q < 0 || q >= o->count) {
        PyErr_SetString(PyExc_ValueError, "member out of range");
        return -1;
    }
    PyObject *key = PyTuple_GET_ITEM(o->keys, q);
    *data = (const uint8_t *)PyBytes_AS_STRING(key);
    *n = PyBytes_GET_SIZE(key);
    return 0;
}

/* The state after member q's key when its value's fragment is in state f (_value). */
static int value_key(Ob *o, int64_t q, int64_t f, int64_t *kind, int64_t *a, int64_t *b) {
    if (q < 0 || q >= o->count) {
        PyErr_SetString(PyExc_ValueError, "member out of range");
        return -1;
    }
    PyObject *value = PyTuple_GET_ITEM(o->values, q);
    int exits = 1;
    if (value != Py_None) {
        exits = flag_of(PyTuple_GET_ITEM(value, 3), f);
        if (exits < 0) return -1;
    }
    if (exits) {
        *kind = K_O, *a = q + 1, *b = 1;
    } else {
        *kind = K_F, *a = q, *b = f;
    }
    return 0;
}

/* The state after ``read`` bytes that the keys of ``qs`` share (_trie). */
static int trie_key(Ob *o, const int64_t *qs, Py_ssize_t n, int64_t read, int64_t *kind, int64_t *a, int64_t *b) {
    if (n > 1) {
        PyObject *name = PyBytes_FromStringAndSize((const char *)qs, n * (Py_ssize_t)sizeof(int64_t));
        if (!name) return -1;
        PyObject *known = PyDict_GetItemWithError(o->groups, name);
        int64_t group;
        if (known) {
            group = PyLong_AsLongLong(known);
        } else if (PyErr_Occurred()) {
            Py_DECREF(name);
            return -1;
        } else {
            group = o->group_off.size - 1;
            PyObject *g = PyLong_FromLongLong(group);
            int bad = !g || PyDict_SetItem(o->groups, name, g) < 0 || vec_reserve(&o->group_items, n) < 0;
            Py_XDECREF(g);
            if (bad) {
                Py_DECREF(name);
                return -1;
            }
            memcpy(o->group_items.data + o->group_items.size, qs, (size_t)n * sizeof(int64_t));
            o->group_items.size += n;
            if (vec_push(&o->group_off, o->group_items.size) < 0) {
                Py_DECREF(name);
                return -1;
            }
        }
        Py_DECREF(name);
        *kind = K_K, *a = group, *b = read;
        return 0;
    }
    const uint8_t *data;
    Py_ssize_t len;
    if (key_of(o, qs[0], &data, &len) < 0) return -1;
    if (read < len) {
        *kind = K_k, *a = qs[0], *b = read;
        return 0;
    }
    return value_key(o, qs[0], 0, kind, a, b);
}

/* The next byte of each key of ``qs`` (which share ``read`` bytes), to the state after
 * it, in the order of the bytes' first appearance (_branch). ``qs`` may point into
 * group_items: copied first (trie_key may grow it). */
static int branch(Ob *o, const int64_t *qs_in, Py_ssize_t n, int64_t read) {
    if (n == 0) return 0;
    if (o->cap_scratch < 2 * n) {
        int64_t *s = PyMem_RawRealloc(o->scratch, (size_t)(2 * n) * sizeof(int64_t));
        if (!s) {
            PyErr_NoMemory();
            return -1;
        }
        o->scratch = s;
        o->cap_scratch = 2 * n;
    }
    int64_t *qs = o->scratch, *sorted = o->scratch + n;
    memcpy(qs, qs_in, (size_t)n * sizeof(int64_t));
    int32_t counts[256], starts[256];
    uint8_t bytes[256];
    int nbytes = 0;
    memset(counts, 0, sizeof counts);
    for (Py_ssize_t i = 0; i < n; i++) {
        const uint8_t *data;
        Py_ssize_t len;
        if (key_of(o, qs[i], &data, &len) < 0) return -1;
        if (read < 0 || read >= len) {
            PyErr_SetString(PyExc_ValueError, "index out of range");
            return -1;
        }
        uint8_t byte = data[read];
        if (!counts[byte]) bytes[nbytes++] = byte;
        counts[byte]++;
    }
    int32_t at = 0;
    for (int i = 0; i < nbytes; i++) starts[bytes[i]] = at, at += counts[bytes[i]];
    for (Py_ssize_t i = 0; i < n; i++) {
        const uint8_t *data = NULL;
        Py_ssize_t len = 0;
        if (key_of(o, qs[i], &data, &len) < 0) return -1;
        sorted[starts[data[read]]++] = qs[i];
    }
    at = 0;
    for (int i = 0; i < nbytes; i++) {
        int64_t kind, a, b;
        if (trie_key(o, sorted + at, counts[bytes[i]], read + 1, &kind, &a, &b) < 0) return -1;
        if (add_part(o, bytes[i], bytes[i], kind, a, b) < 0) return -1;
        at += counts[bytes[i]];
    }
    return 0;
}

static int keys_at(Ob *o, int64_t p) {
    Py_ssize_t n = (Py_ssize_t)(o->cand_stop[p] - p);
    if (n <= 0) return 0;
    if (o->cap_scratch < 3 * n) { /* (a range of members: room beside branch's two halves) */
        int64_t *s = PyMem_RawRealloc(o->scratch, (size_t)(3 * n) * sizeof(int64_t));
        if (!s) {
            PyErr_NoMemory();
            return -1;
        }
        o->scratch = s;
        o->cap_scratch = 3 * n;
    }
    int64_t *range = o->scratch + 2 * n;
    for (Py_ssize_t i = 0; i < n; i++) range[i] = p + i;
    return branch(o, range, n, 0);
}

static int close_at(Ob *o, int64_t p) {
    if (!o->closable[p]) return 0;
    return add_part(o, o->closing[0], o->closing[0], K_c, 1, 0);
}

static int sep_first(Ob *o, int64_t p) {
    if (o->cand_stop[p] <= p && o->extra == Py_None) return 0;
    PyObject *row = item_of(o->sep_edges, 0);
    if (!row || !PyList_Check(row)) {
        if (row) PyErr_SetString(PyExc_TypeError, "expected a list");
        return -1;
    }
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(row); k++) {
        int64_t lo, hi, s;
        if (read_interval(PyList_GET_ITEM(row, k), &lo, &hi, &s) < 0) return -1;
        if (add_part(o, lo, hi, s == 0 ? K_O : K_P, p, s == 0 ? 1 : s) < 0) return -1;
    }
    return 0;
}

/* A state's parts (its row, unsorted), calls and acceptance (_state; not "k"). */
static int state_of(Ob *o, int64_t kind, int64_t a, int64_t b, int *accepts) {
    o->n_parts = o->n_calls = 0;
    *accepts = 0;
    if (kind == K_F) {
        if (a < 0 || a >= o->count || PyTuple_GET_ITEM(o->values, a) == Py_None) {
            PyErr_SetString(PyExc_ValueError, "a value state of a member without a value");
            return -1;
        }
        PyObject *value = PyTuple_GET_ITEM(o->values, a);
        PyObject *row = item_of(PyTuple_GET_ITEM(value, 0), b);
        if (!row) return -1;
        if (!PyList_Check(row)) {
            PyErr_SetString(PyExc_TypeError, "expected a list");
            return -1;
        }
        for (Py_ssize_t k = 0; k < PyList_GET_SIZE(row); k++) {
            int64_t lo, hi, t, nk, na, nb;
            if (read_interval(PyList_GET_ITEM(row, k), &lo, &hi, &t) < 0 || value_key(o, a, t, &nk, &na, &nb) < 0 ||
                add_part(o, lo, hi, nk, na, nb) < 0)
                return -1;
        }
        int acc = flag_of(PyTuple_GET_ITEM(value, 2), b);
        if (acc < 0) return -1;
        if (acc && (sep_first(o, a + 1) < 0 || close_at(o, a + 1) < 0)) return -1;
        PyObject *called = item_of(PyTuple_GET_ITEM(value, 1), b);
        if (!called) return -1;
        if (!PyDict_Check(called)) {
            PyErr_SetString(PyExc_TypeError, "calls must be dicts");
            return -1;
        }
        Py_ssize_t pos = 0;
        PyObject *name, *to;
        while (PyDict_Next(called, &pos, &name, &to)) {
            int64_t t, nk, na, nb;
            if (!PyUnicode_CheckExact(name)) {
                PyErr_SetString(PyExc_TypeError, "a callee is a str");
                return -1;
            }
            if (int_of(to, &t) < 0 || value_key(o, a, t, &nk, &na, &nb) < 0 || add_call(o, name, nk, na, nb) < 0)
                return -1;
        }
        return 0;
    }
    if (kind == K_K) {
        if (a < 0 || a + 1 >= o->group_off.size) {
            PyErr_SetString(PyExc_ValueError, "group out of range");
            return -1;
        }
        int64_t from = o->group_off.data[a], to = o->group_off.data[a + 1];
        return branch(o, o->group_items.data + from, (Py_ssize_t)(to - from), b);
    }
    if (kind == K_O || kind == K_P) {
        if (a < 0 || a > o->count) {
            PyErr_SetString(PyExc_ValueError, "position out of range");
            return -1;
        }
    }
    if (kind == K_O) {
        if (b) return sep_first(o, a) < 0 || close_at(o, a) < 0 ? -1 : 0;
        if (keys_at(o, a) < 0 || close_at(o, a) < 0) return -1;
        return o->extra == Py_None ? 0 : add_call(o, o->extra, K_O, a, 1);
    }
    if (kind == K_P) {
        PyObject *row = item_of(o->sep_edges, b);
        if (!row) return -1;
        if (!PyList_Check(row)) {
            PyErr_SetString(PyExc_TypeError, "expected a list");
            return -1;
        }
        for (Py_ssize_t k = 0; k < PyList_GET_SIZE(row); k++) {
            int64_t lo, hi, t;
            if (read_interval(PyList_GET_ITEM(row, k), &lo, &hi, &t) < 0 ||
                add_part(o, lo, hi, t == 0 ? K_O : K_P, a, t == 0 ? 1 : t) < 0)
                return -1;
        }
        int acc = flag_of(o->sep_accepting, b);
        if (acc < 0) return -1;
        if (acc) {
            if (keys_at(o, a) < 0) return -1;
            if (o->extra != Py_None && add_call(o, o->extra, K_O, a, 1) < 0) return -1;
        }
        return 0;
    }
    /* "o" or "c" */
    const uint8_t *data = kind == K_o ? o->opening : o->closing;
    Py_ssize_t len = kind == K_o ? o->n_opening : o->n_closing;
    if (a == len) {
        *accepts = 1;
        return 0;
    }
    if (a < 0 || a > len) {
        PyErr_SetString(PyExc_ValueError, "literal position out of range");
        return -1;
    }
    if (kind == K_o && a + 1 == len) return add_part(o, data[a], data[a], K_O, 0, 0);
    return add_part(o, data[a], data[a], kind, a + 1, 0);
}

static int budget_error(Ob *o) {
    PyObject *exc = PyObject_CallFunction(o->error, "sL", "states per rule", (long long)o->max_states);
    if (exc) {
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        Py_DECREF(exc);
    }
    return -1;
}

/* The state's number, given on first sight (number() in build): -1 with an exception. */
static int64_t number(Ob *o, int64_t kind, int64_t a, int64_t b) {
    int64_t known;
    if (map_find(&o->index, kind, a, b, &known)) return known;
    known = o->stops.size;
    if (map_put(&o->index, kind, a, b, known) < 0) return -1;
    int64_t run = 1, stop = -1;
    if (kind == K_k) {
        const uint8_t *data;
        Py_ssize_t end;
        if (key_of(o, a, &data, &end) < 0) return -1;
        int64_t found;
        stop = b + 1;
        while (stop < end && !map_find(&o->index, K_k, a, stop, &found)) {
            if (map_put(&o->index, K_k, a, stop, known + stop - b) < 0) return -1;
            stop++;
        }
        run = stop - b;
    }
    if (vec_reserve(&o->order, 3 * run) < 0 || vec_reserve(&o->stops, run) < 0) return -1;
    for (int64_t i = 0; i < run; i++) {
        o->order.data[o->order.size++] = kind;
        o->order.data[o->order.size++] = a;
        o->order.data[o->order.size++] = b;
        o->stops.data[o->stops.size++] = i ? -1 : stop;
    }
    if (o->stops.size > o->max_states) return budget_error(o);
    return known;
}

/* Appends (lo, hi, target) to ``row``. */
static int append_interval(PyObject *row, int64_t lo, int64_t hi, int64_t target) {
    PyObject *t = Py_BuildValue("(LLL)", (long long)lo, (long long)hi, (long long)target);
    if (!t) return -1;
    int r = PyList_Append(row, t);
    Py_DECREF(t);
    return r;
}

/* Sorts the parts by lo, stably (as list.sort). */
static int sort_parts(Ob *o) {
    Py_ssize_t n = o->n_parts;
    Part *p = o->parts;
    if (n <= 16) {
        for (Py_ssize_t i = 1; i < n; i++) {
            Part x = p[i];
            Py_ssize_t j = i;
            while (j > 0 && p[j - 1].lo > x.lo) p[j] = p[j - 1], j--;
            p[j] = x;
        }
        return 0;
    }
    Part *out = PyMem_RawMalloc((size_t)n * sizeof(Part));
    if (!out) {
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t counts[257] = {0};
    for (Py_ssize_t i = 0; i < n; i++) counts[p[i].lo + 1]++;
    for (int i = 0; i < 256; i++) counts[i + 1] += counts[i];
    for (Py_ssize_t i = 0; i < n; i++) out[counts[p[i].lo]++] = p[i];
    memcpy(p, out, (size_t)n * sizeof(Part));
    PyMem_RawFree(out);
    return 0;
}

/* The automaton (0: built; 1: two parts overlap, not direct; -1: an exception). */
static int build(Ob *o, PyObject *checkpoint, PyObject *edges, PyObject *calls, PyObject *accepting) {
    PyObject *no_calls = PyDict_New();
    if (!no_calls) return -1;
    int status = -1;
    if (number(o, K_o, 0, 0) < 0) goto done;
    int64_t position = 0, steps = 0;
    while (position < o->stops.size) {
        int64_t kind = o->order.data[3 * position], a = o->order.data[3 * position + 1],
                b = o->order.data[3 * position + 2];
        if (kind == K_k) {
            const uint8_t *data;
            Py_ssize_t len;
            int64_t stop = o->stops.data[position];
            if (key_of(o, a, &data, &len) < 0) goto done;
            if (stop <= b || stop > len) {
                PyErr_SetString(PyExc_ValueError, "a key run out of range");
                goto done;
            }
            int64_t count = stop - b;
            for (int64_t i = 0; i + 1 < count; i++) {
                PyObject *row = PyList_New(0);
                if (!row) goto done;
                int bad = append_interval(row, data[b + i], data[b + i], position + 1 + i) < 0 ||
                          PyList_Append(edges, row) < 0;
                Py_DECREF(row);
                if (bad) goto done;
            }
            int64_t lk = K_k, la = a, lb = stop;
            if (stop >= len && value_key(o, a, 0, &lk, &la, &lb) < 0) goto done;
            int64_t last = number(o, lk, la, lb);
            if (last < 0) goto done;
            PyObject *row = PyList_New(0);
            if (!row) goto done;
            int bad = append_interval(row, data[stop - 1], data[stop - 1], last) < 0 || PyList_Append(edges, row) < 0;
            Py_DECREF(row);
            if (bad) goto done;
            for (int64_t i = 0; i < count; i++)
                if (PyList_Append(calls, no_calls) < 0 || PyList_Append(accepting, Py_False) < 0) goto done;
            position += count;
            continue;
        }
        position++;
        steps++;
        if (!(steps & 63)) {
            PyObject *r = PyObject_CallNoArgs(checkpoint);
            if (!r) goto done;
            Py_DECREF(r);
        }
        int accepts;
        if (state_of(o, kind, a, b, &accepts) < 0) goto done;
        PyObject *row = PyList_New(0);
        if (!row) goto done;
        if (o->n_parts > 1 && sort_parts(o) < 0) {
            Py_DECREF(row);
            goto done;
        }
        int64_t last_hi = -1, row_lo = 0, row_hi = -2, row_to = -1;
        int have = 0;
        for (Py_ssize_t i = 0; i < o->n_parts; i++) {
            Part *p = &o->parts[i];
            if (o->n_parts > 1 && p->lo <= last_hi) {
                Py_DECREF(row);
                status = 1; /* two parts read the same byte here */
                goto done;
            }
            last_hi = p->hi;
            int64_t target = number(o, p->kind, p->a, p->b);
            if (target < 0) {
                Py_DECREF(row);
                goto done;
            }
            if (have && row_hi == p->lo - 1 && row_to == target) {
                row_hi = p->hi;
                continue;
            }
            if (have && append_interval(row, row_lo, row_hi, row_to) < 0) {
                Py_DECREF(row);
                goto done;
            }
            have = 1, row_lo = p->lo, row_hi = p->hi, row_to = target;
        }
        if (have && append_interval(row, row_lo, row_hi, row_to) < 0) {
            Py_DECREF(row);
            goto done;
        }
        int bad = PyList_Append(edges, row) < 0;
        Py_DECREF(row);
        if (bad) goto done;
        if (o->n_calls) {
            PyObject *called = PyDict_New();
            if (!called) goto done;
            for (Py_ssize_t i = 0; i < o->n_calls; i++) {
                CallPart *c = &o->calls[i];
                int64_t target = number(o, c->kind, c->a, c->b);
                PyObject *t = target < 0 ? NULL : PyLong_FromLongLong(target);
                if (!t || PyDict_SetItem(called, c->name, t) < 0) {
                    Py_XDECREF(t);
                    Py_DECREF(called);
                    goto done;
                }
                Py_DECREF(t);
            }
            bad = PyList_Append(calls, called) < 0;
            Py_DECREF(called);
            if (bad) goto done;
        } else if (PyList_Append(calls, no_calls) < 0) {
            goto done;
        }
        if (PyList_Append(accepting, accepts ? Py_True : Py_False) < 0) goto done;
    }
    status = 0;
done:
    Py_DECREF(no_calls);
    return status;
}

/* r3comp_object_build(opening, closing, keys, values, sep, candidates, closable, extra,
 * max_states, checkpoint, error): objects._Builder.build from the builder's parts:
 * ``keys`` a list of non-empty bytes, ``values`` per key None or (edges, calls,
 * accepting, exits) of its value's fragment, ``sep`` the separator's (edges,
 * accepting), ``candidates`` per position 0..len(keys) the end of the range of the
 * members that may come next (it starts at the position), ``closable`` per position a
 * bool, ``extra`` the extra keys' callee (a str) or None. Returns (edges, calls,
 * accepting), states numbered as build numbers them, or None where two parts read the
 * same byte at the same point. ``error("states per rule", max_states)`` is raised past
 * ``max_states`` states and ``checkpoint()`` called every 64 states, as build does. */
PyObject *r3comp_object_build(PyObject *module, PyObject *args) {
    PyObject *opening, *closing, *keys_in, *values_in, *sep, *cands_in, *closable_in, *extra, *checkpoint, *error;
    long long max_states;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!O!O!OLOO", &PyBytes_Type, &opening, &PyBytes_Type, &closing, &PyList_Type,
                          &keys_in, &PyList_Type, &values_in, &PyTuple_Type, &sep, &PyList_Type, &cands_in,
                          &PyList_Type, &closable_in, &extra, &max_states, &checkpoint, &error))
        return NULL;
    if (!PyCallable_Check(checkpoint) || !PyExceptionClass_Check(error) ||
        (extra != Py_None && !PyUnicode_CheckExact(extra))) {
        PyErr_SetString(PyExc_TypeError, "checkpoint must be callable, error an exception class, extra a str or None");
        return NULL;
    }
    if (!PyBytes_GET_SIZE(opening) || !PyBytes_GET_SIZE(closing)) {
        PyErr_SetString(PyExc_ValueError, "the opening and closing literals must not be empty");
        return NULL;
    }
    if (PyTuple_GET_SIZE(sep) != 2 || !PyList_Check(PyTuple_GET_ITEM(sep, 0)) ||
        !PyList_Check(PyTuple_GET_ITEM(sep, 1))) {
        PyErr_SetString(PyExc_TypeError, "sep is a tuple (edges, accepting) of lists");
        return NULL;
    }
    Ob o;
    memset(&o, 0, sizeof o);
    PyObject *result = NULL, *edges = NULL, *calls = NULL, *accepting = NULL;
    o.opening = (const uint8_t *)PyBytes_AS_STRING(opening);
    o.n_opening = PyBytes_GET_SIZE(opening);
    o.closing = (const uint8_t *)PyBytes_AS_STRING(closing);
    o.n_closing = PyBytes_GET_SIZE(closing);
    o.sep_edges = PyTuple_GET_ITEM(sep, 0);
    o.sep_accepting = PyTuple_GET_ITEM(sep, 1);
    o.extra = extra;
    o.max_states = max_states;
    o.error = error;
    if (!(o.keys = PySequence_Tuple(keys_in)) || !(o.values = PySequence_Tuple(values_in))) goto done;
    o.count = PyTuple_GET_SIZE(o.keys);
    if (PyTuple_GET_SIZE(o.values) != o.count || PyList_GET_SIZE(cands_in) != o.count + 1 ||
        PyList_GET_SIZE(closable_in) != o.count + 1) {
        PyErr_SetString(PyExc_ValueError, "one value per key, one candidate end and closable flag per position");
        goto done;
    }
    for (Py_ssize_t q = 0; q < o.count; q++) {
        PyObject *key = PyTuple_GET_ITEM(o.keys, q), *value = PyTuple_GET_ITEM(o.values, q);
        if (!PyBytes_Check(key) || !PyBytes_GET_SIZE(key)) {
            PyErr_SetString(PyExc_TypeError, "keys must be non-empty bytes");
            goto done;
        }
        if (value != Py_None &&
            (!PyTuple_Check(value) || PyTuple_GET_SIZE(value) != 4 || !PyList_Check(PyTuple_GET_ITEM(value, 0)) ||
             !PyList_Check(PyTuple_GET_ITEM(value, 1)) || !PyList_Check(PyTuple_GET_ITEM(value, 2)) ||
             !PyTuple_Check(PyTuple_GET_ITEM(value, 3)))) {
            PyErr_SetString(PyExc_TypeError, "a value is None or (edges, calls, accepting, exits)");
            goto done;
        }
    }
    Py_ssize_t n = o.count + 1;
    o.cand_stop = PyMem_RawMalloc((size_t)n * sizeof(int64_t));
    o.closable = PyMem_RawMalloc((size_t)n);
    if (!o.cand_stop || !o.closable) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t p = 0; p < n; p++) {
        int64_t stop;
        if (p >= PyList_GET_SIZE(cands_in) || p >= PyList_GET_SIZE(closable_in)) {
            PyErr_SetString(PyExc_ValueError, "candidates changed size");
            goto done;
        }
        if (int_of(PyList_GET_ITEM(cands_in, p), &stop) < 0) goto done;
        if (stop < p || stop > o.count) {
            PyErr_SetString(PyExc_ValueError, "a candidate range out of the members");
            goto done;
        }
        o.cand_stop[p] = stop;
        int flag = flag_of(closable_in, p);
        if (flag < 0) goto done;
        o.closable[p] = (uint8_t)flag;
    }
    if (!(o.groups = PyDict_New()) || vec_push(&o.group_off, 0) < 0) goto done;
    if (!(edges = PyList_New(0)) || !(calls = PyList_New(0)) || !(accepting = PyList_New(0))) goto done;
    int status = build(&o, checkpoint, edges, calls, accepting);
    if (status < 0) goto done;
    if (status == 1) {
        result = Py_None;
        Py_INCREF(result);
    } else {
        result = PyTuple_Pack(3, edges, calls, accepting);
    }
done:
    Py_XDECREF(edges);
    Py_XDECREF(calls);
    Py_XDECREF(accepting);
    Py_XDECREF(o.keys);
    Py_XDECREF(o.values);
    Py_XDECREF(o.groups);
    PyMem_RawFree(o.cand_stop);
    PyMem_RawFree(o.closable);
    map_free(&o.index);
    vec_free(&o.order);
    vec_free(&o.stops);
    vec_free(&o.group_items);
    vec_free(&o.group_off);
    PyMem_RawFree(o.parts);
    PyMem_RawFree(o.calls);
    PyMem_RawFree(o.scratch);
    return result;
}
