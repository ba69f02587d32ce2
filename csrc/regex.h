/* The regex kernels' shared parts (regex.c, glushkov.c): interned int64 arrays, raw
 * automata on flat arrays of code-point intervals, reading the Python inputs. */
#ifndef JSONMODE_REGEX_H
#define JSONMODE_REGEX_H

#include "native.h"

/* ------------------------------------------------------------------------------ */
/* Interned int64 arrays: equal arrays get one id, ids dense from 0                  */

typedef struct {
    I64Vec items, start, len, hash;
    Py_ssize_t *slots; /* id + 1; 0: empty */
    Py_ssize_t cap;
} Intern;

static inline uint64_t hash_array(const int64_t *a, Py_ssize_t n) {
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ (uint64_t)n;
    for (Py_ssize_t i = 0; i < n; i++) h = mix(h ^ ((uint64_t)a[i] + 0x632be59bd9b4e019ULL)) + 1;
    return h;
}

static inline void intern_free(Intern *t) {
    vec_free(&t->items);
    vec_free(&t->start);
    vec_free(&t->len);
    vec_free(&t->hash);
    PyMem_Free(t->slots);
    t->slots = NULL;
    t->cap = 0;
}

static inline Py_ssize_t intern_count(const Intern *t) { return t->len.size; }
static inline const int64_t *intern_at(const Intern *t, Py_ssize_t id) { return t->items.data + t->start.data[id]; }

/* The id of ``a[0..n)`` (hash ``h``), added when new (*fresh = 1); -1 on MemoryError. */
static inline Py_ssize_t intern_get(Intern *t, const int64_t *a, Py_ssize_t n, uint64_t h, int *fresh) {
    Py_ssize_t count = intern_count(t);
    if (2 * (count + 1) > t->cap) {
        Py_ssize_t cap = t->cap ? 2 * t->cap : 64;
        if (cap > PY_SSIZE_T_MAX / (Py_ssize_t)sizeof(Py_ssize_t) / 2) {
            PyErr_NoMemory();
            return -1;
        }
        Py_ssize_t *slots = PyMem_Calloc((size_t)cap, sizeof(Py_ssize_t));
        if (!slots) {
            PyErr_NoMemory();
            return -1;
        }
        for (Py_ssize_t id = 0; id < count; id++) {
            Py_ssize_t at = (Py_ssize_t)((uint64_t)t->hash.data[id] & (uint64_t)(cap - 1));
            while (slots[at]) at = (at + 1) & (cap - 1);
            slots[at] = id + 1;
        }
        PyMem_Free(t->slots);
        t->slots = slots;
        t->cap = cap;
    }
    Py_ssize_t mask = t->cap - 1;
    Py_ssize_t at = (Py_ssize_t)(h & (uint64_t)mask);
    while (t->slots[at]) {
        Py_ssize_t id = t->slots[at] - 1;
        if ((uint64_t)t->hash.data[id] == h && t->len.data[id] == n &&
            (n == 0 || !memcmp(intern_at(t, id), a, (size_t)n * sizeof(int64_t)))) {
            *fresh = 0;
            return id;
        }
        at = (at + 1) & mask;
    }
    if (vec_reserve(&t->items, n ? n : 1) < 0 || /* (never NULL once used) */ vec_push(&t->start, t->items.size) < 0 || vec_reserve(&t->hash, 1) < 0 ||
        vec_reserve(&t->len, 1) < 0)
        return -1;
    if (n) memcpy(t->items.data + t->items.size, a, (size_t)n * sizeof(int64_t));
    t->items.size += n;
    t->hash.data[t->hash.size++] = (int64_t)h;
    t->len.data[t->len.size++] = n;
    t->slots[at] = count + 1;
    *fresh = 1;
    return count;
}

/* ------------------------------------------------------------------------------ */
/* A raw automaton: per state an accepting flag and a row of (lo, hi, dst) edges     */

