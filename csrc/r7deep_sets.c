/* r7deep_sets: the token trie walked by sets of parse stacks (the compiled miss's
 * unbudgeted walks: a big boundary group finished in the trie, a whole stack near the
 * nesting bound).
 *
 * The reference is jsonmode.decoding.engine.trie.TokenTrie.walk_stacks (and the C
 * assembler's walk_stacks), which steps every (trie node, stack) pair on its own. After
 * white space in a C-like grammar (``expression ::= term ...``, ``factor ::= identifier |
 * funcCall | ...``), every node of the " word" subtree (~93 000 nodes in Qwen2.5) holds
 * the same five stacks: each byte costs five row lookups and five closures. Here the
 * stacks alive at a node are one *set* (its pairs sorted, distinct, numbered once per
 * walk), and the set a set goes on as after a byte is worked out the first time it is
 * met and looked up after (a subset construction done lazily, only over the sets and
 * bytes the walk meets): one lookup per trie node.
 *
 * Same tokens as the reference: a token is read when some stack is alive at its last
 * node (a pair of context -1, the end of the document, counts, and reads no further);
 * the stacks after a byte are each stack's step (its closure where it lands in a
 * crossing state), as a set. Positions are listed once each (the reference may list one
 * twice); the order differs; so may the order in which the Stacks' closures are first
 * asked for (contexts are numbered in another order: the masks are the same).
 *
 * Memory: at most SETS_KEPT sets and PAIRS_KEPT pairs in all per walk (1 KiB of
 * transitions a set); past either the walk gives up (0: ``found`` as it was), and the
 * caller walks stack by stack. Work lists on the heap; every node, byte and level
 * checked against the trie's arrays. Holds the GIL (closures may call back into Python;
 * no pointer into the Stacks' own arrays is held across them).
 */
#include "native.h"

#define SETS_KEPT 4096
#define PAIRS_KEPT (1 << 20)
#define UNKNOWN (-2)

typedef struct {
    I64Vec pairs;      /* the sets' pairs back to back: context, state, ... */
    I64Vec start;      /* set k's pairs: start[k] .. start[k + 1] (in int64 units) */
    int32_t *next;     /* next[k * 256 + b]: the set after byte b (-1: none, UNKNOWN) */
    uint8_t *live;     /* live[k]: some pair of set k reads on (context >= 0) */
    Py_ssize_t cap;    /* sets room in next and live */
    int32_t *slots;    /* open addressing over set numbers by content (-1: free) */
    Py_ssize_t nslots; /* a power of two */
    Py_ssize_t count;  /* sets */
} Sets;

static void sets_free(Sets *s) {
    vec_free(&s->pairs);
    vec_free(&s->start);
    PyMem_Free(s->next);
    PyMem_Free(s->live);
    PyMem_Free(s->slots);
    memset(s, 0, sizeof(*s));
}

static uint64_t hash_pairs(const int64_t *p, Py_ssize_t n) {
    uint64_t h = mix((uint64_t)n + 0x9e3779b97f4a7c15ULL);
    for (Py_ssize_t i = 0; i < n; i++) h = mix(h ^ ((uint64_t)p[i] + 0x632be59bd9b4e019ULL * (uint64_t)(i + 1)));
    return h;
}

/* Room for one more set in the slots (load at most one half). */
static int sets_rehash(Sets *s) {
    if (2 * (s->count + 1) <= s->nslots) return 0;
    Py_ssize_t n = s->nslots ? 2 * s->nslots : 64;
    int32_t *slots = PyMem_Malloc((size_t)n * sizeof(int32_t));
    if (!slots) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) slots[i] = -1;
    for (Py_ssize_t k = 0; k < s->count; k++) {
        const int64_t *p = s->pairs.data + s->start.data[k];
        Py_ssize_t len = s->start.data[k + 1] - s->start.data[k];
        Py_ssize_t at = (Py_ssize_t)(hash_pairs(p, len) & (uint64_t)(n - 1));
        while (slots[at] >= 0) at = (at + 1) & (n - 1);
        slots[at] = (int32_t)k;
    }
    PyMem_Free(s->slots);
    s->slots = slots;
    s->nslots = n;
    return 0;
}

