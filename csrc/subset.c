#include "native.h"

/* ------------------------------------------------------------------------------ */
/* determinise: the subset construction of a rule's NFA                            */
/*                                                                                  */
/* The C form of jsonmode.decoding.automata.network._determinise_py (see its        */
/* docstring): the NFA (epsilon moves, byte intervals, calls) is read once into     */
/* flat arrays; DFA states are sorted runs of NFA states in one arena, found by     */
/* content; the rows, calls, acceptance and sets come back as the Python form's     */
/* lists. States are numbered as the Python form numbers them (both take targets in */
/* the same order: a row's in byte order, a call row's in the order of its callees' */
/* first calls from its members in increasing order), the budget error is raised at */
/* the same new state, and ``checkpoint`` is called at the same DFA states.         */

/* Sets of NFA states, each a sorted run in ``arena`` (set i: start[i]..start[i+1]),
 * found by content through open-addressed ``slots`` (a set's index + 1; 0: free),
 * each with a value. */
typedef struct {
    I32Vec arena;
    I64Vec start;
    I32Vec value;
    int64_t *slots;
    Py_ssize_t cap; /* a power of two */
} SetTable;

static uint64_t hash_run(const int32_t *x, Py_ssize_t n) {
    uint64_t h = (uint64_t)n * 0x9E3779B97F4A7C15ULL;
    for (Py_ssize_t i = 0; i < n; i++) h = (h ^ (uint32_t)x[i]) * 0x100000001B3ULL;
    return mix(h);
}

static inline Py_ssize_t table_count(const SetTable *t) { return t->start.size ? t->start.size - 1 : 0; }

/* The index of the set ``x`` (n members, sorted), or -1. */
static Py_ssize_t table_find(const SetTable *t, const int32_t *x, Py_ssize_t n, uint64_t h) {
    if (!t->cap) return -1;
    Py_ssize_t mask = t->cap - 1, at = (Py_ssize_t)(h & (uint64_t)mask);
    while (t->slots[at]) {
        Py_ssize_t i = (Py_ssize_t)t->slots[at] - 1;
        int64_t a = t->start.data[i], b = t->start.data[i + 1];
        if (b - a == n && !memcmp(t->arena.data + a, x, (size_t)n * sizeof(int32_t))) return i;
        at = (at + 1) & mask;
    }
    return -1;
}

static int table_place(SetTable *t, Py_ssize_t i, uint64_t h) {
    Py_ssize_t mask = t->cap - 1, at = (Py_ssize_t)(h & (uint64_t)mask);
    while (t->slots[at]) at = (at + 1) & mask;
    t->slots[at] = i + 1;
    return 0;
}

/* Adds the set ``x`` (not present) with ``value``; its index, or -1 (MemoryError). */
static Py_ssize_t table_add(SetTable *t, const int32_t *x, Py_ssize_t n, uint64_t h, int32_t value) {
    if (!t->start.size && vec_push(&t->start, 0) < 0) return -1;
    Py_ssize_t count = table_count(t);
    if (2 * (count + 1) > t->cap) {
        Py_ssize_t cap = t->cap ? 2 * t->cap : 64;
        int64_t *slots = PyMem_RawCalloc((size_t)cap, sizeof(int64_t));
        if (!slots) {
            PyErr_NoMemory();
            return -1;
        }
        PyMem_RawFree(t->slots);
        t->slots = slots;
        t->cap = cap;
        for (Py_ssize_t i = 0; i < count; i++) {
            int64_t a = t->start.data[i], b = t->start.data[i + 1];
            table_place(t, i, hash_run(t->arena.data + a, (Py_ssize_t)(b - a)));
        }
    }
    if (v32_reserve(&t->arena, n) < 0 || vec_reserve(&t->start, 1) < 0 || v32_push(&t->value, value) < 0) return -1;
    memcpy(t->arena.data + t->arena.size, x, (size_t)n * sizeof(int32_t));
    t->arena.size += n;
    t->start.data[t->start.size++] = t->arena.size;
    table_place(t, count, h);
    return count;
}

