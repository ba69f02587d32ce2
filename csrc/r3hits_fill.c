#include "native.h"

/* ------------------------------------------------------------------------------ */
/* r3hits_fill_words: a cached mask's bits into a caller's token bitmask            */
/*
 * The C form of the copy in Matcher.fill_bitmask (jsonmode.decoding.matcher): the
 * bytes of ``bits`` (the engine's packed mask, token t at bit t % 8 of byte t // 8,
 * whole 32-bit words) to the start of ``out`` (a writable, C-contiguous buffer of
 * 4-byte items: one row of an int32/uint32 bitmask), the bytes of ``out`` past them
 * cleared. One call where NumPy's slice assignment costs two views and a dispatch
 * (the mask-cache hit path is this copy and a lookup).
 *
 * Returns True when written; False, writing nothing, when ``out`` is not such a buffer
 * or is shorter than ``bits`` (the caller's Python path then raises its ValueError,
 * or NumPy's for a read-only array). ``bits`` must be a C-contiguous buffer (else the
 * buffer protocol's error). No index is read from either buffer: the copy is bounded
 * by ``bits``' length, checked against ``out``'s first.
 */

/* Whether the error set is one a buffer request raises for an unsuitable object. */
static int refused_buffer(void) {
    return PyErr_ExceptionMatches(PyExc_BufferError) || PyErr_ExceptionMatches(PyExc_TypeError) ||
           PyErr_ExceptionMatches(PyExc_ValueError);
}

PyObject *jm_r3hits_fill_words(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "r3hits_fill_words takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    Py_buffer bits, out;
    if (PyObject_GetBuffer(args[1], &bits, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    if (PyObject_GetBuffer(args[0], &out, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&bits);
        if (!refused_buffer()) return NULL;
        PyErr_Clear();
        Py_RETURN_FALSE;
    }
    int fits = out.itemsize == 4 && out.len >= bits.len && !out.readonly;
    if (fits) {
        memcpy(out.buf, bits.buf, (size_t)bits.len);
        if (out.len > bits.len) memset((char *)out.buf + bits.len, 0, (size_t)(out.len - bits.len));
    }
    PyBuffer_Release(&out);
    PyBuffer_Release(&bits);
    if (fits) Py_RETURN_TRUE;
    Py_RETURN_FALSE;
}
