/* MissAssembler: a mask-cache miss in C (MaskEngine._assemble over bits).
 *
 * The reference is jsonmode.decoding.engine.cache.MaskEngine._assemble with _Bits: per
 * stack of a matcher state, its context numbered (the compiled Stacks' ``context``),
 * then either the direct walk (boundary.direct: the stack's own seeds, computed here from
 * its rule table, then the trie's ``walk_stacks``) or the stack's ``(rule, state)`` walk:
 * its inside tokens (dense bits or ids) and, per boundary group, the stacks a boundary
 * token goes on in (``returns`` / ``readers``), the bytes they read, the group's rests
 * (Python's ``group_rests``, memoised here per walk, group and readable bytes) and the
 * ``finish`` kernel over them. The union is a C bit buffer (token t: bit t % 8 of byte
 * t // 8); end-of-sequence ids are set as the reference sets them.
 *
 * The same Stacks calls happen in the same order as on the reference path (so contexts
 * and closures are numbered alike) but in the walks without a budget (a big group
 * finished in the token trie, a whole stack near the nesting bound): those walk the
 * trie with the stacks at a node as one set (r7deep_sets.c), meeting closures in
 * another order; the tokens are the same. What stays in Python, called back: a walk the first
 * time this assembler needs its (rule, state) (``walk_of``: computed or taken from the
 * walk caches), a group's rests the first time (``rests_of``), the stack numbering's
 * ``context``/``readers``/``returns`` and the trie's ``walk_stacks``.
 *
 * Memory: the walks memo (a dict by rule and state) holds at most ``budget`` bytes of
 * walks (their nbytes as walk_of says) and of rests (256 + 64 bytes a rest node), and
 * at most WALKS_KEPT walks; past either it is cleared. Per walk group, at most
 * RESTS_KEPT rests are kept.
 *
 * Thread-safety: every call holds the GIL; across a callback another thread may use the
 * assembler (and clear the memo): an entry in use is held by a reference of its own.
 */
#include "native.h"

#define WALKS_KEPT 4096
#define RESTS_KEPT 64
#define SMALL_BYTES 8   /* boundary._SMALL_BYTES */
#define DIRECT_NODES 256 /* boundary._DIRECT_NODES */
#define WIDE_BYTES 128  /* boundary._WIDE_BYTES */
#define RETURN_STOP (-1) /* walk.RETURN */


typedef struct {
    PyObject_HEAD
    PyObject *trie;        /* the compiled Trie (its levels' views are read) */
    PyObject *walk_of;     /* (rule, state) -> (inside, dense, ((stop, split), ...), nbytes) */
    PyObject *rests_of;    /* (split, readable bytes) -> (byte, kids, ends) */
    PyObject *walks;       /* dict: rule << 32 | state -> [walk tuple, [dict per group]] */
    Py_buffer ids, eos;    /* int64: position -> token id, end-of-sequence ids */
    int taken;             /* buffers taken (released in dealloc) */
    int64_t first[256];    /* per byte, its depth-1 node (-1: none) */
    Py_ssize_t nbytes;     /* bits per mask / 8 */
    Py_ssize_t held, budget;
} AssemblerObject;

static void Assembler_dealloc(AssemblerObject *self) {
    Py_buffer *views[2] = {&self->ids, &self->eos};
    for (int i = 0; i < self->taken; i++) PyBuffer_Release(views[i]);
    Py_XDECREF(self->trie);
    Py_XDECREF(self->walk_of);
    Py_XDECREF(self->rests_of);
    Py_XDECREF(self->walks);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int take_i64(PyObject *obj, Py_buffer *view, const char *what) {
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
    if (view->itemsize != 8 || view->ndim > 1 || !jm_is_int64(view->format)) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_TypeError, "%s must be a 1-D int64 buffer", what);
        return -1;
    }
    return 0;
}

