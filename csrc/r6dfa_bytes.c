/* r6dfa (round 6): a character DFA's byte automaton, byte_dfa._byte_dfa in C.
 *
 * r6dfa_byte_dfa(start, accepting, edges, json, complete, checkpoint)
 *     -> (start, accepting, trans)
 *
 * The minimised CharDFA's fields in (``edges``: per state sorted, disjoint
 * (lo, hi, dst) code-point intervals within 0..0x10FFFF); out, the trimmed ByteDFA as
 * bytes: ``accepting`` one byte (0/1) per state, ``trans`` the int32 table (states x
 * 256, native order; -1 dead). It is jsonmode.regex.byte_dfa._ByteBuilder step for
 * step: the character states keep their numbers, the escape states and the pending
 * (multi-byte) states are made in the same order (pending ones keyed by their slots
 * and residual edges, worked last made first), the byte ranges written in the same
 * order, and the trim keeps the states reachable from the start that reach acceptance,
 * numbered in order. So the tables are equal, not only the languages. checkpoint() is
 * called where the Python form calls it (character state 0, 64, 128 ...; pending
 * state 64, 128 ... worked).
 *
 * Input the Python form would not take as it is (a code point outside 0..0x10FFFF, rows
 * unsorted or overlapping, a target out of range, wrong types) raises ValueError or
 * TypeError: the caller then runs the Python form. Work lists are on the heap (no
 * recursion); every byte range and state number is checked before the table is written.
 * The GIL is held throughout (checkpoint is a Python call). Cost: O(edges + pending
 * states x their edges) plus the table (1 KiB a state).
 */
#include "regex.h"

#define R6_MAX_CP 0x10FFFF
#define R6_MAX_STATES ((int64_t)1 << 30)

/* Slot kinds of a pending multi-byte sequence (byte_dfa's _CONT .. _BIT). */
enum { CONT, HEX, LOWSUR, FIX_BS, FIX_U, FIX_D, FIX_0, BIT };
static const int64_t RADIX[8] = {64, 16, 4, 1, 1, 1, 1, 2};

/* How a digit's values turn into bytes (byte_dfa's to_bytes callables). */
enum { TB_SLOT, TB_LEAD, TB_U, TB_HIGHSUR };

typedef struct {
    /* The character DFA. */
    Py_ssize_t n;
    int64_t start;
    uint8_t *acc;
    I64Vec row;   /* n + 1 offsets into ``edge`` (triples) */
    I64Vec edge;  /* lo, hi, dst */
    /* The builder. */
    int64_t count;      /* states made */
    I32Vec ranges;      /* src, byte lo, byte hi, dst */
    Intern pending;     /* keys: nslots, slots..., then (a, b, d) triples */
    I64Vec pend_state;  /* per key id: its state */
    I64Vec todo;        /* key ids */
    I64Vec key, sub, part, digits;
    PyObject *checkpoint;
} Builder;

static void builder_free(Builder *b) {
    PyMem_Free(b->acc);
    b->acc = NULL;
    vec_free(&b->row);
    vec_free(&b->edge);
    v32_free(&b->ranges);
    intern_free(&b->pending);
    vec_free(&b->pend_state);
    vec_free(&b->todo);
    vec_free(&b->key);
    vec_free(&b->sub);
    vec_free(&b->part);
    vec_free(&b->digits);
}

static int64_t new_state(Builder *b) {
    if (b->count >= R6_MAX_STATES) {
        PyErr_NoMemory();
        return -1;
    }
    return b->count++;
}

static int add(Builder *b, int64_t src, int64_t lo, int64_t hi, int64_t dst) {
    if (v32_reserve(&b->ranges, 4) < 0) return -1;
    int32_t *r = b->ranges.data + b->ranges.size;
    r[0] = (int32_t)src;
    r[1] = (int32_t)lo;
    r[2] = (int32_t)hi;
    r[3] = (int32_t)dst;
    b->ranges.size += 4;
    return 0;
}

