/* The regex engine's hot loops (jsonmode/regex): Hopcroft minimisation and the
 * Glushkov subset construction, on flat arrays of code-point intervals.
 *
 *   minimize_raw  jsonmode.regex.char_dfa.minimize_raw (trim, Hopcroft, canonical)
 *   determinise   jsonmode.regex.glushkov._determinise (subset construction, then the
 *                 same minimisation)
 *
 * Both return the canonical form of the minimal DFA, ``(accepting, edges)`` as the
 * tuples of a CharDFA numbered breadth-first from state 0, edges in row order with
 * adjacent ranges to one target merged: that form depends only on the language (and,
 * for minimize_raw, on each representative's row), so it is the pure-Python forms'
 * answer exactly, whatever order the partition refinement splits in.
 *
 * Safety: the Python inputs are copied into C arrays first (tuples of our own, exact
 * ints only, so no Python code runs while a caller's list is read); every state and
 * position read is checked against its count (ValueError); work lists live on the
 * heap; ``checkpoint`` (jsonmode.budget.checkpoint) is called every 64 refinement
 * rounds, every 256 states swept and every 16 subset states, so the compile deadline
 * holds. The GIL is held throughout. */
#include "regex.h"

static PyObject *empty_result(void) {
    PyObject *row = PyTuple_New(0);
    PyObject *rows = row ? PyTuple_Pack(1, row) : NULL;
    Py_XDECREF(row);
    PyObject *acc = rows ? PyTuple_Pack(1, Py_False) : NULL;
    PyObject *out = acc ? PyTuple_Pack(2, acc, rows) : NULL;
    Py_XDECREF(acc);
    Py_XDECREF(rows);
    return out;
}

/* ------------------------------------------------------------------------------ */
/* Minimisation                                                                      */

/* Trim ``in`` to the states reachable from its start that reach acceptance, into
 * ``out`` (numbered in order); 0 when the start is not live (empty), 1 done, -1 error. */
static int trim(const Raw *in, Raw *out) {
    Py_ssize_t n = in->n;
    int rc = -1;
    uint8_t *reach = alloc(n, 1), *live = alloc(n, 1);
    int64_t *newid = alloc(n, sizeof(int64_t)), *revcount = alloc(n + 1, sizeof(int64_t));
    I64Vec todo = {0}, rev = {0};
    if (!reach || !live || !newid || !revcount) {
        PyErr_NoMemory();
        goto done;
    }
    reach[in->start] = 1;
    if (vec_push(&todo, in->start) < 0) goto done;
    while (todo.size) {
        int64_t s = todo.data[--todo.size];
        for (int64_t e = in->row.data[s]; e < in->row.data[s + 1]; e++) {
            int64_t d = in->dst.data[e];
            revcount[d + 1]++;
            if (!reach[d]) {
                reach[d] = 1;
                if (vec_push(&todo, d) < 0) goto done;
            }
        }
    }
    for (Py_ssize_t s = 0; s < n; s++) revcount[s + 1] += revcount[s];
    if (vec_reserve(&rev, revcount[n]) < 0) goto done;
    rev.size = revcount[n];
    for (Py_ssize_t s = 0; s < n; s++) {
        if (!reach[s]) continue;
        for (int64_t e = in->row.data[s]; e < in->row.data[s + 1]; e++) rev.data[revcount[in->dst.data[e]]++] = s;
    }
    /* (revcount[d] is now the end of d's sources; they start at revcount[d - 1].) */
    for (Py_ssize_t s = 0; s < n; s++) {
        if (reach[s] && in->acc[s]) {
            live[s] = 1;
            if (vec_push(&todo, s) < 0) goto done;
        }
    }
    while (todo.size) {
        int64_t s = todo.data[--todo.size];
        for (int64_t k = s ? revcount[s - 1] : 0; k < revcount[s]; k++) {
            int64_t p = rev.data[k];
            if (!live[p]) {
                live[p] = 1;
                if (vec_push(&todo, p) < 0) goto done;
            }
        }
    }
    if (!live[in->start]) {
        rc = 0;
        goto done;
    }
    Py_ssize_t kept = 0;
    for (Py_ssize_t s = 0; s < n; s++) newid[s] = live[s] ? kept++ : -1;
    out->n = kept;
    out->start = newid[in->start];
    out->acc = alloc(kept, 1);
    if (!out->acc) {
        PyErr_NoMemory();
        goto done;
    }
    if (vec_push(&out->row, 0) < 0) goto done;
    for (Py_ssize_t s = 0; s < n; s++) {
        if (!live[s]) continue;
        out->acc[newid[s]] = in->acc[s];
        for (int64_t e = in->row.data[s]; e < in->row.data[s + 1]; e++) {
            int64_t d = in->dst.data[e];
            if (live[d] && raw_edge(out, in->lo.data[e], in->hi.data[e], newid[d]) < 0) goto done;
        }
        if (vec_push(&out->row, out->lo.size) < 0) goto done;
    }
    rc = 1;
done:
    PyMem_Free(reach);
    PyMem_Free(live);
    PyMem_Free(newid);
    PyMem_Free(revcount);
    vec_free(&todo);
    vec_free(&rev);
    return rc;
}