static void table_free(SetTable *t) {
    v32_free(&t->arena);
    vec_free(&t->start);
    v32_free(&t->value);
    PyMem_RawFree(t->slots);
    t->slots = NULL;
    t->cap = 0;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* An interval (lo, hi, target) packed so that integer order is the tuples' order
 * (native.h: JM_PACK). */
#define PACK JM_PACK
#define LO JM_LO
#define HI JM_HI
#define TO JM_TO

typedef struct {
    /* The NFA, flat: state s's epsilon targets eps[eps_off[s]..eps_off[s+1]], and so
     * its edges (packed) and its calls (callee index, return state). */
    Py_ssize_t n;
    I64Vec eps_off, edge_off, call_off, edges;
    I32Vec eps, call_name, call_to;
    uint8_t *plain;
    PyObject *names;      /* list: the callees, by index */
    PyObject *name_index; /* dict: callee -> index */
    int32_t final;
    long long budget;
    PyObject *error; /* the budget's exception class */
    /* The work. */
    SetTable dfa, closed;
    int32_t *single; /* NFA state -> the DFA state of its closure, or -1 */
    int64_t *mark;   /* closure's visits, by generation */
    int64_t gen;
    int32_t *count;  /* the sweep's live intervals per target */
    uint8_t *listed; /* the sweep: target in ``live`` */
    int32_t *group;  /* callee index -> its group in a call row, or -1 */
    I32Vec stack, clos, cur, live, sorted_live, groups, pair_group, pair_to, targets;
    I64Vec ivs;
    /* The DFA: per state its row (packed) and call row (callee, target), accepting. */
    I64Vec row_off, rows, call_row_off;
    I32Vec call_rows_name, call_rows_to;
    I32Vec accepting;
} Sub;

/* The epsilon closure of ``in`` (k states, in range) into s->clos, sorted. */
static int closure(Sub *s, const int32_t *in, Py_ssize_t k) {
    s->gen++;
    s->clos.size = s->stack.size = 0;
    for (Py_ssize_t i = 0; i < k; i++) {
        int32_t x = in[i];
        if (s->mark[x] == s->gen) continue;
        s->mark[x] = s->gen;
        if (v32_push(&s->stack, x) < 0 || v32_push(&s->clos, x) < 0) return -1;
    }
    while (s->stack.size) {
        int32_t x = s->stack.data[--s->stack.size];
        for (int64_t e = s->eps_off.data[x]; e < s->eps_off.data[x + 1]; e++) {
            int32_t y = s->eps.data[e];
            if (s->mark[y] == s->gen) continue;
            s->mark[y] = s->gen;
            if (v32_push(&s->stack, y) < 0 || v32_push(&s->clos, y) < 0) return -1;
        }
    }
    if (s->clos.size > 1) qsort(s->clos.data, (size_t)s->clos.size, sizeof(int32_t), cmp_i32);
    return 0;
}

/* The DFA state of the set ``x`` (sorted), made on first sight within the budget;
 * -1 with an exception set. */
static int32_t intern(Sub *s, const int32_t *x, Py_ssize_t n) {
    uint64_t h = hash_run(x, n);
    Py_ssize_t found = table_find(&s->dfa, x, n, h);
    if (found >= 0) return (int32_t)found;
    Py_ssize_t count = table_count(&s->dfa);
    if (count >= s->budget || count >= INT32_MAX - 1) {
        PyObject *exc = PyObject_CallFunction(s->error, "sL", "states per rule", s->budget);
        if (exc) {
            PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
            Py_DECREF(exc);
        }
        return -1;
    }
    return (int32_t)table_add(&s->dfa, x, n, h, 0);
}

/* The DFA state of one NFA state's closure (memoised). */
static int32_t goto_one(Sub *s, int32_t target) {
    int32_t known = s->single[target];
    if (known >= 0) return known;
    if (s->eps_off.data[target] == s->eps_off.data[target + 1]) {
        known = intern(s, &target, 1);
    } else {
        if (closure(s, &target, 1) < 0) return -1;
        known = intern(s, s->clos.data, s->clos.size);
    }
    if (known >= 0) s->single[target] = known;
    return known;
}

/* The DFA state of a set of targets' closure (memoised by the targets). */
static int32_t goto_set(Sub *s, const int32_t *x, Py_ssize_t n) {
    uint64_t h = hash_run(x, n);
    Py_ssize_t found = table_find(&s->closed, x, n, h);
    if (found >= 0) return s->closed.value.data[found];
    if (closure(s, x, n) < 0) return -1;
    int32_t known = intern(s, s->clos.data, s->clos.size);
    if (known < 0 || table_add(&s->closed, x, n, h, known) < 0) return -1;
    return known;
}

/* Appends lo..hi -> target to the row being built from ``row_start``, joined to the
 * last interval where that one ends just before with the same target (extend_row). */
static int extend(Sub *s, Py_ssize_t row_start, int32_t lo, int32_t hi, int32_t target) {
    if (s->rows.size > row_start) {
        int64_t last = s->rows.data[s->rows.size - 1];
        if (HI(last) == lo - 1 && TO(last) == target) {
            s->rows.data[s->rows.size - 1] = PACK(LO(last), hi, target);
            return 0;
        }
    }
    return vec_push(&s->rows, PACK(lo, hi, target));
}

/* The row of a set whose intervals overlap: the byte axis swept, each stretch of
 * bytes going to the closure of the targets read there. */
static int sweep(Sub *s, Py_ssize_t row_start) {
    I64Vec *ev = &s->ivs; /* (point << 33 | opens << 32 | target) */
    ev->size = 0;
    for (Py_ssize_t i = 0; i < s->cur.size; i++) {
        int32_t m = s->cur.data[i];
        for (int64_t e = s->edge_off.data[m]; e < s->edge_off.data[m + 1]; e++) {
            int64_t k = s->edges.data[e];
            if (vec_reserve(ev, 2) < 0) return -1;
            ev->data[ev->size++] = ((int64_t)LO(k) << 33) | ((int64_t)1 << 32) | (uint32_t)TO(k);
            ev->data[ev->size++] = ((int64_t)(HI(k) + 1) << 33) | (uint32_t)TO(k);
        }
    }
    qsort(ev->data, (size_t)ev->size, sizeof(int64_t), cmp_u64);
    s->live.size = 0;
    int failed = 0;
    Py_ssize_t i = 0;
    while (i < ev->size && !failed) {
        int64_t point = ev->data[i] >> 33;
        for (; i < ev->size && ev->data[i] >> 33 == point; i++) {
            int32_t target = TO(ev->data[i]);
            if ((ev->data[i] >> 32) & 1) {
                if (s->count[target]++ == 0 && !s->listed[target]) {
                    s->listed[target] = 1;
                    if (v32_push(&s->live, target) < 0) failed = 1;
                }
            } else {
                s->count[target]--;
            }
        }
        if (failed || i == ev->size) break;
        Py_ssize_t kept = 0;
        for (Py_ssize_t j = 0; j < s->live.size; j++) {
            int32_t target = s->live.data[j];
            if (s->count[target] > 0)
                s->live.data[kept++] = target;
            else
                s->listed[target] = 0;
        }
        s->live.size = kept;
        if (!kept) continue;
        int32_t here;
        if (kept == 1) {
            here = goto_one(s, s->live.data[0]);
        } else {
            s->sorted_live.size = 0;
            if (v32_reserve(&s->sorted_live, kept) < 0) {
                failed = 1;
                break;
            }
            memcpy(s->sorted_live.data, s->live.data, (size_t)kept * sizeof(int32_t));
            qsort(s->sorted_live.data, (size_t)kept, sizeof(int32_t), cmp_i32);
            here = goto_set(s, s->sorted_live.data, kept);
        }
        if (here < 0 || extend(s, row_start, (int32_t)point, (int32_t)(ev->data[i] >> 33) - 1, here) < 0) failed = 1;
    }
    /* (Left clean for the next sweep, on error too.) */
    for (Py_ssize_t j = i; j < ev->size; j++)
        if ((ev->data[j] >> 32) & 1) s->count[TO(ev->data[j])]++;
        else s->count[TO(ev->data[j])]--;
    for (Py_ssize_t j = 0; j < s->live.size; j++) s->listed[s->live.data[j]] = 0;
    s->live.size = 0;
    return failed ? -1 : 0;
}

/* The call row of the current set: per callee, in the order of its first call from
 * the members in increasing order, the closure of its return states. */
static int call_row(Sub *s) {
    s->groups.size = s->pair_group.size = s->pair_to.size = 0;
    int failed = 0;
    for (Py_ssize_t i = 0; i < s->cur.size && !failed; i++) {
        int32_t m = s->cur.data[i];
        for (int64_t c = s->call_off.data[m]; c < s->call_off.data[m + 1]; c++) {
            int32_t name = s->call_name.data[c];
            if (s->group[name] < 0) {
                s->group[name] = (int32_t)s->groups.size;
                if (v32_push(&s->groups, name) < 0) {
                    failed = 1;
                    break;
                }
            }
            if (v32_push(&s->pair_group, s->group[name]) < 0 || v32_push(&s->pair_to, s->call_to.data[c]) < 0) {
                failed = 1;
                break;
            }
        }
    }
    for (Py_ssize_t g = 0; g < s->groups.size && !failed; g++) {
        s->targets.size = 0;
        for (Py_ssize_t p = 0; p < s->pair_group.size; p++)
            if (s->pair_group.data[p] == g && v32_push(&s->targets, s->pair_to.data[p]) < 0) {
                failed = 1;
                break;
            }
        int32_t here;
        if (failed || closure(s, s->targets.data, s->targets.size) < 0 ||
            (here = intern(s, s->clos.data, s->clos.size)) < 0 || v32_push(&s->call_rows_name, s->groups.data[g]) < 0 ||
            v32_push(&s->call_rows_to, here) < 0)
            failed = 1;
    }
    for (Py_ssize_t g = 0; g < s->groups.size; g++) s->group[s->groups.data[g]] = -1;
    return failed ? -1 : 0;
}

/* The DFA rows of the current set (``cur``), appended to the output. */
static int rows_of(Sub *s) {
    Py_ssize_t row_start = s->rows.size;
    if (s->cur.size == 1 && s->plain[s->cur.data[0]]) {
        int32_t m = s->cur.data[0];
        if (v32_push(&s->accepting, 0) < 0) return -1;
        for (int64_t e = s->edge_off.data[m]; e < s->edge_off.data[m + 1]; e++) {
            int64_t k = s->edges.data[e];
            int32_t here = goto_one(s, TO(k));
            if (here < 0 || vec_push(&s->rows, PACK(LO(k), HI(k), here)) < 0) return -1;
        }
        return 0;
    }
    int accepting = bsearch(&s->final, s->cur.data, (size_t)s->cur.size, sizeof(int32_t), cmp_i32) != NULL;
    if (v32_push(&s->accepting, accepting) < 0) return -1;
    I64Vec *ivs = &s->ivs;
    ivs->size = 0;
    int calling = 0;
    for (Py_ssize_t i = 0; i < s->cur.size; i++) {
        int32_t m = s->cur.data[i];
        Py_ssize_t more = (Py_ssize_t)(s->edge_off.data[m + 1] - s->edge_off.data[m]);
        if (more) {
            if (vec_reserve(ivs, more) < 0) return -1;
            memcpy(ivs->data + ivs->size, s->edges.data + s->edge_off.data[m], (size_t)more * sizeof(int64_t));
            ivs->size += more;
        }
        calling |= s->call_off.data[m + 1] > s->call_off.data[m];
    }
    if (ivs->size > 1) qsort(ivs->data, (size_t)ivs->size, sizeof(int64_t), cmp_u64);
    int disjoint = 1;
    for (Py_ssize_t i = 1; i < ivs->size && disjoint; i++)
        if (LO(ivs->data[i]) <= HI(ivs->data[i - 1])) disjoint = 0;
    if (disjoint) {
        for (Py_ssize_t i = 0; i < ivs->size; i++) {
            int64_t k = ivs->data[i]; /* (goto_one leaves ``ivs`` alone) */
            int32_t here = goto_one(s, TO(k));
            if (here < 0 || extend(s, row_start, LO(k), HI(k), here) < 0) return -1;
        }
    } else if (sweep(s, row_start) < 0) {
        return -1;
    }
    return calling ? call_row(s) : 0;
}

/* Reads list ``lists[state]`` (a list). */
static PyObject *row_at(PyObject *lists, Py_ssize_t state, const char *what) {
    PyObject *row = PyTuple_GET_ITEM(lists, state);
    if (!PyList_Check(row)) {
        PyErr_Format(PyExc_TypeError, "%s must be a list of lists", what);
        return NULL;
    }
    return row;
}

/* An int in 0..limit-1 (``what`` names it in the error); -1 with an exception set. */
static int64_t index_of(PyObject *x, int64_t limit, const char *what) {
    if (!PyLong_Check(x)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int", what);
        return -1;
    }
    int64_t v = as_i64(x);
    if (v == -1 && PyErr_Occurred()) return -1;
    if (v < 0 || v >= limit) {
        PyErr_Format(PyExc_ValueError, "%s %lld out of range", what, (long long)v);
        return -1;
    }
    return v;
}

static void settle_plain(Sub *s);

/* The NFA into flat arrays, every index checked (no Python code runs meanwhile: ints
 * and exact strs only, read from tuples of the caller's lists taken first). */
static int read_nfa(Sub *s, PyObject *eps, PyObject *edges, PyObject *calls, PyObject *sorted_rows) {
    Py_ssize_t n = s->n;
    if (vec_reserve(&s->eps_off, n + 1) < 0 || vec_reserve(&s->edge_off, n + 1) < 0 ||
        vec_reserve(&s->call_off, n + 1) < 0)
        return -1;
    s->eps_off.data[s->eps_off.size++] = 0;
    s->edge_off.data[s->edge_off.size++] = 0;
    s->call_off.data[s->call_off.size++] = 0;
    for (Py_ssize_t state = 0; state < n; state++) {
        PyObject *row = row_at(eps, state, "eps");
        if (!row) return -1;
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(row); i++) {
            int64_t to = index_of(PyList_GET_ITEM(row, i), n, "an epsilon target");
            if (to < 0 || v32_push(&s->eps, (int32_t)to) < 0) return -1;
        }
        s->eps_off.data[s->eps_off.size++] = s->eps.size;
        if (!(row = row_at(edges, state, "edges"))) return -1;
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(row); i++) {
            PyObject *edge = PyList_GET_ITEM(row, i);
            if (!PyTuple_Check(edge) || PyTuple_GET_SIZE(edge) != 3) {
                PyErr_SetString(PyExc_TypeError, "an edge must be a (lo, hi, target) tuple");
                return -1;
            }
            int64_t lo = index_of(PyTuple_GET_ITEM(edge, 0), 256, "a byte");
            int64_t hi = lo < 0 ? -1 : index_of(PyTuple_GET_ITEM(edge, 1), 256, "a byte");
            int64_t to = hi < 0 ? -1 : index_of(PyTuple_GET_ITEM(edge, 2), n, "an edge's target");
            if (to < 0) return -1;
            if (lo > hi) {
                PyErr_SetString(PyExc_ValueError, "an edge's lo is above its hi");
                return -1;
            }
            if (vec_push(&s->edges, PACK(lo, hi, to)) < 0) return -1;
        }
        s->edge_off.data[s->edge_off.size++] = s->edges.size;
        if (!(row = row_at(calls, state, "calls"))) return -1;
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(row); i++) {
            PyObject *call = PyList_GET_ITEM(row, i);
            if (!PyTuple_Check(call) || PyTuple_GET_SIZE(call) != 2 || !PyUnicode_CheckExact(PyTuple_GET_ITEM(call, 0))) {
                PyErr_SetString(PyExc_TypeError, "a call must be a (str, target) tuple");
                return -1;
            }
            PyObject *name = PyTuple_GET_ITEM(call, 0);
            int64_t to = index_of(PyTuple_GET_ITEM(call, 1), n, "a call's target");
            if (to < 0) return -1;
            PyObject *known = PyDict_GetItemWithError(s->name_index, name);
            int64_t number;
            if (known) {
                number = as_i64(known);
            } else {
                if (PyErr_Occurred()) return -1;
                number = PyList_GET_SIZE(s->names);
                PyObject *boxed = PyLong_FromLongLong(number);
                if (!boxed) return -1;
                int bad = PyDict_SetItem(s->name_index, name, boxed) < 0 || PyList_Append(s->names, name) < 0;
                Py_DECREF(boxed);
                if (bad) return -1;
            }
            if (v32_push(&s->call_name, (int32_t)number) < 0 || v32_push(&s->call_to, (int32_t)to) < 0) return -1;
        }
        s->call_off.data[s->call_off.size++] = s->call_name.size;
    }
    /* Plain states: bytes only, on sorted disjoint intervals (see the Python form). */
    if (!(s->plain = PyMem_RawCalloc((size_t)n, 1))) {
        PyErr_NoMemory();
        return -1;
    }
    PyObject *iter = PyObject_GetIter(sorted_rows), *item;
    if (!iter) return -1;
    while ((item = PyIter_Next(iter))) {
        int64_t state = index_of(item, n, "a sorted row");
        Py_DECREF(item);
        if (state < 0) {
            Py_DECREF(iter);
            return -1;
        }
        s->plain[state] = 1;
    }
    Py_DECREF(iter);
    if (PyErr_Occurred()) return -1;
    settle_plain(s);
    return 0;
}