static int Assembler_init(AssemblerObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"trie", "ids", "nbytes", "eos", "walk_of", "rests_of", "budget", NULL};
    PyObject *trie, *ids, *eos, *walk_of, *rests_of;
    Py_ssize_t nbytes, budget;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOnOOOn", kwlist, &trie, &ids, &nbytes, &eos, &walk_of, &rests_of,
                                     &budget))
        return -1;
    if (self->walks) {
        PyErr_SetString(PyExc_TypeError, "a MissAssembler is initialised once");
        return -1;
    }
    if (!PyCallable_Check(walk_of) || !PyCallable_Check(rests_of)) {
        PyErr_SetString(PyExc_TypeError, "walk_of and rests_of must be callable");
        return -1;
    }
    if (nbytes < 0 || nbytes > (PY_SSIZE_T_MAX >> 4) || budget < 0) {
        PyErr_SetString(PyExc_ValueError, "nbytes or budget out of range");
        return -1;
    }
    Py_ssize_t levels, n;
    const Py_buffer *views = jm_trie_levels(trie, &levels);
    if (!views) return -1;
    for (int b = 0; b < 256; b++) self->first[b] = -1;
    if (levels) { /* (the depth-1 nodes, by their byte) */
        const int64_t *byte = level_field(views, 0, F_BYTE, &n);
        for (Py_ssize_t k = 0; k < n; k++) {
            if (byte[k] < 0 || byte[k] > 255) {
                PyErr_SetString(PyExc_ValueError, "a trie byte out of range");
                return -1;
            }
            self->first[byte[k]] = k;
        }
    }
    if (take_i64(ids, &self->ids, "ids") < 0) return -1;
    self->taken++;
    if (take_i64(eos, &self->eos, "eos") < 0) return -1;
    self->taken++;
    self->walks = PyDict_New();
    if (!self->walks) return -1;
    self->trie = Py_NewRef(trie);
    self->walk_of = Py_NewRef(walk_of);
    self->rests_of = Py_NewRef(rests_of);
    self->nbytes = nbytes;
    self->budget = budget;
    return 0;
}

/* ------------------------------------------------------------------------------ */
/* The union                                                                        */

typedef struct {
    uint8_t *bits;
    Py_ssize_t nbytes;
    int set; /* anything allowed yet (a dense walk counts whatever its bits) */
} Union;

/* Sets token id ``t`` (checked: the ids buffer is the caller's and may change). */
static inline int union_id(Union *u, int64_t t) {
    if (t < 0 || t >= (int64_t)u->nbytes * 8) {
        PyErr_Format(PyExc_ValueError, "id %lld outside the %lld bits", (long long)t, (long long)u->nbytes * 8);
        return -1;
    }
    u->bits[t >> 3] |= (uint8_t)(1u << (t & 7));
    return 0;
}

/* Sets the ids of the token positions ``positions``. */
static int union_positions(AssemblerObject *self, Union *u, const int64_t *positions, Py_ssize_t n) {
    const int64_t *id = self->ids.buf;
    Py_ssize_t nids = self->ids.len / 8;
    for (Py_ssize_t k = 0; k < n; k++) {
        int64_t p = positions[k];
        if (p < 0 || p >= nids) {
            PyErr_Format(PyExc_ValueError, "position %lld out of range", (long long)p);
            return -1;
        }
        if (union_id(u, id[p]) < 0) return -1;
    }
    if (n) u->set = 1;
    return 0;
}

/* The same for a list of positions (finish's answer). */
static int union_list(AssemblerObject *self, Union *u, PyObject *found) {
    if (!PyList_Check(found)) {
        PyErr_SetString(PyExc_TypeError, "finish must return a list of positions");
        return -1;
    }
    const int64_t *id = self->ids.buf;
    Py_ssize_t nids = self->ids.len / 8;
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(found); k++) {
        int64_t p = as_i64(PyList_GET_ITEM(found, k));
        if (p < 0 || p >= nids) {
            if (!PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "position %lld out of range", (long long)p);
            return -1;
        }
        if (union_id(u, id[p]) < 0) return -1;
        u->set = 1;
    }
    return 0;
}