/* A column's hash is the sum of one term per state with an edge on it: updated in
 * O(1) as the sweep sets and clears states. */
static inline uint64_t term(int64_t s, int64_t d) {
    return mix(((uint64_t)s << 32) ^ (uint64_t)d ^ 0x2545f4914f6cdd1dULL) | 1;
}

/* The predecessors of ``r``'s states per distinguishable symbol, as CSR: the pairs
 * (symbol, source) of the transitions into t are at [pstart[t], pstart[t + 1]).
 * Symbols: the atoms no edge boundary crosses, atoms every state maps alike merged
 * (_predecessors), found in one sweep over the edge boundaries. */
static int predecessors(const Raw *r, PyObject *checkpoint, int64_t **pstart_out, I64Vec *pairs) {
    Py_ssize_t n = r->n, m = r->lo.size;
    int rc = -1;
    I64Vec points = {0}, triples = {0};
    Intern columns = {0};
    int64_t *col = alloc(n, sizeof(int64_t)), *evcount = NULL, *events = NULL;
    int64_t *pstart = alloc(n + 1, sizeof(int64_t));
    if (!col || !pstart) {
        PyErr_NoMemory();
        goto done;
    }
    if (vec_reserve(&points, 2 * m) < 0) goto done;
    for (Py_ssize_t e = 0; e < m; e++) {
        points.data[points.size++] = r->lo.data[e];
        points.data[points.size++] = r->hi.data[e] + 1;
    }
    sort_i64(points.data, points.size);
    Py_ssize_t np = 0;
    for (Py_ssize_t i = 0; i < points.size; i++)
        if (!np || points.data[i] != points.data[np - 1]) points.data[np++] = points.data[i];
    /* Events per point, ends before starts: (state, target) pairs, bucketed by
     * 2 * point + (start ? 1 : 0). */
    evcount = alloc(2 * np + 1, sizeof(int64_t));
    events = alloc(4 * m, sizeof(int64_t));
    if (!evcount || !events) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t s = 0;
    for (Py_ssize_t e = 0; e < m; e++) {
        evcount[2 * point_index(points.data, np, r->lo.data[e]) + 1 + 1]++;
        evcount[2 * point_index(points.data, np, r->hi.data[e] + 1) + 1]++;
    }
    for (Py_ssize_t k = 0; k < 2 * np; k++) evcount[k + 1] += evcount[k];
    for (s = 0; s < n; s++) {
        for (int64_t e = r->row.data[s]; e < r->row.data[s + 1]; e++) {
            int64_t at = evcount[2 * point_index(points.data, np, r->lo.data[e]) + 1]++;
            events[2 * at] = s;
            events[2 * at + 1] = r->dst.data[e];
            at = evcount[2 * point_index(points.data, np, r->hi.data[e] + 1)]++;
            events[2 * at] = s;
            events[2 * at + 1] = n;
        }
    }
    /* (evcount[k] is now the end of bucket k; bucket k starts at evcount[k - 1].) */
    for (s = 0; s < n; s++) col[s] = n;
    uint64_t h = 0;
    Py_ssize_t ev = 0;
    for (Py_ssize_t a = 0; a + 1 < np; a++) {
        if (!(a & 255) && tick(checkpoint) < 0) goto done;
        for (; ev < evcount[2 * a + 1]; ev++) {
            int64_t st = events[2 * ev], d = events[2 * ev + 1];
            if (col[st] != n) h -= term(st, col[st]);
            col[st] = d;
            if (d != n) h += term(st, d);
        }
        int fresh;
        Py_ssize_t j = intern_get(&columns, col, n, h, &fresh);
        if (j < 0) goto done;
        if (!fresh) continue;
        for (s = 0; s < n; s++) {
            if (col[s] == n) continue;
            if (vec_reserve(&triples, 3) < 0) goto done;
            triples.data[triples.size++] = col[s];
            triples.data[triples.size++] = j;
            triples.data[triples.size++] = s;
            pstart[col[s] + 1]++;
        }
    }
    for (s = 0; s < n; s++) pstart[s + 1] += pstart[s];
    if (vec_reserve(pairs, 2 * pstart[n]) < 0) goto done;
    pairs->size = 2 * pstart[n];
    {
        int64_t *fill = alloc(n, sizeof(int64_t));
        if (!fill) {
            PyErr_NoMemory();
            goto done;
        }
        for (Py_ssize_t k = 0; k < triples.size; k += 3) {
            int64_t t = triples.data[k], at = pstart[t] + fill[t]++;
            pairs->data[2 * at] = triples.data[k + 1];
            pairs->data[2 * at + 1] = triples.data[k + 2];
        }
        PyMem_Free(fill);
    }
    *pstart_out = pstart;
    pstart = NULL;
    rc = 0;
done:
    vec_free(&points);
    vec_free(&triples);
    intern_free(&columns);
    PyMem_Free(col);
    PyMem_Free(evcount);
    PyMem_Free(events);
    PyMem_Free(pstart);
    return rc;
}