/* ``plain`` (the sorted rows' flags so far) narrowed to the plain states: bytes only,
 * on sorted disjoint intervals (a sorted row's, or one byte), no epsilon moves, no
 * calls, not final (see the Python form). */
static void settle_plain(Sub *s) {
    for (Py_ssize_t state = 0; state < s->n; state++) {
        int64_t e0 = s->edge_off.data[state], e1 = s->edge_off.data[state + 1];
        int single_byte = e1 - e0 == 1 && LO(s->edges.data[e0]) == HI(s->edges.data[e0]);
        s->plain[state] = (s->plain[state] || single_byte) && s->eps_off.data[state] == s->eps_off.data[state + 1] &&
                          s->call_off.data[state] == s->call_off.data[state + 1] && state != s->final;
    }
}

static PyObject *edge_tuple(int64_t k) {
    PyObject *lo = PyLong_FromLong(LO(k)), *hi = PyLong_FromLong(HI(k)), *to = PyLong_FromLong(TO(k));
    PyObject *edge = lo && hi && to ? PyTuple_New(3) : NULL;
    if (!edge) {
        Py_XDECREF(lo);
        Py_XDECREF(hi);
        Py_XDECREF(to);
        return NULL;
    }
    PyTuple_SET_ITEM(edge, 0, lo);
    PyTuple_SET_ITEM(edge, 1, hi);
    PyTuple_SET_ITEM(edge, 2, to);
    return edge;
}

