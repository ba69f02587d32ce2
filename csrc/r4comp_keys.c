#include "native.h"
#include "regex.h" /* tick() */

/* r4comp: the key automata of objects' extra keys (jsonmode.decoding.automata.keys).
 *
 * r4comp_key_count(names) is keys.key_trie_size's sum: the number of prefixes of ``names``
 * (a tuple of str, sorted, without repeats: else TypeError/ValueError) but the empty one.
 *
 * r4comp_key_trie(names, parents, letters, owners, lengths, named, checkpoint) is
 * keys._key_trie_py's loop: ``names`` a tuple of str, sorted, without repeats; the five
 * outputs writable C-contiguous int32 buffers, the first four of one entry per prefix
 * of the names but the empty one, ``named`` of one per name (each checked against what
 * the names need first: ValueError, nothing written). checkpoint() is called before the
 * names 0, 256, 512 ... as the Python loop calls it.
 *
 * r4comp_key_rows(trans, prefix, tail, parents, letters, count) is extra_key_body's table:
 * ``trans`` (count + tail rows) x 256 int32, written whole: rows 0..count-1 as ``prefix``
 * (256 int32 targets relative to the shift ``count + 4``, or DEAD), the trie's edges
 * (state parents[i] on byte letters[i] to state i + 1), the last rows as ``tail`` (rows
 * of 256 relative targets, or DEAD). Every index is checked (ValueError/TypeError). */

#define KEY_DEAD (-(1 << 20)) /* keys._layout's dead target */

/* A writable C-contiguous int32 buffer of exactly ``n`` items (``n`` < 0: any). */
static int get_int32(PyObject *obj, Py_buffer *view, Py_ssize_t n, int writable, const char *what) {
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) < 0) return -1;
    if (view->itemsize != 4 || !jm_is_int32(view->format) || (n >= 0 && view->len != n * 4)) {
        PyBuffer_Release(view);
        PyErr_Format(PyExc_ValueError, "%s must be an int32 buffer of the right size", what);
        return -1;
    }
    return 0;
}

/* The length of the longest common prefix of two str. */
static Py_ssize_t common_prefix(PyObject *a, PyObject *b) {
    Py_ssize_t n = PyUnicode_GET_LENGTH(a) < PyUnicode_GET_LENGTH(b) ? PyUnicode_GET_LENGTH(a)
                                                                     : PyUnicode_GET_LENGTH(b);
    int ka = PyUnicode_KIND(a), kb = PyUnicode_KIND(b);
    const void *da = PyUnicode_DATA(a), *db = PyUnicode_DATA(b);
    Py_ssize_t i = 0;
    while (i < n && PyUnicode_READ(ka, da, i) == PyUnicode_READ(kb, db, i)) i++;
    return i;
}

/* The number of prefixes of ``names`` but the empty one, once they are checked to be str,
 * sorted, without repeats; -1 with an exception where not. */
static Py_ssize_t count_prefixes(PyObject *names) {
    Py_ssize_t n = PyTuple_GET_SIZE(names), prefixes = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *name = PyTuple_GET_ITEM(names, i);
        if (!PyUnicode_Check(name)) {
            PyErr_SetString(PyExc_TypeError, "names must be str");
            return -1;
        }
        Py_ssize_t common = 0;
        if (i) {
            PyObject *before = PyTuple_GET_ITEM(names, i - 1);
            int order = PyUnicode_Compare(before, name);
            if (order == -1 && PyErr_Occurred()) return -1;
            if (order >= 0) {
                PyErr_SetString(PyExc_ValueError, "names must be sorted, without repeats");
                return -1;
            }
            common = common_prefix(before, name);
        }
        prefixes += PyUnicode_GET_LENGTH(name) - common;
    }
    return prefixes;
}

PyObject *r4comp_key_count(PyObject *module, PyObject *names) {
    if (!PyTuple_Check(names)) {
        PyErr_SetString(PyExc_TypeError, "names must be a tuple of str");
        return NULL;
    }
    Py_ssize_t prefixes = count_prefixes(names);
    return prefixes < 0 ? NULL : PyLong_FromSsize_t(prefixes);
}

