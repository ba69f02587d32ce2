/* Stacks: the parse stacks' numbering and closures (boundary.Stacks in C).
 *
 * A stack is a pair (context, state); a context numbers a parse stack below its top
 * frame: its parent context (-1: none), the state in the parent's rule to return to,
 * its top rule, its depth, and whether it is near the nesting bound (its table then
 * leaves out the bytes into states that cannot finish within it). ``child`` numbers
 * contexts (a hash map from (parent, back, rule)), ``expand`` takes a stack's closure
 * (memoised; its pairs kept in one arena, and as a tuple once Python asks for one),
 * exactly as jsonmode.decoding.engine.boundary.Stacks does: the same numbers handed
 * out in the same order, the same closures in the same order.
 *
 * What stays in Python, called back: a rule's parts on first sight of the rule (its
 * table, crossing flags, read lists, calls, accepting flags), its headroom needs and
 * largest need (on first use: only stacks deep enough to be checked need them), the
 * bounded table of a rule near the bound (per rule and depth left), and whether a
 * depth is roomy (at most once per depth: the answer is monotone and memoised as the
 * two bounds ``safe_known`` and ``unroomy_from``).
 *
 * Thread-safety: one Stacks is shared by the threads of an engine. Every method runs
 * with the GIL held, and C code holding the GIL is atomic with respect to other Python
 * threads: only a callback into Python may let another thread (or the callback itself)
 * call into the same object meanwhile. So no pointer into a growable array is held
 * across a callback (contexts and closures are read by index after one), rule records
 * are allocated one by one (their addresses stay), and a context or closure is looked
 * up again after the callbacks and before it is added (a second computation of the
 * same one gives equal values; the first stored is kept). The module does not declare
 * itself free-threading safe, so a free-threaded CPython keeps the GIL on for it.
 *
 * A closure's loop calls jsonmode.budget.checkpoint every 64 stacks (the compile
 * deadline, where one runs), with the GIL held.
 *
 * No GC support: the callbacks (jsonmode's: functions of the reference matcher) must
 * not refer back to the Stacks, or the cycle is never collected.
 */
#include "native.h"

/* ------------------------------------------------------------------------------ */
/* The object                                                                       */

typedef struct {
    int loaded;          /* the parts below taken (rule_parts called) */
    PyObject *table;     /* the rule's flat int32 table (a buffer), held */
    Py_buffer view;      /* of table */
    Py_ssize_t states;   /* table entries / 256 */
    PyObject *flags;     /* bytes: crossing states */
    PyObject *reads;     /* the rule's read lists */
    PyObject *calls;     /* tuple: per state, a tuple of (callee, back) */
    PyObject *accepting; /* bytes */
    uint8_t *reading;    /* per state: 0 not known yet, 1 reads nothing, 2 reads a byte */
    int64_t most;        /* the largest finite need; -1: not asked yet */
    PyObject *need;      /* the needs by state (NULL: not asked yet) */
    Py_buffer need_view; /* of need, when it is a 1-D int64 buffer */
    int need_buffer;
} RuleRec;

typedef struct {
    RuleRec *rec;
    int64_t rule, parent, back, depth;
    int near;
    PyObject *returns; /* memo of returns(context), or NULL */
} Ctx;

typedef struct {
    Py_ssize_t start, count; /* pairs in the arena */
    PyObject *tuple;         /* made on first ask from Python */
} Closure;

typedef struct {
    PyObject_HEAD
    PyObject *rule_parts, *bounded, *roomy, *need, *most_of; /* callbacks */
    PyObject *checkpoint; /* jsonmode.budget.checkpoint */
    int levels;
    int64_t max_depth, safe_known, unroomy_from;
    Map3 recursive; /* (caller, callee, 0) of the calls that count, by levels */
    Map3 rule_index;
    RuleRec **recs;
    Py_ssize_t nrecs, caprecs;
    Ctx *ctx;
    Py_ssize_t nctx, capctx;
    Map3 children; /* (parent, back, rule) -> context */
    Map3 memo;     /* (context, state, 0) -> closure */
    Closure *closures;
    Py_ssize_t nclosures, capclosures;
    I64Vec arena;
    PyObject *tables, *crossings, *reads, *near; /* lists, per context */
    PyObject *numbers;                           /* dict: (lower, rule) -> context */
} StacksObject;

static int grow(void **data, Py_ssize_t *cap, Py_ssize_t need, size_t item) {
    if (need <= *cap) return 0;
    Py_ssize_t cap2 = *cap ? *cap : 16;
    while (cap2 < need) {
        if (cap2 > PY_SSIZE_T_MAX / 2 / (Py_ssize_t)item) {
            PyErr_NoMemory();
            return -1;
        }
        cap2 *= 2;
    }
    void *grown = PyMem_RawRealloc(*data, (size_t)cap2 * item);
    if (!grown) {
        PyErr_NoMemory();
        return -1;
    }
    *data = grown;
    *cap = cap2;
    return 0;
}