static PyObject *build_result(Sub *s, int with_sets, int with_alone) {
    Py_ssize_t count = table_count(&s->dfa);
    PyObject *edges = PyList_New(count), *calls = PyList_New(count), *accepting = PyList_New(count);
    PyObject *sets = with_sets ? PyList_New(count) : Py_NewRef(Py_None), *no_calls = PyDict_New(), *out = NULL;
    PyObject *alone = with_alone ? PyTuple_New(count) : NULL;
    if (!edges || !calls || !accepting || !sets || !no_calls || (with_alone && !alone)) goto done;
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t a = s->row_off.data[i], b = s->row_off.data[i + 1];
        PyObject *row = PyList_New((Py_ssize_t)(b - a));
        if (!row) goto done;
        PyList_SET_ITEM(edges, i, row);
        for (int64_t j = a; j < b; j++) {
            int64_t k = s->rows.data[j];
            PyObject *edge = edge_tuple(k);
            if (!edge) goto done;
            PyList_SET_ITEM(row, (Py_ssize_t)(j - a), edge);
        }
        a = s->call_row_off.data[i], b = s->call_row_off.data[i + 1];
        PyObject *dict = no_calls;
        if (b > a) {
            if (!(dict = PyDict_New())) goto done;
            PyList_SET_ITEM(calls, i, dict);
            for (int64_t j = a; j < b; j++) {
                PyObject *to = PyLong_FromLong(s->call_rows_to.data[j]);
                if (!to) goto done;
                int bad = PyDict_SetItem(dict, PyList_GET_ITEM(s->names, s->call_rows_name.data[j]), to);
                Py_DECREF(to);
                if (bad < 0) goto done;
            }
        } else {
            Py_INCREF(no_calls);
            PyList_SET_ITEM(calls, i, no_calls);
        }
        PyObject *flag = s->accepting.data[i] ? Py_True : Py_False;
        Py_INCREF(flag);
        PyList_SET_ITEM(accepting, i, flag);
        a = s->dfa.start.data[i], b = s->dfa.start.data[i + 1];
        if (with_alone) {
            PyObject *only = b - a == 1 && s->dfa.arena.data[a] == s->final ? Py_True : Py_False;
            PyTuple_SET_ITEM(alone, i, Py_NewRef(only));
        }
        if (!with_sets) continue;
        PyObject *members = PyFrozenSet_New(NULL);
        if (!members) goto done;
        PyList_SET_ITEM(sets, i, members);
        for (int64_t j = a; j < b; j++) {
            PyObject *x = PyLong_FromLong(s->dfa.arena.data[j]);
            if (!x) goto done;
            int bad = PySet_Add(members, x);
            Py_DECREF(x);
            if (bad < 0) goto done;
        }
    }
    out = with_alone ? PyTuple_Pack(5, edges, calls, accepting, sets, alone)
                     : PyTuple_Pack(4, edges, calls, accepting, sets);