typedef struct {
    Py_ssize_t n, start;
    uint8_t *acc;        /* n */
    I64Vec row;          /* n + 1 offsets into lo/hi/dst */
    I64Vec lo, hi, dst;
} Raw;

static inline void raw_free(Raw *r) {
    PyMem_Free(r->acc);
    r->acc = NULL;
    vec_free(&r->row);
    vec_free(&r->lo);
    vec_free(&r->hi);
    vec_free(&r->dst);
}

static inline int raw_edge(Raw *r, int64_t lo, int64_t hi, int64_t dst) {
    if (vec_push(&r->lo, lo) < 0 || vec_push(&r->hi, hi) < 0 || vec_push(&r->dst, dst) < 0) return -1;
    return 0;
}

static inline int tick(PyObject *checkpoint) {
    PyObject *got = PyObject_CallNoArgs(checkpoint);
    if (!got) return -1;
    Py_DECREF(got);
    return 0;
}

static inline int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Sorts ``a[0..n)`` ascending (no call for fewer than two: ``a`` may be NULL then). */
static inline void sort_i64(int64_t *a, Py_ssize_t n) {
    if (n > 1) qsort(a, (size_t)n, sizeof(int64_t), cmp_i64);
}

/* The index of ``x`` in the sorted ``points`` (present). */
static inline Py_ssize_t point_index(const int64_t *points, Py_ssize_t count, int64_t x) {
    Py_ssize_t lo = 0, hi = count - 1;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (points[mid] < x) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static inline void *alloc(Py_ssize_t count, size_t size) {
    if (count < 0 || (size_t)count > ((size_t)PY_SSIZE_T_MAX) / size / 2) return NULL;
    return PyMem_Calloc(count ? (size_t)count : 1, size);
}

/* The (accepting, edges) tuples of the one-state empty DFA. */
/* ------------------------------------------------------------------------------ */
/* Reading the Python inputs                                                        */

/* An exact-enough int (int or a subclass: no Python code runs) as int64; -1 with an
 * exception on error (check *bad). */
static inline int64_t read_int(PyObject *o, int *bad) {
    if (!PyLong_Check(o)) {
        PyErr_SetString(PyExc_TypeError, "an int expected");
        *bad = 1;
        return -1;
    }
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow || (x == -1 && PyErr_Occurred())) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "an int out of range");
        *bad = 1;
        return -1;
    }
    return (int64_t)x;
}

/* ``o`` as a tuple of our own of length ``size`` (-1: any); NULL with an exception. */
static inline PyObject *own_tuple(PyObject *o, Py_ssize_t size, const char *what) {
    PyObject *t = PyTuple_CheckExact(o) ? (Py_INCREF(o), o) : PySequence_Tuple(o);
    if (!t) return NULL;
    if (size >= 0 && PyTuple_GET_SIZE(t) != size) {
        Py_DECREF(t);
        PyErr_Format(PyExc_ValueError, "%s must have %zd items", what, size);
        return NULL;
    }
    return t;
}

#define MAX_ITEMS ((Py_ssize_t)1 << 30)

/* The rows of ``edges`` (a tuple of rows of (lo, hi, dst) triples: sorted, disjoint,
 * each lo >= ``min_lo`` and hi <= ``max_hi``, 0 <= dst < the number of rows, at most
 * MAX_ITEMS in all): the number of rows into ``*n``, each row's first edge number into
 * ``row`` (then the total), each edge to ``store(ctx, lo, hi, dst)`` (-1: failed, with
 * an exception); -1 with an exception (regex.c). */
int jm_regex_read_rows(PyObject *edges, int64_t min_lo, int64_t max_hi, Py_ssize_t *n, I64Vec *row,
                       int (*store)(void *, int64_t, int64_t, int64_t), void *ctx);
/* The canonical (accepting, edges) tuples of ``r`` minimised (regex.c). */
PyObject *jm_regex_minimize(const Raw *r, PyObject *checkpoint);

#endif
