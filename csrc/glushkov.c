/* The Glushkov subset construction in C (jsonmode.regex.glushkov._determinise): see
 * regex.c for the contract shared with the minimisation it ends with. */
#include "regex.h"

/* ------------------------------------------------------------------------------ */
/* Subset construction over Glushkov positions                                      */

typedef struct {
    int64_t point, kind, cls;
} Event;

static int cmp_event(const void *a, const void *b) {
    const Event *x = a, *y = b;
    if (x->point != y->point) return (x->point > y->point) - (x->point < y->point);
    if (x->kind != y->kind) return (x->kind > y->kind) - (x->kind < y->kind);
    return (x->cls > y->cls) - (x->cls < y->cls);
}

typedef struct {
    Intern classes;   /* each class's intervals, flat (lo, hi, ...) */
    Intern classsets; /* the sorted classes a subset state reads */
    Intern actives;   /* the sorted classes containing a segment */
    I64Vec segfirst, segcount; /* per class set: its segments */
    I64Vec seglo, seghi, segact;
    uint8_t *flag;    /* per class, during a sweep */
} Segments;

/* The segments of class set ``id`` (_segments): maximal code-point ranges no class
 * boundary crosses, each with the (interned) sorted classes containing it. */
static int sweep(Segments *g, Py_ssize_t id) {
    const int64_t *set = intern_at(&g->classsets, id);
    Py_ssize_t size = g->classsets.len.data[id], count = 0;
    for (Py_ssize_t i = 0; i < size; i++) count += g->classes.len.data[set[i]];
    Event *events = alloc(count, sizeof(Event));
    int64_t *act = alloc(size, sizeof(int64_t));
    int rc = -1;
    if (!events || !act) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t ne = 0;
    for (Py_ssize_t i = 0; i < size; i++) {
        const int64_t *iv = intern_at(&g->classes, set[i]);
        for (Py_ssize_t k = 0; k < g->classes.len.data[set[i]]; k += 2) {
            events[ne++] = (Event){iv[k], 1, set[i]};
            events[ne++] = (Event){iv[k + 1] + 1, -1, set[i]};
        }
    }
    if (ne > 1) qsort(events, (size_t)ne, sizeof(Event), cmp_event);
    if (vec_push(&g->segfirst, g->seglo.size) < 0) goto done;
    Py_ssize_t on = 0;
    for (Py_ssize_t i = 0; i < ne;) {
        int64_t point = events[i].point;
        for (; i < ne && events[i].point == point; i++) {
            uint8_t *f = &g->flag[events[i].cls];
            if (events[i].kind > 0 && !*f) on++, *f = 1;
            else if (events[i].kind < 0 && *f) on--, *f = 0;
        }
        if (!on || i >= ne) continue;
        Py_ssize_t na = 0;
        for (Py_ssize_t k = 0; k < size; k++)
            if (g->flag[set[k]]) act[na++] = set[k];
        int fresh;
        Py_ssize_t a = intern_get(&g->actives, act, na, hash_array(act, na), &fresh);
        if (a < 0 || vec_push(&g->seglo, point) < 0 || vec_push(&g->seghi, events[i].point - 1) < 0 ||
            vec_push(&g->segact, a) < 0)
            goto done;
    }
    for (Py_ssize_t k = 0; k < size; k++) g->flag[set[k]] = 0;
    if (vec_push(&g->segcount, g->seglo.size - g->segfirst.data[id]) < 0) goto done;
    rc = 0;
done:
    PyMem_Free(events);
    PyMem_Free(act);
    return rc;
}