done:
    Py_XDECREF(alone);
    Py_XDECREF(edges);
    Py_XDECREF(calls);
    Py_XDECREF(accepting);
    Py_XDECREF(sets);
    Py_XDECREF(no_calls);
    return out;
}

/* The result as the Python form's: (edges, calls, accepting, sets). The cyclic
 * collector is paused meanwhile: these are many new containers, none in a cycle (it
 * would otherwise run every few hundred of them, over every tracked object). */
static PyObject *result_of(Sub *s, int with_sets, int with_alone) {
    int collecting = PyGC_Disable();
    PyObject *out = build_result(s, with_sets, with_alone);
    if (collecting) PyGC_Enable();
    return out;
}

static void sub_free(Sub *s) {
    vec_free(&s->eps_off), vec_free(&s->edge_off), vec_free(&s->call_off), vec_free(&s->edges);
    v32_free(&s->eps), v32_free(&s->call_name), v32_free(&s->call_to);
    PyMem_RawFree(s->plain);
    Py_XDECREF(s->names);
    Py_XDECREF(s->name_index);
    table_free(&s->dfa), table_free(&s->closed);
    PyMem_RawFree(s->single), PyMem_RawFree(s->mark), PyMem_RawFree(s->count);
    PyMem_RawFree(s->listed), PyMem_RawFree(s->group);
    I32Vec *vs[] = {&s->stack, &s->clos, &s->cur, &s->live, &s->sorted_live, &s->groups, &s->pair_group,
                    &s->pair_to, &s->targets, &s->call_rows_name, &s->call_rows_to, &s->accepting};
    for (size_t i = 0; i < sizeof vs / sizeof *vs; i++) v32_free(vs[i]);
    vec_free(&s->ivs), vec_free(&s->row_off), vec_free(&s->rows), vec_free(&s->call_row_off);
}

