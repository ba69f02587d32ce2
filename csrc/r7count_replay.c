#include "native.h"

/* ------------------------------------------------------------------------------ */
/* r7count_replay: an automaton run over every node of the token trie               */
/*
 * The C form of jsonmode.decoding.engine.trie.TokenTrie.replay (what the walks of a
 * counted string or a GBNF counted repetition read: per trie node, the state after its
 * prefix and the sum of per-transition weights along it, the characters begun).
 * Nodes are in the trie's one numbering, level by level, so a node's parent comes
 * before it: out_states[i] = table[s * 256 + bytes[i]] and out_sums[i] = w + weights[
 * s * 256 + bytes[i]], where (s, w) is (``state``, 0) for a node of the first level
 * (parents[i] == -1) and (out_states[p], out_sums[p]) for parents[i] == p otherwise.
 * The sums are int16 and wrap as NumPy's int16 additions do.
 *
 * Arguments: ``table`` a C-contiguous int32 buffer of n * 256 entries, every entry a
 * state in 0 .. n - 1 (the flat table with an absorbing dead state: no -1);
 * ``state`` in 0 .. n - 1; ``weights`` a C-contiguous int16 buffer of n * 256
 * entries; ``parents`` and ``bytes`` 1-D int64 buffers of one length N; ``out_states``
 * (int64) and ``out_sums`` (int16) writable 1-D buffers of length N.
 *
 * Errors: TypeError for a buffer of the wrong item type; ValueError for a wrong
 * length, a state outside the table, a parent not before its node (or below -1), a
 * byte outside 0 .. 255, or a table entry outside the table. Every index is checked
 * before it is read; on an error the outputs may be partly written. The loop runs
 * with the GIL released (it calls no Python). Cost: two reads and two writes a node.
 */

static int is_int16(const char *format) {
    if (!format) return 0;
    if (*format == '@' || *format == '=' || *format == '<') format++;
    return format[0] == 'h' && format[1] == '\0';
}

PyObject *r7count_replay(PyObject *module, PyObject *args) {
    PyObject *objs[6];
    long long start;
    if (!PyArg_ParseTuple(args, "OLOOOOO", &objs[0], &start, &objs[1], &objs[2], &objs[3], &objs[4], &objs[5]))
        return NULL;
    static const char *names[6] = {"table", "weights", "parents", "bytes", "out_states", "out_sums"};
    Py_buffer views[6];
    int taken = 0;
    PyObject *result = NULL;
    for (; taken < 6; taken++)
        if (jm_get_buffer(objs[taken], &views[taken], taken >= 4, "r7count_replay", names[taken]) < 0) goto done;
    Py_buffer *table = &views[0], *weights = &views[1], *parents = &views[2], *bytes = &views[3],
              *out_states = &views[4], *out_sums = &views[5];
    if (table->itemsize != 4 || !jm_is_int32(table->format) || weights->itemsize != 2 ||
        !is_int16(weights->format) || parents->itemsize != 8 || !jm_is_int64(parents->format) ||
        bytes->itemsize != 8 || !jm_is_int64(bytes->format) || out_states->itemsize != 8 ||
        !jm_is_int64(out_states->format) || out_sums->itemsize != 2 || !is_int16(out_sums->format)) {
        PyErr_SetString(PyExc_TypeError,
                        "r7count_replay takes an int32 table, int16 weights, int64 parents, bytes and "
                        "out_states, and int16 out_sums");
        goto done;
    }
    if (table->len % (256 * 4) || weights->len / 2 != table->len / 4 || parents->ndim != 1 || bytes->ndim != 1 ||
        out_states->ndim != 1 || out_sums->ndim != 1 || bytes->len != parents->len ||
        out_states->len != parents->len || out_sums->len / 2 != parents->len / 8) {
        PyErr_SetString(PyExc_ValueError,
                        "r7count_replay: a table of whole rows, weights as long, and parents, bytes, "
                        "out_states and out_sums of one length");
        goto done;
    }
    int64_t states = (int64_t)(table->len / (256 * 4));
    if (start < 0 || start >= states) {
        PyErr_Format(PyExc_ValueError, "r7count_replay: state %lld outside the table", start);
        goto done;
    }
    const int32_t *flat = table->buf;
    const int16_t *weight = weights->buf;
    const int64_t *parent = parents->buf, *byte = bytes->buf;
    int64_t *reached = out_states->buf;
    int16_t *sums = out_sums->buf;
    Py_ssize_t count = parents->len / 8, bad = -1;
    int why = 0; /* 1: a parent not before its node; 2: a byte out of range; 3: a state out of range */
    Py_BEGIN_ALLOW_THREADS;
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t p = parent[i], b = byte[i], here;
        int32_t sum;
        if (p < -1 || p >= i) {
            bad = i;
            why = 1;
            break;
        }
        if (b < 0 || b > 255) {
            bad = i;
            why = 2;
            break;
        }
        if (p < 0) {
            here = start;
            sum = 0;
        } else {
            here = reached[p];
            sum = sums[p];
        }
        int64_t step = here * 256 + b; /* (here was checked in range when written) */
        int64_t next = flat[step];
        if (next < 0 || next >= states) {
            bad = i;
            why = 3;
            break;
        }
        reached[i] = next;
        sums[i] = (int16_t)(uint16_t)(uint32_t)(sum + (int32_t)weight[step]);
    }
    Py_END_ALLOW_THREADS;
    if (bad >= 0) {
        PyErr_Format(PyExc_ValueError,
                     why == 1   ? "r7count_replay: node %zd's parent is not before it"
                     : why == 2 ? "r7count_replay: node %zd's byte is outside 0 .. 255"
                                : "r7count_replay: node %zd's step leaves the table",
                     bad);
        goto done;
    }
    result = Py_NewRef(Py_None);