static int cmp_pair(const void *a, const void *b) {
    const int64_t *x = a, *y = b;
    if (x[0] != y[0]) return x[0] < y[0] ? -1 : 1;
    return x[1] < y[1] ? -1 : x[1] > y[1];
}

/* The number of the set of the ``n`` int64 at ``p`` (pairs, any order, repeats; sorted
 * and made distinct here): -1 for an empty set, -2 with an exception, -3 past the
 * memory bound (no exception). */
static int64_t sets_intern(Sets *s, int64_t *p, Py_ssize_t n) {
    if (n == 0) return -1;
    Py_ssize_t count = n / 2, kept = 0;
    qsort(p, (size_t)count, 2 * sizeof(int64_t), cmp_pair);
    for (Py_ssize_t i = 0; i < count; i++) {
        if (kept && p[2 * kept - 2] == p[2 * i] && p[2 * kept - 1] == p[2 * i + 1]) continue;
        p[2 * kept] = p[2 * i];
        p[2 * kept + 1] = p[2 * i + 1];
        kept++;
    }
    n = 2 * kept;
    if (s->start.size == 0 && vec_push(&s->start, 0) < 0) return -2;
    if (sets_rehash(s) < 0) return -2;
    uint64_t mask = (uint64_t)(s->nslots - 1);
    Py_ssize_t at = (Py_ssize_t)(hash_pairs(p, n) & mask);
    for (; s->slots[at] >= 0; at = (Py_ssize_t)(((uint64_t)at + 1) & mask)) {
        int32_t k = s->slots[at];
        Py_ssize_t len = s->start.data[k + 1] - s->start.data[k];
        if (len == n && !memcmp(s->pairs.data + s->start.data[k], p, (size_t)n * sizeof(int64_t))) return k;
    }
    if (s->count >= SETS_KEPT || s->pairs.size + n > 2 * (Py_ssize_t)PAIRS_KEPT) return -3;
    if (s->count == s->cap) {
        Py_ssize_t cap = s->cap ? 2 * s->cap : 16;
        int32_t *next = PyMem_Realloc(s->next, (size_t)cap * 256 * sizeof(int32_t));
        if (!next) {
            PyErr_NoMemory();
            return -2;
        }
        s->next = next;
        uint8_t *live = PyMem_Realloc(s->live, (size_t)cap);
        if (!live) {
            PyErr_NoMemory();
            return -2;
        }
        s->live = live;
        s->cap = cap;
    }
    if (vec_reserve(&s->pairs, n) < 0 || vec_reserve(&s->start, 1) < 0) return -2;
    memcpy(s->pairs.data + s->pairs.size, p, (size_t)n * sizeof(int64_t));
    s->pairs.size += n;
    s->start.data[s->start.size++] = s->pairs.size;
    Py_ssize_t k = s->count++;
    for (int b = 0; b < 256; b++) s->next[k * 256 + b] = UNKNOWN;
    uint8_t live = 0;
    for (Py_ssize_t i = 0; i < n; i += 2) live |= p[i] >= 0;
    s->live[k] = live;
    s->slots[at] = (int32_t)k;
    return k;
}

/* The set after set ``k`` reads ``byte`` (as sets_intern answers), memoised. */
static int64_t sets_step(Sets *s, PyObject *core, Tables *t, I64Vec *work, int64_t k, int byte) {
    work->size = 0;
    for (Py_ssize_t i = s->start.data[k]; i < s->start.data[k + 1]; i += 2) {
        int64_t context = s->pairs.data[i], state = s->pairs.data[i + 1];
        if (context < 0) continue;
        const int32_t *row = row_of(t, context, state);
        if (!row) return -2;
        int64_t target = row[byte];
        if (target < 0) continue;
        int crossing = crossing_of(t, context, target);
        if (crossing < 0) return -2;
        if (crossing) {
            if (jm_stacks_push(core, context, target, work, 0, 0) < 0) return -2;
        } else {
            if (vec_reserve(work, 2) < 0) return -2;
            work->data[work->size++] = context;
            work->data[work->size++] = target;
        }
    }
    int64_t next = sets_intern(s, work->data, work->size);
    if (next >= -1) s->next[k * 256 + byte] = (int32_t)next;
    return next;
}