/* The subset construction of the NFA in ``s`` (read already) from ``start``: the
 * result (see result_of), or NULL with an exception set. */
static PyObject *run(Sub *s, int32_t start, PyObject *checkpoint, int with_sets, int with_alone) {
    Py_ssize_t n = s->n, names = PyList_GET_SIZE(s->names);
    s->single = PyMem_RawMalloc((size_t)n * sizeof(int32_t));
    s->mark = PyMem_RawCalloc((size_t)n, sizeof(int64_t));
    s->count = PyMem_RawCalloc((size_t)n, sizeof(int32_t));
    s->listed = PyMem_RawCalloc((size_t)n, 1);
    s->group = PyMem_RawMalloc((size_t)(names ? names : 1) * sizeof(int32_t));
    if (!s->single || !s->mark || !s->count || !s->listed || !s->group) {
        PyErr_NoMemory();
        goto fail;
    }
    memset(s->single, 0xff, (size_t)n * sizeof(int32_t));
    memset(s->group, 0xff, (size_t)(names ? names : 1) * sizeof(int32_t));
    /* The first state: the start's closure, made whatever the budget. */
    int32_t first = start;
    if (closure(s, &first, 1) < 0 ||
        table_add(&s->dfa, s->clos.data, s->clos.size, hash_run(s->clos.data, s->clos.size), 0) < 0 ||
        vec_push(&s->row_off, 0) < 0 || vec_push(&s->call_row_off, 0) < 0)
        goto fail;
    Py_ssize_t position = 0;
    while (position < table_count(&s->dfa)) {
        int64_t a = s->dfa.start.data[position], b = s->dfa.start.data[position + 1];
        s->cur.size = 0;
        if (v32_reserve(&s->cur, (Py_ssize_t)(b - a)) < 0) goto fail;
        memcpy(s->cur.data, s->dfa.arena.data + a, (size_t)(b - a) * sizeof(int32_t));
        s->cur.size = (Py_ssize_t)(b - a);
        position++;
        if (!(position & 15)) {
            PyObject *r = PyObject_CallNoArgs(checkpoint);
            if (!r) goto fail;
            Py_DECREF(r);
        }
        if (rows_of(s) < 0 || vec_push(&s->row_off, s->rows.size) < 0 ||
            vec_push(&s->call_row_off, s->call_rows_name.size) < 0)
            goto fail;
    }
    return result_of(s, with_sets, with_alone);
fail:
    return NULL;
}

