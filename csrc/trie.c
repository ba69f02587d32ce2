/* The token trie's levels as a type, Trie: walk_stacks (parse stacks stepping over
 * the trie, TokenTrie.walk_stacks) and walk (one automaton over it, TokenTrie.walk). */
#include "native.h"

/* Trie: the token trie's levels, for walk_stacks                                  */

enum { L_LO, L_HI, L_TERM, L_CHILD_LO, L_CHILD_HI, L_BYTE, L_FIELDS };


typedef struct {
    PyObject_HEAD
    Py_ssize_t levels;
    Py_buffer *views; /* levels * L_FIELDS, each a 1-D int64 buffer */
    int taken;
    R4Pre *pre; /* the levels in preorder (r4gram_wide.c), NULL where they do not fit */
} TrieObject;

static void Trie_dealloc(TrieObject *self) {
    for (Py_ssize_t i = 0; i < self->taken; i++) PyBuffer_Release(&self->views[i]);
    PyMem_Free(self->views);
    r4gram_pre_free(self->pre);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Trie_init(TrieObject *self, PyObject *args, PyObject *kwds) {
    PyObject *levels;
    int preorder = 1;
    static char *kwlist[] = {"levels", "preorder", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|p", kwlist, &levels, &preorder)) return -1;
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
            if (view->itemsize != 8 || view->ndim > 1 || !jm_is_int64(view->format)) {
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
        const int64_t *lo = self->views[d * L_FIELDS + L_LO].buf;
        const int64_t *hi = self->views[d * L_FIELDS + L_HI].buf;
        for (Py_ssize_t i = 0; i < nodes; i++) {
            if (clo[i] < 0 || chi[i] < clo[i] || chi[i] > below || term[i] < 0 || lo[i] < 0 || hi[i] < lo[i]) {
                Py_DECREF(seq);
                PyErr_SetString(PyExc_ValueError, "a trie level points outside the next one");
                return -1;
            }
        }
    }
    Py_DECREF(seq);
    int nomem = 0;
    if (preorder) self->pre = r4gram_pre_build(self->views, n, &nomem);
    if (nomem) {
        PyErr_NoMemory();
        return -1;
    }
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
    Py_ssize_t depth = 1;
    if (!PyArg_ParseTuple(args, "OOOOOL|n", &tables, &crossings, &reads, &expand, &seeds, &budget, &depth))
        return NULL;
    if (depth < 1 || (depth > self->levels && depth > 1)) {
        PyErr_Format(PyExc_ValueError, "depth %zd is not a level of the trie", depth);
        return NULL;
    }
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

    Py_ssize_t levels = self->levels;
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


/* The levels of a Trie, for r3miss_assemble.c's walks: their count in *levels and
 * their views (levels * 6 of them: lo, hi, term, child_lo, child_hi, byte; 1-D int64,
 * children within the next level, as Trie_init checked). NULL + TypeError for another
 * object or a Trie not initialised. */
const Py_buffer *jm_trie_levels(PyObject *trie, Py_ssize_t *levels) {
    TrieObject *self = (TrieObject *)trie;
    if (Py_TYPE(trie) != &jm_TrieType || !self->views || self->taken != self->levels * L_FIELDS) {
        PyErr_SetString(PyExc_TypeError, "an initialised jsonmode._native.Trie is needed");
        return NULL;
    }
    *levels = self->levels;
    return self->views;
}

/* The preorder layout of a compiled Trie (r4gram_wide.c), NULL for another object or
 * where the trie has none (see Trie_init). */
const R4Pre *jm_trie_pre(PyObject *trie) {
    return Py_TYPE(trie) == &jm_TrieType ? ((TrieObject *)trie)->pre : NULL;
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
    const uint8_t *follow; /* NULL, or 256 flags: only nodes with a child on one of them
                              are boundary entries (what follows the rule reads first) */
} Automaton;

/* Whether a child of a node (``child_lo .. child_hi`` of the next level, whose bytes
 * are ``below``) is on a byte ``follow`` flags: a boundary entry's rest starts with its
 * child's byte, and one that what follows the rule cannot read is dropped. A node of
 * the last level (no ``below``) keeps its entry. Needs no GIL. */
static inline int has_follow_child(const uint8_t *follow, const int64_t *below, int64_t first, int64_t end) {
    if (below == NULL) return 1;
    for (int64_t child = first; child < end; child++)
        if ((uint64_t)below[child] <= 255 && follow[below[child]]) return 1;
    return 0;
}

enum { WALK_OK = 0, WALK_NOMEM = -1, WALK_BAD_STATE = -2, WALK_BAD_NODE = -3 };

/* One level's nodes, stepped by a table of ITEM (int32_t or int64_t) items: the loop of
 * trie_walk, written once per item width (the mask's hottest loop: no width test per
 * step, and the child push is branch-free). Checks as trie_walk's. */
#define TRIE_LEVEL(NAME, ITEM)                                                                                      \
    static int NAME(const Automaton *a, const int64_t *fr, Py_ssize_t count, Py_ssize_t nodes, Py_ssize_t nstates,  \
                    const int64_t *lo_of, const int64_t *hi_of, const int64_t *term_of, const int64_t *child_lo,      \
                    const int64_t *child_hi, const int64_t *below, Py_ssize_t depth, I64Vec *inside, uint8_t *flags,  \
                    Py_ssize_t nflags, I64Vec *bounds, I64Vec *next) {                                               \
        const ITEM *table = (const ITEM *)a->table;                                                                 \
        const uint8_t *crossing = a->crossing;                                                                      \
        const int64_t dead = a->dead;                                                                               \
        for (Py_ssize_t i = 0; i < count; i++) {                                                                    \
            int64_t node = fr[2 * i], state = fr[2 * i + 1];                                                        \
            if ((uint64_t)node >= (uint64_t)nodes) return WALK_BAD_NODE;                                            \
            if ((uint64_t)state >= (uint64_t)nstates) return WALK_BAD_STATE;                                        \
            int64_t lo = lo_of[node], term = term_of[node], hi = hi_of[node];                                       \
            if (term) {                                                                                             \
                if (flags) {                                                                                        \
                    if (lo < 0 || lo + term > nflags) return WALK_BAD_NODE;                                         \
                    if (term == 1)                                                                                  \
                        flags[lo] = 1;                                                                              \
                    else                                                                                            \
                        memset(flags + lo, 1, (size_t)term);                                                        \
                } else {                                                                                            \
                    if (vec_grow(inside, 2) < 0) return WALK_NOMEM;                                                 \
                    inside->data[inside->size++] = lo;                                                              \
                    inside->data[inside->size++] = lo + term;                                                       \
                }                                                                                                   \
            }                                                                                                       \
            if (crossing[state] && lo + term < hi &&                                                                \
                (!a->follow || has_follow_child(a->follow, below, child_lo[node], child_hi[node]))) {               \
                if (vec_grow(bounds, 4) < 0) return WALK_NOMEM;                                                     \
                int64_t *out = bounds->data + bounds->size;                                                         \
                out[0] = lo + term;                                                                                 \
                out[1] = hi;                                                                                        \
                out[2] = depth;                                                                                     \
                out[3] = node;                                                                                      \
                bounds->size += 4;                                                                                  \
            }                                                                                                       \
            if (below == NULL) continue;                                                                            \
            int64_t first = child_lo[node], end = child_hi[node];                                                   \
            if (first == end) continue;                                                                             \
            if (vec_grow(next, 2 * (end - first)) < 0) return WALK_NOMEM;                                           \
            const ITEM *row = table + state * 256;                                                                  \
            int64_t *out = next->data + next->size;                                                                 \
            for (int64_t child = first; child < end; child++) {                                                     \
                int64_t byte = below[child];                                                                        \
                if ((uint64_t)byte > 255) return WALK_BAD_NODE;                                                     \
                int64_t target = row[byte];                                                                         \
                out[0] = child;                                                                                     \
                out[1] = target;                                                                                    \
                out += 2 * (target != dead);                                                                        \
            }                                                                                                       \
            next->size = out - next->data;                                                                          \
        }                                                                                                           \
        return WALK_OK;                                                                                             \
    }

TRIE_LEVEL(trie_level32, int32_t)
TRIE_LEVEL(trie_level64, int64_t)

static int trie_walk(TrieObject *t, const Automaton *a, I64Vec *frontier, Py_ssize_t depth, I64Vec *inside,
                     uint8_t *flags, Py_ssize_t nflags, Py_ssize_t big_until, I64Vec *big, I64Vec *smallb) {
    I64Vec next = {0};
    int code = WALK_OK;
    Py_ssize_t levels = t->levels;
    /* A state indexes both the table's rows and the crossing flags. */
    Py_ssize_t nstates = a->table_len / 256 < a->crossing_len ? a->table_len / 256 : a->crossing_len;
    while (frontier->size) {
        Py_ssize_t count = frontier->size / 2;
        if (depth < 1 || depth > levels) {
            code = WALK_BAD_NODE;
            break;
        }
        I64Vec *bounds = count <= a->small && depth > big_until ? smallb : big;
        Py_ssize_t nodes = t->views[(depth - 1) * L_FIELDS + L_BYTE].len / 8;
        const int64_t *below = depth < levels ? field(t, depth, L_BYTE) : NULL;
        next.size = 0;
        code = (a->wide_items ? trie_level64 : trie_level32)(
            a, frontier->data, count, nodes, nstates, field(t, depth - 1, L_LO), field(t, depth - 1, L_HI),
            field(t, depth - 1, L_TERM), field(t, depth - 1, L_CHILD_LO), field(t, depth - 1, L_CHILD_HI), below, depth,
            inside, flags, nflags, bounds, &next);
        if (code != WALK_OK) break;
        {
            I64Vec swap = *frontier;
            *frontier = next;
            next = swap;
        }
        depth++;
    }
    vec_free(&next);
    return code;
}

/* trie_walk for r6narrow_cut.c: a walk from ``frontier``'s (node, state) pairs at
 * ``depth``, inside ranges only (no flags, no big levels up front), on a Trie that
 * jm_trie_levels accepted. A WALK_ code (0: ok). Needs no GIL. */
int jm_trie_walk_ranges(PyObject *trie, const void *table, int wide_items, Py_ssize_t table_len,
                        const uint8_t *crossing, Py_ssize_t crossing_len, int64_t dead, Py_ssize_t small,
                        const uint8_t *follow, I64Vec *frontier, Py_ssize_t depth, I64Vec *inside, I64Vec *big,
                        I64Vec *smallb) {
    Automaton a = {table, wide_items, table_len, crossing, crossing_len, dead, small, follow};
    return trie_walk((TrieObject *)trie, &a, frontier, depth, inside, NULL, 0, 0, big, smallb);
}

static PyObject *vec_to_bytes(const I64Vec *v) {
    return PyBytes_FromStringAndSize((const char *)v->data, v->size * (Py_ssize_t)sizeof(int64_t));
}

/* Rows (rest, hi, depth, node) as they are, into four blocks (see sort_entries). */
static int copy_entries(const int64_t *rows, Py_ssize_t n, int64_t *blocks) {
    for (Py_ssize_t i = 0; i < n; i++)
        for (int f = 0; f < 4; f++) blocks[f * n + i] = rows[4 * i + f];
    return 0;
}

/* Boundary entries (``n`` rows rest, hi, depth, node, in ``rows``) sorted by rest,
 * stably (entries with one rest keep their order), into ``blocks`` as four blocks of
 * ``n``: rests, his, depths, nodes. Rows already in order are copied over; others go
 * by a counting sort over the rests (walks of most of the vocabulary find ~100 000
 * entries in a few dozen runs, one per level: ~4 ms for NumPy's stable argsort and
 * gathers). 0 on success, -1 out of memory, -2 a negative rest. Needs no GIL. */
static int sort_entries(const int64_t *rows, Py_ssize_t n, int64_t *blocks) {
    int64_t most = 0;
    int ordered = 1;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t rest = rows[4 * i];
        if (rest < 0) return -2; /* (never: Trie_init refuses a negative lo) */
        if (rest > most) most = rest;
        if (i && rest < rows[4 * (i - 1)]) ordered = 0;
    }
    if (ordered) return copy_entries(rows, n, blocks);
    if ((uint64_t)most >= (uint64_t)(PY_SSIZE_T_MAX / (Py_ssize_t)sizeof(Py_ssize_t)) - 2) return -1;
    Py_ssize_t *start = PyMem_RawCalloc((size_t)most + 2, sizeof(Py_ssize_t));
    if (!start) return -1;
    for (Py_ssize_t i = 0; i < n; i++) start[rows[4 * i] + 1]++;
    for (int64_t r = 0; r <= most; r++) start[r + 1] += start[r];
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t at = start[rows[4 * i]]++;
        for (int f = 0; f < 4; f++) blocks[f * n + at] = rows[4 * i + f];
    }
    PyMem_RawFree(start);
    return 0;
}

/* ``follow_obj``: None, or a buffer of 256 bytes (flags), into ``view``; its flags or
 * NULL in ``*follow``. 1 when a view was taken (to release), 0 when none, -1 on error. */
int jm_follow_flags(PyObject *follow_obj, Py_buffer *view, const uint8_t **follow) {
    *follow = NULL;
    if (follow_obj == NULL || follow_obj == Py_None) return 0;
    int got = PyObject_GetBuffer(follow_obj, view, PyBUF_C_CONTIGUOUS) == 0;
    if (!got || view->len != 256 || view->itemsize != 1) {
        if (got) PyBuffer_Release(view);
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError, "follow must be None or 256 bytes of flags (bools)");
        return -1;
    }
    *follow = view->buf;
    return 1;
}

