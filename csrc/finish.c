#include "native.h"

/* ------------------------------------------------------------------------------ */
/* finish: stacks walking a boundary group's rests trie                            */

/* A list of Python ints at ``index`` of list ``lists`` (borrowed; NULL + exception). */
static PyObject *list_at(PyObject *lists, int64_t index, const char *what) {
    if (index < 0 || index >= PyList_GET_SIZE(lists)) {
        PyErr_Format(PyExc_ValueError, "%s: node %lld out of range", what, (long long)index);
        return NULL;
    }
    PyObject *item = PyList_GET_ITEM(lists, index);
    if (!PyList_Check(item)) {
        PyErr_Format(PyExc_TypeError, "%s must be a list of lists", what);
        return NULL;
    }
    return item;
}

/* Pushes the ints of ``list`` to ``out``, each as (int, a, b) when ``triples``. The
 * list is held and its size read at each step: converting an item may run Python
 * code (``__index__``) that changes it. */
static int push_ints(I64Vec *out, PyObject *list, int triples, int64_t a, int64_t b) {
    Py_INCREF(list);
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(list); i++) {
        int64_t x = as_i64(PyList_GET_ITEM(list, i));
        if ((x == -1 && PyErr_Occurred()) || vec_push(out, x) < 0 ||
            (triples && (vec_push(out, a) < 0 || vec_push(out, b) < 0))) {
            Py_DECREF(list);
            return -1;
        }
    }
    Py_DECREF(list);
    return 0;
}