PyObject *jm_determinise(PyObject *module, PyObject *args) {
    PyObject *eps_in, *edges_in, *calls_in, *sorted_rows, *checkpoint, *error;
    Py_ssize_t start, final;
    long long budget;
    if (!PyArg_ParseTuple(args, "O!O!O!OnnLOO", &PyList_Type, &eps_in, &PyList_Type, &edges_in, &PyList_Type,
                          &calls_in, &sorted_rows, &start, &final, &budget, &checkpoint, &error))
        return NULL;
    if (!PyAnySet_Check(sorted_rows) || !PyCallable_Check(checkpoint) || !PyExceptionClass_Check(error)) {
        PyErr_SetString(PyExc_TypeError,
                        "determinise takes lists eps, edges, calls, a set, ints, a callable and an exception class");
        return NULL;
    }
    Sub s;
    memset(&s, 0, sizeof s);
    PyObject *eps = NULL, *edges = NULL, *calls = NULL, *result = NULL;
    s.n = PyList_GET_SIZE(eps_in);
    if (PyList_GET_SIZE(edges_in) != s.n || PyList_GET_SIZE(calls_in) != s.n || s.n >= INT32_MAX / 2) {
        PyErr_SetString(PyExc_ValueError, "eps, edges and calls must be lists of one length (under 2**30)");
        return NULL;
    }
    if (start < 0 || start >= s.n || final < 0 || final >= s.n) {
        PyErr_SetString(PyExc_ValueError, "start or final out of range");
        return NULL;
    }
    s.final = (int32_t)final;
    s.budget = budget;
    s.error = error;
    if (!(s.names = PyList_New(0)) || !(s.name_index = PyDict_New())) goto done;
    if (!(eps = PySequence_Tuple(eps_in)) || !(edges = PySequence_Tuple(edges_in)) ||
        !(calls = PySequence_Tuple(calls_in)))
        goto done;
    if (read_nfa(&s, eps, edges, calls, sorted_rows) < 0) goto done;
    result = run(&s, (int32_t)start, checkpoint, 1, 0);
done:
    Py_XDECREF(eps);
    Py_XDECREF(edges);
    Py_XDECREF(calls);
    sub_free(&s);
    return result;
}