/* Hopcroft's refinement of ``r`` (trimmed): block_of[s] for each state. */
static int refine(const Raw *r, const int64_t *pstart, const I64Vec *pairs, PyObject *checkpoint, int64_t *block_of) {
    Py_ssize_t n = r->n;
    int rc = -1;
    int64_t *elem = alloc(n, sizeof(int64_t)), *loc = alloc(n, sizeof(int64_t));
    int64_t *first = alloc(n + 1, sizeof(int64_t)), *end = alloc(n + 1, sizeof(int64_t));
    int64_t *marked = alloc(n + 1, sizeof(int64_t));
    uint8_t *pending = alloc(n + 1, 1);
    I64Vec work = {0}, gathered = {0}, touched = {0};
    if (!elem || !loc || !first || !end || !marked || !pending) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t at = 0, blocks = 0;
    for (int kind = 1; kind >= 0; kind--) { /* the accepting states, then the others */
        Py_ssize_t begin = at;
        for (Py_ssize_t s = 0; s < n; s++) {
            if ((r->acc[s] != 0) == kind) {
                elem[at] = s;
                loc[s] = at++;
                block_of[s] = blocks;
            }
        }
        if (at > begin) {
            first[blocks] = begin;
            end[blocks] = at;
            pending[blocks] = 1;
            if (vec_push(&work, blocks++) < 0) goto done;
        }
    }
    Py_ssize_t rounds = 0;
    while (work.size) {
        if (!(++rounds & 63) && tick(checkpoint) < 0) goto done;
        int64_t b = work.data[--work.size];
        pending[b] = 0;
        gathered.size = 0;
        for (int64_t i = first[b]; i < end[b]; i++) {
            int64_t t = elem[i];
            if (vec_reserve(&gathered, pstart[t + 1] - pstart[t]) < 0) goto done;
            for (int64_t k = pstart[t]; k < pstart[t + 1]; k++)
                gathered.data[gathered.size++] = (int64_t)(((uint64_t)pairs->data[2 * k] << 32) | (uint64_t)pairs->data[2 * k + 1]);
        }
        sort_i64(gathered.data, gathered.size);
        for (Py_ssize_t g = 0; g < gathered.size;) {
            int64_t symbol = gathered.data[g] >> 32;
            touched.size = 0;
            for (; g < gathered.size && gathered.data[g] >> 32 == symbol; g++) {
                int64_t s = gathered.data[g] & 0xffffffff, sb = block_of[s];
                int64_t to = first[sb] + marked[sb], from = loc[s];
                int64_t other = elem[to];
                elem[to] = s;
                loc[s] = to;
                elem[from] = other;
                loc[other] = from;
                if (!marked[sb]++ && vec_push(&touched, sb) < 0) goto done;
            }
            for (Py_ssize_t k = 0; k < touched.size; k++) {
                int64_t sb = touched.data[k], count = marked[sb], size = end[sb] - first[sb];
                marked[sb] = 0;
                if (count == size) continue;
                int64_t nb = blocks++;
                if (count <= size - count) { /* the new block: the smaller part */
                    first[nb] = first[sb];
                    end[nb] = first[sb] + count;
                    first[sb] = end[nb];
                } else {
                    first[nb] = first[sb] + count;
                    end[nb] = end[sb];
                    end[sb] = first[nb];
                }
                for (int64_t i = first[nb]; i < end[nb]; i++) block_of[elem[i]] = nb;
                pending[nb] = 1;
                if (vec_push(&work, nb) < 0) goto done;
            }
        }
    }
    rc = 0;
done:
    PyMem_Free(elem);
    PyMem_Free(loc);
    PyMem_Free(first);
    PyMem_Free(end);
    PyMem_Free(marked);
    PyMem_Free(pending);
    vec_free(&work);
    vec_free(&gathered);
    vec_free(&touched);
    return rc;
}