/* _slot_bytes(kind, v1, v2) as ranges src -> dst. */
static int add_slot(Builder *b, int64_t src, int kind, int64_t v1, int64_t v2, int64_t dst) {
    switch (kind) {
    case CONT:
        return add(b, src, 0x80 + v1, 0x80 + v2, dst);
    case HEX:
        if (v1 <= 9 && add(b, src, 0x30 + v1, 0x30 + (v2 < 9 ? v2 : 9), dst) < 0) return -1;
        if (v2 >= 10) {
            int64_t lo = (v1 > 10 ? v1 : 10) - 10, hi = v2 - 10;
            if (add(b, src, 0x41 + lo, 0x41 + hi, dst) < 0 || add(b, src, 0x61 + lo, 0x61 + hi, dst) < 0) return -1;
        }
        return 0;
    case LOWSUR:
        if (add(b, src, 0x43 + v1, 0x43 + v2, dst) < 0) return -1;
        return add(b, src, 0x63 + v1, 0x63 + v2, dst);
    case FIX_BS:
        return add(b, src, 0x5C, 0x5C, dst);
    case FIX_U:
        return add(b, src, 0x75, 0x75, dst);
    case FIX_0:
        return add(b, src, 0x30, 0x30, dst);
    case BIT:
        return add(b, src, 0x30 + v1, 0x30 + v2, dst);
    default: /* FIX_D */
        if (add(b, src, 0x44, 0x44, dst) < 0) return -1;
        return add(b, src, 0x64, 0x64, dst);
    }
}

static int to_bytes(Builder *b, int mode, int64_t param, int64_t src, int64_t v1, int64_t v2, int64_t dst) {
    switch (mode) {
    case TB_SLOT:
        return add_slot(b, src, (int)param, v1, v2, dst);
    case TB_LEAD:
        return add(b, src, param + v1, param + v2, dst);
    case TB_U:
        return add(b, src, 0x75, 0x75, dst);
    default: /* TB_HIGHSUR */
        return add_slot(b, src, HEX, v1 + 8, v2 + 8, dst);
    }
}

/* The state that reads ``slots`` then continues per ``residual`` (``nres`` triples),
 * made (and queued) when new; -1 with an exception. */
static int64_t pend(Builder *b, const int64_t *slots, Py_ssize_t nslots, const int64_t *residual, Py_ssize_t nres) {
    b->key.size = 0;
    if (vec_reserve(&b->key, 1 + nslots + 3 * nres) < 0) return -1;
    int64_t *k = b->key.data;
    k[0] = nslots;
    for (Py_ssize_t i = 0; i < nslots; i++) k[1 + i] = slots[i];
    if (nres) memcpy(k + 1 + nslots, residual, (size_t)(3 * nres) * sizeof(int64_t));
    Py_ssize_t len = 1 + nslots + 3 * nres;
    int fresh = 0;
    Py_ssize_t id = intern_get(&b->pending, k, len, hash_array(k, len), &fresh);
    if (id < 0) return -1;
    if (fresh) {
        int64_t state = new_state(b);
        if (state < 0 || vec_push(&b->pend_state, state) < 0 || vec_push(&b->todo, id) < 0) return -1;
    }
    return b->pend_state.data[id];
}

/* The edges of ``row`` (``count`` triples) within [lo, hi], shifted by ``-lo + by``,
 * appended to ``out`` (_clip, then _shift by ``by``). */
static int clip(const int64_t *row, Py_ssize_t count, int64_t lo, int64_t hi, int64_t by, I64Vec *out) {
    if (!count || row[3 * (count - 1) + 1] < lo || row[0] > hi) return 0;
    Py_ssize_t k = 0, top = count;
    while (k < top) { /* the first edge ending at or after lo */
        Py_ssize_t mid = k + (top - k) / 2;
        if (row[3 * mid + 1] < lo) k = mid + 1;
        else top = mid;
    }
    for (; k < count && row[3 * k] <= hi; k++) {
        const int64_t *e = row + 3 * k;
        if (vec_reserve(out, 3) < 0) return -1;
        out->data[out->size++] = (e[0] > lo ? e[0] : lo) - lo + by;
        out->data[out->size++] = (e[1] < hi ? e[1] : hi) - lo + by;
        out->data[out->size++] = e[2];
    }
    return 0;
}

/* Transitions of ``src`` on one digit worth ``weight`` offsets of ``residual`` (``nres``
 * triples: not ``b->sub``, ``b->part`` or ``b->key``); ``rest`` the slots after it. */