/* Allows a walk's inside tokens: dense bits (or'ed) or int32 ids. */
static int union_inside(Union *u, PyObject *inside, int dense) {
    Py_buffer view;
    if (PyObject_GetBuffer(inside, &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
    int rc = -1;
    if (dense) {
        if (view.itemsize != 1 || view.len != u->nbytes) {
            PyErr_SetString(PyExc_ValueError, "a dense walk must be uint8 bits of the mask's size");
            goto done;
        }
        const uint8_t *src = view.buf;
        uint8_t *dst = u->bits;
        Py_ssize_t k = 0;
        if (!u->set) { /* (nothing in the union yet: a copy) */
            memcpy(dst, src, (size_t)u->nbytes);
            k = u->nbytes;
        }
        for (; k + 8 <= u->nbytes; k += 8) { /* (by words: unaligned loads through memcpy) */
            uint64_t a, b;
            memcpy(&a, dst + k, 8);
            memcpy(&b, src + k, 8);
            a |= b;
            memcpy(dst + k, &a, 8);
        }
        for (; k < u->nbytes; k++) dst[k] |= src[k];
        u->set = 1;
    } else {
        if (view.itemsize != 4 || view.ndim > 1 || !jm_is_int32(view.format)) {
            PyErr_SetString(PyExc_TypeError, "a sparse walk's ids must be 1-D int32");
            goto done;
        }
        const int32_t *id = view.buf;
        Py_ssize_t n = view.len / 4;
        for (Py_ssize_t k = 0; k < n; k++)
            if (union_id(u, id[k]) < 0) goto done;
        if (n) u->set = 1;
    }
    rc = 0;
done:
    PyBuffer_Release(&view);
    return rc;
}

/* ------------------------------------------------------------------------------ */
/* One stack                                                                        */

static int count_reads(const int32_t *row) {
    int n = 0;
    for (int b = 0; b < 256; b++) n += row[b] >= 0;
    return n;
}

/* The stack (context, state) after ``target`` (its step's state) at trie node
 * ``child``: itself, or its closure where the state is crossing; pushed as (child,
 * context, state) triples. */
static int push_step(PyObject *core, Tables *t, I64Vec *out, int64_t child, int64_t context, int64_t target) {
    int crossing = crossing_of(t, context, target);
    if (crossing < 0) return -1;
    if (crossing) return jm_stacks_push(core, context, target, out, child, 1);
    if (vec_reserve(out, 3) < 0) return -1;
    out->data[out->size++] = child;
    out->data[out->size++] = context;
    out->data[out->size++] = target;
    return 0;
}

/* TokenTrie.walk_stacks from the seeds in ``frontier`` (consumed; nodes of level
 * ``depth``): the positions read into ``found``; 1 when walked, 0 past ``budget``
 * (node, stack) pairs, -1 on error.
 * The C Trie's walk but for a node with many children, whose stacks' read lists it
 * looks up: here every child is looked up in the row (at most 256 of them), which finds
 * the same children in the same (ascending) order, so the same stacks are met in the
 * same order, without the read lists. */
static int walk_stacks(AssemblerObject *self, PyObject *core, Tables *t, I64Vec *frontier, long long budget,
                       I64Vec *found, Py_ssize_t depth) {
    Py_ssize_t levels;
    const Py_buffer *views = jm_trie_levels(self->trie, &levels);
    if (!views) return -1;
    if (depth < 1) {
        PyErr_SetString(PyExc_ValueError, "a walk starts at level 1 or below");
        return -1;
    }
    I64Vec following = {0};
    I64Set credited = {0};
    int rc = -1;
    long long seen = 0;
    while (frontier->size) {
        Py_ssize_t count = frontier->size / 3;
        seen += count;
        if (seen > budget) {
            rc = 0;
            goto done;
        }
        if (depth - 1 >= levels) {
            PyErr_SetString(PyExc_ValueError, "the walk went below the trie");
            goto done;
        }
        JmLevel level = jm_level(views, levels, depth);
        Py_ssize_t nodes = level.nodes, nbelow = level.nbelow;
        const int64_t *lo_of = level.lo, *term_of = level.term, *child_lo = level.child_lo;
        const int64_t *child_hi = level.child_hi, *below = level.below;
        following.size = 0;
        if (set_init(&credited, count) < 0) goto done;
        for (Py_ssize_t i = 0; i < count; i++) {
            int64_t node = frontier->data[3 * i], context = frontier->data[3 * i + 1], state = frontier->data[3 * i + 2];
            if (node < 0 || node >= nodes) {
                PyErr_Format(PyExc_ValueError, "node %lld out of range", (long long)node);
                goto done;
            }
            if (set_add(&credited, node)) {
                int64_t term = term_of[node], lo = lo_of[node];
                if (term < 0 || term > (int64_t)(self->ids.len / 8)) {
                    PyErr_SetString(PyExc_ValueError, "a trie node's tokens out of range");
                    goto done;
                }
                if (vec_reserve(found, term) < 0) goto done;
                for (int64_t p = lo; p < lo + term; p++) found->data[found->size++] = p;
            }
            if (below == NULL || context < 0) continue;
            int64_t first = child_lo[node], end = child_hi[node];
            if (first == end) continue;
            if (first < 0 || end < first || end > nbelow) {
                PyErr_SetString(PyExc_ValueError, "a trie level points outside the next one");
                goto done;
            }
            const int32_t *row = row_of(t, context, state);
            if (!row) goto done;
            for (int64_t child = first; child < end; child++) {
                int64_t byte = below[child];
                if (byte < 0 || byte > 255) {
                    PyErr_SetString(PyExc_ValueError, "a trie byte out of range");
                    goto done;
                }
                if (row[byte] >= 0 && push_step(core, t, &following, child, context, row[byte]) < 0) goto done;
            }
        }
        I64Vec swap = *frontier;
        *frontier = following;
        following = swap;
        depth++;
    }
    rc = 1;
done:
    vec_free(&following);
    set_free(&credited);
    return rc;
}

/* walk_stacks without a budget (1, or -1 on error): by sets of stacks (r7deep_sets.c),
 * or stack by stack where those pass their memory bound. */
static int walk_all(AssemblerObject *self, PyObject *core, Tables *t, I64Vec *seeds, I64Vec *found,
                    Py_ssize_t depth) {
    Py_ssize_t levels;
    const Py_buffer *views = jm_trie_levels(self->trie, &levels);
    if (!views) return -1;
    int rc = jm_r7_walk_sets(core, t, views, levels, jm_trie_pre(self->trie), (int64_t)(self->ids.len / 8), seeds,
                             depth, found);
    if (rc != 0) return rc;
    return walk_stacks(self, core, t, seeds, (long long)1 << 62, found, depth);
}

/* boundary.direct: 1 with the tokens allowed, 0 when the stack is too wide (nothing
 * done), -1 on error. */
static int direct(AssemblerObject *self, Union *u, PyObject *core, Tables *t, int64_t context, int64_t state,
                  int whole) {
    const int32_t *row = row_of(t, context, state);
    if (!row) return -1;
    if (!whole && count_reads(row) > SMALL_BYTES) return 0;
    Py_ssize_t levels, nfirst = 0;
    const Py_buffer *views = jm_trie_levels(self->trie, &levels);
    if (!views) return -1;
    Py_ssize_t nhi = 0;
    const int64_t *lo = levels ? level_field(views, 0, F_LO, &nfirst) : NULL;
    const int64_t *hi = levels ? level_field(views, 0, F_HI, &nhi) : NULL;
    if (nhi < nfirst) nfirst = nhi;
    I64Vec seeds = {0}, found = {0};
    int rc = -1;
    for (int b = 0; b < 256; b++) {
        int64_t target = row[b]; /* (the table's buffer is held: row stays valid) */
        if (target < 0 || self->first[b] < 0) continue;
        if (push_step(core, t, &seeds, self->first[b], context, target) < 0) goto done;
    }
    if (!whole) {
        for (Py_ssize_t k = 0; k < seeds.size; k += 3) {
            int64_t node = seeds.data[k], here = seeds.data[k + 1], at = seeds.data[k + 2];
            if (node >= nfirst) {
                PyErr_SetString(PyExc_ValueError, "a first node out of the trie");
                goto done;
            }
            if (hi[node] - lo[node] > DIRECT_NODES && here >= 0) {
                const int32_t *r = row_of(t, here, at);
                if (!r) goto done;
                if (count_reads(r) > WIDE_BYTES) {
                    rc = 0;
                    goto done;
                }
            }
        }
    }
    rc = whole ? walk_all(self, core, t, &seeds, &found, 1)
               : walk_stacks(self, core, t, &seeds, (long long)DIRECT_NODES, &found, 1);
    if (rc == 1 && union_positions(self, u, found.data, found.size) < 0) rc = -1;
done:
    vec_free(&seeds);
    vec_free(&found);
    return rc;
}

/* The memo entry of (rule, state): a new reference to [walk, [rests dict per group]]. */
static PyObject *walk_entry(AssemblerObject *self, int64_t rule, int64_t state) {
    if (rule < 0 || rule > INT32_MAX || state < 0 || state > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "rule %lld or state %lld out of range", (long long)rule, (long long)state);
        return NULL;
    }
    PyObject *key = PyLong_FromLongLong((rule << 32) | state);
    if (!key) return NULL;
    PyObject *entry = PyDict_GetItemWithError(self->walks, key);
    if (entry || PyErr_Occurred()) {
        Py_DECREF(key);
        return Py_XNewRef(entry);
    }
    PyObject *walk = PyObject_CallFunction(self->walk_of, "LL", (long long)rule, (long long)state);
    if (!walk) {
        Py_DECREF(key);
        return NULL;
    }
    Py_ssize_t size = -1;
    PyObject *groups = NULL;
    if (PyTuple_Check(walk) && PyTuple_GET_SIZE(walk) == 4 && PyTuple_Check(PyTuple_GET_ITEM(walk, 2))) {
        groups = PyTuple_GET_ITEM(walk, 2);
        size = PyLong_AsSsize_t(PyTuple_GET_ITEM(walk, 3));
        for (Py_ssize_t g = 0; g < PyTuple_GET_SIZE(groups); g++) {
            PyObject *group = PyTuple_GET_ITEM(groups, g);
            if (!PyTuple_Check(group) || PyTuple_GET_SIZE(group) != 2) size = -1;
        }
    }
    if (size < 0) {
        if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_TypeError))
            PyErr_SetString(PyExc_TypeError, "walk_of must return (inside, dense, ((stop, split), ...), nbytes >= 0)");
        Py_DECREF(walk);
        Py_DECREF(key);
        return NULL;
    }
    PyObject *rests = PyList_New(PyTuple_GET_SIZE(groups));
    for (Py_ssize_t g = 0; rests && g < PyTuple_GET_SIZE(groups); g++) {
        PyObject *memo = PyDict_New();
        if (!memo) Py_CLEAR(rests);
        else PyList_SET_ITEM(rests, g, memo);
    }
    entry = rests ? PyList_New(2) : NULL;
    if (!entry) {
        Py_XDECREF(rests);
        Py_DECREF(walk);
        Py_DECREF(key);
        return NULL;
    }
    PyList_SET_ITEM(entry, 0, walk);
    PyList_SET_ITEM(entry, 1, rests);
    if (PyDict_GET_SIZE(self->walks) >= WALKS_KEPT || size > self->budget - self->held) { /* (no overflow) */
        PyDict_Clear(self->walks);
        self->held = 0;
    }
    if (size <= self->budget) { /* (a walk bigger than the budget is not kept) */
        if (PyDict_SetItem(self->walks, key, entry) < 0) {
            Py_DECREF(entry);
            Py_DECREF(key);
            return NULL;
        }
        self->held += size;
    }
    Py_DECREF(key);
    return entry;
}