static void rec_free(RuleRec *r) {
    if (r->loaded) PyBuffer_Release(&r->view);
    Py_XDECREF(r->table);
    Py_XDECREF(r->flags);
    Py_XDECREF(r->reads);
    Py_XDECREF(r->calls);
    Py_XDECREF(r->accepting);
    if (r->need_buffer) PyBuffer_Release(&r->need_view);
    Py_XDECREF(r->need);
    PyMem_RawFree(r->reading);
    PyMem_RawFree(r);
}

static void Stacks_dealloc(StacksObject *self) {
    Py_XDECREF(self->rule_parts);
    Py_XDECREF(self->bounded);
    Py_XDECREF(self->roomy);
    Py_XDECREF(self->need);
    Py_XDECREF(self->most_of);
    Py_XDECREF(self->checkpoint);
    Py_XDECREF(self->tables);
    Py_XDECREF(self->crossings);
    Py_XDECREF(self->reads);
    Py_XDECREF(self->near);
    Py_XDECREF(self->numbers);
    for (Py_ssize_t i = 0; i < self->nrecs; i++) rec_free(self->recs[i]);
    PyMem_RawFree(self->recs);
    for (Py_ssize_t i = 0; i < self->nctx; i++) Py_XDECREF(self->ctx[i].returns);
    PyMem_RawFree(self->ctx);
    for (Py_ssize_t i = 0; i < self->nclosures; i++) Py_XDECREF(self->closures[i].tuple);
    PyMem_RawFree(self->closures);
    map_free(&self->recursive);
    map_free(&self->rule_index);
    map_free(&self->children);
    map_free(&self->memo);
    vec_free(&self->arena);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Stacks_init(StacksObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"rule_parts", "bounded", "roomy", "need", "most_of", "recursive",
                             "levels", "max_depth", "safe", NULL};
    PyObject *rule_parts, *bounded, *roomy, *need, *most_of, *recursive;
    int levels;
    long long max_depth, safe;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOOOpLL", kwlist, &rule_parts, &bounded, &roomy, &need, &most_of,
                                     &recursive, &levels, &max_depth, &safe))
        return -1;
    if (self->tables) {
        PyErr_SetString(PyExc_TypeError, "a Stacks is initialised once");
        return -1;
    }
    if (!PyCallable_Check(rule_parts) || !PyCallable_Check(bounded) || !PyCallable_Check(roomy) ||
        !PyCallable_Check(need) || !PyCallable_Check(most_of)) {
        PyErr_SetString(PyExc_TypeError, "rule_parts, bounded, roomy, need and most_of must be callable");
        return -1;
    }
    if (max_depth < 0 || max_depth > (1LL << 40) || safe < -(1LL << 40) || safe > max_depth) {
        PyErr_SetString(PyExc_ValueError, "max_depth or safe out of range");
        return -1;
    }
    PyObject *seq = PySequence_Fast(recursive, "recursive must be an iterable of (caller, callee)");
    if (!seq) return -1;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
        PyObject *edge = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyTuple_Check(edge) || PyTuple_GET_SIZE(edge) != 2) {
            Py_DECREF(seq);
            PyErr_SetString(PyExc_TypeError, "a recursive call is (caller, callee)");
            return -1;
        }
        int64_t a = as_i64(PyTuple_GET_ITEM(edge, 0)), b = as_i64(PyTuple_GET_ITEM(edge, 1));
        if (((a == -1 || b == -1) && PyErr_Occurred()) || map_put(&self->recursive, a, b, 0, 1) < 0) {
            Py_DECREF(seq);
            return -1;
        }
    }
    Py_DECREF(seq);
    PyObject *budget = PyImport_ImportModule("jsonmode.budget");
    if (!budget) return -1;
    self->checkpoint = PyObject_GetAttrString(budget, "checkpoint");
    Py_DECREF(budget);
    if (!self->checkpoint) return -1;
    self->tables = PyList_New(0);
    self->crossings = PyList_New(0);
    self->reads = PyList_New(0);
    self->near = PyList_New(0);
    self->numbers = PyDict_New();
    if (!self->tables || !self->crossings || !self->reads || !self->near || !self->numbers) return -1;
    Py_INCREF(rule_parts);
    Py_INCREF(bounded);
    Py_INCREF(roomy);
    Py_INCREF(need);
    Py_INCREF(most_of);
    self->rule_parts = rule_parts;
    self->bounded = bounded;
    self->roomy = roomy;
    self->need = need;
    self->most_of = most_of;
    self->levels = levels;
    self->max_depth = max_depth;
    self->safe_known = safe;
    self->unroomy_from = INT64_MAX;
    return 0;
}

