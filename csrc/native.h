/* jsonmode._native's shared parts: growable arrays, an int set, a map, reading Python values,
 * the stacks' rule tables, and the kernels each file defines (see module.c).
 * Everything here is static inline: each kernel file gets its own copy. */
#ifndef JSONMODE_NATIVE_H
#define JSONMODE_NATIVE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The kernels' interface version; jsonmode/native.py loads only its own. */
#define KERNELS_VERSION 13
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
static inline int vec_grow(I64Vec *v, Py_ssize_t more) {
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
static inline int vec_reserve(I64Vec *v, Py_ssize_t more) {
    if (vec_grow(v, more) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static inline int vec_push(I64Vec *v, int64_t x) {
    if (vec_reserve(v, 1) < 0) return -1;
    v->data[v->size++] = x;
    return 0;
}

static inline void vec_free(I64Vec *v) {
    PyMem_RawFree(v->data);
    v->data = NULL;
    v->size = v->cap = 0;
}

static inline PyObject *vec_to_list(const I64Vec *v) {
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

/* Growable int32 arrays (MemoryError set on failure: the GIL held). */
typedef struct {
    int32_t *data;
    Py_ssize_t size;
    Py_ssize_t cap;
} I32Vec;

static inline int v32_reserve(I32Vec *v, Py_ssize_t more) {
    if (v->size + more <= v->cap) return 0;
    Py_ssize_t cap = v->cap ? v->cap : 64;
    while (cap < v->size + more) {
        if (cap > PY_SSIZE_T_MAX / 2 / (Py_ssize_t)sizeof(int32_t)) {
            PyErr_NoMemory();
            return -1;
        }
        cap *= 2;
    }
    int32_t *data = PyMem_RawRealloc(v->data, (size_t)cap * sizeof(int32_t));
    if (!data) {
        PyErr_NoMemory();
        return -1;
    }
    v->data = data;
    v->cap = cap;
    return 0;
}

static inline int v32_push(I32Vec *v, int32_t x) {
    if (v->size == v->cap && v32_reserve(v, 1) < 0) return -1;
    v->data[v->size++] = x;
    return 0;
}

static inline void v32_free(I32Vec *v) {
    PyMem_RawFree(v->data);
    v->data = NULL;
    v->size = v->cap = 0;
}

/* A set of int64 keys (open addressing), cleared between uses. */
typedef struct {
    int64_t *keys;
    uint8_t *used;
    Py_ssize_t cap; /* a power of two */
    Py_ssize_t count;
} I64Set;

static inline int set_init(I64Set *s, Py_ssize_t expected) {
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
static inline int set_add(I64Set *s, int64_t key) {
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

static inline void set_free(I64Set *s) {
    PyMem_Free(s->keys);
    PyMem_Free(s->used);
    s->keys = NULL;
    s->used = NULL;
    s->cap = s->count = 0;
}

/* ------------------------------------------------------------------------------ */
/* A hash map from up to three int64 to an int64                                    */

typedef struct {
    int64_t *keys; /* 3 per slot */
    int64_t *values;
    uint8_t *used;
    Py_ssize_t cap; /* a power of two, or 0 */
    Py_ssize_t count;
} Map3;

static inline uint64_t hash3(int64_t a, int64_t b, int64_t c) {
    return mix((uint64_t)a * 0x9e3779b97f4a7c15ULL ^ mix((uint64_t)b + 0x632be59bd9b4e019ULL) ^ ((uint64_t)c << 17));
}

static inline int map_find(const Map3 *m, int64_t a, int64_t b, int64_t c, int64_t *value) {
    if (!m->cap) return 0;
    Py_ssize_t mask = m->cap - 1, at = (Py_ssize_t)(hash3(a, b, c) & (uint64_t)mask);
    while (m->used[at]) {
        const int64_t *k = m->keys + 3 * at;
        if (k[0] == a && k[1] == b && k[2] == c) {
            *value = m->values[at];
            return 1;
        }
        at = (at + 1) & mask;
    }
    return 0;
}

static inline void map_place(Map3 *m, int64_t a, int64_t b, int64_t c, int64_t value) {
    Py_ssize_t mask = m->cap - 1, at = (Py_ssize_t)(hash3(a, b, c) & (uint64_t)mask);
    while (m->used[at]) {
        int64_t *k = m->keys + 3 * at;
        if (k[0] == a && k[1] == b && k[2] == c) {
            m->values[at] = value;
            return;
        }
        at = (at + 1) & mask;
    }
    m->used[at] = 1;
    m->keys[3 * at] = a;
    m->keys[3 * at + 1] = b;
    m->keys[3 * at + 2] = c;
    m->values[at] = value;
    m->count++;
}

static inline void map_free(Map3 *m) {
    PyMem_RawFree(m->keys);
    PyMem_RawFree(m->values);
    PyMem_RawFree(m->used);
    memset(m, 0, sizeof(*m));
}

/* Sets key -> value (replacing); -1 with MemoryError set when out of memory. */
static inline int map_put(Map3 *m, int64_t a, int64_t b, int64_t c, int64_t value) {
    if (2 * (m->count + 1) > m->cap) {
        Py_ssize_t cap = m->cap ? 2 * m->cap : 64;
        if (cap > PY_SSIZE_T_MAX / 64) {
            PyErr_NoMemory();
            return -1;
        }
        Map3 grown = {PyMem_RawMalloc((size_t)cap * 3 * sizeof(int64_t)), PyMem_RawMalloc((size_t)cap * sizeof(int64_t)),
                      PyMem_RawCalloc((size_t)cap, 1), cap, 0};
        if (!grown.keys || !grown.values || !grown.used) {
            map_free(&grown);
            PyErr_NoMemory();
            return -1;
        }
        for (Py_ssize_t i = 0; i < m->cap; i++)
            if (m->used[i]) map_place(&grown, m->keys[3 * i], m->keys[3 * i + 1], m->keys[3 * i + 2], m->values[i]);
        map_free(m);
        *m = grown;
    }
    map_place(m, a, b, c, value);
    return 0;
}

/* ------------------------------------------------------------------------------ */
/* Reading Python values                                                            */

/* An int from a Python int, as int64 (-1 with an exception set on failure: callers
 * check PyErr_Occurred only when the value is -1). */
static inline int64_t as_i64(PyObject *o) { return (int64_t)PyLong_AsLongLong(o); }

/* The rule tables of the stacks: tables[context] is a flat int32 buffer
 * (state * 256 + byte; -1: none), crossings[context] a bytes object (non-zero: the
 * state is crossing). Buffers are taken once per context per call, kept in slots found
 * by context (``slots``: context -> slot), so a call costs by the contexts it touches,
 * not by how many the numbering holds. The last one looked up is remembered. */
typedef struct {
    PyObject *tables;    /* list */
    PyObject *crossings; /* list */
    Py_buffer *views;    /* per slot */
    Py_ssize_t count, cap;
    Map3 slots;
    int64_t last_context; /* (-1: none) */
    const int32_t *last_table;
    Py_ssize_t last_n;
} Tables;

static inline int tables_init(Tables *t, PyObject *tables, PyObject *crossings) {
    memset(t, 0, sizeof(*t));
    if (!PyList_Check(tables) || !PyList_Check(crossings)) {
        PyErr_SetString(PyExc_TypeError, "tables and crossings must be lists");
        return -1;
    }
    t->tables = tables;
    t->crossings = crossings;
    t->last_context = -1;
    return 0;
}

static inline void tables_free(Tables *t) {
    for (Py_ssize_t i = 0; i < t->count; i++) PyBuffer_Release(&t->views[i]);
    PyMem_Free(t->views);
    map_free(&t->slots);
    t->views = NULL;
    t->count = t->cap = 0;
    t->last_context = -1;
}

/* The table of ``context`` (NULL with an exception on error); its entry count in *n. */
static inline const int32_t *table_of(Tables *t, int64_t context, Py_ssize_t *n) {
    if (context == t->last_context && context >= 0) {
        *n = t->last_n;
        return t->last_table;
    }
    Py_ssize_t size = PyList_GET_SIZE(t->tables);
    if (context < 0 || context >= size || context >= PyList_GET_SIZE(t->crossings)) {
        PyErr_Format(PyExc_ValueError, "context %lld out of range", (long long)context);
        return NULL;
    }
    int64_t slot;
    Py_buffer *view;
    if (map_find(&t->slots, context, 0, 0, &slot)) {
        view = &t->views[slot];
    } else {
        if (t->count == t->cap) {
            Py_ssize_t cap = t->cap ? 2 * t->cap : 8;
            Py_buffer *views = PyMem_Realloc(t->views, (size_t)cap * sizeof(Py_buffer));
            if (!views) {
                PyErr_NoMemory();
                return NULL;
            }
            t->views = views;
            t->cap = cap;
        }
        view = &t->views[t->count];
        if (PyObject_GetBuffer(PyList_GET_ITEM(t->tables, context), view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
            return NULL;
        if (view->itemsize != 4 || !view->format || (strcmp(view->format, "i") && strcmp(view->format, "=i") && strcmp(view->format, "<i"))) {
            PyBuffer_Release(view);
            PyErr_SetString(PyExc_TypeError, "a rule table must be a buffer of int32");
            return NULL;
        }
        if (map_put(&t->slots, context, 0, 0, t->count) < 0) {
            PyBuffer_Release(view);
            return NULL;
        }
        t->count++;
    }
    t->last_context = context;
    t->last_table = (const int32_t *)view->buf;
    t->last_n = view->len / 4;
    *n = t->last_n;
    return t->last_table;
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

/* The row of (context, state) in its rule's table (NULL + exception). */
static inline const int32_t *row_of(Tables *t, int64_t context, int64_t state) {
    Py_ssize_t n;
    const int32_t *table = table_of(t, context, &n);
    if (!table) return NULL;
    if (state < 0 || state >= n / 256) {
        PyErr_Format(PyExc_ValueError, "state %lld out of the table", (long long)state);
        return NULL;
    }
    return table + state * 256;
}

/* stacks (stacks.c): the parse stacks' numbering and closures, boundary.Stacks in C.
 * jm_stacks_push appends the closure of (context, state) of a Stacks object to ``out``
 * (as push_expanded does), without a call through Python. */
extern PyTypeObject jm_StacksType;
int jm_stacks_push(PyObject *stacks, int64_t context, int64_t state, I64Vec *out, int64_t node, int with_node);

/* Appends the pairs of ``expand(context, state)`` (a tuple of (context, state)
 * tuples) to ``out`` as two int64 each (each after ``node`` with ``with_node``). A
 * compiled Stacks given as ``expand`` gives them directly. */
static inline int push_expanded(PyObject *expand, int64_t context, int64_t state, I64Vec *out, int64_t node, int with_node) {
    if (Py_TYPE(expand) == &jm_StacksType) return jm_stacks_push(expand, context, state, out, node, with_node);
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


/* ``obj``'s C-contiguous buffer (with its format; writable when asked) into ``view``:
 * 0, or -1 with an exception set, a TypeError naming ``kernel`` and the argument
 * ``name`` where ``obj`` has no such buffer. */
static inline int jm_get_buffer(PyObject *obj, Py_buffer *view, int writable, const char *kernel,
                                const char *name) {
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0) {
        if (PyErr_ExceptionMatches(PyExc_BufferError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "%s: %s must be a C-contiguous%s buffer", kernel, name,
                         writable ? " writable" : "");
        }
        return -1;
    }
    return 0;
}

/* Whether a buffer's format is a signed 8-byte integer ("q", or "l" where long has 8
 * bytes; an optional native or little-endian prefix). */
static inline int jm_is_int64(const char *format) {
    if (!format) return 0;
    if (*format == '@' || *format == '=' || *format == '<') format++;
    if (format[0] == 'q' && format[1] == '\0') return 1;
    return format[0] == 'l' && format[1] == '\0' && sizeof(long) == 8;
}

/* Whether a buffer's format is a signed 4-byte integer ("i", or "l" where long has 4). */
static inline int jm_is_int32(const char *format) {
    if (!format) return 0;
    if (*format == '@' || *format == '=' || *format == '<') format++;
    if (format[0] == 'i' && format[1] == '\0') return 1;
    return format[0] == 'l' && format[1] == '\0' && sizeof(long) == 4;
}

/* The kernels, one file each (module.c registers them). */
extern PyTypeObject jm_TrieType;                          /* trie.c */
PyObject *jm_finish(PyObject *module, PyObject *args);     /* finish.c */
PyObject *jm_apply_rows(PyObject *module, PyObject *args); /* rows.c */
PyObject *jm_count_bits(PyObject *module, PyObject *args); /* bits.c */
PyObject *jm_bit_ids(PyObject *module, PyObject *args);    /* bits.c */
/* regexc: the regex engine's minimisation and subset construction (regex.c, glushkov.c) */
PyObject *jm_minimize_raw(PyObject *module, PyObject *args);
PyObject *jm_glushkov_determinise(PyObject *module, PyObject *args);

/* subset.c: the subset construction of a rule's NFA (network._determinise). */
PyObject *jm_determinise(PyObject *module, PyObject *args);

/* An NFA edge (lo, hi, target) packed so that integer order is the tuples' order. */
#define JM_PACK(lo, hi, to) (((int64_t)(lo) << 40) | ((int64_t)(hi) << 32) | (int64_t)(uint32_t)(to))
#define JM_LO(k) ((int32_t)((k) >> 40))
#define JM_HI(k) ((int32_t)(((k) >> 32) & 0xff))
#define JM_TO(k) ((int32_t)((k) & 0xffffffff))

/* A rule's NFA, flat (what subset.c's determinise reads network._NFA's lists into):
 * state s's epsilon targets eps[eps_off[s]..eps_off[s+1]], its edges (JM_PACK, in the
 * order written) edges[edge_off[s]..], its calls (callee index into ``names``, return
 * state) call_name/call_to[call_off[s]..], in the order written; ``plain`` (n bytes)
 * flags the states whose row was written sorted and disjoint (an embedded lexeme's:
 * network._NFA.sorted_rows). Every index in range (the maker checks them). */
typedef struct {
    Py_ssize_t n;
    I64Vec eps_off, edge_off, call_off, edges;
    I32Vec eps, call_name, call_to;
    uint8_t *plain;  /* PyMem_Raw */
    PyObject *names; /* list of str (owned) */
} JmNfa;

void jm_nfa_free(JmNfa *nfa);
/* The subset construction of ``nfa`` (taken over: freed on return) from ``start``
 * (``final`` accepts), as determinise computes it (states numbered alike; error("states
 * per rule", budget) at the same new state; checkpoint() every 16 DFA states):
 * (edges, calls, accepting, sets, alone), ``sets`` None unless ``with_sets``, ``alone``
 * a tuple of bools (per DFA state: its set is ``final`` alone). NULL with an exception
 * set on error. The GIL held. */
PyObject *jm_subset_of(JmNfa *nfa, int32_t start, int32_t final, long long budget, PyObject *checkpoint,
                       PyObject *error, int with_sets);

/* r5nfa (r5nfa_build.c, round 5): a rule's NFA built from its expression in C
 * (network._NFA.fragment), then determinised (jm_subset_of). */
PyObject *r5nfa_determinise(PyObject *module, PyObject *args);
/* r3hits (round 3, the mask-cache hit path): r3hits_fill.c */
PyObject *jm_r3hits_fill_words(PyObject *module, PyObject *const *args, Py_ssize_t nargs);

/* r3comp (r3comp_objects.c): a rule's byte table (network's finish) and an object rule's
 * automaton written out directly (objects._Builder.build). */
PyObject *r3comp_fill(PyObject *module, PyObject *args);
PyObject *r3comp_object_build(PyObject *module, PyObject *args);

/* r4comp (r4comp_keys.c): the trie and table of an object's extra-key automaton
 * (automata.keys: key_trie, extra_key_body). */
PyObject *r4comp_key_count(PyObject *module, PyObject *names);
PyObject *r4comp_key_trie(PyObject *module, PyObject *args);
PyObject *r4comp_key_rows(PyObject *module, PyObject *args);

/* r5setup (r5setup_reads.c): which states of a rule's table read a byte (the reference
 * matcher's per-rule flags, made with a schema's mask engine). */
PyObject *jm_r5setup_row_reads(PyObject *module, PyObject *trans);

/* r6dfa (r6dfa_bytes.c, round 6): a character DFA's byte automaton (byte_dfa._byte_dfa). */
PyObject *r6dfa_byte_dfa(PyObject *module, PyObject *args);

/* r6replay (r6replay.c): the states where boundary tokens passed (Walks._replay). */
PyObject *r6replay_states(PyObject *module, PyObject *args);
/* r7hash (r7hash_depths.c): bounded-depth state hashes (state.state_hashes). */
PyObject *r7hash_depths(PyObject *module, PyObject *args);

/* r7count (r7count_replay.c, round 7): an automaton over every trie node (TokenTrie.replay). */
PyObject *r7count_replay(PyObject *module, PyObject *args);
PyObject *r7count_ids(PyObject *module, PyObject *args);
PyObject *r12fill_ranges(PyObject *module, PyObject *args); /* r12ranges.c */

/* r3miss (r3miss_assemble.c): a mask-cache miss, MaskEngine._assemble over bits. */
extern PyTypeObject jm_r3miss_AssemblerType;
const Py_buffer *jm_trie_levels(PyObject *trie, Py_ssize_t *levels); /* trie.c */
enum { F_LO, F_HI, F_TERM, F_CHILD_LO, F_CHILD_HI, F_BYTE, F_FIELDS }; /* a level's arrays in those views */

/* A level's field of jm_trie_levels' views (its length in *n). */
static inline const int64_t *level_field(const Py_buffer *views, Py_ssize_t depth, int f, Py_ssize_t *n) {
    const Py_buffer *view = &views[depth * F_FIELDS + f];
    *n = view->len / 8;
    return (const int64_t *)view->buf;
}

/* One trie level's fields for a walk at ``depth`` (1-based), as read from
 * jm_trie_levels' views: ``nodes`` the fewest entries any of its fields holds (each
 * field's length checked: a Trie whose init failed late may hold any), and ``below``
 * the next level's bytes (NULL at the last level; ``nbelow`` its length). */
typedef struct {
    const int64_t *lo, *term, *child_lo, *child_hi, *below;
    Py_ssize_t nodes, nbelow;
} JmLevel;

static inline JmLevel jm_level(const Py_buffer *views, Py_ssize_t levels, Py_ssize_t depth) {
    JmLevel l;
    Py_ssize_t n[4];
    level_field(views, depth - 1, F_BYTE, &l.nodes);
    l.lo = level_field(views, depth - 1, F_LO, &n[0]);
    l.term = level_field(views, depth - 1, F_TERM, &n[1]);
    l.child_lo = level_field(views, depth - 1, F_CHILD_LO, &n[2]);
    l.child_hi = level_field(views, depth - 1, F_CHILD_HI, &n[3]);
    l.nbelow = 0;
    l.below = depth < levels ? level_field(views, depth, F_BYTE, &l.nbelow) : NULL;
    for (int f = 0; f < 4; f++)
        if (n[f] < l.nodes) l.nodes = n[f];
    return l;
}

/* r7deep (r7deep_sets.c, round 7): the token trie walked by sets of stacks, for the
 * compiled miss's unbudgeted walks (seeds: (node, context, state) triples of level
 * ``depth``, sorted here; the positions read appended to ``found``, each once): 1
 * walked, 0 past its memory bound (``found`` as it was: walk stack by stack), -1 on
 * error. */
struct r4gram_pre;
int jm_r7_walk_sets(PyObject *core, Tables *t, const Py_buffer *views, Py_ssize_t levels,
                    const struct r4gram_pre *pre, int64_t ntokens, I64Vec *seeds, Py_ssize_t depth, I64Vec *found);

/* r6narrow (r6narrow_cut.c, round 6): a narrow state's trie walk cut into its
 * per-first-byte segments (segments._trie_walk + segments._split). */
PyObject *r6narrow_walk_cut(PyObject *module, PyObject *args);
PyObject *r6narrow_live_keys(PyObject *module, PyObject *args);
int jm_trie_walk_ranges(PyObject *trie, const void *table, int wide_items, Py_ssize_t table_len,
                        const uint8_t *crossing, Py_ssize_t crossing_len, int64_t dead, Py_ssize_t small,
                        const uint8_t *follow, I64Vec *frontier, Py_ssize_t depth, I64Vec *inside, I64Vec *big,
                        I64Vec *smallb);
/* A walk's ``follow`` argument (None or 256 flags): see trie.c. */
int jm_follow_flags(PyObject *follow_obj, Py_buffer *view, const uint8_t **follow); /* trie.c */

/* r4gram (r4gram_wide.c, round 4): the trie in preorder, for Trie.walk's wide form. */
typedef struct {
    int32_t lo, hi, term, node, skip; /* skip: the nodes of its subtree, itself included */
    uint8_t byte, depth;
} R4PreNode;
typedef struct r4gram_pre R4Pre;
R4Pre *r4gram_pre_build(const Py_buffer *views, Py_ssize_t levels, int *nomem);
void r4gram_pre_free(R4Pre *pre);
/* The preorder nodes (their number in *count), and the preorder index of ``node`` of
 * level ``depth`` (1-based; -1 outside the trie). Need no GIL. */
const R4PreNode *r4gram_pre_nodes(const R4Pre *pre, Py_ssize_t *count);
Py_ssize_t r4gram_pre_index(const R4Pre *pre, Py_ssize_t depth, int64_t node);
/* The preorder layout of an initialised compiled Trie, NULL where it has none (see
 * jm_trie_levels; trie.c). */
const R4Pre *jm_trie_pre(PyObject *trie);
int r4gram_wide_walk(const R4Pre *pre, const void *table_buf, int wide_items, Py_ssize_t nstates,
                     const uint8_t *crossing, const uint8_t *follow, int64_t dead, const int64_t *frontier,
                     Py_ssize_t pairs, uint8_t *flags, Py_ssize_t nflags, Py_ssize_t small, Py_ssize_t big_until,
                     I64Vec *bounds);

#endif