static int emit(Builder *b, int64_t src, const int64_t *residual, Py_ssize_t nres, int64_t weight, const int64_t *rest,
                Py_ssize_t nrest, int mode, int64_t param) {
    b->digits.size = 0;
    for (Py_ssize_t i = 0; i < nres; i++) {
        int64_t a = residual[3 * i], hi = residual[3 * i + 1], d = residual[3 * i + 2];
        int64_t first = (a + weight - 1) / weight, last = (hi + 1) / weight - 1;
        if (first <= last) {
            int64_t dst = d;
            if (nrest) {
                int64_t whole[3] = {0, weight - 1, d};
                dst = pend(b, rest, nrest, whole, 1);
                if (dst < 0) return -1;
            }
            if (to_bytes(b, mode, param, src, first, last, dst) < 0) return -1;
        }
        if (a % weight && vec_push(&b->digits, a / weight) < 0) return -1;
        if ((hi + 1) % weight && vec_push(&b->digits, hi / weight) < 0) return -1;
    }
    if (!b->digits.size) return 0;
    sort_i64(b->digits.data, b->digits.size);
    for (Py_ssize_t i = 0; i < b->digits.size; i++) {
        int64_t v = b->digits.data[i];
        if (i && v == b->digits.data[i - 1]) continue;
        b->part.size = 0;
        if (clip(residual, nres, v * weight, v * weight + weight - 1, 0, &b->part) < 0) return -1;
        int64_t dst = pend(b, rest, nrest, b->part.data, b->part.size / 3);
        if (dst < 0 || to_bytes(b, mode, param, src, v, v, dst) < 0) return -1;
    }
    return 0;
}

/* UTF-8 lead bytes that behave alike (byte_dfa._LEAD_GROUPS) and those whose
 * continuation range is restricted (_LEAD_SPECIAL, in its order). */
static const int64_t LEAD_GROUPS[4][5] = {
    {0x80, 0x7FF, 1 << 6, 1, 0xC2},
    {0x1000, 0xCFFF, 1 << 12, 2, 0xE1},
    {0xE000, 0xFFFF, 1 << 12, 2, 0xEE},
    {0x40000, 0xFFFFF, 1 << 18, 3, 0xF1},
};
static const int64_t LEAD_SPECIAL[4][5] = {
    {0xE0, 0x800, 0xFFF, 0x0, 2},
    {0xED, 0xD000, 0xD7FF, 0xD000, 2},
    {0xF0, 0x10000, 0x3FFFF, 0x0, 3},
    {0xF4, 0x100000, 0x10FFFF, 0x100000, 3},
};
static const int64_t CONTS[3] = {CONT, CONT, CONT};

static int raw_utf8(Builder *b, int64_t s, int json) {
    const int64_t *row = b->edge.data + 3 * b->row.data[s];
    Py_ssize_t count = (Py_ssize_t)(b->row.data[s + 1] - b->row.data[s]);
    for (Py_ssize_t k = 0; k < count; k++) {
        int64_t lo = row[3 * k], hi = row[3 * k + 1], d = row[3 * k + 2];
        if (lo > 0x7F) break;
        if (hi > 0x7F) hi = 0x7F;
        if (!json) {
            if (add(b, s, lo, hi, d) < 0) return -1;
            continue;
        }
        /* _minus(lo, hi, the bytes JSON must escape) */
        static const int64_t holes[3][2] = {{0x00, 0x1F}, {0x22, 0x22}, {0x5C, 0x5C}};
        int done = 0;
        for (int h = 0; h < 3 && !done; h++) {
            if (holes[h][1] < lo || holes[h][0] > hi) continue;
            if (holes[h][0] > lo && add(b, s, lo, holes[h][0] - 1, d) < 0) return -1;
            lo = holes[h][1] + 1;
            if (lo > hi) done = 1;
        }
        if (!done && lo <= hi && add(b, s, lo, hi, d) < 0) return -1;
    }
    if (!count || row[3 * (count - 1) + 1] <= 0x7F) return 0;
    for (int g = 0; g < 4; g++) {
        const int64_t *group = LEAD_GROUPS[g];
        b->sub.size = 0;
        if (clip(row, count, group[0], group[1], 0, &b->sub) < 0) return -1;
        if (b->sub.size &&
            emit(b, s, b->sub.data, b->sub.size / 3, group[2], CONTS, group[3], TB_LEAD, group[4]) < 0)
            return -1;
    }
    for (int g = 0; g < 4; g++) {
        const int64_t *special = LEAD_SPECIAL[g];
        b->sub.size = 0;
        if (clip(row, count, special[1], special[2], special[1] - special[3], &b->sub) < 0) return -1;
        if (b->sub.size) {
            int64_t dst = pend(b, CONTS, special[4], b->sub.data, b->sub.size / 3);
            if (dst < 0 || add(b, s, special[0], special[0], dst) < 0) return -1;
        }
    }
    return 0;
}