PyObject *jm_glushkov_determinise(PyObject *module, PyObject *args) {
    PyObject *cs_obj, *follow_obj, *last_obj, *checkpoint;
    long long univ, max_states, most;
    if (!PyArg_ParseTuple(args, "OOOLLLO", &cs_obj, &follow_obj, &last_obj, &univ, &max_states, &most, &checkpoint))
        return NULL;
    if (!PyCallable_Check(checkpoint)) {
        PyErr_SetString(PyExc_TypeError, "checkpoint must be callable");
        return NULL;
    }
    PyObject *cs = NULL, *follow = NULL, *last = NULL, *out = NULL;
    Segments g = {0};
    Intern states = {0};
    Raw sub = {0};
    I64Vec fstart = {0}, fitems = {0}, scratch = {0}, gathered = {0}, local = {0}, bstart = {0}, bitems = {0};
    I64Vec astamp = {0}, adst = {0}, target = {0};
    int64_t *class_of = NULL, *qstamp = NULL, *cstamp = NULL, *cslot = NULL, *ustamp = NULL;
    uint8_t *is_last = NULL;
    int bad = 0;
    cs = own_tuple(cs_obj, -1, "cs");
    if (!cs) goto done;
    Py_ssize_t npos = PyTuple_GET_SIZE(cs);
    if (npos < 1 || npos > MAX_ITEMS) {
        PyErr_SetString(PyExc_ValueError, "1 to 2**30 positions");
        goto done;
    }
    follow = own_tuple(follow_obj, npos, "follow");
    last = follow ? own_tuple(last_obj, -1, "last") : NULL;
    if (!last) goto done;
    class_of = alloc(npos, sizeof(int64_t));
    qstamp = alloc(npos, sizeof(int64_t));
    ustamp = alloc(npos, sizeof(int64_t));
    is_last = alloc(npos, 1);
    if (!class_of || !qstamp || !ustamp || !is_last) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t p = 0; p < npos; p++) {
        PyObject *intervals = own_tuple(PyTuple_GET_ITEM(cs, p), -1, "a class");
        if (!intervals) goto done;
        scratch.size = 0;
        for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(intervals) && !bad; k++) {
            PyObject *iv = own_tuple(PyTuple_GET_ITEM(intervals, k), 2, "an interval");
            if (!iv) {
                bad = 1;
                break;
            }
            int64_t lo = read_int(PyTuple_GET_ITEM(iv, 0), &bad), hi = read_int(PyTuple_GET_ITEM(iv, 1), &bad);
            Py_DECREF(iv);
            if (!bad && (lo > hi || hi >= INT64_MAX)) {
                PyErr_SetString(PyExc_ValueError, "an empty interval");
                bad = 1;
            }
            if (!bad && (vec_push(&scratch, lo) < 0 || vec_push(&scratch, hi) < 0)) bad = 1;
        }
        Py_DECREF(intervals);
        int fresh;
        if (bad || (class_of[p] = intern_get(&g.classes, scratch.data, scratch.size,
                                             hash_array(scratch.data, scratch.size), &fresh)) < 0)
            goto done;
        PyObject *targets = own_tuple(PyTuple_GET_ITEM(follow, p), -1, "a follow set");
        if (!targets || vec_push(&fstart, fitems.size) < 0) {
            Py_XDECREF(targets);
            goto done;
        }
        for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(targets); k++) {
            int64_t q = read_int(PyTuple_GET_ITEM(targets, k), &bad);
            if (!bad && (q < 0 || q >= npos)) {
                PyErr_SetString(PyExc_ValueError, "a follow position out of range");
                bad = 1;
            }
            if (bad || vec_push(&fitems, q) < 0 || fitems.size > MAX_ITEMS) {
                if (!bad && !PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "too many follow links");
                Py_DECREF(targets);
                goto done;
            }
        }
        Py_DECREF(targets);
    }
    if (vec_push(&fstart, fitems.size) < 0) goto done;
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(last); k++) {
        int64_t q = read_int(PyTuple_GET_ITEM(last, k), &bad);
        if (bad) goto done;
        if (q >= 0 && q < npos) is_last[q] = 1; /* (others are in no state) */
    }
    if (univ < 0 || univ >= npos) univ = -1;
    Py_ssize_t nclasses = intern_count(&g.classes);
    cstamp = alloc(nclasses, sizeof(int64_t));
    cslot = alloc(nclasses, sizeof(int64_t));
    g.flag = alloc(nclasses, 1);
    if (!cstamp || !cslot || !g.flag) {
        PyErr_NoMemory();
        goto done;
    }
    int fresh;
    int64_t zero = 0, ucount = 0, members = 1;
    if (intern_get(&states, &zero, 1, hash_array(&zero, 1), &fresh) < 0 || vec_push(&sub.row, 0) < 0) goto done;
    for (Py_ssize_t k = 0; k < intern_count(&states); k++) {
        if (!((k + 1) & 15) && tick(checkpoint) < 0) goto done;
        int64_t stamp = k + 1;
        /* The distinct followers of the state's positions, grouped by class. */
        gathered.size = local.size = 0;
        Py_ssize_t size = states.len.data[k];
        for (Py_ssize_t i = 0; i < size; i++) {
            int64_t p = intern_at(&states, k)[i]; /* (re-read: the arena does not move here) */
            for (int64_t f = fstart.data[p]; f < fstart.data[p + 1]; f++) {
                int64_t q = fitems.data[f];
                if (qstamp[q] == stamp) continue;
                qstamp[q] = stamp;
                if (vec_push(&gathered, q) < 0) goto done;
                int64_t c = class_of[q];
                if (cstamp[c] != stamp) {
                    cstamp[c] = stamp;
                    cslot[c] = local.size;
                    if (vec_push(&local, c) < 0) goto done;
                }
            }
        }
        Py_ssize_t nlocal = local.size;
        if (vec_reserve(&bstart, nlocal + 1) < 0 || vec_reserve(&bitems, gathered.size) < 0) goto done;
        memset(bstart.data, 0, (size_t)(nlocal + 1) * sizeof(int64_t));
        for (Py_ssize_t i = 0; i < gathered.size; i++) bstart.data[cslot[class_of[gathered.data[i]]] + 1]++;
        for (Py_ssize_t i = 0; i < nlocal; i++) bstart.data[i + 1] += bstart.data[i];
        for (Py_ssize_t i = 0; i < gathered.size; i++) {
            int64_t slot = cslot[class_of[gathered.data[i]]];
            bitems.data[bstart.data[slot]++] = gathered.data[i];
        }
        for (Py_ssize_t i = nlocal; i > 0; i--) bstart.data[i] = bstart.data[i - 1];
        bstart.data[0] = 0;
        /* The class set's segments (swept once per distinct set). */
        scratch.size = 0;
        if (vec_reserve(&scratch, nlocal) < 0) goto done;
        if (nlocal) memcpy(scratch.data, local.data, (size_t)nlocal * sizeof(int64_t));
        sort_i64(scratch.data, nlocal);
        Py_ssize_t set = intern_get(&g.classsets, scratch.data, nlocal, hash_array(scratch.data, nlocal), &fresh);
        if (set < 0 || (fresh && sweep(&g, set) < 0)) goto done;
        Py_ssize_t nact = intern_count(&g.actives);
        if (astamp.size < nact) {
            if (vec_reserve(&astamp, nact - astamp.size) < 0 || vec_reserve(&adst, nact - adst.size) < 0) goto done;
            memset(astamp.data + astamp.size, 0, (size_t)(nact - astamp.size) * sizeof(int64_t));
            astamp.size = adst.size = nact;
        }
        int64_t lo = 0, hi = 0, d = -1;
        for (int64_t sg = g.segfirst.data[set]; sg < g.segfirst.data[set] + g.segcount.data[set]; sg++) {
            int64_t a = g.segact.data[sg], dst;
            if (astamp.data[a] == stamp) {
                dst = adst.data[a];
            } else {
                /* The union of the active classes' followers. */
                ucount++;
                target.size = 0;
                const int64_t *act = intern_at(&g.actives, a);
                for (Py_ssize_t i = 0; i < g.actives.len.data[a]; i++) {
                    int64_t c = act[i];
                    if (cstamp[c] != stamp) continue;
                    for (int64_t b = bstart.data[cslot[c]]; b < bstart.data[cslot[c] + 1]; b++) {
                        int64_t q = bitems.data[b];
                        if (ustamp[q] == ucount) continue;
                        ustamp[q] = ucount;
                        if (vec_push(&target, q) < 0) goto done;
                    }
                }
                if (univ >= 0 && ustamp[univ] == ucount) {
                    target.data[0] = univ;
                    target.size = 1;
                }
                sort_i64(target.data, target.size);
                dst = intern_get(&states, target.data, target.size, hash_array(target.data, target.size), &fresh);
                if (dst < 0) goto done;
                if (fresh) {
                    members += target.size;
                    if (dst >= max_states || members > most) {
                        out = Py_None; /* over the state budget: the caller raises */
                        Py_INCREF(out);
                        goto done;
                    }
                }
                astamp.data[a] = stamp;
                adst.data[a] = dst;
            }
            /* (merge_row: adjacent ranges to one target joined) */
            if (d >= 0 && d == dst && hi + 1 == g.seglo.data[sg]) {
                hi = g.seghi.data[sg];
                continue;
            }
            if (d >= 0 && raw_edge(&sub, lo, hi, d) < 0) goto done;
            lo = g.seglo.data[sg];
            hi = g.seghi.data[sg];
            d = dst;
        }
        if ((d >= 0 && raw_edge(&sub, lo, hi, d) < 0) || vec_push(&sub.row, sub.lo.size) < 0) goto done;
    }
    sub.n = intern_count(&states);
    sub.start = 0;
    sub.acc = alloc(sub.n, 1);
    if (!sub.acc) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t k = 0; k < sub.n; k++)
        for (Py_ssize_t i = 0; i < states.len.data[k] && !sub.acc[k]; i++) sub.acc[k] = is_last[intern_at(&states, k)[i]];
    out = jm_regex_minimize(&sub, checkpoint);
done:
    Py_XDECREF(cs);
    Py_XDECREF(follow);
    Py_XDECREF(last);
    intern_free(&g.classes);
    intern_free(&g.classsets);
    intern_free(&g.actives);
    vec_free(&g.segfirst);
    vec_free(&g.segcount);
    vec_free(&g.seglo);
    vec_free(&g.seghi);
    vec_free(&g.segact);
    PyMem_Free(g.flag);
    intern_free(&states);
    raw_free(&sub);
    I64Vec *vecs[] = {&fstart, &fitems, &scratch, &gathered, &local, &bstart, &bitems, &astamp, &adst, &target};
    for (size_t i = 0; i < sizeof(vecs) / sizeof(vecs[0]); i++) vec_free(vecs[i]);
    PyMem_Free(class_of);
    PyMem_Free(qstamp);
    PyMem_Free(cstamp);
    PyMem_Free(cslot);
    PyMem_Free(ustamp);
    PyMem_Free(is_last);
    return out;
}