static int cmp_triple(const void *a, const void *b) {
    const int64_t *x = a, *y = b;
    for (int i = 0; i < 3; i++)
        if (x[i] != y[i]) return x[i] < y[i] ? -1 : 1;
    return 0;
}

/* A node's tokens (``term`` of them from ``lo``, checked against the ``ntokens`` the
 * trie holds) into ``found``: 0, -1 with an error. Both walks below take them so. */
static inline int take_tokens(I64Vec *found, int64_t lo, int64_t term, int64_t ntokens) {
    if (term < 0 || lo < 0 || term > ntokens || lo > ntokens - term) {
        PyErr_SetString(PyExc_ValueError, "a trie node's tokens out of range");
        return -1;
    }
    if (term == 0) return 0; /* (most nodes: a prefix, no token of its own) */
    if (found->size + term > found->cap && vec_reserve(found, term) < 0) return -1;
    for (int64_t p = lo; p < lo + term; p++) found->data[found->size++] = p;
    return 0;
}

/* The walk below each seed node (``frontier``: node, set, ... of level ``depth``) in
 * the trie's preorder layout (r4gram_wide.c: a node's subtree follows it, ``skip``
 * nodes long), the set of each depth on a small stack: the nodes are read as one
 * sequential stream, where the levels' six arrays a node cost ~4x more (after white
 * space in a C-like grammar, ~90 000 nodes a walk). The same nodes as the level walk,
 * in another order. 1 walked, 0 past the memory bound, -1 on error. */
static int walk_preorder(PyObject *core, Tables *t, Sets *s, I64Vec *work, const struct r4gram_pre *pre,
                         int64_t ntokens, const I64Vec *frontier, Py_ssize_t depth, I64Vec *found) {
    Py_ssize_t count;
    const R4PreNode *nodes = r4gram_pre_nodes(pre, &count);
    int64_t stack[257];
    for (Py_ssize_t f = 0; f < frontier->size; f += 2) {
        int64_t node = frontier->data[f], k = frontier->data[f + 1];
        Py_ssize_t i = r4gram_pre_index(pre, depth, node);
        if (i < 0 || i >= count || nodes[i].depth != depth) {
            PyErr_Format(PyExc_ValueError, "node %lld out of range", (long long)node);
            return -1;
        }
        Py_ssize_t end = i + nodes[i].skip;
        if (nodes[i].skip < 1 || end > count) {
            PyErr_SetString(PyExc_ValueError, "a trie node's subtree out of range");
            return -1;
        }
        if (take_tokens(found, nodes[i].lo, nodes[i].term, ntokens) < 0) return -1;
        if (!s->live[k]) continue;
        stack[depth] = k;
        for (i++; i < end;) {
            const R4PreNode *p = &nodes[i];
            int d = p->depth; /* (deeper than the seed's: inside its subtree) */
            if (d <= depth || p->skip < 1) {
                PyErr_SetString(PyExc_ValueError, "a trie node's subtree out of range");
                return -1;
            }
            int64_t above = stack[d - 1];
            int64_t next = s->next[above * 256 + p->byte];
            if (next == UNKNOWN) {
                next = sets_step(s, core, t, work, above, p->byte);
                if (next == -3) return 0;
                if (next < -1) return -1;
            }
            if (next < 0) {
                i += p->skip;
                continue;
            }
            if (take_tokens(found, p->lo, p->term, ntokens) < 0) return -1;
            if (!s->live[next]) {
                i += p->skip;
                continue;
            }
            stack[d] = next;
            i++;
        }
    }
    return 1;
}