/* The canonical (accepting, edges) of ``r`` minimised (minimize_raw). */
PyObject *jm_regex_minimize(const Raw *in, PyObject *checkpoint) {
    Raw r = {0};
    I64Vec pairs = {0}, queue = {0}, scratch = {0};
    int64_t *pstart = NULL, *block_of = NULL, *id_of = NULL, *rep = NULL, *order = NULL;
    PyObject *acc = NULL, *rows = NULL, *out = NULL;
    int trimmed = trim(in, &r);
    if (trimmed <= 0) {
        raw_free(&r);
        return trimmed < 0 ? NULL : empty_result();
    }
    Py_ssize_t n = r.n;
    block_of = alloc(n, sizeof(int64_t));
    id_of = alloc(n, sizeof(int64_t));
    rep = alloc(n, sizeof(int64_t));
    order = alloc(n, sizeof(int64_t));
    if (!block_of || !id_of || !rep || !order) {
        PyErr_NoMemory();
        goto done;
    }
    if (predecessors(&r, checkpoint, &pstart, &pairs) < 0 || refine(&r, pstart, &pairs, checkpoint, block_of) < 0)
        goto done;
    /* Blocks numbered by their first state; each represented by that state. */
    Py_ssize_t count = 0;
    for (Py_ssize_t s = 0; s < n; s++) id_of[s] = -1;
    for (Py_ssize_t s = 0; s < n; s++) {
        if (id_of[block_of[s]] < 0) {
            id_of[block_of[s]] = count;
            rep[count++] = s;
        }
    }
    for (Py_ssize_t k = 0; k < count; k++) order[k] = -1;
    /* Breadth-first from the start, edges in row order (_canonical). */
    int64_t start = id_of[block_of[r.start]];
    order[start] = 0;
    if (vec_push(&queue, start) < 0) goto done;
    for (Py_ssize_t q = 0; q < queue.size; q++) {
        int64_t s = rep[queue.data[q]];
        for (int64_t e = r.row.data[s]; e < r.row.data[s + 1]; e++) {
            int64_t d = id_of[block_of[r.dst.data[e]]];
            if (order[d] < 0) {
                order[d] = queue.size;
                if (vec_push(&queue, d) < 0) goto done;
            }
        }
    }
    acc = PyTuple_New(queue.size);
    rows = PyTuple_New(queue.size);
    if (!acc || !rows) goto done;
    for (Py_ssize_t q = 0; q < queue.size; q++) {
        int64_t s = rep[queue.data[q]];
        PyObject *flag = r.acc[s] ? Py_True : Py_False;
        Py_INCREF(flag);
        PyTuple_SET_ITEM(acc, q, flag);
        /* Merged edges: adjacent ranges to one target joined (merge_row). */
        int64_t lo = 0, hi = 0, d = -1;
        I64Vec *edges = &scratch; /* (lo, hi, dst) triples */
        edges->size = 0;
        for (int64_t e = r.row.data[s]; e < r.row.data[s + 1]; e++) {
            int64_t t = order[id_of[block_of[r.dst.data[e]]]];
            if (d >= 0 && t == d && hi + 1 == r.lo.data[e]) {
                hi = r.hi.data[e];
                continue;
            }
            if (d >= 0 && (vec_push(edges, lo) < 0 || vec_push(edges, hi) < 0 || vec_push(edges, d) < 0)) goto done;
            lo = r.lo.data[e];
            hi = r.hi.data[e];
            d = t;
        }
        if (d >= 0 && (vec_push(edges, lo) < 0 || vec_push(edges, hi) < 0 || vec_push(edges, d) < 0)) goto done;
        Py_ssize_t merged = edges->size / 3;
        PyObject *row = PyTuple_New(merged);
        if (!row) goto done;
        PyTuple_SET_ITEM(rows, q, row);
        for (Py_ssize_t k = 0; k < merged; k++) {
            PyObject *edge = Py_BuildValue("(LLL)", (long long)edges->data[3 * k], (long long)edges->data[3 * k + 1],
                                           (long long)edges->data[3 * k + 2]);
            if (!edge) goto done;
            PyTuple_SET_ITEM(row, k, edge);
        }
    }
    out = PyTuple_Pack(2, acc, rows);
done:
    Py_XDECREF(acc);
    Py_XDECREF(rows);
    raw_free(&r);
    vec_free(&pairs);
    vec_free(&queue);
    vec_free(&scratch);
    PyMem_Free(pstart);
    PyMem_Free(block_of);
    PyMem_Free(id_of);
    PyMem_Free(rep);
    PyMem_Free(order);
    return out;
}