done:
    for (int k = 0; k < taken; k++) PyBuffer_Release(&views[k]);
    return result;
}

/* ------------------------------------------------------------------------------ */
/* r7count_ids: a replay's answer by token id                                       */
/*
 * What jsonmode.decoding.engine.walk.Walks._char_counts gathers from a replay (which
 * stays the reference: tests/test_counted_repeats.py holds the two alike), in one pass
 * over the token index's positions instead of NumPy's gathers and selects by id: first
 * every id is -1 and not closed; then per position p, with n = ends[p] (the trie node
 * where its token ends, as the replay numbers nodes) and i = ids[p], out_chars[i] =
 * sums[n] where states[n] != dead, else -1, and out_closed[i] = states[n] == closing.
 * (By position, the nodes of a level are read in order: a gather by id reads them at
 * random, ~1.5 ms for Qwen2.5 against ~0.7 here.)
 *
 * Arguments: ``states`` (int64) and ``sums`` (int16), the replay's, of one length N;
 * ``ends`` and ``ids`` (int64) of one length P, each end in 0 .. N - 1 and each id in
 * 0 .. M - 1; ``dead`` and ``closing``, states; ``out_chars`` (int16) and
 * ``out_closed`` (bool) writable, of one length M. Errors: TypeError for a buffer of
 * the wrong item type, ValueError for a wrong length, or a node or id out of range
 * (checked before anything is written). The loops run with the GIL released.
 */
PyObject *r7count_ids(PyObject *module, PyObject *args) {
    PyObject *objs[6];
    long long dead, closing;
    if (!PyArg_ParseTuple(args, "OOOOLLOO", &objs[0], &objs[1], &objs[2], &objs[3], &dead, &closing, &objs[4],
                          &objs[5]))
        return NULL;
    static const char *names[6] = {"states", "sums", "ends", "ids", "out_chars", "out_closed"};
    Py_buffer views[6];
    int taken = 0;
    PyObject *result = NULL;
    for (; taken < 6; taken++)
        if (jm_get_buffer(objs[taken], &views[taken], taken >= 4, "r7count_ids", names[taken]) < 0) goto done;
    Py_buffer *states = &views[0], *sums = &views[1], *ends = &views[2], *ids = &views[3], *out_chars = &views[4],
              *out_closed = &views[5];
    if (states->itemsize != 8 || !jm_is_int64(states->format) || sums->itemsize != 2 || !is_int16(sums->format) ||
        ends->itemsize != 8 || !jm_is_int64(ends->format) || ids->itemsize != 8 || !jm_is_int64(ids->format) ||
        out_chars->itemsize != 2 || !is_int16(out_chars->format) || out_closed->itemsize != 1) {
        PyErr_SetString(PyExc_TypeError,
                        "r7count_ids takes int64 states, ends and ids, int16 sums and out_chars, and bool "
                        "out_closed");
        goto done;
    }
    Py_ssize_t count = states->len / 8, positions = ends->len / 8, size = out_chars->len / 2;
    if (sums->len / 2 != count || ids->len / 8 != positions || out_closed->len != size) {
        PyErr_SetString(PyExc_ValueError,
                        "r7count_ids: states and sums of one length, ends and ids of another, out_chars and "
                        "out_closed of a third");
        goto done;
    }
    const int64_t *reached = states->buf, *end = ends->buf, *id = ids->buf;
    const int16_t *begun = sums->buf;
    int16_t *chars = out_chars->buf;
    uint8_t *closed = out_closed->buf;
    Py_ssize_t bad = -1;
    Py_BEGIN_ALLOW_THREADS;
    for (Py_ssize_t p = 0; p < positions; p++) {
        if (end[p] < 0 || end[p] >= count || id[p] < 0 || id[p] >= size) {
            bad = p;
            break;
        }
    }
    if (bad < 0) {
        for (Py_ssize_t i = 0; i < size; i++) chars[i] = -1;
        memset(closed, 0, (size_t)size);
        for (Py_ssize_t p = 0; p < positions; p++) {
            int64_t n = end[p], at = reached[n];
            chars[id[p]] = at != dead ? begun[n] : (int16_t)-1;
            closed[id[p]] = at == closing;
        }
    }
    Py_END_ALLOW_THREADS;
    if (bad >= 0) {
        PyErr_Format(PyExc_ValueError, "r7count_ids: position %zd's node or id is out of range", bad);
        goto done;
    }
    result = Py_NewRef(Py_None);
done:
    for (int k = 0; k < taken; k++) PyBuffer_Release(&views[k]);
    return result;
}