int jm_r7_walk_sets(PyObject *core, Tables *t, const Py_buffer *views, Py_ssize_t levels,
                    const struct r4gram_pre *pre, int64_t ntokens, I64Vec *seeds, Py_ssize_t depth,
                    I64Vec *found) {
    if (depth < 1) {
        PyErr_SetString(PyExc_ValueError, "a walk starts at level 1 or below");
        return -1;
    }
    if (seeds->size % 3) {
        PyErr_SetString(PyExc_ValueError, "seeds are (node, context, state) triples");
        return -1;
    }
    Sets s = {0};
    I64Vec frontier = {0}, following = {0}, work = {0};
    Py_ssize_t had = found->size;
    int rc = -1;
    /* (The seeds by node: each node's stacks one set.) */
    qsort(seeds->data, (size_t)(seeds->size / 3), 3 * sizeof(int64_t), cmp_triple);
    for (Py_ssize_t i = 0, j; i < seeds->size; i = j) {
        work.size = 0;
        for (j = i; j < seeds->size && seeds->data[j] == seeds->data[i]; j += 3) {
            if (vec_reserve(&work, 2) < 0) goto done;
            work.data[work.size++] = seeds->data[j + 1];
            work.data[work.size++] = seeds->data[j + 2];
        }
        int64_t k = sets_intern(&s, work.data, work.size);
        if (k == -3) {
            rc = 0;
            goto done;
        }
        if (k < -1) goto done;
        if (k >= 0 && (vec_push(&frontier, seeds->data[i]) < 0 || vec_push(&frontier, k) < 0)) goto done;
    }
    if (pre) {
        rc = walk_preorder(core, t, &s, &work, pre, ntokens, &frontier, depth, found);
        goto done;
    }
    while (frontier.size) {
        if (depth - 1 >= levels) {
            PyErr_SetString(PyExc_ValueError, "the walk went below the trie");
            goto done;
        }
        JmLevel level = jm_level(views, levels, depth);
        Py_ssize_t nodes = level.nodes, nbelow = level.nbelow;
        const int64_t *lo_of = level.lo, *term_of = level.term, *child_lo = level.child_lo;
        const int64_t *child_hi = level.child_hi, *below = level.below;
        following.size = 0;
        for (Py_ssize_t i = 0; i < frontier.size; i += 2) {
            int64_t node = frontier.data[i], k = frontier.data[i + 1];
            if (node < 0 || node >= nodes) {
                PyErr_Format(PyExc_ValueError, "node %lld out of range", (long long)node);
                goto done;
            }
            /* (Nodes are distinct within a level: the seeds' are, and a trie's children.) */
            if (take_tokens(found, lo_of[node], term_of[node], ntokens) < 0) goto done;
            if (below == NULL || !s.live[k]) continue;
            int64_t first = child_lo[node], end = child_hi[node];
            if (first == end) continue;
            if (first < 0 || end < first || end > nbelow) {
                PyErr_SetString(PyExc_ValueError, "a trie level points outside the next one");
                goto done;
            }
            if (vec_reserve(&following, 2 * (end - first)) < 0) goto done;
            for (int64_t child = first; child < end; child++) {
                int64_t byte = below[child];
                if (byte < 0 || byte > 255) {
                    PyErr_SetString(PyExc_ValueError, "a trie byte out of range");
                    goto done;
                }
                int64_t next = s.next[k * 256 + byte];
                if (next == UNKNOWN) {
                    next = sets_step(&s, core, t, &work, k, (int)byte);
                    if (next == -3) {
                        rc = 0;
                        goto done;
                    }
                    if (next < -1) goto done;
                }
                if (next >= 0) {
                    following.data[following.size++] = child;
                    following.data[following.size++] = next;
                }
            }
        }
        I64Vec swap = frontier;
        frontier = following;
        following = swap;
        depth++;
    }
    rc = 1;
done:
    if (rc != 1) found->size = had;
    sets_free(&s);
    vec_free(&frontier);
    vec_free(&following);
    vec_free(&work);
    return rc;
}