void jm_nfa_free(JmNfa *nfa) {
    vec_free(&nfa->eps_off), vec_free(&nfa->edge_off), vec_free(&nfa->call_off), vec_free(&nfa->edges);
    v32_free(&nfa->eps), v32_free(&nfa->call_name), v32_free(&nfa->call_to);
    PyMem_RawFree(nfa->plain);
    nfa->plain = NULL;
    Py_CLEAR(nfa->names);
    nfa->n = 0;
}

PyObject *jm_subset_of(JmNfa *nfa, int32_t start, int32_t final, long long budget, PyObject *checkpoint,
                       PyObject *error, int with_sets) {
    Sub s;
    memset(&s, 0, sizeof s);
    /* (Taken over: the arrays move into ``s``, freed with it.) */
    s.n = nfa->n;
    s.eps_off = nfa->eps_off, s.edge_off = nfa->edge_off, s.call_off = nfa->call_off, s.edges = nfa->edges;
    s.eps = nfa->eps, s.call_name = nfa->call_name, s.call_to = nfa->call_to;
    s.plain = nfa->plain;
    s.names = nfa->names;
    memset(nfa, 0, sizeof *nfa);
    PyObject *result = NULL;
    if (start < 0 || start >= s.n || final < 0 || final >= s.n || !s.names || !PyList_Check(s.names)) {
        PyErr_SetString(PyExc_ValueError, "start or final out of range");
        goto done;
    }
    s.final = final;
    s.budget = budget;
    s.error = error;
    settle_plain(&s);
    result = run(&s, start, checkpoint, with_sets, 1);
done:
    sub_free(&s);
    return result;
}
