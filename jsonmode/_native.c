/* jsonmode._native: the compiled kernels of the mask engine (see jsonmode/native.py).
 *
 * Each kernel is the C form of a pure-Python function that stays in the package as
 * the reference and the fallback; the two must give the same answers, and the
 * differential tests (tests/test_native_*.py) hold them so:
 *
 *   Trie.walk_stacks  jsonmode.decoding.engine.trie.TokenTrie.walk_stacks
 *   finish            jsonmode.decoding.engine.boundary.Stacks.finish
 *   apply_rows        jsonmode.decoding.batch_masks._apply_numpy (GIL released, rows
 *                     spread over threads)
 *
 * Safety: every index read from a caller's buffer is checked against that buffer's
 * length (a bad one raises ValueError, never reads past it); work lists grow on the
 * heap, never on the C stack (no recursion); the walk keeps the Python budget of
 * (node, stack) pairs. The walk kernels hold the GIL (they call back into Python for
 * the stacks' closures); apply_rows checks its arguments with the GIL held, then
 * releases it while it writes.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define KERNELS_VERSION 4
#define MAX_THREADS 64

/* ------------------------------------------------------------------------------ */
/* Growable arrays                                                                  */

typedef struct {
    int64_t *data;
    Py_ssize_t size;
    Py_ssize_t cap;
} I64Vec;

/* Room for ``more`` items; -1 when out of memory (no exception set: callable without
 * the GIL). */
static int vec_grow(I64Vec *v, Py_ssize_t more) {
    if (v->size + more <= v->cap) return 0;
    Py_ssize_t cap = v->cap ? v->cap : 64;
    while (cap < v->size + more) {
        if (cap > PY_SSIZE_T_MAX / 2 / (Py_ssize_t)sizeof(int64_t)) return -1;
        cap *= 2;
    }
    int64_t *data = PyMem_RawRealloc(v->data, (size_t)cap * sizeof(int64_t));
    if (!data) return -1;
    v->data = data;
    v->cap = cap;
    return 0;
}

/* vec_grow with MemoryError set on failure (the GIL held). */
static int vec_reserve(I64Vec *v, Py_ssize_t more) {
    if (vec_grow(v, more) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static int vec_push(I64Vec *v, int64_t x) {
    if (vec_reserve(v, 1) < 0) return -1;
    v->data[v->size++] = x;
    return 0;
}

static void vec_free(I64Vec *v) {
    PyMem_RawFree(v->data);
    v->data = NULL;
    v->size = v->cap = 0;
}

static PyObject *vec_to_list(const I64Vec *v) {
    PyObject *out = PyList_New(v->size);
    if (!out) return NULL;
    for (Py_ssize_t i = 0; i < v->size; i++) {
        PyObject *x = PyLong_FromLongLong(v->data[i]);
        if (!x) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, x);
    }
    return out;
}

/* A set of int64 keys (open addressing), cleared between uses. */
typedef struct {
    int64_t *keys;
    uint8_t *used;
    Py_ssize_t cap; /* a power of two */
    Py_ssize_t count;
} I64Set;

static int set_init(I64Set *s, Py_ssize_t expected) {
    Py_ssize_t cap = 16;
    while (cap < 2 * expected) cap *= 2;
    if (s->cap < cap) {
        PyMem_Free(s->keys);
        PyMem_Free(s->used);
        s->keys = PyMem_Malloc((size_t)cap * sizeof(int64_t));
        s->used = PyMem_Malloc((size_t)cap);
        if (!s->keys || !s->used) {
            PyErr_NoMemory();
            s->cap = 0;
            return -1;
        }
        s->cap = cap;
    }
    memset(s->used, 0, (size_t)s->cap);
    s->count = 0;
    return 0;
}

static inline uint64_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return x;
}

/* 1 when added, 0 when present already. The caller sized the set for every key. */
static int set_add(I64Set *s, int64_t key) {
    Py_ssize_t mask = s->cap - 1;
    Py_ssize_t at = (Py_ssize_t)(mix((uint64_t)key) & (uint64_t)mask);
    while (s->used[at]) {
        if (s->keys[at] == key) return 0;
        at = (at + 1) & mask;
    }
    s->used[at] = 1;
    s->keys[at] = key;
    s->count++;
    return 1;
}

static void set_free(I64Set *s) {
    PyMem_Free(s->keys);
    PyMem_Free(s->used);
    s->keys = NULL;
    s->used = NULL;
    s->cap = s->count = 0;
}

/* ------------------------------------------------------------------------------ */
/* Reading Python values                                                            */

/* An int from a Python int, as int64 (-1 with an exception set on failure: callers
 * check PyErr_Occurred only when the value is -1). */
static inline int64_t as_i64(PyObject *o) { return (int64_t)PyLong_AsLongLong(o); }

/* The rule tables of the stacks: tables[context] is a flat int32 buffer
 * (state * 256 + byte; -1: none), crossings[context] a bytes object (non-zero: the
 * state is crossing). Buffers are taken once per context per call. */
typedef struct {
    PyObject *tables;    /* list */
    PyObject *crossings; /* list */
    Py_buffer *views;    /* per context, taken on first use */
    uint8_t *taken;
    Py_ssize_t count;
} Tables;

static int tables_init(Tables *t, PyObject *tables, PyObject *crossings) {
    if (!PyList_Check(tables) || !PyList_Check(crossings)) {
        PyErr_SetString(PyExc_TypeError, "tables and crossings must be lists");
        return -1;
    }
    t->tables = tables;
    t->crossings = crossings;
    t->count = 0;
    t->views = NULL;
    t->taken = NULL;
    return 0;
}

static void tables_free(Tables *t) {
    for (Py_ssize_t i = 0; i < t->count; i++)
        if (t->taken[i]) PyBuffer_Release(&t->views[i]);
    PyMem_Free(t->views);
    PyMem_Free(t->taken);
    t->views = NULL;
    t->taken = NULL;
    t->count = 0;
}