PyObject *jm_finish(PyObject *module, PyObject *args) {
    PyObject *byte_of, *kids, *ends, *pairs, *tables, *crossings, *expand;
    if (!PyArg_ParseTuple(args, "O!O!O!OOOO", &PyList_Type, &byte_of, &PyList_Type, &kids, &PyList_Type, &ends, &pairs,
                          &tables, &crossings, &expand))
        return NULL;
    Tables t;
    if (tables_init(&t, tables, crossings) < 0) return NULL;
    Py_ssize_t nodes = PyList_GET_SIZE(byte_of);
    if (PyList_GET_SIZE(kids) != nodes || PyList_GET_SIZE(ends) != nodes || nodes < 1) {
        PyErr_SetString(PyExc_ValueError, "byte, kids and ends must be lists of one length");
        return NULL;
    }
    /* Pair lists live in ``arena`` (context, state, ...); a work item is (node,
     * start, count) into it. */
    I64Vec arena = {0}, work = {0}, found = {0}, after = {0};
    I64Set merged = {0};
    PyObject *result = NULL;
    if (!PySequence_Check(pairs)) {
        PyErr_SetString(PyExc_TypeError, "pairs must be a sequence");
        goto done;
    }
    PyObject *pseq = PySequence_Tuple(pairs); /* (ours: a list could change under us) */
    if (!pseq) goto done;
    Py_ssize_t npairs = PyTuple_GET_SIZE(pseq);
    if (vec_reserve(&arena, 2 * npairs) < 0) {
        Py_DECREF(pseq);
        goto done;
    }
    for (Py_ssize_t i = 0; i < npairs; i++) {
        PyObject *pair = PyTuple_GET_ITEM(pseq, i);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            Py_DECREF(pseq);
            PyErr_SetString(PyExc_TypeError, "a pair is (context, state)");
            goto done;
        }
        int64_t c = as_i64(PyTuple_GET_ITEM(pair, 0)), s = as_i64(PyTuple_GET_ITEM(pair, 1));
        if ((c == -1 || s == -1) && PyErr_Occurred()) {
            Py_DECREF(pseq);
            goto done;
        }
        arena.data[arena.size++] = c;
        arena.data[arena.size++] = s;
    }
    Py_DECREF(pseq);
    {
        PyObject *root = list_at(kids, 0, "kids");
        if (!root || push_ints(&work, root, 1, 0, npairs) < 0) goto done;
    }
    /* A tree's node is visited once: more visits than nodes means a cycle (the
     * Python form would loop forever). */
    Py_ssize_t visits = 0;
    while (work.size) {
        work.size -= 3;
        int64_t node = work.data[work.size], start = work.data[work.size + 1], count = work.data[work.size + 2];
        /* (The list's size now: expand may have changed it.) */
        if (node <= 0 || node >= nodes || node >= PyList_GET_SIZE(byte_of)) {
            PyErr_Format(PyExc_ValueError, "rest node %lld out of range", (long long)node);
            goto done;
        }
        if (++visits > nodes) {
            PyErr_SetString(PyExc_ValueError, "the rests are not a tree");
            goto done;
        }
        int64_t byte = as_i64(PyList_GET_ITEM(byte_of, node));
        if (byte < 0 || byte > 255) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "a rest byte out of range");
            goto done;
        }
        /* ``after``: the stacks after the byte, in the Python form's order, each once;
         * then only those still reading (context >= 0) go on. */
        after.size = 0;
        if (count == 1) {
            int64_t context = arena.data[start], state = arena.data[start + 1];
            int64_t target = step_of(&t, context, state, byte);
            if (target == -2) goto done;
            if (target < 0) continue;
            int crossing = crossing_of(&t, context, target);
            if (crossing < 0) goto done;
            if (crossing) {
                if (push_expanded(expand, context, target, &after, 0, 0) < 0) goto done;
            } else {
                if (vec_push(&after, context) < 0 || vec_push(&after, target) < 0) goto done;
            }
        } else {
            I64Vec raw = {0};
            for (int64_t k = 0; k < count; k++) {
                int64_t context = arena.data[start + 2 * k], state = arena.data[start + 2 * k + 1];
                int64_t target = step_of(&t, context, state, byte);
                if (target == -2) {
                    vec_free(&raw);
                    goto done;
                }
                if (target < 0) continue;
                int crossing = crossing_of(&t, context, target);
                if (crossing < 0) {
                    vec_free(&raw);
                    goto done;
                }
                if (crossing) {
                    if (push_expanded(expand, context, target, &raw, 0, 0) < 0) {
                        vec_free(&raw);
                        goto done;
                    }
                } else if (vec_push(&raw, context) < 0 || vec_push(&raw, target) < 0) {
                    vec_free(&raw);
                    goto done;
                }
            }
            /* First occurrences only, in order (the Python form's dict). A pair is a
             * key of 64 bits when both halves fit 32; else compared in full. */
            Py_ssize_t nraw = raw.size / 2;
            if (set_init(&merged, nraw) < 0) {
                vec_free(&raw);
                goto done;
            }
            for (Py_ssize_t k = 0; k < nraw; k++) {
                int64_t c = raw.data[2 * k], s = raw.data[2 * k + 1];
                int fresh;
                if (c >= INT32_MIN && c <= INT32_MAX && s >= INT32_MIN && s <= INT32_MAX) {
                    fresh = set_add(&merged, (int64_t)(((uint64_t)(uint32_t)c << 32) | (uint32_t)s));
                } else {
                    fresh = 1;
                    for (Py_ssize_t j = 0; j < after.size; j += 2)
                        if (after.data[j] == c && after.data[j + 1] == s) fresh = 0;
                }
                if (fresh && (vec_push(&after, c) < 0 || vec_push(&after, s) < 0)) {
                    vec_free(&raw);
                    goto done;
                }
            }
            vec_free(&raw);
            if (!after.size) continue;
        }
        PyObject *ending = list_at(ends, node, "ends");
        if (!ending) goto done;
        if (push_ints(&found, ending, 0, 0, 0) < 0) goto done;
        PyObject *children = list_at(kids, node, "kids");
        if (!children) goto done;
        Py_ssize_t nkids = PyList_GET_SIZE(children);
        if (!nkids) continue;
        int64_t readers_start = arena.size, readers = 0;
        if (vec_reserve(&arena, after.size) < 0) goto done;
        for (Py_ssize_t j = 0; j < after.size; j += 2) {
            if (after.data[j] >= 0) {
                arena.data[arena.size++] = after.data[j];
                arena.data[arena.size++] = after.data[j + 1];
                readers++;
            }
        }
        if (!readers) continue;
        if (push_ints(&work, children, 1, readers_start, readers) < 0) goto done;
    }
    result = vec_to_list(&found);
done:
    tables_free(&t);
    vec_free(&arena);
    vec_free(&work);
    vec_free(&found);
    vec_free(&after);
    set_free(&merged);
    return result;
}
