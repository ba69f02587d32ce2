#include "native.h"

/* ------------------------------------------------------------------------------ */
/* r6replay_states: where boundary tokens passed their crossing state               */
/*
 * The C form of jsonmode.decoding.engine.walk.Walks._replay (a structural rule's walk
 * groups its boundary tokens by the state where each passed its call or return point,
 * read again from the state the walk started in): for each entry i, the state reached
 * from ``state`` reading bytes 0 .. cols[i] - 1 of the token at position
 * ``positions[i]`` (row positions[i] of ``matrix``), into ``out[i]``.
 *
 * Arguments: ``table`` a C-contiguous int32 buffer of n * 256 entries (the rule's flat
 * table, -1: no transition); ``state`` in 0 .. n - 1; ``matrix`` a C-contiguous uint8
 * buffer of 2 dimensions (the vocabulary's token bytes in position order, ``width``
 * bytes a row); ``positions`` and ``cols`` 1-D int64 buffers of one length;
 * ``out`` a writable 1-D int64 buffer of that length.
 *
 * Errors: TypeError for a buffer of the wrong item type; ValueError for a wrong shape,
 * a position outside the matrix, a column past its width or negative, a state outside
 * the table, or a step that leaves it (no transition: a boundary entry the walk could
 * not have made). Every index is checked before it is read; on an error ``out`` may be
 * partly written. The loop runs with the GIL released (it calls no Python). Cost: one
 * table read per byte replayed.
 */

PyObject *r6replay_states(PyObject *module, PyObject *args) {
    PyObject *objs[5];
    long long start;
    if (!PyArg_ParseTuple(args, "OLOOOO", &objs[0], &start, &objs[1], &objs[2], &objs[3], &objs[4])) return NULL;
    static const char *names[5] = {"table", "matrix", "positions", "cols", "out"};
    Py_buffer views[5];
    int taken = 0;
    PyObject *result = NULL;
    for (; taken < 5; taken++)
        if (jm_get_buffer(objs[taken], &views[taken], taken == 4, "r6replay_states", names[taken]) < 0) goto done;
    Py_buffer *table = &views[0], *matrix = &views[1], *positions = &views[2], *cols = &views[3], *out = &views[4];
    if (table->itemsize != 4 || !jm_is_int32(table->format) || matrix->itemsize != 1 ||
        !(matrix->format == NULL || !strcmp(matrix->format, "B")) || positions->itemsize != 8 ||
        !jm_is_int64(positions->format) || cols->itemsize != 8 || !jm_is_int64(cols->format) ||
        out->itemsize != 8 || !jm_is_int64(out->format)) {
        PyErr_SetString(PyExc_TypeError,
                        "r6replay_states takes an int32 table, a uint8 matrix and int64 positions, cols and out");
        goto done;
    }
    if (table->len % (256 * 4) || matrix->ndim != 2 || !matrix->shape || positions->ndim != 1 || cols->ndim != 1 ||
        out->ndim != 1 || cols->len != positions->len || out->len != positions->len) {
        PyErr_SetString(PyExc_ValueError,
                        "r6replay_states: a table of whole rows, a 2-D matrix, and positions, cols and out "
                        "of one length");
        goto done;
    }
    int64_t states = (int64_t)(table->len / (256 * 4));
    int64_t rows = (int64_t)matrix->shape[0], width = (int64_t)matrix->shape[1];
    if (start < 0 || start >= states) {
        PyErr_Format(PyExc_ValueError, "r6replay_states: state %lld outside the table", start);
        goto done;
    }
    const int32_t *flat = table->buf;
    const uint8_t *bytes = matrix->buf;
    const int64_t *pos = positions->buf, *col = cols->buf;
    int64_t *reached = out->buf;
    Py_ssize_t count = positions->len / 8, bad = -1;
    int why = 0; /* 1: position or column out of range; 2: a step left the table */
    Py_BEGIN_ALLOW_THREADS;
    for (Py_ssize_t i = 0; i < count && bad < 0; i++) {
        int64_t p = pos[i], c = col[i], here = start;
        if (p < 0 || p >= rows || c < 0 || c > width) {
            bad = i;
            why = 1;
            break;
        }
        const uint8_t *row = bytes + p * width;
        for (int64_t k = 0; k < c; k++) {
            here = flat[here * 256 + row[k]];
            if (here < 0 || here >= states) {
                bad = i;
                why = 2;
                break;
            }
        }
        reached[i] = here;
    }
    Py_END_ALLOW_THREADS;
    if (bad >= 0) {
        PyErr_Format(PyExc_ValueError,
                     why == 1 ? "r6replay_states: entry %zd's position or column is outside the matrix"
                              : "r6replay_states: entry %zd's bytes leave the table",
                     bad);
        goto done;
    }
    result = Py_NewRef(Py_None);
done:
    for (int k = 0; k < taken; k++) PyBuffer_Release(&views[k]);
    return result;
}