int jm_regex_read_rows(PyObject *edges, int64_t min_lo, int64_t max_hi, Py_ssize_t *n, I64Vec *row,
                       int (*store)(void *, int64_t, int64_t, int64_t), void *ctx) {
    PyObject *rows = own_tuple(edges, -1, "edges");
    if (!rows) return -1;
    Py_ssize_t count = PyTuple_GET_SIZE(rows), stored = 0;
    int rc = -1, bad = 0;
    if (count < 1 || count > MAX_ITEMS) {
        PyErr_SetString(PyExc_ValueError, "an automaton has 1 to 2**30 states");
        goto done;
    }
    *n = count;
    if (vec_push(row, 0) < 0) goto done;
    for (Py_ssize_t s = 0; s < count; s++) {
        PyObject *items = own_tuple(PyTuple_GET_ITEM(rows, s), -1, "a row");
        if (!items) goto done;
        int64_t before = min_lo - 1;
        for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(items); k++) {
            PyObject *edge = own_tuple(PyTuple_GET_ITEM(items, k), 3, "an edge");
            if (!edge) {
                Py_DECREF(items);
                goto done;
            }
            int64_t lo = read_int(PyTuple_GET_ITEM(edge, 0), &bad);
            int64_t hi = bad ? 0 : read_int(PyTuple_GET_ITEM(edge, 1), &bad);
            int64_t d = bad ? 0 : read_int(PyTuple_GET_ITEM(edge, 2), &bad);
            Py_DECREF(edge);
            if (!bad && (lo > hi || lo <= before || hi > max_hi || d < 0 || d >= count)) {
                PyErr_SetString(PyExc_ValueError,
                                max_hi == 0x10FFFF
                                    ? "an edge out of order, empty, past U+10FFFF, or to a state out of range"
                                    : "an edge out of order, empty, or to a state out of range");
                bad = 1;
            }
            if (!bad && ++stored > MAX_ITEMS) {
                PyErr_SetString(PyExc_ValueError, "too many edges");
                bad = 1;
            }
            if (bad || store(ctx, lo, hi, d) < 0) {
                Py_DECREF(items);
                goto done;
            }
            before = hi;
        }
        Py_DECREF(items);
        if (vec_push(row, stored) < 0) goto done;
    }
    rc = 0;
done:
    Py_DECREF(rows);
    return rc;
}

static int store_raw(void *ctx, int64_t lo, int64_t hi, int64_t dst) { return raw_edge((Raw *)ctx, lo, hi, dst); }

static int read_rows(PyObject *edges, Raw *r) {
    return jm_regex_read_rows(edges, INT64_MIN + 1, INT64_MAX - 1, &r->n, &r->row, store_raw, r);
}

PyObject *jm_minimize_raw(PyObject *module, PyObject *args) {
    PyObject *start_obj, *accepting, *edges, *checkpoint;
    if (!PyArg_ParseTuple(args, "OOOO", &start_obj, &accepting, &edges, &checkpoint)) return NULL;
    if (!PyCallable_Check(checkpoint)) {
        PyErr_SetString(PyExc_TypeError, "checkpoint must be callable");
        return NULL;
    }
    Raw r = {0};
    PyObject *out = NULL, *flags = NULL;
    int bad = 0;
    int64_t start = read_int(start_obj, &bad);
    if (bad || read_rows(edges, &r) < 0) goto done;
    if (start < 0 || start >= r.n) {
        PyErr_SetString(PyExc_ValueError, "start out of range");
        goto done;
    }
    r.start = start;
    /* (Read last: an item's __bool__ may run any code, and the rows are ours now.) */
    flags = own_tuple(accepting, r.n, "accepting");
    if (!flags) goto done;
    r.acc = alloc(r.n, 1);
    if (!r.acc) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t s = 0; s < r.n; s++) {
        int truth = PyObject_IsTrue(PyTuple_GET_ITEM(flags, s));
        if (truth < 0) goto done;
        r.acc[s] = (uint8_t)truth;
    }
    out = jm_regex_minimize(&r, checkpoint);
done:
    Py_XDECREF(flags);
    raw_free(&r);
    return out;
}