/* CharDFA.step: the target of ``cp`` from ``s``, or -1. */
static int64_t step(const Builder *b, int64_t s, int64_t cp) {
    const int64_t *row = b->edge.data + 3 * b->row.data[s];
    Py_ssize_t count = (Py_ssize_t)(b->row.data[s + 1] - b->row.data[s]);
    for (Py_ssize_t k = 0; k < count && row[3 * k] <= cp; k++)
        if (cp <= row[3 * k + 1]) return row[3 * k + 2];
    return -1;
}

/* JSON's short escapes: byte after the backslash, code point (byte_dfa._SHORT_ESCAPES). */
static const int64_t SHORT_ESCAPES[8][2] = {{0x22, 0x22}, {0x5C, 0x5C}, {0x2F, 0x2F}, {0x62, 0x08},
                                            {0x66, 0x0C}, {0x6E, 0x0A}, {0x72, 0x0D}, {0x74, 0x09}};
static const int64_t HEX3[3] = {HEX, HEX, HEX};
static const int64_t SURROGATE_TAIL[8] = {HEX, HEX, FIX_BS, FIX_U, FIX_D, LOWSUR, HEX, HEX};
static const int64_t CONTROL_TAIL[4] = {FIX_0, FIX_0, BIT, HEX};

static int escapes(Builder *b, int64_t s, int complete) {
    const int64_t *row = b->edge.data + 3 * b->row.data[s];
    Py_ssize_t count = (Py_ssize_t)(b->row.data[s + 1] - b->row.data[s]);
    int64_t esc = new_state(b);
    if (esc < 0 || add(b, s, 0x5C, 0x5C, esc) < 0) return -1;
    for (int k = 0; k < 8; k++) {
        int64_t d = step(b, s, SHORT_ESCAPES[k][1]);
        if (d >= 0 && (complete || SHORT_ESCAPES[k][0] != 0x2F) &&
            add(b, esc, SHORT_ESCAPES[k][0], SHORT_ESCAPES[k][0], d) < 0)
            return -1;
    }
    if (!complete) { /* control_escapes */
        b->sub.size = 0;
        if (clip(row, count, 0, 0x1F, 0, &b->sub) < 0) return -1;
        if (b->sub.size && emit(b, esc, b->sub.data, b->sub.size / 3, 0x20, CONTROL_TAIL, 4, TB_U, 0) < 0) return -1;
        return 0;
    }
    int64_t u = new_state(b);
    if (u < 0 || add(b, esc, 0x75, 0x75, u) < 0) return -1;
    int64_t ud = new_state(b);
    if (ud < 0 || add_slot(b, u, HEX, 0xD, 0xD, ud) < 0) return -1;
    b->sub.size = 0;
    if (clip(row, count, 0, 0xCFFF, 0, &b->sub) < 0 || clip(row, count, 0xE000, 0xFFFF, 0xE000, &b->sub) < 0)
        return -1;
    if (emit(b, u, b->sub.data, b->sub.size / 3, 1 << 12, HEX3, 3, TB_SLOT, HEX) < 0) return -1;
    b->sub.size = 0;
    if (clip(row, count, 0xD000, 0xD7FF, 0, &b->sub) < 0) return -1;
    if (emit(b, ud, b->sub.data, b->sub.size / 3, 1 << 8, HEX3, 2, TB_SLOT, HEX) < 0) return -1;
    b->sub.size = 0;
    if (clip(row, count, 0x10000, R6_MAX_CP, 0, &b->sub) < 0) return -1;
    return emit(b, ud, b->sub.data, b->sub.size / 3, 1 << 18, SURROGATE_TAIL, 8, TB_HIGHSUR, 0);
}