/* The table of ``context`` (NULL with an exception on error); its entry count in *n. */
static const int32_t *table_of(Tables *t, int64_t context, Py_ssize_t *n) {
    Py_ssize_t size = PyList_GET_SIZE(t->tables);
    if (context < 0 || context >= size || context >= PyList_GET_SIZE(t->crossings)) {
        PyErr_Format(PyExc_ValueError, "context %lld out of range", (long long)context);
        return NULL;
    }
    if (context >= t->count) {
        Py_ssize_t count = size;
        Py_buffer *views = PyMem_Realloc(t->views, (size_t)count * sizeof(Py_buffer));
        if (!views) {
            PyErr_NoMemory();
            return NULL;
        }
        t->views = views;
        uint8_t *taken = PyMem_Realloc(t->taken, (size_t)count);
        if (!taken) {
            PyErr_NoMemory();
            return NULL;
        }
        t->taken = taken;
        memset(t->taken + t->count, 0, (size_t)(count - t->count));
        t->count = count;
    }
    Py_buffer *view = &t->views[context];
    if (!t->taken[context]) {
        if (PyObject_GetBuffer(PyList_GET_ITEM(t->tables, context), view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
            return NULL;
        t->taken[context] = 1;
        if (view->itemsize != 4 || !view->format || (strcmp(view->format, "i") && strcmp(view->format, "=i") && strcmp(view->format, "<i"))) {
            PyErr_SetString(PyExc_TypeError, "a rule table must be a buffer of int32");
            return NULL;
        }
    }
    *n = view->len / 4;
    return (const int32_t *)view->buf;
}

/* Whether ``state`` of ``context`` is crossing (-1 with an exception on error). */
static inline int crossing_of(Tables *t, int64_t context, int64_t state) {
    if (context < 0 || context >= PyList_GET_SIZE(t->crossings)) { /* (a callback may change the list) */
        PyErr_Format(PyExc_ValueError, "context %lld out of range", (long long)context);
        return -1;
    }
    PyObject *flags = PyList_GET_ITEM(t->crossings, context);
    if (!PyBytes_Check(flags)) {
        PyErr_SetString(PyExc_TypeError, "crossings must be bytes");
        return -1;
    }
    if (state < 0 || state >= PyBytes_GET_SIZE(flags)) {
        PyErr_Format(PyExc_ValueError, "state %lld out of range", (long long)state);
        return -1;
    }
    return PyBytes_AS_STRING(flags)[state] != 0;
}

/* The step of (context, state) over ``byte``: the target state, -1 for none, -2 on
 * error (an exception set). */
static inline int64_t step_of(Tables *t, int64_t context, int64_t state, int64_t byte) {
    Py_ssize_t n;
    const int32_t *table = table_of(t, context, &n);
    if (!table) return -2;
    if (state < 0 || byte < 0 || byte > 255 || state >= n / 256 + 1 || state * 256 + byte >= n) {
        PyErr_Format(PyExc_ValueError, "state %lld or byte %lld out of the table", (long long)state, (long long)byte);
        return -2;
    }
    return table[state * 256 + byte];
}

/* Appends the pairs of ``expand(context, state)`` (a tuple of (context, state)
 * tuples) to ``out`` as two int64 each. */
static int push_expanded(PyObject *expand, int64_t context, int64_t state, I64Vec *out, int64_t node, int with_node) {
    PyObject *args = Py_BuildValue("(LL)", (long long)context, (long long)state);
    if (!args) return -1;
    PyObject *pairs = PyObject_Call(expand, args, NULL);
    Py_DECREF(args);
    if (!pairs) return -1;
    /* A tuple of our own (a list could change while its ints convert). */
    PyObject *seq = PySequence_Tuple(pairs);
    Py_DECREF(pairs);
    if (!seq) return -1;
    Py_ssize_t n = PyTuple_GET_SIZE(seq);
    if (vec_reserve(out, n * (with_node ? 3 : 2)) < 0) {
        Py_DECREF(seq);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PyTuple_GET_ITEM(seq, i);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            Py_DECREF(seq);
            PyErr_SetString(PyExc_TypeError, "expand must return (context, state) tuples");
            return -1;
        }
        int64_t c = as_i64(PyTuple_GET_ITEM(pair, 0));
        int64_t s = as_i64(PyTuple_GET_ITEM(pair, 1));
        if ((c == -1 || s == -1) && PyErr_Occurred()) {
            Py_DECREF(seq);
            return -1;
        }
        if (with_node) out->data[out->size++] = node;
        out->data[out->size++] = c;
        out->data[out->size++] = s;
    }
    Py_DECREF(seq);
    return 0;
}

/* ------------------------------------------------------------------------------ */
/* Trie: the token trie's levels, for walk_stacks                                  */

enum { L_LO, L_HI, L_TERM, L_CHILD_LO, L_CHILD_HI, L_BYTE, L_FIELDS };

/* Whether a buffer's format is a signed 8-byte int (NumPy's int64 is "l" or "q"), or
 * a signed 4-byte one ("i"; callers check the item size too). */
static int is_int64(const char *format) {
    if (!format) return 0;
    if (*format == '=' || *format == '<' || *format == '@') format++;
    return !strcmp(format, "l") || !strcmp(format, "q");
}

static int is_int32(const char *format) {
    if (!format) return 0;
    if (*format == '=' || *format == '<' || *format == '@') format++;
    return !strcmp(format, "i") || !strcmp(format, "l");
}

typedef struct {
    PyObject_HEAD
    Py_ssize_t levels;
    Py_buffer *views; /* levels * L_FIELDS, each a 1-D int64 buffer */
    int taken;
} TrieObject;

static void Trie_dealloc(TrieObject *self) {
    for (Py_ssize_t i = 0; i < self->taken; i++) PyBuffer_Release(&self->views[i]);
    PyMem_Free(self->views);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Trie_init(TrieObject *self, PyObject *args, PyObject *kwds) {
    PyObject *levels;
    static char *kwlist[] = {"levels", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O", kwlist, &levels)) return -1;
    if (self->views) {
        PyErr_SetString(PyExc_TypeError, "a Trie is initialised once");
        return -1;
    }
    PyObject *seq = PySequence_Fast(levels, "levels must be a sequence");
    if (!seq) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    self->views = PyMem_Calloc((size_t)(n ? n : 1) * L_FIELDS, sizeof(Py_buffer));
    if (!self->views) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    self->levels = n;
    for (Py_ssize_t d = 0; d < n; d++) {
        PyObject *level = PySequence_Fast_GET_ITEM(seq, d);
        if (!PyTuple_Check(level) || PyTuple_GET_SIZE(level) != L_FIELDS) {
            Py_DECREF(seq);
            PyErr_SetString(PyExc_TypeError, "a level is (lo, hi, term, child_lo, child_hi, byte)");
            return -1;
        }
        for (int f = 0; f < L_FIELDS; f++) {
            Py_buffer *view = &self->views[d * L_FIELDS + f];
            if (PyObject_GetBuffer(PyTuple_GET_ITEM(level, f), view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
                Py_DECREF(seq);
                return -1;
            }
            self->taken++;
            if (view->itemsize != 8 || view->ndim > 1 || !is_int64(view->format)) {
                Py_DECREF(seq);
                PyErr_SetString(PyExc_TypeError, "trie arrays must be 1-D int64");
                return -1;
            }
        }
        Py_ssize_t nodes = self->views[d * L_FIELDS + L_BYTE].len / 8;
        for (int f = 0; f < L_BYTE; f++) {
            if (self->views[d * L_FIELDS + f].len / 8 != nodes) {
                Py_DECREF(seq);
                PyErr_SetString(PyExc_ValueError, "a level's arrays differ in length");
                return -1;
            }
        }
    }
    /* Children must lie in the next level, and ascend (bisect relies on it). */
    for (Py_ssize_t d = 0; d < n; d++) {
        Py_ssize_t nodes = self->views[d * L_FIELDS + L_BYTE].len / 8;
        Py_ssize_t below = d + 1 < n ? self->views[(d + 1) * L_FIELDS + L_BYTE].len / 8 : 0;
        const int64_t *clo = self->views[d * L_FIELDS + L_CHILD_LO].buf;
        const int64_t *chi = self->views[d * L_FIELDS + L_CHILD_HI].buf;
        const int64_t *term = self->views[d * L_FIELDS + L_TERM].buf;
        for (Py_ssize_t i = 0; i < nodes; i++) {
            if (clo[i] < 0 || chi[i] < clo[i] || chi[i] > below || term[i] < 0) {
                Py_DECREF(seq);
                PyErr_SetString(PyExc_ValueError, "a trie level points outside the next one");
                return -1;
            }
        }
    }
    Py_DECREF(seq);
    return 0;
}

static inline const int64_t *field(TrieObject *t, Py_ssize_t depth, int f) {
    return (const int64_t *)t->views[depth * L_FIELDS + f].buf;
}

/* First child in [first, end) of ``below`` whose byte is >= ``byte`` (below ascends
 * over a node's children). */
static inline Py_ssize_t bisect(const int64_t *below, Py_ssize_t first, Py_ssize_t end, int64_t byte) {
    while (first < end) {
        Py_ssize_t mid = first + (end - first) / 2;
        if (below[mid] < byte)
            first = mid + 1;
        else
            end = mid;
    }
    return first;
}

static PyObject *Trie_walk_stacks(TrieObject *self, PyObject *args) {
    PyObject *tables, *crossings, *reads, *expand, *seeds;
    long long budget;
    if (!PyArg_ParseTuple(args, "OOOOOL", &tables, &crossings, &reads, &expand, &seeds, &budget)) return NULL;
    Tables t;
    if (tables_init(&t, tables, crossings) < 0) return NULL;
    I64Vec found = {0}, frontier = {0}, following = {0};
    I64Set credited = {0};
    PyObject *result = NULL;

    if (!PySequence_Check(seeds)) {
        PyErr_SetString(PyExc_TypeError, "seeds must be a sequence");
        goto done;
    }
    PyObject *seedseq = PySequence_Tuple(seeds); /* (ours: a list could change under us) */
    if (!seedseq) goto done;
    Py_ssize_t nseeds = PyTuple_GET_SIZE(seedseq);
    if (vec_reserve(&frontier, 3 * nseeds) < 0) {
        Py_DECREF(seedseq);
        goto done;
    }
    for (Py_ssize_t i = 0; i < nseeds; i++) {
        PyObject *seed = PyTuple_GET_ITEM(seedseq, i);
        if (!PyTuple_Check(seed) || PyTuple_GET_SIZE(seed) != 3) {
            Py_DECREF(seedseq);
            PyErr_SetString(PyExc_TypeError, "a seed is (node, context, state)");
            goto done;
        }
        for (int k = 0; k < 3; k++) {
            int64_t x = as_i64(PyTuple_GET_ITEM(seed, k));
            if (x == -1 && PyErr_Occurred()) {
                Py_DECREF(seedseq);
                goto done;
            }
            frontier.data[frontier.size++] = x;
        }
    }
    Py_DECREF(seedseq);

    Py_ssize_t depth = 1, levels = self->levels;
    long long seen = 0;
    while (frontier.size) {
        Py_ssize_t count = frontier.size / 3;
        seen += count;
        if (seen > budget) {
            result = Py_None;
            Py_INCREF(result);
            goto done;
        }
        if (depth - 1 >= levels) {
            PyErr_SetString(PyExc_ValueError, "the walk went below the trie");
            goto done;
        }
        Py_ssize_t nodes = self->views[(depth - 1) * L_FIELDS + L_BYTE].len / 8;
        const int64_t *lo_of = field(self, depth - 1, L_LO);
        const int64_t *term_of = field(self, depth - 1, L_TERM);
        const int64_t *child_lo = field(self, depth - 1, L_CHILD_LO);
        const int64_t *child_hi = field(self, depth - 1, L_CHILD_HI);
        const int64_t *below = depth < levels ? field(self, depth, L_BYTE) : NULL;
        following.size = 0;
        if (set_init(&credited, count) < 0) goto done;
        for (Py_ssize_t i = 0; i < count; i++) {
            int64_t node = frontier.data[3 * i], context = frontier.data[3 * i + 1], state = frontier.data[3 * i + 2];
            if (node < 0 || node >= nodes) {
                PyErr_Format(PyExc_ValueError, "node %lld out of range", (long long)node);
                goto done;
            }
            if (set_add(&credited, node)) {
                int64_t term = term_of[node];
                if (term) {
                    int64_t lo = lo_of[node];
                    if (vec_reserve(&found, term) < 0) goto done;
                    for (int64_t p = lo; p < lo + term; p++) found.data[found.size++] = p;
                }
            }
            if (below == NULL || context < 0) continue;
            int64_t first = child_lo[node], end = child_hi[node];
            if (first == end) continue;
            Py_ssize_t n;
            const int32_t *table = table_of(&t, context, &n);
            if (!table) goto done;
            if (state < 0 || state >= n / 256) {
                PyErr_Format(PyExc_ValueError, "state %lld out of the table", (long long)state);
                goto done;
            }
            int64_t base = state * 256;
            if (end - first > 16) {
                PyObject *rargs = Py_BuildValue("(LL)", (long long)context, (long long)state);
                if (!rargs) goto done;
                PyObject *readable = PyObject_Call(reads, rargs, NULL);
                Py_DECREF(rargs);
                if (!readable) goto done;
                PyObject *rseq = PySequence_Fast(readable, "reads must return a sequence of bytes");
                Py_DECREF(readable);
                if (!rseq) goto done;
                Py_ssize_t nread = PySequence_Fast_GET_SIZE(rseq);
                if (nread < end - first) {
                    /* (The size read at each step: expand may change the list, and
                     * Python's loop over it stops where it ends.) */
                    for (Py_ssize_t k = 0; k < PySequence_Fast_GET_SIZE(rseq); k++) {
                        int64_t byte = as_i64(PySequence_Fast_GET_ITEM(rseq, k));
                        if (byte < 0 || byte > 255) {
                            Py_DECREF(rseq);
                            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "a read byte out of range");
                            goto done;
                        }
                        Py_ssize_t child = bisect(below, first, end, byte);
                        if (child < end && below[child] == byte) {
                            int64_t target = table[base + byte];
                            if (target < 0) continue; /* (the Python form steps to -1 too: see below) */
                            int crossing = crossing_of(&t, context, target);
                            if (crossing < 0) {
                                Py_DECREF(rseq);
                                goto done;
                            }
                            if (crossing) {
                                if (push_expanded(expand, context, target, &following, child, 1) < 0) {
                                    Py_DECREF(rseq);
                                    goto done;
                                }
                            } else {
                                if (vec_reserve(&following, 3) < 0) {
                                    Py_DECREF(rseq);
                                    goto done;
                                }
                                following.data[following.size++] = child;
                                following.data[following.size++] = context;
                                following.data[following.size++] = target;
                            }
                        }
                    }
                    Py_DECREF(rseq);
                    continue;
                }
                Py_DECREF(rseq);
            }
            for (int64_t child = first; child < end; child++) {
                int64_t byte = below[child];
                if (byte < 0 || byte > 255) {
                    PyErr_SetString(PyExc_ValueError, "a trie byte out of range");
                    goto done;
                }
                int64_t target = table[base + byte];
                if (target >= 0) {
                    int crossing = crossing_of(&t, context, target);
                    if (crossing < 0) goto done;
                    if (crossing) {
                        if (push_expanded(expand, context, target, &following, child, 1) < 0) goto done;
                    } else {
                        if (vec_reserve(&following, 3) < 0) goto done;
                        following.data[following.size++] = child;
                        following.data[following.size++] = context;
                        following.data[following.size++] = target;
                    }
                }
            }
        }
        I64Vec swap = frontier;
        frontier = following;
        following = swap;
        depth++;
    }
    result = vec_to_list(&found);
done:
    tables_free(&t);
    vec_free(&found);
    vec_free(&frontier);
    vec_free(&following);
    set_free(&credited);
    return result;
}


/* One walk of an automaton over the trie (TokenTrie.walk's levels after the wide
 * start): from (node, state) pairs at ``depth``, every live node is visited level by
 * level; a node's own tokens are read inside (``inside``: lo, hi ranges), and a node in
 * a crossing state with tokens below it is a boundary entry (rest, hi, depth, node),
 * kept apart for levels whose frontier was small (at most ``small`` pairs), as the
 * Python form records them in two lists. Runs without the GIL: no Python object is
 * touched, and errors are codes. */
typedef struct {
    const char *table; /* int32 or int64 items */
    int wide_items;    /* 1: int64 */
    Py_ssize_t table_len;
    const uint8_t *crossing;
    Py_ssize_t crossing_len;
    int64_t dead;
    Py_ssize_t small;
} Automaton;

enum { WALK_OK = 0, WALK_NOMEM = -1, WALK_BAD_STATE = -2, WALK_BAD_NODE = -3 };

static inline int64_t auto_step(const Automaton *a, int64_t at) {
    return a->wide_items ? ((const int64_t *)a->table)[at] : ((const int32_t *)a->table)[at];
}

static int trie_walk(TrieObject *t, const Automaton *a, I64Vec *frontier, Py_ssize_t depth, I64Vec *inside,
                     uint8_t *flags, Py_ssize_t nflags, Py_ssize_t big_until, I64Vec *big, I64Vec *smallb) {
    I64Vec next = {0};
    int code = WALK_OK;
    Py_ssize_t levels = t->levels;
    while (frontier->size) {
        Py_ssize_t count = frontier->size / 2;
        if (depth < 1 || depth > levels) {
            code = WALK_BAD_NODE;
            break;
        }
        I64Vec *bounds = count <= a->small && depth > big_until ? smallb : big;
        Py_ssize_t nodes = t->views[(depth - 1) * L_FIELDS + L_BYTE].len / 8;
        const int64_t *lo_of = field(t, depth - 1, L_LO);
        const int64_t *hi_of = field(t, depth - 1, L_HI);
        const int64_t *term_of = field(t, depth - 1, L_TERM);
        const int64_t *child_lo = field(t, depth - 1, L_CHILD_LO);
        const int64_t *child_hi = field(t, depth - 1, L_CHILD_HI);
        const int64_t *below = depth < levels ? field(t, depth, L_BYTE) : NULL;
        next.size = 0;
        for (Py_ssize_t i = 0; i < count; i++) {
            int64_t node = frontier->data[2 * i], state = frontier->data[2 * i + 1];
            if (node < 0 || node >= nodes) {
                code = WALK_BAD_NODE;
                goto out;
            }
            if (state < 0 || state >= a->crossing_len || state >= a->table_len / 256) {
                code = WALK_BAD_STATE;
                goto out;
            }
            int64_t lo = lo_of[node], term = term_of[node], hi = hi_of[node];
            if (term && flags) {
                if (lo < 0 || lo + term > nflags) {
                    code = WALK_BAD_NODE;
                    goto out;
                }
                memset(flags + lo, 1, (size_t)term);
            } else if (term) {
                if (vec_grow(inside, 2) < 0) {
                    code = WALK_NOMEM;
                    goto out;
                }
                inside->data[inside->size++] = lo;
                inside->data[inside->size++] = lo + term;
            }
            if (a->crossing[state] && lo + term < hi) {
                if (vec_grow(bounds, 4) < 0) {
                    code = WALK_NOMEM;
                    goto out;
                }
                bounds->data[bounds->size++] = lo + term;
                bounds->data[bounds->size++] = hi;
                bounds->data[bounds->size++] = depth;
                bounds->data[bounds->size++] = node;
            }
            if (below == NULL) continue;
            int64_t first = child_lo[node], end = child_hi[node];
            if (first == end) continue;
            if (vec_grow(&next, 2 * (end - first)) < 0) {
                code = WALK_NOMEM;
                goto out;
            }
            int64_t base = state * 256;
            for (int64_t child = first; child < end; child++) {
                int64_t byte = below[child];
                if (byte < 0 || byte > 255) {
                    code = WALK_BAD_NODE;
                    goto out;
                }
                int64_t target = auto_step(a, base + byte);
                if (target != a->dead) {
                    next.data[next.size++] = child;
                    next.data[next.size++] = target;
                }
            }
        }
        {
            I64Vec swap = *frontier;
            *frontier = next;
            next = swap;
        }
        depth++;
    }
out:
    vec_free(&next);
    return code;
}

static PyObject *vec_to_bytes(const I64Vec *v) {
    return PyBytes_FromStringAndSize((const char *)v->data, v->size * (Py_ssize_t)sizeof(int64_t));
}

static PyObject *Trie_walk(TrieObject *self, PyObject *args) {
    PyObject *table_obj, *crossing_obj, *nodes_obj, *states_obj, *flags_obj;
    long long dead;
    Py_ssize_t depth, small, big_until;
    if (!PyArg_ParseTuple(args, "OLOOOnnnO", &table_obj, &dead, &crossing_obj, &nodes_obj, &states_obj, &depth, &small,
                          &big_until, &flags_obj))
        return NULL;
    Py_buffer table, crossing, nodes, states, flags;
    int got = 0, got_flags = 0;
    if (flags_obj != Py_None) {
        if (PyObject_GetBuffer(flags_obj, &flags, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) return NULL;
        got_flags = 1;
        if (flags.itemsize != 1) {
            PyBuffer_Release(&flags);
            PyErr_SetString(PyExc_TypeError, "inside flags must be a writable buffer of bytes (bools)");
            return NULL;
        }
    }
    PyObject *result = NULL;
    I64Vec frontier = {0}, inside = {0}, big = {0}, smallb = {0};
    if (PyObject_GetBuffer(table_obj, &table, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) goto done;
    got = 1;
    if (PyObject_GetBuffer(crossing_obj, &crossing, PyBUF_C_CONTIGUOUS) < 0) goto done;
    got = 2;
    if (PyObject_GetBuffer(nodes_obj, &nodes, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) goto done;
    got = 3;
    if (PyObject_GetBuffer(states_obj, &states, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) goto done;
    got = 4;
    if ((table.itemsize != 4 && table.itemsize != 8) || nodes.itemsize != 8 || states.itemsize != 8 ||
        nodes.len != states.len || crossing.itemsize != 1 || !is_int64(nodes.format) || !is_int64(states.format) ||
        !(table.itemsize == 8 ? is_int64(table.format) : is_int32(table.format))) {
        PyErr_SetString(PyExc_TypeError, "walk takes an int32/int64 table and int64 nodes and states of one length");
        goto done;
    }
    Automaton a = {table.buf, table.itemsize == 8, table.len / table.itemsize, crossing.buf, crossing.len, dead, small};
    Py_ssize_t count = nodes.len / 8;
    if (vec_reserve(&frontier, 2 * count) < 0) goto done;
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t state = ((const int64_t *)states.buf)[i];
        if (state == dead) continue;
        frontier.data[frontier.size++] = ((const int64_t *)nodes.buf)[i];
        frontier.data[frontier.size++] = state;
    }
    int code;
    Py_BEGIN_ALLOW_THREADS
    code = trie_walk(self, &a, &frontier, depth, &inside, got_flags ? (uint8_t *)flags.buf : NULL,
                     got_flags ? flags.len : 0, big_until, &big, &smallb);
    Py_END_ALLOW_THREADS
    if (code == WALK_NOMEM) {
        PyErr_NoMemory();
        goto done;
    }
    if (code == WALK_BAD_STATE) {
        PyErr_SetString(PyExc_ValueError, "a state outside the table or the crossing flags");
        goto done;
    }
    if (code != WALK_OK) {
        PyErr_SetString(PyExc_ValueError, "a node or byte outside the trie");
        goto done;
    }
    /* Boundary entries: the big levels' first, then the small ones' (the Python form's order). */
    if (vec_reserve(&big, smallb.size) < 0) goto done;
    if (smallb.size) { /* (memcpy from NULL is undefined, even of no bytes: UBSan) */
        memcpy(big.data + big.size, smallb.data, (size_t)smallb.size * sizeof(int64_t));
        big.size += smallb.size;
    }
    {
        PyObject *in_bytes = vec_to_bytes(&inside);
        PyObject *b_bytes = in_bytes ? vec_to_bytes(&big) : NULL;
        if (b_bytes) result = PyTuple_Pack(2, in_bytes, b_bytes);
        Py_XDECREF(in_bytes);
        Py_XDECREF(b_bytes);
    }
done:
    if (got >= 4) PyBuffer_Release(&states);
    if (got >= 3) PyBuffer_Release(&nodes);
    if (got >= 2) PyBuffer_Release(&crossing);
    if (got >= 1) PyBuffer_Release(&table);
    if (got_flags) PyBuffer_Release(&flags);
    vec_free(&frontier);
    vec_free(&inside);
    vec_free(&big);
    vec_free(&smallb);
    return result;
}

static PyMethodDef Trie_methods[] = {
    {"walk_stacks", (PyCFunction)Trie_walk_stacks, METH_VARARGS,
     "walk_stacks(tables, crossings, reads, expand, seeds, budget) -> list[int] | None\n\n"
     "TokenTrie.walk_stacks in C (see its docstring): the positions of the tokens the\n"
     "seeded stacks read to their end; None past ``budget`` live (node, stack) pairs."},
    {"walk", (PyCFunction)Trie_walk, METH_VARARGS,
     "walk(table, dead, crossing, nodes, states, depth, small, big_until, inside) -> (bytes, bytes)\n\n"
     "TokenTrie.walk's levels in C, the GIL released: the inside ranges (lo, hi) (or, with\n"
     "a writable bool buffer ``inside``, its flags set instead) and the boundary entries\n"
     "(rest, hi, depth, node), as int64 bytes; entries of levels whose frontier held more\n"
     "than ``small`` pairs, or at most ``big_until`` deep, first, then the others."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject TrieType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "jsonmode._native.Trie",
    .tp_basicsize = sizeof(TrieObject),
    .tp_dealloc = (destructor)Trie_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Trie(levels): the token trie's levels, each (lo, hi, term, child_lo, child_hi, byte)\n"
              "as 1-D int64 buffers (held, read-only, for the object's life).",
    .tp_methods = Trie_methods,
    .tp_init = (initproc)Trie_init,
    .tp_new = PyType_GenericNew,
};

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

static PyObject *native_finish(PyObject *module, PyObject *args) {
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

/* ------------------------------------------------------------------------------ */
/* apply_rows: logits rows restricted to id lists, the GIL released                */
/*
 * One call restricts a batch's rows: each row is a job (a banned list: a scatter of
 * the -inf bits; an allowed list: a gather of the kept items, a fill of the row, a
 * scatter back). Jobs are claimed one at a time from an atomic counter by the
 * calling thread and by up to threads - 1 helpers of a pool kept between calls (see
 * pool_offer), so a helper that the scheduler wakes late (a busy machine) costs
 * nothing: the caller claims every job itself and returns once each claimed job is
 * finished, never waiting for a helper to wake. The shared state (Batch) is on the
 * heap, counted, and freed by whichever of the caller and the helpers lets go of it
 * last; a helper touches the caller's buffers only through a job it claimed, and the
 * caller returns only after every job is done, so no helper reads a buffer after the
 * caller has released it. Everything is checked (GIL held) before the first write.
 */

typedef struct {
    char *row;          /* the row's first element */
    const int64_t *ids; /* allowed ids (keep) or banned ids, each in [0, width) */
    Py_ssize_t count;
    int keep;
} RowJob;

typedef struct {
    RowJob *jobs; /* the caller's: read only through a claimed job */
    Py_ssize_t njobs;
    Py_ssize_t width;
    int itemsize;
    uint64_t negative;
    Py_ssize_t next;  /* atomic: the next job to claim */
    Py_ssize_t done;  /* atomic: jobs finished */
    int refs;         /* atomic: the caller and each helper started */
    int seats;        /* atomic: scratch areas handed out */
    int seats_limit;  /* the scratch areas there are (the threads asked for) */
    size_t per;       /* scratch bytes per seat (the longest allowed list) */
    pthread_mutex_t lock;
    pthread_cond_t finished; /* signalled when done reaches njobs */
    char scratch[];   /* per * seats */
} Batch;

/* ``count`` items of ``size`` bytes at ``row``, each ``value``'s low bytes: one
 * item, then copies from a small block that stays in the cache (memcpy's wide stores;
 * the item pattern is not one byte, so memset cannot). */
static void fill_items(char *row, Py_ssize_t count, int size, uint64_t value) {
    if (count <= 0) return;
    switch (size) {
    case 2: *(uint16_t *)row = (uint16_t)value; break;
    case 4: *(uint32_t *)row = (uint32_t)value; break;
    default: *(uint64_t *)row = value; break;
    }
    size_t total = (size_t)count * (size_t)size, have = (size_t)size;
    const size_t block = 4096;
    while (have < total && have < block) {
        size_t more = have < total - have ? have : total - have;
        memcpy(row + have, row, more);
        have += more;
    }
    while (have < total) {
        size_t more = have < total - have ? have : total - have;
        if (more > block) more = block;
        memcpy(row + have, row, more);
        have += more;
    }
}

#define RESTRICT_ROW(T)                                                           \
    do {                                                                          \
        T *r = (T *)job->row;                                                     \
        const int64_t *ids = job->ids;                                            \
        const Py_ssize_t count = job->count;                                      \
        const T neg = (T)b->negative;                                             \
        if (!job->keep) {                                                         \
            for (Py_ssize_t k = 0; k < count; k++) r[ids[k]] = neg;               \
        } else {                                                                  \
            T *kept = (T *)scratch;                                               \
            for (Py_ssize_t k = 0; k < count; k++) kept[k] = r[ids[k]];           \
            fill_items(job->row, b->width, (int)sizeof(T), b->negative);          \
            for (Py_ssize_t k = 0; k < count; k++) r[ids[k]] = kept[k];           \
        }                                                                         \
    } while (0)

static void batch_release(Batch *b) {
    if (__atomic_sub_fetch(&b->refs, 1, __ATOMIC_ACQ_REL) == 0) {
        pthread_cond_destroy(&b->finished);
        pthread_mutex_destroy(&b->lock);
        PyMem_RawFree(b);
    }
}

/* Claims and runs jobs until none is left; the one that finishes the last job wakes
 * the caller. */
static void batch_work(Batch *b) {
    int seat = __atomic_fetch_add(&b->seats, 1, __ATOMIC_RELAXED);
    if (seat >= b->seats_limit) return; /* (cannot happen: one seat per place offered) */
    char *scratch = b->scratch + b->per * (size_t)seat;
    for (;;) {
        Py_ssize_t i = __atomic_fetch_add(&b->next, 1, __ATOMIC_ACQUIRE);
        if (i >= b->njobs) return;
        const RowJob *job = &b->jobs[i];
        switch (b->itemsize) {
        case 2: RESTRICT_ROW(uint16_t); break;
        case 4: RESTRICT_ROW(uint32_t); break;
        default: RESTRICT_ROW(uint64_t); break;
        }
        if (__atomic_add_fetch(&b->done, 1, __ATOMIC_ACQ_REL) == b->njobs) {
            pthread_mutex_lock(&b->lock);
            pthread_cond_broadcast(&b->finished);
            pthread_mutex_unlock(&b->lock);
        }
    }
}

/* The helper pool: threads started on first need (at most MAX_THREADS - 1, never
 * more than a call asked for) and kept, asleep on pool_wake between calls, so a call
 * starts no thread once the pool is big enough. A call offers its batch in
 * pool_batch with a number of helpers wanted; each helper that wakes while it is on
 * offer takes one of those places (and a reference), works, and sleeps again. The
 * caller withdraws the offer when its jobs are done, so a helper that wakes late finds
 * nothing and sleeps. A second call running at the same time replaces the offer: the
 * first caller then finishes its rows with the helpers it has (its own thread at
 * least). After fork() the child has no helpers: pool_forked resets the pool. */
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pool_wake = PTHREAD_COND_INITIALIZER;
static int pool_size = 0;
static int pool_atfork = 0;
static Batch *pool_batch = NULL;
static int pool_wanted = 0;

static void pool_forked(void) {
    pthread_mutex_init(&pool_lock, NULL);
    pthread_cond_init(&pool_wake, NULL);
    pool_size = 0;
    pool_batch = NULL;
    pool_wanted = 0;
}

static void *pool_helper(void *arg) {
    (void)arg;
    pthread_mutex_lock(&pool_lock);
    for (;;) {
        Batch *b = pool_batch;
        if (b && pool_wanted > 0) {
            pool_wanted--;
            __atomic_add_fetch(&b->refs, 1, __ATOMIC_ACQ_REL);
            pthread_mutex_unlock(&pool_lock);
            batch_work(b);
            batch_release(b);
            pthread_mutex_lock(&pool_lock);
            continue;
        }
        pthread_cond_wait(&pool_wake, &pool_lock);
    }
    return NULL;
}

/* Offers ``b`` to ``helpers`` helpers, starting pool threads up to that many (fewer
 * when the system refuses one: the caller does their share). Called without the GIL. */
static void pool_offer(Batch *b, int helpers) {
    pthread_mutex_lock(&pool_lock);
    if (!pool_atfork) pool_atfork = pthread_atfork(NULL, NULL, pool_forked) == 0 ? 1 : -1;
    if (pool_size < helpers && pool_atfork == 1) {
        pthread_attr_t attr;
        if (pthread_attr_init(&attr) == 0) {
            pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
            while (pool_size < helpers) {
                pthread_t helper;
                if (pthread_create(&helper, &attr, pool_helper, NULL) != 0) break;
                pool_size++;
            }
            pthread_attr_destroy(&attr);
        }
    }
    pool_batch = b;
    pool_wanted = helpers < pool_size ? helpers : pool_size;
    if (pool_wanted > 0) pthread_cond_broadcast(&pool_wake);
    pthread_mutex_unlock(&pool_lock);
}

static void pool_withdraw(Batch *b) {
    pthread_mutex_lock(&pool_lock);
    if (pool_batch == b) {
        pool_batch = NULL;
        pool_wanted = 0;
    }
    pthread_mutex_unlock(&pool_lock);
}

/* Runs the jobs on the calling thread and up to ``threads - 1`` pool helpers (the GIL
 * is released by the caller); returns when every job is done. 0, or -1 when the shared
 * state cannot be allocated (nothing written then). */
static int batch_run(RowJob *jobs, Py_ssize_t njobs, Py_ssize_t width, int itemsize, uint64_t negative,
                     Py_ssize_t most, int threads) {
    size_t per = (size_t)(most ? most : 1) * (size_t)itemsize;
    per = (per + 63) & ~(size_t)63; /* seats on their own cache lines */
    Batch *b = PyMem_RawCalloc(1, sizeof(Batch) + per * (size_t)threads);
    if (!b) return -1;
    b->jobs = jobs;
    b->njobs = njobs;
    b->width = width;
    b->itemsize = itemsize;
    b->negative = negative;
    b->refs = 1;
    b->seats_limit = threads;
    b->per = per;
    pthread_mutex_init(&b->lock, NULL);
    pthread_cond_init(&b->finished, NULL);
    if (threads > 1) pool_offer(b, threads - 1);
    batch_work(b);
    if (threads > 1) pool_withdraw(b);
    pthread_mutex_lock(&b->lock);
    while (__atomic_load_n(&b->done, __ATOMIC_ACQUIRE) < njobs) pthread_cond_wait(&b->finished, &b->lock);
    pthread_mutex_unlock(&b->lock);
    batch_release(b);
    return 0;
}

/* Whether a buffer's format is a signed 8-byte integer ("q", "l" on LP64, with an
 * optional native or little-endian prefix). */
static int is_int64_format(const char *format) {
    if (!format) return 0;
    if (*format == '@' || *format == '=' || *format == '<') format++;
    if (format[0] == 'q' && format[1] == '\0') return 1;
    return format[0] == 'l' && format[1] == '\0' && sizeof(long) == 8;
}

static PyObject *native_apply_rows(PyObject *module, PyObject *args) {
    PyObject *host, *rows, *ids_list, *keeps;
    unsigned long long negative;
    int threads;
    if (!PyArg_ParseTuple(args, "OOOOKi", &host, &rows, &ids_list, &keeps, &negative, &threads)) return NULL;
    Py_buffer logits;
    if (PyObject_GetBuffer(host, &logits, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE | PyBUF_FORMAT | PyBUF_ND) < 0) return NULL;
    PyObject *result = NULL;
    RowJob *jobs = NULL;
    Py_buffer *idviews = NULL;
    uint8_t *seen = NULL;
    Py_ssize_t taken = 0, njobs = 0, most = 0;
    if (logits.ndim != 2 || (logits.itemsize != 2 && logits.itemsize != 4 && logits.itemsize != 8)) {
        PyErr_SetString(PyExc_ValueError, "logits must be a 2-D buffer of 2, 4 or 8 byte items");
        goto done;
    }
    Py_ssize_t batch = logits.shape[0], width = logits.shape[1];
    if (!PyList_Check(rows) || !PyList_Check(ids_list) || !PyList_Check(keeps) ||
        PyList_GET_SIZE(ids_list) != PyList_GET_SIZE(rows) || PyList_GET_SIZE(keeps) != PyList_GET_SIZE(rows)) {
        PyErr_SetString(PyExc_ValueError, "rows, ids and keeps must be lists of one length");
        goto done;
    }
    njobs = PyList_GET_SIZE(rows);
    jobs = PyMem_Calloc((size_t)(njobs ? njobs : 1), sizeof(RowJob));
    idviews = PyMem_Calloc((size_t)(njobs ? njobs : 1), sizeof(Py_buffer));
    seen = PyMem_Calloc((size_t)(batch ? batch : 1), 1);
    if (!jobs || !idviews || !seen) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < njobs; i++) {
        Py_ssize_t r = PyLong_AsSsize_t(PyList_GET_ITEM(rows, i));
        if (r == -1 && PyErr_Occurred()) goto done;
        if (r < 0 || r >= batch || seen[r]) {
            PyErr_Format(PyExc_ValueError, "row %zd out of range or given twice", r);
            goto done;
        }
        seen[r] = 1;
        if (PyObject_GetBuffer(PyList_GET_ITEM(ids_list, i), &idviews[i], PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
            goto done;
        taken++;
        if (idviews[i].ndim != 1 || idviews[i].itemsize != 8 || !is_int64_format(idviews[i].format)) {
            PyErr_SetString(PyExc_TypeError, "ids must be 1-D int64");
            goto done;
        }
        const int64_t *ids = idviews[i].buf;
        Py_ssize_t count = idviews[i].len / 8;
        for (Py_ssize_t k = 0; k < count; k++) {
            if (ids[k] < 0 || ids[k] >= width) {
                PyErr_Format(PyExc_ValueError, "id %lld outside the row's %zd columns", (long long)ids[k], width);
                goto done;
            }
        }
        int keep = PyObject_IsTrue(PyList_GET_ITEM(keeps, i));
        if (keep < 0) goto done;
        jobs[i].row = (char *)logits.buf + r * width * logits.itemsize;
        jobs[i].ids = ids;
        jobs[i].count = count;
        jobs[i].keep = keep;
        if (keep && count > most) most = count;
    }
    if (threads > MAX_THREADS) threads = MAX_THREADS;
    if (threads > njobs) threads = (int)njobs;
    if (threads < 1) threads = 1;
    int failed = 0;
    if (njobs) {
        Py_BEGIN_ALLOW_THREADS
        failed = batch_run(jobs, njobs, width, (int)logits.itemsize, (uint64_t)negative, most, threads);
        Py_END_ALLOW_THREADS
    }
    if (failed) {
        PyErr_NoMemory();
        goto done;
    }
    result = Py_None;
    Py_INCREF(result);
done:
    for (Py_ssize_t i = 0; i < taken; i++) PyBuffer_Release(&idviews[i]);
    PyMem_Free(seen);
    PyMem_Free(idviews);
    PyMem_Free(jobs);
    PyBuffer_Release(&logits);
    return result;
}

/* ------------------------------------------------------------------------------ */


/* ------------------------------------------------------------------------------ */
/* set_bits: token ids into a bitmask                                               */

static PyObject *native_set_bits(PyObject *module, PyObject *args) {
    PyObject *bits_obj, *ids_obj;
    if (!PyArg_ParseTuple(args, "OO", &bits_obj, &ids_obj)) return NULL;
    Py_buffer bits, ids;
    if (PyObject_GetBuffer(bits_obj, &bits, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) return NULL;
    if (PyObject_GetBuffer(ids_obj, &ids, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyBuffer_Release(&bits);
        return NULL;
    }
    PyObject *result = NULL;
    if (bits.itemsize != 1 || ids.itemsize != 8 || ids.ndim > 1) {
        PyErr_SetString(PyExc_TypeError, "set_bits takes a uint8 buffer and 1-D int64 ids");
        goto done;
    }
    const int64_t *id = ids.buf;
    Py_ssize_t count = ids.len / 8;
    int64_t limit = (int64_t)bits.len * 8;
    for (Py_ssize_t k = 0; k < count; k++) {
        if (id[k] < 0 || id[k] >= limit) {
            PyErr_Format(PyExc_ValueError, "id %lld outside the %lld bits", (long long)id[k], (long long)limit);
            goto done;
        }
    }
    uint8_t *out = bits.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k = 0; k < count; k++) out[id[k] >> 3] |= (uint8_t)(1u << (id[k] & 7));
    Py_END_ALLOW_THREADS
    result = Py_None;
    Py_INCREF(result);
done:
    PyBuffer_Release(&ids);
    PyBuffer_Release(&bits);
    return result;
}

static PyMethodDef native_methods[] = {
    {"finish", native_finish, METH_VARARGS,
     "finish(byte, kids, ends, pairs, tables, crossings, expand) -> list[int]\n\n"
     "Stacks.finish in C (see its docstring): the positions of the tokens whose rest\n"
     "one of ``pairs`` reads to its end, the rests given as their trie's lists."},
    {"set_bits", native_set_bits, METH_VARARGS,
     "set_bits(bits, ids) -> None\n\n"
     "In place: the bit of each id (bit id % 8 of byte id // 8) set in the uint8 buffer\n"
     "``bits``; ``ids`` 1-D int64, each checked first (ValueError, nothing set)."},
    {"apply_rows", native_apply_rows, METH_VARARGS,
     "apply_rows(host, rows, ids, keeps, negative, threads) -> None\n\n"
     "In place: row rows[i] of the 2-D buffer ``host`` (the logits' bits, 2/4/8-byte\n"
     "items) gets ``negative`` at ids[i] (keeps[i] false), or everywhere but ids[i]\n"
     "(keeps[i] true), the rows spread over ``threads`` threads with the GIL released.\n"
     "Every argument is checked first (ValueError/TypeError, nothing written)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT, "jsonmode._native",
    "The compiled kernels of jsonmode's mask engine (see jsonmode.native).", -1, native_methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__native(void) {
    if (PyType_Ready(&TrieType) < 0) return NULL;
    PyObject *m = PyModule_Create(&native_module);
    if (!m) return NULL;
    Py_INCREF(&TrieType);
    if (PyModule_AddObject(m, "Trie", (PyObject *)&TrieType) < 0 ||
        PyModule_AddIntConstant(m, "KERNELS_VERSION", KERNELS_VERSION) < 0) {
        Py_DECREF(&TrieType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