static int ready(StacksObject *self) {
    if (!self->tables) {
        PyErr_SetString(PyExc_TypeError, "the Stacks was not initialised");
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------------ */
/* Rules, headroom                                                                  */

/* The record of ``rule`` (made empty on first sight; NULL + exception). */
static RuleRec *rule_rec(StacksObject *self, int64_t rule) {
    int64_t index;
    if (rule < 0) {
        PyErr_Format(PyExc_ValueError, "rule %lld out of range", (long long)rule);
        return NULL;
    }
    if (map_find(&self->rule_index, rule, 0, 0, &index)) return self->recs[index];
    if (grow((void **)&self->recs, &self->caprecs, self->nrecs + 1, sizeof(RuleRec *)) < 0) return NULL;
    RuleRec *r = PyMem_RawCalloc(1, sizeof(RuleRec));
    if (!r) {
        PyErr_NoMemory();
        return NULL;
    }
    r->most = -1;
    if (map_put(&self->rule_index, rule, 0, 0, self->nrecs) < 0) {
        PyMem_RawFree(r);
        return NULL;
    }
    self->recs[self->nrecs++] = r;
    return r;
}

/* The record of ``rule`` with its parts taken (rule_parts called on first sight). */
static RuleRec *rule_loaded(StacksObject *self, int64_t rule) {
    RuleRec *r = rule_rec(self, rule);
    if (!r || r->loaded) return r;
    PyObject *parts = PyObject_CallFunction(self->rule_parts, "L", (long long)rule);
    if (!parts) return NULL;
    if (r->loaded) { /* (taken meanwhile, by another thread or the callback itself) */
        Py_DECREF(parts);
        return r;
    }
    if (!PyTuple_Check(parts) || PyTuple_GET_SIZE(parts) != 5) {
        Py_DECREF(parts);
        PyErr_SetString(PyExc_TypeError, "rule_parts must return (table, flags, reads, calls, accepting)");
        return NULL;
    }
    PyObject *table = PyTuple_GET_ITEM(parts, 0), *flags = PyTuple_GET_ITEM(parts, 1);
    PyObject *calls = PyTuple_GET_ITEM(parts, 3), *accepting = PyTuple_GET_ITEM(parts, 4);
    Py_buffer view;
    if (PyObject_GetBuffer(table, &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        Py_DECREF(parts);
        return NULL;
    }
    Py_ssize_t states = view.len / 1024;
    const char *why = NULL;
    if (view.itemsize != 4 || !jm_is_int32(view.format) || view.len % 1024)
        why = "a rule table must be int32, 256 entries a state";
    else if (states < 1)
        why = "a rule has a state 0";
    else if (!PyBytes_Check(flags) || !PyBytes_Check(accepting) || !PyTuple_Check(calls))
        why = "a rule's flags and accepting must be bytes, its calls a tuple";
    else if (PyBytes_GET_SIZE(flags) != states || PyBytes_GET_SIZE(accepting) != states ||
             PyTuple_GET_SIZE(calls) != states)
        why = "a rule's flags, calls and accepting must have one item per state";
    uint8_t *reading = why ? NULL : PyMem_RawCalloc((size_t)(states ? states : 1), 1);
    if (why || !reading) {
        PyBuffer_Release(&view);
        Py_DECREF(parts);
        if (why)
            PyErr_SetString(PyExc_ValueError, why);
        else
            PyErr_NoMemory();
        return NULL;
    }
    r->view = view;
    r->states = states;
    r->reading = reading;
    r->table = Py_NewRef(table);
    r->flags = Py_NewRef(flags);
    r->reads = Py_NewRef(PyTuple_GET_ITEM(parts, 2));
    r->calls = Py_NewRef(calls);
    r->accepting = Py_NewRef(accepting);
    r->loaded = 1;
    Py_DECREF(parts);
    return r;
}

/* Whether ``state`` of the rule reads a byte (its row has a transition). */
static int reads_a_byte(RuleRec *r, int64_t state) {
    if (!r->reading[state]) {
        const int32_t *row = (const int32_t *)r->view.buf + state * 256;
        int any = 0;
        for (int b = 0; b < 256; b++) any |= row[b] >= 0;
        r->reading[state] = any ? 2 : 1;
    }
    return r->reading[state] == 2;
}

/* Whether every stack ``depth`` deep is viable whatever its states (the reference's
 * roomy: monotone in depth, asked of Python once per depth at most); -1 on error. */
static int roomy(StacksObject *self, int64_t depth) {
    if (depth <= self->safe_known) return 1;
    if (depth >= self->unroomy_from) return 0;
    PyObject *answer = PyObject_CallFunction(self->roomy, "L", (long long)depth);
    if (!answer) return -1;
    int yes = PyObject_IsTrue(answer);
    Py_DECREF(answer);
    if (yes > 0 && depth > self->safe_known) self->safe_known = depth;
    if (yes == 0 && depth < self->unroomy_from) self->unroomy_from = depth;
    return yes;
}

/* The least depth ``state`` of the rule needs to finish (headroom.need), in *out. */
static int need_of(StacksObject *self, int64_t rule, int64_t state, int64_t *out) {
    RuleRec *r = rule_rec(self, rule);
    if (!r) return -1;
    if (!r->need) {
        PyObject *need = PyObject_CallFunction(self->need, "L", (long long)rule);
        if (!need) return -1;
        if (r->need) { /* (taken meanwhile) */
            Py_DECREF(need);
        } else {
            r->need = need;
            if (PyObject_CheckBuffer(need)) {
                if (PyObject_GetBuffer(need, &r->need_view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
                if (r->need_view.itemsize == 8 && jm_is_int64(r->need_view.format) && r->need_view.ndim <= 1)
                    r->need_buffer = 1;
                else
                    PyBuffer_Release(&r->need_view);
            }
        }
    }
    if (r->need_buffer) {
        if (state < 0 || state >= r->need_view.len / 8) {
            PyErr_Format(PyExc_ValueError, "state %lld has no need", (long long)state);
            return -1;
        }
        *out = ((const int64_t *)r->need_view.buf)[state];
        return 0;
    }
    PyObject *index = PyLong_FromLongLong(state); /* (not a buffer: asked item by item) */
    if (!index) return -1;
    PyObject *value = PyObject_GetItem(r->need, index);
    Py_DECREF(index);
    if (!value) return -1;
    *out = as_i64(value);
    Py_DECREF(value);
    return *out == -1 && PyErr_Occurred() ? -1 : 0;
}

static int most_of(StacksObject *self, int64_t rule, int64_t *out) {
    RuleRec *r = rule_rec(self, rule);
    if (!r) return -1;
    if (r->most < 0) {
        PyObject *most = PyObject_CallFunction(self->most_of, "L", (long long)rule);
        if (!most) return -1;
        int64_t value = as_i64(most);
        Py_DECREF(most);
        if (value == -1 && PyErr_Occurred()) return -1;
        if (value < 0 || value > (1LL << 40)) {
            PyErr_SetString(PyExc_ValueError, "most_of out of range");
            return -1;
        }
        r->most = value;
    }
    *out = r->most;
    return 0;
}

static inline int64_t weight(StacksObject *self, int64_t caller, int64_t callee) {
    int64_t found;
    if (!self->levels) return 1;
    return map_find(&self->recursive, caller, callee, 0, &found) ? 1 : 0;
}

/* ------------------------------------------------------------------------------ */
/* Numbering                                                                        */

/* The context of ``rule`` called from ``parent`` (-1: none), to return to ``back``
 * (Stacks._child); -1 with an exception on error. */
static int64_t child(StacksObject *self, int64_t parent, int64_t back, int64_t rule) {
    int64_t known;
    if (map_find(&self->children, parent, back, rule, &known)) return known;
    if (parent < -1 || parent >= self->nctx) {
        PyErr_Format(PyExc_ValueError, "context %lld out of range", (long long)parent);
        return -1;
    }
    if (parent >= 0 ? back < 0 || back >= self->ctx[parent].rec->states : back != -1) {
        PyErr_Format(PyExc_ValueError, "return state %lld out of range", (long long)back);
        return -1;
    }
    RuleRec *r = rule_loaded(self, rule);
    if (!r) return -1;
    int64_t depth;
    if (self->levels) {
        int64_t caller = parent >= 0 ? self->ctx[parent].rule : -1;
        depth = (parent >= 0 ? self->ctx[parent].depth : 0) + weight(self, caller, rule);
    } else {
        depth = parent >= 0 ? self->ctx[parent].depth + 1 : 1;
    }
    int spare = roomy(self, depth);
    if (spare < 0) return -1;
    int near = !spare;
    if (near) {
        int64_t most;
        if (most_of(self, rule, &most) < 0) return -1;
        near = depth + most > self->max_depth;
    }
    PyObject *table = Py_NewRef(r->table), *reads = Py_NewRef(r->reads);
    if (near) {
        PyObject *pair = PyObject_CallFunction(self->bounded, "LL", (long long)rule, (long long)(self->max_depth - depth));
        if (!pair || !PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            if (pair) PyErr_SetString(PyExc_TypeError, "bounded must return (table, reads)");
            Py_XDECREF(pair);
            Py_DECREF(table);
            Py_DECREF(reads);
            return -1;
        }
        Py_SETREF(table, Py_NewRef(PyTuple_GET_ITEM(pair, 0)));
        Py_SETREF(reads, Py_NewRef(PyTuple_GET_ITEM(pair, 1)));
        Py_DECREF(pair);
    }
    int64_t result = -1;
    if (map_find(&self->children, parent, back, rule, &known)) { /* (numbered meanwhile) */
        result = known;
        goto done;
    }
    if (grow((void **)&self->ctx, &self->capctx, self->nctx + 1, sizeof(Ctx)) < 0) goto done;
    Py_ssize_t before = PyList_GET_SIZE(self->tables);
    if (before != self->nctx || PyList_GET_SIZE(self->crossings) != before || PyList_GET_SIZE(self->reads) != before ||
        PyList_GET_SIZE(self->near) != before) {
        PyErr_SetString(PyExc_ValueError, "the Stacks' lists were changed from outside");
        goto done;
    }
    if (PyList_Append(self->tables, table) < 0 || PyList_Append(self->crossings, r->flags) < 0 ||
        PyList_Append(self->reads, reads) < 0 || PyList_Append(self->near, near ? Py_True : Py_False) < 0 ||
        map_put(&self->children, parent, back, rule, self->nctx) < 0) {
        /* (the lists back to their length: the context is not made) */
        PyObject *lists[4] = {self->tables, self->crossings, self->reads, self->near};
        PyObject *type, *value, *trace;
        PyErr_Fetch(&type, &value, &trace);
        for (int i = 0; i < 4; i++)
            if (PyList_GET_SIZE(lists[i]) > before) PyList_SetSlice(lists[i], before, PY_SSIZE_T_MAX, NULL);
        PyErr_Restore(type, value, trace);
        goto done;
    }
    self->ctx[self->nctx] = (Ctx){r, rule, parent, back, depth, near, NULL};
    result = self->nctx++;
done:
    Py_DECREF(table);
    Py_DECREF(reads);
    return result;
}

/* ------------------------------------------------------------------------------ */
/* Closures                                                                         */

static inline int push2(I64Vec *v, int64_t a, int64_t b) {
    if (vec_reserve(v, 2) < 0) return -1;
    v->data[v->size++] = a;
    v->data[v->size++] = b;
    return 0;
}

/* The closure of (context, state) as its index in self->closures (Stacks.expand);
 * -1 with an exception on error. */
static Py_ssize_t closure(StacksObject *self, int64_t context, int64_t state) {
    int64_t known;
    if (map_find(&self->memo, context, state, 0, &known)) return (Py_ssize_t)known;
    if (context < -1 || context >= self->nctx) {
        PyErr_Format(PyExc_ValueError, "context %lld out of range", (long long)context);
        return -1;
    }
    if (context >= 0 && (state < 0 || state >= self->ctx[context].rec->states)) {
        PyErr_Format(PyExc_ValueError, "state %lld out of range", (long long)state);
        return -1;
    }
    I64Vec work = {0}, closed = {0};
    Map3 seen = {0};
    Py_ssize_t result = -1;
    if (push2(&work, context, state) < 0) goto done;
    Py_ssize_t rounds = 0;
    while (work.size) {
        /* (A hostile grammar's closure may be long: the compile deadline holds.) */
        if (++rounds % 64 == 0) {
            PyObject *none = PyObject_CallNoArgs(self->checkpoint);
            if (!none) goto done;
            Py_DECREF(none);
        }
        work.size -= 2;
        int64_t here = work.data[work.size], at = work.data[work.size + 1];
        if (map_find(&seen, here, at, 0, &known)) continue;
        if (map_put(&seen, here, at, 0, 1) < 0) goto done;
        if (here < 0) {
            if (push2(&closed, here, at) < 0) goto done;
            continue;
        }
        /* (Read by index: a callback below may grow self->ctx.) */
        RuleRec *r = self->ctx[here].rec;
        int64_t rule = self->ctx[here].rule, depth = self->ctx[here].depth;
        if (reads_a_byte(r, at) && push2(&closed, here, at) < 0) goto done;
        int spare = roomy(self, depth + 1);
        if (spare < 0) goto done;
        PyObject *calls = Py_NewRef(PyTuple_GET_ITEM(r->calls, at));
        if (!PyTuple_Check(calls)) {
            Py_DECREF(calls);
            PyErr_SetString(PyExc_TypeError, "a state's calls must be a tuple");
            goto done;
        }
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(calls); i++) {
            PyObject *call = PyTuple_GET_ITEM(calls, i);
            int64_t callee, back, pushed = -1, need, need_back;
            if (!PyTuple_Check(call) || PyTuple_GET_SIZE(call) != 2) {
                PyErr_SetString(PyExc_TypeError, "a call is (callee, return state)");
                goto fail_calls;
            }
            callee = as_i64(PyTuple_GET_ITEM(call, 0));
            back = as_i64(PyTuple_GET_ITEM(call, 1));
            if ((callee == -1 || back == -1) && PyErr_Occurred()) goto fail_calls;
            if (back != -1 && (back < 0 || back >= r->states)) { /* (-1: TAIL) */
                PyErr_Format(PyExc_ValueError, "return state %lld out of range", (long long)back);
                goto fail_calls;
            }
            /* (Only a stack that can finish within the limit: see
             * jsonmode.decoding.automata.headroom.) */
            if (back == -1) { /* a tail call: the callee replaces the frame */
                int ok = spare;
                if (!ok) {
                    if (need_of(self, callee, 0, &need) < 0) goto fail_calls;
                    ok = depth + need <= self->max_depth;
                }
                if (ok) pushed = child(self, self->ctx[here].parent, self->ctx[here].back, callee);
                else continue;
            } else {
                int ok = spare;
                if (!ok) {
                    if (need_of(self, callee, 0, &need) < 0) goto fail_calls;
                    ok = depth + weight(self, rule, callee) + need <= self->max_depth;
                    if (ok) {
                        if (need_of(self, rule, back, &need_back) < 0) goto fail_calls;
                        ok = depth + need_back <= self->max_depth;
                    }
                }
                if (ok) pushed = child(self, here, back, callee);
                else continue;
            }
            if (pushed < 0 || push2(&work, pushed, 0) < 0) goto fail_calls;
        }
        Py_DECREF(calls);
        if (PyBytes_AS_STRING(r->accepting)[at]) {
            int64_t parent = self->ctx[here].parent;
            if (push2(&work, parent, parent >= 0 ? self->ctx[here].back : 0) < 0) goto done;
        }
        continue;
    fail_calls:
        Py_DECREF(calls);
        goto done;
    }
    if (map_find(&self->memo, context, state, 0, &known)) { /* (taken meanwhile: equal) */
        result = (Py_ssize_t)known;
        goto done;
    }
    if (grow((void **)&self->closures, &self->capclosures, self->nclosures + 1, sizeof(Closure)) < 0) goto done;
    Py_ssize_t start = self->arena.size;
    if (vec_reserve(&self->arena, closed.size) < 0) goto done;
    if (closed.size) memcpy(self->arena.data + start, closed.data, (size_t)closed.size * sizeof(int64_t));
    if (map_put(&self->memo, context, state, 0, self->nclosures) < 0) goto done;
    self->arena.size += closed.size;
    self->closures[self->nclosures] = (Closure){start, closed.size / 2, NULL};
    result = self->nclosures++;
done:
    vec_free(&work);
    vec_free(&closed);
    map_free(&seen);
    return result;
}

/* The pairs of ``closure`` (C walks: see push_expanded in native.h). */
int jm_stacks_push(PyObject *stacks, int64_t context, int64_t state, I64Vec *out, int64_t node, int with_node) {
    StacksObject *self = (StacksObject *)stacks;
    if (ready(self) < 0) return -1;
    Py_ssize_t index = closure(self, context, state);
    if (index < 0) return -1;
    Py_ssize_t start = self->closures[index].start, count = self->closures[index].count;
    if (vec_reserve(out, count * (with_node ? 3 : 2)) < 0) return -1;
    const int64_t *pairs = self->arena.data + start;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (with_node) out->data[out->size++] = node;
        out->data[out->size++] = pairs[2 * i];
        out->data[out->size++] = pairs[2 * i + 1];
    }
    return 0;
}

static PyObject *pair_tuple(int64_t context, int64_t state) {
    return Py_BuildValue("(LL)", (long long)context, (long long)state);
}

/* A tuple of the closure's pairs, less (skip_c, skip_s) and, with ``readers``, those of
 * context -1. */
static PyObject *pairs_tuple(StacksObject *self, Py_ssize_t index, int readers, int64_t skip_c, int64_t skip_s) {
    Py_ssize_t start = self->closures[index].start, count = self->closures[index].count, kept = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t c = self->arena.data[start + 2 * i], s = self->arena.data[start + 2 * i + 1];
        kept += !(readers && (c < 0 || (c == skip_c && s == skip_s)));
    }
    PyObject *out = PyTuple_New(kept);
    if (!out) return NULL;
    for (Py_ssize_t i = 0, k = 0; i < count; i++) {
        int64_t c = self->arena.data[start + 2 * i], s = self->arena.data[start + 2 * i + 1];
        if (readers && (c < 0 || (c == skip_c && s == skip_s))) continue;
        PyObject *pair = pair_tuple(c, s);
        if (!pair) {
            Py_DECREF(out);
            return NULL;
        }
        PyTuple_SET_ITEM(out, k++, pair);
    }
    return out;
}

static int parse_pair(PyObject *args, int64_t *context, int64_t *state) {
    long long c, s;
    if (!PyArg_ParseTuple(args, "LL", &c, &s)) return -1;
    *context = c;
    *state = s;
    return 0;
}

static PyObject *Stacks_expand(StacksObject *self, PyObject *args) {
    int64_t context, state;
    if (ready(self) < 0 || parse_pair(args, &context, &state) < 0) return NULL;
    Py_ssize_t index = closure(self, context, state);
    if (index < 0) return NULL;
    Closure *c = &self->closures[index];
    if (!c->tuple) {
        PyObject *made = pairs_tuple(self, index, 0, 0, 0);
        if (!made) return NULL;
        c = &self->closures[index];
        if (!c->tuple) c->tuple = made; /* (no callback between: still unset) */
        else Py_DECREF(made);
    }
    return Py_NewRef(c->tuple);
}

static PyObject *Stacks_call(StacksObject *self, PyObject *args, PyObject *kwds) {
    if (kwds && PyDict_GET_SIZE(kwds)) {
        PyErr_SetString(PyExc_TypeError, "a Stacks is called with (context, state)");
        return NULL;
    }
    return Stacks_expand(self, args);
}

static PyObject *Stacks_readers(StacksObject *self, PyObject *args) {
    int64_t context, state;
    if (ready(self) < 0 || parse_pair(args, &context, &state) < 0) return NULL;
    Py_ssize_t index = closure(self, context, state);
    return index < 0 ? NULL : pairs_tuple(self, index, 1, context, state);
}

static PyObject *Stacks_returns(StacksObject *self, PyObject *arg) {
    if (ready(self) < 0) return NULL;
    int64_t context = as_i64(arg);
    if (context == -1 && PyErr_Occurred()) return NULL;
    if (context < 0 || context >= self->nctx) {
        PyErr_Format(PyExc_ValueError, "context %lld out of range", (long long)context);
        return NULL;
    }
    if (self->ctx[context].returns) return Py_NewRef(self->ctx[context].returns);
    int64_t parent = self->ctx[context].parent;
    PyObject *made;
    if (parent >= 0) {
        Py_ssize_t index = closure(self, parent, self->ctx[context].back);
        if (index < 0) return NULL;
        made = pairs_tuple(self, index, 1, INT64_MIN, INT64_MIN);
    } else {
        made = PyTuple_New(0);
    }
    if (!made) return NULL;
    if (!self->ctx[context].returns) self->ctx[context].returns = Py_NewRef(made);
    return made;
}

/* The frame ``lower[index]`` as (rule, state); -1 with an exception. */
static int frame_at(PyObject *lower, Py_ssize_t index, int64_t *rule, int64_t *state) {
    PyObject *frame = PyTuple_GET_ITEM(lower, index);
    if (!PyTuple_Check(frame) || PyTuple_GET_SIZE(frame) != 2) {
        PyErr_SetString(PyExc_TypeError, "a frame is (rule, state)");
        return -1;
    }
    *rule = as_i64(PyTuple_GET_ITEM(frame, 0));
    *state = as_i64(PyTuple_GET_ITEM(frame, 1));
    return (*rule == -1 || *state == -1) && PyErr_Occurred() ? -1 : 0;
}

/* The key (lower[:depth], rule of that level) of the numbers dict (a new reference). */
static PyObject *number_key(PyObject *lower, Py_ssize_t depth, int64_t rule) {
    PyObject *prefix = PyTuple_GetSlice(lower, 0, depth), *number = PyLong_FromLongLong(rule);
    PyObject *key = prefix && number ? PyTuple_Pack(2, prefix, number) : NULL;
    Py_XDECREF(prefix);
    Py_XDECREF(number);
    return key;
}

/* context(lower, rule): Stacks.context, without recursion: the longest numbered prefix
 * looked up, then the contexts above it numbered bottom-up (the Python form's order). */
static PyObject *Stacks_context(StacksObject *self, PyObject *args) {
    PyObject *lower;
    long long top;
    if (ready(self) < 0 || !PyArg_ParseTuple(args, "O!L", &PyTuple_Type, &lower, &top)) return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(lower), level = n;
    int64_t context = -1, rule = top, back = -1, ignored;
    for (Py_ssize_t k = 0; k < n; k++) /* (frames checked before any is numbered) */
        if (frame_at(lower, k, &rule, &ignored) < 0) return NULL;
    for (;; level--) { /* the longest prefix numbered already */
        if (level < n && frame_at(lower, level, &rule, &ignored) < 0) return NULL;
        if (level == n) rule = top;
        PyObject *key = number_key(lower, level, rule);
        if (!key) return NULL;
        PyObject *found = PyDict_GetItemWithError(self->numbers, key);
        Py_DECREF(key);
        if (found) {
            context = as_i64(found);
            if (context == -1 && PyErr_Occurred()) return NULL;
            break;
        }
        if (PyErr_Occurred()) return NULL;
        if (level == 0) {
            level = -1;
            break;
        }
    }
    for (Py_ssize_t k = level + 1; k <= n; k++) {
        if (k < n && frame_at(lower, k, &rule, &ignored) < 0) return NULL;
        if (k == n) rule = top;
        if (k > 0 && frame_at(lower, k - 1, &ignored, &back) < 0) return NULL;
        context = child(self, k > 0 ? context : -1, k > 0 ? back : -1, rule);
        if (context < 0) return NULL;
        PyObject *key = number_key(lower, k, rule), *value = PyLong_FromLongLong(context);
        int failed = !key || !value || PyDict_SetItem(self->numbers, key, value) < 0;
        Py_XDECREF(key);
        Py_XDECREF(value);
        if (failed) return NULL;
    }
    return PyLong_FromLongLong(context);
}

static PyObject *Stacks_stack(StacksObject *self, PyObject *args) {
    int64_t context, state;
    if (ready(self) < 0 || parse_pair(args, &context, &state) < 0) return NULL;
    if (context < -1 || context >= self->nctx) {
        PyErr_Format(PyExc_ValueError, "context %lld out of range", (long long)context);
        return NULL;
    }
    Py_ssize_t frames = 0;
    for (int64_t c = context; c >= 0; c = self->ctx[c].parent) frames++;
    PyObject *out = PyTuple_New(frames);
    if (!out) return NULL;
    for (Py_ssize_t k = frames - 1; k >= 0; k--) {
        PyObject *frame = pair_tuple(self->ctx[context].rule, state);
        if (!frame) {
            Py_DECREF(out);
            return NULL;
        }
        PyTuple_SET_ITEM(out, k, frame);
        state = self->ctx[context].back;
        context = self->ctx[context].parent;
    }
    return out;
}

static PyObject *Stacks_size(StacksObject *self, void *unused) {
    (void)unused;
    return PyLong_FromSsize_t(self->nctx + self->nclosures);
}

static PyObject *Stacks_list(StacksObject *self, void *which) {
    PyObject *lists[4] = {self->tables, self->crossings, self->reads, self->near};
    PyObject *list = lists[(intptr_t)which];
    if (!list) {
        ready(self);
        return NULL;
    }
    return Py_NewRef(list);
}

static PyMethodDef Stacks_methods[] = {
    {"context", (PyCFunction)Stacks_context, METH_VARARGS,
     "context(lower, rule) -> int\n\nThe number of the context of a stack (*lower, (rule, state))."},
    {"expand", (PyCFunction)Stacks_expand, METH_VARARGS,
     "expand(context, state) -> tuple[(int, int), ...]\n\nThe stack's closure (Stacks.expand), memoised."},
    {"readers", (PyCFunction)Stacks_readers, METH_VARARGS,
     "readers(context, state) -> tuple\n\nThe closure less the stack itself and the end of the document."},
    {"returns", (PyCFunction)Stacks_returns, METH_O,
     "returns(context) -> tuple\n\nThe parent's stack closed, the end of the document left out (memoised)."},
    {"stack", (PyCFunction)Stacks_stack, METH_VARARGS,
     "stack(context, state) -> tuple\n\nThe frames the pair stands for (): the end of the document)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Stacks_getset[] = {
    {"size", (getter)Stacks_size, NULL, "Contexts numbered and closures memoised so far.", NULL},
    {"tables", (getter)Stacks_list, NULL, "Per context, its (maybe bounded) flat table.", (void *)0},
    {"crossings", (getter)Stacks_list, NULL, "Per context, its rule's crossing flags (bytes).", (void *)1},
    {"reads", (getter)Stacks_list, NULL, "Per context, its read lists.", (void *)2},
    {"near", (getter)Stacks_list, NULL, "Per context, whether it is near the nesting bound.", (void *)3},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject jm_StacksType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "jsonmode._native.Stacks",
    .tp_basicsize = sizeof(StacksObject),
    .tp_dealloc = (destructor)Stacks_dealloc,
    .tp_call = (ternaryfunc)Stacks_call,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Stacks(rule_parts, bounded, roomy, need, most_of, recursive, levels, max_depth, safe)\n\n"
              "jsonmode.decoding.engine.boundary.Stacks's numbering and closures in C; calling it\n"
              "is expand. The C walks (Trie.walk_stacks, finish) given one as ``expand`` take its\n"
              "closures directly.",
    .tp_methods = Stacks_methods,
    .tp_getset = Stacks_getset,
    .tp_init = (initproc)Stacks_init,
    .tp_new = PyType_GenericNew,
};