/* A (context, state) pair of a returns/readers tuple. */
static int pair_of(PyObject *pair, int64_t *context, int64_t *state) {
    if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
        PyErr_SetString(PyExc_TypeError, "a pair is (context, state)");
        return -1;
    }
    *context = as_i64(PyTuple_GET_ITEM(pair, 0));
    *state = as_i64(PyTuple_GET_ITEM(pair, 1));
    return (*context == -1 || *state == -1) && PyErr_Occurred() ? -1 : 0;
}

/* The bytes any pair of a returns/readers tuple reads, as 256 flags (0/1). */
static int readable_of(Tables *t, PyObject *pairs, char *readable) {
    memset(readable, 0, 256);
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(pairs); k++) {
        int64_t c, s;
        if (pair_of(PyTuple_GET_ITEM(pairs, k), &c, &s) < 0) return -1;
        const int32_t *row = row_of(t, c, s);
        if (!row) return -1;
        for (int b = 0; b < 256; b++) readable[b] |= row[b] >= 0;
    }
    return 0;
}

/* The compiled Stacks' context, readers and returns, called without a lookup by name
 * (found once in its type's method table), and the names of its lists. */
static PyCFunction stacks_context, stacks_readers, stacks_returns;
static PyObject *name_tables, *name_crossings, *name_near;

