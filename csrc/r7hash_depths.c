#include "native.h"

/* ------------------------------------------------------------------------------ */
/* r7hash_depths: bounded-depth behaviour hashes of an automaton's states            */
/*
 * The C form of the depth loop of jsonmode.decoding.engine.state.state_hashes. The
 * automaton comes as weighted edges (state._weighted_edges): edge e leads from state
 * source[e] to target[e] (the extra slot ``states``: dead) with weight summed[e];
 * sources ascend and every state has at least one edge. From h_0 = base, each depth
 * computes, modulo 2**64,
 *
 *     h_d[s] = mix(sum over s's edges e of ext_{d-1}[target[e]] * summed[e] + base[s])
 *
 * with ext_{d-1} = h_{d-1} and ext_{d-1}[states] = ``dead``, and ``mix`` the
 * finaliser of state._mix (x ^= x >> 31; x *= 0xBF58476D1CE4E5B9; x ^= x >> 29).
 * Row k of ``out`` (k rows of ``states`` each) receives h_{depths[k]}.
 *
 * Arguments: ``source`` and ``target`` 1-D int64 buffers, ``summed`` a 1-D uint64
 * buffer, all of one length; ``base`` a 1-D uint64 buffer of ``states`` entries;
 * ``dead`` an int (taken modulo 2**64); ``depths`` a 1-D int64 buffer, strictly
 * ascending, every depth >= 1; ``out`` a writable C-contiguous uint64 buffer of
 * len(depths) * states entries.
 *
 * Errors: TypeError for a buffer of the wrong item type; ValueError for lengths that
 * disagree, no state, a source out of order or out of range, a state without an edge,
 * a target outside 0 .. states, or depths not ascending from 1. Every index is checked
 * before the loop. The loop runs with the GIL released. Cost: one multiply-add per
 * edge per depth; memory, two rows of ``states + 1`` words.
 */

/* Whether a buffer's format is an unsigned 8-byte integer ("Q", or "L" where long has 8). */
static int is_uint64(const char *format) {
    if (!format) return 0;
    if (*format == '@' || *format == '=' || *format == '<') format++;
    if (format[0] == 'Q' && format[1] == '\0') return 1;
    return format[0] == 'L' && format[1] == '\0' && sizeof(long) == 8;
}

static inline uint64_t finish(uint64_t x) {
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ULL;
    x ^= x >> 29;
    return x;
}

PyObject *r7hash_depths(PyObject *module, PyObject *args) {
    (void)module;
    PyObject *objs[6], *dead_obj;
    if (!PyArg_ParseTuple(args, "OOOOOOO", &objs[0], &objs[1], &objs[2], &objs[3], &dead_obj, &objs[4], &objs[5]))
        return NULL;
    static const char *names[6] = {"source", "target", "summed", "base", "depths", "out"};
    Py_buffer views[6];
    int taken = 0;
    PyObject *result = NULL;
    uint64_t *rows = NULL;
    uint64_t dead = PyLong_AsUnsignedLongLongMask(dead_obj);
    if (dead == (uint64_t)-1 && PyErr_Occurred()) return NULL;
    for (; taken < 6; taken++)
        if (jm_get_buffer(objs[taken], &views[taken], taken == 5, "r7hash_depths", names[taken]) < 0) goto done;
    Py_buffer *source = &views[0], *target = &views[1], *summed = &views[2], *base = &views[3], *depths = &views[4],
              *out = &views[5];
    if (source->itemsize != 8 || !jm_is_int64(source->format) || target->itemsize != 8 ||
        !jm_is_int64(target->format) || summed->itemsize != 8 || !is_uint64(summed->format) ||
        base->itemsize != 8 || !is_uint64(base->format) || depths->itemsize != 8 || !jm_is_int64(depths->format) ||
        out->itemsize != 8 || !is_uint64(out->format)) {
        PyErr_SetString(PyExc_TypeError,
                        "r7hash_depths takes int64 source, target and depths, and uint64 summed, base and out");
        goto done;
    }
    Py_ssize_t edges = source->len / 8, states = base->len / 8, count = depths->len / 8;
    if (source->ndim != 1 || target->ndim != 1 || summed->ndim != 1 || base->ndim != 1 || depths->ndim != 1 ||
        target->len != source->len || summed->len != source->len || states < 1 || count < 1 ||
        out->len != count * states * 8) {
        PyErr_SetString(PyExc_ValueError,
                        "r7hash_depths: 1-D source, target and summed of one length, at least one state and one "
                        "depth, and out of len(depths) * states words");
        goto done;
    }
    const int64_t *src = source->buf, *dst = target->buf, *want = depths->buf;
    const uint64_t *weight = summed->buf, *start = base->buf;
    /* Every state has edges, in order: state s's are next[s] .. next[s + 1] - 1. */
    for (Py_ssize_t e = 0; e < edges; e++) {
        int64_t s = src[e];
        int64_t before = e ? src[e - 1] : -1;
        if (s < 0 || s >= states || (s != before && s != before + 1) || dst[e] < 0 || dst[e] > states) {
            PyErr_Format(PyExc_ValueError,
                         "r7hash_depths: edge %zd's source is out of order or range, or its target out of range", e);
            goto done;
        }
    }
    if (!edges || src[edges - 1] != states - 1) {
        PyErr_SetString(PyExc_ValueError, "r7hash_depths: a state without an edge");
        goto done;
    }
    for (Py_ssize_t k = 0; k < count; k++)
        if (want[k] < 1 || (k && want[k] <= want[k - 1])) {
            PyErr_SetString(PyExc_ValueError, "r7hash_depths: depths must ascend from 1");
            goto done;
        }
    if ((size_t)states + 1 > ((size_t)-1) / (2 * sizeof(uint64_t))) {
        PyErr_NoMemory();
        goto done;
    }
    rows = PyMem_RawMalloc(2 * ((size_t)states + 1) * sizeof(uint64_t));
    if (!rows) {
        PyErr_NoMemory();
        goto done;
    }
    uint64_t *slots = out->buf;
    Py_BEGIN_ALLOW_THREADS;
    uint64_t *now = rows, *next = rows + states + 1;
    memcpy(now, start, (size_t)states * sizeof(uint64_t));
    now[states] = dead;
    next[states] = dead;
    int64_t deepest = want[count - 1];
    Py_ssize_t k = 0;
    for (int64_t depth = 1; depth <= deepest; depth++) {
        Py_ssize_t e = 0;
        for (Py_ssize_t s = 0; s < states; s++) {
            uint64_t acc = 0;
            for (; e < edges && src[e] == s; e++) acc += now[dst[e]] * weight[e];
            next[s] = finish(acc + start[s]);
        }
        uint64_t *swap = now;
        now = next;
        next = swap;
        if (depth == want[k]) {
            memcpy(slots + k * states, now, (size_t)states * sizeof(uint64_t));
            k++;
        }
    }
    Py_END_ALLOW_THREADS;
    result = Py_NewRef(Py_None);
done:
    PyMem_RawFree(rows);
    for (int i = 0; i < taken; i++) PyBuffer_Release(&views[i]);
    return result;
}
