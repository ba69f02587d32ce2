/* r6narrow (round 6): a narrow state's trie walk cut into its per-first-byte segments,
 * in one call: jsonmode.decoding.engine.segments._trie_walk (TokenTrie.walk from the
 * first bytes' nodes, not wide) followed by segments._split, which stay the reference
 * (tests/test_native_r6narrow.py holds the two to the same bytes).
 *
 * r6narrow_walk_cut(trie, table, dead, crossing, first_nodes, offsets, firsts, targets, small, cut,
 *                   follow=None) -> (inside, bounds, segments)
 *
 * The walk starts at the depth-1 nodes ``first_nodes[b]`` of the first bytes ``firsts``
 * (a list of ints), each in the state ``targets[i]`` (skipped where it is ``dead``);
 * ``offsets`` (int64, 257 items) says where each first byte's tokens end (``offsets[b +
 * 1]``).
 * ``inside``: the positions of the tokens read to their end, ascending, as int32 bytes;
 * ``bounds``: the boundary entries (lo, hi, col, node) as int64 rows, sorted by lo,
 * stably over the order Trie.walk gives them (TokenTrie._compiled_walk's argsort);
 * ``segments``: None unless ``cut``, else per first byte (ascending) the (inside,
 * bounds) bytes of its tokens: cut where ``np.searchsorted`` cuts them, the one end's segment being the whole
 * walk (as _split). Errors: TypeError for wrong types, ValueError for a node, state or
 * position outside the trie or the table (checked as Trie.walk checks them), MemoryError.
 * ``follow`` (None or 256 flags) keeps the entries of nodes with a child on a flagged byte
 * only, as Trie.walk's. The walk and the sorts run without the GIL. */
#include "native.h"

#define RADIX_BITS 11
#define RADIX (1 << RADIX_BITS)
#define SMALL_SORT 64

/* The order of the ``n`` rows of ``stride`` int64 at ``rows`` by their first item (each
 * in 0 .. INT32_MAX: checked by the caller), stable (ties keep their order): an LSD radix
 * sort, RADIX_BITS a pass, as many passes as the largest key needs (at most SMALL_SORT
 * rows: an insertion sort, no histogram to clear). ``a`` and ``b`` hold
 * ``n`` items each; the answer is in the one returned. (glibc's qsort, a merge sort of
 * 40-byte items through a comparison function, took most of the ~8 ms walk of an
 * identifier's 66 000 boundary entries.) */
static const uint32_t *radix_order(const int64_t *rows, Py_ssize_t stride, Py_ssize_t n, uint32_t *a, uint32_t *b) {
    int64_t top = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        a[i] = (uint32_t)i;
        if (rows[i * stride] > top) top = rows[i * stride];
    }
    if (n <= SMALL_SORT) { /* (a narrow walk's few rows: an insertion sort, stable too) */
        for (Py_ssize_t i = 1; i < n; i++) {
            uint32_t at = a[i];
            int64_t key = rows[(Py_ssize_t)at * stride];
            Py_ssize_t j = i;
            for (; j > 0 && rows[(Py_ssize_t)a[j - 1] * stride] > key; j--) a[j] = a[j - 1];
            a[j] = at;
        }
        return a;
    }
    Py_ssize_t count[RADIX];
    for (int shift = 0; shift < 32 && (shift == 0 || (top >> shift) > 0); shift += RADIX_BITS) {
        memset(count, 0, sizeof(count));
        for (Py_ssize_t i = 0; i < n; i++) count[(rows[i * stride] >> shift) & (RADIX - 1)]++;
        Py_ssize_t sum = 0;
        for (int d = 0; d < RADIX; d++) {
            Py_ssize_t c = count[d];
            count[d] = sum;
            sum += c;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            uint32_t at = a[i];
            b[count[(rows[(Py_ssize_t)at * stride] >> shift) & (RADIX - 1)]++] = at;
        }
        uint32_t *swap = a;
        a = b;
        b = swap;
    }
    return a;
}