static int find_methods(void) {
    if (stacks_context && name_near) return 0;
    for (PyMethodDef *d = jm_StacksType.tp_methods; d && d->ml_name; d++) {
        if (!strcmp(d->ml_name, "context") && (d->ml_flags & METH_VARARGS)) stacks_context = d->ml_meth;
        if (!strcmp(d->ml_name, "readers") && (d->ml_flags & METH_VARARGS)) stacks_readers = d->ml_meth;
        if (!strcmp(d->ml_name, "returns") && (d->ml_flags & METH_O)) stacks_returns = d->ml_meth;
    }
    if (!stacks_context || !stacks_readers || !stacks_returns) {
        PyErr_SetString(PyExc_TypeError, "the Stacks type lacks context, readers or returns");
        return -1;
    }
    if (!name_tables) name_tables = PyUnicode_InternFromString("tables");
    if (!name_crossings) name_crossings = PyUnicode_InternFromString("crossings");
    if (!name_near) name_near = PyUnicode_InternFromString("near");
    return name_tables && name_crossings && name_near ? 0 : -1;
}

/* Stacks.finish_in_trie: a big group kept as where its rests start in the token trie
 * (``starts``: three bytes objects of int64, each entry's first rest byte, the node it
 * leads to and that node's level, by level). Each stack of ``pairs`` steps by an
 * entry's byte, then the stacks walk the trie below its node, one walk per level. */
