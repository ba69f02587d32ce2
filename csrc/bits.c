#include "native.h"

/* ------------------------------------------------------------------------------ */
/* count_bits / bit_ids: a packed mask as the shorter of its two id lists           */
/*
 * The C form of BatchMasker._build over a mask's bits (jsonmode.decoding.batch_masks):
 * token t is bit t % 8 of byte t // 8 (little-endian bits, the engine's packed form).
 * count_bits counts the allowed tokens below ``shared``; bit_ids writes the allowed
 * ids (keep) or the banned ones, those below ``shared`` whose bit is clear followed by
 * every column from ``shared`` to ``width`` (a model head wider than the vocabulary),
 * into an int64 buffer of exactly that many ids. No 152 KB bool array is made, and
 * no Python object per id. Every length is checked first (ValueError).
 */

static int bits_arg(PyObject *obj, Py_buffer *view, Py_ssize_t shared) {
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS) < 0) return -1;
    if (view->itemsize != 1) {
        PyErr_SetString(PyExc_TypeError, "bits must be a buffer of bytes (uint8)");
        PyBuffer_Release(view);
        return -1;
    }
    if (shared < 0 || shared > view->len * 8) {
        PyErr_Format(PyExc_ValueError, "shared %zd outside the %zd bits given", shared, view->len * 8);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/* The allowed tokens below ``shared``. */
static Py_ssize_t count_below(const uint8_t *bits, Py_ssize_t shared) {
    Py_ssize_t whole = shared / 64, count = 0;
    for (Py_ssize_t w = 0; w < whole; w++) {
        uint64_t word;
        memcpy(&word, bits + 8 * w, 8);
        count += __builtin_popcountll(word);
    }
    for (Py_ssize_t t = whole * 64; t < shared; t++) count += (bits[t >> 3] >> (t & 7)) & 1;
    return count;
}

PyObject *jm_count_bits(PyObject *module, PyObject *args) {
    PyObject *bits_obj;
    Py_ssize_t shared;
    if (!PyArg_ParseTuple(args, "On", &bits_obj, &shared)) return NULL;
    Py_buffer bits;
    if (bits_arg(bits_obj, &bits, shared) < 0) return NULL;
    Py_ssize_t count = count_below(bits.buf, shared);
    PyBuffer_Release(&bits);
    return PyLong_FromSsize_t(count);
}

PyObject *jm_bit_ids(PyObject *module, PyObject *args) {
    PyObject *bits_obj, *out_obj;
    Py_ssize_t shared, width;
    int keep;
    if (!PyArg_ParseTuple(args, "OnnpO", &bits_obj, &shared, &width, &keep, &out_obj)) return NULL;
    if (width < shared) {
        PyErr_Format(PyExc_ValueError, "width %zd below shared %zd", width, shared);
        return NULL;
    }
    Py_buffer bits, out;
    if (bits_arg(bits_obj, &bits, shared) < 0) return NULL;
    if (PyObject_GetBuffer(out_obj, &out, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE | PyBUF_FORMAT) < 0) {
        PyBuffer_Release(&bits);
        return NULL;
    }
    PyObject *result = NULL;
    if (out.itemsize != 8 || out.ndim > 1 || !jm_is_int64(out.format)) {
        PyErr_SetString(PyExc_TypeError, "out must be a 1-D int64 buffer");
        goto done;
    }
    const uint8_t *b = bits.buf;
    Py_ssize_t allowed = count_below(b, shared);
    Py_ssize_t wanted = keep ? allowed : width - allowed;
    if (out.len / 8 != wanted) {
        PyErr_Format(PyExc_ValueError, "out holds %zd ids, the list has %zd", out.len / 8, wanted);
        goto done;
    }
    int64_t *ids = out.buf;
    Py_ssize_t n = 0, whole = shared / 64;
    uint64_t flip = keep ? 0 : ~(uint64_t)0;
    for (Py_ssize_t w = 0; w < whole; w++) {
        uint64_t word;
        memcpy(&word, b + 8 * w, 8);
        word ^= flip;
        while (word) {
            ids[n++] = 64 * w + __builtin_ctzll(word);
            word &= word - 1;
        }
    }
    for (Py_ssize_t t = whole * 64; t < shared; t++)
        if ((((b[t >> 3] >> (t & 7)) & 1) != 0) == (keep != 0)) ids[n++] = t;
    if (!keep)
        for (Py_ssize_t t = shared; t < width; t++) ids[n++] = t;
    result = Py_None;
    Py_INCREF(result);
done:
    PyBuffer_Release(&out);
    PyBuffer_Release(&bits);
    return result;
}