static int run_pending(Builder *b) {
    int64_t done = 0;
    int64_t slots[16];
    while (b->todo.size) {
        done++;
        if (!(done & 63) && tick(b->checkpoint) < 0) return -1;
        Py_ssize_t id = (Py_ssize_t)b->todo.data[--b->todo.size];
        int64_t state = b->pend_state.data[id];
        /* (The key copied out: pend may move the interned keys.) */
        const int64_t *k = intern_at(&b->pending, id);
        Py_ssize_t len = (Py_ssize_t)b->pending.len.data[id], nslots = (Py_ssize_t)k[0];
        if (nslots < 1 || nslots > 16 || 1 + nslots > len || (len - 1 - nslots) % 3) {
            PyErr_SetString(PyExc_ValueError, "a pending state without slots");
            return -1;
        }
        for (Py_ssize_t i = 0; i < nslots; i++) slots[i] = k[1 + i];
        b->sub.size = 0;
        if (vec_reserve(&b->sub, len - 1 - nslots) < 0) return -1;
        k = intern_at(&b->pending, id);
        memcpy(b->sub.data, k + 1 + nslots, (size_t)(len - 1 - nslots) * sizeof(int64_t));
        b->sub.size = len - 1 - nslots;
        int64_t weight = 1;
        for (Py_ssize_t i = 1; i < nslots; i++) weight *= RADIX[slots[i]];
        if (emit(b, state, b->sub.data, b->sub.size / 3, weight, slots + 1, nslots - 1, TB_SLOT, slots[0]) < 0)
            return -1;
    }
    return 0;
}

/* The states reachable from the seeds (``seen`` set for them) over the arcs
 * ``from -> to`` of ``ranges`` (``forward``: src -> dst, else dst -> src). */
static int reach(const Builder *b, int forward, uint8_t *seen) {
    int64_t n = b->count;
    Py_ssize_t arcs = b->ranges.size / 4;
    int64_t *off = alloc(n + 1, sizeof(int64_t)), *adj = alloc(arcs, sizeof(int64_t));
    I64Vec stack = {0};
    int rc = -1;
    if (!off || !adj) {
        PyErr_NoMemory();
        goto done;
    }
    const int32_t *r = b->ranges.data;
    int from = forward ? 0 : 3, to = forward ? 3 : 0;
    for (Py_ssize_t i = 0; i < arcs; i++) off[r[4 * i + from] + 1]++;
    for (int64_t s = 0; s < n; s++) off[s + 1] += off[s];
    for (Py_ssize_t i = 0; i < arcs; i++) adj[off[r[4 * i + from]]++] = r[4 * i + to];
    for (int64_t s = n; s > 0; s--) off[s] = off[s - 1];
    off[0] = 0;
    for (int64_t s = 0; s < n; s++)
        if (seen[s] && vec_push(&stack, s) < 0) goto done;
    while (stack.size) {
        int64_t s = stack.data[--stack.size];
        for (int64_t k = off[s]; k < off[s + 1]; k++) {
            int64_t t = adj[k];
            if (!seen[t]) {
                seen[t] = 1;
                if (vec_push(&stack, t) < 0) goto done;
            }
        }
    }
    rc = 0;
done:
    PyMem_Free(off);
    PyMem_Free(adj);
    vec_free(&stack);
    return rc;
}