static int finish_in_trie(AssemblerObject *self, Union *u, PyObject *core, Tables *t, PyObject *starts,
                          PyObject *pairs) {
    PyObject *parts[3];
    for (int k = 0; k < 3; k++) {
        parts[k] = PyTuple_GET_ITEM(starts, k);
        if (!PyBytes_Check(parts[k]) || PyBytes_GET_SIZE(parts[k]) != PyBytes_GET_SIZE(parts[0]) ||
            PyBytes_GET_SIZE(parts[k]) % 8) {
            PyErr_SetString(PyExc_TypeError, "rests_of's starts must be three int64 buffers of one length");
            return -1;
        }
    }
    const int64_t *byte = (const int64_t *)PyBytes_AS_STRING(parts[0]);
    const int64_t *node = (const int64_t *)PyBytes_AS_STRING(parts[1]);
    const int64_t *depth = (const int64_t *)PyBytes_AS_STRING(parts[2]);
    Py_ssize_t count = PyBytes_GET_SIZE(parts[0]) / 8;
    I64Vec seeds = {0}, found = {0};
    int rc = -1;
    /* (``starts`` is held by the caller: its buffers stay while stacks are expanded.) */
    for (Py_ssize_t begin = 0, end; begin < count; begin = end) {
        for (end = begin; end < count && depth[end] == depth[begin]; end++) {
            if (byte[end] < 0 || byte[end] > 255) {
                PyErr_SetString(PyExc_ValueError, "a rest's first byte out of range");
                goto done;
            }
            for (Py_ssize_t p = 0; p < PyTuple_GET_SIZE(pairs); p++) {
                int64_t context, state;
                if (pair_of(PyTuple_GET_ITEM(pairs, p), &context, &state) < 0) goto done;
                const int32_t *row = row_of(t, context, state);
                if (!row) goto done;
                if (row[byte[end]] >= 0 && push_step(core, t, &seeds, node[end], context, row[byte[end]]) < 0)
                    goto done;
            }
        }
        if (walk_all(self, core, t, &seeds, &found, (Py_ssize_t)depth[begin]) < 0) goto done;
        seeds.size = 0;
        if (union_positions(self, u, found.data, found.size) < 0) goto done;
        found.size = 0;
    }
    rc = 0;
done:
    vec_free(&seeds);
    vec_free(&found);
    return rc;
}

/* One boundary group ``grp`` (stop, split) of a walk, for the stack's context: the
 * stacks its tokens go on in, the bytes they read, the rests (memoised in ``memo``, a
 * dict by readable bytes) and their finish. */
static int group(AssemblerObject *self, Union *u, PyObject *core, Tables *t, int64_t context, PyObject *grp,
                 PyObject *memo) {
    int64_t stop = as_i64(PyTuple_GET_ITEM(grp, 0));
    if (stop == -1 && PyErr_Occurred()) return -1;
    PyObject *pairs = NULL, *number = PyLong_FromLongLong(context);
    if (!number) return -1;
    if (stop == RETURN_STOP) {
        pairs = stacks_returns(core, number);
    } else {
        PyObject *call = PyTuple_Pack(2, number, PyTuple_GET_ITEM(grp, 0));
        if (call) pairs = stacks_readers(core, call);
        Py_XDECREF(call);
    }
    Py_DECREF(number);
    if (!pairs) return -1;
    int rc = -1;
    PyObject *key = NULL, *rests = NULL, *args = NULL, *found = NULL;
    if (!PyTuple_Check(pairs)) {
        PyErr_SetString(PyExc_TypeError, "returns and readers must give a tuple");
        goto done;
    }
    if (!PyTuple_GET_SIZE(pairs)) {
        rc = 0;
        goto done;
    }
    char readable[256];
    if (readable_of(t, pairs, readable) < 0) goto done;
    key = PyBytes_FromStringAndSize(readable, 256);
    if (!key) goto done;
    rests = PyDict_GetItemWithError(memo, key);
    if (rests) {
        Py_INCREF(rests);
    } else {
        if (PyErr_Occurred()) goto done;
        rests = PyObject_CallFunctionObjArgs(self->rests_of, PyTuple_GET_ITEM(grp, 1), key, NULL);
        if (!rests) goto done;
        if (!PyTuple_Check(rests) || PyTuple_GET_SIZE(rests) != 3) {
            PyErr_SetString(PyExc_TypeError, "rests_of must return (byte, kids, ends)");
            goto done;
        }
        /* (Counted in the walks' budget too: past it, everything kept goes. The
         * entry in use is held by the caller, the memo by its entry.) */
        PyObject *bytes_of = PyTuple_GET_ITEM(rests, 0);
        Py_ssize_t size = 256 + (PyBytes_Check(bytes_of) ? 3 * PyBytes_GET_SIZE(bytes_of)
                                                         : 64 * (PyList_Check(bytes_of) ? PyList_GET_SIZE(bytes_of) : 1));
        if (PyDict_GET_SIZE(memo) >= RESTS_KEPT) PyDict_Clear(memo);
        if (size > self->budget - self->held) {
            PyDict_Clear(self->walks);
            self->held = 0;
        }
        if (size <= self->budget) {
            if (PyDict_SetItem(memo, key, rests) < 0) goto done;
            self->held += size;
        }
    }
    if (PyBytes_Check(PyTuple_GET_ITEM(rests, 0))) {
        rc = finish_in_trie(self, u, core, t, rests, pairs);
        goto done;
    }
    args = PyTuple_Pack(7, PyTuple_GET_ITEM(rests, 0), PyTuple_GET_ITEM(rests, 1), PyTuple_GET_ITEM(rests, 2), pairs,
                        t->tables, t->crossings, core);
    if (!args) goto done;
    found = jm_finish(NULL, args);
    if (!found) goto done;
    rc = union_list(self, u, found);
done:
    Py_DECREF(pairs);
    Py_XDECREF(key);
    Py_XDECREF(rests);
    Py_XDECREF(args);
    Py_XDECREF(found);
    return rc;
}