static PyObject *Trie_walk(TrieObject *self, PyObject *args) {
    PyObject *table_obj, *crossing_obj, *nodes_obj, *states_obj, *flags_obj, *follow_obj = NULL;
    long long dead;
    Py_ssize_t depth, small, big_until;
    if (!PyArg_ParseTuple(args, "OLOOOnnnO|O", &table_obj, &dead, &crossing_obj, &nodes_obj, &states_obj, &depth,
                          &small, &big_until, &flags_obj, &follow_obj))
        return NULL;
    Py_buffer table, crossing, nodes, states, flags, follow_view;
    const uint8_t *follow;
    int got_follow = jm_follow_flags(follow_obj, &follow_view, &follow);
    if (got_follow < 0) return NULL;
    int got = 0, got_flags = 0;
    if (flags_obj != Py_None) {
        if (PyObject_GetBuffer(flags_obj, &flags, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
            if (got_follow) PyBuffer_Release(&follow_view);
            return NULL;
        }
        got_flags = 1;
        if (flags.itemsize != 1) {
            PyBuffer_Release(&flags);
            if (got_follow) PyBuffer_Release(&follow_view);
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
        nodes.len != states.len || crossing.itemsize != 1 || !jm_is_int64(nodes.format) || !jm_is_int64(states.format) ||
        !(table.itemsize == 8 ? jm_is_int64(table.format) : jm_is_int32(table.format))) {
        PyErr_SetString(PyExc_TypeError, "walk takes an int32/int64 table and int64 nodes and states of one length");
        goto done;
    }
    Automaton a = {table.buf,    table.itemsize == 8, table.len / table.itemsize, crossing.buf, crossing.len, dead,
                   small,        follow};
    Py_ssize_t count = nodes.len / 8;
    if (vec_reserve(&frontier, 2 * count) < 0) goto done;
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t state = ((const int64_t *)states.buf)[i];
        if (state == dead) continue;
        frontier.data[frontier.size++] = ((const int64_t *)nodes.buf)[i];
        frontier.data[frontier.size++] = state;
    }
    int code = 1;
    Py_BEGIN_ALLOW_THREADS
    if (got_flags && depth == 1 && self->pre) { /* wide: in preorder (r4gram_wide.c) */
        Py_ssize_t nstates = a.table_len / 256 < a.crossing_len ? a.table_len / 256 : a.crossing_len;
        code = r4gram_wide_walk(self->pre, a.table, a.wide_items, nstates, a.crossing, follow, dead, frontier.data,
                                frontier.size / 2, (uint8_t *)flags.buf, flags.len, small, big_until, &big);
        if (code == 1) big.size = 0;
    }
    if (code == 1) code = trie_walk(self, &a, &frontier, depth, &inside, got_flags ? (uint8_t *)flags.buf : NULL,
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
    /* Boundary entries: the big levels' first, then the small ones' (the Python form's order),
     * then sorted by rest, stably, and laid out as four blocks (rests, his, depths, nodes). */
    if (vec_reserve(&big, smallb.size) < 0) goto done;
    if (smallb.size) { /* (memcpy from NULL is undefined, even of no bytes: UBSan) */
        memcpy(big.data + big.size, smallb.data, (size_t)smallb.size * sizeof(int64_t));
        big.size += smallb.size;
    }
    {
        PyObject *in_bytes = vec_to_bytes(&inside);
        PyObject *b_bytes = in_bytes ? PyBytes_FromStringAndSize(NULL, big.size * (Py_ssize_t)sizeof(int64_t)) : NULL;
        int sorted = 0;
        if (b_bytes) {
            int64_t *blocks = (int64_t *)PyBytes_AS_STRING(b_bytes);
            const int64_t *rows = big.data;
            Py_ssize_t n = big.size / 4;
            Py_BEGIN_ALLOW_THREADS;
            sorted = sort_entries(rows, n, blocks);
            Py_END_ALLOW_THREADS;
            if (sorted < 0) {
                if (sorted == -1)
                    PyErr_NoMemory();
                else
                    PyErr_SetString(PyExc_ValueError, "a boundary entry before the trie's first token");
                Py_CLEAR(b_bytes);
            }
        }
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
    if (got_follow) PyBuffer_Release(&follow_view);
    vec_free(&frontier);
    vec_free(&inside);
    vec_free(&big);
    vec_free(&smallb);
    return result;
}

/* Trie.following(cols, nodes) -> (byte, lo, hi, col, counts): TokenTrie.following_split's
 * arrays (which stays the reference: tests/test_trie_following.py holds the two alike), in
 * one pass. Per boundary entry i (``nodes[i]`` of level ``cols[i]``, 1-based), its
 * children in the next level, in order: their bytes, their tokens' ranges (lo, hi) and
 * the entry's column, all entries' back to back; ``counts[i]``: how many children entry
 * i has. int64 bytes each. Cost: ~1 ms for a wide state's ~46 000 entries (~70 000
 * children, memory-bound), where NumPy's passes took ~2 ms. Errors: TypeError for
 * buffers that are not 1-D int64 of one length, ValueError for a column or node outside
 * the trie, MemoryError. */
static PyObject *Trie_following(TrieObject *self, PyObject *args) {
    PyObject *cols_obj, *nodes_obj;
    if (!PyArg_ParseTuple(args, "OO", &cols_obj, &nodes_obj)) return NULL;
    Py_buffer cols, nodes;
    if (jm_get_buffer(cols_obj, &cols, 0, "following", "cols") < 0) return NULL;
    if (jm_get_buffer(nodes_obj, &nodes, 0, "following", "nodes") < 0) {
        PyBuffer_Release(&cols);
        return NULL;
    }
    PyObject *result = NULL;
    if (cols.itemsize != 8 || nodes.itemsize != 8 || cols.ndim > 1 || nodes.ndim > 1 || !jm_is_int64(cols.format) ||
        !jm_is_int64(nodes.format) || cols.len != nodes.len) {
        PyErr_SetString(PyExc_TypeError, "cols and nodes must be 1-D int64 buffers of one length");
        goto done;
    }
    Py_ssize_t n = cols.len / 8;
    const int64_t *col = cols.buf, *node = nodes.buf;
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t c = col[i], v = node[i];
        if (c < 1 || c > self->levels || v < 0 || v >= self->views[(c - 1) * L_FIELDS + L_BYTE].len / 8) {
            PyErr_Format(PyExc_ValueError, "entry %zd: node %lld of level %lld is outside the trie", i, (long long)v,
                         (long long)c);
            goto done;
        }
        total += (Py_ssize_t)(field(self, c - 1, L_CHILD_HI)[v] - field(self, c - 1, L_CHILD_LO)[v]);
    }
    if (total > PY_SSIZE_T_MAX / 8) {
        PyErr_NoMemory();
        goto done;
    }
    /* (Written in place: the answer's bytes objects are made at their size first.) */
    result = PyTuple_New(5);
    for (int f = 0; result && f < 5; f++) {
        PyObject *item = PyBytes_FromStringAndSize(NULL, 8 * (f < 4 ? total : n));
        if (!item) Py_CLEAR(result);
        else PyTuple_SET_ITEM(result, f, item);
    }
    if (!result) goto done;
    int64_t *out[5];
    for (int f = 0; f < 5; f++) out[f] = (int64_t *)PyBytes_AS_STRING(PyTuple_GET_ITEM(result, f));
    Py_ssize_t at = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t c = col[i], v = node[i];
        int64_t first = field(self, c - 1, L_CHILD_LO)[v], end = field(self, c - 1, L_CHILD_HI)[v];
        out[4][i] = end - first;
        if (end <= first) continue;
        /* (Trie_init checked the child ranges: inside level c, empty below the last.) */
        const int64_t *byte = field(self, c, L_BYTE), *lo = field(self, c, L_LO), *hi = field(self, c, L_HI);
        for (int64_t child = first; child < end; child++, at++) {
            out[0][at] = byte[child];
            out[1][at] = lo[child];
            out[2][at] = hi[child];
            out[3][at] = c;
        }
    }
done:
    PyBuffer_Release(&cols);
    PyBuffer_Release(&nodes);
    return result;
}

static PyMethodDef Trie_methods[] = {
    {"walk_stacks", (PyCFunction)Trie_walk_stacks, METH_VARARGS,
     "walk_stacks(tables, crossings, reads, expand, seeds, budget, depth=1) -> list[int] | None\n\n"
     "TokenTrie.walk_stacks in C (see its docstring): the positions of the tokens the\n"
     "seeded stacks (nodes of level ``depth``) read to their end; None past ``budget``\n"
     "live (node, stack) pairs."},
    {"walk", (PyCFunction)Trie_walk, METH_VARARGS,
     "walk(table, dead, crossing, nodes, states, depth, small, big_until, inside, follow=None)\n"
     "    -> (bytes, bytes)\n\n"
     "TokenTrie.walk's levels in C, the GIL released: the inside ranges (lo, hi) (or, with\n"
     "a writable bool buffer ``inside``, its flags set instead) and the boundary entries\n"
     "(rest, hi, depth, node) as int64 bytes: sorted by rest, stably (entries of levels\n"
     "whose frontier held more than ``small`` pairs, or at most ``big_until`` deep, before\n"
     "the others), in four blocks: every rest, then every hi, depth and node. With ``follow``\n"
     "(256 flags), only a node with a child on a flagged byte is an entry."},
    {"following", (PyCFunction)Trie_following, METH_VARARGS,
     "following(cols, nodes) -> (byte, lo, hi, col, counts)\n\n"
     "The children of boundary entries (``nodes[i]`` of level ``cols[i]``), back to back:\n"
     "TokenTrie.following_split's arrays as int64 bytes, and each entry's child count\n"
     "(see csrc/trie.c)."},
    {NULL, NULL, 0, NULL},
};

static PyObject *Trie_preorder(TrieObject *self, void *closure) {
    (void)closure;
    return PyBool_FromLong(self->pre != NULL);
}

static PyGetSetDef Trie_getset[] = {
    {"preorder", (getter)Trie_preorder, NULL, "Whether the levels are also laid out in preorder.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject jm_TrieType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "jsonmode._native.Trie",
    .tp_basicsize = sizeof(TrieObject),
    .tp_dealloc = (destructor)Trie_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Trie(levels, preorder=True): the token trie's levels, each (lo, hi, term, child_lo,\n"
              "child_hi, byte) as 1-D int64 buffers (held, read-only, for the object's life). With\n"
              "``preorder`` (the default), also laid out in preorder where it fits, for the wide\n"
              "walks and the walks by sets of stacks; without, those walk level by level (the\n"
              "same answers: the tests compare the two).",
    .tp_methods = Trie_methods,
    .tp_getset = Trie_getset,
    .tp_init = (initproc)Trie_init,
    .tp_new = PyType_GenericNew,
};