/* The trimmed automaton as (start, accepting bytes, int32 table bytes). */
static PyObject *finish(Builder *b) {
    int64_t n = b->count;
    Py_ssize_t arcs = b->ranges.size / 4;
    const int32_t *r = b->ranges.data;
    for (Py_ssize_t i = 0; i < arcs; i++) {
        const int32_t *e = r + 4 * i;
        if (e[0] < 0 || e[0] >= n || e[3] < 0 || e[3] >= n || e[1] < 0 || e[1] > e[2] || e[2] > 255) {
            PyErr_SetString(PyExc_ValueError, "a byte range out of the table");
            return NULL;
        }
    }
    uint8_t *fwd = alloc(n, 1), *bwd = alloc(n, 1);
    int64_t *new_id = alloc(n, sizeof(int64_t));
    PyObject *acc = NULL, *trans = NULL, *out = NULL;
    if (!fwd || !bwd || !new_id) {
        PyErr_NoMemory();
        goto done;
    }
    fwd[b->start] = 1;
    for (Py_ssize_t s = 0; s < b->n; s++) bwd[s] = b->acc[s];
    if (reach(b, 1, fwd) < 0 || reach(b, 0, bwd) < 0) goto done;
    Py_ssize_t kept = 0;
    for (int64_t s = 0; s < n; s++) new_id[s] = fwd[s] && bwd[s] ? kept++ : -1;
    if (new_id[b->start] < 0) { /* the empty language: one dead state */
        acc = PyBytes_FromStringAndSize("\0", 1);
        trans = PyBytes_FromStringAndSize(NULL, 256 * sizeof(int32_t));
        if (!acc || !trans) goto done;
        memset(PyBytes_AS_STRING(trans), 0xFF, 256 * sizeof(int32_t));
        out = Py_BuildValue("(iOO)", 0, acc, trans);
        goto done;
    }
    if (kept > PY_SSIZE_T_MAX / 1024) {
        PyErr_NoMemory();
        goto done;
    }
    acc = PyBytes_FromStringAndSize(NULL, kept);
    trans = PyBytes_FromStringAndSize(NULL, kept * 256 * (Py_ssize_t)sizeof(int32_t));
    if (!acc || !trans) goto done;
    char *flags = PyBytes_AS_STRING(acc);
    for (int64_t s = 0; s < n; s++)
        if (new_id[s] >= 0) flags[new_id[s]] = (char)(s < b->n && b->acc[s]);
    int32_t *table = (int32_t *)PyBytes_AS_STRING(trans);
    memset(table, 0xFF, (size_t)kept * 256 * sizeof(int32_t));
    for (Py_ssize_t i = 0; i < arcs; i++) {
        const int32_t *e = r + 4 * i;
        int64_t src = new_id[e[0]], dst = new_id[e[3]];
        if (src < 0 || dst < 0) continue;
        int32_t *line = table + src * 256;
        for (int32_t byte = e[1]; byte <= e[2]; byte++) line[byte] = (int32_t)dst;
    }
    out = Py_BuildValue("(LOO)", (long long)new_id[b->start], acc, trans);
done:
    Py_XDECREF(acc);
    Py_XDECREF(trans);
    PyMem_Free(fwd);
    PyMem_Free(bwd);
    PyMem_Free(new_id);
    return out;
}

static int store_edge(void *ctx, int64_t lo, int64_t hi, int64_t dst) {
    I64Vec *edge = (I64Vec *)ctx;
    if (vec_reserve(edge, 3) < 0) return -1;
    edge->data[edge->size++] = lo;
    edge->data[edge->size++] = hi;
    edge->data[edge->size++] = dst;
    return 0;
}

/* The rows of ``edges`` into ``b`` (sorted, disjoint, within 0..0x10FFFF, targets in
 * range); -1 with an exception. */
static int read_dfa(Builder *b, PyObject *edges) {
    return jm_regex_read_rows(edges, 0, R6_MAX_CP, &b->n, &b->row, store_edge, &b->edge);
}

PyObject *r6dfa_byte_dfa(PyObject *module, PyObject *args) {
    PyObject *start_obj, *accepting, *edges, *checkpoint;
    int json, complete;
    if (!PyArg_ParseTuple(args, "OOOppO", &start_obj, &accepting, &edges, &json, &complete, &checkpoint)) return NULL;
    if (!PyCallable_Check(checkpoint)) {
        PyErr_SetString(PyExc_TypeError, "checkpoint must be callable");
        return NULL;
    }
    Builder b;
    memset(&b, 0, sizeof(b));
    b.checkpoint = checkpoint;
    PyObject *out = NULL, *flags = NULL;
    int bad = 0;
    int64_t start = read_int(start_obj, &bad);
    if (bad || read_dfa(&b, edges) < 0) goto done;
    if (start < 0 || start >= b.n) {
        PyErr_SetString(PyExc_ValueError, "start out of range");
        goto done;
    }
    b.start = start;
    /* (Read last: an item's __bool__ may run any code, and the rows are ours now.) */
    flags = own_tuple(accepting, b.n, "accepting");
    if (!flags) goto done;
    b.acc = alloc(b.n, 1);
    if (!b.acc) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t s = 0; s < b.n; s++) {
        int truth = PyObject_IsTrue(PyTuple_GET_ITEM(flags, s));
        if (truth < 0) goto done;
        b.acc[s] = (uint8_t)truth;
    }
    b.count = b.n;
    for (int64_t s = 0; s < b.n; s++) {
        if (!(s & 63) && tick(checkpoint) < 0) goto done;
        if (raw_utf8(&b, s, json) < 0 || (json && escapes(&b, s, complete) < 0)) goto done;
    }
    if (run_pending(&b) < 0) goto done;
    out = finish(&b);
done:
    Py_XDECREF(flags);
    builder_free(&b);
    return out;
}