/* The walk of the stack's (rule, state): its inside tokens and its groups. */
static int walked(AssemblerObject *self, Union *u, PyObject *core, Tables *t, int64_t context, int64_t rule,
                  int64_t state) {
    PyObject *entry = walk_entry(self, rule, state);
    if (!entry) return -1;
    int rc = -1;
    PyObject *walk = PyList_GET_ITEM(entry, 0), *memos = PyList_GET_ITEM(entry, 1);
    PyObject *groups = PyTuple_GET_ITEM(walk, 2);
    int dense = PyObject_IsTrue(PyTuple_GET_ITEM(walk, 1));
    if (dense < 0 || union_inside(u, PyTuple_GET_ITEM(walk, 0), dense) < 0) goto done;
    for (Py_ssize_t g = 0; g < PyTuple_GET_SIZE(groups); g++)
        if (group(self, u, core, t, context, PyTuple_GET_ITEM(groups, g), PyList_GET_ITEM(memos, g)) < 0) goto done;
    rc = 0;
done:
    Py_DECREF(entry);
    return rc;
}

/* The context of ``stack`` below its top frame, numbered by the Stacks (-1 + exception),
 * and its top frame's rule and state. */
static int64_t context_of(PyObject *core, PyObject *stack, int64_t *rule, int64_t *state) {
    Py_ssize_t n = PyTuple_GET_SIZE(stack);
    PyObject *top = PyTuple_GET_ITEM(stack, n - 1);
    if (!PyTuple_Check(top) || PyTuple_GET_SIZE(top) != 2) {
        PyErr_SetString(PyExc_TypeError, "a frame is (rule, state)");
        return -1;
    }
    *rule = as_i64(PyTuple_GET_ITEM(top, 0));
    *state = as_i64(PyTuple_GET_ITEM(top, 1));
    if ((*rule == -1 || *state == -1) && PyErr_Occurred()) return -1;
    PyObject *lower = PyTuple_GetSlice(stack, 0, n - 1);
    if (!lower) return -1;
    PyObject *call = PyTuple_Pack(2, lower, PyTuple_GET_ITEM(top, 0));
    Py_DECREF(lower);
    if (!call) return -1;
    PyObject *number = stacks_context(core, call);
    Py_DECREF(call);
    if (!number) return -1;
    int64_t context = as_i64(number);
    Py_DECREF(number);
    if (context == -1 && !PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "a stack has no context");
    return context;
}