PyObject *r4comp_key_trie(PyObject *module, PyObject *args) {
    PyObject *names, *outs[5], *checkpoint;
    if (!PyArg_ParseTuple(args, "O!OOOOOO", &PyTuple_Type, &names, &outs[0], &outs[1], &outs[2],
                          &outs[3], &outs[4], &checkpoint))
        return NULL;
    if (!PyCallable_Check(checkpoint)) {
        PyErr_SetString(PyExc_TypeError, "checkpoint must be callable");
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(names), prefixes = count_prefixes(names);
    if (prefixes < 0) return NULL;
    Py_buffer views[5];
    int got = 0;
    PyObject *result = NULL;
    int32_t *path = NULL;
    const char *what[5] = {"parents", "letters", "owners", "lengths", "named"};
    for (; got < 5; got++)
        if (get_int32(outs[got], &views[got], got == 4 ? n : prefixes, 1, what[got]) < 0) goto done;
    int32_t *parents = views[0].buf, *letters = views[1].buf, *owners = views[2].buf;
    int32_t *lengths = views[3].buf, *named = views[4].buf;
    if (prefixes >= INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "too many prefixes");
        goto done;
    }
    /* ``path``: the states of the current name's prefixes (the longest name's + 1). */
    Py_ssize_t longest = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        if (PyUnicode_GET_LENGTH(PyTuple_GET_ITEM(names, i)) > longest)
            longest = PyUnicode_GET_LENGTH(PyTuple_GET_ITEM(names, i));
    if (!(path = PyMem_RawMalloc((size_t)(longest + 1) * sizeof(int32_t)))) {
        PyErr_NoMemory();
        goto done;
    }
    path[0] = 0;
    Py_ssize_t made = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!(i & 255) && tick(checkpoint) < 0) goto done;
        PyObject *name = PyTuple_GET_ITEM(names, i);
        Py_ssize_t common = i ? common_prefix(PyTuple_GET_ITEM(names, i - 1), name) : 0;
        Py_ssize_t length = PyUnicode_GET_LENGTH(name);
        int kind = PyUnicode_KIND(name);
        const void *data = PyUnicode_DATA(name);
        for (Py_ssize_t at = common; at < length; at++) {
            if (made >= prefixes) { /* (cannot happen: counted above) */
                PyErr_SetString(PyExc_ValueError, "names changed");
                goto done;
            }
            parents[made] = path[at];
            letters[made] = (int32_t)PyUnicode_READ(kind, data, at);
            owners[made] = (int32_t)i;
            lengths[made] = (int32_t)(at + 1);
            made++;
            path[at + 1] = (int32_t)made;
        }
        named[i] = path[length];
    }
    result = Py_NewRef(Py_None);
done:
    PyMem_RawFree(path);
    for (int k = 0; k < got; k++) PyBuffer_Release(&views[k]);
    return result;
}

/* A row of relative targets, written shifted (DEAD: -1); -1 with ValueError on a target
 * out of [0, states). */
static int shifted_row(int32_t *out, const int32_t *row, int64_t shift, int64_t states) {
    for (int b = 0; b < 256; b++) {
        int64_t v = row[b];
        if (v == KEY_DEAD) {
            out[b] = -1;
            continue;
        }
        v += shift;
        if (v < 0 || v >= states) {
            PyErr_SetString(PyExc_ValueError, "a layout target is out of range");
            return -1;
        }
        out[b] = (int32_t)v;
    }
    return 0;
}

PyObject *r4comp_key_rows(PyObject *module, PyObject *args) {
    PyObject *trans_obj, *prefix_obj, *tail_obj, *parents_obj, *letters_obj;
    Py_ssize_t count;
    if (!PyArg_ParseTuple(args, "OOOOOn", &trans_obj, &prefix_obj, &tail_obj, &parents_obj,
                          &letters_obj, &count))
        return NULL;
    Py_buffer trans, prefix, tail, parents, letters;
    PyObject *result = NULL;
    if (get_int32(trans_obj, &trans, -1, 1, "trans") < 0) return NULL;
    if (get_int32(prefix_obj, &prefix, 256, 0, "prefix") < 0) goto t;
    if (get_int32(tail_obj, &tail, -1, 0, "tail") < 0) goto p;
    if (get_int32(parents_obj, &parents, -1, 0, "parents") < 0) goto tl;
    if (get_int32(letters_obj, &letters, parents.len / 4, 0, "letters") < 0) goto pa;
    Py_ssize_t rows = trans.len / (256 * 4), tails = tail.len / (256 * 4);
    if (trans.len % (256 * 4) || tail.len % (256 * 4) || tails < 4 || count < 1 ||
        count != parents.len / 4 + 1 || rows != count + tails || rows >= INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "trans must have count + tail rows of 256");
        goto le;
    }
    int32_t *out = trans.buf;
    const int64_t shift = (int64_t)count + 4;
    for (Py_ssize_t s = 0; s < count; s++) {
        if (s == 0) {
            if (shifted_row(out, prefix.buf, shift, rows) < 0) goto le;
        } else {
            memcpy(out + s * 256, out, 256 * sizeof(int32_t));
        }
    }
    for (Py_ssize_t t = 0; t < tails; t++) {
        const int32_t *row = (const int32_t *)tail.buf + t * 256;
        if (shifted_row(out + (count + t) * 256, row, shift, rows) < 0) goto le;
    }
    const int32_t *par = parents.buf, *let = letters.buf;
    for (Py_ssize_t i = 0; i < count - 1; i++) {
        if (par[i] < 0 || par[i] >= count || let[i] < 0 || let[i] > 255) {
            PyErr_SetString(PyExc_ValueError, "a trie edge is out of range");
            goto le;
        }
        out[(Py_ssize_t)par[i] * 256 + let[i]] = (int32_t)(i + 1);
    }
    result = Py_NewRef(Py_None);
le:
    PyBuffer_Release(&letters);
pa:
    PyBuffer_Release(&parents);
tl:
    PyBuffer_Release(&tail);
p:
    PyBuffer_Release(&prefix);
t:
    PyBuffer_Release(&trans);
    return result;
}