/* The first index in sorted ``a[0..n)`` whose value is >= ``v`` (searchsorted, left). */
static Py_ssize_t lower32(const int32_t *a, Py_ssize_t n, int64_t v) {
    Py_ssize_t lo = 0, hi = n;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if ((int64_t)a[mid] < v)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static Py_ssize_t lower_entry(const int64_t *rows, Py_ssize_t n, int64_t v) {
    Py_ssize_t lo = 0, hi = n;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (rows[4 * mid] < v)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The segment of inside[lo:hi] and rows[blo:bhi] (empty where hi < lo, as a slice). */
static PyObject *segment(const int32_t *inside, Py_ssize_t lo, Py_ssize_t hi, const int64_t *rows, Py_ssize_t blo,
                         Py_ssize_t bhi) {
    Py_ssize_t n = hi > lo ? hi - lo : 0, m = bhi > blo ? bhi - blo : 0;
    PyObject *a = PyBytes_FromStringAndSize(n ? (const char *)(inside + lo) : NULL, n * 4);
    if (!a) return NULL;
    PyObject *b = PyBytes_FromStringAndSize(m ? (const char *)(rows + 4 * blo) : NULL, m * 32);
    if (!b) {
        Py_DECREF(a);
        return NULL;
    }
    PyObject *pair = PyTuple_Pack(2, a, b);
    Py_DECREF(a);
    Py_DECREF(b);
    return pair;
}

enum { CUT_OK = 0, CUT_NOMEM = -1, CUT_BAD_STATE = -2, CUT_BAD_NODE = -3 };

/* The int64 items of a 1-D int64 buffer ``obj`` (at least ``least`` of them); NULL with
 * TypeError/ValueError set otherwise (the view then released). */
static const int64_t *int64s(PyObject *obj, Py_buffer *view, Py_ssize_t least, const char *what) {
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return NULL;
    if (view->itemsize != 8 || view->ndim > 1 || !jm_is_int64(view->format) || view->len / 8 < least) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_TypeError, "%s must be 1-D int64 with at least %zd items", what, least);
        return NULL;
    }
    return view->buf;
}