static PyObject *Assembler_assemble(AssemblerObject *self, PyObject *args) {
    PyObject *core, *state;
    if (!PyArg_ParseTuple(args, "O!O!", &jm_StacksType, &core, &PyTuple_Type, &state)) return NULL;
    if (!self->walks) {
        PyErr_SetString(PyExc_TypeError, "the MissAssembler was not initialised");
        return NULL;
    }
    if (find_methods() < 0) return NULL;
    PyObject *tables = PyObject_GetAttr(core, name_tables);
    PyObject *crossings = tables ? PyObject_GetAttr(core, name_crossings) : NULL;
    PyObject *near = crossings ? PyObject_GetAttr(core, name_near) : NULL;
    PyObject *out = near ? PyBytes_FromStringAndSize(NULL, self->nbytes) : NULL;
    Tables t = {0};
    if (!out || tables_init(&t, tables, crossings) < 0) goto fail;
    if (!PyList_Check(near)) {
        PyErr_SetString(PyExc_TypeError, "near must be a list");
        goto fail;
    }
    Union u = {(uint8_t *)PyBytes_AS_STRING(out), self->nbytes, 0};
    memset(u.bits, 0, (size_t)self->nbytes);
    int end = 0;
    Py_INCREF(state);
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(state); k++) {
        PyObject *stack = PyTuple_GET_ITEM(state, k);
        if (!PyTuple_Check(stack)) {
            PyErr_SetString(PyExc_TypeError, "a stack is a tuple of frames");
            goto fail_state;
        }
        if (!PyTuple_GET_SIZE(stack)) {
            end = 1;
            continue;
        }
        int64_t rule, at, context = context_of(core, stack, &rule, &at);
        if (context < 0) goto fail_state;
        if (context >= PyList_GET_SIZE(near)) {
            PyErr_Format(PyExc_ValueError, "context %lld out of range", (long long)context);
            goto fail_state;
        }
        int whole = PyObject_IsTrue(PyList_GET_ITEM(near, context));
        if (whole < 0) goto fail_state;
        int done = direct(self, &u, core, &t, context, at, whole);
        if (done < 0 || (!done && walked(self, &u, core, &t, context, rule, at) < 0)) goto fail_state;
    }
    if ((end || (PyTuple_GET_SIZE(state) && !u.set)) && self->eos.len) {
        const int64_t *e = self->eos.buf;
        for (Py_ssize_t k = 0; k < self->eos.len / 8; k++)
            if (union_id(&u, e[k]) < 0) goto fail_state;
    }
    Py_DECREF(state);
    tables_free(&t);
    Py_DECREF(tables);
    Py_DECREF(crossings);
    Py_DECREF(near);
    return out;
fail_state:
    Py_DECREF(state);
fail:
    tables_free(&t);
    Py_XDECREF(tables);
    Py_XDECREF(crossings);
    Py_XDECREF(near);
    Py_XDECREF(out);
    return NULL;
}

static PyObject *Assembler_clear(AssemblerObject *self, PyObject *unused) {
    (void)unused;
    if (self->walks) PyDict_Clear(self->walks);
    self->held = 0;
    Py_RETURN_NONE;
}

static PyObject *Assembler_kept(AssemblerObject *self, void *unused) {
    (void)unused;
    return PyLong_FromSsize_t(self->walks ? PyDict_GET_SIZE(self->walks) : 0);
}

static PyMethodDef Assembler_methods[] = {
    {"assemble", (PyCFunction)Assembler_assemble, METH_VARARGS,
     "assemble(stacks, state) -> bytes\n\n"
     "MaskEngine._assemble over bits: the mask of ``state`` (a tuple of stacks), token t\n"
     "bit t % 8 of byte t // 8. ``stacks``: the engine's compiled Stacks."},
    {"clear", (PyCFunction)Assembler_clear, METH_NOARGS, "clear() -> None\n\nForget the memoised walks."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Assembler_getset[] = {
    {"kept", (getter)Assembler_kept, NULL, "Walks memoised now.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject jm_r3miss_AssemblerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "jsonmode._native.MissAssembler",
    .tp_basicsize = sizeof(AssemblerObject),
    .tp_dealloc = (destructor)Assembler_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "MissAssembler(trie, ids, nbytes, eos, walk_of, rests_of, budget)\n\n"
              "A mask-cache miss of MaskEngine in C (see csrc/r3miss_assemble.c): assemble(stacks,\n"
              "state) gives the mask's bits. walk_of(rule, state) -> (inside, dense,\n"
              "((stop, split), ...), nbytes) and rests_of(split, readable) -> (byte, kids, ends)\n"
              "are asked once per walk and per group and readable bytes (memoised, within\n"
              "``budget`` bytes of walks).",
    .tp_methods = Assembler_methods,
    .tp_getset = Assembler_getset,
    .tp_init = (initproc)Assembler_init,
    .tp_new = PyType_GenericNew,
};