PyObject *r6narrow_walk_cut(PyObject *module, PyObject *args) {
    (void)module;
    PyObject *trie, *table_obj, *crossing_obj, *first_obj, *offsets_obj, *firsts_obj, *targets_obj;
    PyObject *follow_obj = NULL;
    long long dead;
    Py_ssize_t small;
    int cut;
    if (!PyArg_ParseTuple(args, "OOLOOOOOnp|O", &trie, &table_obj, &dead, &crossing_obj, &first_obj, &offsets_obj,
                          &firsts_obj, &targets_obj, &small, &cut, &follow_obj))
        return NULL;
    Py_ssize_t levels;
    if (!jm_trie_levels(trie, &levels)) return NULL;
    if (!PyList_Check(firsts_obj) || !PyList_Check(targets_obj) ||
        PyList_GET_SIZE(firsts_obj) != PyList_GET_SIZE(targets_obj)) {
        PyErr_SetString(PyExc_TypeError, "walk_cut's firsts and targets must be lists of one length");
        return NULL;
    }
    Py_buffer table, crossing, first_view, offsets_view, follow_view;
    const uint8_t *follow;
    int got_follow = jm_follow_flags(follow_obj, &follow_view, &follow);
    if (got_follow < 0) return NULL;
    int got = 0;
    PyObject *result = NULL, *in_bytes = NULL, *b_bytes = NULL, *segs = NULL;
    I64Vec frontier = {0}, ranges = {0}, big = {0}, smallb = {0}, ends = {0};
    int32_t *positions = NULL;
    uint32_t *order = NULL;
    int64_t *rows = NULL;
    if (PyObject_GetBuffer(table_obj, &table, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) goto done;
    got = 1;
    if (PyObject_GetBuffer(crossing_obj, &crossing, PyBUF_C_CONTIGUOUS) < 0) goto done;
    got = 2;
    const int64_t *first_nodes = int64s(first_obj, &first_view, 256, "first_nodes");
    if (!first_nodes) goto done;
    got = 3;
    const int64_t *offsets = int64s(offsets_obj, &offsets_view, 257, "offsets");
    if (!offsets) goto done;
    got = 4;
    if ((table.itemsize != 4 && table.itemsize != 8) || crossing.itemsize != 1 ||
        !(table.itemsize == 8 ? jm_is_int64(table.format) : jm_is_int32(table.format))) {
        PyErr_SetString(PyExc_TypeError, "walk_cut takes an int32/int64 table and bool crossing flags");
        goto done;
    }
    Py_ssize_t count = PyList_GET_SIZE(firsts_obj);
    if (vec_reserve(&frontier, 2 * count) < 0 || vec_reserve(&ends, count) < 0) goto done;
    for (Py_ssize_t i = 0; i < count; i++) {
        /* (the lists are read here, once, the GIL held: nothing can change them midway) */
        int64_t byte = as_i64(PyList_GET_ITEM(firsts_obj, i));
        if (byte == -1 && PyErr_Occurred()) goto done;
        int64_t state = as_i64(PyList_GET_ITEM(targets_obj, i));
        if (state == -1 && PyErr_Occurred()) goto done;
        if (byte < 0 || byte > 255) {
            PyErr_SetString(PyExc_ValueError, "a first byte out of range");
            goto done;
        }
        ends.data[ends.size++] = offsets[byte + 1];
        if (state == dead) continue;
        frontier.data[frontier.size++] = first_nodes[byte];
        frontier.data[frontier.size++] = state;
    }
    int code = CUT_OK;
    Py_ssize_t npos = 0, nent = 0;
    Py_BEGIN_ALLOW_THREADS
    code = jm_trie_walk_ranges(trie, table.buf, table.itemsize == 8, table.len / table.itemsize, crossing.buf,
                               crossing.len, dead, small, follow, &frontier, 1, &ranges, &big, &smallb);
    /* (Trie.walk's entry order: the big levels' entries, then the small ones'.) */
    if (code == CUT_OK && vec_grow(&big, smallb.size) < 0) code = CUT_NOMEM;
    if (code == CUT_OK && smallb.size) {
        memcpy(big.data + big.size, smallb.data, (size_t)smallb.size * sizeof(int64_t));
        big.size += smallb.size;
    }
    Py_ssize_t nspans = ranges.size / 2;
    nent = big.size / 4;
    for (Py_ssize_t i = 0; code == CUT_OK && i < nspans; i++) {
        int64_t lo = ranges.data[2 * i], hi = ranges.data[2 * i + 1];
        if (lo < 0 || hi < lo || hi > INT32_MAX || (int64_t)npos + (hi - lo) > PY_SSIZE_T_MAX / 8)
            code = CUT_BAD_NODE;
        else
            npos += (Py_ssize_t)(hi - lo);
    }
    for (Py_ssize_t i = 0; code == CUT_OK && i < nent; i++) /* (the sort's keys: positions) */
        if (big.data[4 * i] < 0 || big.data[4 * i] > INT32_MAX) code = CUT_BAD_NODE;
    Py_ssize_t most = nspans > nent ? nspans : nent;
    if (code == CUT_OK && most > UINT32_MAX) code = CUT_NOMEM;
    if (code == CUT_OK && most) {
        order = PyMem_RawMalloc((size_t)most * 2 * sizeof(uint32_t));
        if (!order) code = CUT_NOMEM;
    }
    if (code == CUT_OK && npos) {
        positions = PyMem_RawMalloc((size_t)npos * sizeof(int32_t));
        if (!positions) code = CUT_NOMEM;
    }
    if (code == CUT_OK && nspans) {
        const uint32_t *by_lo = radix_order(ranges.data, 2, nspans, order, order + most);
        Py_ssize_t k = 0;
        for (Py_ssize_t i = 0; i < nspans; i++) {
            const int64_t *span = ranges.data + 2 * (Py_ssize_t)by_lo[i];
            for (int64_t p = span[0]; p < span[1]; p++) positions[k++] = (int32_t)p;
        }
    }
    if (code == CUT_OK && nent) {
        rows = PyMem_RawMalloc((size_t)nent * 4 * sizeof(int64_t));
        if (!rows) code = CUT_NOMEM;
    }
    if (code == CUT_OK && nent) { /* (by lo, stably: ties in Trie.walk's order) */
        const uint32_t *by_lo = radix_order(big.data, 4, nent, order, order + most);
        for (Py_ssize_t i = 0; i < nent; i++) memcpy(rows + 4 * i, big.data + 4 * (Py_ssize_t)by_lo[i], 4 * sizeof(int64_t));
    }
    Py_END_ALLOW_THREADS
    if (code == CUT_NOMEM) {
        PyErr_NoMemory();
        goto done;
    }
    if (code == CUT_BAD_STATE) {
        PyErr_SetString(PyExc_ValueError, "a state outside the table or the crossing flags");
        goto done;
    }
    if (code != CUT_OK) {
        PyErr_SetString(PyExc_ValueError, "a node, byte or position outside the trie");
        goto done;
    }
    in_bytes = PyBytes_FromStringAndSize(npos ? (const char *)positions : NULL, npos * 4);
    if (!in_bytes) goto done;
    b_bytes = PyBytes_FromStringAndSize(nent ? (const char *)rows : NULL, nent * 32);
    if (!b_bytes) goto done;
    if (!cut) {
        segs = Py_None;
        Py_INCREF(segs);
    } else {
        Py_ssize_t nends = ends.size;
        const int64_t *end = ends.data;
        segs = PyTuple_New(nends);
        if (!segs) goto done;
        if (nends == 1) { /* (_split: one first byte's segment is the whole walk) */
            PyObject *pair = PyTuple_Pack(2, in_bytes, b_bytes);
            if (!pair) goto done;
            PyTuple_SET_ITEM(segs, 0, pair);
        } else {
            Py_ssize_t lo = 0, blo = 0;
            for (Py_ssize_t k = 0; k < nends; k++) {
                Py_ssize_t hi = lower32(positions, npos, end[k]);
                Py_ssize_t bhi = lower_entry(rows, nent, end[k]);
                PyObject *pair = segment(positions, lo, hi, rows, blo, bhi);
                if (!pair) goto done;
                PyTuple_SET_ITEM(segs, k, pair);
                lo = hi;
                blo = bhi;
            }
        }
    }
    result = PyTuple_Pack(3, in_bytes, b_bytes, segs);
done:
    Py_XDECREF(in_bytes);
    Py_XDECREF(b_bytes);
    Py_XDECREF(segs);
    if (got_follow) PyBuffer_Release(&follow_view);
    if (got >= 4) PyBuffer_Release(&offsets_view);
    if (got >= 3) PyBuffer_Release(&first_view);
    if (got >= 2) PyBuffer_Release(&crossing);
    if (got >= 1) PyBuffer_Release(&table);
    vec_free(&frontier);
    vec_free(&ranges);
    vec_free(&big);
    vec_free(&smallb);
    vec_free(&ends);
    PyMem_RawFree(positions);
    PyMem_RawFree(order);
    PyMem_RawFree(rows);
    return result;
}

/* r6narrow_live_keys(flat, state, offsets, tags, fingerprint, signature)
 *     -> (firsts, afters, keys)
 *
 * segments.assemble's first step in C: the bytes ``b`` that ``state`` reads (row item
 * ``flat[state * 256 + b] >= 0``) and some token starts with (``offsets[b] !=
 * offsets[b + 1]``), ascending; the state after each; and each one's segment key
 * ``(fingerprint, signature, third, b)``, ``third`` being ``tags[after]`` (a 1-D uint64
 * buffer: the states' bounded-depth hashes) or, with ``tags`` None, ``after`` itself.
 * Lists of ints and of tuples. TypeError/ValueError for a buffer of the wrong type or
 * size, a state outside ``flat``, a target outside ``tags``. */
PyObject *r6narrow_live_keys(PyObject *module, PyObject *args) {
    (void)module;
    PyObject *flat_obj, *offsets_obj, *tags_obj, *fingerprint, *signature;
    Py_ssize_t state;
    if (!PyArg_ParseTuple(args, "OnOOOO", &flat_obj, &state, &offsets_obj, &tags_obj, &fingerprint, &signature))
        return NULL;
    Py_buffer flat, offsets_view, tags;
    int got_tags = 0;
    PyObject *firsts = NULL, *afters = NULL, *keys = NULL, *result = NULL;
    if (PyObject_GetBuffer(flat_obj, &flat, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return NULL;
    const int64_t *offsets = int64s(offsets_obj, &offsets_view, 257, "offsets");
    if (!offsets) {
        PyBuffer_Release(&flat);
        return NULL;
    }
    if (tags_obj != Py_None) {
        if (PyObject_GetBuffer(tags_obj, &tags, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) goto done;
        got_tags = 1;
        const char *f = tags.format;
        if (f && (*f == '@' || *f == '=' || *f == '<')) f++;
        if (tags.itemsize != 8 || tags.ndim > 1 || !f ||
            !((f[0] == 'Q' || (f[0] == 'L' && sizeof(long) == 8)) && f[1] == '\0')) {
            PyErr_SetString(PyExc_TypeError, "live_keys' tags must be 1-D uint64 (or None)");
            goto done;
        }
    }
    if (flat.itemsize != 4 || flat.ndim > 1 || !jm_is_int32(flat.format)) {
        PyErr_SetString(PyExc_TypeError, "live_keys' flat table must be 1-D int32");
        goto done;
    }
    if (state < 0 || state >= flat.len / 4 / 256) {
        PyErr_SetString(PyExc_ValueError, "a state outside the table");
        goto done;
    }
    const int32_t *row = (const int32_t *)flat.buf + state * 256;
    Py_ssize_t ntags = got_tags ? tags.len / 8 : 0;
    firsts = PyList_New(0);
    afters = PyList_New(0);
    keys = PyList_New(0);
    if (!firsts || !afters || !keys) goto done;
    for (int b = 0; b < 256; b++) {
        int32_t after = row[b];
        if (after < 0 || offsets[b] == offsets[b + 1]) continue;
        PyObject *third;
        if (got_tags) {
            if (after >= ntags) {
                PyErr_SetString(PyExc_ValueError, "a target outside the tags");
                goto done;
            }
            third = PyLong_FromUnsignedLongLong(((const uint64_t *)tags.buf)[after]);
        } else {
            third = PyLong_FromLong(after);
        }
        if (!third) goto done;
        PyObject *byte = PyLong_FromLong(b), *target = PyLong_FromLong(after);
        PyObject *key = byte ? PyTuple_Pack(4, fingerprint, signature, third, byte) : NULL;
        Py_DECREF(third);
        int bad = !byte || !target || !key || PyList_Append(firsts, byte) < 0 || PyList_Append(afters, target) < 0 ||
                  PyList_Append(keys, key) < 0;
        Py_XDECREF(byte);
        Py_XDECREF(target);
        Py_XDECREF(key);
        if (bad) goto done;
    }
    result = PyTuple_Pack(3, firsts, afters, keys);
done:
    Py_XDECREF(firsts);
    Py_XDECREF(afters);
    Py_XDECREF(keys);
    if (got_tags) PyBuffer_Release(&tags);
    PyBuffer_Release(&offsets_view);
    PyBuffer_Release(&flat);
    return result;
}
